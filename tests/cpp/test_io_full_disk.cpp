// A full disk: writing an HDF5 file that does not fit gives an h5::Error, leaves no file behind,
// and the process still exits cleanly (HDF5 1.10.8's exit handler used to crash on the file whose
// close had failed: `aimcemu run` printed its error and then died with SIGSEGV, exit code 139).
//
// Needs a small tmpfs, which only root with CAP_SYS_ADMIN can mount; skipped otherwise.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/h5.hpp"

namespace fs = std::filesystem;
using namespace aimcemu;

namespace {

// A 64 KiB tmpfs mounted on a fresh folder for the test's lifetime.
class SmallDisk {
public:
    SmallDisk() {
        char tmpl[] = "/tmp/aimcemu_full_disk_XXXXXX";
        if (!::mkdtemp(tmpl)) return;
        folder_ = tmpl;
        if (::mount("tmpfs", folder_.c_str(), "tmpfs", 0, "size=64k") != 0) {
            reason_ = std::string("cannot mount a tmpfs (needs root with CAP_SYS_ADMIN): ") + std::strerror(errno);
            fs::remove(folder_);
            folder_.clear();
        }
    }
    ~SmallDisk() {
        if (folder_.empty()) return;
        ::umount(folder_.c_str());
        fs::remove(folder_);
    }
    bool mounted() const { return !folder_.empty(); }
    const std::string& reason() const { return reason_; }
    const std::string& folder() const { return folder_; }

private:
    std::string folder_, reason_ = "mkdtemp failed";
};

// Writes 512 KiB into `path` through AtomicFile; returns the error text ("" if it fit).  The
// data sits in one chunk of HDF5's 1 MiB chunk cache, so every write succeeds and the disk runs
// out when commit() closes the file, as it does for a results file.
std::string write_too_much(const std::string& path) {
    try {
        h5::AtomicFile out(path);
        const std::vector<std::int8_t> data(512 * 1024, 7);
        out.file().write_dataset("data", {data.size()}, data.data(), h5::Storage{{data.size()}, 0});
        out.commit();
    } catch (const h5::Error& e) {
        return e.what();
    }
    return "";
}

bool folder_is_empty(const std::string& folder) { return fs::is_empty(folder); }

std::string listing(const std::string& folder) {
    std::string names;
    for (const auto& entry : fs::directory_iterator(folder)) names += " " + entry.path().filename().string() + "(" + std::to_string(entry.is_regular_file() ? entry.file_size() : 0) + " B)";
    return names;
}

}  // namespace

TEST(FullDisk, ErrorNamesTheCauseAndNoFileIsLeft) {
    SmallDisk disk;
    if (!disk.mounted()) GTEST_SKIP() << disk.reason();
    const std::string target = disk.folder() + "/results.h5";
    std::system(("df " + disk.folder()).c_str());
    const std::string error = write_too_much(target);
    EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
    EXPECT_TRUE(folder_is_empty(disk.folder())) << "left in " << disk.folder() << ":" << listing(disk.folder());
}

TEST(FullDiskDeathTest, ProcessExitsCleanlyAfterTheError) {
    SmallDisk disk;
    if (!disk.mounted()) GTEST_SKIP() << disk.reason();
    const std::string target = disk.folder() + "/results.h5";
    // In a child process: fail to write, then exit normally through every exit handler.
    EXPECT_EXIT(
        {
            const bool failed = !write_too_much(target).empty();
            std::exit(failed && folder_is_empty(disk.folder()) ? 0 : 3);
        },
        ::testing::ExitedWithCode(0), "");
}
