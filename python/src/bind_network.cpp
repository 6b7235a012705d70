// Bindings for the quantized network (formats/network.hpp) and the model zoo.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <unordered_map>
#include <utility>

#include "bindings.hpp"
#include "common/errors.hpp"
#include "formats/network.hpp"
#include "formats/zoo.hpp"

namespace py = pybind11;
using namespace aimcemu;

namespace {

// ---- Network.layers: items that refer to the network's layers, and stay valid ----
//
// An item of net.layers refers to the network's Layer in place, so that net.layers[k].weights = w
// changes the network.  Replacing the layers (net.layers = ...) would free the Layer objects such
// items point into; instead the replaced vector moves, with its elements where they are, into the
// LayerStorage that every item of that generation keeps alive, and is freed with the last of them.
// So an item taken before a replacement goes on referring to the replaced layer, as a Python list's
// former items do, instead of reading freed memory.  (Everything here runs with the GIL held.)
struct LayerStorage {
    const Network* network = nullptr;  // while current: the network whose layers the items refer to
    std::vector<Layer> retired;        // once replaced: the layers the items refer to
    static inline std::size_t alive = 0;  // for tests: none may outlive its items
    LayerStorage() { ++alive; }
    LayerStorage(const LayerStorage&) = delete;
    LayerStorage& operator=(const LayerStorage&) = delete;
    ~LayerStorage();
};

// The current LayerStorage of each network that has items alive (a storage removes itself when the
// last item goes).
std::unordered_map<const Network*, LayerStorage*>& current_layer_storage() {
    static std::unordered_map<const Network*, LayerStorage*> current;
    return current;
}

LayerStorage::~LayerStorage() {
    if (network != nullptr) current_layer_storage().erase(network);
    --alive;
}

// The Python object of `net`'s current LayerStorage, made when it has none.
py::object layer_storage_of(const Network& net) {
    auto& current = current_layer_storage();
    const auto found = current.find(&net);
    if (found != current.end()) return py::cast(found->second, py::return_value_policy::reference);
    auto made = std::make_unique<LayerStorage>();
    made->network = &net;
    current[&net] = made.get();
    return py::cast(made.release(), py::return_value_policy::take_ownership);
}

py::list layers_of(py::object self) {
    Network& net = self.cast<Network&>();
    const py::object storage = layer_storage_of(net);
    py::list items;
    for (Layer& layer : net.layers) {
        py::object item = py::cast(&layer, py::return_value_policy::reference_internal, self);
        py::detail::keep_alive_impl(item, storage);
        items.append(std::move(item));
    }
    return items;
}

void set_layers(Network& net, std::vector<Layer> layers) {
    auto& current = current_layer_storage();
    const auto found = current.find(&net);
    if (found != current.end()) {
        found->second->retired = std::move(net.layers);  // a move keeps the elements where they are
        found->second->network = nullptr;
        current.erase(found);
    }
    net.layers = std::move(layers);
}

py::array_t<std::int8_t> to_array(const std::vector<std::int8_t>& v) {
    return py::array_t<std::int8_t>(py::ssize_t(v.size()), v.data());
}

// Accepts any integer array whose values fit int8; anything else is a FormatError naming the field.
std::vector<std::int8_t> from_array(const py::array& a, const std::string& field) {
    if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
        throw FormatError("<memory>", field, "expected an integer array, got dtype " + std::string(py::str(a.dtype())));
    auto as64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>(a);
    std::vector<std::int8_t> out(std::size_t(as64.size()));
    const std::int64_t* p = as64.data();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (p[i] < -128 || p[i] > 127) throw FormatError("<memory>", field, "value out of int8 range");
        out[i] = std::int8_t(p[i]);
    }
    return out;
}

py::dict field_ranges() {
    py::dict d;
    d["bias_shift"] = py::make_tuple(kBiasShiftRange.min, kBiasShiftRange.max);
    d["out_shift"] = py::make_tuple(kOutShiftRange.min, kOutShiftRange.max);
    d["residual_shift"] = py::make_tuple(kAlignShiftRange.min, kAlignShiftRange.max);
    d["input_shift"] = py::make_tuple(kAlignShiftRange.min, kAlignShiftRange.max);
    d["avg_mult"] = py::make_tuple(kAvgMultRange.min, kAvgMultRange.max);
    return d;
}

