// Reading user files in a helper process first: see untrusted_file.hpp.
#include "formats/untrusted_file.hpp"
#include "formats/between_reads_hook.hpp"
#include "formats/field_reader.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>


extern char** environ;

namespace aimcemu {

namespace {

std::mutex helper_mutex;
std::string& helper_path() {
    static std::string path;
    return path;
}

// set_check_time_limit_for_tests's limit (0: none).
std::atomic<int> time_limit_for_tests_ms{0};

// The helper may take as long as a slow disk needs to read the files, plus start-up.
int time_limit_ms(const std::vector<std::string>& paths) {
    if (const int for_tests = time_limit_for_tests_ms.load()) return for_tests;
    double bytes = 0.0;
    for (const auto& path : paths) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0) bytes += double(st.st_size);
    }
    return int(std::min(3600.0, 120.0 + 0.05 * double(paths.size()) + bytes / 5e6) * 1000.0);
}

// One file's report from the helper, framed by helper_report_record (untrusted_file.hpp): "ok" (for
// a model whose weights it handed over: "ok\n" DETAIL), or "format-error\n" SOURCE \0 FIELD \0
// WHAT, or "error\n" WHAT.

// The reports whole at the start of `text`, unframed; stops at the first one not yet whole (or not
// well framed: a helper that died mid-write, or one that is not ours).
std::vector<std::string> whole_reports(std::string_view text) {
    std::vector<std::string> reports;
    for (std::size_t at = 0;;) {
        const auto colon = text.find(':', at);
        if (colon == std::string_view::npos || colon == at || colon - at > 9) break;
        std::size_t length = 0;
        for (std::size_t i = at; i < colon; ++i) {
            if (text[i] < '0' || text[i] > '9') return reports;
            length = length * 10 + std::size_t(text[i] - '0');
        }
        if (text.size() - colon - 1 < length + 1 || text[colon + 1 + length] != ',') break;
        reports.emplace_back(text.substr(colon + 1, length));
        at = colon + 1 + length + 1;
    }
    return reports;
}

// One file's outcome: its error, or none and what the helper added to its "ok".
struct FileReport {
    std::optional<FormatError> error;
    std::string detail;
};

FileReport report_of(const std::string& record, const std::string& path) {
    if (record == "ok") return {};
    if (record.rfind("ok\n", 0) == 0) return {std::nullopt, record.substr(3)};
    if (record.rfind("format-error\n", 0) == 0) {
        std::vector<std::string> parts;
        const std::string rest = record.substr(std::strlen("format-error\n"));
        for (std::size_t start = 0;;) {
            const auto end = rest.find('\0', start);
            parts.push_back(rest.substr(start, end == std::string::npos ? std::string::npos : end - start));
            if (end == std::string::npos) break;
            start = end + 1;
        }
        if (parts.size() == 3) return {FormatError(parts[0], parts[1], parts[2]), {}};
    }
    return {FormatError(path, "file", "cannot be read: " + record.substr(record.find('\n') + 1)), {}};
}


// A started helper: its process and our end of the socket that is its stdin and stdout.
struct HelperProcess {
    pid_t pid = -1;
    int channel = -1;
};

