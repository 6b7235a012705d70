// Reading a user's HDF5 file in a helper process first, so that a file that crashes the HDF5
// library cannot crash aimcemu.
//
// Why: HDF5 1.10 (Debian 12's) is not robust against corrupt metadata; fuzzing our loaders
// finds inputs within seconds on which libhdf5 itself reads freed memory or segfaults, far below
// any check we can make first.  So the loaders of model, data set and results files first run
// the same reader in a helper process (the executable aimcemu-check-file, built beside the
// library): if the helper dies, the file is refused with a FormatError that says so, and the
// caller's process never touches it.  If it reports a FormatError, that error is raised here
// unchanged; if it reads the file, the caller reads it again in-process.
//
// One file, read twice: a model, data set or results file is opened once, by the caller
// (OpenedFile), before the helper reads it; the helper gets that descriptor (inherited by a fresh
// helper, sent with SCM_RIGHTS to the kept one) and both read the file open on it.  A file renamed
// over the path between the two reads (a training job saving checkpoints with rename()) is then
// never read: the load is the file that was there when it began, whole.  The batch check of many
// files (check_in_helper with OpenedFiles) does the same; read_results_files reads through them.
//
// A fresh process (posix_spawn), not fork(): HDF5's global lock may be held by another thread at
// fork time, and a forked child would wait for it forever.  A model load's process is kept for the
// next model load while every file it read was sound (check_model_in_helper; untrusted_file.cpp
// says when it is retired).  When no helper is configured (the
// C++ library used on its own, or a build without it), files are read in-process only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.hpp"

