// Bindings for the float64 device noise models (noise_models/): aimcemu._core.noise.
//
// The Python API in python/aimcemu/noise.py wraps these; models are built through the factory
// from a {name, params} pair so that configs, to_dict/from_dict and C++ share one code path.
#include <memory>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "noise_models/buffer_pool.hpp"
#include "noise_models/compensation.hpp"
#include "noise_models/generic.hpp"
#include "noise_models/noise_model.hpp"
#include "noise_models/pcm.hpp"
#include "noise_models/reram.hpp"
#include "noise_models/simd.hpp"
#include "common/errors.hpp"

namespace py = pybind11;
using namespace aimcemu::noise;

namespace {

using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// The Python spelling of an implementation of the noise math.
std::string isa_key(simd::Isa isa) {
    switch (isa) {
        case simd::Isa::Avx512: return "avx512";
        case simd::Isa::Avx2: return "avx2";
        case simd::Isa::Scalar: break;
    }
    return "scalar";
}

std::vector<double> to_vector(const DoubleArray& a) { return std::vector<double>(a.data(), a.data() + a.size()); }

template <class Vector>
py::array_t<double> to_array(const Vector& v, std::vector<py::ssize_t> shape) {
    py::array_t<double> out(shape);
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

// An array over a buffer of the noise engine's pool (buffer_pool.hpp); the buffer goes back to
// the pool when NumPy frees the array, so that a layer-by-layer loop of reads reuses its pages.
py::array_t<double> pooled_array(std::vector<py::ssize_t> shape) {
    std::size_t n = 1;
    for (py::ssize_t d : shape) n *= std::size_t(d);
    auto buffer = std::make_unique<PooledVector<double>>(take_doubles(n));
    double* data = buffer->data();
    py::capsule owner(buffer.get(), [](void* p) {
        auto* v = static_cast<PooledVector<double>*>(p);
        give_back(std::move(*v));
        delete v;
    });
    buffer.release();  // the capsule owns it now
    return py::array_t<double>(std::move(shape), data, owner);
}

std::vector<py::ssize_t> state_shape(const LayerState& s, bool with_devices) {
    std::vector<py::ssize_t> shape(s.shape.begin(), s.shape.end());
    if (with_devices) shape.push_back(s.devices_per_weight);
    return shape;
}

// Applies a scalar closed form element-wise to an array of any shape.
template <class Fn>
py::array_t<double> map_array(const DoubleArray& in, Fn fn) {
    py::array_t<double> out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
    const double* src = in.data();
    double* dst = out.mutable_data();
    for (py::ssize_t i = 0; i < in.size(); ++i) dst[i] = fn(src[i]);
    return out;
}

std::unique_ptr<ConductanceConverter> converter_from_params(const NoiseParams& params) {
    return make_converter(converter_table().resolve(params));
}

const char* type_name(ParamType type) {
    switch (type) {
        case ParamType::Number: return "number";
        case ParamType::Whole: return "whole";
        case ParamType::Numbers: return "numbers";
        case ParamType::Text: return "text";
    }
    return "";
}

// A table as Python sees it: one dict per parameter, in declaration order (the order of the
// Python constructor's arguments).  "default" is None when the default is derived from other
// parameters ("default_text" says how) or when the parameter is required.
py::list table_rows(const ParamTable& table) {
    py::list rows;
    for (const ParamSpec& spec : table.specs()) {
        py::dict row;
        row["name"] = spec.name;
        row["type"] = type_name(spec.type);
        row["default"] = spec.fallback ? py::cast(*spec.fallback) : py::none();
        row["default_text"] = spec.fallback ? format_value(*spec.fallback) : spec.default_text;
        row["required"] = !spec.fallback && !spec.derive;
        row["range"] = describe_range(spec);
        row["applies"] = spec.applies_text;
        row["unit"] = spec.unit;
        row["doc"] = spec.doc;
        rows.append(row);
    }
    return rows;
}

void bind_state(py::module_& m) {
    py::class_<LayerState>(m, "LayerState", "The programmed devices of one layer of one chip.")
        .def_property_readonly("seed", [](const LayerState& s) { return s.key.seed; })
        .def_property_readonly("chip", [](const LayerState& s) { return s.key.chip; })
        .def_property_readonly("layer", [](const LayerState& s) { return s.key.layer; })
        .def_property_readonly("shape", [](const LayerState& s) { return py::tuple(py::cast(s.shape)); })
        .def_readonly("devices_per_weight", &LayerState::devices_per_weight)
        .def_property_readonly("scale", [](const LayerState& s) { return s.conversion.scale; },
                               "uS per weight unit of the converter fit at programming")
        .def_property_readonly("weights", [](const LayerState& s) { return to_array(s.weights, state_shape(s, false)); })
        .def_property_readonly("g_target", [](const LayerState& s) { return to_array(s.g_target, state_shape(s, true)); })
        .def_property_readonly("g_prog", [](const LayerState& s) { return to_array(s.g_prog, state_shape(s, true)); })
        .def_property_readonly("nu", [](const LayerState& s) { return to_array(s.nu, state_shape(s, true)); })
        .def_property_readonly("fault", [](const LayerState& s) {
            py::array_t<std::uint8_t> out(state_shape(s, true));
            std::copy(s.fault.begin(), s.fault.end(), out.mutable_data());
            return out;
        });
}

void bind_models(py::module_& m) {
    py::class_<NoiseModel, std::shared_ptr<NoiseModel>>(m, "NoiseModel")
        .def_property_readonly("name", &NoiseModel::name)
        .def("params", &NoiseModel::params)
        .def_property("num_threads", &NoiseModel::num_threads, &NoiseModel::set_num_threads)
        .def("program", [](const NoiseModel& model, const DoubleArray& weights, std::uint64_t seed, std::uint64_t chip,
                           std::uint64_t layer) {
            std::vector<std::int64_t> shape(weights.shape(), weights.shape() + weights.ndim());
            if (shape.empty()) shape.push_back(1);
            const std::span<const double> w(weights.data(), std::size_t(weights.size()));   // no copy
            py::gil_scoped_release release;
            return model.program(w, shape, ChipKey{seed, chip, layer});
        }, py::arg("weights"), py::arg("seed"), py::arg("chip"), py::arg("layer"))
        .def("read", [](const NoiseModel& model, const LayerState& state, double t, std::uint64_t round) {
            py::array_t<double> out = pooled_array(state_shape(state, false));   // read_into writes all of it
            double* w = out.mutable_data();
            {
                py::gil_scoped_release release;
                model.read_into(state, t, round, w);
            }
            return out;
        }, py::arg("state"), py::arg("t"), py::arg("round"))
        .def("read_conductances", [](const NoiseModel& model, const LayerState& state, double t, std::uint64_t round) {
            std::vector<double> g;
            {
                py::gil_scoped_release release;
                g = model.read_conductances(state, t, round);
            }
            return to_array(g, state_shape(state, true));
        }, py::arg("state"), py::arg("t"), py::arg("round"))
        .def("programmed_weights", [](const NoiseModel& model, const LayerState& state) {
            return to_array(model.programmed_weights(state), state_shape(state, false));
        });

    py::class_<PcmFamilyModel, NoiseModel, std::shared_ptr<PcmFamilyModel>>(m, "PcmFamilyModel")
        .def("prog_sigma", [](const PcmFamilyModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.prog_sigma(x); });
        })
        .def("nu_mean", [](const PcmFamilyModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.nu_mean(x); });
        })
        .def("nu_std", [](const PcmFamilyModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.nu_std(x); });
        })
        .def("read_q", [](const PcmFamilyModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.read_q(x); });
        })
        .def("read_time_factor", &PcmFamilyModel::read_time_factor, py::arg("t"))
        .def("drift_factor", [](const PcmFamilyModel& p, const DoubleArray& nu, double t) {
            return map_array(nu, [&](double x) { return p.drift_factor(x, t); });
        }, py::arg("nu"), py::arg("t"))
        .def_property_readonly("g_max", &PcmFamilyModel::g_max)
        .def_property_readonly("t0", &PcmFamilyModel::t0)
        .def_property_readonly("t_read", &PcmFamilyModel::t_read);
    py::class_<PcmLikeModel, PcmFamilyModel, std::shared_ptr<PcmLikeModel>>(m, "PcmLikeModel");
    py::class_<HermesModel, PcmFamilyModel, std::shared_ptr<HermesModel>>(m, "HermesModel");
    py::class_<StateIndependentModel, PcmFamilyModel, std::shared_ptr<StateIndependentModel>>(m, "StateIndependentModel");
    py::class_<CustomDriftPcmModel, PcmFamilyModel, std::shared_ptr<CustomDriftPcmModel>>(m, "CustomDriftPcmModel");
    py::class_<ReRamWan2022Model, NoiseModel, std::shared_ptr<ReRamWan2022Model>>(m, "ReRamWan2022Model")
        .def("sigma", [](const ReRamWan2022Model& p, const DoubleArray& g, double t_key) {
            return map_array(g, [&](double x) { return p.sigma(x, t_key); });
        }, py::arg("g_target"), py::arg("t_key"));
    py::class_<ReRamCmoModel, NoiseModel, std::shared_ptr<ReRamCmoModel>>(m, "ReRamCmoModel")
        .def("prog_sigma", [](const ReRamCmoModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.prog_sigma(x); });
        })
        .def("relaxation_mean_shift", &ReRamCmoModel::relaxation_mean_shift)
        .def("relaxation_sigma", &ReRamCmoModel::relaxation_sigma)
        .def("read_sigma", &ReRamCmoModel::read_sigma, py::arg("g_drift"), py::arg("t"));
    py::class_<GenericModel, NoiseModel, std::shared_ptr<GenericModel>>(m, "GenericModel")
        .def("quantize", [](const GenericModel& p, const DoubleArray& g) {
            return map_array(g, [&](double x) { return p.quantize(x); });
        });

    m.def("make_noise_model", [](const std::string& name, const NoiseParams& params) {
        return std::shared_ptr<NoiseModel>(make_noise_model(name, params));
    }, py::arg("name"), py::arg("params"));
    m.def("noise_model_names", &noise_model_names);
    // Which vector implementation the float64 noise math runs on (benchmarks compare them; the
    // results are bit-identical between avx2 and avx512).
    m.def("noise_simd_isa", [] { return isa_key(simd::active()); },
          "The noise math's active implementation: 'avx512', 'avx2' or 'scalar'");
    m.def("use_noise_simd_isa", [](const std::string& key) {
        for (auto isa : {simd::Isa::Scalar, simd::Isa::Avx2, simd::Isa::Avx512})
            if (key == isa_key(isa)) {
                if (!simd::supported(isa))
                    throw py::value_error("use_noise_simd_isa: this CPU has no " + key);
                return isa_key(simd::use(isa));
            }
        throw py::value_error("use_noise_simd_isa: unknown '" + key + "' (avx512, avx2 or scalar)");
    }, py::arg("isa"), "Routes the noise math to an implementation; returns the previous one");
    // The fits aihwkit ships and aimcemu has built in, as the models hold them: the aihwkit interop
    // checks an aihwkit object against these instead of typing them a second time.
    m.def("builtin_fits", [] {
        py::dict hermes;
        for (int devices : {1, 2}) {
            const HermesFit f = HermesModel::fit(devices);
            hermes[py::int_(devices)] = py::dict(py::arg("g_max") = f.g_max, py::arg("t0") = f.t0,
                                                 py::arg("prog_coeff") = f.prog_coeff);
        }
        const CmoFit& cmo = ReRamCmoModel::fit();
        return py::dict(py::arg("hermes") = hermes,
                        py::arg("reram_wan2022") = py::dict(py::arg("coefficients") = ReRamWan2022Model::coefficients()),
                        py::arg("reram_cmo") = py::dict(py::arg("prog_coeff") = cmo.prog_coeff,
                                                        py::arg("decay_mean") = cmo.decay_mean,
                                                        py::arg("decay_std") = cmo.decay_std,
                                                        py::arg("read_k") = cmo.read_k,
                                                        py::arg("read_time") = cmo.read_time));
    }, "hermes {devices: {g_max, t0, prog_coeff}}, reram_wan2022 {coefficients: {t: c}}, reram_cmo {...}; "
       "polynomial coefficients lowest order first");
    m.def("param_table", [](const std::string& name) { return table_rows(noise_model_table(name)); }, py::arg("model"),
          "The declared parameters of a noise model, in constructor order (noise_models/params.hpp)");
}

