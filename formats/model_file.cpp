// The versioned HDF5 model file and the data set file: see model_file.hpp and docs/model_format.md.
#include "formats/model_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/errors.hpp"
#include "common/h5.hpp"
#include "formats/between_reads_hook.hpp"
#include "formats/field_reader.hpp"
#include "formats/model_fields.hpp"
#include "formats/model_handover.hpp"
#include "formats/untrusted_file.hpp"

namespace aimcemu {

namespace {

// ---- model file ----

// A shared mapping of (part of) a file descriptor, unmapped when the object goes away.
class Mapping {
public:
    Mapping() = default;
    // Maps `length` (> 0) bytes at `offset` (a multiple of the page size); throws std::runtime_error.
    Mapping(int fd, std::uint64_t offset, std::uint64_t length, int protection) : length_(length) {
        // MAP_POPULATE: the pages are mapped in one call instead of one fault per 4 KiB page.
        void* p = ::mmap(nullptr, length, protection, MAP_SHARED | MAP_POPULATE, fd, off_t(offset));
        if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map the weights' memory file: ") + std::strerror(errno));
        data_ = static_cast<std::int8_t*>(p);
    }
    Mapping(Mapping&& other) noexcept : data_(std::exchange(other.data_, nullptr)), length_(other.length_) {}
    Mapping& operator=(Mapping&& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(length_, other.length_);
        return *this;
    }
    ~Mapping() {
        if (data_ != nullptr) ::munmap(data_, length_);
    }
    std::int8_t* data() const { return data_; }

private:
    std::int8_t* data_ = nullptr;
    std::uint64_t length_ = 0;
};

// Where read_layer takes a GEMM layer's weights from, once their dataset's type and shape are checked.
class WeightsSource {
public:
    virtual ~WeightsSource() = default;
    virtual std::vector<std::int8_t> take(const FieldReader& r, const h5::Dataset& weights, const h5::Dims& dims,
                                          const std::string& field) = 0;
};

// The file itself (the in-process read).
class WeightsFromFile final : public WeightsSource {
public:
    std::vector<std::int8_t> take(const FieldReader& r, const h5::Dataset& weights, const h5::Dims&,
                                  const std::string& field) override {
        return r.read<std::int8_t>(weights, field);
    }
};

// The checking process's side of the hand-over (hand_model_over): HDF5 reads each layer's weights
// straight into the memory file, grown layer by layer, so they never pass through a zero-filled
// vector and a write() copy; the structure record follows them (model_handover.hpp).  The layers
// keep no weights in this process.  A memory file reused from an earlier hand-over is written over
// in place (its pages are not allocated again) and cut to this model's bytes at the end.
class WeightsIntoMemoryFile final : public WeightsSource {
public:
    explicit WeightsIntoMemoryFile(int fd) : fd_(fd) {
        struct stat st {};
        if (::fstat(fd_, &st) != 0) fail();
        file_size_ = std::uint64_t(st.st_size);
    }
    std::vector<std::int8_t> take(const FieldReader& r, const h5::Dataset& weights, const h5::Dims&,
                                  const std::string& field) override {
        const std::uint64_t before = size_;
        r.read_into<std::int8_t>(weights, field, [&](std::uint64_t count) { return grow(count); });
        counts_.push_back(size_ - before);
        return {};
    }
    // Each GEMM layer's weight count, in the order taken.
    const std::vector<std::uint64_t>& counts() const { return counts_; }
    std::uint64_t bytes() const { return size_; }
    // `record` after the weights, and the file cut to its end.
    void append_and_close(std::string_view record) {
        if (!record.empty()) std::memcpy(grow(record.size()), record.data(), record.size());
        mapping_ = Mapping();
        if (file_size_ != size_ && ::ftruncate(fd_, off_t(size_)) != 0) fail();
    }

private:
    [[noreturn]] static void fail() {
        throw std::runtime_error(std::string("cannot hand the model over: ") + std::strerror(errno));
    }
    // `count` more bytes after the bytes written so far, mapped for writing.
    std::int8_t* grow(std::uint64_t count) {
        mapping_ = Mapping();  // the previous layer's is written
        if (count == 0) return nullptr;
        const std::uint64_t start = size_, page = std::uint64_t(::sysconf(_SC_PAGESIZE));
        const std::uint64_t mapped_from = start / page * page;
        size_ = start + count;
        if (size_ > file_size_) {
            if (::ftruncate(fd_, off_t(size_)) != 0) fail();
            file_size_ = size_;
        }
        mapping_ = Mapping(fd_, mapped_from, size_ - mapped_from, PROT_READ | PROT_WRITE);
        return mapping_.data() + (start - mapped_from);
    }
    int fd_;
    std::uint64_t size_ = 0, file_size_ = 0;
    std::vector<std::uint64_t> counts_;
    Mapping mapping_;
};

// The caller's side: the model the checking process read and handed over (check_model_in_helper),
// decoded from its memory file, mapped once; each layer's weights are copied out of the mapping
// (no zero fill, no read() per layer).  Nothing of the model file is read here.
Network handed_over_model(const HandOver& handed, const std::string& path) {
    const std::uint64_t size = handed.bytes() + handed.structure_bytes();
    struct stat st {};
    if (size < handed.bytes() || ::fstat(handed.fd(), &st) != 0 || std::uint64_t(st.st_size) < size)
        throw FormatError(path, "file", "cannot read the model the file check handed over");
    Mapping mapping;
    try {
        if (size > 0) mapping = Mapping(handed.fd(), 0, size, PROT_READ);
    } catch (const std::runtime_error& e) {
        throw FormatError(path, "file", e.what());
    }
    const std::int8_t* weights = mapping.data();
    const std::string_view structure(reinterpret_cast<const char*>(weights) + handed.bytes(), handed.structure_bytes());
    return decode_model_structure(structure, {weights, std::size_t(handed.bytes())}, path);
}

using model_fields::kIntMax;
using model_fields::kIntMin;

// Version 1 stored one kernel, stride and pad for both axes: Window::square of the three.
Window read_square_window(const FieldReader& r, const h5::Location& g, const std::string& f) {
    const auto field = [&](const char* name) { return int(r.integer(g, name, f + name, kIntMin, kIntMax)); };
    const int kernel = field("kernel"), stride = field("stride"), pad = field("pad");
    return Window::square(kernel, stride, pad);
}

void write_layer(const h5::Location& layers, const Layer& l) {
    const h5::Location g = layers.create_group(l.name);
    g.write_attribute("kind", std::string(to_string(l.kind)));
    for (const auto& f : model_fields::kInts) g.write_attribute<std::int32_t>(f.name, l.*(f.member));
    for (const auto& f : model_fields::kWindow) g.write_attribute<std::int32_t>(f.name, l.window.*(f.member));
    for (const auto& f : model_fields::kFlags) g.write_attribute<std::int8_t>(f.name, l.*(f.member) ? 1 : 0);
    if (!l.is_gemm()) return;
    const hsize_t n = hsize_t(l.out_channels);
    const h5::Dims wdims = l.kind == LayerKind::Conv
                               ? h5::Dims{n, hsize_t(l.window.kernel_h), hsize_t(l.window.kernel_w), hsize_t(l.in_shape.c)}
                               : h5::Dims{n, hsize_t(l.gemm_m())};
    // Contiguous, not deflated: synthetic and trained INT8 weights compress only to about 77 %, and
    // every load paid the inflate (more than half of the checking process's time for ResNet-50).
    // Files written with deflated chunks still load: filters are transparent to readers.
    g.write_dataset("weights", wdims, l.weights.data());
    g.write_dataset("bias", {n}, l.bias.data());
}

Layer read_layer(const FieldReader& r, const h5::Location& layers, const std::string& name, int version,
                 WeightsSource& weights) {
    const std::string f = "layers/" + name + "/";
    const h5::Location g = r.group(layers, name, "layers/" + name);
    Layer l;
    l.name = name;
    const std::string kind = r.text(g, "kind", f + "kind");
    try {
        l.kind = layer_kind_from_string(kind, r.path());
    } catch (const FormatError& e) {
        r.fail(f + "kind", "unknown layer kind '" + kind + "' (expected conv, linear, add, max_pool or avg_pool)");
    }
    for (const auto& field : model_fields::kInts)
        l.*(field.member) = int(r.integer(g, field.name, f + field.name, field.lo, field.hi));
    if (version == 1)
        l.window = read_square_window(r, g, f);
    else
        for (const auto& field : model_fields::kWindow)
            l.window.*(field.member) = int(r.integer(g, field.name, f + field.name, kIntMin, kIntMax));
    for (const auto& field : model_fields::kFlags) l.*(field.member) = r.flag(g, field.name, f + field.name);

    const bool has_weights = r.has_link(g, "weights", f + "weights");
    const bool has_bias = r.has_link(g, "bias", f + "bias");
    if (!l.is_gemm()) {
        r.require(!has_weights && !has_bias, f + "weights", std::string(to_string(l.kind)) + " layers carry no weights");
        return l;
    }
    const h5::Dataset w = r.dataset(g, "weights", f + "weights", is_int8, "int8");
    const h5::Dims wd = r.dims(w, f + "weights");
    const hsize_t n = hsize_t(std::max(l.out_channels, 0));
    if (l.kind == LayerKind::Conv)
        r.require(wd.size() == 4 && wd[0] == n && wd[1] == hsize_t(l.window.kernel_h) &&
                      wd[2] == hsize_t(l.window.kernel_w),
                  f + "weights",
                  "expected shape [out_channels=" + std::to_string(n) + ", kernel_h=" + std::to_string(l.window.kernel_h) +
                      ", kernel_w=" + std::to_string(l.window.kernel_w) + ", in_channels], found " + dims_text(wd));
    else
        r.require(wd.size() == 2 && wd[0] == n, f + "weights",
                  "expected shape [out_channels=" + std::to_string(n) + ", inputs], found " + dims_text(wd));
    l.weights = weights.take(r, w, wd, f + "weights");

    const h5::Dataset b = r.dataset(g, "bias", f + "bias", is_int8, "int8");
    const h5::Dims bd = r.dims(b, f + "bias");
    r.require(bd.size() == 1 && bd[0] == n, f + "bias",
              "expected shape [" + std::to_string(n) + "], found " + dims_text(bd));
    l.bias = r.read<std::int8_t>(b, f + "bias");
    return l;
}

// Every field of the model file but the graph checks (Network::resolve); the weights from `weights`.
Network read_model(const FieldReader& r, WeightsSource& weights) {
    const h5::File file = r.open();
    const int version = r.check_format(file, kModelFormat, kOldestModelFormatVersion, kModelFormatVersion);
    Network net;
    net.name = r.text(file, "name", "name");
    const auto shape = r.integers(file, "input_shape", "input_shape", 3);
    for (auto v : shape)
        r.require(v >= kDimensionRange.min && v <= kDimensionRange.max, "input_shape",
                  "every dimension must be in 1.." + std::to_string(kDimensionRange.max) + " (got " + std::to_string(v) + ")");
    net.input_shape = {int(shape[0]), int(shape[1]), int(shape[2])};
    net.input_frac_bits = int(r.integer(file, "input_frac_bits", "input_frac_bits", -31, 31));
    net.output_layer = int(r.integer(file, "output_layer", "output_layer", -1, kIntMax));
    net.class_names = r.texts(file, "class_names", "class_names");
    check_network_names(net.name, net.class_names, r.path());

    const h5::Location layers = r.group(file, "layers", "layers");
    const auto names = r.children(layers, "layers");
    for (const auto& name : names) net.layers.push_back(read_layer(r, layers, name, version, weights));
    return net;
}

// class_names, when given, name every output of the network (labels index them).
void check_class_names(const Network& net, const std::string& path) {
    if (net.class_names.empty()) return;
    const std::int64_t outputs = net.layers.at(std::size_t(net.output_index())).out_shape.size();
    if (std::int64_t(net.class_names.size()) != outputs)
        throw FormatError(path, "class_names",
                          std::to_string(net.class_names.size()) + " names for the " + std::to_string(outputs) +
                              " outputs of layer '" + net.layers.at(std::size_t(net.output_index())).name +
                              "' (give one name per output, or none)");
}

// ---- data set file ----

// The labels as int64.  A uint64 dataset is read as it is stored: HDF5's conversion to int64
// would clip a label above 2^63 - 1 to that value, and the error would name a label the file
// does not hold.
std::vector<std::int64_t> read_labels(const FieldReader& r, const h5::Dataset& labels) {
    const h5::TypeInfo type = labels.type();
    if (type.is_signed || type.size < sizeof(std::uint64_t)) return r.read<std::int64_t>(labels, "labels");
    const std::vector<std::uint64_t> stored = r.read<std::uint64_t>(labels, "labels");
    std::vector<std::int64_t> out(stored.size());
    for (std::size_t i = 0; i < stored.size(); ++i) {
        r.require(stored[i] <= std::uint64_t(INT64_MAX), "labels",
                  "label " + std::to_string(stored[i]) + " of image " + std::to_string(i) +
                      " is beyond any class index (at most 2^63 - 1)");
        out[i] = std::int64_t(stored[i]);
    }
    return out;
}

// Every field of the data set file; the images' values only when `with_images` (else their
// dataset is checked as a read would check it, and left unread: load_dataset_header).
DataSet read_dataset(const FieldReader& r, bool with_images) {
    const h5::File file = r.open();
    r.check_format(file, kDataSetFormat, kDataSetFormatVersion);
    DataSet data;
    data.source = r.text(file, "source", "source");
    data.description = r.text(file, "description", "description");
    if (r.has_attribute(file, "input_frac_bits", "input_frac_bits"))
        data.input_frac_bits = int(r.integer(file, "input_frac_bits", "input_frac_bits", -31, 31));

    const h5::Dataset images = r.dataset(file, "images", "images", is_int8, "int8");
    const h5::Dims id = r.dims(images, "images");
    r.require(id.size() == 4, "images", "expected shape [image, y, x, channel], found " + dims_text(id));
    r.require(id[0] >= 1, "images", "the data set holds no images (shape " + dims_text(id) + ")");
    for (std::size_t axis = 1; axis < 4; ++axis)
        r.require(id[axis] >= hsize_t(kDimensionRange.min) && id[axis] <= hsize_t(kDimensionRange.max), "images",
                  "image dimensions must be in 1.." + std::to_string(kDimensionRange.max) + ", found shape " + dims_text(id));
    data.image_shape = {int(id[1]), int(id[2]), int(id[3])};

    const h5::Dataset labels = r.dataset(file, "labels", "labels", is_integer, "an integer type");
    const h5::Dims ld = r.dims(labels, "labels");
    r.require(ld.size() == 1 && ld[0] == id[0], "labels",
              "expected shape [" + std::to_string(id[0]) + "] (one per image), found " + dims_text(ld));
    data.labels = read_labels(r, labels);
    if (with_images)
        data.images = r.read<std::int8_t>(images, "images");
    else
        r.check_readable(images, "images", sizeof(std::int8_t));
    for (auto label : data.labels) r.require(label >= 0, "labels", "negative label " + std::to_string(label));
    return data;
}

// Runs `write` on an atomic file at `path`; HDF5 failures become FormatError(path, "file", ...).
template <class F>
void write_atomically(const std::string& path, F&& write) {
    try {
        h5::AtomicFile out(path);
        write(out.file());
        out.commit();
    } catch (const h5::Error& e) {
        throw FormatError(path, "file", std::string("cannot write: ") + e.what());
    }
}

}  // namespace

void save_model(const Network& net, const std::string& path) {
    // Never write a file that load_model would reject.  A resolved network (a loaded or zoo one)
    // is checked in place; one whose shapes are not filled in is resolved in a copy.
    std::optional<Network> resolved_copy;
    const Network& checked = resolved_in_place_or_copy(net, resolved_copy, path);
    check_class_names(checked, path);
    check_storable_names(checked, path);
    write_atomically(path, [&](const h5::File& file) {
        file.write_attribute("format", kModelFormat);
        file.write_attribute<std::int32_t>("format_version", kModelFormatVersion);
        file.write_attribute("name", checked.name);
        file.write_attribute_array<std::int32_t>("input_shape", {checked.input_shape.h, checked.input_shape.w,
                                                                 checked.input_shape.c});
        file.write_attribute<std::int32_t>("input_frac_bits", checked.input_frac_bits);
        file.write_attribute<std::int32_t>("output_layer", checked.output_layer);
        file.write_attribute_strings("class_names", checked.class_names);
        const h5::Location layers = file.create_group("layers");
        for (const auto& layer : checked.layers) write_layer(layers, layer);
    });
}

namespace {

Network resolved_model(Network net, const std::string& path) {
    net.resolve(path);
    check_class_names(net, path);
    return net;
}

}  // namespace

// The checking process reads the whole file and hands the model over; this process reads nothing
// of the file itself (model_handover.hpp).
Network load_model(const std::string& path) {
    FileCheck no_dataset;
    return load_model(path, "", no_dataset);
}

// The file is opened once, here, and the checking process reads the file open on that descriptor:
// a file renamed over the path meanwhile is never read.
Network load_model(const std::string& path, const std::string& dataset_path, FileCheck& dataset_check,
                   FileKind dataset_kind) {
    const OpenedFile model = open_user_file(path);
    const HandOver checked = check_model_in_helper(model, dataset_path, &dataset_check, dataset_kind);
    if (!checked) return load_model_in_process(path, model.fd());
    between_reads(path);
    if (!dataset_path.empty() && !dataset_check.error) between_reads(dataset_path);
    return resolved_model(handed_over_model(checked, path), path);
}

Network load_model_in_process(const std::string& path, int file_fd) {
    WeightsFromFile weights;
    return resolved_model(read_model(FieldReader(path, file_fd), weights), path);
}

ModelHandOverSize hand_model_over(const std::string& path, int fd, int file_fd) {
    WeightsIntoMemoryFile memory_file(fd);
    const Network net = read_model(FieldReader(path, file_fd), memory_file);
    const std::uint64_t weights = memory_file.bytes();
    const std::string structure = encode_model_structure(net, memory_file.counts());
    memory_file.append_and_close(structure);
    return {weights, structure.size()};
}

void save_dataset(const DataSet& data, const std::string& path) {
    const std::int64_t per_image = data.image_shape.size();
    if (per_image <= 0) throw FormatError(path, "images", "image shape must be positive");
    if (data.count() == 0) throw FormatError(path, "images", "a data set needs at least one image");
    if (std::int64_t(data.images.size()) != data.count() * per_image)
        throw FormatError(path, "images", "expected " + std::to_string(data.count() * per_image) + " values for " +
                                              std::to_string(data.count()) + " images, got " +
                                              std::to_string(data.images.size()));
    check_storable_text(data.source, path, "source");
    check_storable_text(data.description, path, "description");
    write_atomically(path, [&](const h5::File& file) {
        file.write_attribute("format", kDataSetFormat);
        file.write_attribute<std::int32_t>("format_version", kDataSetFormatVersion);
        file.write_attribute("source", data.source);
        file.write_attribute("description", data.description);
        if (data.input_frac_bits >= 0) file.write_attribute<std::int32_t>("input_frac_bits", data.input_frac_bits);
        const h5::Dims idims{hsize_t(data.count()), hsize_t(data.image_shape.h), hsize_t(data.image_shape.w),
                             hsize_t(data.image_shape.c)};
        file.write_dataset("images", idims, data.images.data(), {h5::choose_chunk(idims, 1), 4});
        file.write_dataset("labels", {hsize_t(data.count())}, data.labels.data());
    });
}

namespace {

// The data set open on `file` read as `kind` (whole, or its header), in the checking process first.
DataSet read_checked_dataset(const OpenedFile& file, FileKind kind) {
    if (check_in_helper(kind, file)) between_reads(file.path);
    const bool whole = kind == FileKind::DataSet;
    return read_dataset(FieldReader(file.path, file.fd()), whole);
}

// The data set at `path` read as `kind`, with the checking process's outcome taken from `check`
// when it checked this file beside the model (a whole read covers the header; a header read covers
// no image, so a whole read after it is checked again).
DataSet read_dataset_after(const std::string& path, const FileCheck& check, FileKind kind) {
    if (check.path.empty() || check.path != path) return read_checked_dataset(open_user_file(path), kind);
    check.raise();
    const OpenedFile file = std::exchange(check.file, OpenedFile{});
    if (file.fd() < 0) return read_checked_dataset(open_user_file(path), kind);  // none held (or read already)
    if (check.kind != FileKind::DataSet && kind == FileKind::DataSet) return read_checked_dataset(file, kind);
    return read_dataset(FieldReader(path, file.fd()), kind == FileKind::DataSet);
}

}  // namespace

DataSet load_dataset(const std::string& path) {
    return read_checked_dataset(open_user_file(path), FileKind::DataSet);
}

DataSet load_dataset(const std::string& path, const FileCheck& check) {
    return read_dataset_after(path, check, FileKind::DataSet);
}

DataSet load_dataset_in_process(const std::string& path, int file_fd) {
    return read_dataset(FieldReader(path, file_fd), true);
}

DataSet load_dataset_header(const std::string& path) {
    return read_checked_dataset(open_user_file(path), FileKind::DataSetHeader);
}

DataSet load_dataset_header(const std::string& path, const FileCheck& check) {
    return read_dataset_after(path, check, FileKind::DataSetHeader);
}

DataSet load_dataset_header_in_process(const std::string& path, int file_fd) {
    return read_dataset(FieldReader(path, file_fd), false);
}

void check_dataset_fits(const DataSet& data, const Network& net, const std::string& path) {
    const auto shape_text = [](const Shape3& s) {
        return "[" + std::to_string(s.h) + ", " + std::to_string(s.w) + ", " + std::to_string(s.c) + "]";
    };
    if (!(data.image_shape == net.input_shape))
        throw FormatError(path, "images", "image shape " + shape_text(data.image_shape) + " differs from the model's input " +
                                              shape_text(net.input_shape) + " (model '" + net.name + "')");
    if (data.input_frac_bits >= 0 && data.input_frac_bits != net.input_frac_bits)
        throw FormatError(path, "input_frac_bits", "images were quantized with " + std::to_string(data.input_frac_bits) +
                                                       " fractional bits, the model expects " +
                                                       std::to_string(net.input_frac_bits));
    const std::int64_t classes = net.layers.at(std::size_t(net.output_index())).out_shape.size();
    for (std::size_t i = 0; i < data.labels.size(); ++i)
        if (data.labels[i] >= classes)
            throw FormatError(path, "labels", "label " + std::to_string(data.labels[i]) + " of image " + std::to_string(i) +
                                                  " is not below the model's " + std::to_string(classes) + " outputs");
}

}  // namespace aimcemu
