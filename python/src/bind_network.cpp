// Bindings for the quantized network (formats/network.hpp) and the model zoo.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "common/errors.hpp"
#include "formats/field_reader.hpp"
#include "formats/network.hpp"
#include "formats/zoo.hpp"
#include "network_guard.hpp"

namespace py = pybind11;
using namespace aimcemu;
using bindings::NetworkInUse;

// ---- Networks a pass is reading (network_guard.hpp) ----

namespace {

// Each network some pass reads, with how many passes read it.  A handful at most (usually none), so
// a scan; touched only with the GIL held.
std::vector<std::pair<const Network*, int>>& networks_being_read() {
    static std::vector<std::pair<const Network*, int>> reading;
    return reading;
}

}  // namespace

aimcemu::bindings::NetworkReadGuard::NetworkReadGuard(const Network& net) : net_(net) {
    auto& reading = networks_being_read();
    for (auto& [network, passes] : reading)
        if (network == &net) {
            ++passes;
            return;
        }
    reading.emplace_back(&net, 1);
}

aimcemu::bindings::NetworkReadGuard::~NetworkReadGuard() {
    auto& reading = networks_being_read();
    for (auto it = reading.begin(); it != reading.end(); ++it)
        if (it->first == &net_) {
            if (--it->second == 0) reading.erase(it);
            return;
        }
}

namespace {

bool lies_within(const void* object, const void* first, std::size_t bytes) {
    const auto at = reinterpret_cast<std::uintptr_t>(object), begin = reinterpret_cast<std::uintptr_t>(first);
    return at >= begin && at - begin < bytes;
}

// The network being read that `object` is part of: the Network itself, a Shape3 inside it, or one
// of its current layers (or a Window or Shape3 inside one), found by address.  A layer whose
// generation was replaced lives in a LayerStorage, not in the network's layers, so it is free.
const Network* network_being_read(const void* object) {
    for (const auto& [net, passes] : networks_being_read())
        if (lies_within(object, net, sizeof(Network)) ||
            lies_within(object, net->layers.data(), net->layers.size() * sizeof(Layer)))
            return net;
    return nullptr;
}

// What a setter of `object` names in its refusal (built only when it refuses).
std::string field_of(const Network&, const char* field) { return field; }
std::string field_of(const Layer& l, const char* field) { return "layers/" + printable(l.name) + "/" + field; }
std::string field_of(const Window&, const char* field) { return std::string("window/") + field; }
std::string field_of(const Shape3&, const char* field) { return std::string("shape/") + field; }

// Every Python write into a network goes through here first: refused while a pass reads that network.
template <class Part>
void refuse_while_read(const Part& part, const char* field) {
    if (networks_being_read().empty()) return;  // the common case: one branch
    if (const Network* net = network_being_read(&part))
        throw NetworkInUse("network '" + printable(net->name) + "': cannot change " + field_of(part, field) +
                           ": a pass (run_network or feed_network) is reading this network; change it after the pass returns");
}

// def_readwrite, whose setter refuses while a pass reads the network the object is part of.
// `check(value)` may refuse a value before it is stored (a name no file could hold).
template <class Class, class Value, class Check = void (*)(const Value&)>
void def_guarded(py::class_<Class>& cls, const char* name, Value Class::*member, Check check = [](const Value&) {}) {
    const py::cpp_function get([member](const Class& c) -> const Value& { return c.*member; }, py::is_method(cls));
    const py::cpp_function set(
        [member, name, check](Class& c, const Value& value) {
            refuse_while_read(c, name);
            check(value);
            c.*member = value;
        },
        py::is_method(cls));
    cls.def_property(name, get, set, py::return_value_policy::reference_internal);
}

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

// The guard is checked before the list is read: reading it copies every layer (25 MB of weights
// for ResNet-50), and reading a sequence may run Python (its __getitem__) that should not run
// for an assignment refused anyway.  And again after, before the write: that Python may have let
// another thread start a pass on this network meanwhile.
void set_layers(Network& net, const py::object& items) {
    refuse_while_read(net, "layers");
    std::vector<Layer> layers;
    try {
        layers = items.cast<std::vector<Layer>>();
    } catch (const py::cast_error&) {
        throw py::type_error("Network.layers: expected a sequence of aimcemu._core.Layer, got " +
                             std::string(py::str(py::type::of(items))));
    }
    refuse_while_read(net, "layers");
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
                throw FormatError("<memory>", "layers/" + printable(l.name) + "/" + name,
                                  std::string("differs between axes (") + window_repr(l.window) + "); read the per-axis fields");
            }
            return first;
        },
        [members, name](Layer& l, int value) {
            refuse_while_read(l, name);
            for (auto member : members) l.window.*member = value;
        });
}

const std::pair<const char*, int Window::*> kWindowFields[] = {
    {"kernel_h", &Window::kernel_h}, {"kernel_w", &Window::kernel_w}, {"stride_h", &Window::stride_h},
    {"stride_w", &Window::stride_w}, {"pad_top", &Window::pad_top},   {"pad_bottom", &Window::pad_bottom},
    {"pad_left", &Window::pad_left}, {"pad_right", &Window::pad_right}};

