// RAII layer over the HDF5 C API: see h5.hpp.
#include "common/h5.hpp"
#include "common/temp_files.hpp"

#include <fcntl.h>
#include <hdf5_hl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <map>
#include <mutex>

namespace aimcemu::h5 {

namespace {

struct ErrorStack {
    std::string system_error;  // the operating system's message, when a file operation failed
    std::string calls;         // "function: description" of each level, outermost first
};

// Collects the current thread's error stack.  The file drivers put the whole errno report into
// one description ("... errno = 28, error message = 'No space left on device', buf = ...");
// only the operating system's message is kept from it, so that the error a user sees says
// "No space left on device" instead of a page of addresses, offsets and nested calls.
herr_t collect_error(unsigned, const H5E_error2_t* err, void* client) {
    auto* stack = static_cast<ErrorStack*>(client);
    std::string desc = err->desc ? err->desc : "";
    const std::string marker = "error message = '";
    if (const auto at = desc.find(marker); at != std::string::npos) {
        const auto begin = at + marker.size();
        if (stack->system_error.empty()) stack->system_error = desc.substr(begin, desc.find('\'', begin) - begin);
        desc = desc.substr(0, desc.find(':'));  // "file write failed"
    }
    if (!stack->calls.empty()) stack->calls += "; ";
    stack->calls += (err->func_name ? err->func_name : "?") + std::string(": ") + desc;
    return 0;
}

std::string error_stack_text() {
    ErrorStack stack;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &stack);
    H5Eclear2(H5E_DEFAULT);
    if (stack.system_error.empty()) return stack.calls;
    // A failed file operation: the system's reason and where HDF5 noticed it are enough.
    return stack.system_error + "; HDF5: " + stack.calls.substr(0, stack.calls.find("; "));
}

// HDF5 1.10.8 crashes in its own exit handler (H5_term_library -> H5D_close, SIGSEGV) when a
// file whose H5Fclose failed is still registered, which is what a full disk leaves behind: the
// close cannot flush, so the file stays open.  We close every file explicitly and report the
// failure, so the library's exit-time cleanup has nothing to do for us; switching it off (before
// any other HDF5 call, hence at load time) turns a clean error message followed by exit code
// 139 into a clean error.  h5py carries its own copy of libhdf5 and is not affected.
const bool kNoExitCleanup = [] {
    H5dont_atexit();
    return true;
}();

}  // namespace

void silence_error_printing() {
    (void)kNoExitCleanup;
    // A thread-safe libhdf5 (Debian's) keeps the printing switch per thread: every thread that
    // calls the library turns it off once (the results writer runs on a thread of its own).
    thread_local bool silenced = false;
    if (silenced) return;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
}

std::int64_t check(std::int64_t result, const std::string& what) {
    if (result < 0) {
        const std::string stack = error_stack_text();
        throw Error(what + " failed" + (stack.empty() ? "" : " (" + stack + ")"));
    }
    return result;
}

namespace {

// Closing a dataset writes its cached chunks, so it can fail (a full disk), and a destructor cannot
// throw.  Such a failure is remembered here under the file's name and reported by the commit of
// that file (AtomicFile::commit), which would otherwise close a file that lost data without an
// error.  Only failures are stored, so the map stays empty in normal use.
std::mutex failed_close_mutex;
std::map<std::string, std::string> failed_close_by_file;

std::string file_name_of(hid_t id) {
    const ssize_t length = H5Fget_name(id, nullptr, 0);
    if (length <= 0) return {};
    std::string name(std::size_t(length) + 1, '\0');
    H5Fget_name(id, name.data(), name.size());
    name.resize(std::size_t(length));
    return name;
}

void remember_failed_close(const std::string& file, const std::string& what) {
    const std::lock_guard<std::mutex> lock(failed_close_mutex);
    failed_close_by_file.emplace(file, what);
}

// The first failed close recorded for `file`, or "" (and forgets it).
std::string take_failed_close(const std::string& file) {
    const std::lock_guard<std::mutex> lock(failed_close_mutex);
    const auto it = failed_close_by_file.find(file);
    if (it == failed_close_by_file.end()) return {};
    std::string what = std::move(it->second);
    failed_close_by_file.erase(it);
    return what;
}

}  // namespace