// Starts `helper` with `args`; `handover` (>= 0) becomes its file descriptor 3 and `files[i]` its
// descriptor kHelperFirstFileFd + i (every one of them is >= 10: no duplication overwrites another's
// source).  Throws FormatError naming `first` when it cannot be started.
HelperProcess spawn_helper(const std::string& helper, const std::vector<std::string>& args, int handover,
                           const std::string& first, const std::vector<int>& files = {}) {
    // The helper's descriptors are made by dup2, one after another: a source among the numbers they
    // go to would be overwritten before its own turn (a source numbered 10 or more is below the
    // last of 128 targets; another thread's close() may have freed any number).  Such sources are
    // first copied above every target; the copies close when this function returns.
    const int first_above_targets = kHelperFirstFileFd + int(files.size());
    std::vector<int> sources = files;
    std::vector<FileDescriptor> lifted;
    lifted.reserve(files.size());
    for (int& source : sources) {
        if (source < kHelperHandoverFd || source >= first_above_targets) continue;
        lifted.emplace_back(::fcntl(source, F_DUPFD_CLOEXEC, first_above_targets));
        if (!lifted.back()) throw FormatError(first, "file", std::string("cannot start the file check: ") + std::strerror(errno));
        source = lifted.back().get();
    }
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
        throw FormatError(first, "file", "cannot start the file check: socketpair failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, ends[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    if (handover >= 0) posix_spawn_file_actions_adddup2(&actions, handover, kHelperHandoverFd);
    for (std::size_t i = 0; i < sources.size(); ++i)
        posix_spawn_file_actions_adddup2(&actions, sources[i], kHelperFirstFileFd + int(i));
    std::vector<char*> argv{const_cast<char*>(helper.c_str())};
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    HelperProcess process;
    const int spawned = ::posix_spawn(&process.pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(ends[1]);
    if (spawned != 0) {
        ::close(ends[0]);
        throw FormatError(first, "file", "cannot start the file check " + helper + ": " + std::strerror(spawned));
    }
    process.channel = ends[0];
    return process;
}

// Waits for a helper that has ended or was killed; its wait status (0 when another wait took it).
int wait_for(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

// What a helper said about `paths`, read from `channel` until the end of its output or, with
// `records` > 0, until that many reports came whole; `timed_out` when the time limit passed first.
struct Output {
    std::string text;
    bool timed_out = false;
};

Output read_reports(int channel, const std::vector<std::string>& paths, std::size_t records = 0) {
    Output out;
    std::size_t whole = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(time_limit_ms(paths));
    for (char buffer[4096];;) {
        if (records > 0 && whole >= records) break;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{channel, POLLIN, 0};
        const int ready = left.count() > 0 ? ::poll(&p, 1, int(left.count())) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            out.timed_out = true;
            break;
        }
        const ssize_t n = ::read(channel, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out.text.size() < (std::size_t(64) << 20)) out.text.append(buffer, std::size_t(n));
        if (records > 0) whole = whole_reports(out.text).size();
    }
    return out;
}

// Each file's report, in order.  With every report whole and the helper `finished` well, they are
// returned as they are.  A helper that finished well after reporting a file it refused stopped there
// (check_file.cpp: a refused file may leave libhdf5's state damaged); else a crash (wait `status`) or
// the time limit is blamed on the file the helper had not finished.  Either way the files after the
// one it stopped at were not read, and say so.
std::vector<FileReport> reports_of(const Output& out, const std::vector<std::string>& paths, bool finished, int status) {
    std::vector<FileReport> reports;
    for (const std::string& report : whole_reports(out.text)) {
        if (reports.size() == paths.size()) break;
        reports.push_back(report_of(report, paths[reports.size()]));
    }
    if (reports.size() == paths.size() && finished) return reports;
    const bool stopped_at_refusal = finished && !reports.empty() && reports.back().error;
    if (!stopped_at_refusal) {
        const std::size_t stopped = std::min(reports.size(), paths.size() - 1);
        const std::string& culprit = paths[stopped];
        const std::string how = WIFSIGNALED(status) ? std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                                          ::strsignal(WTERMSIG(status)) + ")"
                                                    : "exit status " + std::to_string(WEXITSTATUS(status));
        reports.resize(stopped);
        reports.push_back({out.timed_out ? FormatError(culprit, "file", "reading it did not finish within the time limit (a "
                                                                        "corrupt file can make the HDF5 library loop); the file is not used")
                                         : FormatError(culprit, "file", "corrupt: reading it crashed the HDF5 library in the "
                                                                        "checking process (" + how + "); the file is not used"),
                           {}});
    }
    const std::string& culprit = paths[reports.size() - 1];
    while (reports.size() < paths.size())
        reports.push_back({FormatError(paths[reports.size()], "file",
                                       "not checked: the checking process stopped at an earlier file (" + culprit + ")"),
                           {}});
    return reports;
}

// Runs a fresh helper on one batch and waits for it to end; returns each file's report, in order
// (no error: the helper read it).  `kind_arg` is the helper's KIND argument; `handover` (>= 0)
// becomes the helper's file descriptor 3.  With `files` (one opened file per path), the helper reads
// those (--fds) instead of opening the paths.  Throws only when the helper cannot be started.
std::vector<FileReport> run_batch(const std::string& helper, const std::string& kind_arg,
                                  const std::vector<std::string>& paths, int handover = -1,
                                  const std::vector<int>& files = {}) {
    std::vector<std::string> args;
    if (!files.empty()) args.push_back("--fds");
    args.push_back(kind_arg);
    args.insert(args.end(), paths.begin(), paths.end());
    const HelperProcess process = spawn_helper(helper, args, handover, paths.front(), files);
    const Output out = read_reports(process.channel, paths);
    ::close(process.channel);
    if (out.timed_out) ::kill(process.pid, SIGKILL);
    const int status = wait_for(process.pid);
    return reports_of(out, paths, WIFEXITED(status) && WEXITSTATUS(status) == 0, status);
}

// Each file's report, every file read by a checking process once: a fresh process per batch, and
// after a file that failed (the process stopped at it, died on it or hung on it: reports_of) a fresh
// one for the files after it, which the first did not read.  So each report is what the file's own
// check gives, and a file that hangs a process costs the time limit once.
std::vector<FileReport> check_each(const std::string& helper, FileKind kind, const std::vector<OpenedFile>& files) {
    std::vector<FileReport> reports;
    reports.reserve(files.size());
    while (reports.size() < files.size()) {
        std::vector<std::string> paths;
        std::vector<int> fds;
        for (std::size_t i = reports.size(); i < std::min(files.size(), reports.size() + kHelperBatchFiles); ++i) {
            paths.push_back(files[i].path);
            fds.push_back(files[i].fd());
        }
        std::vector<FileReport> batch = run_batch(helper, to_string(kind), paths, -1, fds);
        const auto failed = std::find_if(batch.begin(), batch.end(), [](const FileReport& r) { return r.error.has_value(); });
        const auto through = failed == batch.end() ? failed : std::next(failed);  // the rest were not read
        reports.insert(reports.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(through));
    }
    return reports;
}

}  // namespace

const char* to_string(FileKind kind) {
    switch (kind) {
        case FileKind::Model: return "model";
        case FileKind::DataSet: return "dataset";
        case FileKind::DataSetHeader: return "dataset-header";
        case FileKind::Results: return "results";
    }
    return "?";
}

void set_check_time_limit_for_tests(int milliseconds) {
    time_limit_for_tests_ms.store(std::max(milliseconds, 0));
}

void set_file_check_helper(const std::string& executable) {
    const std::lock_guard<std::mutex> lock(helper_mutex);
    helper_path() = executable;
}

std::string file_check_helper() {
    const std::lock_guard<std::mutex> lock(helper_mutex);
    return helper_path();
}

namespace {

std::mutex hook_mutex;
std::function<void(const std::string&)>& between_reads_hook() {
    static std::function<void(const std::string&)> hook;
    return hook;
}

}  // namespace

void set_between_reads_hook_for_tests(std::function<void(const std::string& path)> hook) {
    const std::lock_guard<std::mutex> lock(hook_mutex);
    between_reads_hook() = std::move(hook);
}

void between_reads(const std::string& path) {
    std::function<void(const std::string&)> hook;
    {
        const std::lock_guard<std::mutex> lock(hook_mutex);
        hook = between_reads_hook();
    }
    if (hook) hook(path);
}

OpenedFile open_user_file(const std::string& path) {
    return {path, std::make_shared<const FileDescriptor>(open_user_file_descriptor(path))};
}

bool check_in_helper(FileKind kind, const OpenedFile& file) {
    const std::string helper = file_check_helper();
    if (helper.empty()) return false;
    const auto reports = run_batch(helper, to_string(kind), {file.path}, -1, {file.fd()});
    if (reports[0].error) throw *reports[0].error;
    return true;
}

bool check_in_helper(FileKind kind, const std::vector<OpenedFile>& files) {
    const std::string helper = file_check_helper();
    if (helper.empty()) return false;
    for (std::size_t first = 0; first < files.size(); first += kHelperBatchFiles) {
        const std::size_t end = std::min(files.size(), first + kHelperBatchFiles);
        std::vector<std::string> paths;
        std::vector<int> fds;
        for (std::size_t i = first; i < end; ++i) {
            paths.push_back(files[i].path);
            fds.push_back(files[i].fd());
        }
        for (const auto& report : run_batch(helper, to_string(kind), paths, -1, fds))
            if (report.error) throw *report.error;
    }
    return true;
}

namespace {

// The descriptors this process has open now (/proc/self/fd); 0 when it cannot tell.
std::size_t open_descriptors() {
    DIR* listing = ::opendir("/proc/self/fd");
    if (listing == nullptr) return 0;
    std::size_t count = 0;
    while (const dirent* entry = ::readdir(listing))
        if (entry->d_name[0] != '.') ++count;
    ::closedir(listing);
    return count;
}

// Files to open for one batch: at most kHelperBatchFiles, and no more than this process's descriptor
// limit has room for beside what is open already (each file open here, perhaps a copy of it lifted
// above the helper's numbers, and the helper's numbers themselves below the same limit).
std::size_t files_per_batch() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kHelperBatchFiles;
    const long room = long(std::min<rlim_t>(limit.rlim_cur, 1 << 20)) - long(open_descriptors()) - 16;
    return std::size_t(std::clamp<long>(room / 2, 1, long(kHelperBatchFiles)));
}

}  // namespace

