// A small RAII layer over the HDF5 C API, used by the model file and the results writer.
//
// Why not HDF5's C++ API: it is not thread-safe and hides the numbered calls.  Debian's HDF5 1.10
// maps unversioned names to the 1.8 API, so everything here calls the numbered names
// (H5Dcreate2, H5Acreate2, H5Gcreate2, ...); H5Literate has one version in 1.10.
//
// Every HDF5 failure becomes an h5::Error carrying HDF5's own error-stack text; HDF5's automatic
// printing to stderr is switched off.  Handles are move-only and close themselves.  Files are
// written atomically through AtomicFile: into a temporary file in the target folder, renamed over
// the target only on commit(), removed on any failure, so no half-written file is ever visible.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace aimcemu::h5 {

// An HDF5 failure; what() holds the call that failed and HDF5's error stack.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Turns off HDF5's automatic error printing for the calling thread (error stacks are per thread
// in a thread-safe build), once per thread.  Every File open/create, dataset creation, write,
// read and close calls it, so a thread that only writes into a file another thread opened (the
// results writer's) is silenced too; after the first call it is one thread-local test.
void silence_error_printing();

// Throws h5::Error for a negative HDF5 return value (hid_t or herr_t), with the error stack.
std::int64_t check(std::int64_t result, const std::string& what);

// One owned HDF5 identifier of any kind, closed with H5Idec_ref.  Move-only.
class Handle {
public:
    Handle() = default;
    explicit Handle(hid_t id) : id_(id) {}
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
    Handle& operator=(Handle&& other) noexcept {
        if (this != &other) {
            reset();
            id_ = std::exchange(other.id_, H5I_INVALID_HID);
        }
        return *this;
    }
    ~Handle() { reset(); }

    hid_t id() const { return id_; }
    bool valid() const { return id_ >= 0; }
    void reset();
    hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }  // gives up ownership

private:
    hid_t id_ = H5I_INVALID_HID;
};

// The HDF5 memory type of a C++ scalar type.
template <class T> hid_t native_type();
template <> inline hid_t native_type<std::int8_t>() { return H5T_NATIVE_INT8; }
template <> inline hid_t native_type<std::uint8_t>() { return H5T_NATIVE_UINT8; }
template <> inline hid_t native_type<std::int16_t>() { return H5T_NATIVE_INT16; }
template <> inline hid_t native_type<std::int32_t>() { return H5T_NATIVE_INT32; }
template <> inline hid_t native_type<std::int64_t>() { return H5T_NATIVE_INT64; }
template <> inline hid_t native_type<std::uint64_t>() { return H5T_NATIVE_UINT64; }
template <> inline hid_t native_type<float>() { return H5T_NATIVE_FLOAT; }
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }

// What a stored dataset or attribute holds, for validation before reading.
struct TypeInfo {
    H5T_class_t type_class = H5T_NO_CLASS;
    std::size_t size = 0;          // bytes per element
    bool is_signed = false;        // integers only
    bool is_string = false;
    std::string describe() const;  // e.g. "int8", "float32", "uint16", "string"
};

using Dims = std::vector<hsize_t>;

// How a dataset is stored.  chunk empty = contiguous; deflate 0 = no compression.
struct Storage {
    Dims chunk;
    int deflate = 0;
};

// Picks a chunk shape for an array of `dims` with `element_size` bytes: whole trailing axes are
// kept together, leading axes cut, so that a chunk holds about `target_bytes` (clamped to the
// array, and at least one element per axis).
Dims choose_chunk(const Dims& dims, std::size_t element_size, std::size_t target_bytes = 256 * 1024);

class Dataset;

// A group or a file (both are locations that hold groups, datasets and attributes).
class Location {
public:
    Location() = default;
    explicit Location(Handle h) : handle_(std::move(h)) {}
    hid_t id() const { return handle_.id(); }

    // Groups track link creation order, so they list in the order they were written.
    Location create_group(const std::string& name) const;
    Location open_group(const std::string& name) const;
    bool has_link(const std::string& name) const;
    void remove_link(const std::string& name) const;
    void remove_attribute(const std::string& name) const;
    // Names of child links in creation order (throws if the group does not track it).
    std::vector<std::string> children_in_creation_order() const;

    template <class T>
    Dataset write_dataset(const std::string& name, const Dims& dims, const T* data, const Storage& storage = {}) const;
    Dataset create_dataset(const std::string& name, hid_t file_type, const Dims& dims, const Storage& storage) const;
    Dataset open_dataset(const std::string& name) const;

    // Attributes: numbers in a scalar dataspace, strings as variable-length UTF-8.
    bool has_attribute(const std::string& name) const;
    template <class T> void write_attribute(const std::string& name, T value) const;
    void write_attribute(const std::string& name, const std::string& value) const;
    void write_attribute(const std::string& name, const char* value) const { write_attribute(name, std::string(value)); }
    template <class T> void write_attribute_array(const std::string& name, const std::vector<T>& values) const;
    void write_attribute_strings(const std::string& name, const std::vector<std::string>& values) const;

