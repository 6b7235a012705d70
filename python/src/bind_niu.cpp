// Bindings for the NIU (niu/): aimcemu._core.niu -- compile a program from a noise-model config,
// apply the bit-exact NIU to int8 weights, read the program's word image and tables.
// python/aimcemu/niu.py wraps these.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>

#include "arrays.hpp"
#include "bindings.hpp"
#include "niu/niu_model.hpp"
#include "niu/niu_timing.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "common/errors.hpp"

namespace py = pybind11;
using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

// Layer `index` of a program; a FormatError naming the argument otherwise (it was an IndexError
// that named no argument).
const NiuLayerProgram& program_layer(const NiuProgram& p, std::size_t index) {
    if (index >= p.layers.size())
        throw FormatError("<memory>", "index", "layer " + std::to_string(index) + " of an NIU program of " +
                                                   std::to_string(p.layers.size()) + " layers");
    return p.layers[index];
}

template <std::size_t N>
py::array_t<std::int32_t> table(const std::array<std::int32_t, N>& t) {
    return py::array_t<std::int32_t>(py::ssize_t(N), t.data());
}

py::dict layer_dict(const NiuLayerProgram& l) {
    py::dict d;
    d["src_addr"] = l.src_addr;
    d["dst_addr"] = l.dst_addr;
    d["count"] = l.count;
    d["out_bits"] = l.out_bits;
    d["back_k"] = l.back_k;
    d["drift_lt"] = l.drift_lt;
    std::array<std::int32_t, kCodeTable> gt{}, sp{}, mu{}, sn{};
    for (int a = 0; a < kCodeTable; ++a) {
        gt[std::size_t(a)] = l.code[std::size_t(a)].gt;
        sp[std::size_t(a)] = l.code[std::size_t(a)].sp;
        mu[std::size_t(a)] = l.code[std::size_t(a)].mu;
        sn[std::size_t(a)] = l.code[std::size_t(a)].sn;
    }
    d["GT"] = table(gt);
    d["SP"] = table(sp);
    d["MU"] = table(mu);
    d["SN"] = table(sn);
    d["RT"] = table(l.rt);
    d["RD"] = table(l.rd);
    return d;
}

NiuLayerSpec spec_from_dict(const py::dict& d, std::size_t index) {
    static const std::vector<std::string> known = {"layer_id", "count", "absmax", "alpha", "src_addr", "dst_addr"};
    for (auto item : d) {
        const auto key = py::cast<std::string>(item.first);
        if (std::find(known.begin(), known.end(), key) == known.end())
            throw FormatError("<memory>", "layers[" + std::to_string(index) + "]." + key, "unknown field");
    }
    NiuLayerSpec s;
    s.layer_id = d.contains("layer_id") ? py::cast<std::uint64_t>(d["layer_id"]) : index;
    if (!d.contains("count")) throw FormatError("<memory>", "layers[" + std::to_string(index) + "].count", "missing");
    s.count = py::cast<std::uint32_t>(d["count"]);
    if (d.contains("absmax")) s.absmax = py::cast<int>(d["absmax"]);
    if (d.contains("alpha")) s.alpha = py::cast<double>(d["alpha"]);
    if (d.contains("src_addr")) s.src_addr = py::cast<std::uint64_t>(d["src_addr"]);
    if (d.contains("dst_addr")) s.dst_addr = py::cast<std::uint64_t>(d["dst_addr"]);
    return s;
}

// Every generated constant (NIU_NAMED_CONSTANTS) and the ROM tables, so that Python never
// types one of them again.
py::dict generated_constants() {
    py::dict d;
    for (const auto& c : gen::NIU_NAMED_CONSTANTS) d[c.name] = c.value;
    d["NIU_GAUSS_CHIP_ROM"] = py::array_t<std::int16_t>(py::ssize_t(gen::NIU_GAUSS_CHIP_ROM.size()), gen::NIU_GAUSS_CHIP_ROM.data());
    d["NIU_GAUSS_READ_ROM"] = py::array_t<std::int16_t>(py::ssize_t(gen::NIU_GAUSS_READ_ROM.size()), gen::NIU_GAUSS_READ_ROM.data());
    d["NIU_EXP_VALUE"] = py::array_t<std::int32_t>(py::ssize_t(gen::NIU_EXP_VALUE.size()), gen::NIU_EXP_VALUE.data());
    d["NIU_EXP_SLOPE"] = py::array_t<std::int32_t>(py::ssize_t(gen::NIU_EXP_SLOPE.size()), gen::NIU_EXP_SLOPE.data());
    d["NIU_LANES_SUPPORTED"] = std::vector<int>(gen::NIU_LANES_SUPPORTED.begin(), gen::NIU_LANES_SUPPORTED.end());
    d["NIU_LANES_BUILT"] = std::vector<int>(gen::NIU_LANES_BUILT.begin(), gen::NIU_LANES_BUILT.end());
    return d;
}