void for_each_checked_file(FileKind kind, const std::vector<std::string>& paths,
                           const std::function<void(const OpenedFile& file, bool checked)>& read,
                           const std::function<void(const FormatError& error)>& failed) {
    const std::string helper_executable = file_check_helper();
    const bool helper = !helper_executable.empty();
    for (std::size_t next = 0; next < paths.size();) {
        const std::size_t most = files_per_batch();
        std::vector<OpenedFile> batch;
        std::optional<FormatError> unopened;  // a file that cannot be opened: its error comes after the batch's
        while (next < paths.size() && batch.size() < most) {
            try {
                batch.push_back(open_user_file(paths[next]));
                ++next;
            } catch (const DescriptorsExhausted&) {
                if (batch.empty()) throw;  // not one descriptor left for this process
                break;                     // fewer files at once: the rest go in the next batch
            } catch (const FormatError& e) {
                unopened = e;
                break;
            }
        }
        if (!failed) {
            if (helper) check_in_helper(kind, batch);  // an earlier file's error comes first
            if (unopened) throw *unopened;
        }
        std::vector<FileReport> reports = helper && failed ? check_each(helper_executable, kind, batch)
                                                           : std::vector<FileReport>(batch.size());
        for (std::size_t i = 0; i < batch.size(); ++i) {
            if (reports[i].error) {
                failed(*reports[i].error);
                continue;
            }
            if (helper) between_reads(batch[i].path);
            if (!failed) {
                read(batch[i], helper);
                continue;
            }
            try {
                read(batch[i], helper);
            } catch (const FormatError& e) {  // no checking process, or the file changed under it
                failed(e);
            }
        }
        if (unopened) {  // only with `failed`: without, thrown above
            failed(*unopened);
            ++next;
        }
    }
}