void bind_converters(py::module_& m) {
    // Converters are stateless apart from their parameters, so Python passes the params dict.
    m.def("converter_params", [](const NoiseParams& params) { return converter_from_params(params)->params(); });
    m.def("converter_table", [] { return table_rows(converter_table()); },
          "The declared parameters of a conductance converter (noise_models/converter.hpp)");
    m.def("convert_to_conductances", [](const NoiseParams& params, const DoubleArray& weights) {
        auto conv = converter_from_params(params);
        const std::vector<double> w = to_vector(weights);
        const Conversion c = conv->fit(w);
        std::vector<py::ssize_t> shape(weights.shape(), weights.shape() + weights.ndim());
        shape.push_back(conv->devices_per_weight());
        py::dict fit;
        fit["scale"] = c.scale;
        fit["w_min"] = c.w_min;
        fit["w_max"] = c.w_max;
        return py::make_tuple(to_array(conv->convert(w, c), shape), fit);
    }, py::arg("params"), py::arg("weights"));
    m.def("convert_back_to_weights", [](const NoiseParams& params, const DoubleArray& g, const py::dict& fit) {
        auto conv = converter_from_params(params);
        const Conversion c{fit["scale"].cast<double>(), fit["w_min"].cast<double>(), fit["w_max"].cast<double>()};
        if (g.ndim() < 1 || g.shape(g.ndim() - 1) != conv->devices_per_weight())
            throw aimcemu::FormatError("<memory>", "conductances", "last axis must hold the devices of one weight");
        std::vector<py::ssize_t> shape(g.shape(), g.shape() + g.ndim() - 1);
        return to_array(conv->convert_back(to_vector(g), c), shape);
    }, py::arg("params"), py::arg("conductances"), py::arg("fit"));
}

