#include "formats/network.hpp"

#include <algorithm>
#include <limits>

#include "common/errors.hpp"
#include "formats/field_reader.hpp"

namespace aimcemu {

const char* to_string(LayerKind kind) {
    switch (kind) {
        case LayerKind::Conv: return "conv";
        case LayerKind::Linear: return "linear";
        case LayerKind::Add: return "add";
        case LayerKind::MaxPool: return "max_pool";
        case LayerKind::AvgPool: return "avg_pool";
    }
    return "?";
}

LayerKind layer_kind_from_string(const std::string& name, const std::string& source) {
    for (auto k : {LayerKind::Conv, LayerKind::Linear, LayerKind::Add, LayerKind::MaxPool, LayerKind::AvgPool})
        if (name == to_string(k)) return k;
    throw FormatError(source, "kind", "unknown layer type '" + name +
                                          "' (expected conv, linear, add, max_pool or avg_pool)");
}

std::int64_t Layer::gemm_n() const {
    if (kind == LayerKind::AvgPool) return in_shape.c;
    return out_channels;
}
std::int64_t Layer::gemm_m_for(const Shape3& in) const {
    if (kind == LayerKind::Linear) return in.size();
    return window.taps() * in.c;
}
std::int64_t Layer::gemm_p() const { return std::int64_t(out_shape.h) * out_shape.w; }

const Shape3& Network::shape_of(int producer) const {
    return producer == kNetworkInput ? input_shape : layers.at(producer).out_shape;
}

int Network::find_layer(const std::string& layer_name) const {
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (layers[i].name == layer_name) return int(i);
    return -1;
}

std::int64_t Network::total_weights() const {
    std::int64_t n = 0;
    for (const auto& l : layers) n += std::int64_t(l.weights.size());
    return n;
}

Network Network::without_operands() const {
    // Every member is listed: a field added to Layer or Network must be added here too.  The
    // size checks (libstdc++ on x86-64) catch most additions at compile time; not one that fits
    // into existing padding.
#if defined(__x86_64__) && defined(__GLIBCXX__)
    static_assert(sizeof(Layer) == 184 && sizeof(Network) == 104,
                  "Layer or Network changed: copy the new field in Network::without_operands");
#endif
    Network copy;
    copy.name = name;
    copy.input_shape = input_shape;
    copy.input_frac_bits = input_frac_bits;
    copy.output_layer = output_layer;
    copy.class_names = class_names;
    copy.layers.reserve(layers.size());
    for (const Layer& l : layers) {
        Layer& s = copy.layers.emplace_back();
        s.name = l.name;
        s.kind = l.kind;
        s.input = l.input;
        s.window = l.window;
        s.out_channels = l.out_channels;
        s.bias_shift = l.bias_shift;
        s.out_shift = l.out_shift;
        s.relu = l.relu;
        s.residual_input = l.residual_input;
        s.residual_shift = l.residual_shift;
        s.relu_after_residual = l.relu_after_residual;
        s.input_shift = l.input_shift;
        s.avg_mult = l.avg_mult;
        s.in_shape = l.in_shape;
        s.out_shape = l.out_shape;
    }
    return copy;
}

namespace {

void require(bool ok, const std::string& source, const std::string& field, const std::string& what) {
    if (!ok) throw FormatError(source, field, what);
}

std::string range_text(FieldRange r) { return std::to_string(r.min) + ".." + std::to_string(r.max); }

void require_dimension(int value, const std::string& source, const std::string& field) {
    require(kDimensionRange.contains(value), source, field,
            "must be in " + range_text(kDimensionRange) + " (got " + std::to_string(value) + ")");
}

void check_producer(int index, int producer, const std::string& source, const std::string& field) {
    require(producer >= kNetworkInput && producer < index, source, field,
            "must name an earlier layer or the network input (got " + std::to_string(producer) + ")");
}

// One axis of a window: kernel and stride in kDimensionRange, each pad in 0..kernel-1, and the
// kernel no larger than the padded input.
void check_axis(int in, int kernel, int stride, int pad_before, int pad_after, const char* axis,
                const char* pad_before_name, const char* pad_after_name, const std::string& src, const std::string& f) {
    const std::string k_field = f + "kernel_" + axis;
    require_dimension(kernel, src, k_field);
    require_dimension(stride, src, f + "stride_" + axis);
    const std::string pad_range = "must be in 0..kernel_" + std::string(axis) + "-1 (kernel_" + axis + " = " +
                                  std::to_string(kernel) + ")";
    require(pad_before >= 0 && pad_before < kernel, src, f + pad_before_name, pad_range + ", got " + std::to_string(pad_before));
    require(pad_after >= 0 && pad_after < kernel, src, f + pad_after_name, pad_range + ", got " + std::to_string(pad_after));
    require(std::int64_t(in) + pad_before + pad_after >= kernel, src, k_field, "window larger than the padded input");
}

void check_window(const Window& w, const Shape3& in, const std::string& src, const std::string& f) {
    check_axis(in.h, w.kernel_h, w.stride_h, w.pad_top, w.pad_bottom, "h", "pad_top", "pad_bottom", src, f);
    check_axis(in.w, w.kernel_w, w.stride_w, w.pad_left, w.pad_right, "w", "pad_left", "pad_right", src, f);
}

// A GEMM layer's checks and its output shape for an input of shape `in`.
Shape3 checked_gemm_out_shape(const Layer& l, const Shape3& in, const std::string& src, const std::string& f) {
    require_dimension(l.out_channels, src, f + "out_channels");
    Shape3 out;
    if (l.kind == LayerKind::Linear) {
        require(l.window.is_pointwise(), src, f + "kernel_h",
                "linear layers take the 1x1 window (kernel 1, stride 1, pad 0 on both axes)");
        out = {1, 1, l.out_channels};
    } else {
        out = {l.window.out_h(in.h), l.window.out_w(in.w), l.out_channels};
    }
    const std::int64_t m = l.gemm_m_for(in);
    require(std::int64_t(l.weights.size()) == l.out_channels * m, src, f + "weights",
            "expected " + std::to_string(l.out_channels * m) + " int8 values (N=" +
                std::to_string(l.out_channels) + " x M=" + std::to_string(m) + "), got " +
                std::to_string(l.weights.size()));
    require(std::int64_t(l.bias.size()) == l.out_channels, src, f + "bias",
            "expected " + std::to_string(l.out_channels) + " values, got " + std::to_string(l.bias.size()));
    require(kBiasShiftRange.contains(l.bias_shift), src, f + "bias_shift",
            "must be in " + range_text(kBiasShiftRange) + " (got " + std::to_string(l.bias_shift) + ")");
    // The accumulator must be exact in int32: |sum w*x| <= M*128*128, |bias| <= 128 << bias_shift.
    static_assert((std::int64_t(128) << kBiasShiftRange.max) < (std::int64_t(1) << 31),
                  "the bias term alone fits int32 at every bias_shift the range allows");
    const std::int64_t worst = m * 128 * 128 + (std::int64_t(128) << l.bias_shift);
    require(worst < (std::int64_t(1) << 31), src, f + "weights",
            "M=" + std::to_string(m) + " with bias_shift=" + std::to_string(l.bias_shift) +
                " can overflow the int32 accumulator");
    return out;
}

// An avg_pool's accumulator, avg_mult * (sum of kernel_h * kernel_w int8 values), must be exact in
// int32 as the PU's (pu_model/postproc.cpp checks the same at run time, too late to name the layer).
void check_avg_pool_sum(const Layer& l, const std::string& src, const std::string& f) {
    require(kAvgMultRange.contains(l.avg_mult), src, f + "avg_mult", "must be in " + range_text(kAvgMultRange));
    const std::int64_t worst = std::int64_t(l.avg_mult) * 128 * l.window.taps();
    require(worst < (std::int64_t(1) << 31), src, f + "avg_mult",
            "avg_mult=" + std::to_string(l.avg_mult) + " over a " + std::to_string(l.window.kernel_h) + "x" +
                std::to_string(l.window.kernel_w) + " window can overflow the int32 accumulator "
                "(avg_mult * 128 * kernel_h * kernel_w must stay below 2^31)");
}

struct LayerShapes {
    Shape3 in, out;
};

// Every check of Network::resolve, reading `net` only; the shapes resolve fills in, per layer.
std::vector<LayerShapes> checked_shapes(const Network& net, const std::string& src) {
    require(net.input_shape.h > 0 && net.input_shape.w > 0 && net.input_shape.c > 0, src, "input_shape",
            "every dimension must be positive");
    for (int d : {net.input_shape.h, net.input_shape.w, net.input_shape.c}) require_dimension(d, src, "input_shape");
    require(!net.layers.empty(), src, "layers", "the network has no layers");
    require(net.output_layer >= -1 && net.output_layer < int(net.layers.size()), src, "output_layer", "out of range");
    std::vector<LayerShapes> shapes(net.layers.size());
    // A producer's output shape as computed so far (check_producer keeps it to earlier layers).
    const auto shape_of = [&](int producer) -> const Shape3& {
        return producer == kNetworkInput ? net.input_shape : shapes[std::size_t(producer)].out;
    };
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        const std::string f = "layers/" + std::to_string(i) + " (" + printable(l.name) + ")/";
        check_layer_name(l.name, src, "layers/" + std::to_string(i) + "/name");
        for (std::size_t j = 0; j < i; ++j)
            require(net.layers[j].name != l.name, src, f + "name", "duplicate layer name");
        check_producer(int(i), l.input, src, f + "input");
        const Shape3 in = shape_of(l.input);
        Shape3& out = shapes[i].out;
        shapes[i].in = in;
        require(kOutShiftRange.contains(l.out_shift), src, f + "out_shift", "must be in " + range_text(kOutShiftRange));
        require(kAlignShiftRange.contains(l.residual_shift), src, f + "residual_shift",
                "must be in " + range_text(kAlignShiftRange));
        require(kAlignShiftRange.contains(l.input_shift), src, f + "input_shift", "must be in " + range_text(kAlignShiftRange));
        const bool windowed = l.kind == LayerKind::Conv || l.kind == LayerKind::MaxPool || l.kind == LayerKind::AvgPool;
        if (windowed) check_window(l.window, in, src, f);
        switch (l.kind) {
            case LayerKind::Conv:
            case LayerKind::Linear: out = checked_gemm_out_shape(l, in, src, f); break;
            case LayerKind::Add:
                require(l.residual_input >= 0, src, f + "residual_input", "an add layer needs a second operand");
                out = in;
                break;
            case LayerKind::MaxPool:
            case LayerKind::AvgPool:
                out = {l.window.out_h(in.h), l.window.out_w(in.w), in.c};
                require(l.weights.empty() && l.bias.empty(), src, f + "weights", "pool layers carry no weights");
                if (l.kind == LayerKind::AvgPool) check_avg_pool_sum(l, src, f);
                break;
        }
        require(out.size() <= kMaxActivationsPerImage, src, f + "out_channels",
                "one image's activations (" + std::to_string(out.size()) + " values) exceed 2^31 - 1");
        if (l.residual_input >= 0) {
            check_producer(int(i), l.residual_input, src, f + "residual_input");
            require(shape_of(l.residual_input) == out, src, f + "residual_input",
                    "residual operand shape differs from the layer's output shape");
        }
    }
    return shapes;
}

}  // namespace

