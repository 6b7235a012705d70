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

namespace aimcemu::fuzz {

inline std::string scratch_folder() {
    namespace fs = std::filesystem;
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::path(tmp ? tmp : "/tmp");
    const fs::path folder = base / ("aimcemu-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(folder);
    return folder.string();
}

// Writes `data` to `name` in the scratch folder and returns the path.
inline std::string write_input(const std::uint8_t* data, std::size_t size, const char* name = "input.h5") {
    static const std::string folder = scratch_folder();
    const std::string path = folder + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::abort();
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

// A second scratch path (for writing a loaded file back).
inline std::string scratch_path(const char* name) {
    static const std::string folder = scratch_folder();
    return folder + "/" + name;
}

}  // namespace aimcemu::fuzz
