// The quantized network: INT8 weights and activations with power-of-two scales.
//
// This is the in-memory form every path shares (model file, PU functional model, timing model,
// NIU).  The arithmetic it implies is the contract in docs/arithmetic.md:
//
//   conv / linear:  acc = sum(w * x) + (bias << bias_shift)            (exact, int32 checked)
//                   y   = sat8((acc + (1 << (out_shift-1))) >> out_shift)  [round half up]
//                   y   = relu(y)                  if relu
//                   y   = sat8(y + align(r, residual_shift)), then relu  if residual_input >= 0
//   add:            y   = sat8(align(a, input_shift) + align(b, residual_shift)),
//                   then ReLU if relu or relu_after_residual
//   pools may also fuse a residual add (residual_input), as conv does
//   max_pool:       exact max over the window (padding never wins)
//   avg_pool:       acc = avg_mult * sum(window); y = sat8(round_shift(acc, out_shift))  (a GEMM)
//
// Activations are HWC int8.  A linear layer flattens its input in HWC order (M = H*W*C).
// Conv weights are stored [N][kernel_h][kernel_w][Cin], i.e. one row of the GEMM weight matrix per output
// channel with M = kernel_h*kernel_w*Cin in the same (ky, kx, c) order that IM2COL produces.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace aimcemu {

struct Shape3 {
    int h = 0, w = 0, c = 0;
    std::int64_t size() const { return std::int64_t(h) * w * c; }
    bool operator==(const Shape3&) const = default;
};

enum class LayerKind : std::uint8_t { Conv, Linear, Add, MaxPool, AvgPool };

const char* to_string(LayerKind kind);
LayerKind layer_kind_from_string(const std::string& name, const std::string& source);

// The index of the network input when used as a producer.
inline constexpr int kNetworkInput = -1;

// The valid range of each integer field of a layer, inclusive.  Network::resolve checks them;
// the importer's quantizer (python/aimcemu/quantize.py) reads them through the bindings
// (aimcemu._core.LAYER_FIELD_RANGES), so they are stated only here.
struct FieldRange {
    int min, max;
    bool contains(int v) const { return v >= min && v <= max; }
};
// bias_shift stops at 23: 128 << 24 is 2^31 on its own, which no int32 accumulator holds, so
// 24 could never pass resolve; the importer's quantizer stops at 23 too (it reads this range).
inline constexpr FieldRange kBiasShiftRange{0, 23};
inline constexpr FieldRange kOutShiftRange{0, 31};
inline constexpr FieldRange kAlignShiftRange{-8, 8};  // residual_shift and input_shift
inline constexpr FieldRange kAvgMultRange{1, 127};

// Geometry limits (inclusive) that Network::resolve enforces, so that no shape arithmetic can
// overflow and no layer's activations outgrow what the kernels index: every dimension of the
// input, every kernel, stride and channel count is in kDimensionRange, and one image's
// activations of any layer hold fewer than 2^31 values.
inline constexpr FieldRange kDimensionRange{1, 65535};
inline constexpr std::int64_t kMaxActivationsPerImage = (std::int64_t(1) << 31) - 1;

// Output size along one axis of a window op: floor((in + pad_before + pad_after - k) / s) + 1.
inline int window_out(int in, int k, int s, int pad_before, int pad_after) {
    return (in + pad_before + pad_after - k) / s + 1;
}

// The window of a conv or pool, per axis: kernel_h x kernel_w taps stepping stride_h rows and
// stride_w columns over the input framed by pad_top / pad_bottom rows and pad_left / pad_right
// columns of zeros.  Network::resolve checks every pad against its own axis' kernel
// (0 <= pad < kernel), which keeps at least one in-image tap in every window (a max pool's
// padding never wins).
struct Window {
    int kernel_h = 1, kernel_w = 1;
    int stride_h = 1, stride_w = 1;
    int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;

    // The same kernel, stride and pad on both axes and both sides (the version-1 model file).
    static constexpr Window square(int kernel, int stride = 1, int pad = 0) {
        return {kernel, kernel, stride, stride, pad, pad, pad, pad};
    }
    bool is_square() const { return *this == square(kernel_h, stride_h, pad_top); }
    // 1x1, stride 1, no padding: the operand is the input itself (no IM2COL needed).
    bool is_pointwise() const { return *this == Window{}; }
    std::int64_t taps() const { return std::int64_t(kernel_h) * kernel_w; }
    int out_h(int in_h) const { return window_out(in_h, kernel_h, stride_h, pad_top, pad_bottom); }
    int out_w(int in_w) const { return window_out(in_w, kernel_w, stride_w, pad_left, pad_right); }
    bool operator==(const Window&) const = default;
};

struct Layer {
    std::string name;
    LayerKind kind = LayerKind::Conv;
    int input = kNetworkInput;     // producer layer index (kNetworkInput = the image)

    // Geometry (conv, pools).  Linear layers keep the 1x1 window (Window{}) on a flattened input.
    Window window;
    int out_channels = 0;          // conv / linear: N