bool check_in_helper(FileKind kind, const std::vector<std::string>& paths) {
    if (file_check_helper().empty()) return false;
    for_each_checked_file(kind, paths, [](const OpenedFile&, bool) {});
    return true;
}

FileDescriptor::~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

// ---- the checking process kept between model loads ----
//
// A model load's checking process is kept running after a load whose files all read well, and
// serves the next model load of this process ("serve" mode: requests on its stdin): a sweep's next
// run pays no process start (libhdf5 and the 40-odd libraries it pulls in, loaded and relocated),
// and its weights go into the pages of the same memory file, which are then not allocated again
// (6,000-odd pages for ResNet-50: a third of the checking process's time).  It is retired (killed)
// after any file it refused, crashed or hung on (a corrupt file may leave libhdf5's state damaged,
// so the next file gets a fresh process), when the helper executable or this process's environment
// changes, and after a hand-over larger than kWarmMemoryFileBytes (not to hold a huge model's
// weights twice); it ends by itself when this process ends (the end of its input).  One load uses it at a time: a load meanwhile, in
// another thread, starts a fresh helper of its own, as every load did before.
constexpr std::uint64_t kWarmMemoryFileBytes = std::uint64_t(512) << 20;

// A digest of this process's environment now (every NAME=value, in order): a helper keeps the
// environment it started with, so one started under another (HDF5_PLUGIN_PATH set since, say)
// is replaced rather than reading the next files as the old environment says.
std::size_t environment_digest() {
    std::size_t digest = 0;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
        digest = digest * 1000003u ^ std::hash<std::string_view>{}(*entry);
    return digest;
}