void Network::resolve(const std::string& src) {
    const std::vector<LayerShapes> shapes = checked_shapes(*this, src);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        layers[i].in_shape = shapes[i].in;
        layers[i].out_shape = shapes[i].out;
    }
}

bool Network::is_resolved(const std::string& src) const {
    const std::vector<LayerShapes> shapes = checked_shapes(*this, src);
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (!(layers[i].in_shape == shapes[i].in) || !(layers[i].out_shape == shapes[i].out)) return false;
    return true;
}

namespace {
std::string shape_text(const Shape3& s) {
    return std::to_string(s.h) + "x" + std::to_string(s.w) + "x" + std::to_string(s.c);
}
}  // namespace

void Network::require_resolved(const std::string& src) const {
    const std::vector<LayerShapes> shapes = checked_shapes(*this, src);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        if (l.in_shape == shapes[i].in && l.out_shape == shapes[i].out) continue;
        // The first stale layer: its input's shape moved (input_shape, its input, or a layer before
        // it), or one of its own fields (window, out_channels) did.
        const std::string f = "layers/" + std::to_string(i) + " (" + printable(l.name) + ")";
        if (l.in_shape == Shape3{} && l.out_shape == Shape3{})
            throw FormatError(src, f, "has no shape: the network was never resolved (call resolve() first)");
        const bool input_moved = !(l.in_shape == shapes[i].in);
        const std::string field = !input_moved ? f
                                  : l.input == kNetworkInput && shapes[i].in == input_shape ? std::string("input_shape")
                                                                                            : f + "/input";
        throw FormatError(src, field,
                          "changed since Network.resolve(): resolved for input " + shape_text(l.in_shape) + " -> output " +
                              shape_text(l.out_shape) + ", now input " + shape_text(shapes[i].in) + " -> output " +
                              shape_text(shapes[i].out) + " (call resolve() after editing a network)");
    }
}

