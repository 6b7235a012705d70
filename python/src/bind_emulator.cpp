// Bindings for the emulation loop (emulator/emulator.hpp): aimcemu._core.niu.Emulator -- a network
// whose AIMC layers' weights the NIU rewrites in the modelled HBM each round, and the PU that runs
// from there.  python/aimcemu/runner.py runs its noisy rounds through it.  Compute runs without
// the GIL.
#include <algorithm>
#include <memory>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "emulator/emulator.hpp"
#include "emulator/round_metrics.hpp"
#include "niu/peripherals.hpp"
#include "common/errors.hpp"

namespace py = pybind11;
using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

using bindings::Int8Array;

GemmBackend backend_from(const std::string& name) { return gemm_backend_from_string(name); }

// int8 images [N, H, W, C] of the network's input shape, one Tensor8 each.
std::vector<Tensor8> images_from(const Network& net, const py::object& obj) {
    const Int8Array images = bindings::require_int8(obj, "<memory>", "images");
    const Shape3& in = net.input_shape;
    if (images.ndim() != 4 || !(Shape3{int(images.shape(1)), int(images.shape(2)), int(images.shape(3))} == in))
        throw FormatError("<memory>", "images", "expected [N, " + std::to_string(in.h) + ", " + std::to_string(in.w) +
                                                    ", " + std::to_string(in.c) + "] int8");
    std::vector<Tensor8> out(static_cast<std::size_t>(images.shape(0)));
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int8_t* first = images.data() + std::int64_t(i) * in.size();
        out[i] = {in, std::vector<std::int8_t>(first, first + in.size())};
    }
    return out;
}

// The programs' layers in order: one program per noise model, together one layer per AIMC layer.
// pybind11 passes None in the list as a null pointer: refused by name, not dereferenced.
NiuProgram concatenated(const std::vector<const NiuProgram*>& programs) {
    NiuProgram all;
    for (std::size_t k = 0; k < programs.size(); ++k) {
        const NiuProgram* p = programs[k];
        if (p == nullptr)
            throw FormatError("<memory>", "programs[" + std::to_string(k) + "]", "expected an aimcemu._core.niu.NiuProgram, got None");
        all.layers.insert(all.layers.end(), p->layers.begin(), p->layers.end());
    }
    return all;
}

// (round id, [one int8 array [N, H, W, C] per layer]) as _core.run_network lays them out; a layer
// the run did not keep (`keep`, empty = all) is None.  Each layer's C++ tensors are freed as soon
// as they are copied, so a round's activations are not held twice (C++ and NumPy) while they are
// handed over.
py::tuple round_result(const Network& net, RoundOutputs&& result, const std::vector<bool>& keep = {}) {
    py::list per_layer;
    const auto count = py::ssize_t(result.outputs.size());
    for (std::size_t l = 0; l < net.layers.size(); ++l) {
        if (!keep.empty() && !keep[l]) {
            per_layer.append(py::none());
            continue;
        }
        const Shape3& s = net.layers[l].out_shape;
        Int8Array out({count, py::ssize_t(s.h), py::ssize_t(s.w), py::ssize_t(s.c)});
        for (py::ssize_t i = 0; i < count; ++i) {
            auto& data = result.outputs[std::size_t(i)][l].data;
            std::copy(data.begin(), data.end(), out.mutable_data() + i * s.size());
            std::vector<std::int8_t>().swap(data);
        }
        per_layer.append(out);
    }
    return py::make_tuple(result.round, per_layer);
}

RunOptions run_options(const std::string& backend, int threads) {
    RunOptions options;
    options.backend = backend_from(backend);
    options.threads = threads;
    return options;
}

