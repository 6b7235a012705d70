// Reading and validating a results file: see results_reader.hpp.
#include "formats/results_reader.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <span>

#include "common/errors.hpp"
#include "common/h5.hpp"
#include "formats/between_reads_hook.hpp"
#include "formats/field_reader.hpp"
#include "formats/network.hpp"
#include "formats/untrusted_file.hpp"

namespace aimcemu {

namespace {

// A 1-D dataset of `type` with exactly `n` entries (n < 0: any length), read whole.
template <class T>
std::vector<T> vector_of(const FieldReader& r, const h5::Location& loc, const std::string& name, const std::string& field,
                         bool (*type_ok)(const h5::TypeInfo&), const std::string& type_name, std::int64_t n) {
    const h5::Dataset ds = r.dataset(loc, name, field, type_ok, type_name);
    const h5::Dims d = r.dims(ds, field);
    r.require(d.size() == 1 && (n < 0 || d[0] == hsize_t(n)), field,
              "expected shape [" + (n < 0 ? std::string("n") : std::to_string(n)) + "], found " + dims_text(d));
    return r.read<T>(ds, field);
}

// A dataset whose shape must be `expected` exactly (not read: activations can be large).
void require_shape(const FieldReader& r, const h5::Location& loc, const std::string& name, const std::string& field,
                   bool (*type_ok)(const h5::TypeInfo&), const std::string& type_name, const h5::Dims& expected) {
    const h5::Dataset ds = r.dataset(loc, name, field, type_ok, type_name);
    const h5::Dims d = r.dims(ds, field);
    r.require(d == expected, field, "expected shape " + dims_text(expected) + ", found " + dims_text(d));
}

// The round coordinates stored in `loc` (the root or a layer group); all of length `rounds`
// when rounds >= 0.
std::vector<RoundInfo> read_round_coordinates(const FieldReader& r, const h5::Location& loc, const std::string& prefix,
                                              std::int64_t rounds) {
    const auto position = vector_of<std::int64_t>(r, loc, "round", prefix + "round", is_integer, "integers", rounds);
    const auto n = std::int64_t(position.size());
    for (std::int64_t i = 0; i < n; ++i)
        r.require(position[std::size_t(i)] == i, prefix + "round", "must be the positions 0..R-1");
    const auto chips = vector_of<std::int64_t>(r, loc, "chip", prefix + "chip", is_integer, "integers", n);
    const auto times = vector_of<double>(r, loc, "t", prefix + "t", is_float, "floats", n);
    const auto niu_rounds = vector_of<std::int64_t>(r, loc, "niu_round", prefix + "niu_round", is_integer, "integers", n);
    const h5::Dataset comp = r.dataset(loc, "drift_compensation", prefix + "drift_compensation",
                                       [](const h5::TypeInfo& t) { return t.is_string; }, "strings");
    const auto names = r.read_strings(comp, prefix + "drift_compensation");
    r.require(std::int64_t(names.size()) == n, prefix + "drift_compensation",
              "expected " + std::to_string(n) + " entries, found " + std::to_string(names.size()));
    std::vector<RoundInfo> out(position.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = {niu_rounds[i], chips[i], times[i], names[i]};
        require_valid_round(out[i], r.path(), prefix);  // the writer's rules (results.hpp)
    }
    return out;
}

Shape3 shape_attribute(const FieldReader& r, const h5::Location& g, const std::string& name, const std::string& field) {
    const auto v = r.integers(g, name, field, 3);
    for (auto d : v) r.require(d >= 1 && d <= std::int64_t(1) << 30, field, "dimensions must be in 1..2^30");
    return {int(v[0]), int(v[1]), int(v[2])};
}

void require_fraction(const FieldReader& r, const std::vector<double>& values, const std::string& field) {
    for (double v : values) r.require(v >= 0.0 && v <= 1.0, field, "values must be in 0..1");
}

// The three metrics of a round derive from the same exact sums (analysis/metrics.hpp), so they
// agree on the edge cases: noisy == ref in every element is mismatch_rate 0, and that alone gives
// snr_db +inf (error energy 0) and cosine 1; snr_db -inf (reference all zero, noisy not) has
// cosine 0.  A file that breaks one of these was not written by the writer: refused, naming the
// metric that contradicts the mismatch rate (or the SNR) and the round.
void require_consistent_metrics(const FieldReader& r, const ResultsLayerInfo& l, const std::string& prefix) {
    constexpr double kCosineSlack = 4 * std::numeric_limits<double>::epsilon();
    for (std::size_t k = 0; k < l.snr_db.size(); ++k) {
        const bool identical = l.mismatch_rate[k] == 0.0;
        const bool snr_infinite = l.snr_db[k] == std::numeric_limits<double>::infinity();
        if (identical != snr_infinite)
            r.fail(prefix + "snr_db", "round " + std::to_string(k) + ": " + std::to_string(l.snr_db[k]) +
                                          " dB contradicts mismatch_rate " + std::to_string(l.mismatch_rate[k]) +
                                          " (+inf exactly when no element differs)");
        if (identical && !(std::abs(l.cosine[k] - 1.0) <= kCosineSlack))
            r.fail(prefix + "cosine", "round " + std::to_string(k) + ": " + std::to_string(l.cosine[k]) +
                                          " where no element differs (must be 1)");
        if (l.snr_db[k] == -std::numeric_limits<double>::infinity() && l.cosine[k] != 0.0)
            r.fail(prefix + "cosine", "round " + std::to_string(k) + ": " + std::to_string(l.cosine[k]) +
                                          " where snr_db is -inf, an all-zero reference (must be 0)");
    }
}

// A layer group repeats the root's round coordinates (so xarray sees them on the group alone);
// a group whose rounds differ would give open_layer other coordinates than open_run.
void require_same_rounds(const FieldReader& r, const std::vector<RoundInfo>& group, const std::vector<RoundInfo>& root,
                         const std::string& prefix) {
    // Messages are built only on failure: these loops run for every round of every layer.
    const auto differs = [&](const std::string& name, std::size_t i) {
        r.fail(prefix + name, name + " at round " + std::to_string(i) + " differs from the root's");
    };
    for (std::size_t i = 0; i < root.size(); ++i) {
        if (group[i].chip != root[i].chip) differs("chip", i);
        if (group[i].t != root[i].t) differs("t", i);
        if (group[i].niu_round != root[i].niu_round) differs("niu_round", i);
        if (group[i].drift_compensation != root[i].drift_compensation) differs("drift_compensation", i);
    }
}

// Predictions are class indices, and each accuracy is the share of them equal to the labels,
// computed as the writer computes it (results.cpp accuracy_of), so the comparison is exact.
// Predictions are uncompressed int64 [rounds, images], checked a block of rounds at a time
// (require_accuracy_of_prediction_rows); the logits, larger and compressed, are not read.
// `predictions` holds the rows of the rounds first_round.. (one accuracy each, in `accuracy`).
void require_accuracy_of_predictions(const FieldReader& r, std::span<const std::int64_t> predictions,
                                     const std::vector<std::int64_t>& labels, std::int64_t classes,
                                     std::span<const double> accuracy, const std::string& predictions_field,
                                     const std::string& accuracy_field, bool per_round, std::size_t first_round = 0) {
    const std::size_t images = labels.size();
    for (std::size_t at = 0; at < accuracy.size(); ++at) {
        const std::size_t round = first_round + at;
        const std::int64_t* row = predictions.data() + at * images;
        // Branch-free so that it vectorises (it runs for every prediction); the first bad index is
        // looked for only when there is one, and the messages are built only on failure.
        std::size_t correct = 0;
        bool outside = false;
        for (std::size_t i = 0; i < images; ++i) {
            outside |= std::uint64_t(row[i]) >= std::uint64_t(classes);
            correct += row[i] == labels[i];
        }
        if (outside) {
            const std::int64_t p = *std::find_if(row, row + images, [&](std::int64_t v) { return v < 0 || v >= classes; });
            r.fail(predictions_field, "class index " + std::to_string(p) + " outside 0.." + std::to_string(classes - 1));
        }
        if (accuracy[at] != double(correct) / double(images))
            r.fail(accuracy_field, (per_round ? "round " + std::to_string(round) + ": " : std::string()) + "stored " +
                                       std::to_string(accuracy[at]) + ", but " + predictions_field + " match " +
                                       std::to_string(correct) + " of " + std::to_string(images) +
                                       " labels (they disagree)");
    }
}

// Bytes of predictions read at once (at least one round's row): the check streams them, so that
// opening a file of 640 rounds x 50,000 images does not hold its 256 MB of predictions (twice: here
// and in the checking process).
constexpr std::size_t kPredictionBlockBytes = std::size_t(8) << 20;

// The predictions [rounds, images] (their type and shape checked) against `accuracy` and `labels`,
// read a block of rounds at a time into one buffer: the checks and errors of reading them whole.
void require_accuracy_of_prediction_rows(const FieldReader& r, const h5::Dataset& predictions,
                                         const std::vector<std::int64_t>& labels, std::int64_t classes,
                                         const std::vector<double>& accuracy) {
    const std::string field = "predictions";
    const std::uint64_t count = r.check_readable(predictions, field, sizeof(std::int64_t));
    const std::size_t rounds = accuracy.size(), images = labels.size();
    if (count == 0) return;
    const std::size_t rows_per_block = std::max<std::size_t>(1, kPredictionBlockBytes / (images * sizeof(std::int64_t)));
    std::unique_ptr<std::int64_t[]> block(new std::int64_t[std::min(rounds, rows_per_block) * images]);  // not zero-filled
    for (std::size_t first = 0; first < rounds; first += rows_per_block) {
        const std::size_t rows = std::min(rows_per_block, rounds - first);
        r.guarded(field, [&] {
            const h5::Dims start{hsize_t(first), 0}, size{hsize_t(rows), hsize_t(images)};
            const h5::Handle file_space(h5::check(H5Dget_space(predictions.id()), "H5Dget_space"));
            h5::check(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, size.data(), nullptr),
                      "H5Sselect_hyperslab");
            const h5::Handle memory_space(h5::check(H5Screate_simple(2, size.data(), nullptr), "H5Screate_simple"));
            return h5::check(H5Dread(predictions.id(), h5::native_type<std::int64_t>(), memory_space.id(), file_space.id(),
                                     H5P_DEFAULT, block.get()),
                             "H5Dread");
        });
        require_accuracy_of_predictions(r, {block.get(), rows * images}, labels, classes,
                                        std::span<const double>(accuracy).subspan(first, rows), field, "accuracy", true,
                                        first);
    }
}

ResultsLayerInfo read_layer(const FieldReader& r, const h5::Location& layers, const std::string& name, int index,
                            const std::vector<RoundInfo>& root_rounds, std::int64_t images) {
    const auto rounds = std::int64_t(root_rounds.size());
    const std::string f = "layers/" + name + "/";
    const h5::Location g = r.group(layers, name, "layers/" + name);
    ResultsLayerInfo l;
    l.name = name;
    l.kind = r.text(g, "kind", f + "kind");
    try {
        (void)layer_kind_from_string(l.kind, r.path());
    } catch (const FormatError&) {
        r.fail(f + "kind", "unknown layer kind '" + l.kind + "'");
    }
    l.index = int(r.integer(g, "index", f + "index", index, index));
    l.input = r.text(g, "input", f + "input");
    l.in_shape = shape_attribute(r, g, "in_shape", f + "in_shape");
    l.out_shape = shape_attribute(r, g, "out_shape", f + "out_shape");
    l.out_shift = int(r.integer(g, "out_shift", f + "out_shift", 0, 31));
    l.activations_stored = r.flag(g, "activations_stored", f + "activations_stored");
    require_same_rounds(r, read_round_coordinates(r, g, f, rounds), root_rounds, f);
    l.snr_db = vector_of<double>(r, g, "snr_db", f + "snr_db", is_float, "floats", rounds);
    l.cosine = vector_of<double>(r, g, "cosine", f + "cosine", is_float, "floats", rounds);
    l.mismatch_rate = vector_of<double>(r, g, "mismatch_rate", f + "mismatch_rate", is_float, "floats", rounds);
    // +-inf are SNR's edge cases (docs/hdf5_layout.md); NaN is no value any round gives.
    // Per value, so the field's name and the message are built only on failure.
    for (double v : l.snr_db)
        if (std::isnan(v)) r.fail(f + "snr_db", "NaN (SNR is a number or +-inf)");
    // A few ulps of slack: the writer's sum / sqrt(product) can round past 1 for a round exactly
    // proportional to the reference.
    constexpr double kCosineBound = 1.0 + 4 * std::numeric_limits<double>::epsilon();
    for (double v : l.cosine)
        if (!(v >= -kCosineBound && v <= kCosineBound)) r.fail(f + "cosine", "values must be in -1..1");
    require_fraction(r, l.mismatch_rate, f + "mismatch_rate");
    require_consistent_metrics(r, l, f);
    if (l.activations_stored) {
        const h5::Dims ref{hsize_t(images), hsize_t(l.out_shape.h), hsize_t(l.out_shape.w), hsize_t(l.out_shape.c)};
        require_shape(r, g, "reference", f + "reference", is_int8, "int8", ref);
        h5::Dims act = ref;
        act.insert(act.begin(), hsize_t(rounds));
        require_shape(r, g, "activations", f + "activations", is_int8, "int8", act);
    }
    return l;
}

}  // namespace