    // GEMM operands (conv / linear).  weights: N*M int8, bias: N int8.
    std::vector<std::int8_t> weights;
    std::vector<std::int8_t> bias;
    int bias_shift = 0;            // bias is added as bias << bias_shift (kBiasShiftRange)

    // Requantisation and post-processing.
    int out_shift = 0;             // power-of-two requantisation, round half up (kOutShiftRange)
    bool relu = false;
    int residual_input = -1;       // conv/linear/add: second operand layer index, -1 = none
    int residual_shift = 0;        // align(r): r << s for s >= 0, round_shift(r, -s) for s < 0
    bool relu_after_residual = false;
    int input_shift = 0;           // add only: align of the first operand

    int avg_mult = 1;              // avg_pool: the int8 multiplier applied to the window sum

    // Filled by Network::resolve().
    Shape3 in_shape, out_shape;

    bool is_gemm() const { return kind == LayerKind::Conv || kind == LayerKind::Linear; }
    // GEMM dimensions as the PU sees them: weights N x M, activations M x P.
    std::int64_t gemm_n() const;
    std::int64_t gemm_m() const { return gemm_m_for(in_shape); }
    // gemm_m() of this layer were its input of shape `in` (Network::resolve, before in_shape is set).
    std::int64_t gemm_m_for(const Shape3& in) const;
    std::int64_t gemm_p() const;
};

struct Network {
    std::string name;
    Shape3 input_shape;
    int input_frac_bits = 0;       // input int8 = round(x * 2^input_frac_bits)
    std::vector<Layer> layers;     // topological order
    int output_layer = -1;         // -1 = last layer
    std::vector<std::string> class_names;

    // Infers every layer's in/out shape and validates every field; throws FormatError naming
    // `source` (a file path or "<memory>") and the offending field.  On error nothing is changed.
    void resolve(const std::string& source = "<memory>");
    // Every check resolve makes, in place (no copy, nothing written): throws the FormatError
    // resolve would throw; otherwise returns whether every layer's in/out shape already equals
    // what resolve fills in.  Lets a reader that only needs a resolved network (the emulator)
    // take the caller's network as it is instead of resolving a 25 MB copy of it.
    bool is_resolved(const std::string& source = "<memory>") const;
    // Every check resolve makes, and that resolve() has been called since the last change: a
    // FormatError naming `source` and the field otherwise (a layer whose in or out shape differs
    // from what resolve would fill in now, so that a pass would read its buffers with stale
    // sizes).  What every entry point that runs a network its caller can edit calls first.
    void require_resolved(const std::string& source = "<memory>") const;
    int output_index() const { return output_layer < 0 ? int(layers.size()) - 1 : output_layer; }
    const Shape3& shape_of(int producer) const;
    int find_layer(const std::string& layer_name) const;  // -1 if absent
    std::int64_t total_weights() const;
    // A copy of every field but the GEMM operands (each layer's weights and bias, left empty):
    // what a reader of the structure needs (names, shapes, the output), without copying the
    // weights (25.5 MB for ResNet-50).
    Network without_operands() const;
};

// A reader's resolved network: `net` itself when its checks pass in place and its shapes are
// filled in (a loaded or zoo network: nothing copied), else a resolved copy made in `copy`, which
// must outlive the returned reference.  Throws resolve's FormatError naming `source`.
const Network& resolved_in_place_or_copy(const Network& net, std::optional<Network>& copy, const std::string& source);

// Throws FormatError(path, field) for a name that a file cannot store as it is: a layer name that
// check_layer_name refuses, a network name that check_display_name refuses or a class name that
// check_storable_text refuses (a NUL byte: HDF5 text ends at the first NUL, 'a\0b' would be stored,
// and read back, as 'a').  Every writer of names (model and
// results files) calls it first.
void check_storable_names(const Network& net, const std::string& path);
// The same for one text field: FormatError(path, field) when `text` holds a NUL byte or is not
// valid UTF-8 (every reader refuses such text).
void check_storable_text(const std::string& text, const std::string& path, const std::string& field);
// A network or class name: storable (check_storable_text) and free of control characters (C0 or
// DEL), since it is printed in tables (aimcemu models, report).  Throws FormatError(path, field).
void check_display_name(const std::string& text, const std::string& path, const std::string& field);
// check_display_name for a network's name (field 'name', printed by 'run' and 'models') and
// check_storable_text for each class name ('class_names/<i>': never printed to a terminal, and a
// list read from a CRLF file holds "cat\r"); the model reader calls it, and every writer through
// check_storable_names.
void check_network_names(const std::string& network_name, const std::vector<std::string>& class_names, const std::string& path);
// The one rule for layer names (writers and importers call it; Python as _core.check_layer_name):
// a layer name becomes an HDF5 group of the model and results files, so it must not be empty, '.'
// or '..', nor hold '/', and must be valid UTF-8; it is printed in tables, so it holds no control
// character (C0 or DEL: NUL, tab, CR, ESC, ...).  Throws FormatError(path, field).
void check_layer_name(const std::string& name, const std::string& path, const std::string& field);

}  // namespace aimcemu
