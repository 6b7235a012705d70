// Whole-network inference on the PU functional model (see inference.hpp).
#include "pu_model/inference.hpp"

#include <algorithm>
#include <memory>

#include "common/errors.hpp"
#include "formats/field_reader.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"

namespace aimcemu {

WeightView::~WeightView() = default;
LayerOutputObserver::~LayerOutputObserver() = default;

const char* to_string(GemmBackend backend) {
    switch (backend) {
        case GemmBackend::Fast: return "fast";
        case GemmBackend::Reference: return "reference";
        case GemmBackend::CycleSA: return "cycle_sa";
    }
    return "?";
}

GemmBackend gemm_backend_from_string(const std::string& name, const std::string& source, const std::string& field) {
    std::string known;
    for (GemmBackend b : {GemmBackend::Fast, GemmBackend::Reference, GemmBackend::CycleSA}) {
        if (name == to_string(b)) return b;
        known += (known.empty() ? "" : ", ") + std::string(to_string(b));
    }
    throw FormatError(source, field, "unknown backend '" + printable(name) + "' (expected " + known + ")");
}

namespace {

WindowGeometry geometry_of(const Layer& l) { return {l.in_shape, l.window}; }

const std::int8_t* weights_read(const Network& net, int index, const RunOptions& opt) {
    const std::int8_t* w = opt.weights ? opt.weights->weights(index) : nullptr;
    return w ? w : net.layers[std::size_t(index)].weights.data();
}

std::unique_ptr<PackedWeights> pack_layer(const Layer& l, const std::int8_t* w, FastKernel kernel,
                                          PassBuffers* buffers = nullptr) {
    // A conv's kernel rows are the depth segments the VNNI kernel may skip where they read the
    // padding above or below the image.
    const std::int64_t kernel_row = l.kind == LayerKind::Conv && l.window.kernel_h > 1
                                        ? std::int64_t(l.window.kernel_w) * l.in_shape.c
                                        : 0;
    return std::make_unique<PackedWeights>(w, l.bias.data(), l.bias_shift, l.gemm_n(), l.gemm_m(), kernel, kernel_row,
                                           buffers);
}

// The fast-kernel weights one run uses: the caller's PackedNetwork where it has the layer and no
// WeightView replaces it, else packed here (once per run, shared by every micro-batch) into the
// pass's recycled buffers.
class RunWeights {
public:
    RunWeights(const Network& net, const RunOptions& opt, PassBuffers& buffers)
        : use_(net.layers.size(), nullptr), own_(net.layers.size()) {
        if (opt.backend != GemmBackend::Fast) return;
        if (opt.packed && opt.packed->layer_count() != net.layers.size())
            throw FormatError("<memory>", "packed", "the PackedNetwork was made for another network");
        const FastKernel kernel = resolve_fast_kernel(opt.kernel);
        std::vector<int> to_pack;
        for (int i = 0; i < int(net.layers.size()); ++i) {
            if (!net.layers[std::size_t(i)].is_gemm()) continue;
            const bool replaced = opt.weights && opt.weights->weights(i);
            if (!replaced && opt.packed && opt.packed->kernel() == kernel && opt.packed->layer(i))
                use_[std::size_t(i)] = opt.packed->layer(i);
            else
                to_pack.push_back(i);
        }
        parallel_for(std::int64_t(to_pack.size()), opt.threads, [&](std::int64_t k) {
            const int i = to_pack[std::size_t(k)];
            own_[std::size_t(i)] = pack_layer(net.layers[std::size_t(i)], weights_read(net, i, opt), kernel, &buffers);
        });
        for (int i : to_pack) use_[std::size_t(i)] = own_[std::size_t(i)].get();
    }
    const PackedWeights* layer(int index) const { return use_[std::size_t(index)]; }

private:
    std::vector<const PackedWeights*> use_;
    std::vector<std::unique_ptr<PackedWeights>> own_;
};

// One micro-batch: `count` images run together, layer by layer.  Each layer's output for the
// micro-batch is one buffer holding the images one after another (HWC each), so that a conv or
// linear layer is a single GEMM over count * P rows and element-wise steps run once over it.
// Every buffer comes from the pass's PassBuffers uninitialised (recycled bytes of earlier
// layers or passes): every path overwrites what it later reads (zero-filling them showed up in
// profiles of 224x224 networks; fresh pages, in the page faults of every pass).
class MicroBatch {
public:
    MicroBatch(const Network& net, const RunWeights& weights, const RunOptions& opt, const std::vector<int>& last_use,
               PassBuffers& buffers)
        : net_(net), weights_(weights), opt_(opt), last_use_(last_use), buffers_(buffers) {}

