// Bindings for the model file, the data set file, the results writer and the activation metrics.
#include <mutex>
#include <shared_mutex>
#include <stdexcept>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "analysis/metrics.hpp"
#include "emulator/round_metrics.hpp"
#include "formats/results.hpp"
#include "arrays.hpp"
#include "bindings.hpp"
#include "common/errors.hpp"
#include "formats/field_reader.hpp"
#include "formats/model_file.hpp"
#include "network_guard.hpp"

namespace py = pybind11;
using namespace aimcemu;

namespace {

using bindings::Int8Array;
using bindings::require_int8;

std::span<const std::int8_t> as_span(const Int8Array& a) { return {a.data(), std::size_t(a.size())}; }

std::vector<std::int64_t> require_integers(const py::array& a, const std::string& source, const std::string& field) {
    if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
        throw FormatError(source, field, "expected an integer array, got dtype " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw FormatError(source, field, "expected a 1-D array");
    auto as64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    return {as64.data(), as64.data() + as64.size()};
}

// The data set as Python sees it; the images and labels arrays view the vectors read (owned by a
// capsule that the arrays keep alive) instead of copying them.
py::dict dataset_to_python(DataSet&& read) {
    auto* d = new DataSet(std::move(read));
    const py::capsule owner(d, [](void* p) { delete static_cast<DataSet*>(p); });
    py::dict out;
    const std::vector<py::ssize_t> shape{py::ssize_t(d->count()), d->image_shape.h, d->image_shape.w, d->image_shape.c};
    out["images"] = py::array_t<std::int8_t>(shape, d->images.data(), owner);
    out["labels"] = py::array_t<std::int64_t>(py::ssize_t(d->labels.size()), d->labels.data(), owner);
    out["source"] = d->source;
    out["description"] = d->description;
    out["input_frac_bits"] = d->input_frac_bits < 0 ? py::object(py::none()) : py::object(py::int_(d->input_frac_bits));
    return out;
}

// A data set's header (load_dataset_header) as Python: what load_dataset gives, with the image
// shape and count in place of the images.
py::dict dataset_header_to_python(DataSet&& read) {
    auto* d = new DataSet(std::move(read));
    const py::capsule owner(d, [](void* p) { delete static_cast<DataSet*>(p); });
    py::dict out;
    out["image_shape"] = py::make_tuple(d->image_shape.h, d->image_shape.w, d->image_shape.c);
    out["count"] = d->count();
    out["labels"] = py::array_t<std::int64_t>(py::ssize_t(d->labels.size()), d->labels.data(), owner);
    out["source"] = d->source;
    out["description"] = d->description;
    out["input_frac_bits"] = d->input_frac_bits < 0 ? py::object(py::none()) : py::object(py::int_(d->input_frac_bits));
    return out;
}

void save_dataset_py(const py::array& images, const py::array& labels, const std::string& path, const std::string& source,
                     const std::string& description, std::optional<int> input_frac_bits) {
    const Int8Array im = require_int8(images, path, "images");
    if (im.ndim() != 4) throw FormatError(path, "images", "expected shape [image, y, x, channel]");
    DataSet d;
    d.image_shape = {int(im.shape(1)), int(im.shape(2)), int(im.shape(3))};
    d.images.assign(im.data(), im.data() + im.size());
    d.labels = require_integers(labels, path, "labels");
    if (std::int64_t(d.labels.size()) != im.shape(0)) throw FormatError(path, "labels", "expected one label per image");
    d.source = source;
    d.description = description;
    d.input_frac_bits = input_frac_bits.value_or(-1);
    save_dataset(d, path);
}

// Every field of `net` that its activations depend on (and the rest of its structure, all but the
// GEMM operands) as bytes in a fixed order: integers as int64 little-endian, strings and lists
// length-prefixed, so that two different structures never give the same bytes.
std::string network_structure_bytes(const Network& net) {
    std::string out;
    const auto integer = [&out](std::int64_t v) {
        for (int b = 0; b < 8; ++b) out.push_back(char((std::uint64_t(v) >> (8 * b)) & 0xff));
    };
    const auto text = [&](const std::string& v) {
        integer(std::int64_t(v.size()));
        out += v;
    };
    text(net.name);
    for (int v : {net.input_shape.h, net.input_shape.w, net.input_shape.c, net.input_frac_bits, net.output_layer}) integer(v);
    integer(std::int64_t(net.class_names.size()));
    for (const auto& c : net.class_names) text(c);
    integer(std::int64_t(net.layers.size()));
    for (const Layer& l : net.layers) {
        text(l.name);
        const Window& w = l.window;
        for (std::int64_t v : {std::int64_t(l.kind), std::int64_t(l.input), std::int64_t(w.kernel_h), std::int64_t(w.kernel_w),
                               std::int64_t(w.stride_h), std::int64_t(w.stride_w), std::int64_t(w.pad_top),
                               std::int64_t(w.pad_bottom), std::int64_t(w.pad_left), std::int64_t(w.pad_right),
                               std::int64_t(l.out_channels), std::int64_t(l.bias_shift), std::int64_t(l.out_shift),
                               std::int64_t(l.relu), std::int64_t(l.residual_input), std::int64_t(l.residual_shift),
                               std::int64_t(l.relu_after_residual), std::int64_t(l.input_shift), std::int64_t(l.avg_mult),
                               std::int64_t(l.weights.size()), std::int64_t(l.bias.size())})
            integer(v);
    }
    return out;
}

// One operand of a network exported read-only to Python (the buffer feed_network's memoryviews
// view).  It holds the network's Python object and a read of it (network_guard.hpp), so while any
// view or export of these bytes lives the network can be neither freed nor changed: a callback that
// keeps what it was given (np.frombuffer of the view, say) makes the network refuse changes instead
// of reading freed memory later.
class NetworkOperandBytes {
public:
    NetworkOperandBytes(py::object network, const std::vector<std::int8_t>& operand)
        : network_(std::move(network)), reading_(network_.cast<const Network&>()), operand_(operand) {}
    py::buffer_info buffer() const {
        return py::buffer_info(const_cast<std::int8_t*>(operand_.data()), 1, "B", 1, {py::ssize_t(operand_.size())},
                               {py::ssize_t(1)}, /*readonly=*/true);
    }

private:
    py::object network_;  // declared first: the read is lowered before the network is let go
    bindings::NetworkReadGuard reading_;
    const std::vector<std::int8_t>& operand_;  // unchanged while reading_ stands
};

// Feeds `update` (e.g. a hashlib object's update) the network's structure bytes, then every
// layer's weights and bias as read-only memoryviews of the network's own memory (no copy).  The
// network is guarded while this runs (update is Python: it may try to change the network, and
// hashlib hashes without the GIL while other threads run), and each view is released when update
// returns: a view kept by update raises ValueError when used; if update exported it further,
// release() raises BufferError, and that export keeps the network unchangeable while it lives.
void feed_network(const py::object& network, const py::object& update) {
    if (!py::isinstance<Network>(network))
        throw py::type_error("feed_network: net must be an aimcemu._core.Network, got " +
                             std::string(py::str(py::type::of(network))));
    const Network& net = network.cast<const Network&>();
    const bindings::NetworkReadGuard reading(net);
    update(py::bytes(network_structure_bytes(net)));
    for (const Layer& l : net.layers)
        for (const auto* operand : {&l.weights, &l.bias}) {
            if (operand->empty()) continue;
            const py::memoryview view(py::cast(std::make_unique<NetworkOperandBytes>(network, *operand)));
            try {
                update(view);
            } catch (...) {
                try {
                    view.attr("release")();
                } catch (const py::error_already_set&) {  // update's own error is the one to report
                }
                throw;
            }
            view.attr("release")();
        }
}

// One noisy round from Python: (niu_round, chip, t) or (niu_round, chip, t, drift_compensation).
RoundInfo round_info(const py::handle& item, std::size_t position) {
    const auto values = py::cast<py::sequence>(item);
    if (values.size() != 3 && values.size() != 4)
        throw FormatError("<results>", "rounds[" + std::to_string(position) + "]",
                          "expected (niu_round, chip, t) or (niu_round, chip, t, drift_compensation)");
    RoundInfo r{values[0].cast<std::int64_t>(), values[1].cast<std::int64_t>(), values[2].cast<double>()};
    if (values.size() == 4) r.drift_compensation = values[3].cast<std::string>();
    return r;
}

// Takes `mutex` through a `Lock` (std::unique_lock or std::shared_lock) for a caller that holds the
// GIL, which it never blocks while holding: a thread waiting for the lock with the GIL would stop
// the thread holding the lock from ever getting the GIL back, and every other Python thread
// meanwhile.  Uncontended (the usual case) it is one try_lock.
template <class Lock, class Mutex>
Lock lock_holding_gil(Mutex& mutex) {
    Lock lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) {
        py::gil_scoped_release release;
        lock.lock();
    }
    return lock;
}

// The streaming results writer with Python-friendly arguments: rounds as (niu_round, chip, t[,
// drift_compensation]) tuples, layers as names or indices, layers_stored as "all", "none" or a
// list of names.
//
// Any number of Python threads may call one writer at once (a run's RoundWriter thread writes
// rounds while the run's thread takes the next round's metrics).  The C++ ResultsWriter is not
// thread-safe, and its long calls run without the GIL, so two locks order them:
//  - layers_lock_ guards the layers and their references, which set_reference, share_reference,
//    set_layer_series, set_layer_attribute and commit change (exclusive; commit frees them) and
//    every other call reads (shared);
//  - rounds_lock_ guards the rounds' sums and predictions, which set_round and set_round_metrics
//    write and round_accuracy reads.
// So the run's round_metrics() waits for no set_round of the round before (what the RoundWriter
// overlaps), and nothing reads a layer that commit or set_reference is freeing.  Locks are taken
// in that order, never while blocking with the GIL held (lock_holding_gil), and the Python
// arguments are converted before either is taken (a conversion may run Python that calls the
// writer again).
class PyResultsWriter {
public:
    PyResultsWriter(const std::string& path, const Network& net, const py::array& labels,
                    const py::sequence& rounds, const std::string& config_json, const py::object& layers,
                    int deflate, bool overwrite)
        : net_(net.without_operands()) {
        ResultsSpec spec;
        spec.config_json = config_json;
        spec.labels = require_integers(labels, path, "labels");
        for (std::size_t i = 0; i < rounds.size(); ++i) spec.rounds.push_back(round_info(rounds[i], i));
        if (py::isinstance<py::str>(layers)) {
            const std::string choice = layers.cast<std::string>();
            if (choice == "none") spec.store_no_activations = true;
            else if (choice != "all") spec.stored_layers = {choice};
        } else if (!layers.is_none()) {
            spec.stored_layers = layers.cast<std::vector<std::string>>();
            spec.store_no_activations = spec.stored_layers.empty();
        }
        spec.deflate_level = deflate;
        spec.replace_existing = overwrite;
        // Without the GIL: the writer works on its own copies (net_, spec), and a run hashes its
        // reference key on another thread meanwhile (aimcemu.reference.ContentDigest).  No lock:
        // no other thread can reach the writer before its constructor returns.
        py::gil_scoped_release release;
        writer_ = std::make_unique<ResultsWriter>(path, net_, std::move(spec));
    }