// Opened once: the checking process and this one read the same file (untrusted_file.hpp).
ResultsFileInfo read_results(const std::string& path) {
    const OpenedFile file = open_user_file(path);
    if (check_in_helper(FileKind::Results, file)) between_reads(path);
    return read_results_in_process(path, file.fd());
}

std::vector<ResultsFileInfo> read_results_files(const std::vector<std::string>& paths) {
    std::vector<ResultsFileInfo> infos;
    infos.reserve(paths.size());
    for_each_checked_file(FileKind::Results, paths, [&](const OpenedFile& file, bool) {
        infos.push_back(read_results_in_process(file.path, file.fd()));
    });
    return infos;
}

std::vector<std::variant<ResultsFileInfo, FormatError>> read_each_results_file(const std::vector<std::string>& paths) {
    std::vector<std::variant<ResultsFileInfo, FormatError>> outcomes;
    outcomes.reserve(paths.size());
    for_each_checked_file(
        FileKind::Results, paths,
        [&](const OpenedFile& file, bool) { outcomes.emplace_back(read_results_in_process(file.path, file.fd())); },
        [&](const FormatError& error) { outcomes.emplace_back(error); });
    return outcomes;
}

ResultsFileInfo read_results_in_process(const std::string& path, int file_fd) {
    const FieldReader r(path, file_fd);
    const h5::File file = r.open();
    r.check_format(file, kResultsFormat, kResultsFormatVersion);
    ResultsFileInfo info;
    info.model = r.text(file, "model", "model");
    info.config_json = r.text(file, "config", "config");
    info.class_names = r.texts(file, "class_names", "class_names");
    info.layer_names = r.texts(file, "layer_names", "layer_names");
    // The model's name as its model file allows it; class names as any writer stored them.
    check_display_name(info.model, path, "model");
    for (std::size_t i = 0; i < info.layer_names.size(); ++i)
        check_layer_name(info.layer_names[i], path, "layer_names/" + std::to_string(i));

    info.rounds = read_round_coordinates(r, file, "", -1);
    const auto rounds = std::int64_t(info.rounds.size());
    const auto image = vector_of<std::int64_t>(r, file, "image", "image", is_integer, "integers", -1);
    const auto images = std::int64_t(image.size());
    r.require(images >= 1, "image", "a results file holds at least one image");
    const auto classes = vector_of<std::int64_t>(r, file, "class", "class", is_integer, "integers", -1);
    info.classes = std::int64_t(classes.size());
    r.require(info.classes >= 1, "class", "a results file holds at least one class");
    r.require(info.class_names.empty() || std::int64_t(info.class_names.size()) == info.classes, "class_names",
              std::to_string(info.class_names.size()) + " names for " + std::to_string(info.classes) + " classes");
    info.labels = vector_of<std::int64_t>(r, file, "labels", "labels", is_integer, "integers", images);
    require_class_labels(info.labels, info.classes, r.path());

    const h5::Dataset predictions = r.dataset(file, "predictions", "predictions", is_integer, "integers");
    const h5::Dims prediction_dims{hsize_t(rounds), hsize_t(images)};
    r.require(r.dims(predictions, "predictions") == prediction_dims, "predictions",
              "expected shape " + dims_text(prediction_dims) + ", found " + dims_text(r.dims(predictions, "predictions")));
    require_shape(r, file, "logits", "logits", is_int8, "int8", {hsize_t(rounds), hsize_t(images), hsize_t(info.classes)});
    info.accuracy = vector_of<double>(r, file, "accuracy", "accuracy", is_float, "floats", rounds);
    require_fraction(r, info.accuracy, "accuracy");
    require_accuracy_of_prediction_rows(r, predictions, info.labels, info.classes, info.accuracy);
    const auto reference_predictions = vector_of<std::int64_t>(r, file, "reference_predictions", "reference_predictions",
                                                               is_integer, "integers", images);
    require_shape(r, file, "reference_logits", "reference_logits", is_int8, "int8", {hsize_t(images), hsize_t(info.classes)});
    const h5::Dataset ref_acc = r.dataset(file, "reference_accuracy", "reference_accuracy", is_float, "a float");
    r.require(r.dims(ref_acc, "reference_accuracy").empty(), "reference_accuracy", "expected a scalar");
    info.reference_accuracy = r.read<double>(ref_acc, "reference_accuracy").at(0);
    require_fraction(r, {info.reference_accuracy}, "reference_accuracy");
    require_accuracy_of_predictions(r, reference_predictions, info.labels, info.classes,
                                    std::span<const double>(&info.reference_accuracy, 1), "reference_predictions",
                                    "reference_accuracy", false);

    const h5::Location layers = r.group(file, "layers", "layers");
    const auto names = r.children(layers, "layers");
    r.require(names == info.layer_names, "layers", "its groups differ from the root's layer_names");
    for (std::size_t i = 0; i < names.size(); ++i)
        info.layers.push_back(read_layer(r, layers, names[i], int(i), info.rounds, images));
    r.require(!info.layers.empty(), "layers", "a results file holds at least one layer");
    return info;
}

}  // namespace aimcemu