py::dict resources_dict(const FpgaResources& r) {
    py::dict d;
    d["name"] = r.name;
    d["LUT"] = r.lut;
    d["FF"] = std::isnan(r.ff) ? py::object(py::none()) : py::object(py::float_(r.ff));
    d["DSP"] = r.dsp;
    d["BRAM36"] = r.bram36;
    d["URAM"] = r.uram;
    return d;
}

void bind_niu(py::module_& root) {
    auto m = root.def_submodule("niu", "Noise injection unit: program compiler and bit-exact model");

    py::class_<NiuProgram>(m, "NiuProgram")
        .def_property_readonly("num_layers", [](const NiuProgram& p) { return p.layers.size(); })
        .def("words", [](const NiuProgram& p) {
            const auto w = p.to_words();
            return py::array_t<std::uint32_t>(py::ssize_t(w.size()), w.data());
        }, "The program's 32-bit word image (what the RTL is loaded with)")
        .def_static("from_words", [](const py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>& w,
                                     const std::string& source) {
            return NiuProgram::from_words(std::span(w.data(), std::size_t(w.size())), source);
        }, py::arg("words"), py::arg("source") = "<memory>")
        .def("layer", [](const NiuProgram& p, std::size_t i) {
            return layer_dict(program_layer(p, i));
        }, py::arg("index"))
        .def("__eq__", [](const NiuProgram& a, const NiuProgram& b) { return a == b; });

    m.def("check_runs_at", &check_runs_at, py::arg("model"), py::arg("t"),
          "FormatError unless the NIU compiler can make a program of `model` at `t` seconds (its tables fit)");
    m.def("check_code_tables", &check_code_tables, py::arg("model"),
          "FormatError unless every per-code table of `model` (abs-max 1..127) fits the NIU's fields (t-independent)");
    m.def("check_tables_at", &check_tables_at, py::arg("model"), py::arg("t"),
          "FormatError unless t and the tables that depend on it (drift field, read-noise table) fit the NIU's fields");
    m.def("compile_program", [](const noise::NoiseModel& model, const py::list& layers, std::uint64_t seed,
                                std::uint64_t chip, std::uint64_t round, double t, int out_bits) {
        std::vector<NiuLayerSpec> specs;
        for (std::size_t i = 0; i < layers.size(); ++i) specs.push_back(spec_from_dict(py::cast<py::dict>(layers[i]), i));
        return compile_program(model, specs, {seed, chip, round, t, out_bits});
    }, py::arg("model"), py::arg("layers"), py::arg("seed") = 0, py::arg("chip") = 0, py::arg("round") = 0,
       py::arg("t") = 0.0, py::arg("out_bits") = 8,
       "Compiles a program for a noise model (an aimcemu._core.noise.NoiseModel, built once by the caller)");

    m.def("check_model", &check_model, py::arg("model"),
          "FormatError unless the NIU datapath runs this noise model (PCM family, one pair, g_min = 0)");
    m.def("max_alpha", &max_alpha, py::arg("absmax"), py::arg("out_bits") = 8,
          "The largest drift-compensation alpha the back-conversion scale K holds (docs/niu_datapath.md section 3)");

    m.def("clean_absmax", [](const py::array& clean, const std::string& mode) {
        if (mode != "layer" && mode != "fixed") throw FormatError("<memory>", "absmax", "must be 'layer' or 'fixed', got '" + mode + "'");
        const auto a = bindings::require_int8(clean, "<memory>", "weights");
        return clean_absmax(std::span(a.data(), std::size_t(a.size())), mode == "layer" ? AbsMaxMode::Layer : AbsMaxMode::Fixed127);
    }, py::arg("weights"), py::arg("mode") = "layer");

    m.def("apply_layer", [](const NiuProgram& p, std::size_t index, const py::array& clean, int threads) {
        const NiuLayerProgram& layer = program_layer(p, index);
        const auto in = bindings::require_int8(clean, "<memory>", "weights");
        py::array_t<std::int8_t> out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
        {
            py::gil_scoped_release release;
            apply_layer(layer, std::span(in.data(), std::size_t(in.size())),
                        std::span(out.mutable_data(), std::size_t(out.size())), threads);
        }
        return out;
    }, py::arg("program"), py::arg("index"), py::arg("weights"), py::arg("threads") = 0);

    py::class_<NiuChipState>(m, "NiuChipState",
                             "The chip half of one layer (programmed conductance and drift exponent per device), "
                             "kept between rounds (docs/niu_datapath.md, kept chip state)")
        .def_property_readonly("count", [](const NiuChipState& s) { return s.count; })
        .def_property_readonly("nbytes", [](const NiuChipState& s) { return s.words.size() * sizeof(std::uint16_t); });

    m.def("chip_state", [](const NiuProgram& p, std::size_t index, const py::array& clean, int threads) {
        const NiuLayerProgram& layer = program_layer(p, index);
        const auto in = bindings::require_int8(clean, "<memory>", "weights");
        py::gil_scoped_release release;
        return chip_state(layer, std::span(in.data(), std::size_t(in.size())), threads);
    }, py::arg("program"), py::arg("index"), py::arg("weights"), py::arg("threads") = 0);

    m.def("apply_kept", [](const NiuProgram& p, std::size_t index, const NiuChipState& state, int threads) {
        const NiuLayerProgram& layer = program_layer(p, index);
        py::array_t<std::int8_t> out(py::ssize_t(state.count));
        {
            py::gil_scoped_release release;
            apply_kept(layer, state, std::span(out.mutable_data(), std::size_t(out.size())), threads);
        }
        return out;
    }, py::arg("program"), py::arg("index"), py::arg("state"), py::arg("threads") = 0);

    m.def("kernels", &available_kernels, "The NIU model's kernels on this CPU (scalar, avx2, avx512)");

    m.def("gaussian", [](const py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>& u, int bits) {
        if (bits != gen::NIU_GAUSS_CHIP_U_BITS && bits != gen::NIU_GAUSS_READ_U_BITS)
            throw FormatError("<memory>", "bits", "the NIU's Gaussians take 24-bit (chip) or 16-bit (read) uniforms");
        py::array_t<std::int32_t> out(u.size());
        for (py::ssize_t i = 0; i < u.size(); ++i) {
            if (u.data()[i] >> bits) throw FormatError("<memory>", "uniforms", "values must fit " + std::to_string(bits) + " bits");
            out.mutable_data()[i] = bits == gen::NIU_GAUSS_CHIP_U_BITS ? gaussian_chip(u.data()[i]) : gaussian_read(u.data()[i]);
        }
        return out;
    }, py::arg("uniforms"), py::arg("bits"), "The NIU's Gaussian (Q3.12) of uniforms (docs/niu_datapath.md 4.3)");

    m.def("constants", &generated_constants, "Generated NIU constants (generated/niu_constants.hpp)");

    m.def("syntheses", [] {
        py::list out;
        for (const NiuSynthesis& s : niu_syntheses()) {
            py::dict d = resources_dict(s.resources);
            d["lanes"] = s.lanes;
            d["weights_per_cycle"] = s.weights_per_cycle;
            out.append(d);
        }
        return out;
    }, "The synthesized NIU configurations (rtl/synth/): resources and measured weights per cycle");
    m.def("config_for_lanes", &niu_config_for_lanes, py::arg("lanes"), py::arg("source") = "<memory>",
          "An NiuConfig (aimcemu._core.timing) running at the RTL's measured weights per cycle");
    m.def("pu_resources", [](const std::string& name) { return resources_dict(pu_resources(name)); }, py::arg("name"));
    m.def("fit_on_xcu50", [](int pu2x, int pu1x, int nius, int lanes, const std::string& source) {
        const FitReport r = fit_on_xcu50(pu2x, pu1x, nius, lanes, source);
        py::dict d;
        py::list rows;
        for (std::size_t i = 0; i < r.rows.size(); ++i) {
            py::dict row = resources_dict(r.rows[i]);
            row["count"] = r.counts[i];
            rows.append(row);
        }
        d["rows"] = rows;
        d["shell"] = resources_dict(r.shell);
        d["total"] = resources_dict(r.total);
        d["device"] = resources_dict(r.device);
        d["fits"] = r.fits;
        d["limiting"] = r.limiting;
        d["limiting_fraction"] = r.limiting_fraction;
        return d;
    }, py::arg("pu2x"), py::arg("pu1x"), py::arg("nius"), py::arg("lanes"), py::arg("source") = "<memory>",
       "PUs, NIUs and the shell against the XCU50's LUT, DSP, BRAM36 and URAM");
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(30, bind_niu);
