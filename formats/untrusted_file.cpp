// Reading user files in a helper process first: see untrusted_file.hpp.
#include "formats/untrusted_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>


extern char** environ;

namespace aimcemu {

namespace {

std::mutex helper_mutex;
std::string& helper_path() {
    static std::string path;
    return path;
}

// The helper may take as long as a slow disk needs to read the files, plus start-up.
int time_limit_ms(const std::vector<std::string>& paths) {
    double bytes = 0.0;
    for (const auto& path : paths) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0) bytes += double(st.st_size);
    }
    return int(std::min(3600.0, 120.0 + 0.05 * double(paths.size()) + bytes / 5e6) * 1000.0);
}

// One file's report from the helper, each ending in kEnd: "ok" (for a model whose weights it
// handed over: "ok\n" DETAIL), or "format-error\n" SOURCE \0 FIELD \0 WHAT, or "error\n" WHAT.
constexpr char kEnd = '\x1e';

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

// The helper's file descriptor for the weights it hands over ("model-weights").
constexpr int kHandoverFd = 3;

// Files per helper process: keeps the command line far below ARG_MAX.
constexpr std::size_t kBatch = 256;

// Runs the helper on one batch; returns each file's report, in order (no error: the helper read it).  A
// crash or the time limit is blamed on the file the helper had not finished; the files after it
// were not read.  `kind_arg` is the helper's KIND argument; `handover` (>= 0) becomes the
// helper's file descriptor 3.  Throws only when the helper cannot be started.
std::vector<FileReport> run_batch(const std::string& helper, const std::string& kind_arg,
                                                  const std::vector<std::string>& paths, int handover = -1) {
    const std::string& first = paths.front();
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw FormatError(first, "file", "cannot start the file check: pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    if (handover >= 0) posix_spawn_file_actions_adddup2(&actions, handover, kHandoverFd);
    std::vector<char*> argv{const_cast<char*>(helper.c_str()), const_cast<char*>(kind_arg.c_str())};
    for (const auto& path : paths) argv.push_back(const_cast<char*>(path.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int spawned = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (spawned != 0) {
        ::close(out[0]);
        throw FormatError(first, "file", "cannot start the file check " + helper + ": " + std::strerror(spawned));
    }

    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(time_limit_ms(paths));
    bool timed_out = false;
    for (char buffer[4096];;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{out[0], POLLIN, 0};
        const int ready = left.count() > 0 ? ::poll(&p, 1, int(left.count())) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            timed_out = true;
            break;
        }
        const ssize_t n = ::read(out[0], buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (text.size() < (std::size_t(64) << 20)) text.append(buffer, std::size_t(n));
    }
    ::close(out[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }

    // The reports that arrived whole, in order; the first file without one is where it stopped.
    std::vector<FileReport> errors;
    for (std::size_t start = 0; errors.size() < paths.size();) {
        const auto end = text.find(kEnd, start);
        if (end == std::string::npos) break;
        errors.push_back(report_of(text.substr(start, end - start), paths[errors.size()]));
        start = end + 1;
    }
    const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (errors.size() == paths.size() && clean_exit) return errors;
    const std::size_t stopped = std::min(errors.size(), paths.size() - 1);
    const std::string& culprit = paths[stopped];
    const std::string how = WIFSIGNALED(status) ? std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                                      ::strsignal(WTERMSIG(status)) + ")"
                                                : "exit status " + std::to_string(WEXITSTATUS(status));
    errors.resize(stopped);
    errors.push_back({timed_out ? FormatError(culprit, "file", "reading it did not finish within the time limit (a "
                                                               "corrupt file can make the HDF5 library loop); the file is not used")
                                : FormatError(culprit, "file", "corrupt: reading it crashed the HDF5 library in the "
                                                               "checking process (" + how + "); the file is not used"),
                      {}});
    while (errors.size() < paths.size())
        errors.push_back({FormatError(paths[errors.size()], "file",
                                      "not checked: the checking process stopped at an earlier file (" + culprit + ")"),
                          {}});
    return errors;
}

// run_batch, throwing the first file's error, in order.
void check_batch(const std::string& helper, const std::string& kind_arg, const std::vector<std::string>& paths) {
    for (const auto& report : run_batch(helper, kind_arg, paths))
        if (report.error) throw *report.error;
}

}  // namespace

const char* to_string(FileKind kind) {
    switch (kind) {
        case FileKind::Model: return "model";
        case FileKind::DataSet: return "dataset";
        case FileKind::Results: return "results";
    }
    return "?";
}

void set_file_check_helper(const std::string& executable) {
    const std::lock_guard<std::mutex> lock(helper_mutex);
    helper_path() = executable;
}

std::string file_check_helper() {
    const std::lock_guard<std::mutex> lock(helper_mutex);
    return helper_path();
}

bool check_in_helper(FileKind kind, const std::string& path) {
    return check_in_helper(kind, std::vector<std::string>{path});
}

bool check_in_helper(FileKind kind, const std::vector<std::string>& paths) {
    const std::string helper = file_check_helper();
    if (helper.empty()) return false;
    for (std::size_t i = 0; i < paths.size(); i += kBatch)
        check_batch(helper, to_string(kind), {paths.begin() + std::ptrdiff_t(i),
                                              paths.begin() + std::ptrdiff_t(std::min(paths.size(), i + kBatch))});
    return true;
}

FileDescriptor::~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
}

// The memory file of the last hand-over, kept for the next one (HandOver's destructor): its pages
// stay allocated, so the next hand-over of a sweep's model writes into them instead of allocating
// 6,000-odd pages again (for ResNet-50, a third of the checking process's time).  Kept only up to
// kSpareMemoryFileBytes, so a huge model's weights are not held twice after its load.
constexpr std::uint64_t kSpareMemoryFileBytes = std::uint64_t(512) << 20;
std::mutex spare_mutex;
std::optional<FileDescriptor>& spare_memory_file() {
    static std::optional<FileDescriptor> spare;
    return spare;
}

FileDescriptor memory_file_for_hand_over(const std::string& path) {
    {
        const std::lock_guard<std::mutex> lock(spare_mutex);
        if (auto& spare = spare_memory_file()) {
            FileDescriptor taken(std::move(*spare));
            spare.reset();
            return taken;
        }
    }
    // Moved to a descriptor >= 10 so that the helper's stdout (1) and hand-over (3) duplications,
    // applied in that order, can never overwrite it, even in a process that closed its stdout.
    const FileDescriptor created(::memfd_create("aimcemu-model-weights", MFD_CLOEXEC));
    FileDescriptor weights(created ? ::fcntl(created.get(), F_DUPFD_CLOEXEC, 10) : -1);
    if (!weights) throw FormatError(path, "file", std::string("cannot start the file check: no memory file: ") +
                                                     std::strerror(errno));
    return weights;
}

HandOver::~HandOver() {
    struct stat st {};
    if (!file_ || ::fstat(file_.get(), &st) != 0 || std::uint64_t(st.st_size) > kSpareMemoryFileBytes) return;
    const std::lock_guard<std::mutex> lock(spare_mutex);
    if (!spare_memory_file()) spare_memory_file().emplace(std::move(file_));
}

HandOver check_model_in_helper(const std::string& path, const std::string& dataset_path, FileCheck* dataset_check) {
    const std::string helper = file_check_helper();
    if (helper.empty()) return HandOver();
    FileDescriptor weights = memory_file_for_hand_over(path);
    // A helper that write()s (rather than maps) starts at the beginning of a reused memory file.
    if (::lseek(weights.get(), 0, SEEK_SET) != 0)
        throw FormatError(path, "file", std::string("cannot start the file check: ") + std::strerror(errno));
    std::vector<std::string> paths{path};
    if (!dataset_path.empty()) paths.push_back(dataset_path);
    const auto reports = run_batch(helper, "model-weights", paths, weights.get());
    if (reports[0].error) throw *reports[0].error;
    if (!dataset_path.empty() && dataset_check != nullptr) *dataset_check = FileCheck{dataset_path, reports[1].error};
    // "weights N": the helper handed over N bytes (the memory file may hold more: a reused one).
    const std::string& detail = reports[0].detail;
    std::uint64_t bytes = 0;
    const char* digits = detail.c_str() + std::min(detail.size(), std::strlen("weights "));
    const auto [end, parsed] = std::from_chars(digits, detail.c_str() + detail.size(), bytes);
    if (detail.rfind("weights ", 0) != 0 || parsed != std::errc() || end != detail.c_str() + detail.size())
        throw FormatError(path, "file", "the file check did not say how many weights it handed over ('" + detail + "')");
    return HandOver(std::move(weights), bytes);
}

}  // namespace aimcemu