    // results[b] receives image b's outputs (kept layers filled, the others shape only).
    // position: the index of images[0] among the call's images (what the observer is told);
    // first_image: its run-wide index (it keys the peripherals' noise).
    void run(const Tensor8* const* images, int count, std::vector<Tensor8>* results, std::int64_t position,
             std::int64_t first_image) {
        count_ = count;
        first_image_ = first_image;
        const std::int64_t in_size = net_.input_shape.size();
        input_ = bytes(count * in_size);
        for (int b = 0; b < count; ++b)
            std::copy(images[b]->data.begin(), images[b]->data.end(), input_.data<std::int8_t>() + b * in_size);
        outputs_.clear();
        outputs_.resize(net_.layers.size());
        for (int b = 0; b < count; ++b) results[b].resize(net_.layers.size());
        for (int i = 0; i < int(net_.layers.size()); ++i) {
            outputs_[std::size_t(i)] = run_layer(i);
            const Layer& l = net_.layers[std::size_t(i)];
            const std::int64_t size = l.out_shape.size();
            if (opt_.observer)
                opt_.observer->layer_output(i, position, count, {output(i), std::size_t(count * size)});
            for (int b = 0; b < count; ++b) {
                Tensor8& t = results[b][std::size_t(i)];
                t.shape = l.out_shape;
                if (kept(i)) t.data.assign(output(i) + b * size, output(i) + (b + 1) * size);
            }
            release_after(i);
        }
    }

private:
    bool kept(int i) const { return opt_.keep.empty() || opt_.keep[std::size_t(i)]; }
    std::int8_t* output(int i) const { return outputs_[std::size_t(i)].data<std::int8_t>(); }
    const std::int8_t* producer(int i) const { return i == kNetworkInput ? input_.data<std::int8_t>() : output(i); }
    PassBuffers::Buffer bytes(std::int64_t count) { return buffers_.take(std::size_t(count)); }
    // Gives back every buffer whose last reader was layer i (the input after its last reader too).
    void release_after(int i) {
        for (int j = 0; j <= i; ++j)
            if (last_use_[std::size_t(j)] == i) outputs_[std::size_t(j)].reset();
        if (input_last_use() == i) input_.reset();
    }
    int input_last_use() const { return last_use_.back(); }

    PassBuffers::Buffer run_layer(int index) {
        const Layer& l = net_.layers[std::size_t(index)];
        const std::int64_t size = l.out_shape.size(), in_size = l.in_shape.size();
        PassBuffers::Buffer out = bytes(count_ * size);
        std::int8_t* const y = out.data<std::int8_t>();
        const std::int8_t* x = producer(l.input);
        switch (l.kind) {
            case LayerKind::Conv:
            case LayerKind::Linear:
                if (gemm_layer(index, x, y)) return out;   // its epilogue added the residual
                break;
            case LayerKind::Add:   // the add is the residual operation itself
                add_tensors(x, l.input_shift, producer(l.residual_input), l.residual_shift, count_ * size,
                            l.relu || l.relu_after_residual, y);
                return out;
            case LayerKind::MaxPool:
                for (int b = 0; b < count_; ++b) max_pool(x + b * in_size, geometry_of(l), y + b * size);
                if (l.relu) relu_inplace(y, count_ * size);
                break;
            case LayerKind::AvgPool:
                for (int b = 0; b < count_; ++b)
                    avg_pool(x + b * in_size, geometry_of(l), l.avg_mult, l.out_shift, y + b * size);
                if (l.relu) relu_inplace(y, count_ * size);
                break;
        }
        if (l.residual_input >= 0)
            residual_add(y, producer(l.residual_input), count_ * size, l.residual_shift, l.relu_after_residual);
        return out;
    }