const Network& resolved_in_place_or_copy(const Network& net, std::optional<Network>& copy, const std::string& source) {
    if (net.is_resolved(source)) return net;
    copy.emplace(net);
    copy->resolve(source);
    return *copy;
}

void check_storable_text(const std::string& text, const std::string& path, const std::string& field) {
    const auto nul = text.find('\0');
    if (nul != std::string::npos)
        throw FormatError(path, field, "holds a NUL byte at position " + std::to_string(nul) +
                                           " (HDF5 text ends there: it would be stored as '" +
                                           printable(text.substr(0, nul)) + "')");
    // Every reader refuses text that is not UTF-8, so no writer may store it.
    std::size_t bad_at = 0;
    if (!valid_utf8(text, bad_at))
        throw FormatError(path, field, "'" + printable(text) + "' is not valid UTF-8 (byte " +
                                           byte_text(static_cast<unsigned char>(text[bad_at])) + " at position " +
                                           std::to_string(bad_at) + "): files store text as UTF-8");
}

namespace {
// C0 controls and DEL: printed in a table, ESC or CR from a hostile file would drive the terminal.
bool holds_control_character(const std::string& text) {
    return std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}
}  // namespace

void check_display_name(const std::string& text, const std::string& path, const std::string& field) {
    check_storable_text(text, path, field);  // first: a NUL or a byte outside UTF-8 is named as such
    if (holds_control_character(text))
        throw FormatError(path, field, "'" + printable(text) + "' holds a control character (such as tab, CR or ESC): "
                                       "names are printed in tables");
}