std::string window_repr(const Window& w) {
    return "Window(kernel_h=" + std::to_string(w.kernel_h) + ", kernel_w=" + std::to_string(w.kernel_w) +
           ", stride_h=" + std::to_string(w.stride_h) + ", stride_w=" + std::to_string(w.stride_w) +
           ", pad_top=" + std::to_string(w.pad_top) + ", pad_bottom=" + std::to_string(w.pad_bottom) +
           ", pad_left=" + std::to_string(w.pad_left) + ", pad_right=" + std::to_string(w.pad_right) + ")";
}

// The square shorthand `kernel`, `stride`, `pad` of a layer: reading it needs the same value on
// every axis (and side) it covers, otherwise it is a FormatError naming the per-axis fields to read
// instead; writing it sets them all, so code written for square layers keeps working.
template <std::size_t N>
void bind_square_field(py::class_<Layer>& layer, const char* name, std::array<int Window::*, N> members) {
    layer.def_property(
        name,
        [name, members](const Layer& l) {
            const int first = l.window.*members[0];
            for (auto member : members) {
                if (l.window.*member == first) continue;
                throw FormatError("<memory>", "layers/" + l.name + "/" + name,
                                  std::string("differs between axes (") + window_repr(l.window) + "); read the per-axis fields");
            }
            return first;
        },
        [members](Layer& l, int value) {
            for (auto member : members) l.window.*member = value;
        });
}

void bind_window_fields(py::class_<Layer>& layer) {
    const std::pair<const char*, int Window::*> fields[] = {
        {"kernel_h", &Window::kernel_h}, {"kernel_w", &Window::kernel_w}, {"stride_h", &Window::stride_h},
        {"stride_w", &Window::stride_w}, {"pad_top", &Window::pad_top},   {"pad_bottom", &Window::pad_bottom},
        {"pad_left", &Window::pad_left}, {"pad_right", &Window::pad_right}};
    for (const auto& [name, member] : fields)
        layer.def_property(
            name, [member](const Layer& l) { return l.window.*member; },
            [member](Layer& l, int value) { l.window.*member = value; });
    bind_square_field<2>(layer, "kernel", {&Window::kernel_h, &Window::kernel_w});
    bind_square_field<2>(layer, "stride", {&Window::stride_h, &Window::stride_w});
    bind_square_field<4>(layer, "pad", {&Window::pad_top, &Window::pad_bottom, &Window::pad_left, &Window::pad_right});
}