void Handle::reset() {
    if (id_ < 0) return;
    silence_error_printing();  // closing a dataset flushes it, and can fail on a full disk
    // Only a dataset holds unwritten data when it is closed; name its file before closing it.
    const std::string file = H5Iget_type(id_) == H5I_DATASET ? file_name_of(id_) : std::string();
    if (H5Idec_ref(id_) < 0) {
        const std::string stack = error_stack_text();
        if (!file.empty()) remember_failed_close(file, "closing a dataset failed (" + stack + ")");
    }
    id_ = H5I_INVALID_HID;
}

std::string TypeInfo::describe() const {
    switch (type_class) {
        case H5T_INTEGER: return std::string(is_signed ? "int" : "uint") + std::to_string(8 * size);
        case H5T_FLOAT: return "float" + std::to_string(8 * size);
        case H5T_STRING: return "string";
        default: return "HDF5 type class " + std::to_string(int(type_class));
    }
}

namespace {

TypeInfo describe_type(hid_t type) {
    TypeInfo info;
    info.type_class = H5Tget_class(type);
    info.size = H5Tget_size(type);
    info.is_string = info.type_class == H5T_STRING;
    if (info.type_class == H5T_INTEGER) info.is_signed = H5Tget_sign(type) == H5T_SGN_2;
    return info;
}

Dims space_dims(hid_t space) {
    const int rank = int(check(H5Sget_simple_extent_ndims(space), "H5Sget_simple_extent_ndims"));
    Dims dims(std::size_t(rank), 0);
    if (rank > 0) check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "H5Sget_simple_extent_dims");
    return dims;
}

Handle utf8_string_type() {
    Handle type(check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
    check(H5Tset_size(type.id(), H5T_VARIABLE), "H5Tset_size");
    check(H5Tset_cset(type.id(), H5T_CSET_UTF8), "H5Tset_cset");
    return type;
}

// A group creation property list that tracks (and indexes) link creation order.
Handle ordered_group_plist(hid_t plist_class) {
    Handle plist(check(H5Pcreate(plist_class), "H5Pcreate"));
    check(H5Pset_link_creation_order(plist.id(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
          "H5Pset_link_creation_order");
    return plist;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* client) {
    static_cast<std::vector<std::string>*>(client)->emplace_back(name);
    return 0;
}

// Reads a variable- or fixed-length string attribute (scalar or 1-D) into strings.
std::vector<std::string> read_strings(hid_t attr, hid_t stored_type, std::size_t n) {
    std::vector<std::string> out;
    if (H5Tis_variable_str(stored_type) > 0) {
        Handle mem = utf8_string_type();
        std::vector<char*> raw(std::max<std::size_t>(n, 1), nullptr);
        check(H5Aread(attr, mem.id(), raw.data()), "H5Aread");
        for (std::size_t i = 0; i < n; ++i) out.emplace_back(raw[i] ? raw[i] : "");
        Handle space(check(H5Aget_space(attr), "H5Aget_space"));
        H5Dvlen_reclaim(mem.id(), space.id(), H5P_DEFAULT, raw.data());
    } else {
        const std::size_t len = H5Tget_size(stored_type);
        std::vector<char> raw(len * std::max<std::size_t>(n, 1) + 1, '\0');
        Handle mem(check(H5Tcopy(stored_type), "H5Tcopy"));
        check(H5Aread(attr, mem.id(), raw.data()), "H5Aread");
        for (std::size_t i = 0; i < n; ++i) {
            std::string s(raw.data() + i * len, len);
            s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
            out.push_back(s);
        }
    }
    return out;
}

std::size_t element_count(const Dims& dims) {
    std::size_t n = 1;
    for (auto d : dims) n *= d;
    return n;
}

}  // namespace

Dims choose_chunk(const Dims& dims, std::size_t element_size, std::size_t target_bytes) {
    Dims chunk(dims.size(), 1);
    std::size_t bytes = element_size;
    // Walk from the last axis: take whole axes while they fit, then a part of the next one.
    for (std::size_t i = dims.size(); i-- > 0;) {
        const hsize_t extent = std::max<hsize_t>(dims[i], 1);
        if (bytes * extent <= target_bytes) {
            chunk[i] = extent;
            bytes *= extent;
        } else {
            chunk[i] = std::max<hsize_t>(1, target_bytes / bytes);
            break;
        }
    }
    return chunk;
}

// ---- Location ----

Location Location::create_group(const std::string& name) const {
    silence_error_printing();
    Handle gcpl = ordered_group_plist(H5P_GROUP_CREATE);
    return Location(Handle(check(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, gcpl.id(), H5P_DEFAULT),
                                 "H5Gcreate2 " + name)));
}

Location Location::open_group(const std::string& name) const {
    return Location(Handle(check(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), "H5Gopen2 " + name)));
}

