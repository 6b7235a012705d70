// Reading untrusted HDF5 files field by field: see field_reader.hpp.
#include "formats/field_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace aimcemu {

namespace {
// Bytes of the UTF-8 sequence a lead byte starts (0: not a lead byte).
std::size_t utf8_sequence_length(unsigned char lead) {
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 0;
}
}  // namespace

std::string printable(std::string_view text) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        const auto byte = static_cast<unsigned char>(text[i]);
        std::size_t length = byte < 0x80 ? 1 : utf8_sequence_length(byte);
        std::size_t bad_at = 0;
        const bool keep = byte < 0x80 ? byte >= 0x20 && byte != 0x7f
                                      : length > 0 && i + length <= text.size() &&
                                            valid_utf8(text.substr(i, length), bad_at);
        if (keep) {
            out.append(text.substr(i, length));
        } else {
            out += "\\x";
            out += hex[byte >> 4];
            out += hex[byte & 15];
            length = 1;
        }
        i += length;
    }
    return out;
}

bool valid_utf8(std::string_view text, std::size_t& bad_at) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        std::size_t length = 0;
        std::uint32_t code = 0, minimum = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            length = 2, code = c & 0x1F, minimum = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            length = 3, code = c & 0x0F, minimum = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            length = 4, code = c & 0x07, minimum = 0x10000;
        } else {
            bad_at = i;
            return false;
        }
        if (i + length > n) {
            bad_at = i;
            return false;
        }
        for (std::size_t k = 1; k < length; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) {
                bad_at = i;
                return false;
            }
            code = (code << 6) | (s[i + k] & 0x3F);
        }
        if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
            bad_at = i;
            return false;
        }
        i += length;
    }
    return true;
}

std::uint64_t physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return std::numeric_limits<std::uint64_t>::max();
    return std::uint64_t(pages) * std::uint64_t(page);
}