void bind_window_fields(py::class_<Layer>& layer) {
    for (const auto& [name, member] : kWindowFields)
        layer.def_property(
            name, [member](const Layer& l) { return l.window.*member; },
            [member, name](Layer& l, int value) {
                refuse_while_read(l, name);
                l.window.*member = value;
            });
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

    py::class_<Shape3> shape(m, "Shape3");
    def_guarded(shape, "h", &Shape3::h);
    def_guarded(shape, "w", &Shape3::w);
    def_guarded(shape, "c", &Shape3::c);
    shape.def(py::init<>())
        .def(py::init([](int h, int w, int c) { return Shape3{h, w, c}; }), py::arg("h"), py::arg("w"), py::arg("c"))
        .def("__eq__", &Shape3::operator==)
        .def("__iter__", [](const Shape3& s) { return py::iter(py::make_tuple(s.h, s.w, s.c)); })
        .def("__repr__", [](const Shape3& s) {
            return "Shape3(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ", " + std::to_string(s.c) + ")";
        });

    py::class_<Window> window(m, "Window", "Per-axis window of a conv or pool: kernel, stride and the four pads");
    for (const auto& [name, member] : kWindowFields) def_guarded(window, name, member);
    window.def(py::init([](int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_top, int pad_bottom,
                         int pad_left, int pad_right) {
                 return Window{kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right};
             }),
             py::arg("kernel_h") = 1, py::arg("kernel_w") = 1, py::arg("stride_h") = 1, py::arg("stride_w") = 1,
             py::arg("pad_top") = 0, py::arg("pad_bottom") = 0, py::arg("pad_left") = 0, py::arg("pad_right") = 0)
        .def_static("square", &Window::square, py::arg("kernel"), py::arg("stride") = 1, py::arg("pad") = 0)
        .def_property_readonly("is_square", &Window::is_square)
        .def("out_h", &Window::out_h, py::arg("in_h"))
        .def("out_w", &Window::out_w, py::arg("in_w"))
        .def("__eq__", &Window::operator==)
        .def("__repr__", [](const Window& w) { return window_repr(w); });

    py::class_<Layer> layer(m, "Layer");
    // The files' rule, at once: a name that no model or results file could store is refused here,
    // not at the next save, far from the line that set it.
    def_guarded(layer, "name", &Layer::name,
                [](const std::string& name) { check_layer_name(name, "<Layer>", "name"); });
    def_guarded(layer, "kind", &Layer::kind);
    def_guarded(layer, "input", &Layer::input);
    def_guarded(layer, "window", &Layer::window);
    def_guarded(layer, "out_channels", &Layer::out_channels);
    def_guarded(layer, "bias_shift", &Layer::bias_shift);
    def_guarded(layer, "out_shift", &Layer::out_shift);
    def_guarded(layer, "relu", &Layer::relu);
    def_guarded(layer, "residual_input", &Layer::residual_input);
    def_guarded(layer, "residual_shift", &Layer::residual_shift);
    def_guarded(layer, "relu_after_residual", &Layer::relu_after_residual);
    def_guarded(layer, "input_shift", &Layer::input_shift);
    def_guarded(layer, "avg_mult", &Layer::avg_mult);
    // The operand setters convert the array first (which may run Python: __array__, __index__), then
    // check, so that nothing the conversion did can slip past the refusal.
    layer.def(py::init<>())
        .def_property("weights", [](const Layer& l) { return to_array(l.weights); },
                      [](Layer& l, const py::array& a) {
                          auto values = from_array(a, "layers/" + printable(l.name) + "/weights");
                          refuse_while_read(l, "weights");
                          l.weights = std::move(values);
                      })
        .def_property("bias", [](const Layer& l) { return to_array(l.bias); },
                      [](Layer& l, const py::array& a) {
                          auto values = from_array(a, "layers/" + printable(l.name) + "/bias");
                          refuse_while_read(l, "bias");
                          l.bias = std::move(values);
                      })
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
    py::register_exception<NetworkInUse>(m, "NetworkInUseError", PyExc_RuntimeError);
    m.def("_passes_reading", [](const Network& net) {
        for (const auto& [network, passes] : networks_being_read())
            if (network == &net) return passes;
        return 0;
    }, "Test only: how many passes (run_network, feed_network) are reading `net` now.");
    py::class_<Network> network(m, "Network");
    def_guarded(network, "name", &Network::name,
                [](const std::string& name) { check_display_name(name, "<Network>", "name"); });
    def_guarded(network, "input_shape", &Network::input_shape);
    def_guarded(network, "input_frac_bits", &Network::input_frac_bits);
    def_guarded(network, "output_layer", &Network::output_layer);
    def_guarded(network, "class_names", &Network::class_names, [](const std::vector<std::string>& names) {
        for (std::size_t i = 0; i < names.size(); ++i)
            check_storable_text(names[i], "<Network>", "class_names/" + std::to_string(i));
    });
    network.def(py::init<>())
        .def_property("layers", &layers_of, &set_layers,
                      "The network's layers, in order: a new list, whose items refer to the network's layers\n"
                      "(net.layers[k].weights = w changes the network).  Assigning a list copies its layers\n"
                      "into the network; items taken before go on referring to the layers they were.")
        .def("resolve", [](Network& net, const std::string& source) {
            refuse_while_read(net, "its shapes (resolve)");
            net.resolve(source);
        }, py::arg("source") = "<memory>")
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
