// Reading the fields of an HDF5 file that a user handed us (a model, a data set, a results file)
// as untrusted input.
//
// Every failure becomes FormatError(path, field, what), so the message names the file and the
// field whatever went wrong: HDF5 errors, wrong types or shapes, values out of range, strings
// that are not UTF-8.  Beyond checking values, the reader refuses what would hang, read other
// files or exhaust memory before it happens:
//
//   - a path that is not a regular file (a FIFO would block the open forever, a device would
//     be read as a file);
//   - links that are not plain (hard) links: external links open other files, soft links can
//     loop; and datasets whose data lives elsewhere (external raw files, virtual datasets);
//   - datasets that claim more data than the file stores (missing chunks read as zeros) or
//     more than this machine's memory: checked from the header, before anything is allocated.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.hpp"
#include "common/h5.hpp"

namespace aimcemu {

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF); when not,
// `bad_at` is the byte offset of the first invalid sequence.
bool valid_utf8(std::string_view text, std::size_t& bad_at);

// `text` for an error message: control bytes (below 0x20, and DEL) and bytes that are not part
// of a valid UTF-8 sequence written as \xNN, so that a hostile name can neither cut, garble nor
// invalidate the line (Python decodes messages as UTF-8); valid UTF-8 is kept.  The one escaping
// rule of every message (Python: _core.printable).
std::string printable(std::string_view text);

// "0xff": one byte for a message.
std::string byte_text(unsigned char b);

// Bytes of physical memory of this machine (the bound for any single array read from a file).
std::uint64_t physical_memory_bytes();

// "[2, 3, 4]"
std::string dims_text(const h5::Dims& dims);

bool is_int8(const h5::TypeInfo& t);
bool is_integer(const h5::TypeInfo& t);
bool is_float(const h5::TypeInfo& t);
bool is_number(const h5::TypeInfo& t);

// Opens the user's file at `path` for reading, once: it must exist and be a regular file (a FIFO is
// never waited for, a device never opened as one); throws FormatError(path, "file", ...) with
// FieldReader::open's messages otherwise.  The descriptor (O_CLOEXEC, numbered 10 or above so that
// a helper's descriptor set-up cannot overwrite it) belongs to the caller.
int open_user_file_descriptor(const std::string& path);

// The FormatError of an open that failed only because this process (EMFILE) or the system (ENFILE)
// has no file descriptor left: a batch of files can then go on with fewer open at once.
class DescriptorsExhausted : public FormatError {
public:
    DescriptorsExhausted(const std::string& path, const std::string& what) : FormatError(path, "file", what) {}
};

class FieldReader {
public:
    // Reads the file at `path`; with `fd` (open_user_file_descriptor's) the file open on it instead
    // (h5::File::open_read_descriptor), the same file however the path changed since (renamed over),
    // named `path` in every message.
    explicit FieldReader(std::string path, int fd = -1) : path_(std::move(path)), fd_(fd) {}
    const std::string& path() const { return path_; }

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw FormatError(path_, field, what);
    }
    void require(bool ok, const std::string& field, const std::string& what) const {
        if (!ok) fail(field, what);
    }

    // Opens the file read-only: it must exist and be a regular file that HDF5 can open.
    h5::File open() const;

    // Runs `body`, converting HDF5 errors into FormatError for `field`.
    template <class F>
    auto guarded(const std::string& field, F&& body) const {
        try {
            return body();
        } catch (const h5::Error& e) {
            fail(field, std::string("cannot be read: ") + e.what());
        }
    }

    // Attributes -------------------------------------------------------------------------------
    void require_attribute(const h5::Location& loc, const std::string& name, const std::string& field) const;
    bool has_attribute(const h5::Location& loc, const std::string& name, const std::string& field) const;
    std::int64_t integer(const h5::Location& loc, const std::string& name, const std::string& field,
                         std::int64_t lo, std::int64_t hi) const;
    bool flag(const h5::Location& loc, const std::string& name, const std::string& field) const {
        return integer(loc, name, field, 0, 1) != 0;
    }
    std::string text(const h5::Location& loc, const std::string& name, const std::string& field) const;
    std::vector<std::string> texts(const h5::Location& loc, const std::string& name, const std::string& field) const;
    // A 1-D integer attribute of exactly `n` entries.
    std::vector<std::int64_t> integers(const h5::Location& loc, const std::string& name, const std::string& field,
                                       std::size_t n) const;
    // The root attributes "format" and "format_version".
    void check_format(const h5::Location& root, const std::string& format, int version) const {
        check_format(root, format, version, version);
    }
    // The same for a reader of versions oldest..newest; returns the file's version.
    int check_format(const h5::Location& root, const std::string& format, int oldest, int newest) const;
    // A string that must be valid UTF-8 (names, descriptions), checked with the field named.
    void require_utf8(const std::string& value, const std::string& field) const;

    // Links and datasets -----------------------------------------------------------------------
    // Whether `name` exists in `loc` as a hard link (any other kind of link is an error).
    bool has_link(const h5::Location& loc, const std::string& name, const std::string& field) const;
    h5::Location group(const h5::Location& loc, const std::string& name, const std::string& field) const;
    // Names in a group, in creation order; each must be a hard link with a UTF-8 name.
    std::vector<std::string> children(const h5::Location& group, const std::string& field) const;
    // Opens a dataset and checks its element type with `type_ok`.
    h5::Dataset dataset(const h5::Location& loc, const std::string& name, const std::string& field,
                        bool (*type_ok)(const h5::TypeInfo&), const std::string& expected_type) const;
    h5::Dims dims(const h5::Dataset& ds, const std::string& field) const;
    // Reads a whole dataset converted to T, after checking that the file stores all of it and
    // that it fits in memory.
    template <class T>
    std::vector<T> read(const h5::Dataset& ds, const std::string& field) const {
        check_readable(ds, field, sizeof(T));
        return guarded(field, [&] { return ds.read<T>(); });
    }
    // The same checks as read(), with the data read into the memory `place(count)` returns (a
    // T[count] that is not a vector: a memory file's mapping), so it is never zero-filled or copied.
    template <class T, class Place>
    void read_into(const h5::Dataset& ds, const std::string& field, Place&& place) const {
        const std::uint64_t count = check_readable(ds, field, sizeof(T));
        T* out = place(count);
        if (count > 0)
            guarded(field, [&] {
                return h5::check(H5Dread(ds.id(), h5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), "H5Dread");
            });
    }
    // Elements of `ds`, refusing data stored elsewhere, claimed but not stored, or too large: what
    // read() checks before it reads, for a reader that checks a dataset and leaves its values unread.
    std::uint64_t check_readable(const h5::Dataset& ds, const std::string& field, std::size_t element_bytes) const;
    // A dataset of variable- or fixed-length strings (1-D), each checked for UTF-8.
    std::vector<std::string> read_strings(const h5::Dataset& ds, const std::string& field) const;

private:
    struct OpenAttribute;
    OpenAttribute open_attribute(const h5::Location& loc, const std::string& name, const std::string& field) const;

    std::string path_;
    int fd_ = -1;
};

}  // namespace aimcemu