std::string dims_text(const h5::Dims& dims) {
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

bool is_int8(const h5::TypeInfo& t) { return t.type_class == H5T_INTEGER && t.size == 1 && t.is_signed; }
bool is_integer(const h5::TypeInfo& t) { return t.type_class == H5T_INTEGER; }
bool is_float(const h5::TypeInfo& t) { return t.type_class == H5T_FLOAT; }
bool is_number(const h5::TypeInfo& t) { return is_integer(t) || is_float(t); }

std::string byte_text(unsigned char b) {
    const char* hex = "0123456789abcdef";
    return std::string("0x") + hex[b >> 4] + hex[b & 15];
}

namespace {

std::string gib_text(long double bytes) {
    const long double gib = bytes / (1024.0L * 1024.0L * 1024.0L);
    char text[64];
    std::snprintf(text, sizeof(text), "%.3Lg GiB", gib);
    return text;
}

// zlib's deflate cannot compress by more than about 1032:1; a little slack for chunk padding.
constexpr long double kDeflateMaxRatio = 1100.0L;

}  // namespace

namespace {

// A regular file, or the FormatError that says what `st` is instead.
void require_regular_file(const struct stat& st, const std::string& path) {
    if (!S_ISREG(st.st_mode))
        throw FormatError(path, "file", S_ISDIR(st.st_mode) ? "is a folder, not a file"
                                                            : "is not a regular file (a FIFO, device or socket)");
}

// The error of an open of `path` that failed with `error` (an errno): DescriptorsExhausted when this
// process (or the system) has no descriptor left, which says nothing about the file.
[[noreturn]] void cannot_open(const std::string& path, int error) {
    const std::string what = std::string("cannot be opened: ") + std::strerror(error);
    if (error == EMFILE || error == ENFILE) throw DescriptorsExhausted(path, what);
    throw FormatError(path, "file", what);
}

// A descriptor for reading the regular file that `named` (an O_PATH descriptor) names: reopened
// through /proc, whose link leads to that file object, not back to the path.  -1 when /proc is not
// mounted (errno ENOENT).
int reopen_for_reading(int named) {
    const std::string self_link = "/proc/self/fd/" + std::to_string(named);
    return ::open(self_link.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
}

// Without /proc: stat, then open.  Another file renamed over the path in between is opened
// (O_NONBLOCK: a FIFO is not waited for), then refused by fstat.
int open_after_stat(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw FormatError(path, "file", "no such file");
    require_regular_file(st, path);
    return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
}

}  // namespace

// The path is resolved once, by an O_PATH open that opens nothing: opening a device can act on it,
// and a FIFO would wait for a writer.  Only when that file is regular is it opened for reading, so a
// device or FIFO renamed over the path meanwhile is never opened.
int open_user_file_descriptor(const std::string& path) {
    const int named = ::open(path.c_str(), O_PATH | O_CLOEXEC);
    if (named < 0) {
        if (errno == ENOENT || errno == ENOTDIR) throw FormatError(path, "file", "no such file");
        cannot_open(path, errno);
    }
    struct stat st {};
    const bool regular = ::fstat(named, &st) == 0 && S_ISREG(st.st_mode);
    int opened = regular ? reopen_for_reading(named) : -1;
    const int open_errno = errno;
    ::close(named);
    if (!regular) {
        require_regular_file(st, path);
        throw FormatError(path, "file", "cannot be opened: fstat failed");
    }
    errno = open_errno;
    if (opened < 0 && errno == ENOENT) opened = open_after_stat(path);
    if (opened < 0) cannot_open(path, errno);
    // Numbers from 10 up: the checking process's protocol gives descriptors 3 and up their own meaning.
    const int fd = ::fcntl(opened, F_DUPFD_CLOEXEC, 10);
    const int dup_errno = errno;
    ::close(opened);
    if (fd < 0) cannot_open(path, dup_errno);
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        require_regular_file(st, path);
        throw FormatError(path, "file", "cannot be opened: fstat failed");
    }
    return fd;
}

h5::File FieldReader::open() const {
    struct stat st {};
    if (fd_ < 0 ? ::stat(path_.c_str(), &st) != 0 : ::fstat(fd_, &st) != 0) fail("file", "no such file");
    require(S_ISREG(st.st_mode), "file",
            S_ISDIR(st.st_mode) ? "is a folder, not a file" : "is not a regular file (a FIFO, device or socket)");
    try {
        return fd_ < 0 ? h5::File::open_read(path_) : h5::File::open_read_descriptor(fd_, path_);
    } catch (const h5::Error& e) {
        fail("file", std::string("not a readable HDF5 file (truncated or corrupt?): ") + e.what());
    }
}

void FieldReader::require_utf8(const std::string& value, const std::string& field) const {
    std::size_t bad_at = 0;
    if (!valid_utf8(value, bad_at))
        fail(field, "not valid UTF-8 (byte " + byte_text(static_cast<unsigned char>(value[bad_at])) + " at position " +
                        std::to_string(bad_at) + ")");
}

bool FieldReader::has_attribute(const h5::Location& loc, const std::string& name, const std::string& field) const {
    return guarded(field, [&] { return loc.has_attribute(name); });
}

void FieldReader::require_attribute(const h5::Location& loc, const std::string& name, const std::string& field) const {
    require(has_attribute(loc, name, field), field, "missing attribute");
}

// One attribute opened once, with its type and shape (numbers are read through this: the
// generic h5 accessors open an attribute for every question, which made loading slow).
struct FieldReader::OpenAttribute {
    h5::Handle attr;
    h5::TypeInfo type;
    h5::Dims dims;
};

FieldReader::OpenAttribute FieldReader::open_attribute(const h5::Location& loc, const std::string& name,
                                                       const std::string& field) const {
    require_attribute(loc, name, field);
    return guarded(field, [&] {
        OpenAttribute a;
        a.attr = h5::Handle(h5::check(H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
        const h5::Handle type(h5::check(H5Aget_type(a.attr.id()), "H5Aget_type " + name));
        a.type.type_class = H5Tget_class(type.id());
        a.type.size = H5Tget_size(type.id());
        a.type.is_string = a.type.type_class == H5T_STRING;
        if (a.type.type_class == H5T_INTEGER) a.type.is_signed = H5Tget_sign(type.id()) == H5T_SGN_2;
        const h5::Handle space(h5::check(H5Aget_space(a.attr.id()), "H5Aget_space " + name));
        const int rank = int(h5::check(H5Sget_simple_extent_ndims(space.id()), "H5Sget_simple_extent_ndims"));
        a.dims.assign(std::size_t(rank), 0);
        if (rank > 0) h5::check(H5Sget_simple_extent_dims(space.id(), a.dims.data(), nullptr), "H5Sget_simple_extent_dims");
        return a;
    });
}

std::int64_t FieldReader::integer(const h5::Location& loc, const std::string& name, const std::string& field,
                                  std::int64_t lo, std::int64_t hi) const {
    const OpenAttribute a = open_attribute(loc, name, field);
    require(a.type.type_class == H5T_INTEGER, field, "expected an integer, found " + a.type.describe());
    require(a.dims.empty(), field, "expected a scalar, found an array");
    // HDF5 clips a uint64 above 2^63 - 1 to that value when converting: still out of any range.
    std::int64_t v = 0;
    guarded(field, [&] { return h5::check(H5Aread(a.attr.id(), H5T_NATIVE_INT64, &v), "H5Aread " + name); });
    require(v >= lo && v <= hi, field,
            "value " + std::to_string(v) + " outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return v;
}

std::string FieldReader::text(const h5::Location& loc, const std::string& name, const std::string& field) const {
    const OpenAttribute a = open_attribute(loc, name, field);
    require(a.type.is_string, field, "expected a string, found " + a.type.describe());
    require(a.dims.empty(), field, "expected one string, found an array");
    std::string value = guarded(field, [&] { return loc.read_attribute_string(name); });
    require_utf8(value, field);
    return value;
}

std::vector<std::string> FieldReader::texts(const h5::Location& loc, const std::string& name,
                                            const std::string& field) const {
    const OpenAttribute a = open_attribute(loc, name, field);
    require(a.type.is_string, field, "expected strings, found " + a.type.describe());
    require(a.dims.size() == 1, field, "expected a 1-D array of strings");
    std::vector<std::string> values = guarded(field, [&] { return loc.read_attribute_strings(name); });
    for (std::size_t i = 0; i < values.size(); ++i) require_utf8(values[i], field + "[" + std::to_string(i) + "]");
    return values;
}

std::vector<std::int64_t> FieldReader::integers(const h5::Location& loc, const std::string& name,
                                                const std::string& field, std::size_t n) const {
    const OpenAttribute a = open_attribute(loc, name, field);
    require(a.type.type_class == H5T_INTEGER, field, "expected integers, found " + a.type.describe());
    require(a.dims.size() == 1 && a.dims[0] == n, field, "expected " + std::to_string(n) + " integers");
    std::vector<std::int64_t> values(std::max<std::size_t>(n, 1));
    guarded(field, [&] { return h5::check(H5Aread(a.attr.id(), H5T_NATIVE_INT64, values.data()), "H5Aread " + name); });
    values.resize(n);
    return values;
}

int FieldReader::check_format(const h5::Location& root, const std::string& format, int oldest, int newest) const {
    const std::string found = text(root, "format", "format");
    require(found == format, "format", "expected '" + format + "', found '" + found + "'");
    const std::int64_t v = integer(root, "format_version", "format_version", std::numeric_limits<std::int64_t>::min(),
                                   std::numeric_limits<std::int64_t>::max());
    const std::string readable = oldest == newest ? "version " + std::to_string(newest)
                                                  : "versions " + std::to_string(oldest) + ".." + std::to_string(newest);
    require(v >= oldest && v <= newest, "format_version",
            "this build reads " + readable + ", the file is version " + std::to_string(v) +
                (v > newest ? " (written by a newer aimcemu)" : ""));
    return int(v);
}

bool FieldReader::has_link(const h5::Location& loc, const std::string& name, const std::string& field) const {
    if (!guarded(field, [&] { return loc.has_link(name); })) return false;
    H5L_info_t info{};
    guarded(field, [&] { return h5::check(H5Lget_info(loc.id(), name.c_str(), &info, H5P_DEFAULT), "H5Lget_info " + name); });
    require(info.type == H5L_TYPE_HARD, field,
            info.type == H5L_TYPE_EXTERNAL ? "is an external link to another file (not allowed)"
                                           : "is a soft or user-defined link (not allowed)");
    return true;
}

h5::Location FieldReader::group(const h5::Location& loc, const std::string& name, const std::string& field) const {
    require(has_link(loc, name, field), field, "missing group");
    return guarded(field, [&] { return loc.open_group(name); });
}

std::vector<std::string> FieldReader::children(const h5::Location& group, const std::string& field) const {
    const std::vector<std::string> names = guarded(field, [&] { return group.children_in_creation_order(); });
    for (const auto& name : names) {
        std::size_t bad_at = 0;
        if (!valid_utf8(name, bad_at)) {
            fail(field + "/" + printable(name), "the name is not valid UTF-8 (byte " +
                                          byte_text(static_cast<unsigned char>(name[bad_at])) + " at position " +
                                          std::to_string(bad_at) + ")");
        }
        has_link(group, name, field + "/" + name);
    }
    return names;
}

h5::Dataset FieldReader::dataset(const h5::Location& loc, const std::string& name, const std::string& field,
                                 bool (*type_ok)(const h5::TypeInfo&), const std::string& expected_type) const {
    require(has_link(loc, name, field), field, "missing dataset");
    h5::Dataset ds = guarded(field, [&] { return loc.open_dataset(name); });
    const h5::TypeInfo t = guarded(field, [&] { return ds.type(); });
    require(type_ok(t), field, "expected " + expected_type + ", found " + t.describe());
    return ds;
}

h5::Dims FieldReader::dims(const h5::Dataset& ds, const std::string& field) const {
    return guarded(field, [&] { return ds.dims(); });
}

std::uint64_t FieldReader::check_readable(const h5::Dataset& ds, const std::string& field,
                                          std::size_t element_bytes) const {
    const h5::Dims d = dims(ds, field);
    long double elements = 1;
    for (auto n : d) elements *= static_cast<long double>(n);
    if (elements == 0) return 0;

    h5::Handle dcpl(guarded(field, [&] { return h5::check(H5Dget_create_plist(ds.id()), "H5Dget_create_plist"); }));
    const H5D_layout_t layout = H5Pget_layout(dcpl.id());
    require(layout == H5D_COMPACT || layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED, field,
            "its data is not stored in this file (a virtual dataset or an unknown layout)");
    require(H5Pget_external_count(dcpl.id()) == 0, field, "its data lives in external files (not allowed)");
    bool deflated = false;
    const int filters = H5Pget_nfilters(dcpl.id());
    require(filters >= 0, field, "cannot read its filter pipeline");
    for (int i = 0; i < filters; ++i) {
        unsigned flags = 0, config = 0;
        std::size_t n_values = 0;
        const H5Z_filter_t filter = H5Pget_filter2(dcpl.id(), unsigned(i), &flags, &n_values, nullptr, 0, nullptr, &config);
        require(filter == H5Z_FILTER_DEFLATE || filter == H5Z_FILTER_SHUFFLE || filter == H5Z_FILTER_FLETCHER32, field,
                "compressed with HDF5 filter " + std::to_string(filter) + "; only deflate (gzip), shuffle and "
                "fletcher32 are read");
        deflated = deflated || filter == H5Z_FILTER_DEFLATE;
    }

    const h5::TypeInfo stored_type = guarded(field, [&] { return ds.type(); });
    const long double stored_logical = elements * static_cast<long double>(stored_type.size);
    const long double stored = static_cast<long double>(H5Dget_storage_size(ds.id()));
    hsize_t file_size = 0;
    guarded(field, [&] {
        h5::Handle file(h5::check(H5Iget_file_id(ds.id()), "H5Iget_file_id"));
        return h5::check(H5Fget_filesize(file.id(), &file_size), "H5Fget_filesize");
    });
    const long double ratio = deflated ? kDeflateMaxRatio : 1.0L;
    require(stored <= static_cast<long double>(file_size) && stored * ratio >= stored_logical, field,
            "shape " + dims_text(d) + " needs " + std::to_string(static_cast<unsigned long long>(stored_logical)) +
                " bytes but the file stores " + std::to_string(static_cast<unsigned long long>(stored)) +
                " (missing data: truncated or corrupt)");

    const long double in_memory = elements * static_cast<long double>(element_bytes);
    const long double memory = static_cast<long double>(physical_memory_bytes());
    require(in_memory <= memory, field,
            "shape " + dims_text(d) + " needs " + gib_text(in_memory) + " in memory, more than this machine's " +
                gib_text(memory));
    return static_cast<std::uint64_t>(elements);
}

std::vector<std::string> FieldReader::read_strings(const h5::Dataset& ds, const std::string& field) const {
    const h5::Dims d = dims(ds, field);
    require(d.size() == 1, field, "expected a 1-D array of strings, found shape " + dims_text(d));
    check_readable(ds, field, sizeof(char*) + 16);
    std::vector<std::string> values = guarded(field, [&] {
        h5::Handle stored(h5::check(H5Dget_type(ds.id()), "H5Dget_type"));
        std::vector<std::string> out;
        const std::size_t n = std::size_t(d[0]);
        if (n == 0) return out;
        if (H5Tis_variable_str(stored.id()) > 0) {
            h5::Handle mem(h5::check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
            h5::check(H5Tset_size(mem.id(), H5T_VARIABLE), "H5Tset_size");
            h5::check(H5Tset_cset(mem.id(), H5T_CSET_UTF8), "H5Tset_cset");
            std::vector<char*> raw(n, nullptr);
            h5::check(H5Dread(ds.id(), mem.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), "H5Dread");
            for (char* p : raw) out.emplace_back(p ? p : "");
            h5::Handle space(h5::check(H5Dget_space(ds.id()), "H5Dget_space"));
            H5Dvlen_reclaim(mem.id(), space.id(), H5P_DEFAULT, raw.data());
        } else {
            const std::size_t length = H5Tget_size(stored.id());
            std::vector<char> raw(length * n + 1, '\0');
            h5::Handle mem(h5::check(H5Tcopy(stored.id()), "H5Tcopy"));
            h5::check(H5Dread(ds.id(), mem.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), "H5Dread");
            for (std::size_t i = 0; i < n; ++i) {
                std::string s(raw.data() + i * length, length);
                s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
                out.push_back(s);
            }
        }
        return out;
    });
    for (std::size_t i = 0; i < values.size(); ++i) require_utf8(values[i], field + "[" + std::to_string(i) + "]");
    return values;
}

}  // namespace aimcemu