    // y (count images of P x N int8) of a conv or linear layer.  True when the fast kernel's
    // epilogue also added the layer's residual (run_layer then does not).
    bool gemm_layer(int index, const std::int8_t* x, std::int8_t* y) {
        if (opt_.peripherals && opt_.peripherals->active(index)) {
            peripheral_gemm_layer(index, x, y);
            return false;
        }
        const Layer& l = net_.layers[std::size_t(index)];
        const std::int64_t n = l.gemm_n(), m = l.gemm_m(), p = l.gemm_p(), in_size = l.in_shape.size();
        // A linear layer reads its HWC input flattened (P = 1); conv reads IM2COL patches.
        const bool conv = l.kind == LayerKind::Conv;
        const bool pointwise = !conv || l.window.is_pointwise();
        const WindowGeometry g = conv ? geometry_of(l) : WindowGeometry{Shape3{1, 1, int(m)}, Window{}};
        if (opt_.backend == GemmBackend::Fast) {
            const PackedWeights& packed = *weights_.layer(index);
            const std::int64_t stride = packed.x_row_stride();
            const std::uint8_t mask = packed.x_xor_mask();
            GemmOutput out;
            out.y = y;
            out.out_shift = l.out_shift;
            out.relu = l.relu;
            if (l.residual_input >= 0) {
                out.residual = producer(l.residual_input);
                out.residual_shift = l.residual_shift;
                out.relu_after_residual = l.relu_after_residual;
            }
            if (pointwise && mask == 0 && stride == m) {   // the input already is the operand
                gemm_fast(packed, reinterpret_cast<const std::uint8_t*>(x), count_ * p, out, opt_.threads);
                return true;
            }
            if (conv && conv_reads_in_place(packed, g)) {   // the kernel reads the windows in place
                const PassBuffers::Buffer padded = bytes(count_ * padded_input_bytes(g));
                pad_input_into(x, g, count_, mask, padded.data());
                gemm_fast_conv(packed, padded.data(), g, count_, out, opt_.threads);
                return true;
            }
            // IM2COL writes every byte, each chunk of rows in the same pass over the worker pool as
            // the GEMM that reads it, into that worker's scratch block (one wake-up per layer, the
            // rows still in cache, no operand of the whole micro-batch).
            gemm_fast_streamed(
                packed, count_ * p, out, opt_.threads,
                [&](std::int64_t begin, std::int64_t end, std::uint8_t* rows) {
                    im2col_pixels_into(x, g, mask, stride, rows, begin, end);
                },
                &buffers_);
            return true;
        }
        const std::int8_t* w = weights_read(net_, index, opt_);
        const PassBuffers::Buffer acc_bytes = bytes(n * p * std::int64_t(sizeof(std::int32_t)));
        std::int32_t* const acc = acc_bytes.data<std::int32_t>();
        for (int b = 0; b < count_; ++b) {   // one image at a time: the SA model runs per frame
            std::vector<std::int8_t> patches;
            const std::int8_t* operand = x + b * in_size;
            if (!pointwise) {
                patches = im2col(operand, g);
                operand = patches.data();
            }
            if (opt_.backend == GemmBackend::Reference)
                gemm_reference(w, operand, m, l.bias.data(), l.bias_shift, n, m, p, acc);
            else
                sa_cycle_gemm(w, operand, m, l.bias.data(), l.bias_shift, n, m, p, opt_.sa, acc);
            requantize(acc, n * p, l.out_shift, l.relu, y + b * p * n, opt_.threads);
        }
        return false;
    }