    // Reads only net_, which never changes: no lock.
    int layer_index(const py::object& layer) const {
        if (py::isinstance<py::str>(layer)) {
            const std::string name = layer.cast<std::string>();
            const int i = net_.find_layer(name);
            if (i < 0) throw FormatError("<results>", "layers", "no layer named '" + name + "'");
            return i;
        }
        return layer.cast<int>();
    }

    void set_reference(const py::object& layer, const py::array& activations) {
        const int i = layer_index(layer);
        const Int8Array a = require_int8(activations, "<results>", "reference");
        py::gil_scoped_release release;
        const std::unique_lock layers(layers_lock_);
        writer_->set_reference(i, as_span(a));
    }

    void set_round(std::size_t round_index, const py::object& layer, const py::array& activations) {
        const int i = layer_index(layer);
        const Int8Array a = require_int8(activations, "<results>", "activations");
        py::gil_scoped_release release;
        const std::shared_lock layers(layers_lock_);
        const std::lock_guard rounds(rounds_lock_);
        writer_->set_round(round_index, i, as_span(a));
    }

    void set_layer_series(const py::object& layer, const std::string& name,
                          const py::array_t<double, py::array::c_style | py::array::forcecast>& values) {
        if (values.ndim() != 1) throw FormatError("<results>", name, "expected a 1-D array of one value per round");
        const int i = layer_index(layer);
        const auto layers = lock_holding_gil<std::unique_lock<std::shared_mutex>>(layers_lock_);
        writer_->set_layer_series(i, name, {values.data(), std::size_t(values.size())});
    }

