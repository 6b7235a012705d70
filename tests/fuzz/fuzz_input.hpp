// Shared by the fuzz harnesses (tests/fuzz/fuzz_*.cpp): the loaders under test read files by
// path, so each input is written to one scratch file per process (in /dev/shm when it exists,
// so no disk is touched) and loaded from there, exactly as a user's file would be.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace aimcemu::fuzz {

// The process's scratch folder, aimcemu-fuzz-PID in $AIMCEMU_FUZZ_SCRATCH when set (run_fuzzer.py
// sets it to a folder of its own, which it removes at its end), else in /dev/shm or $TMPDIR.  Made
// on first use and removed with its files when the process exits normally (libFuzzer's
// -runs/-max_total_time end, a replay): every fuzzer process used to leave one in /dev/shm, which
// is memory, for good.  A crash leaves it (run_fuzzer.py's folder takes those with it).
class ScratchFolder {
public:
    ScratchFolder() {
        namespace fs = std::filesystem;
        const char* chosen = std::getenv("AIMCEMU_FUZZ_SCRATCH");
        const char* tmp = std::getenv("TMPDIR");
        const fs::path base = (chosen != nullptr && *chosen != '\0') ? fs::path(chosen)
                              : fs::is_directory("/dev/shm")        ? fs::path("/dev/shm")
                                                                     : fs::path(tmp ? tmp : "/tmp");
        path_ = (base / ("aimcemu-fuzz-" + std::to_string(::getpid()))).string();
        fs::create_directories(path_);
    }
    ~ScratchFolder() {
        std::error_code ignored;  // nothing to report to at exit
        std::filesystem::remove_all(path_, ignored);
    }
    ScratchFolder(const ScratchFolder&) = delete;
    ScratchFolder& operator=(const ScratchFolder&) = delete;

    const std::string& path() const { return path_; }

private:
    std::string path_;
};

inline const std::string& scratch_folder() {
    static const ScratchFolder folder;
    return folder.path();
}

// A path named `name` in the scratch folder (for writing a loaded file back).
inline std::string scratch_path(const char* name) { return scratch_folder() + "/" + name; }

// Writes `data` to `name` in the scratch folder and returns the path.
inline std::string write_input(const std::uint8_t* data, std::size_t size, const char* name = "input.h5") {
    const std::string path = scratch_path(name);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

}  // namespace aimcemu::fuzz