    // A layer with analog tile peripherals, one image at a time: the DAC scale is chosen per image
    // and the output noise is keyed by the image's run-wide index (pu_model/peripherals.hpp).  The
    // GEMM multiplies the DAC codes; the peripherals turn its accumulator into digitised outputs.
    void peripheral_gemm_layer(int index, const std::int8_t* x, std::int8_t* y) {
        const Layer& l = net_.layers[std::size_t(index)];
        const std::int64_t n = l.gemm_n(), p = l.gemm_p(), in_size = l.in_shape.size();
        const PassBuffers::Buffer acc_bytes = bytes(n * p * std::int64_t(sizeof(std::int32_t)));
        std::int32_t* const acc = acc_bytes.data<std::int32_t>();
        for (int b = 0; b < count_; ++b) {
            const Tensor8 image{l.in_shape, std::vector<std::int8_t>(x + b * in_size, x + (b + 1) * in_size)};
            const Tensor8 codes = opt_.peripherals->input_codes(index, image);
            accumulate_one_image(index, codes.data.data(), acc);
            opt_.peripherals->apply_output(index, first_image_ + b, image, acc, p, n);
            requantize(acc, n * p, l.out_shift, l.relu, y + b * p * n, opt_.threads);
        }
    }

    // The exact int32 accumulator (P x N) of one image's conv or linear layer, any backend.
    void accumulate_one_image(int index, const std::int8_t* x, std::int32_t* acc) {
        const Layer& l = net_.layers[std::size_t(index)];
        const std::int64_t n = l.gemm_n(), m = l.gemm_m(), p = l.gemm_p();
        const bool conv = l.kind == LayerKind::Conv;
        const bool pointwise = !conv || l.window.is_pointwise();
        const WindowGeometry g = conv ? geometry_of(l) : WindowGeometry{Shape3{1, 1, int(m)}, Window{}};
        if (opt_.backend == GemmBackend::Fast) {
            const PackedWeights& packed = *weights_.layer(index);
            const std::int64_t stride = packed.x_row_stride();
            const std::uint8_t mask = packed.x_xor_mask();
            if (pointwise && mask == 0 && stride == m) {
                gemm_fast(packed, reinterpret_cast<const std::uint8_t*>(x), p, acc, opt_.threads);
                return;
            }
            const PassBuffers::Buffer operand = bytes(p * stride);
            im2col_into(x, g, mask, stride, operand.data(), opt_.threads);
            gemm_fast(packed, operand.data(), p, acc, opt_.threads);
            return;
        }
        const std::int8_t* w = weights_read(net_, index, opt_);
        std::vector<std::int8_t> patches;
        if (!pointwise) {
            patches = im2col(x, g);
            x = patches.data();
        }
        if (opt_.backend == GemmBackend::Reference)
            gemm_reference(w, x, m, l.bias.data(), l.bias_shift, n, m, p, acc);
        else
            sa_cycle_gemm(w, x, m, l.bias.data(), l.bias_shift, n, m, p, opt_.sa, acc);
    }