void bind_emulator(py::module_& root) {
    auto m = root.attr("niu").cast<py::module_>();
    py::class_<RoundMetrics>(m, "RoundMetrics",
                             "Per-layer metrics of one noisy round, taken by the PU as it computes each layer that\n"
                             "the results file does not store (ResultsWriter.round_metrics(); one per round)")
        .def_property_readonly("measured", [](const RoundMetrics& r) {
            std::vector<int> out;
            for (int l = 0; l < int(r.layer_count()); ++l)
                if (r.measured(l)) out.push_back(l);
            return out;
        }, "The layer indices measured here (the others come back from the run)")
        .def("sums", [](const RoundMetrics& r, int layer) {
            if (layer < 0 || std::size_t(layer) >= r.layer_count())
                throw FormatError("<memory>", "layer", "layer index " + std::to_string(layer) + " out of range");
            const ActivationErrorSums s = r.sums(layer);
            return py::make_tuple(s.ref_energy, s.noisy_energy, s.cross, s.error_energy, s.mismatches, s.count);
        }, py::arg("layer"),
           "(sum ref^2, sum noisy^2, sum ref*noisy, sum (noisy-ref)^2, mismatches, count) of a layer so far");
    py::class_<Emulator>(m, "Emulator",
                         "A PU running `net` from the modelled HBM while the NIU rewrites the AIMC layers' weights\n"
                         "each round: clean region -> NIU -> back buffer -> publish -> PU lease.")
        // The caller's network is read in place, not copied (a copy of ResNet-50 was 25.5 MB and
        // 5,400 page faults per run): the emulator reads it only while it is built, copying the
        // weights into its HBM, and keeps nothing of it.  Built with the GIL held (about 10 ms for
        // ResNet-50): Python can replace a layer's weights (`net.layers[k].weights = ...` frees
        // the old buffer), and without the GIL another thread doing so while the weights are
        // checked and copied gave emulators with torn or freed weights.
        .def(py::init([](const Network& net, std::vector<int> aimc_layers) {
                 return std::make_unique<Emulator>(net, std::move(aimc_layers));
             }), py::arg("net"), py::arg("aimc_layers"),
             "aimc_layers: network layer indices; layer k of a round's programs (concatenated) is aimc_layers[k]")
        .def("write_round", [](Emulator& e, const std::vector<const NiuProgram*>& programs, int threads) {
            const NiuProgram program = concatenated(programs);
            py::gil_scoped_release release;
            return e.write_round(program, threads);
        }, py::arg("programs"), py::arg("threads") = 0,
           "The NIU writes every AIMC layer into the back buffers and publishes them; returns the round id.\n"
           "programs: NiuProgram objects (None is a FormatError naming programs[k]); threads: 0..4096, 0 = all cores")
        .def("run_published", [](Emulator& e, const py::object& images, const std::string& backend, int threads,
                                 std::uint64_t expected_round, const Peripherals* peripherals, std::int64_t first_image,
                                 const RoundMetrics* metrics) {
            const auto inputs = images_from(e.network(), images);
            RunOptions options = run_options(backend, threads);
            options.peripherals = peripherals;
            options.first_image = first_image;
            if (metrics) {
                metrics->check_run(e.network(), inputs.size(), "<memory>");
                options.observer = metrics;
                options.keep = metrics->keep();
            }
            RoundOutputs result;
            {
                py::gil_scoped_release release;
                result = e.run_published(inputs, options, expected_round);
            }
            return round_result(e.network(), std::move(result), options.keep);
        }, py::arg("images"), py::arg("backend") = "fast", py::arg("threads") = 0, py::arg("expected_round") = 0,
           py::arg("peripherals") = nullptr, py::arg("first_image") = 0, py::arg("metrics") = nullptr,
           "The PU runs the latest published round: (round id, per-layer int8 activations [N, H, W, C]);\n"
           "a FormatError before the first write_round (nothing would ever be published to wait for).\n"
           "threads: 0..4096, 0 = all cores.\n"
           "peripherals: an aimcemu._core.niu.Peripherals for the AIMC layers (noise keyed by first_image + i).\n"
           "expected_round != 0: FormatError unless that is the round leased.\n"
           "metrics: a RoundMetrics (ResultsWriter.round_metrics()) that takes the metrics of the layers the\n"
           "results file does not store as they are computed; those layers come back as None.")
        .def("run_round", [](Emulator& e, const std::vector<const NiuProgram*>& programs, const py::object& images,
                             const std::string& backend, int threads) {
            const NiuProgram program = concatenated(programs);
            const auto inputs = images_from(e.network(), images);
            const RunOptions options = run_options(backend, threads);
            RoundOutputs result;
            {
                py::gil_scoped_release release;
                result = e.run_round(program, inputs, options);
            }
            return round_result(e.network(), std::move(result));
        }, py::arg("programs"), py::arg("images"), py::arg("backend") = "fast", py::arg("threads") = 0,
           "write_round then run_published on that round")
        .def("weights", [](Emulator& e, int layer) {
            const auto w = e.weights(layer);
            return py::array_t<std::int8_t>(py::ssize_t(w.size()), w.data());
        }, py::arg("layer"), "The int8 weights the PU reads for a GEMM layer now (AIMC: the latest published round)")
        .def("clean_weights", [](const py::object& self, int layer) {
            const Emulator& e = self.cast<const Emulator&>();
            const auto& aimc = e.aimc_layers();
            const auto at = std::find(aimc.begin(), aimc.end(), layer);
            if (at == aimc.end())
                throw FormatError("<memory>", "layer", "layer index " + std::to_string(layer) + " is not an AIMC layer");
            const auto clean = e.clean_weights(std::size_t(at - aimc.begin()));
            // A view of the HBM's clean region (never rewritten), kept alive by the emulator.
            py::array_t<std::int8_t> view(py::ssize_t(clean.size()), clean.data(), self);
            view.attr("setflags")(py::arg("write") = false);
            return view;
        }, py::arg("layer"),
           "A read-only view of AIMC layer `layer`'s clean weights in the HBM's clean region (no copy)")
        .def_property_readonly("clean_absmax", &Emulator::clean_absmax,
                               "Each AIMC layer's clean abs-max (niu.clean_absmax, mode 'layer'), in aimc_layers order")
        .def_property_readonly("aimc_layers", &Emulator::aimc_layers)
        .def_property_readonly("published_round", &Emulator::published_round)
        .def("regions", [](const Emulator& e) {
            py::list out;
            for (const HbmRegion& r : e.hbm().layout().regions()) {
                py::dict d;
                d["name"] = r.name;
                d["kind"] = to_string(r.kind);
                d["layer"] = r.layer;
                d["buffer"] = r.buffer;
                d["base"] = r.base;
                d["bytes"] = r.bytes;
                out.append(d);
            }
            return out;
        }, "The HBM layout: one dict (name, kind, layer, buffer, base, bytes) per region");
    m.def("kept_chip_state_bytes", &kept_chip_state_bytes,
          "Bytes of chip-state memory a destroyed Emulator left for the next one of this process");
    m.def("release_kept_chip_states", &release_kept_chip_states,
          "Frees the chip-state memory kept for the next Emulator; returns the bytes freed");
    m.def("kept_pass_buffer_bytes", &kept_pass_buffer_bytes,
          "Bytes of PU pass buffers a destroyed Emulator or a run_network call left for the next pass of this process");
    m.def("release_kept_pass_buffers", &release_kept_pass_buffers,
          "Frees the PU pass buffers kept for the next Emulator or run_network call; returns the bytes freed");
    m.def("kept_hbm_bytes", &kept_hbm_bytes,
          "Bytes of HBM memory (clean regions and round buffers) a destroyed Emulator left for the next one");
    m.def("release_kept_hbm", &release_kept_hbm, "Frees the HBM memory kept for the next Emulator; returns the bytes freed");
    m.def("set_kept_chip_state_limit", &set_kept_chip_state_limit, py::arg("bytes"),
          "The most bytes of chip states, of pass buffers and of HBM memory, each, kept for the next Emulator\n"
          "or run_network call (0: none); "
          "returns the previous limit");
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(35, bind_emulator);
