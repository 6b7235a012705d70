// The HDF5 results writer: see results.hpp and docs/hdf5_layout.md.
#include "formats/results.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <list>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/h5.hpp"
#include "analysis/metrics.hpp"
#include "common/errors.hpp"
#include "common/huge_pages.hpp"

namespace aimcemu {

namespace {

std::vector<std::int64_t> iota64(std::size_t n) {
    std::vector<std::int64_t> v(n);
    std::iota(v.begin(), v.end(), 0);
    return v;
}

void attach_all(const h5::Dataset& ds, std::initializer_list<const h5::Dataset*> scales) {
    unsigned axis = 0;
    for (const h5::Dataset* scale : scales) ds.attach_scale(*scale, axis++);
}

// xarray (CF decoding) turns the variables named here into coordinates of the data variable.
void mark_round_coordinates(const h5::Dataset& ds) {
    ds.write_attribute("coordinates", "chip t niu_round drift_compensation");
}

// The type of a 1-D dataset of variable-length UTF-8 strings (h5py and xarray read it as str).
h5::Handle utf8_strings_type() {
    h5::Handle type(h5::check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
    h5::check(H5Tset_size(type.id(), H5T_VARIABLE), "H5Tset_size");
    h5::check(H5Tset_cset(type.id(), H5T_CSET_UTF8), "H5Tset_cset");
    return type;
}

void write_strings(const h5::Dataset& ds, const std::vector<std::string>& values) {
    if (values.empty()) return;
    std::vector<const char*> pointers;
    for (const auto& v : values) pointers.push_back(v.c_str());
    const h5::Handle type = utf8_strings_type();
    // A conversion buffer sized to these few strings: by default HDF5 allocates and zero-fills
    // 1 MiB for every write that converts (a string pointer to a heap reference), which was most
    // of the time of writing the rounds' coordinates into ResNet-50's 57 groups (~1 ms each).
    h5::Handle transfer(h5::check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
    h5::check(H5Pset_buffer(transfer.id(), values.size() * 64, nullptr, nullptr), "H5Pset_buffer");
    h5::check(H5Dwrite(ds.id(), type.id(), H5S_ALL, H5S_ALL, transfer.id(), pointers.data()), "H5Dwrite strings");
}

// Index of the first maximum of one image's output activations.
std::int64_t argmax(std::span<const std::int8_t> values) {
    return std::int64_t(std::max_element(values.begin(), values.end()) - values.begin());
}

std::vector<std::int64_t> shape_vector(const Shape3& s) { return {s.h, s.w, s.c}; }

struct RoundScales {
    h5::Dataset round, chip, t, niu_round, drift_compensation;
};

// A 1-D index coordinate of `size` that is also a dimension scale named `name`; its values
// (0 .. size-1) are written by fill_index.
h5::Dataset create_scale(const h5::Location& loc, const std::string& name, std::size_t size) {
    h5::Dataset ds = loc.create_dataset(name, h5::native_type<std::int64_t>(), {hsize_t(size)}, {});
    ds.make_scale(name);
    return ds;
}

void fill_index(const h5::Dataset& scale, std::size_t size) {
    if (size > 0) scale.write(iota64(size).data());
}

// The coordinates of `rounds` noisy rounds in `loc`: round (the position 0..R-1, unique) as the
// dimension scale; chip, t, niu_round and drift_compensation as auxiliary coordinates on it
// (the NIU round id repeats across chips and t, so it cannot be the index).  Created empty:
// fill_round_coordinates writes a run's values.
RoundScales create_round_coordinates(const h5::Location& loc, std::size_t rounds) {
    const h5::Dims dims{hsize_t(rounds)};
    RoundScales s;
    s.round = create_scale(loc, "round", rounds);
    s.chip = loc.create_dataset("chip", h5::native_type<std::int64_t>(), dims, {});
    s.chip.attach_scale(s.round, 0);
    s.t = loc.create_dataset("t", h5::native_type<double>(), dims, {});
    s.t.attach_scale(s.round, 0);
    s.t.write_attribute("units", "s");
    s.niu_round = loc.create_dataset("niu_round", h5::native_type<std::int64_t>(), dims, {});
    s.niu_round.attach_scale(s.round, 0);
    s.drift_compensation = loc.create_dataset("drift_compensation", utf8_strings_type().id(), dims, {});
    s.drift_compensation.attach_scale(s.round, 0);
    return s;
}

void fill_round_coordinates(const h5::Location& loc, const std::vector<RoundInfo>& rounds) {
    if (rounds.empty()) return;
    std::vector<std::int64_t> niu_rounds, chips;
    std::vector<double> times;
    std::vector<std::string> compensation;
    for (const auto& r : rounds) {
        niu_rounds.push_back(r.niu_round);
        chips.push_back(r.chip);
        times.push_back(r.t);
        compensation.push_back(r.drift_compensation);
    }
    fill_index(loc.open_dataset("round"), rounds.size());
    loc.open_dataset("chip").write(chips.data());
    loc.open_dataset("t").write(times.data());
    loc.open_dataset("niu_round").write(niu_rounds.data());
    write_strings(loc.open_dataset("drift_compensation"), compensation);
}

// A layer's group: its links listed in creation order, as every group of the file, and its links
// and attributes kept in the group's object header ("compact" storage) up to kCompactLinks of each instead of
// HDF5's default 8.  A layer group holds 12-15 links and 8-11 attributes; past 8 HDF5 moves them
// to "dense" storage (a fractal heap and two B-trees per group, for each of ResNet-50's ~170
// layers): keeping them compact took the writer's creation from 43 to 27 ms there.  Readers see
// the same links and attributes, in the same order, either way.
h5::Location create_layer_group(const h5::Location& parent, const std::string& name) {
    constexpr unsigned kCompactLinks = 32, kDenseBelow = 24;
    h5::Handle gcpl(h5::check(H5Pcreate(H5P_GROUP_CREATE), "H5Pcreate"));
    h5::check(H5Pset_link_creation_order(gcpl.id(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
              "H5Pset_link_creation_order");
    h5::check(H5Pset_link_phase_change(gcpl.id(), kCompactLinks, kDenseBelow), "H5Pset_link_phase_change");
    h5::check(H5Pset_attr_phase_change(gcpl.id(), kCompactLinks, kDenseBelow), "H5Pset_attr_phase_change");
    return h5::Location(h5::Handle(h5::check(H5Gcreate2(parent.id(), name.c_str(), H5P_DEFAULT, gcpl.id(), H5P_DEFAULT),
                                             "H5Gcreate2 " + name)));
}

}  // namespace

ReferenceActivations::ReferenceActivations(const Network& net, std::size_t images, const std::vector<bool>& layers)
    : layers_(net.layers.size()), images_(images) {
    if (layers.size() != net.layers.size())
        throw std::logic_error("ReferenceActivations: " + std::to_string(layers.size()) + " layer flags for " +
                               std::to_string(net.layers.size()) + " layers");
    for (std::size_t l = 0; l < layers_.size(); ++l) {
        Slot& slot = layers_[l];
        slot.image_size = std::size_t(net.layers[l].out_shape.size());
        slot.held = layers[l];
        slot.stored = std::make_unique<std::atomic<std::int64_t>>(0);
        if (!slot.held) continue;
        slot.offset = bytes_;
        bytes_ += slot.image_size * images;
    }
    // Not zeroed: the pass's threads touch each page first as they store into it, in parallel.
    if (bytes_ > 0) data_ = static_cast<std::int8_t*>(allocate_maybe_huge(bytes_));
}

ReferenceActivations::~ReferenceActivations() {
    if (data_ != nullptr) free_maybe_huge(data_, bytes_);
}

bool ReferenceActivations::holds(int layer) const {
    return layer >= 0 && std::size_t(layer) < layers_.size() && layers_[std::size_t(layer)].held;
}

void ReferenceActivations::store(int layer, std::int64_t first, int count, std::span<const std::int8_t> values) {
    if (layer < 0 || std::size_t(layer) >= layers_.size())
        throw std::logic_error("ReferenceActivations: no layer " + std::to_string(layer));
    Slot& slot = layers_[std::size_t(layer)];
    if (!slot.held) return;
    if (sealed()) throw std::logic_error("ReferenceActivations: store after seal");
    if (first < 0 || count < 0 || std::size_t(first) + std::size_t(count) > images_ ||
        values.size() != std::size_t(count) * slot.image_size)
        throw std::logic_error("ReferenceActivations: layer " + std::to_string(layer) + ", images " +
                               std::to_string(first) + "+" + std::to_string(count) + " do not fit");
    if (!values.empty()) std::memcpy(data_ + slot.offset + std::size_t(first) * slot.image_size, values.data(), values.size());
    slot.stored->fetch_add(count, std::memory_order_relaxed);
}

bool ReferenceActivations::begin_filling() {
    bool idle = false;
    return filling_.compare_exchange_strong(idle, true);
}

void ReferenceActivations::abandon_filling() {
    if (sealed()) return;
    for (Slot& slot : layers_) slot.stored->store(0);
    filling_.store(false);
}

void ReferenceActivations::seal() {
    for (std::size_t l = 0; l < layers_.size(); ++l)
        if (layers_[l].held && layers_[l].stored->load() != std::int64_t(images_))
            throw std::logic_error("ReferenceActivations: layer " + std::to_string(l) + " received " +
                                   std::to_string(layers_[l].stored->load()) + " of " + std::to_string(images_) +
                                   " images");
    sealed_.store(true, std::memory_order_release);
}

std::span<const std::int8_t> ReferenceActivations::layer(int layer) const {
    if (!sealed()) throw std::logic_error("ReferenceActivations: read before seal");
    if (!holds(layer)) throw std::logic_error("ReferenceActivations: layer " + std::to_string(layer) + " not held");
    const Slot& slot = layers_[std::size_t(layer)];
    return {data_ + slot.offset, slot.image_size * images_};
}

struct LayerState {
    h5::Location group;  // opened with the file (State::open), which fills its image and round indices
    std::optional<h5::Dataset> activations, reference_ds;
    // set_reference(layer, ...)'s copy, shared with the RoundMetrics that read it (they may outlive
    // the writer or its commit)
    std::shared_ptr<const std::vector<std::int8_t>> own_reference;
    std::span<const std::int8_t> reference;   // what the metrics compare with: own_reference or a shared one
    bool reference_set = false;
    std::vector<ActivationErrorSums> sums;  // per round
    std::vector<bool> round_set;
    std::vector<std::pair<std::string, std::vector<double>>> series;  // extra per-round series, by name
};

// ---- the file's skeleton ----
//
// Most of a results file depends only on the network, the number of images and of rounds, the
// stored layers and the deflate level: every group and attribute (but the run's `config`), the
// coordinates and dimension scales, and the datasets the run fills, with their scales attached.
// ResNet-50 has ~900 such objects, and HDF5 takes ~40 ms to create them (dataset creation and
// H5DSattach_scale, ~25 us each); filling them takes a few.  So the writer builds that skeleton
// once, in memory, and every results file of the same shape starts as a copy of its bytes
// (SkeletonCache: a sweep's runs, repeated aimcemu.run calls).  Values that grow with the
// images or the rounds (the image indices, the rounds' coordinates) are not in the skeleton but
// written into each file, so that a cached skeleton stays small (about 1 MB for ResNet-50) and
// a sweep over t or chips, whose tasks differ in the rounds' coordinates only, shares one.  The
// objects are created in the order the layout lists them, so a file lists the same links in the
// same order as if each run had created them, and the run writes only values.

namespace {

struct SkeletonShape {
    const Network& net;
    int deflate_level;  // of the stored activations
    const std::vector<bool>& store;
    std::size_t images, rounds, classes;
};

// A float64 [round] per-round series or metric of a layer, on the round coordinates.
h5::Dataset create_round_series(const h5::Location& group, const std::string& name, const h5::Dataset& round,
                                std::size_t rounds) {
    h5::Dataset ds = group.create_dataset(name, h5::native_type<double>(), {hsize_t(rounds)}, {});
    ds.attach_scale(round, 0);
    mark_round_coordinates(ds);
    return ds;
}

// Each layer's per-round metrics: the dataset the skeleton holds and what commit fills it with.
struct LayerMetric {
    const char* name;
    double (ActivationErrorSums::*value)() const;
    const char* units;  // the CF `units` attribute; nullptr for a dimensionless ratio
};
constexpr LayerMetric kLayerMetrics[] = {{"snr_db", &ActivationErrorSums::snr_db, "dB"},
                                         {"cosine", &ActivationErrorSums::cosine, nullptr},
                                         {"mismatch_rate", &ActivationErrorSums::mismatch_rate, nullptr}};

void create_root_skeleton(const h5::File& f, const SkeletonShape& shape) {
    const Network& net = shape.net;
    f.write_attribute("format", kResultsFormat);
    f.write_attribute<std::int32_t>("format_version", kResultsFormatVersion);
    f.write_attribute("model", net.name);
    f.write_attribute_strings("class_names", net.class_names);
    std::vector<std::string> names;
    for (const auto& l : net.layers) names.push_back(l.name);
    f.write_attribute_strings("layer_names", names);

    const hsize_t r = shape.rounds, n = shape.images, k = shape.classes;
    const RoundScales rounds = create_round_coordinates(f, shape.rounds);
    const h5::Dataset image = create_scale(f, "image", shape.images);
    const h5::Dataset klass = create_scale(f, "class", shape.classes);
    fill_index(klass, shape.classes);
    f.create_dataset("labels", h5::native_type<std::int64_t>(), {n}, {}).attach_scale(image, 0);

    // logits [round][image][class], one round per chunk (rounds are written one by one), deflated
    h5::Dims chunk = h5::choose_chunk({n, k}, 1);
    chunk.insert(chunk.begin(), 1);
    const h5::Dataset logits = f.create_dataset("logits", H5T_STD_I8LE, {r, n, k}, {chunk, 1});
    attach_all(logits, {&rounds.round, &image, &klass});
    mark_round_coordinates(logits);
    f.create_group("layers");  // filled by create_layer_skeleton, before the datasets below

    // What commit() fills (ResultsWriter::State::write_predictions)
    const h5::Dataset predictions = f.create_dataset("predictions", h5::native_type<std::int64_t>(), {r, n}, {});
    attach_all(predictions, {&rounds.round, &image});
    mark_round_coordinates(predictions);
    create_round_series(f, "accuracy", rounds.round, shape.rounds);
    f.create_dataset("reference_predictions", h5::native_type<std::int64_t>(), {n}, {}).attach_scale(image, 0);
    const h5::Dataset reference_logits = f.create_dataset("reference_logits", h5::native_type<std::int8_t>(), {n, k}, {});
    attach_all(reference_logits, {&image, &klass});
    f.create_dataset("reference_accuracy", h5::native_type<double>(), {}, {});
}

void create_layer_skeleton(const h5::Location& layers_group, const SkeletonShape& shape, int index) {
    const Network& net = shape.net;
    const Layer& l = net.layers[std::size_t(index)];
    const bool store = shape.store[std::size_t(index)];
    const h5::Location group = create_layer_group(layers_group, l.name);
    group.write_attribute("kind", std::string(to_string(l.kind)));
    group.write_attribute<std::int32_t>("index", index);
    group.write_attribute("input", l.input == kNetworkInput ? std::string("input") : net.layers[std::size_t(l.input)].name);
    group.write_attribute_array<std::int64_t>("in_shape", shape_vector(l.in_shape));
    group.write_attribute_array<std::int64_t>("out_shape", shape_vector(l.out_shape));
    group.write_attribute<std::int32_t>("out_shift", l.out_shift);
    group.write_attribute<std::int8_t>("activations_stored", store ? 1 : 0);

    const RoundScales rounds = create_round_coordinates(group, shape.rounds);
    const h5::Dataset image = create_scale(group, "image", shape.images);
    h5::Dataset y = create_scale(group, "y", std::size_t(l.out_shape.h));
    h5::Dataset x = create_scale(group, "x", std::size_t(l.out_shape.w));
    h5::Dataset channel = create_scale(group, "channel", std::size_t(l.out_shape.c));
    fill_index(y, std::size_t(l.out_shape.h));
    fill_index(x, std::size_t(l.out_shape.w));
    fill_index(channel, std::size_t(l.out_shape.c));
    if (store) {
        const h5::Dims ref_dims{hsize_t(shape.images), hsize_t(l.out_shape.h), hsize_t(l.out_shape.w), hsize_t(l.out_shape.c)};
        const h5::Storage ref_storage{h5::choose_chunk(ref_dims, 1), shape.deflate_level};
        const h5::Dataset reference = group.create_dataset("reference", H5T_STD_I8LE, ref_dims, ref_storage);
        attach_all(reference, {&image, &y, &x, &channel});

        h5::Dims act_dims = ref_dims;
        act_dims.insert(act_dims.begin(), hsize_t(shape.rounds));
        h5::Dims act_chunk = ref_storage.chunk;
        act_chunk.insert(act_chunk.begin(), 1);  // one round per chunk: rounds are written one by one
        const h5::Dataset activations =
            group.create_dataset("activations", H5T_STD_I8LE, act_dims, {act_chunk, shape.deflate_level});
        attach_all(activations, {&rounds.round, &image, &y, &x, &channel});
        mark_round_coordinates(activations);
    }
    for (const LayerMetric& metric : kLayerMetrics) {
        const h5::Dataset ds = create_round_series(group, metric.name, rounds.round, shape.rounds);
        if (metric.units) ds.write_attribute("units", metric.units);
    }
}

std::vector<unsigned char> build_skeleton(const SkeletonShape& shape) {
    static std::atomic<std::uint64_t> built{0};
    h5::File f = h5::File::create_in_memory("aimcemu-results-skeleton-" + std::to_string(built.fetch_add(1)));
    create_root_skeleton(f, shape);
    {
        const h5::Location layers = f.open_group("layers");
        for (std::size_t i = 0; i < shape.net.layers.size(); ++i) create_layer_skeleton(layers, shape, int(i));
    }
    std::vector<unsigned char> image = f.image();
    f.close();
    return image;
}

// Everything build_skeleton writes, as one string: two shapes with the same key build the same
// bytes.
std::string skeleton_key(const SkeletonShape& shape) {
    std::string key;
    const auto add = [&](const std::string& text) { key += std::to_string(text.size()) + ':' + text + ','; };
    const auto add_number = [&](auto value) {
        key.append(reinterpret_cast<const char*>(&value), sizeof value);  // bit for bit (t is a double)
    };
    add_number(kResultsFormatVersion);
    add(shape.net.name);
    for (const auto& name : shape.net.class_names) add(name);
    add_number(shape.images);
    add_number(shape.classes);
    add_number(shape.deflate_level);
    add_number(shape.rounds);
    key += '|';
    for (std::size_t i = 0; i < shape.net.layers.size(); ++i) {
        const Layer& l = shape.net.layers[i];
        add(l.name);
        add(to_string(l.kind));
        add_number(l.input);
        for (const Shape3* s : {&l.in_shape, &l.out_shape}) {
            add_number(s->h);
            add_number(s->w);
            add_number(s->c);
        }
        add_number(l.out_shift);
        add_number(bool(shape.store[i]));
    }
    return key;
}

// The last few skeletons this process built, by key (most recent first).  A sweep's runs share
// one; a handful covers a process that alternates between a few networks or data sets.
class SkeletonCache {
public:
    std::shared_ptr<const std::vector<unsigned char>> get(const SkeletonShape& shape) {
        std::string key = skeleton_key(shape);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            for (auto it = entries_.begin(); it != entries_.end(); ++it)
                if (it->first == key) {
                    entries_.splice(entries_.begin(), entries_, it);
                    return it->second;
                }
        }
        // Built without the lock: another writer's different skeleton need not wait for it.
        auto image = std::make_shared<const std::vector<unsigned char>>(build_skeleton(shape));
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [existing, cached] : entries_)
            if (existing == key) return cached;  // another writer built it meanwhile
        entries_.emplace_front(std::move(key), image);
        if (entries_.size() > kCapacity) entries_.pop_back();
        return image;
    }

private:
    static constexpr std::size_t kCapacity = 4;
    std::mutex mutex_;
    std::list<std::pair<std::string, std::shared_ptr<const std::vector<unsigned char>>>> entries_;
};

SkeletonCache& skeleton_cache() {
    static SkeletonCache cache;
    return cache;
}

}  // namespace

struct ResultsWriter::State {
    std::string path;
    const Network& net;
    ResultsSpec spec;
    std::size_t images = 0, rounds = 0, classes = 0;
    std::optional<h5::AtomicFile> out;
    std::shared_ptr<const ReferenceActivations> shared_reference;  // kept alive while its spans are used
    std::vector<LayerState> layers;           // emptied by commit
    bool committed = false;
    std::vector<std::int64_t> reference_predictions, round_predictions;  // [image], [round][image]
    std::vector<std::int8_t> reference_logits;                           // [image][class]
    // logits [round][image][class], written round by round as the rounds arrive: a file of many
    // rounds over a large data set with many classes would otherwise hold them all in memory
    // (1,000 classes x 50,000 images x 100 rounds: 5 GB) until commit.
    std::optional<h5::Dataset> round_logits;

    State(const std::string& p, const Network& n, ResultsSpec s) : path(p), net(n), spec(std::move(s)) {}

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw FormatError(path, field, what);
    }
    void check_layer(int layer) const {
        if (committed) fail("file", "already committed: the writer takes and gives no more layer data");
        if (layer < 0 || std::size_t(layer) >= layers.size()) fail("layers", "layer index " + std::to_string(layer) + " out of range");
    }
    std::string activations_field(int layer) const { return "layers/" + net.layers[std::size_t(layer)].name + "/activations"; }
    // The state of `layer` for a noisy round's data: round and layer in range, the reference set.
    LayerState& round_layer(std::size_t round_index, int layer) {
        if (round_index >= rounds) fail("rounds", "round index " + std::to_string(round_index) + " out of range");
        check_layer(layer);
        LayerState& ls = layers[std::size_t(layer)];
        if (!ls.reference_set) fail(activations_field(layer), "set the layer's reference before its noisy rounds");
        return ls;
    }
    std::size_t layer_elements(int layer) const { return images * std::size_t(net.layers.at(layer).out_shape.size()); }
    int output_layer() const { return net.output_index(); }
    // Hyperslab count of one round of `layer`'s activations: [1, image, y, x, channel].
    h5::Dims activations_dims(int layer) const {
        const Shape3& o = net.layers.at(std::size_t(layer)).out_shape;
        return {1, hsize_t(images), hsize_t(o.h), hsize_t(o.w), hsize_t(o.c)};
    }
    const h5::File& file() { return out->file(); }

    // Opens the file as a copy of its skeleton and writes what is the run's own: the config and
    // the labels.
    void open(const std::vector<bool>& store);
    // Makes `values` layer's reference (already checked for size): writes it if stored, takes
    // the predictions from it if it is the output.
    void adopt_reference(int layer, std::span<const std::int8_t> values);
    void record_output(std::optional<std::size_t> round, std::span<const std::int8_t> activations);
    void write_predictions();
    void write_layer_metrics(int layer);
};

void ResultsWriter::State::open(const std::vector<bool>& store) {
    const SkeletonShape shape{net, spec.deflate_level, store, images, rounds, classes};
    // The skeleton is asked for once the temporary file exists: a refused path costs no build.
    out.emplace(path, spec.replace_existing, [&] { return skeleton_cache().get(shape); });
    const h5::File& f = file();
    f.write_attribute("config", spec.config_json);
    f.open_dataset("labels").write(spec.labels.data());
    fill_index(f.open_dataset("image"), images);
    fill_round_coordinates(f, spec.rounds);
    if (rounds > 0) round_logits = f.open_dataset("logits");
    const h5::Location layers_group = f.open_group("layers");
    for (std::size_t i = 0; i < layers.size(); ++i) {
        LayerState& ls = layers[i];
        ls.sums.assign(rounds, {});
        ls.round_set.assign(rounds, false);
        ls.group = layers_group.open_group(net.layers[i].name);
        const h5::Location& group = ls.group;
        fill_index(group.open_dataset("image"), images);
        fill_round_coordinates(group, spec.rounds);
        if (!store[i]) continue;
        ls.reference_ds = group.open_dataset("reference");
        ls.activations = group.open_dataset("activations");
    }
}

void ResultsWriter::State::record_output(std::optional<std::size_t> round, std::span<const std::int8_t> activations) {
    std::int64_t* predictions = round ? &round_predictions[*round * images] : reference_predictions.data();
    for (std::size_t i = 0; i < images; ++i) predictions[i] = argmax(activations.subspan(i * classes, classes));
    if (!round) {
        std::copy(activations.begin(), activations.end(), reference_logits.begin());
        return;
    }
    if (activations.empty()) return;  // no images: nothing to store
    try {
        round_logits->write_slab({hsize_t(*round), 0, 0}, {1, hsize_t(images), hsize_t(classes)}, activations.data());
    } catch (const h5::Error& e) {
        fail("logits", std::string("cannot write: ") + e.what());
    }
}

namespace {
double accuracy_of(const std::int64_t* predictions, const std::vector<std::int64_t>& labels) {
    if (labels.empty()) return 0.0;
    std::size_t correct = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) correct += predictions[i] == labels[i];
    return double(correct) / double(labels.size());
}

// Writes `values` into the skeleton's dataset `name` (nothing to write into an empty one).
template <class T>
void fill(const h5::Location& loc, const std::string& name, const std::vector<T>& values) {
    if (!values.empty()) loc.open_dataset(name).write(values.data());
}
}  // namespace

void ResultsWriter::State::write_predictions() {
    const h5::File& f = file();
    fill(f, "predictions", round_predictions);
    std::vector<double> acc(rounds);
    for (std::size_t i = 0; i < rounds; ++i) acc[i] = accuracy_of(&round_predictions[i * images], spec.labels);
    fill(f, "accuracy", acc);
    fill(f, "reference_predictions", reference_predictions);
    fill(f, "reference_logits", reference_logits);
    fill(f, "reference_accuracy", std::vector<double>{accuracy_of(reference_predictions.data(), spec.labels)});
}

void ResultsWriter::State::write_layer_metrics(int layer) {
    LayerState& ls = layers[std::size_t(layer)];
    const h5::Location& group = ls.group;
    // With no rounds, the skeleton's empty metrics are the file's (fill writes nothing).
    for (const LayerMetric& metric : kLayerMetrics) {
        std::vector<double> values;
        for (const auto& sums : ls.sums) values.push_back((sums.*metric.value)());
        fill(group, metric.name, values);
    }
    if (ls.series.empty()) return;
    const h5::Dataset round = group.open_dataset("round");
    for (const auto& [name, values] : ls.series) create_round_series(group, name, round, rounds).write(values.data());
}

// ---- The rules shared with the reader ----

void require_valid_round(const RoundInfo& round, const std::string& path, const std::string& field_prefix) {
    if (round.chip < 0) throw FormatError(path, field_prefix + "chip", "negative chip " + std::to_string(round.chip));
    if (!std::isfinite(round.t) || round.t < 0)
        throw FormatError(path, field_prefix + "t", "times must be finite and >= 0");
    if (round.niu_round < 0) throw FormatError(path, field_prefix + "niu_round", "negative NIU round id");
    if (round.drift_compensation.empty()) throw FormatError(path, field_prefix + "drift_compensation", "empty name");
}

void require_class_labels(std::span<const std::int64_t> labels, std::int64_t classes, const std::string& path) {
    for (const std::int64_t label : labels)
        if (label < 0 || label >= classes)
            throw FormatError(path, "labels",
                              "label " + std::to_string(label) + " outside 0.." + std::to_string(classes - 1));
}

// ---- ResultsWriter ----

namespace {

// Which layers store activations, validated against the network.
std::vector<bool> layers_to_store(const Network& net, const ResultsSpec& spec) {
    std::vector<bool> store(net.layers.size(), !spec.store_no_activations && spec.stored_layers.empty());
    for (const auto& name : spec.stored_layers) {
        const int index = net.find_layer(name);
        if (index < 0) throw FormatError("<config>", "layers", "no layer named '" + name + "' in model '" + net.name + "'");
        store[std::size_t(index)] = true;
    }
    return store;
}

}  // namespace

ResultsWriter::ResultsWriter(const std::string& path, const Network& net, ResultsSpec spec) {
    if (spec.labels.empty()) throw FormatError(path, "labels", "a results file needs at least one image");
    if (spec.deflate_level < 0 || spec.deflate_level > 9) throw FormatError(path, "deflate_level", "must be in 0..9");
    if (net.layers.empty() || net.layers.back().out_shape.size() == 0)
        throw FormatError(path, "model", "the network is not resolved");
    check_storable_names(net, path);
    const std::vector<bool> store = layers_to_store(net, spec);
    require_class_labels(spec.labels, net.layers.at(std::size_t(net.output_index())).out_shape.size(), path);
    for (std::size_t r = 0; r < spec.rounds.size(); ++r)
        require_valid_round(spec.rounds[r], path, "rounds[" + std::to_string(r) + "].");
    try {
        state_ = std::make_unique<State>(path, net, std::move(spec));
        State& s = *state_;
        s.images = s.spec.labels.size();
        s.rounds = s.spec.rounds.size();
        s.classes = std::size_t(net.layers.at(std::size_t(net.output_index())).out_shape.size());
        s.reference_predictions.assign(s.images, -1);
        s.round_predictions.assign(s.rounds * s.images, -1);
        s.reference_logits.assign(s.images * s.classes, 0);
        s.layers.resize(net.layers.size());
        s.open(store);
    } catch (const h5::Error& e) {
        state_.reset();  // removes the temporary file
        throw FormatError(path, "file", std::string("cannot write results: ") + e.what());
    }
}

ResultsWriter::~ResultsWriter() = default;

void ResultsWriter::State::adopt_reference(int layer, std::span<const std::int8_t> values) {
    LayerState& ls = layers[std::size_t(layer)];
    ls.reference = values;
    ls.reference_set = true;
    try {
        if (ls.reference_ds && !values.empty()) ls.reference_ds->write(values.data());
    } catch (const h5::Error& e) {
        fail("layers/" + net.layers[std::size_t(layer)].name + "/reference", std::string("cannot write: ") + e.what());
    }
    if (layer == output_layer()) record_output(std::nullopt, values);
}

void ResultsWriter::set_reference(int layer, std::span<const std::int8_t> activations) {
    State& s = *state_;
    s.check_layer(layer);
    LayerState& ls = s.layers[std::size_t(layer)];
    const std::string field = "layers/" + s.net.layers[std::size_t(layer)].name + "/reference";
    if (activations.size() != s.layer_elements(layer))
        s.fail(field, "expected " + std::to_string(s.layer_elements(layer)) + " int8 values, got " +
                          std::to_string(activations.size()));
    // A new vector, not an assign: a RoundMetrics may still hold the previous one.
    ls.own_reference = std::make_shared<const std::vector<std::int8_t>>(activations.begin(), activations.end());
    s.adopt_reference(layer, *ls.own_reference);
}

void ResultsWriter::set_reference(std::shared_ptr<const ReferenceActivations> reference) {
    State& s = *state_;
    if (s.committed) s.fail("file", "already committed: the writer takes and gives no more layer data");
    if (!reference || !reference->sealed()) s.fail("reference", "not a sealed ReferenceActivations");
    // One shared reference per writer: a second would replace the hold on the first, whose bytes
    // the layers set from it still read.
    if (s.shared_reference) s.fail("reference", "this writer already shares a reference");
    if (reference->images() != s.images)
        s.fail("reference", "made for " + std::to_string(reference->images()) + " images, the run has " +
                                std::to_string(s.images));
    if (reference->layer_count() != s.layers.size())
        s.fail("reference", "made for a network of " + std::to_string(reference->layer_count()) +
                                " layers, this one has " + std::to_string(s.layers.size()));
    // Every check before the first write: a refused reference leaves the writer as it was.
    for (int l = 0; l < int(s.layers.size()); ++l) {
        if (s.layers[std::size_t(l)].reference_set || !reference_needed(l)) continue;
        const std::string field = "layers/" + s.net.layers[std::size_t(l)].name + "/reference";
        if (!reference->holds(l)) s.fail(field, "not in the shared reference");
        if (reference->layer(l).size() != s.layer_elements(l))
            s.fail(field, "the shared reference holds " + std::to_string(reference->layer(l).size()) +
                              " values, the layer has " + std::to_string(s.layer_elements(l)));
    }
    // Held before the first layer reads from it: a write that fails part-way leaves no layer reading
    // bytes the writer does not hold.
    s.shared_reference = std::move(reference);
    for (int l = 0; l < int(s.layers.size()); ++l)
        if (!s.layers[std::size_t(l)].reference_set && reference_needed(l))
            s.adopt_reference(l, s.shared_reference->layer(l));
}

void ResultsWriter::set_round(std::size_t round_index, int layer, std::span<const std::int8_t> activations) {
    State& s = *state_;
    LayerState& ls = s.round_layer(round_index, layer);
    const std::string field = s.activations_field(layer);
    if (activations.size() != s.layer_elements(layer))
        s.fail(field, "expected " + std::to_string(s.layer_elements(layer)) + " int8 values, got " +
                          std::to_string(activations.size()));
    ls.sums[round_index] = {};
    ls.sums[round_index].accumulate(activations, ls.reference);
    ls.round_set[round_index] = true;
    try {
        if (ls.activations && !activations.empty()) {
            h5::Dims start(5, 0), count = s.activations_dims(layer);
            start[0] = round_index;
            ls.activations->write_slab(start, count, activations.data());
        }
    } catch (const h5::Error& e) {
        s.fail(field, std::string("cannot write: ") + e.what());
    }
    if (layer == s.output_layer()) s.record_output(round_index, activations);
}

void ResultsWriter::set_round_sums(std::size_t round_index, int layer, const ActivationErrorSums& sums) {
    State& s = *state_;
    LayerState& ls = s.round_layer(round_index, layer);
    const std::string field = s.activations_field(layer);
    if (round_data_needed(layer)) s.fail(field, "the file needs this layer's activations: use set_round");
    if (sums.count != std::int64_t(s.layer_elements(layer)))
        s.fail(field, "metric sums over " + std::to_string(sums.count) + " values, the layer has " +
                          std::to_string(s.layer_elements(layer)));
    ls.sums[round_index] = sums;
    ls.round_set[round_index] = true;
}

bool ResultsWriter::round_data_needed(int layer) const {
    const State& s = *state_;
    s.check_layer(layer);
    return s.layers[std::size_t(layer)].activations.has_value() || layer == s.output_layer();
}

std::span<const std::int8_t> ResultsWriter::reference(int layer) const {
    const State& s = *state_;
    s.check_layer(layer);
    const LayerState& ls = s.layers[std::size_t(layer)];
    if (!ls.reference_set) s.fail("layers/" + s.net.layers[std::size_t(layer)].name + "/reference", "never set");
    return ls.reference;
}

std::shared_ptr<const void> ResultsWriter::reference_owner(int layer) const {
    const State& s = *state_;
    reference(layer);   // checks the index, that it is set and that the writer is not committed
    const LayerState& ls = s.layers[std::size_t(layer)];
    if (ls.own_reference && ls.reference.data() == ls.own_reference->data()) return ls.own_reference;
    return s.shared_reference;
}

namespace {
// Names inside a layer group that the layout defines (docs/hdf5_layout.md).
bool reserved_layer_name(const std::string& name) {
    for (const char* used : {"round", "chip", "t", "niu_round", "drift_compensation", "image", "y", "x", "channel", "reference", "activations", "snr_db",
                             "cosine", "mismatch_rate", "kind", "index", "input", "in_shape", "out_shape", "out_shift",
                             "activations_stored"})
        if (name == used) return true;
    return false;
}
}  // namespace

void ResultsWriter::set_layer_series(int layer, const std::string& name, std::span<const double> per_round) {
    State& s = *state_;
    s.check_layer(layer);
    LayerState& ls = s.layers[std::size_t(layer)];
    const std::string field = "layers/" + s.net.layers[std::size_t(layer)].name + "/" + name;
    if (name.empty() || name.find('/') != std::string::npos || reserved_layer_name(name))
        s.fail(field, "not a free dataset name in a layer group");
    if (per_round.size() != s.rounds)
        s.fail(field, "expected " + std::to_string(s.rounds) + " values (one per round), got " + std::to_string(per_round.size()));
    for (const auto& [existing, values] : ls.series)
        if (existing == name) s.fail(field, "already set");
    ls.series.emplace_back(name, std::vector<double>(per_round.begin(), per_round.end()));
}

void ResultsWriter::set_layer_attribute(int layer, const std::string& name, const std::string& value) {
    State& s = *state_;
    s.check_layer(layer);
    const std::string field = "layers/" + s.net.layers[std::size_t(layer)].name + "@" + name;
    if (name.empty() || reserved_layer_name(name)) s.fail(field, "not a free attribute name in a layer group");
    try {
        s.layers[std::size_t(layer)].group.write_attribute(name, value);
    } catch (const h5::Error& e) {
        s.fail(field, std::string("cannot write: ") + e.what());
    }
}

bool ResultsWriter::reference_needed(int layer) const {
    const State& s = *state_;
    s.check_layer(layer);
    return s.rounds > 0 || s.layers[std::size_t(layer)].reference_ds.has_value() || layer == s.output_layer();
}

void ResultsWriter::commit() {
    State& s = *state_;
    if (s.committed) s.fail("file", "already committed");
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
        const std::string& name = s.net.layers[i].name;
        if (!s.layers[i].reference_set && reference_needed(int(i))) s.fail("layers/" + name + "/reference", "never set");
        for (std::size_t r = 0; r < s.rounds; ++r)
            if (!s.layers[i].round_set[r])
                s.fail("layers/" + name + "/activations", "round " + std::to_string(r) + " never set");
    }
    try {
        s.write_predictions();
        for (std::size_t i = 0; i < s.layers.size(); ++i) s.write_layer_metrics(int(i));
        s.committed = true;  // the layers go now: from here on nothing may index them
        s.layers.clear();  // close every handle before the file
        s.round_logits.reset();
        s.out->commit();
    } catch (const h5::Error& e) {
        s.fail("file", std::string("cannot write results: ") + e.what());
    }
}

double ResultsWriter::reference_accuracy() const {
    return accuracy_of(state_->reference_predictions.data(), state_->spec.labels);
}

std::vector<double> ResultsWriter::round_accuracy() const {
    std::vector<double> acc;
    for (std::size_t r = 0; r < state_->rounds; ++r)
        acc.push_back(accuracy_of(&state_->round_predictions[r * state_->images], state_->spec.labels));
    return acc;
}

}  // namespace aimcemu
