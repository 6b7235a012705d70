#include "formats/zoo.hpp"

#include <cmath>
#include <stdexcept>

#include <pcg_random.hpp>

#include "common/errors.hpp"

namespace aimcemu::zoo {
namespace {

// Builds a network layer by layer, tracking the current producer.
class Builder {
public:
    Builder(std::string name, Shape3 input, std::uint64_t seed) : rng_(seed, 0xa11ce) {
        net_.name = std::move(name);
        net_.input_shape = input;
        net_.input_frac_bits = 5;
        shape_ = input;
    }

    // Adds a conv; returns its index.  `residual` >= 0 fuses a residual add followed by ReLU.
    int conv(const std::string& name, int input, int out_c, int k, int s, int p, bool relu, int residual = -1) {
        const Shape3 in = net_.shape_of(input);
        Layer l;
        l.name = name;
        l.kind = LayerKind::Conv;
        l.input = input;
        l.window = Window::square(k, s, p);
        l.out_channels = out_c;
        fill_gemm(l, l.window.taps() * in.c);
        l.relu = relu && residual < 0;
        if (residual >= 0) {
            l.residual_input = residual;
            l.relu_after_residual = relu;
        }
        return push(std::move(l));
    }

    int linear(const std::string& name, int input, int out_c) {
        Layer l;
        l.name = name;
        l.kind = LayerKind::Linear;
        l.input = input;
        l.out_channels = out_c;
        fill_gemm(l, net_.shape_of(input).size());
        return push(std::move(l));
    }

    int max_pool(const std::string& name, int input, int k, int s, int p) {
        Layer l;
        l.name = name;
        l.kind = LayerKind::MaxPool;
        l.input = input;
        l.window = Window::square(k, s, p);
        return push(std::move(l));
    }

    // Global average pool as a GEMM: multiplier/shift approximate 1/(h*w) with an int8 multiplier.
    int global_avg_pool(const std::string& name, int input) {
        const Shape3 in = net_.shape_of(input);
        Layer l;
        l.name = name;
        l.kind = LayerKind::AvgPool;
        l.input = input;
        l.window = Window{.kernel_h = in.h, .kernel_w = in.w};   // the whole map, stride 1, no padding
        const double inv = 1.0 / (double(in.h) * in.w);
        l.out_shift = int(std::floor(std::log2(127.0 / inv)));  // largest shift keeping mult <= 127
        l.avg_mult = int(std::lround(inv * std::ldexp(1.0, l.out_shift)));
        return push(std::move(l));
    }

    Network finish() {
        net_.resolve("<zoo:" + net_.name + ">");
        return std::move(net_);
    }
    int last() const { return int(net_.layers.size()) - 1; }

private:
    int push(Layer l) {
        net_.layers.push_back(std::move(l));
        net_.resolve("<zoo:" + net_.name + ">");  // keeps shapes current for the next layer
        return last();
    }

    // Synthetic weights: uniform in [-31, 31] (sd ~18), bias small; the shift brings
    // sum over M of w*x (sd ~ sqrt(M)*18*sd_x) back to the int8 range.
    void fill_gemm(Layer& l, std::int64_t m) {
        l.weights.resize(std::size_t(l.out_channels * m));
        for (auto& w : l.weights) w = std::int8_t(int(rng_(63u)) - 31);
        l.bias.resize(std::size_t(l.out_channels));
        for (auto& b : l.bias) b = std::int8_t(int(rng_(33u)) - 16);
        l.bias_shift = 4;
        l.out_shift = std::max(1, int(std::lround(std::log2(std::sqrt(double(m)) * 18.0))));
    }

    Network net_;
    Shape3 shape_;
    pcg32 rng_;
};

int basic_block(Builder& b, const std::string& name, int input, int out_c, int stride, bool downsample) {
    const int a = b.conv(name + ".conv1", input, out_c, 3, stride, 1, true);
    int shortcut = input;
    if (downsample) shortcut = b.conv(name + ".downsample", input, out_c, 1, stride, 0, false);
    return b.conv(name + ".conv2", a, out_c, 3, 1, 1, true, shortcut);
}

int bottleneck(Builder& b, const std::string& name, int input, int width, int stride, bool downsample,
               ResNetVariant v) {
    const int s1 = v == ResNetVariant::V1 ? stride : 1;
    const int s3 = v == ResNetVariant::V1 ? 1 : stride;
    const int a = b.conv(name + ".conv1", input, width, 1, s1, 0, true);
    const int c = b.conv(name + ".conv2", a, width, 3, s3, 1, true);
    int shortcut = input;
    if (downsample) shortcut = b.conv(name + ".downsample", input, width * 4, 1, stride, 0, false);
    return b.conv(name + ".conv3", c, width * 4, 1, 1, 0, true, shortcut);
}

}  // namespace

Network resnet18(std::uint64_t seed, int image_size, int num_classes) {
    Builder b("resnet18", {image_size, image_size, 3}, seed);
    int x = b.conv("conv1", kNetworkInput, 64, 7, 2, 3, true);
    x = b.max_pool("maxpool", x, 3, 2, 1);
    const int widths[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; ++stage)
        for (int blk = 0; blk < 2; ++blk) {
            const bool first = blk == 0 && stage > 0;
            x = basic_block(b, "layer" + std::to_string(stage + 1) + "." + std::to_string(blk), x, widths[stage],
                            first ? 2 : 1, first);
        }
    x = b.global_avg_pool("avgpool", x);
    b.linear("fc", x, num_classes);
    return b.finish();
}

Network resnet50(ResNetVariant variant, std::uint64_t seed, int image_size, int num_classes) {
    Builder b(variant == ResNetVariant::V1 ? "resnet50" : "resnet50v1.5", {image_size, image_size, 3}, seed);
    int x = b.conv("conv1", kNetworkInput, 64, 7, 2, 3, true);
    x = b.max_pool("maxpool", x, 3, 2, 1);
    const int widths[4] = {64, 128, 256, 512};
    const int blocks[4] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage)
        for (int blk = 0; blk < blocks[stage]; ++blk) {
            const int stride = (blk == 0 && stage > 0) ? 2 : 1;
            x = bottleneck(b, "layer" + std::to_string(stage + 1) + "." + std::to_string(blk), x, widths[stage],
                           stride, blk == 0, variant);
        }
    x = b.global_avg_pool("avgpool", x);
    b.linear("fc", x, num_classes);
    return b.finish();
}

std::vector<std::string> names() { return {"resnet18", "resnet50", "resnet50v1.5"}; }

Network by_name(const std::string& name, std::uint64_t seed) {
    if (name == "resnet18") return resnet18(seed);
    if (name == "resnet50" || name == "resnet50v1") return resnet50(ResNetVariant::V1, seed);
    if (name == "resnet50v1.5") return resnet50(ResNetVariant::V1_5, seed);
    throw FormatError("<zoo>", "model", "unknown zoo model '" + name + "' (known: resnet18, resnet50, resnet50v1.5)");
}

}  // namespace aimcemu::zoo