struct WarmHelper {
    std::string executable;
    std::size_t environment = 0;            // environment_digest() when it started
    HelperProcess process;
    pid_t owner = -1;                       // the process that started it (a fork's child leaves it alone)
    std::optional<FileDescriptor> weights;  // its descriptor 3
    bool busy = false;
};

std::mutex warm_mutex;
WarmHelper& warm_helper() {
    static WarmHelper warm;
    return warm;
}

// Ends the warm helper: kills and waits for it when it is this process's; in a fork's child only
// closes this process's copies of its descriptors.
void retire(WarmHelper& w) {
    if (w.process.pid > 0 && w.owner == ::getpid()) {
        ::kill(w.process.pid, SIGKILL);
        wait_for(w.process.pid);
    }
    if (w.process.channel >= 0) ::close(w.process.channel);
    w.process = {};
    w.weights.reset();
    w.executable.clear();
}

// Whether this process's warm helper is still running (one that ended is waited for here).
bool still_running(WarmHelper& w) {
    if (w.process.pid <= 0 || w.owner != ::getpid()) return false;
    int status = 0;
    if (::waitpid(w.process.pid, &status, WNOHANG) == 0) return true;
    w.process.pid = -1;  // ended and waited for, or not ours to wait for: never killed now
    return false;
}

// A new memory file for the weights, at a descriptor >= 10 so that the helper's stdin, stdout (0,
// 1) and hand-over (3) duplications can never overwrite it, even in a process that closed them.
FileDescriptor new_memory_file(const std::string& path) {
    const FileDescriptor created(::memfd_create("aimcemu-model-weights", MFD_CLOEXEC));
    FileDescriptor weights(created ? ::fcntl(created.get(), F_DUPFD_CLOEXEC, 10) : -1);
    if (!weights) throw FormatError(path, "file", std::string("cannot start the file check: no memory file: ") +
                                                     std::strerror(errno));
    return weights;
}

// The warm helper for one load, started when there is none running of `helper`; nullptr when
// another load is using it.  Throws FormatError naming `path` when it cannot be started.
WarmHelper* take_warm_helper(const std::string& helper, const std::string& path) {
    const std::lock_guard<std::mutex> lock(warm_mutex);
    WarmHelper& w = warm_helper();
    if (w.busy) return nullptr;
    const std::size_t environment = environment_digest();
    if (w.executable != helper || w.environment != environment || !still_running(w)) {
        retire(w);
        FileDescriptor weights = new_memory_file(path);
        w.process = spawn_helper(helper, {"serve"}, weights.get(), path);
        w.weights.emplace(std::move(weights));
        w.executable = helper;
        w.environment = environment;
        w.owner = ::getpid();
    }
    w.busy = true;
    return &w;
}

