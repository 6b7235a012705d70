// Bindings for the analog tile peripherals (pu_model/peripherals.hpp, niu/peripherals.hpp):
// aimcemu._core.niu.Peripherals (the hook a run passes to the PU), the settings check, and the
// datapath and its registers for tests.  python/aimcemu/peripherals.py is the Python front end.
#include <algorithm>
#include <cmath>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "common/errors.hpp"
#include "niu/peripherals.hpp"

namespace py = pybind11;
using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

// {"inp_steps", "inp_bound", "out_noise", "out_bound" (None: unbounded), "out_steps",
//  "noise_management"}: missing keys keep their ideal defaults.
PeripheralSettings settings_from(const py::dict& d, const std::string& source, const std::string& prefix) {
    static const char* known[] = {"inp_steps", "inp_bound", "out_noise", "out_bound", "out_steps", "noise_management"};
    for (const auto& item : d) {
        const auto key = item.first.cast<std::string>();
        if (std::find(std::begin(known), std::end(known), key) == std::end(known))
            throw FormatError(source, prefix + "." + key, "unknown peripheral setting");
    }
    PeripheralSettings s;
    const auto get = [&](const char* key, auto& out) {
        if (d.contains(key) && !d[key].is_none()) out = d[key].cast<std::remove_reference_t<decltype(out)>>();
    };
    get("inp_steps", s.inp_steps);
    get("inp_bound", s.inp_bound);
    get("out_noise", s.out_noise);
    get("out_bound", s.out_bound);
    get("out_steps", s.out_steps);
    if (d.contains("noise_management")) {
        const auto nm = d["noise_management"].cast<std::string>();
        if (nm == "abs_max") s.noise_management = NoiseManagement::AbsMax;
        else if (nm == "none") s.noise_management = NoiseManagement::None;
        else throw FormatError(source, prefix + ".noise_management", "expected 'abs_max' or 'none', got '" + nm + "'");
    }
    s.validate(source, prefix);
    return s;
}

// A layer input as the model sees it (only its values matter to the peripherals).
Tensor8 tensor_of(const py::array_t<std::int8_t, py::array::c_style>& x) {
    return {Shape3{1, 1, int(x.size())}, std::vector<std::int8_t>(x.data(), x.data() + x.size())};
}

py::dict registers_dict(const PeriphRegisters& r) {
    py::dict d;
    d["scale"] = r.scale;             // DAC step = scale / 2^scale_shift
    d["scale_shift"] = r.scale_shift;
    d["sigma"] = r.sigma;
    d["clip"] = r.clip;
    d["bound"] = r.bound;
    d["adc"] = r.adc;
    d["recip"] = r.recip;             // 1 / ADC step = recip / 2^recip_shift
    d["recip_shift"] = r.recip_shift;
    d["step"] = r.step;               // ADC step = step / 2^step_shift
    d["step_shift"] = r.step_shift;
    d["code_max"] = r.code_max;
    return d;
}

void bind_periph(py::module_& root) {
    auto m = root.attr("niu").cast<py::module_>();
    py::class_<Peripherals>(m, "Peripherals",
                            "Analog tile peripherals of a run's AIMC layers for one (seed, chip, round): pass it to\n"
                            "run_network / Emulator.run_published.  settings: one dict or None per layer.")
        .def(py::init([](const Network& net, const py::list& settings, std::uint64_t seed, std::uint64_t chip,
                         std::uint64_t round, const std::string& source) {
                 std::vector<std::optional<PeripheralSettings>> per_layer;
                 for (std::size_t i = 0; i < settings.size(); ++i) {
                     if (settings[i].is_none()) {
                         per_layer.emplace_back();
                         continue;
                     }
                     const std::string name = i < net.layers.size() ? net.layers[i].name : std::to_string(i);
                     per_layer.emplace_back(settings_from(settings[i].cast<py::dict>(), source, "peripherals." + name));
                 }
                 return std::make_unique<Peripherals>(net, std::move(per_layer), seed, chip, round, source);
             }),
             py::arg("net"), py::arg("settings"), py::arg("seed") = 0, py::arg("chip") = 0, py::arg("round") = 0,
             py::arg("source") = "<memory>")
        .def("active", &Peripherals::active, py::arg("layer"))
        .def("input_codes", [](const Peripherals& p, int layer, const py::array_t<std::int8_t, py::array::c_style>& x) {
            const Tensor8 t = tensor_of(x);
            const Tensor8 codes = p.input_codes(layer, t);
            py::array_t<std::int8_t> out(x.request().shape);
            std::copy(codes.data.begin(), codes.data.end(), out.mutable_data());
            return out;
        }, py::arg("layer"), py::arg("x"), "The DAC codes of layer input x (HWC int8) that the GEMM multiplies")
        .def("registers", [](const Peripherals& p, int layer, const py::array_t<std::int8_t, py::array::c_style>& x) {
            return registers_dict(p.registers(layer, tensor_of(x)));
        }, py::arg("layer"), py::arg("x"), "The block's registers for layer input x")
        .def("apply_output", [](const Peripherals& p, int layer, std::int64_t image,
                                const py::array_t<std::int8_t, py::array::c_style>& x,
                                const py::array_t<std::int32_t, py::array::c_style>& acc) {
            if (acc.ndim() != 2) throw FormatError("<memory>", "acc", "expected [P, N] int32 accumulators");
            const Tensor8 t = tensor_of(x);
            py::array_t<std::int32_t> out({acc.shape(0), acc.shape(1)});
            std::copy(acc.data(), acc.data() + acc.size(), out.mutable_data());
            {
                py::gil_scoped_release release;
                p.apply_output(layer, image, t, out.mutable_data(), acc.shape(0), acc.shape(1));
            }
            return out;
        }, py::arg("layer"), py::arg("image"), py::arg("x"), py::arg("acc"),
           "Output noise, bound and ADC on a layer's accumulators (GEMM of the codes plus bias term)");
    m.def("check_peripherals", [](const py::dict& d, const std::string& source, const std::string& field) {
        settings_from(d, source, field);
    }, py::arg("settings"), py::arg("source") = "<memory>", py::arg("field") = "peripherals",
       "FormatError naming source and field.setting unless the settings are valid");
    m.def("periph_registers", [](const py::dict& d, int s_w, int s_x) {
        return registers_dict(periph_registers(settings_from(d, "<memory>", "peripherals"), s_w, s_x));
    }, py::arg("settings"), py::arg("s_w"), py::arg("s_x"), "The block's registers for weight and input scales");
    m.def("periph_stream_normals", [](std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t round,
                                      std::uint64_t image, int lane, std::int64_t count) {
        RngState s = periph_stream_state(seed, chip, layer, round, image, lane);
        py::array_t<std::int32_t> z(count);
        for (std::int64_t i = 0; i < count; ++i)
            z.mutable_data()[i] = gaussian_chip(xoshiro_next(s) >> (32 - gen::NIU_GAUSS_CHIP_U_BITS));
        return z;
    }, py::arg("seed"), py::arg("chip"), py::arg("layer"), py::arg("round"), py::arg("image"), py::arg("lane"),
       py::arg("count"), "The Q3.12 normals of one lane of the output-noise streams, in step order");
    m.attr("PERIPH_LANES") = kPeriphLanes;
    // The most steps each converter takes (Python refuses more before the int conversion).
    m.attr("PERIPH_MAX_INP_STEPS") = kMaxInpSteps;
    m.attr("PERIPH_MAX_OUT_STEPS") = kMaxOutSteps;
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(36, bind_periph);