bool Location::has_link(const std::string& name) const {
    return check(H5Lexists(id(), name.c_str(), H5P_DEFAULT), "H5Lexists " + name) > 0;
}

void Location::remove_link(const std::string& name) const {
    check(H5Ldelete(id(), name.c_str(), H5P_DEFAULT), "H5Ldelete " + name);
}

void Location::remove_attribute(const std::string& name) const {
    check(H5Adelete(id(), name.c_str()), "H5Adelete " + name);
}

std::vector<std::string> Location::children_in_creation_order() const {
    std::vector<std::string> names;
    hsize_t index = 0;
    check(H5Literate(id(), H5_INDEX_CRT_ORDER, H5_ITER_INC, &index, collect_name, &names),
          "H5Literate (in creation order)");
    return names;
}

Dataset Location::create_dataset(const std::string& name, hid_t file_type, const Dims& dims,
                                 const Storage& storage) const {
    silence_error_printing();
    Handle space(check(H5Screate_simple(int(dims.size()), dims.data(), nullptr), "H5Screate_simple " + name));
    Handle dcpl(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
    // An empty dataset cannot be chunked with fixed dimensions; it stays contiguous.
    if (!storage.chunk.empty() && element_count(dims) > 0) {
        Dims chunk = storage.chunk;
        for (std::size_t i = 0; i < chunk.size() && i < dims.size(); ++i)
            chunk[i] = std::clamp<hsize_t>(chunk[i], 1, dims[i]);
        check(H5Pset_chunk(dcpl.id(), int(chunk.size()), chunk.data()), "H5Pset_chunk " + name);
        if (storage.deflate > 0) check(H5Pset_deflate(dcpl.id(), unsigned(storage.deflate)), "H5Pset_deflate");
    }
    return Dataset(Handle(check(H5Dcreate2(id(), name.c_str(), file_type, space.id(), H5P_DEFAULT, dcpl.id(),
                                           H5P_DEFAULT),
                                "H5Dcreate2 " + name)));
}

Dataset Location::open_dataset(const std::string& name) const {
    return Dataset(Handle(check(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), "H5Dopen2 " + name)));
}

bool Location::has_attribute(const std::string& name) const {
    return check(H5Aexists(id(), name.c_str()), "H5Aexists " + name) > 0;
}