    void set_layer_attribute(const py::object& layer, const std::string& name, const std::string& value) {
        const int i = layer_index(layer);
        const auto layers = lock_holding_gil<std::unique_lock<std::shared_mutex>>(layers_lock_);
        writer_->set_layer_attribute(i, name, value);
    }

    void share_reference(std::shared_ptr<ReferenceActivations> reference) {
        const auto layers = lock_holding_gil<std::unique_lock<std::shared_mutex>>(layers_lock_);
        writer_->set_reference(std::shared_ptr<const ReferenceActivations>(std::move(reference)));
    }

    void commit() {
        py::gil_scoped_release release;
        const std::unique_lock layers(layers_lock_);
        writer_->commit();
    }

    // The metrics of one noisy round, for the PU to take during its pass (run_published's metrics).
    std::unique_ptr<RoundMetrics> round_metrics() const {
        const auto layers = lock_holding_gil<std::shared_lock<std::shared_mutex>>(layers_lock_);
        return std::make_unique<RoundMetrics>(*writer_, net_);
    }

    // Round `round_index`'s metrics of every layer `metrics` measured.
    void set_round_metrics(std::size_t round_index, const RoundMetrics& metrics) {
        py::gil_scoped_release release;
        const std::shared_lock layers(layers_lock_);
        metrics.check_writer(*writer_, net_, "<results>");
        metrics.claim_round(round_index, "<results>");
        try {
            const std::lock_guard rounds(rounds_lock_);
            for (int l = 0; l < int(net_.layers.size()); ++l)
                if (metrics.measured(l)) writer_->set_round_sums(round_index, l, metrics.sums(l));
        } catch (...) {
            metrics.release_round();  // nothing of theirs counts as stored: they may be stored again
            throw;
        }
    }

