// Whole-network inference on the PU functional model (see inference.hpp).
#include "pu_model/inference.hpp"

#include <memory>

#include "common/errors.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"

namespace aimcemu {

WeightView::~WeightView() = default;

const char* to_string(GemmBackend backend) {
    switch (backend) {
        case GemmBackend::Fast: return "fast";
        case GemmBackend::Reference: return "reference";
        case GemmBackend::CycleSA: return "cycle_sa";
    }
    return "?";
}

namespace {

WindowGeometry geometry_of(const Layer& l) { return {l.in_shape, l.kernel, l.stride, l.pad}; }

// Fast-kernel weights of every conv/linear layer, packed once and shared by all images of a batch
// (packing costs as much as the GEMM itself on the 7x7 layers of a 224x224 ResNet).
using PackedLayers = std::vector<std::unique_ptr<PackedWeights>>;

const std::int8_t* weights_read(const Network& net, int index, const RunOptions& opt) {
    const std::int8_t* w = opt.weights ? opt.weights->weights(index) : nullptr;
    return w ? w : net.layers[std::size_t(index)].weights.data();
}

PackedLayers pack_layers(const Network& net, const RunOptions& opt) {
    PackedLayers packed(net.layers.size());
    if (opt.backend != GemmBackend::Fast) return packed;
    parallel_for(std::int64_t(net.layers.size()), opt.threads, [&](std::int64_t i) {
        const Layer& l = net.layers[std::size_t(i)];
        if (l.is_gemm())
            packed[std::size_t(i)] = std::make_unique<PackedWeights>(weights_read(net, int(i), opt), l.bias.data(),
                                                                     l.bias_shift, l.gemm_n(), l.gemm_m(), opt.kernel);
    });
    return packed;
}

// acc (P x N) of a conv or linear layer on its input, through the chosen backend (`packed`: the
// layer's fast-kernel weights, used by the Fast backend).
// Buffers every path overwrites completely are left uninitialised (zero-filling them showed up in
// profiles of 224x224 networks).
template <typename T>
std::unique_ptr<T[]> uninitialised(std::int64_t count) {
    return std::unique_ptr<T[]>(new T[std::size_t(count)]);
}

std::unique_ptr<std::int32_t[]> gemm_layer(const Layer& l, const std::int8_t* w, const PackedWeights* packed_weights,
                                           const Tensor8& x, const RunOptions& opt) {
    const std::int64_t n = l.gemm_n(), m = l.gemm_m(), p = l.gemm_p();
    auto acc = uninitialised<std::int32_t>(n * p);
    // A linear layer reads its HWC input flattened (P = 1); conv reads IM2COL patches.
    const bool conv = l.kind == LayerKind::Conv;
    const WindowGeometry g = geometry_of(l);
    if (opt.backend == GemmBackend::Fast) {
        const PackedWeights& packed = *packed_weights;
        const std::int64_t stride = packed.x_row_stride();
        const std::uint8_t mask = packed.x_xor_mask();
        const bool as_is = mask == 0 && stride == m && (!conv || (l.kernel == 1 && l.stride == 1 && l.pad == 0));
        if (as_is) {
            gemm_fast(packed, reinterpret_cast<const std::uint8_t*>(x.data.data()), p, acc.get(), opt.threads);
        } else {
            auto operand = uninitialised<std::uint8_t>(p * stride);   // im2col_into writes every byte
            const WindowGeometry flat = conv ? g : WindowGeometry{Shape3{1, 1, int(m)}, 1, 1, 0};
            im2col_into(x.data.data(), flat, mask, stride, operand.get(), opt.threads);
            gemm_fast(packed, operand.get(), p, acc.get(), opt.threads);
        }
        return acc;
    }
    std::vector<std::int8_t> patches;
    const std::int8_t* operand = x.data.data();
    if (conv && !(l.kernel == 1 && l.stride == 1 && l.pad == 0)) {
        patches = im2col(x.data.data(), g);
        operand = patches.data();
    }
    if (opt.backend == GemmBackend::Reference)
        gemm_reference(w, operand, m, l.bias.data(), l.bias_shift, n, m, p, acc.get());
    else
        sa_cycle_gemm(w, operand, m, l.bias.data(), l.bias_shift, n, m, p, opt.sa, acc.get());
    return acc;
}

Tensor8 run_layer(const Network& net, int index, const Tensor8& input, const std::vector<Tensor8>& outputs,
                  const PackedLayers& packed, const RunOptions& opt, std::int64_t image) {
    const Layer& l = net.layers[std::size_t(index)];
    auto producer = [&](int i) -> const Tensor8& { return i == kNetworkInput ? input : outputs[std::size_t(i)]; };
    const Tensor8& x = producer(l.input);
    Tensor8 y{l.out_shape, std::vector<std::int8_t>(std::size_t(l.out_shape.size()))};
    switch (l.kind) {
        case LayerKind::Conv:
        case LayerKind::Linear: {
            const std::int8_t* w = weights_read(net, index, opt);
            const PackedWeights* pw = packed[std::size_t(index)].get();
            if (opt.peripherals && opt.peripherals->active(index)) {
                // The GEMM multiplies the DAC codes; the peripherals turn its accumulator into
                // digitised outputs in x's accumulator units (pu_model/peripherals.hpp).
                const auto acc = gemm_layer(l, w, pw, opt.peripherals->input_codes(index, x), opt);
                opt.peripherals->apply_output(index, image, x, acc.get(), l.gemm_p(), l.gemm_n());
                requantize(acc.get(), l.gemm_n() * l.gemm_p(), l.out_shift, l.relu, y.data.data(), opt.threads);
                break;
            }
            const auto acc = gemm_layer(l, w, pw, x, opt);
            requantize(acc.get(), l.gemm_n() * l.gemm_p(), l.out_shift, l.relu, y.data.data(), opt.threads);
            break;
        }
        case LayerKind::Add:
            add_tensors(x.data.data(), l.input_shift, producer(l.residual_input).data.data(), l.residual_shift,
                        l.out_shape.size(), l.relu || l.relu_after_residual, y.data.data());
            return y;   // the add is the residual operation itself
        case LayerKind::MaxPool:
            max_pool(x.data.data(), geometry_of(l), y.data.data());
            if (l.relu) relu_inplace(y.data.data(), y.shape.size());
            break;
        case LayerKind::AvgPool:
            avg_pool(x.data.data(), geometry_of(l), l.avg_mult, l.out_shift, y.data.data());
            if (l.relu) relu_inplace(y.data.data(), y.shape.size());
            break;
    }
    if (l.residual_input >= 0)
        residual_add(y.data.data(), producer(l.residual_input).data.data(), y.shape.size(), l.residual_shift,
                     l.relu_after_residual);
    return y;
}

void check_ready(const Network& net, const Tensor8& input, const std::string& field) {
    if (net.layers.empty()) throw FormatError("<memory>", "network", "the network has no layers");
    for (const auto& l : net.layers)
        if (l.out_shape.size() == 0)
            throw FormatError("<memory>", "network", "layer '" + l.name + "' has no shape: call Network::resolve first");
    if (!(input.shape == net.input_shape) || std::int64_t(input.data.size()) != input.shape.size())
        throw FormatError("<memory>", field,
                          "expected " + std::to_string(net.input_shape.h) + "x" + std::to_string(net.input_shape.w) +
                              "x" + std::to_string(net.input_shape.c) + " HWC int8 values");
}

std::vector<Tensor8> run_prepared(const Network& net, const Tensor8& input, const PackedLayers& packed,
                                  const RunOptions& options, std::int64_t image) {
    std::vector<Tensor8> outputs;
    outputs.reserve(net.layers.size());
    for (int i = 0; i < int(net.layers.size()); ++i)
        outputs.push_back(run_layer(net, i, input, outputs, packed, options, image));
    return outputs;
}

}  // namespace

std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, GemmBackend backend,
                                 const WeightView* weights) {
    RunOptions options;
    options.backend = backend;
    options.weights = weights;
    return run_network(net, input, options);
}

std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, const RunOptions& options) {
    check_ready(net, input, "input");
    return run_prepared(net, input, pack_layers(net, options), options, options.first_image);
}

std::vector<std::vector<Tensor8>> run_network_batch(const Network& net, const std::vector<Tensor8>& images,
                                                    const RunOptions& options) {
    for (std::size_t i = 0; i < images.size(); ++i) check_ready(net, images[i], "images[" + std::to_string(i) + "]");
    std::vector<std::vector<Tensor8>> results(images.size());
    if (images.empty()) return results;
    const PackedLayers packed = pack_layers(net, options);
    if (images.size() == 1) {
        results[0] = run_prepared(net, images[0], packed, options, options.first_image);
        return results;
    }
    RunOptions per_image = options;
    per_image.threads = 1;   // parallel over images; each image's GEMMs run on its own thread
    parallel_for(std::int64_t(images.size()), options.threads, [&](std::int64_t i) {
        results[std::size_t(i)] = run_prepared(net, images[std::size_t(i)], packed, per_image, options.first_image + i);
    });
    return results;
}

}  // namespace aimcemu