void Location::write_attribute(const std::string& name, const std::string& value) const {
    silence_error_printing();
    Handle type = utf8_string_type();
    Handle space(check(H5Screate(H5S_SCALAR), "H5Screate"));
    Handle attr(check(H5Acreate2(id(), name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                      "H5Acreate2 " + name));
    const char* p = value.c_str();
    check(H5Awrite(attr.id(), type.id(), &p), "H5Awrite " + name);
}

void Location::write_attribute_strings(const std::string& name, const std::vector<std::string>& values) const {
    silence_error_printing();
    Handle type = utf8_string_type();
    const hsize_t n = values.size();
    Handle space(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
    Handle attr(check(H5Acreate2(id(), name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                      "H5Acreate2 " + name));
    std::vector<const char*> ptrs;
    for (const auto& v : values) ptrs.push_back(v.c_str());
    if (n > 0) check(H5Awrite(attr.id(), type.id(), ptrs.data()), "H5Awrite " + name);
}

TypeInfo Location::attribute_type(const std::string& name) const {
    Handle attr(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
    Handle type(check(H5Aget_type(attr.id()), "H5Aget_type " + name));
    return describe_type(type.id());
}

Dims Location::attribute_dims(const std::string& name) const {
    Handle attr(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
    Handle space(check(H5Aget_space(attr.id()), "H5Aget_space " + name));
    return space_dims(space.id());
}

std::vector<std::int64_t> Location::read_attribute_ints(const std::string& name) const {
    const TypeInfo t = attribute_type(name);
    if (t.type_class != H5T_INTEGER) throw Error("attribute " + name + " holds " + t.describe() + ", not integers");
    Handle attr(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
    std::vector<std::int64_t> out(std::max<std::size_t>(element_count(attribute_dims(name)), 1));
    check(H5Aread(attr.id(), H5T_NATIVE_INT64, out.data()), "H5Aread " + name);
    out.resize(element_count(attribute_dims(name)));
    return out;
}

std::int64_t Location::read_attribute_int(const std::string& name) const {
    if (!attribute_dims(name).empty()) throw Error("attribute " + name + " is an array, expected a scalar");
    return read_attribute_ints(name).at(0);
}

double Location::read_attribute_double(const std::string& name) const {
    const TypeInfo t = attribute_type(name);
    if (t.type_class != H5T_INTEGER && t.type_class != H5T_FLOAT)
        throw Error("attribute " + name + " holds " + t.describe() + ", not a number");
    if (!attribute_dims(name).empty()) throw Error("attribute " + name + " is an array, expected a scalar");
    Handle attr(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
    double value = 0;
    check(H5Aread(attr.id(), H5T_NATIVE_DOUBLE, &value), "H5Aread " + name);
    return value;
}

std::vector<std::string> Location::read_attribute_strings(const std::string& name) const {
    Handle attr(check(H5Aopen(id(), name.c_str(), H5P_DEFAULT), "H5Aopen " + name));
    Handle type(check(H5Aget_type(attr.id()), "H5Aget_type " + name));
    if (H5Tget_class(type.id()) != H5T_STRING)
        throw Error("attribute " + name + " holds " + describe_type(type.id()).describe() + ", not strings");
    Handle space(check(H5Aget_space(attr.id()), "H5Aget_space " + name));
    return read_strings(attr.id(), type.id(), element_count(space_dims(space.id())));
}

std::string Location::read_attribute_string(const std::string& name) const {
    if (!attribute_dims(name).empty()) throw Error("attribute " + name + " is an array, expected a scalar string");
    return read_attribute_strings(name).at(0);
}

// ---- Dataset ----

Dims Dataset::dims() const {
    Handle space(check(H5Dget_space(id()), "H5Dget_space"));
    return space_dims(space.id());
}

TypeInfo Dataset::type() const {
    Handle type(check(H5Dget_type(id()), "H5Dget_type"));
    return describe_type(type.id());
}

void Dataset::make_scale(const std::string& name) const { check(H5DSset_scale(id(), name.c_str()), "H5DSset_scale " + name); }

void Dataset::attach_scale(const Dataset& scale, unsigned axis) const {
    silence_error_printing();
    check(H5DSattach_scale(id(), scale.id(), axis), "H5DSattach_scale");
}

// ---- File ----

File File::create(const std::string& path, bool exclusive) {
    silence_error_printing();
    Handle fcpl = ordered_group_plist(H5P_FILE_CREATE);  // root group lists in creation order too
    File f;
    f.handle_ = Handle(check(H5Fcreate(path.c_str(), exclusive ? H5F_ACC_EXCL : H5F_ACC_TRUNC, fcpl.id(), H5P_DEFAULT),
                             "H5Fcreate " + path));
    return f;
}

namespace {

// ---- a read-only file driver over an open descriptor (File::open_read_descriptor) ----
//
// Why not libhdf5's sec2 driver on "/proc/self/fd/N": sec2 resolves a name that is a symbolic link
// with realpath() (H5F__build_actual_name), which fails for a file whose name was renamed over
// (its link reads "PATH (deleted)"), exactly the file this is for.  This driver reads the
// descriptor with pread(), as sec2 reads its own, with sec2's read-side features (metadata
// accumulator, data sieving); it never writes, and it takes no lock (a lock protects a reader from
// a writer of the same inode, and aimcemu writes only fresh files it renames into place).

struct DescriptorFapl {
    int fd;
};

struct DescriptorFile {
    H5FD_t pub;  // first: libhdf5 casts between the two
    int fd;      // our own duplicate, closed with the file
    haddr_t eof, eoa;
    dev_t device;
    ino_t inode;
};

void* descriptor_fapl_get(H5FD_t* file) {
    auto* info = static_cast<DescriptorFapl*>(std::malloc(sizeof(DescriptorFapl)));
    if (info != nullptr) info->fd = reinterpret_cast<DescriptorFile*>(file)->fd;
    return info;
}

void* descriptor_fapl_copy(const void* fapl) {
    auto* info = static_cast<DescriptorFapl*>(std::malloc(sizeof(DescriptorFapl)));
    if (info != nullptr) *info = *static_cast<const DescriptorFapl*>(fapl);
    return info;
}

herr_t descriptor_fapl_free(void* fapl) {
    std::free(fapl);
    return 0;
}

H5FD_t* descriptor_open(const char*, unsigned flags, hid_t fapl, haddr_t) {
    if (flags & (H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_CREAT | H5F_ACC_EXCL)) return nullptr;
    const auto* info = static_cast<const DescriptorFapl*>(H5Pget_driver_info(fapl));
    if (info == nullptr) return nullptr;
    struct stat st {};
    if (::fstat(info->fd, &st) != 0) return nullptr;
    auto* file = static_cast<DescriptorFile*>(std::calloc(1, sizeof(DescriptorFile)));
    if (file == nullptr) return nullptr;
    file->fd = ::fcntl(info->fd, F_DUPFD_CLOEXEC, 0);
    if (file->fd < 0) {
        std::free(file);
        return nullptr;
    }
    file->eof = haddr_t(st.st_size);
    file->device = st.st_dev;
    file->inode = st.st_ino;
    return &file->pub;
}

herr_t descriptor_close(H5FD_t* pub) {
    auto* file = reinterpret_cast<DescriptorFile*>(pub);
    ::close(file->fd);
    std::free(file);
    return 0;
}

int descriptor_cmp(const H5FD_t* a, const H5FD_t* b) {
    const auto* x = reinterpret_cast<const DescriptorFile*>(a);
    const auto* y = reinterpret_cast<const DescriptorFile*>(b);
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->inode != y->inode) return x->inode < y->inode ? -1 : 1;
    return 0;
}

herr_t descriptor_query(const H5FD_t*, unsigned long* flags) {
    if (flags != nullptr)
        *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
                 H5FD_FEAT_AGGREGATE_SMALLDATA | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

haddr_t descriptor_get_eoa(const H5FD_t* pub, H5FD_mem_t) { return reinterpret_cast<const DescriptorFile*>(pub)->eoa; }

herr_t descriptor_set_eoa(H5FD_t* pub, H5FD_mem_t, haddr_t addr) {
    reinterpret_cast<DescriptorFile*>(pub)->eoa = addr;
    return 0;
}

haddr_t descriptor_get_eof(const H5FD_t* pub, H5FD_mem_t) { return reinterpret_cast<const DescriptorFile*>(pub)->eof; }

herr_t descriptor_get_handle(H5FD_t* pub, hid_t, void** handle) {
    *handle = &reinterpret_cast<DescriptorFile*>(pub)->fd;
    return 0;
}

// As sec2: a read past the allocated end is an error; past the end of the file reads zeros.
herr_t descriptor_read(H5FD_t* pub, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buffer) {
    const auto* file = reinterpret_cast<const DescriptorFile*>(pub);
    if (addr == HADDR_UNDEF || addr > file->eoa || size > file->eoa - addr) return -1;
    auto* out = static_cast<unsigned char*>(buffer);
    while (size > 0) {
        const ssize_t n = ::pread(file->fd, out, std::min<size_t>(size, size_t(1) << 30), off_t(addr));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) {  // end of file
            std::memset(out, 0, size);
            break;
        }
        out += n;
        addr += haddr_t(n);
        size -= size_t(n);
    }
    return 0;
}

herr_t descriptor_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) { return -1; }

herr_t descriptor_nothing_to_do(H5FD_t*, hid_t, hbool_t) { return 0; }
herr_t descriptor_lock(H5FD_t*, hbool_t) { return 0; }
herr_t descriptor_unlock(H5FD_t*) { return 0; }

// The driver's id, registered with libhdf5 once.
hid_t descriptor_driver() {
    static const hid_t id = [] {
        static H5FD_class_t cls{};
        cls.name = "aimcemu-descriptor";
        cls.maxaddr = (haddr_t(1) << (8 * sizeof(off_t) - 1)) - 1;
        cls.fc_degree = H5F_CLOSE_WEAK;
        cls.fapl_size = sizeof(DescriptorFapl);
        cls.fapl_get = descriptor_fapl_get;
        cls.fapl_copy = descriptor_fapl_copy;
        cls.fapl_free = descriptor_fapl_free;
        cls.open = descriptor_open;
        cls.close = descriptor_close;
        cls.cmp = descriptor_cmp;
        cls.query = descriptor_query;
        cls.get_eoa = descriptor_get_eoa;
        cls.set_eoa = descriptor_set_eoa;
        cls.get_eof = descriptor_get_eof;
        cls.get_handle = descriptor_get_handle;
        cls.read = descriptor_read;
        cls.write = descriptor_write;
        cls.flush = descriptor_nothing_to_do;
        cls.truncate = descriptor_nothing_to_do;
        cls.lock = descriptor_lock;
        cls.unlock = descriptor_unlock;
        const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
        std::copy(std::begin(map), std::end(map), std::begin(cls.fl_map));
        return hid_t(check(H5FDregister(&cls), "H5FDregister aimcemu-descriptor"));
    }();
    return id;
}

}  // namespace

File File::open_read_descriptor(int fd, const std::string& name) {
    silence_error_printing();
    const Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
    const DescriptorFapl info{fd};
    check(H5Pset_driver(fapl.id(), descriptor_driver(), &info), "H5Pset_driver");
    File f;
    f.handle_ = Handle(check(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl.id()), "H5Fopen " + name));
    return f;
}

File File::create_in_memory(const std::string& name) {
    silence_error_printing();
    Handle fcpl = ordered_group_plist(H5P_FILE_CREATE);  // as File::create: root lists in creation order
    const Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
    check(H5Pset_fapl_core(fapl.id(), 1 << 20, /*backing_store=*/0), "H5Pset_fapl_core");
    File f;
    f.handle_ = Handle(check(H5Fcreate(name.c_str(), H5F_ACC_EXCL, fcpl.id(), fapl.id()), "H5Fcreate (in memory) " + name));
    return f;
}

std::vector<unsigned char> File::image() const {
    silence_error_printing();
    check(H5Fflush(id(), H5F_SCOPE_LOCAL), "H5Fflush");
    const ssize_t size = H5Fget_file_image(id(), nullptr, 0);
    check(size, "H5Fget_file_image");
    std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
    check(H5Fget_file_image(id(), bytes.data(), bytes.size()), "H5Fget_file_image");
    return bytes;
}

File File::open_read(const std::string& path) {
    silence_error_printing();
    File f;
    f.handle_ = Handle(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen " + path));
    return f;
}

File File::open_write(const std::string& path) {
    silence_error_printing();
    File f;
    f.handle_ = Handle(check(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen " + path));
    return f;
}

void File::close() {
    silence_error_printing();
    if (!handle_.valid()) return;
    // Give up ownership first so that a failed close is never retried by the destructor.
    check(H5Fclose(handle_.release()), "H5Fclose");
}

// ---- AtomicFile ----

void AtomicFile::check_target() const {
    namespace fs = std::filesystem;
    // Only a regular file may be replaced: renaming over a device, a FIFO or a socket would put a
    // plain file in its place; a folder (or a name ending in '/') cannot be a file at all.
    if (path_.empty() || path_.back() == '/') throw Error("cannot write '" + path_ + "': it names a folder");
    std::error_code ec;
    const fs::file_status target = fs::status(path_, ec);
    if (fs::is_directory(target)) throw Error("cannot write " + path_ + ": it is a folder");
    if (fs::exists(target) && !fs::is_regular_file(target))
        throw Error("cannot write " + path_ + ": it exists and is not a regular file (a device, FIFO or socket)");
    // Temporary files of writers killed earlier in this folder (see temp_files.hpp).
    files::remove_stale_temporaries(fs::path(temp_path_).parent_path().string());
}

AtomicFile::AtomicFile(const std::string& path, bool replace)
    : path_(path), temp_path_(files::temporary_path_for(path)), replace_(replace) {
    check_target();
    try {
        file_ = File::create(temp_path_, /*exclusive=*/true);
    } catch (const Error&) {
        // H5Fcreate can fail after creating the file (a full disk: the superblock cannot be
        // written); the destructor does not run for an object whose constructor threw.
        std::remove(temp_path_.c_str());
        throw;
    }
}

namespace {

// Creates `path` (exclusively), then fills it with the bytes `image()` returns: a path that
// cannot be created is refused before the image is made.  On failure removes what it created and
// throws.
void write_new_file(const std::string& path, const std::string& target, const std::function<AtomicFile::Image()>& image) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) throw Error("cannot write " + target + ": " + std::strerror(errno));
    int error = 0;
    try {
        const AtomicFile::Image bytes = image();
        for (std::size_t done = 0; done < bytes->size() && error == 0;) {
            const ssize_t n = ::write(fd, bytes->data() + done, bytes->size() - done);
            if (n > 0) done += std::size_t(n);
            else if (n < 0 && errno != EINTR) error = errno;
            else if (n == 0) error = EIO;
        }
    } catch (...) {
        ::close(fd);
        std::remove(path.c_str());
        throw;
    }
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error != 0) {
        std::remove(path.c_str());
        throw Error("cannot write " + target + ": " + std::strerror(error));
    }
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, bool replace, const std::function<Image()>& image)
    : path_(path), temp_path_(files::temporary_path_for(path)), replace_(replace) {
    check_target();
    write_new_file(temp_path_, path_, image);
    try {
        file_ = File::open_write(temp_path_);
    } catch (const Error&) {
        std::remove(temp_path_.c_str());
        throw;
    }
}

AtomicFile::~AtomicFile() {
    if (committed_) return;
    file_ = File();  // close before removing
    std::remove(temp_path_.c_str());
    take_failed_close(temp_path_);  // reported or not, the file is gone
}

void AtomicFile::commit() {
    const std::string lost = take_failed_close(temp_path_);
    if (!lost.empty()) throw Error("cannot write " + path_ + ": " + lost);
    file_.close();
    const std::string lost_at_close = take_failed_close(temp_path_);
    if (!lost_at_close.empty()) throw Error("cannot write " + path_ + ": " + lost_at_close);
    std::error_code ec;
    if (replace_)
        std::filesystem::rename(temp_path_, path_, ec);
    else
        files::rename_no_replace(temp_path_, path_, ec);
    if (ec) throw Error("cannot move the finished file to " + path_ + ": " + ec.message());
    committed_ = true;
}

}  // namespace aimcemu::h5