void check_layer_name(const std::string& name, const std::string& path, const std::string& field) {
    // '..' is a legal HDF5 link name, but a layer name also ends up in paths and glob patterns
    // that users type, where it reads as "the parent": refused with the rest.
    // Control characters (C0 and DEL) too: a name is printed in tables (aimcemu perf, models,
    // reports), where ESC or CR from a hostile file would drive the terminal.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || holds_control_character(name))
        throw FormatError(path, field,
                          "'" + printable(name) +
                              "' cannot name a layer (a group of the model file: not empty, '.' or '..', "
                              "and without '/' or control characters such as NUL, tab or ESC)");
    check_storable_text(name, path, field);  // UTF-8
}

void check_storable_names(const Network& net, const std::string& path) {
    check_network_names(net.name, net.class_names, path);
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        check_layer_name(net.layers[i].name, path, "layers/" + std::to_string(i) + "/name");
}

void check_network_names(const std::string& network_name, const std::vector<std::string>& class_names, const std::string& path) {
    check_display_name(network_name, path, "name");
    // Class names are stored and shown in HTML reports and xarray coordinates, never printed to a
    // terminal by aimcemu; lists read from CRLF files hold "cat\r", and files that hold them stay readable.
    for (std::size_t i = 0; i < class_names.size(); ++i) check_storable_text(class_names[i], path, "class_names/" + std::to_string(i));
}

}  // namespace aimcemu