    bool reference_needed(const py::object& layer) const {
        const int i = layer_index(layer);
        const auto layers = lock_holding_gil<std::shared_lock<std::shared_mutex>>(layers_lock_);
        return writer_->reference_needed(i);
    }

    double reference_accuracy() const {
        const auto layers = lock_holding_gil<std::shared_lock<std::shared_mutex>>(layers_lock_);
        return writer_->reference_accuracy();
    }

    std::vector<double> round_accuracy() const {
        const auto layers = lock_holding_gil<std::shared_lock<std::shared_mutex>>(layers_lock_);
        const auto rounds = lock_holding_gil<std::unique_lock<std::mutex>>(rounds_lock_);
        return writer_->round_accuracy();
    }

private:
    // A copy, so the Python object may change or die while the writer lives; without the weights,
    // which neither the writer nor the round metrics read.
    Network net_;
    std::unique_ptr<ResultsWriter> writer_;
    mutable std::shared_mutex layers_lock_;  // see the class comment
    mutable std::mutex rounds_lock_;
};

void bind_io(py::module_& m) {
    m.def("save_model", &save_model, py::arg("net"), py::arg("path"),
          "Validate `net` and write it atomically to the HDF5 model file `path` (docs/model_format.md).");
    m.def("load_model", static_cast<Network (*)(const std::string&)>(&load_model), py::arg("path"),
          "Read and validate a model file; raises FormatError naming the file and the field.");

    // The writers' own name rules, for importers that refuse a name before they build anything.
    m.def("check_layer_name", &check_layer_name, py::arg("name"), py::arg("source"), py::arg("field"),
          "Raise FormatError(source, field) when `name` cannot name a layer: empty, '.' or '..', or "
          "holding '/' or a control character (formats/network.hpp).");
    m.def("printable", [](const py::bytes& text) { return printable(std::string(text)); }, py::arg("text"),
          "`text` (UTF-8 bytes) for an error message: control bytes and bytes outside valid UTF-8 as \\xNN "
          "(formats/field_reader.hpp; the one escaping rule of every message)");
    m.def("check_storable_text", &check_storable_text, py::arg("text"), py::arg("source"), py::arg("field"),
          "Raise FormatError(source, field) when `text` holds a NUL byte (HDF5 text would end there).");
    m.def("check_display_name", &check_display_name, py::arg("text"), py::arg("source"), py::arg("field"),
          "Raise FormatError(source, field) unless `text` can name a network or class: storable, UTF-8, and "
          "free of control characters (it is printed in tables).");

    m.def("save_dataset", &save_dataset_py, py::arg("images"), py::arg("labels"), py::arg("path"),
          py::arg("source") = "", py::arg("description") = "", py::arg("input_frac_bits") = py::none(),
          "Write a data set file: int8 images [N, H, W, C] (already quantized) and integer labels [N].");
    py::class_<FileCheck>(m, "FileCheck",
                          "What the checking process found in a data set file it read beside a model file\n"
                          "(load_model_and_check_dataset); load_dataset(path, check=...) raises it")
        .def_property_readonly("path", [](const FileCheck& c) { return c.path; });
    m.def("load_model_and_check_dataset", [](const std::string& path, const std::string& dataset, bool header_only) {
        FileCheck check;
        Network net = load_model(path, dataset, check, header_only ? FileKind::DataSetHeader : FileKind::DataSet);
        return py::make_tuple(std::move(net), check);
    }, py::arg("path"), py::arg("dataset"), py::arg("header_only") = false,
          "load_model, with the data set file read in the same checking process (one process start instead\n"
          "of two): returns (network, check); pass check to load_dataset, which raises what it found.  With\n"
          "header_only, that process reads the data set as load_dataset_header does (no image values);\n"
          "load_dataset with such a check then checks the whole file first.");
    m.def("load_dataset", [](const std::string& path, const Network* net, const FileCheck* check) {
        DataSet d = check != nullptr ? load_dataset(path, *check) : load_dataset(path);
        if (net) check_dataset_fits(d, *net, path);
        return dataset_to_python(std::move(d));
    }, py::arg("path"), py::arg("net") = nullptr, py::arg("check") = nullptr,
          "Read a data set file as a dict (images, labels, source, description, input_frac_bits); with "
          "`net`, also check that it fits the network; with `check` (load_model_and_check_dataset's), use\n"
          "what the checking process found instead of starting another.");
    m.def("load_dataset_header", [](const std::string& path, const Network* net, const FileCheck* check) {
        DataSet d = check != nullptr ? load_dataset_header(path, *check) : load_dataset_header(path);
        if (net) check_dataset_fits(d, *net, path);
        return dataset_header_to_python(std::move(d));
    }, py::arg("path"), py::arg("net") = nullptr, py::arg("check") = nullptr,
          "Read a data set file but for its images' values (checked as load_dataset checks them, not read),\n"
          "as a dict (image_shape, count, labels, source, description, input_frac_bits); with `net`, also\n"
          "check that it fits the network; with `check` (load_model_and_check_dataset's), use what the\n"
          "checking process found instead of starting another.");

    py::class_<NetworkOperandBytes>(m, "_NetworkOperandBytes", py::buffer_protocol())
        .def_buffer(&NetworkOperandBytes::buffer);
    m.def("feed_network", &feed_network, py::arg("net"), py::arg("update"),
          "Calls update(bytes) with everything a network's activations depend on: its structure (every\n"
          "field but the operands, in a fixed encoding), then each layer's weights and bias (read-only\n"
          "memoryviews, no copy, released when update returns).  The network refuses changes meanwhile\n"
          "(NetworkInUseError).  For content digests: hashlib.sha256(); feed_network(net, h.update).");

    py::class_<ReferenceActivations, std::shared_ptr<ReferenceActivations>>(
        m, "ReferenceActivations",
        "The noise-free reference of a run: the activations of the layers a results file needs, filled\n"
        "once by run_network(..., into=it) during the pass, then immutable and shareable by any number of\n"
        "ResultsWriters (share_reference) without a copy")
        .def(py::init([](const Network& net, std::int64_t images, const std::vector<int>& layers) {
                 if (images < 1) throw FormatError("<memory>", "images", "expected at least one image");
                 std::vector<bool> held(net.layers.size(), false);
                 for (int l : layers) {
                     if (l < 0 || std::size_t(l) >= held.size())
                         throw FormatError("<memory>", "layers", "no layer index " + std::to_string(l));
                     held[std::size_t(l)] = true;
                 }
                 return std::make_shared<ReferenceActivations>(net, std::size_t(images), held);
             }),
             py::arg("net"), py::arg("images"), py::arg("layers"),
             "Room for `images` images of the given layer indices of `net` (resolved)")
        .def_property_readonly("images", &ReferenceActivations::images)
        .def_property_readonly("bytes", &ReferenceActivations::bytes)
        .def_property_readonly("sealed", &ReferenceActivations::sealed)
        .def_property_readonly("layers", [](const ReferenceActivations& r) {
            std::vector<int> held;
            for (int l = 0; l < int(r.layer_count()); ++l)
                if (r.holds(l)) held.push_back(l);
            return held;
        }, "The layer indices it holds")
        .def("layer", [](const py::object& self, int layer, const Network& net) {
            const auto& r = self.cast<const ReferenceActivations&>();
            if (!r.sealed()) throw FormatError("<memory>", "reference", "not filled yet (run_network(..., into=...))");
            if (!r.holds(layer)) throw FormatError("<memory>", "layer", "layer " + std::to_string(layer) + " not held");
            if (std::size_t(layer) >= net.layers.size() || net.layers.size() != r.layer_count())
                throw FormatError("<memory>", "net", "not the network this reference was made for");
            const Shape3& s = net.layers[std::size_t(layer)].out_shape;
            const std::span<const std::int8_t> values = r.layer(layer);
            if (values.size() != r.images() * std::size_t(s.size()))
                throw FormatError("<memory>", "net", "layer " + std::to_string(layer) + "'s shape differs from the reference's");
            // A read-only view of the shared bytes, keeping the reference alive: no copy.
            py::array view(py::dtype::of<std::int8_t>(),
                           {py::ssize_t(r.images()), py::ssize_t(s.h), py::ssize_t(s.w), py::ssize_t(s.c)},
                           values.data(), self);
            view.attr("setflags")(py::arg("write") = false);
            return view;
        }, py::arg("layer"), py::arg("net"),
             "A held layer's activations [image, H, W, C] int8 as a read-only NumPy view (no copy; `net` gives\n"
             "the shape)");

    py::class_<PyResultsWriter>(m, "ResultsWriter",
                                "Streams one run into an HDF5 results file (docs/hdf5_layout.md).  Several threads may\n"
                                "call one writer at once: the calls are ordered as if made one after another\n"
                                "(docs/hybrid_runs.md)")
        .def(py::init<const std::string&, const Network&, const py::array&, const py::sequence&, const std::string&,
                      const py::object&, int, bool>(),
             py::arg("path"), py::arg("net"), py::arg("labels"), py::arg("rounds") = py::list(),
             py::arg("config_json") = "{}", py::arg("layers") = "all", py::arg("deflate") = 1,
             py::arg("overwrite") = true)
        .def("set_reference", &PyResultsWriter::set_reference, py::arg("layer"), py::arg("activations"))
        .def("set_round", &PyResultsWriter::set_round, py::arg("round_index"), py::arg("layer"), py::arg("activations"))
        .def("share_reference", &PyResultsWriter::share_reference, py::arg("reference"),
             "Every needed layer's reference from a filled ReferenceActivations, shared (not copied): the\n"
             "stored layers are written, the predictions taken; layers already set keep theirs")
        // No keep_alive on the writer: the metrics share its reference bytes (ResultsWriter::reference_owner),
        // so they stay valid after commit and after the writer is gone.
        .def("round_metrics", &PyResultsWriter::round_metrics,
             "A RoundMetrics for one noisy round: the PU (Emulator.run_published(metrics=...)) compares each layer\n"
             "the file does not store with its reference as it computes it; the reference must be set and the\n"
             "writer not committed.  It shares the reference (no copy) and may outlive commit and the writer")
        .def("set_round_metrics", &PyResultsWriter::set_round_metrics, py::arg("round_index"), py::arg("metrics"),
             "Round round_index of every layer `metrics` measured (the others go through set_round); a RoundMetrics\n"
             "is stored for one round only (FormatError naming 'metrics' for a second)")
        .def("set_layer_series", &PyResultsWriter::set_layer_series, py::arg("layer"), py::arg("name"), py::arg("values"),
             "A per-round float64 series of a layer, stored as layers/NAME/<name> [round] at commit")
        .def("set_layer_attribute", &PyResultsWriter::set_layer_attribute, py::arg("layer"), py::arg("name"),
             py::arg("value"), "A string attribute of a layer's group")
        .def("reference_needed", &PyResultsWriter::reference_needed, py::arg("layer"),
             "Whether commit needs this layer's reference (stored, the output, or compared with noisy rounds)")
        .def("commit", &PyResultsWriter::commit)
        .def_property_readonly("reference_accuracy", &PyResultsWriter::reference_accuracy)
        .def_property_readonly("round_accuracy", &PyResultsWriter::round_accuracy);

    const auto metric = [&m](const char* name, double (*fn)(std::span<const std::int8_t>, std::span<const std::int8_t>),
                             const char* doc) {
        m.def(name, [fn](const py::array& noisy, const py::array& reference) {
            const Int8Array n = require_int8(noisy, "<memory>", "noisy");
            const Int8Array r = require_int8(reference, "<memory>", "reference");
            if (n.size() != r.size()) throw FormatError("<memory>", "noisy", "size differs from the reference");
            return fn(as_span(n), as_span(r));
        }, py::arg("noisy"), py::arg("reference"), doc);
    };
    metric("snr_db", &snr_db, "10 log10(sum ref^2 / sum (noisy-ref)^2); +inf when equal");
    metric("cosine_similarity", &cosine_similarity, "sum ref*noisy / sqrt(sum ref^2 sum noisy^2)");
    metric("mismatch_rate", &mismatch_rate, "fraction of elements where noisy != reference");
    // Sums beyond what an array in memory reaches (tests use it up to 2^63 - 1); also pools rounds.
    m.def("snr_db_from_sums", [](std::int64_t ref_energy, std::int64_t error_energy) {
        if (ref_energy < 0) throw std::invalid_argument("snr_db_from_sums: ref_energy must be >= 0");
        if (error_energy < 0) throw std::invalid_argument("snr_db_from_sums: error_energy must be >= 0");
        ActivationErrorSums sums;
        sums.ref_energy = ref_energy;
        sums.error_energy = error_energy;
        return sums.snr_db();
    }, py::arg("ref_energy"), py::arg("error_energy"),
          "snr_db from the exact sums: 10 log10(ref_energy / error_energy), correctly rounded; +inf when\n"
          "error_energy == 0, -inf when only ref_energy is 0");
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(50, bind_io);