    const Network& net_;
    const RunWeights& weights_;
    const RunOptions& opt_;
    const std::vector<int>& last_use_;   // per layer, then the network input last
    PassBuffers& buffers_;
    int count_ = 0;
    std::int64_t first_image_ = 0;
    PassBuffers::Buffer input_;
    std::vector<PassBuffers::Buffer> outputs_;
};

// For each layer, the index of the last layer that reads its output (the layer itself if none);
// one more entry at the end for the network input.  Kept layers are copied out when they are
// made, so a buffer is never needed after its last reader.
std::vector<int> last_uses(const Network& net) {
    std::vector<int> last(net.layers.size() + 1);
    for (int i = 0; i < int(net.layers.size()); ++i) last[std::size_t(i)] = i;
    last.back() = 0;
    for (int i = 0; i < int(net.layers.size()); ++i) {
        const Layer& l = net.layers[std::size_t(i)];
        int& input = l.input == kNetworkInput ? last.back() : last[std::size_t(l.input)];
        input = std::max(input, i);
        if (l.residual_input >= 0)
            last[std::size_t(l.residual_input)] = std::max(last[std::size_t(l.residual_input)], i);
    }
    return last;
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

void check_options(const Network& net, const RunOptions& opt) {
    if (!opt.keep.empty() && opt.keep.size() != net.layers.size())
        throw FormatError("<memory>", "keep", "expected one flag per layer (" + std::to_string(net.layers.size()) +
                                                  "), got " + std::to_string(opt.keep.size()));
    if (opt.batch < 0) throw FormatError("<memory>", "batch", "must be >= 0 (0 = automatic)");
    check_threads(opt.threads, "threads");
    if (opt.first_image < 0) throw FormatError("<memory>", "first_image", "must be >= 0 (the first image's index)");
    // Once per pass, not per layer or image: the peripherals' tables must be this network's.
    if (opt.peripherals) opt.peripherals->check_network(net);
}

// Images per micro-batch when the caller leaves it open: enough rows on the 7x7 layers to fill
// the kernel's tiles (8 x 49 rows), no more than each thread's share of the images.
constexpr int kAutoBatch = 8;

}  // namespace

PackedNetwork::PackedNetwork(const Network& net, FastKernel kernel, int threads)
    : PackedNetwork(net, kernel, threads, {}) {}

PackedNetwork::PackedNetwork(const Network& net, FastKernel kernel, int threads, const std::vector<int>& skip,
                             const WeightView* weights)
    : kernel_(resolve_fast_kernel(kernel)), layers_(net.layers.size()) {
    parallel_for(std::int64_t(net.layers.size()), threads, [&](std::int64_t i) {
        const Layer& l = net.layers[std::size_t(i)];
        if (!l.is_gemm() || std::find(skip.begin(), skip.end(), int(i)) != skip.end()) return;
        const std::int8_t* w = weights ? weights->weights(int(i)) : nullptr;
        layers_[std::size_t(i)] = pack_layer(l, w ? w : l.weights.data(), kernel_);
    });
}

std::size_t PackedNetwork::bytes() const {
    std::size_t total = 0;
    for (const auto& l : layers_)
        if (l) total += l->bytes();
    return total;
}

std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, GemmBackend backend,
                                 const WeightView* weights) {
    RunOptions options;
    options.backend = backend;
    options.weights = weights;
    return run_network(net, input, options);
}

std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, const RunOptions& options) {
    return std::move(run_network_batch(net, {input}, options)[0]);
}

std::vector<std::vector<Tensor8>> run_network_batch(const Network& net, const std::vector<Tensor8>& images,
                                                    const RunOptions& options) {
    for (std::size_t i = 0; i < images.size(); ++i) check_ready(net, images[i], "images[" + std::to_string(i) + "]");
    check_options(net, options);
    std::vector<std::vector<Tensor8>> results(images.size());
    if (images.empty()) return results;
    PassBuffers own_buffers;   // this call's, when the caller keeps none between passes
    PassBuffers& buffers = options.buffers ? *options.buffers : own_buffers;
    buffers.begin_pass();
    const RunWeights weights(net, options, buffers);
    const std::vector<int> last_use = last_uses(net);
    const int count = int(images.size());
    const int threads = resolve_threads(options.threads);
    std::vector<const Tensor8*> inputs(images.size());
    for (std::size_t i = 0; i < images.size(); ++i) inputs[i] = &images[i];
    // One micro-batch per thread at least, when there are images enough: then each thread runs
    // whole micro-batches on its own; otherwise the threads split every GEMM of one micro-batch.
    const int wanted = options.batch > 0 ? options.batch : kAutoBatch;
    const int batch = std::max(1, std::min(wanted, (count + threads - 1) / threads));
    const int batches = (count + batch - 1) / batch;
    RunOptions per_batch = options;
    per_batch.threads = batches >= threads ? 1 : threads;
    const int workers = batches >= threads ? threads : 1;
    parallel_for(batches, workers, [&](std::int64_t k) {
        const int first = int(k) * batch, size = std::min(batch, count - first);
        MicroBatch(net, weights, per_batch, last_use, buffers)
            .run(inputs.data() + first, size, results.data() + first, first, options.first_image + first);
    });
    return results;
}

}  // namespace aimcemu