namespace aimcemu {

// The checking process's descriptors, as both sides of its protocol number them: the memory file
// it writes a model's weights into ("model-weights"), and, started with "--fds", its i-th file at
// kHelperFirstFileFd + i (the caller's OpenedFile).
inline constexpr int kHelperHandoverFd = 3;
inline constexpr int kHelperFirstFileFd = 4;

// One file's report as the checking process writes it: "LENGTH:REPORT," (a netstring), so that a
// report may hold any byte (a path in a message can hold any but NUL).
inline std::string helper_report_record(const std::string& report) {
    return std::to_string(report.size()) + ':' + report + ',';
}

// How a file is read: DataSetHeader is a data set file read but for its images' values
// (load_dataset_header: a sweep's plan), checked in the checking process in the same mode.
enum class FileKind { Model, DataSet, DataSetHeader, Results };

const char* to_string(FileKind kind);

// The helper executable used by check_in_helper ("" = none, read in-process only).
void set_file_check_helper(const std::string& executable);
std::string file_check_helper();
// Test only: the checking process's time limit, in milliseconds, instead of the one sized by the
// files it reads (0: that one again), so that a test can make a helper "hang" in seconds.  No user
// input reaches it; the product never sets it.
void set_check_time_limit_for_tests(int milliseconds);


// An open file descriptor, closed when the object goes away (-1: none).
class FileDescriptor {
public:
    explicit FileDescriptor(int fd = -1) : fd_(fd) {}
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    FileDescriptor& operator=(FileDescriptor&&) = delete;
    FileDescriptor(const FileDescriptor&) = delete;
    ~FileDescriptor();
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_;
};

// A user's file opened once for every read of it (see the top of this file): the path as the user
// gave it (for messages) and the descriptor, shared by copies (a FileCheck keeps it).
struct OpenedFile {
    std::string path;
    std::shared_ptr<const FileDescriptor> descriptor;
    int fd() const { return descriptor ? descriptor->get() : -1; }
};

// Opens the file at `path` (open_user_file_descriptor: a regular file, O_RDONLY | O_CLOEXEC); throws
// FormatError naming `path` as the in-process read would.
OpenedFile open_user_file(const std::string& path);

// Reads the file open on `file` as `kind` in the helper process.  Returns false (having done
// nothing) when no helper is configured; true when the helper read the file; throws FormatError
// when it refused it, crashed, or ran past its time limit (a hang in the HDF5 library).
bool check_in_helper(FileKind kind, const OpenedFile& file);
// The same for many opened files (a sweep's task files): one helper process per batch of files,
// so the start-up is paid once; throws the FormatError of the first file that fails, in order.
bool check_in_helper(FileKind kind, const std::vector<OpenedFile>& files);
// Files per checking process in a batch, at most: keeps its command line far below ARG_MAX (fewer
// when this process's descriptor limit leaves less room: untrusted_file.cpp, files_per_batch).
inline constexpr std::size_t kHelperBatchFiles = 128;
// Opens each of `paths` (open_user_file), checks them a batch at a time (one checking process per
// batch, reading the open files), then hands each to `read`, in order, with whether a checking
// process read it (false: none is configured).  A batch's files are closed before the next batch
// opens.  Throws the FormatError of the first file that fails, in order (one that cannot be opened
// after the files before it were checked); running out of descriptors only makes batches smaller.
// With `failed`, each file on its own account: a file that cannot be opened, fails its check or
// whose `read` throws a FormatError goes to `failed` with that error (the one its own check,
// check_in_helper of that file alone, gives), in its place in the order, and the files after it are
// still checked and read.  A checking process stops at the first file that fails (the files after it
// are not read there: a corrupt file may leave libhdf5's state damaged) and the rest go to a fresh
// one, so every file is read by a checking process once: a file that hangs one costs the time
// limit once.  Only what fails every file (no descriptor left, a helper that cannot be started) is
// thrown.
void for_each_checked_file(FileKind kind, const std::vector<std::string>& paths,
                           const std::function<void(const OpenedFile& file, bool checked)>& read,
                           const std::function<void(const FormatError& error)>& failed = {});
// for_each_checked_file without reading: for a caller that reads the files later by path (h5py), and
// may then read a file renamed over the path since.
bool check_in_helper(FileKind kind, const std::vector<std::string>& paths);

// What the checking process found in a data set file it read beside a model file, kept until the
// caller reads the data set (the caller checks other things in between, and reports them first).
struct FileCheck {
    std::string path;                  // the file checked; "" = none
    std::optional<FormatError> error;  // its own FormatError, or its crash or time limit; none = it read
    FileKind kind = FileKind::DataSet; // how it was read: whole, or its header only (DataSetHeader)
    // The file the checking process read (when it read it), for the caller's read: held open until
    // that read (load_dataset with this check), which gives it up, so a check kept afterwards holds
    // no descriptor.
    mutable OpenedFile file;
    void raise() const {
        if (error) throw *error;
    }
};

// The model a checking process handed over (check_model_in_helper): bytes() bytes of weights at the
// start of the memory file fd(), then structure_bytes() bytes of its structure record
// (model_handover.hpp).  Empty (false) when no helper is configured.  While it lives, this load holds
// the checking process kept between loads (untrusted_file.cpp), whose memory file it reads.
class HandOver {
public:
    HandOver() = default;
    HandOver(FileDescriptor file, std::uint64_t bytes, std::uint64_t structure_bytes, bool warm)
        : file_(std::move(file)), bytes_(bytes), structure_bytes_(structure_bytes), warm_(warm) {}
    HandOver(HandOver&& other) noexcept
        : file_(std::move(other.file_)),
          bytes_(other.bytes_),
          structure_bytes_(other.structure_bytes_),
          warm_(std::exchange(other.warm_, false)) {}
    HandOver& operator=(HandOver&&) = delete;
    ~HandOver();
    int fd() const { return file_.get(); }
    std::uint64_t bytes() const { return bytes_; }
    std::uint64_t structure_bytes() const { return structure_bytes_; }
    explicit operator bool() const { return bool(file_); }

private:
    FileDescriptor file_;
    std::uint64_t bytes_ = 0, structure_bytes_ = 0;
    bool warm_ = false;  // releases the warm helper when it goes away
};

// check_in_helper for one opened model file, whose helper also hands the model it read over: every
// GEMM layer's weights, in the order of the file's layers, read by HDF5 straight into a memory
// file (memfd), followed by a record of everything else the file holds (model_handover.hpp), so
// that the caller reads nothing of the file itself (no HDF5 call on it in this process, and no
// weight read or inflated twice).  Returns an empty HandOver when no helper is configured.  The
// helper reads every field of the file as check_in_helper's does; the graph checks, which read no
// file, are left to the caller, which runs them anyway (model_file.hpp, hand_model_over).  What it
// reports is raised the same.  With `dataset_path`, that data set file is opened here and the same
// process then reads it (one process start instead of two) as `dataset_kind` (DataSet, or
// DataSetHeader: all but the images' values); what it found, and the opened file, go to
// `*dataset_check` (untouched when no helper is configured).
HandOver check_model_in_helper(const OpenedFile& model, const std::string& dataset_path = "",
                               FileCheck* dataset_check = nullptr, FileKind dataset_kind = FileKind::DataSet);

}  // namespace aimcemu