// The load that took the warm helper is done with it (and with its memory file's `bytes`).
void release_warm_helper(std::uint64_t bytes) {
    const std::lock_guard<std::mutex> lock(warm_mutex);
    WarmHelper& w = warm_helper();
    if (bytes > kWarmMemoryFileBytes) retire(w);
    w.busy = false;
}

bool send_all(int channel, const std::string& data) {
    for (std::size_t done = 0; done < data.size();) {
        const ssize_t n = ::send(channel, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += std::size_t(n);
    }
    return true;
}

// What the warm helper said, and this load's own descriptor of its memory file (which outlives
// the helper's retirement).
struct Served {
    std::vector<FileReport> reports;
    FileDescriptor weights;
};

// Sends `data` with `files` (their descriptors, as SCM_RIGHTS, with the first bytes sent).
bool send_with_files(int channel, const std::string& data, const std::vector<int>& files) {
    std::vector<char> control(CMSG_SPACE(sizeof(int) * files.size()));
    iovec bytes{const_cast<char*>(data.data()), data.size()};
    msghdr message{};
    message.msg_iov = &bytes;
    message.msg_iovlen = 1;
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    cmsghdr* rights = CMSG_FIRSTHDR(&message);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof(int) * files.size());
    std::memcpy(CMSG_DATA(rights), files.data(), sizeof(int) * files.size());
    ssize_t sent;
    while ((sent = ::sendmsg(channel, &message, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return sent > 0 && send_all(channel, data.substr(std::size_t(sent)));
}

// One request to the warm helper (taken by this load): each file's report, in order, as a fresh
// helper's would be; nullopt when the request could not be sent (the helper retired, e.g. one that
// ended since its last request).  The helper reads the files open on `files` (one per path, sent
// with the request): it needs neither this process's working directory nor the paths but for
// naming the files in its reports.
std::optional<Served> serve(WarmHelper& w, const std::string& kind, const std::vector<std::string>& paths,
                            const std::vector<int>& files) {
    if (::lseek(w.weights->get(), 0, SEEK_SET) != 0) {  // a helper that write()s starts at the beginning
        retire(w);
        return std::nullopt;
    }
    std::string request = kind + '\0';
    for (const auto& path : paths) request += path + '\0';
    if (!send_with_files(w.process.channel, request + '\0', files)) {
        retire(w);
        return std::nullopt;
    }
    const Output out = read_reports(w.process.channel, paths, paths.size());
    Served served{{}, FileDescriptor(::fcntl(w.weights->get(), F_DUPFD_CLOEXEC, 10))};
    if (!served.weights) {
        retire(w);
        return std::nullopt;
    }
    if (!out.timed_out && whole_reports(out.text).size() >= paths.size()) {
        served.reports = reports_of(out, paths, true, 0);
        if (std::any_of(served.reports.begin(), served.reports.end(), [](const FileReport& r) { return r.error.has_value(); }))
            retire(w);
        return served;
    }
    if (out.timed_out) ::kill(w.process.pid, SIGKILL);
    const int status = wait_for(w.process.pid);
    w.process.pid = -1;
    retire(w);
    // a helper that ended well stopped at a file it refused (check_file.cpp), else it died or hung
    served.reports = reports_of(out, paths, WIFEXITED(status) && WEXITSTATUS(status) == 0, status);
    return served;
}

}  // namespace

HandOver::~HandOver() {
    if (warm_) release_warm_helper(bytes_ + structure_bytes_);
}

namespace {

// The checking process's request for a model and, when one is given, a data set read as `dataset_kind`
// (check_file.cpp).
std::string model_request(FileKind dataset_kind) {
    return dataset_kind == FileKind::DataSetHeader ? "model-weights+dataset-header" : "model-weights";
}

// N and M of a model report's "weights N structure M" (check_file.cpp), each a whole decimal
// number; nullopt for anything else.
std::optional<std::pair<std::uint64_t, std::uint64_t>> handed_over_sizes(const std::string& detail) {
    std::istringstream words(detail);
    std::string weights_label, weights, structure_label, structure;
    words >> weights_label >> weights >> structure_label >> structure;
    const auto number = [](const std::string& text) -> std::optional<std::uint64_t> {
        std::uint64_t value = 0;
        const auto [end, parsed] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || parsed != std::errc() || end != text.data() + text.size()) return std::nullopt;
        return value;
    };
    const auto n = number(weights), m = number(structure);
    // Rebuilt from its four words, the detail must come back as it was: single spaces, nothing more.
    if (weights_label != "weights" || structure_label != "structure" || !n || !m ||
        detail != "weights " + weights + " structure " + structure)
        return std::nullopt;
    return std::pair{*n, *m};
}

}  // namespace

HandOver check_model_in_helper(const OpenedFile& model, const std::string& dataset_path, FileCheck* dataset_check,
                               FileKind dataset_kind) {
    const std::string helper = file_check_helper();
    if (helper.empty()) return HandOver();
    if (dataset_kind != FileKind::DataSet && dataset_kind != FileKind::DataSetHeader)
        throw std::invalid_argument("check_model_in_helper: a data set is read as DataSet or DataSetHeader");
    const std::string& path = model.path;
    std::vector<std::string> paths{path};
    std::vector<int> files{model.fd()};
    // The data set is opened now, before the helper reads it; a data set that cannot be opened is
    // not sent, and its error raised when it is read, as the helper's would be.
    std::optional<FormatError> dataset_unopened;
    OpenedFile dataset;
    if (!dataset_path.empty()) {
        try {
            dataset = open_user_file(dataset_path);
            paths.push_back(dataset_path);
            files.push_back(dataset.fd());
        } catch (const FormatError& e) {
            dataset_unopened = e;
        }
    }
    // An empty path or one with a NUL byte cannot be sent to the warm helper (NUL ends a path there,
    // and an empty one the request): a fresh helper gets it on its command line, as before.
    const bool servable = std::none_of(paths.begin(), paths.end(), [](const std::string& p) {
        return p.empty() || p.find('\0') != std::string::npos;
    });
    WarmHelper* warm = servable ? take_warm_helper(helper, path) : nullptr;
    struct Release {  // until the HandOver holds the warm helper
        bool armed;
        ~Release() {
            if (armed) release_warm_helper(0);
        }
    } release{warm != nullptr};
    const std::string request = model_request(dataset_kind);
    std::optional<Served> served = warm != nullptr ? serve(*warm, request, paths, files) : std::nullopt;
    FileDescriptor weights = served ? std::move(served->weights) : new_memory_file(path);
    const auto reports =
        served ? std::move(served->reports) : run_batch(helper, request, paths, weights.get(), files);
    if (reports[0].error) throw *reports[0].error;
    if (!dataset_path.empty() && dataset_check != nullptr)
        *dataset_check = dataset_unopened ? FileCheck{dataset_path, dataset_unopened, dataset_kind, {}}
                                          : FileCheck{dataset_path, reports[1].error, dataset_kind, dataset};
    // "weights N structure M": the helper handed over N bytes of weights and an M-byte record (the
    // memory file may hold more: a reused one).
    const std::optional<std::pair<std::uint64_t, std::uint64_t>> sizes = handed_over_sizes(reports[0].detail);
    if (!sizes)
        throw FormatError(path, "file", "the file check did not say how much of the model it handed over ('" +
                                            reports[0].detail + "')");
    const bool leased = served.has_value();
    release.armed = release.armed && !leased;
    return HandOver(std::move(weights), sizes->first, sizes->second, leased);
}

}  // namespace aimcemu