    TypeInfo attribute_type(const std::string& name) const;
    Dims attribute_dims(const std::string& name) const;  // empty for a scalar
    std::int64_t read_attribute_int(const std::string& name) const;    // any integer type
    double read_attribute_double(const std::string& name) const;       // any integer or float type
    std::string read_attribute_string(const std::string& name) const;  // scalar string
    std::vector<std::int64_t> read_attribute_ints(const std::string& name) const;
    std::vector<std::string> read_attribute_strings(const std::string& name) const;

protected:
    Handle handle_;
};

class Dataset : public Location {
public:
    using Location::Location;
    Dims dims() const;
    TypeInfo type() const;
    // Reads the whole dataset converted to T (HDF5 converts; callers check type() first when the
    // stored type matters).
    template <class T> std::vector<T> read() const;
    template <class T> void write(const T* data) const;
    // Writes one hyperslab: `start` and `count` per axis.
    template <class T> void write_slab(const Dims& start, const Dims& count, const T* data) const;
    // Dimension scales (HDF5 high-level API): makes this dataset a scale named `name`, or
    // attaches `scale` to axis `axis` of this dataset.
    void make_scale(const std::string& name) const;
    void attach_scale(const Dataset& scale, unsigned axis) const;
};

class File : public Location {
public:
    static File create(const std::string& path, bool exclusive = false);  // truncates unless exclusive
    // A new file that lives in memory only (HDF5's core driver, no backing store), for building
    // a file image (image()) that written files then start from.  `name` only labels it.
    static File create_in_memory(const std::string& name);
    static File open_read(const std::string& path);
    // Read-only, the file open on descriptor `fd` (the caller keeps it open while the File lives),
    // named `name` in errors: whatever `name` names now, this reads the file `fd` has open.
    static File open_read_descriptor(int fd, const std::string& name);
    static File open_write(const std::string& path);  // modify in place (tests, tools)
    void close();  // explicit close that reports errors (the destructor cannot)
    // The file's bytes as they would be on disk now (flushed first): an in-memory file's image.
    std::vector<unsigned char> image() const;
};

// Writes `path` atomically: file() is a temporary file in the same folder; commit() closes it and
// renames it over `path`; destruction without commit() removes the temporary file.  Only a
// regular file is ever replaced (a folder, device, FIFO or socket at `path` is refused before
// anything is written), and with replace = false not even that: commit() then fails if `path`
// exists, leaving it untouched.  Creating one also removes the stale temporary files of killed
// writers from the folder (common/temp_files.hpp).
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path, bool replace = true);
    // The same, with the temporary file starting as a copy of the bytes `image()` returns (a whole
    // HDF5 file, e.g. File::image() of an in-memory file), opened for writing: what the image
    // holds is not built again.  `image` is called only once the temporary file exists: a path that
    // is refused (a folder, a missing or read-only folder) costs no image.
    using Image = std::shared_ptr<const std::vector<unsigned char>>;
    AtomicFile(const std::string& path, bool replace, const std::function<Image()>& image);
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();
    File& file() { return file_; }
    const std::string& temp_path() const { return temp_path_; }
    void commit();

private:
    void check_target() const;  // refuses a folder or a special file at path_; clears stale temporaries
    std::string path_, temp_path_;
    File file_;
    bool replace_ = true;
    bool committed_ = false;
};

// ---- template definitions ----

template <class T>
Dataset Location::write_dataset(const std::string& name, const Dims& dims, const T* data, const Storage& storage) const {
    Dataset ds = create_dataset(name, native_type<T>(), dims, storage);
    std::size_t n = 1;
    for (auto d : dims) n *= d;
    if (n > 0) ds.write(data);
    return ds;
}

template <class T>
void Location::write_attribute(const std::string& name, T value) const {
    silence_error_printing();
    Handle space(check(H5Screate(H5S_SCALAR), "H5Screate"));
    Handle attr(check(H5Acreate2(id(), name.c_str(), native_type<T>(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                      "H5Acreate2 " + name));
    check(H5Awrite(attr.id(), native_type<T>(), &value), "H5Awrite " + name);
}

template <class T>
void Location::write_attribute_array(const std::string& name, const std::vector<T>& values) const {
    silence_error_printing();
    const hsize_t n = values.size();
    Handle space(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
    Handle attr(check(H5Acreate2(id(), name.c_str(), native_type<T>(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                      "H5Acreate2 " + name));
    check(H5Awrite(attr.id(), native_type<T>(), values.data()), "H5Awrite " + name);
}

template <class T>
std::vector<T> Dataset::read() const {
    silence_error_printing();
    std::size_t n = 1;
    for (auto d : dims()) n *= d;
    std::vector<T> out(n);
    if (n > 0) check(H5Dread(id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "H5Dread");
    return out;
}

template <class T>
void Dataset::write(const T* data) const {
    silence_error_printing();
    check(H5Dwrite(id(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dwrite");
}

template <class T>
void Dataset::write_slab(const Dims& start, const Dims& count, const T* data) const {
    silence_error_printing();
    Handle file_space(check(H5Dget_space(id()), "H5Dget_space"));
    check(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
          "H5Sselect_hyperslab");
    Handle mem_space(check(H5Screate_simple(int(count.size()), count.data(), nullptr), "H5Screate_simple"));
    check(H5Dwrite(id(), native_type<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, data), "H5Dwrite slab");
}

}  // namespace aimcemu::h5