void bind_network(py::module_& m) {
    m.attr("LAYER_FIELD_RANGES") = field_ranges();
    m.attr("NETWORK_INPUT") = kNetworkInput;
    py::enum_<LayerKind>(m, "LayerKind")
        .value("conv", LayerKind::Conv)
        .value("linear", LayerKind::Linear)
        .value("add", LayerKind::Add)
        .value("max_pool", LayerKind::MaxPool)
        .value("avg_pool", LayerKind::AvgPool);

    py::class_<Shape3>(m, "Shape3")
        .def(py::init<>())
        .def(py::init([](int h, int w, int c) { return Shape3{h, w, c}; }), py::arg("h"), py::arg("w"), py::arg("c"))
        .def_readwrite("h", &Shape3::h)
        .def_readwrite("w", &Shape3::w)
        .def_readwrite("c", &Shape3::c)
        .def("__eq__", &Shape3::operator==)
        .def("__iter__", [](const Shape3& s) { return py::iter(py::make_tuple(s.h, s.w, s.c)); })
        .def("__repr__", [](const Shape3& s) {
            return "Shape3(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ", " + std::to_string(s.c) + ")";
        });

    py::class_<Window>(m, "Window", "Per-axis window of a conv or pool: kernel, stride and the four pads")
        .def(py::init([](int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_top, int pad_bottom,
                         int pad_left, int pad_right) {
                 return Window{kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right};
             }),
             py::arg("kernel_h") = 1, py::arg("kernel_w") = 1, py::arg("stride_h") = 1, py::arg("stride_w") = 1,
             py::arg("pad_top") = 0, py::arg("pad_bottom") = 0, py::arg("pad_left") = 0, py::arg("pad_right") = 0)
        .def_static("square", &Window::square, py::arg("kernel"), py::arg("stride") = 1, py::arg("pad") = 0)
        .def_readwrite("kernel_h", &Window::kernel_h)
        .def_readwrite("kernel_w", &Window::kernel_w)
        .def_readwrite("stride_h", &Window::stride_h)
        .def_readwrite("stride_w", &Window::stride_w)
        .def_readwrite("pad_top", &Window::pad_top)
        .def_readwrite("pad_bottom", &Window::pad_bottom)
        .def_readwrite("pad_left", &Window::pad_left)
        .def_readwrite("pad_right", &Window::pad_right)
        .def_property_readonly("is_square", &Window::is_square)
        .def("out_h", &Window::out_h, py::arg("in_h"))
        .def("out_w", &Window::out_w, py::arg("in_w"))
        .def("__eq__", &Window::operator==)
        .def("__repr__", [](const Window& w) { return window_repr(w); });

    py::class_<Layer> layer(m, "Layer");
    layer.def(py::init<>())
        .def(py::init<>())
        .def_readwrite("name", &Layer::name)
        .def_readwrite("kind", &Layer::kind)
        .def_readwrite("input", &Layer::input)
        .def_readwrite("window", &Layer::window)
        .def_readwrite("out_channels", &Layer::out_channels)
        .def_property("weights", [](const Layer& l) { return to_array(l.weights); },
                      [](Layer& l, const py::array& a) { l.weights = from_array(a, "layers/" + l.name + "/weights"); })
        .def_property("bias", [](const Layer& l) { return to_array(l.bias); },
                      [](Layer& l, const py::array& a) { l.bias = from_array(a, "layers/" + l.name + "/bias"); })
        .def_readwrite("bias_shift", &Layer::bias_shift)
        .def_readwrite("out_shift", &Layer::out_shift)
        .def_readwrite("relu", &Layer::relu)
        .def_readwrite("residual_input", &Layer::residual_input)
        .def_readwrite("residual_shift", &Layer::residual_shift)
        .def_readwrite("relu_after_residual", &Layer::relu_after_residual)
        .def_readwrite("input_shift", &Layer::input_shift)
        .def_readwrite("avg_mult", &Layer::avg_mult)
        .def_readonly("in_shape", &Layer::in_shape)
        .def_readonly("out_shape", &Layer::out_shape)
        .def_property_readonly("is_gemm", &Layer::is_gemm)
        .def_property_readonly("gemm_n", &Layer::gemm_n)
        .def_property_readonly("gemm_m", &Layer::gemm_m)
        .def_property_readonly("gemm_p", &Layer::gemm_p)
        .def("__repr__", [](const Layer& l) { return "<Layer " + l.name + " " + to_string(l.kind) + ">"; });
    bind_window_fields(layer);

    py::class_<LayerStorage>(m, "_LayerStorage");  // kept alive by items of Network.layers
    m.def("_layer_storages_alive", [] { return LayerStorage::alive; },
          "Test only: how many LayerStorage objects (bind_network.cpp) are alive.");
    py::class_<Network>(m, "Network")
        .def(py::init<>())
        .def_readwrite("name", &Network::name)
        .def_readwrite("input_shape", &Network::input_shape)
        .def_readwrite("input_frac_bits", &Network::input_frac_bits)
        .def_property("layers", &layers_of, &set_layers,
                      "The network's layers, in order: a new list, whose items refer to the network's layers\n"
                      "(net.layers[k].weights = w changes the network).  Assigning a list copies its layers\n"
                      "into the network; items taken before go on referring to the layers they were.")
        .def_readwrite("output_layer", &Network::output_layer)
        .def_readwrite("class_names", &Network::class_names)
        .def("resolve", &Network::resolve, py::arg("source") = "<memory>")
        .def("output_index", &Network::output_index)
        .def("find_layer", &Network::find_layer)
        .def("total_weights", &Network::total_weights);

    auto zoo = m.def_submodule("zoo", "Built-in topologies with deterministic synthetic weights");
    zoo.def("resnet18", &zoo::resnet18, py::arg("seed") = 1, py::arg("image_size") = 224, py::arg("num_classes") = 1000);
    zoo.def("resnet50", [](bool v1_5, std::uint64_t seed, int image_size, int num_classes) {
        return zoo::resnet50(v1_5 ? zoo::ResNetVariant::V1_5 : zoo::ResNetVariant::V1, seed, image_size, num_classes);
    }, py::arg("v1_5") = false, py::arg("seed") = 1, py::arg("image_size") = 224, py::arg("num_classes") = 1000);
    zoo.def("by_name", &zoo::by_name, py::arg("name"), py::arg("seed") = 1);
    zoo.def("names", &zoo::names);
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(0, bind_network);
