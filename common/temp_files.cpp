// Temporary file names and the removal of stale ones: see temp_files.hpp.
#include "common/temp_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace aimcemu::files {

namespace {

constexpr const char* kMarker = ".tmp-";
constexpr std::size_t kMaxHostChars = 32;     // what a parsed name may hold (tags written before the digest too)
constexpr std::size_t kHostPrefixChars = 23;  // the host name's share of a tag: 23 + '.' + 8 hex digits
// A process that started this many seconds after the file's last change is not its writer.
// The slack covers the one-second resolution of the boot time in /proc/stat.
constexpr double kStartSlackS = 2.0;

bool all_digits(const std::string& s) {
    if (s.empty() || s.size() > 18) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

bool host_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// Seconds since the epoch at which process `pid` started, from /proc (Linux); < 0 if unknown.
// Also reports whether the process is a zombie (state Z or X): it has exited but nobody has
// collected it, so kill(pid, 0) still succeeds.
double process_start_s(long long pid, bool& zombie) {
    zombie = false;
    std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat_file || !std::getline(stat_file, line)) return -1.0;
    const auto close_paren = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close_paren == std::string::npos) return -1.0;
    std::istringstream rest(line.substr(close_paren + 1));
    std::string state;
    rest >> state;
    zombie = state == "Z" || state == "X";
    std::string skip;
    for (int field = 4; field < 22; ++field) rest >> skip;  // fields 4..21 (1-based), then starttime
    unsigned long long start_ticks = 0;
    if (!(rest >> start_ticks)) return -1.0;
    std::ifstream proc_stat("/proc/stat");
    std::string key;
    long long boot_s = -1;
    while (proc_stat >> key) {
        if (key == "btime") {
            proc_stat >> boot_s;
            break;
        }
        std::getline(proc_stat, skip);
    }
    const long ticks = sysconf(_SC_CLK_TCK);
    if (boot_s < 0 || ticks <= 0) return -1.0;
    return double(boot_s) + double(start_ticks) / double(ticks);
}

}  // namespace

std::string host_tag_of(const std::string& host_name, const std::string& pid_namespace) {
    std::string out;
    for (const char c : host_name) {
        if (out.size() == kHostPrefixChars) break;
        out += host_char(c) ? c : '_';
    }
    if (out.empty()) out = "localhost";
    // FNV-1a (64-bit) of the whole name and the namespace: a stable digest, the same in every
    // process of the host (std::hash need not be).
    std::uint64_t digest = 0xcbf29ce484222325ull;
    for (const char c : host_name + '\0' + pid_namespace) {
        digest ^= std::uint8_t(c);
        digest *= 0x100000001b3ull;
    }
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", unsigned(digest ^ (digest >> 32)));
    return out + '.' + hex;
}

const std::string& host_tag() {
    static const std::string tag = [] {
        char name[256] = {};
        if (gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
        char pid_namespace[128] = {};
        const ssize_t n = ::readlink("/proc/self/ns/pid", pid_namespace, sizeof(pid_namespace) - 1);
        return host_tag_of(name, n > 0 ? std::string(pid_namespace, std::size_t(n)) : std::string());
    }();
    return tag;
}

std::string temporary_path_for(const std::string& target) {
    namespace fs = std::filesystem;
    static std::atomic<unsigned> counter{0};
    const fs::path path(target);
    const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
    std::string name = ".";  // hidden, so a listing never shows an unfinished file
    name += path.filename().string();
    name += kMarker + host_tag() + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    return (folder / name).string();
}

TemporaryName parse_temporary_name(const std::string& name) {
    TemporaryName out;
    const auto marker = name.rfind(kMarker);
    if (name.size() < 2 || name[0] != '.' || marker == std::string::npos || marker < 2) return out;
    // After the marker: [HOST-]PID-N
    const std::string tail = name.substr(marker + std::char_traits<char>::length(kMarker));
    const auto last_dash = tail.rfind('-');
    if (last_dash == std::string::npos || !all_digits(tail.substr(last_dash + 1))) return out;
    const std::string head = tail.substr(0, last_dash);  // HOST-PID or PID
    const auto dash = head.rfind('-');
    const std::string pid = dash == std::string::npos ? head : head.substr(dash + 1);
    const std::string host = dash == std::string::npos ? std::string() : head.substr(0, dash);
    if (!all_digits(pid)) return out;
    if (dash != std::string::npos && (host.empty() || host.size() > kMaxHostChars)) return out;
    for (char c : host)
        if (!host_char(c)) return out;
    out.ok = true;
    out.target = name.substr(1, marker - 1);
    out.host = host;
    out.pid = std::stoll(pid);
    return out;
}

bool writer_is_gone(long long pid, double modified_unix_s) {
    if (pid <= 0 || pid > 0x7fffffffLL) return false;  // not a PID this kernel hands out: leave it
    if (::kill(pid_t(pid), 0) != 0) return errno == ESRCH;  // EPERM: alive, owned by someone else
    bool zombie = false;
    const double started = process_start_s(pid, zombie);
    if (zombie) return true;
    return started >= 0 && started > modified_unix_s + kStartSlackS;
}

void rename_no_replace(const std::string& from, const std::string& to, std::error_code& ec) {
    ec.clear();
#ifdef RENAME_NOREPLACE
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
    if (errno != EINVAL && errno != ENOSYS) {
        ec = std::error_code(errno, std::generic_category());
        return;
    }
#endif
    // No RENAME_NOREPLACE here (an older kernel, NFS): link() fails with EEXIST just as well.
    if (::link(from.c_str(), to.c_str()) != 0) {
        ec = std::error_code(errno, std::generic_category());
        return;
    }
    ::unlink(from.c_str());
}

std::vector<std::string> remove_stale_temporaries(const std::string& folder) {
    namespace fs = std::filesystem;
    std::vector<std::string> removed;
    std::error_code ec;
    fs::directory_iterator it(folder.empty() ? fs::path(".") : fs::path(folder), ec);
    if (ec) return removed;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const std::string name = it->path().filename().string();
        const TemporaryName parsed = parse_temporary_name(name);
        if (!parsed.ok || (!parsed.host.empty() && parsed.host != host_tag())) continue;
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        const double modified = double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
        if (!writer_is_gone(parsed.pid, modified)) continue;
        if (::unlink(it->path().c_str()) == 0) removed.push_back(it->path().string());
    }
    return removed;
}

}  // namespace aimcemu::files