void bind_compensation(py::module_& m) {
    m.attr("READOUT_FLOOR") = kReadoutFloor;
    py::class_<DriftCompensation>(m, "DriftCompensation")
        .def(py::init(&DriftCompensation::from_name), py::arg("kind"), py::arg("exact_reference") = false)
        .def_property_readonly("kind", &DriftCompensation::name)
        .def_property_readonly("exact_reference", &DriftCompensation::exact_reference)
        .def("baseline", [](const DriftCompensation& c, const NoiseModel& model, const LayerState& state) {
            const auto b = c.baseline(model, state);
            return to_array(b, {py::ssize_t(b.size())});
        })
        .def("alpha", [](const DriftCompensation& c, const DoubleArray& baseline, const DoubleArray& read_weights) {
            const std::size_t rows = read_weights.ndim() ? std::size_t(read_weights.shape(0)) : 1;
            const auto a = c.alpha(to_vector(baseline), to_vector(read_weights), rows);
            return to_array(a, {py::ssize_t(a.size())});
        })
        .def("apply", [](const DriftCompensation& c, const DoubleArray& alpha, const DoubleArray& read_weights) {
            const std::size_t rows = read_weights.ndim() ? std::size_t(read_weights.shape(0)) : 1;
            const auto w = c.apply(to_vector(alpha), to_vector(read_weights), rows);
            return to_array(w, std::vector<py::ssize_t>(read_weights.shape(), read_weights.shape() + read_weights.ndim()));
        });
}

void bind_noise(py::module_& root) {
    auto m = root.def_submodule("noise", "Float64 device noise models (the statistical reference)");
    bind_state(m);
    bind_models(m);
    bind_converters(m);
    bind_compensation(m);
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(20, bind_noise);
