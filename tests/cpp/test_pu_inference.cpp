// Post-processing rules, pooling and whole-network inference: backends agree bit for bit, thread
// counts never change results, a WeightView replaces the weights the PU reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>

#include <pcg_random.hpp>

#include "common/errors.hpp"
#include "pu_model/inference.hpp"
#include "pu_model/postproc.hpp"
#include "formats/zoo.hpp"
#include "cpuid_features.hpp"
#include "guarded_buffer.hpp"
#include "random_layers.hpp"

using namespace aimcemu;

namespace {

Tensor8 random_image(const Shape3& shape, std::uint64_t seed) {
    pcg32 rng(seed);
    Tensor8 t{shape, std::vector<std::int8_t>(static_cast<std::size_t>(shape.size()))};
    for (auto& v : t.data) v = std::int8_t(int(rng(256)) - 128);
    return t;
}

using test_data::random_int8;

Layer gemm_layer(const std::string& name, LayerKind kind, int input, int k, int s, int p, int n, std::int64_t m,
                 pcg32& rng, int out_shift) {
    return test_data::random_gemm_layer(name, kind, input, Window::square(k, s, p), n, m, rng, 3, out_shift);
}

// A small network with every layer kind and both residual-align signs.
Network small_network() {
    pcg32 rng(17);
    Network net;
    net.name = "small";
    net.input_shape = {9, 11, 5};
    net.layers.push_back(gemm_layer("c0", LayerKind::Conv, -1, 3, 1, 1, 13, 3 * 3 * 5, rng, 9));
    net.layers[0].relu = true;
    net.layers.push_back(test_data::max_pool_layer("mp", 0, Window::square(3, 2, 1)));  // 5x6x13
    net.layers.push_back(gemm_layer("c1", LayerKind::Conv, 1, 5, 1, 2, 13, 5 * 5 * 13, rng, 10));
    net.layers[2].residual_input = 1;
    net.layers[2].residual_shift = -2;                                             // round-shift align
    net.layers[2].relu_after_residual = true;
    net.layers.push_back(gemm_layer("c2", LayerKind::Conv, 2, 1, 1, 0, 13, 13, rng, 6));
    Layer add;
    add.name = "add";
    add.kind = LayerKind::Add;
    add.input = 3;
    add.residual_input = 2;
    add.input_shift = 1;
    add.residual_shift = -1;
    add.relu = true;
    net.layers.push_back(add);
    net.layers.push_back(gemm_layer("c3", LayerKind::Conv, 4, 7, 2, 3, 70, 7 * 7 * 13, rng, 11));  // 3x3x70
    Layer ap;
    ap.name = "ap";
    ap.kind = LayerKind::AvgPool;
    ap.input = 5;
    ap.window = Window::square(3, 1, 1);
    ap.avg_mult = 57;
    ap.out_shift = 9;
    net.layers.push_back(ap);
    net.layers.push_back(gemm_layer("fc", LayerKind::Linear, 6, 1, 1, 0, 10, 3 * 3 * 70, rng, 12));
    net.resolve();
    return net;
}

void expect_same_outputs(const std::vector<Tensor8>& a, const std::vector<Tensor8>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].shape, b[i].shape) << what << " layer " << i;
        EXPECT_EQ(a[i].data, b[i].data) << what << " layer " << i;
    }
}

// ---- An independent direct reference for windows (no IM2COL, no shared helpers) ----

// The input pixel under tap (ky, kx) of output (oy, ox), or nullptr where the tap is padding.
const std::int8_t* tap(const Tensor8& x, const Window& w, int oy, int ox, int ky, int kx) {
    const int iy = oy * w.stride_h - w.pad_top + ky, ix = ox * w.stride_w - w.pad_left + kx;
    if (iy < 0 || iy >= x.shape.h || ix < 0 || ix >= x.shape.w) return nullptr;
    return &x.data[std::size_t((std::int64_t(iy) * x.shape.w + ix) * x.shape.c)];
}

// The requantisation of docs/arithmetic.md written out: round half up, saturate, optional ReLU.
std::int8_t requantize_direct(std::int64_t acc, int shift, bool relu) {
    std::int64_t y = shift > 0 ? (acc + (std::int64_t(1) << (shift - 1))) >> shift : acc;
    y = std::clamp<std::int64_t>(y, -128, 127);
    return std::int8_t(relu && y < 0 ? 0 : y);
}

// Output size straight from the formula (in + pad_a + pad_b - k) / s + 1.
Shape3 direct_out_shape(const Shape3& in, const Window& w, int c) {
    return {(in.h + w.pad_top + w.pad_bottom - w.kernel_h) / w.stride_h + 1,
            (in.w + w.pad_left + w.pad_right - w.kernel_w) / w.stride_w + 1, c};
}

Tensor8 direct_conv_layer(const Tensor8& x, const Layer& l) {
    const Window& w = l.window;
    Tensor8 y{direct_out_shape(x.shape, w, l.out_channels), {}};
    for (int oy = 0; oy < y.shape.h; ++oy)
        for (int ox = 0; ox < y.shape.w; ++ox)
            for (int n = 0; n < l.out_channels; ++n) {
                std::int64_t acc = std::int64_t(l.bias[std::size_t(n)]) << l.bias_shift;
                for (int ky = 0; ky < w.kernel_h; ++ky)
                    for (int kx = 0; kx < w.kernel_w; ++kx)
                        if (const std::int8_t* px = tap(x, w, oy, ox, ky, kx))
                            for (int c = 0; c < x.shape.c; ++c)
                                acc += std::int64_t(px[c]) *
                                       l.weights[std::size_t(((std::int64_t(n) * w.kernel_h + ky) * w.kernel_w + kx) *
                                                                 x.shape.c + c)];
                y.data.push_back(requantize_direct(acc, l.out_shift, l.relu));
            }
    return y;
}

Tensor8 direct_pool_layer(const Tensor8& x, const Layer& l) {
    const Window& w = l.window;
    Tensor8 y{direct_out_shape(x.shape, w, x.shape.c), {}};
    for (int oy = 0; oy < y.shape.h; ++oy)
        for (int ox = 0; ox < y.shape.w; ++ox)
            for (int c = 0; c < x.shape.c; ++c) {
                int best = -129;   // below every int8: a window of padding only would show it
                std::int64_t sum = 0;
                for (int ky = 0; ky < w.kernel_h; ++ky)
                    for (int kx = 0; kx < w.kernel_w; ++kx)
                        if (const std::int8_t* px = tap(x, w, oy, ox, ky, kx)) {
                            best = std::max(best, int(px[c]));
                            sum += px[c];
                        }
                y.data.push_back(l.kind == LayerKind::MaxPool ? std::int8_t(best)
                                                              : requantize_direct(l.avg_mult * sum, l.out_shift, false));
            }
    return y;
}

// Non-square convs (1x7, 7x1, 3x5 stride (1, 2) pads (0, 1, 2, 1)) and non-square pools, each
// with asymmetric padding.
Network nonsquare_network() {
    pcg32 rng(31);
    Network net;
    net.name = "nonsquare";
    net.input_shape = {12, 15, 3};
    const auto conv = [&](const std::string& name, int input, Window w, int n, int c_in, int shift) {
        Layer l = gemm_layer(name, LayerKind::Conv, input, 1, 1, 0, n, w.taps() * c_in, rng, shift);
        l.window = w;
        l.relu = true;
        return l;
    };
    net.layers.push_back(conv("c1x7", -1, Window{1, 7, 1, 1, 0, 0, 3, 3}, 8, 3, 8));          // 12x15x8
    net.layers.push_back(conv("c7x1", 0, Window{7, 1, 2, 1, 3, 2, 0, 0}, 9, 8, 10));           // 6x15x9
    net.layers.push_back(conv("c3x5", 1, Window{3, 5, 1, 2, 0, 1, 2, 1}, 70, 9, 10));          // 5x7x70
    net.layers.push_back(test_data::max_pool_layer("mp", 2, Window{2, 3, 1, 2, 1, 0, 0, 2}));  // 5x4x70
    Layer ap;
    ap.name = "ap";
    ap.kind = LayerKind::AvgPool;
    ap.input = 3;
    ap.window = Window{3, 2, 2, 1, 1, 1, 1, 0};                                                 // 3x4x70
    ap.avg_mult = 43;
    ap.out_shift = 8;
    net.layers.push_back(ap);
    net.resolve();
    return net;
}

}  // namespace

TEST(PostProc, NonSquarePoolsMatchTheDirectDefinition) {
    pcg32 rng(41);
    const Window windows[] = {Window{1, 3, 1, 2, 0, 0, 1, 2}, Window{3, 1, 2, 1, 2, 1, 0, 0},
                              Window{2, 5, 2, 3, 1, 0, 4, 3}, Window{4, 2, 1, 1, 3, 0, 1, 1}};
    int checked = 0;
    for (const Window& w : windows)
        for (const Shape3 in : {Shape3{5, 7, 3}, Shape3{2, 9, 1}, Shape3{6, 2, 17}}) {
            if (in.h + w.pad_top + w.pad_bottom < w.kernel_h || in.w + w.pad_left + w.pad_right < w.kernel_w) continue;
            ++checked;
            const Tensor8 x = random_image(in, rng());
            const WindowGeometry g{in, w};
            Layer l;
            l.window = w;
            l.kind = LayerKind::MaxPool;
            const Tensor8 expect_max = direct_pool_layer(x, l);
            ASSERT_EQ(g.out_h(), expect_max.shape.h);
            ASSERT_EQ(g.out_w(), expect_max.shape.w);
            std::vector<std::int8_t> y(expect_max.data.size());
            max_pool(x.data.data(), g, y.data());
            EXPECT_EQ(y, expect_max.data) << "max pool " << w.kernel_h << "x" << w.kernel_w;
            l.kind = LayerKind::AvgPool;
            l.avg_mult = 37;
            l.out_shift = 7;
            const Tensor8 expect_avg = direct_pool_layer(x, l);
            avg_pool(x.data.data(), g, 37, 7, y.data());
            EXPECT_EQ(y, expect_avg.data) << "avg pool " << w.kernel_h << "x" << w.kernel_w;
        }
    EXPECT_GE(checked, 9);
}

TEST(Inference, NonSquareNetworkMatchesTheDirectDefinitionOnEveryBackend) {
    const Network net = nonsquare_network();
    EXPECT_EQ(net.layers[2].gemm_m(), 3 * 5 * 9);
    const Tensor8 image = random_image(net.input_shape, 9);
    const auto reference = run_network(net, image, GemmBackend::Reference);
    // Each layer from its own input (the previous layer's reference output), by the definition.
    Tensor8 in = image;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        const Tensor8 expect = l.kind == LayerKind::Conv ? direct_conv_layer(in, l) : direct_pool_layer(in, l);
        ASSERT_EQ(reference[i].shape, expect.shape) << l.name;
        ASSERT_EQ(reference[i].shape, l.out_shape) << l.name;
        EXPECT_EQ(reference[i].data, expect.data) << l.name;
        in = reference[i];
    }
    expect_same_outputs(run_network(net, image, GemmBackend::Fast), reference, "fast");
    expect_same_outputs(run_network(net, image, GemmBackend::CycleSA), reference, "cycle SA");
    for (FastKernel k : kAllFastKernels) {
        if (!fast_kernel_available(k)) continue;
        RunOptions opt;
        opt.kernel = k;
        opt.threads = 2;
        expect_same_outputs(run_network(net, image, opt), reference, to_string(k));
    }
    // Not degenerate: the last conv's output has both zero and non-zero values.
    const auto& c3 = reference[2].data;
    EXPECT_GT(std::count(c3.begin(), c3.end(), std::int8_t(0)), 0);
    EXPECT_LT(std::count(c3.begin(), c3.end(), std::int8_t(0)), std::ptrdiff_t(c3.size()));
}

TEST(PostProc, RoundHalfUpOnBothSigns) {
    // x / 2: 1.5 -> 2, 0.5 -> 1, -0.5 -> 0, -1.5 -> -1, -2.5 -> -2 (half up, not half away from 0).
    EXPECT_EQ(round_shift(3, 1), 2);
    EXPECT_EQ(round_shift(1, 1), 1);
    EXPECT_EQ(round_shift(-1, 1), 0);
    EXPECT_EQ(round_shift(-3, 1), -1);
    EXPECT_EQ(round_shift(-5, 1), -2);
    EXPECT_EQ(round_shift(-6, 2), -1);   // -1.5 -> -1
    EXPECT_EQ(round_shift(-7, 2), -2);   // -1.75 -> -2
    EXPECT_EQ(round_shift(5, 0), 5);
    EXPECT_EQ(round_shift(std::int64_t(-2147483647) - 1, 31), -1);
    EXPECT_EQ(round_shift(2147483647, 31), 1);
}

TEST(PostProc, RequantizeSaturatesAndRelu) {
    const std::int32_t acc[] = {2147483647, -2147483647 - 1, 255, 256, -257, -256, 0, 129 * 4 - 2};
    std::int8_t y[8];
    requantize(acc, 8, 2, false, y);
    const std::int8_t expect[] = {127, -128, 64, 64, -64, -64, 0, 127};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], expect[i]) << i;
    requantize(acc, 8, 2, true, y);
    EXPECT_EQ(y[1], 0);
    EXPECT_EQ(y[4], 0);
    EXPECT_EQ(y[0], 127);
}

TEST(PostProc, VectorisedLoopsEqualTheInt64DefinitionForEveryShift) {
    // requantize and residual_add use an int32 form of round_shift; compare with the definition
    // on edge values around every power of two and on random values, for every shift and both ReLUs.
    pcg32 rng(12);
    std::vector<std::int32_t> acc = {-2147483647 - 1, -2147483647, 2147483647, 2147483646, 0, 1, -1};
    for (int k = 0; k < 31; ++k)
        for (int d = -1; d <= 1; ++d) {
            acc.push_back(std::int32_t((std::int64_t(1) << k) + d));
            acc.push_back(std::int32_t(-(std::int64_t(1) << k) + d));
        }
    for (int i = 0; i < 2000; ++i) acc.push_back(std::int32_t(rng()));
    std::vector<std::int8_t> y(acc.size());
    for (int s = 0; s <= 31; ++s)
        for (bool relu : {false, true}) {
            requantize(acc.data(), std::int64_t(acc.size()), s, relu, y.data());
            for (std::size_t i = 0; i < acc.size(); ++i) {
                std::int8_t expect = sat8(round_shift(acc[i], s));
                if (relu) expect = relu8(expect);
                ASSERT_EQ(y[i], expect) << "acc " << acc[i] << " shift " << s;
            }
        }
    for (int shift = -8; shift <= 8; ++shift)
        for (int a = -128; a < 128; a += 5)
            for (int r = -128; r < 128; ++r) {
                std::int8_t out = std::int8_t(a);
                const std::int8_t rr = std::int8_t(r);
                residual_add(&out, &rr, 1, shift, false);
                ASSERT_EQ(out, sat8(a + align(r, shift))) << a << " + align(" << r << ", " << shift << ")";
            }
}

TEST(PostProc, ResidualAddOfLongRunsEqualsTheDefinitionForEveryPairShiftAndTail) {
    // residual_add runs 32 values per step on AVX-512BW and AVX2 (the plain loop elsewhere):
    // every (y, r) pair of int8 values in one long run, for every alignment shift, both ReLUs, and
    // runs that end anywhere in a step (the masked or copied tail), starting at odd addresses.
    std::vector<std::int8_t> y0, r;
    for (int a = -128; a < 128; ++a)
        for (int b = -128; b < 128; ++b) {
            y0.push_back(std::int8_t(a));
            r.push_back(std::int8_t(b));
        }
    for (int shift = -8; shift <= 8; ++shift)
        for (bool relu : {false, true})
            for (const std::int64_t count : {std::int64_t(y0.size()), std::int64_t(y0.size()) - 33, std::int64_t(31),
                                              std::int64_t(1), std::int64_t(0)}) {
                const std::int64_t first = count == std::int64_t(y0.size()) ? 0 : 1;   // odd start otherwise
                std::vector<std::int8_t> y = y0;
                residual_add(y.data() + first, r.data() + first, count, shift, relu);
                for (std::int64_t i = 0; i < std::int64_t(y.size()); ++i) {
                    const bool inside = i >= first && i < first + count;
                    std::int8_t expect = inside ? sat8(y0[std::size_t(i)] + align(r[std::size_t(i)], shift)) : y0[std::size_t(i)];
                    if (inside && relu) expect = relu8(expect);
                    ASSERT_EQ(y[std::size_t(i)], expect) << "y " << int(y0[std::size_t(i)]) << " r " << int(r[std::size_t(i)])
                                                         << " shift " << shift << " relu " << relu << " count " << count;
                }
            }
}

TEST(PostProc, ResidualAddOfEveryVectorKernelEqualsThePortableOne) {
    // Each vector form the CPU has (avx2, avx512) against the portable loop: every count from 0
    // to 100 and long runs that end anywhere in a 32-value step, random values with every int8
    // extreme mixed in, every shift of the alignment range and the two past it on each side (those
    // take the portable loop in every form), both ReLUs.  y and r each end at a guard page, so a
    // vector step that reads or writes past the last value faults.
    std::vector<SimdKernel> kernels;
    for (SimdKernel k : {SimdKernel::Avx2, SimdKernel::Avx512})
        if (simd_kernel_available(k)) kernels.push_back(k);
    if (kernels.empty()) GTEST_SKIP() << "this CPU has no AVX2";
    pcg32 rng(17);
    std::vector<std::int64_t> counts;
    for (std::int64_t n = 0; n <= 100; ++n) counts.push_back(n);
    for (std::int64_t n = 4096; n < 4096 + 33; ++n) counts.push_back(n);
    const std::int8_t extremes[] = {-128, -127, -1, 0, 1, 126, 127};
    for (const std::int64_t count : counts) {
        std::vector<std::int8_t> y0(static_cast<std::size_t>(count)), r(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) {
            y0[std::size_t(i)] = rng(4) == 0 ? extremes[rng(7)] : std::int8_t(rng(256));
            r[std::size_t(i)] = rng(4) == 0 ? extremes[rng(7)] : std::int8_t(rng(256));
        }
        test_data::GuardedBuffer r_guarded(static_cast<std::size_t>(count));
        std::copy(r.begin(), r.end(), r_guarded.int8());
        for (int shift = -10; shift <= 10; ++shift)
            for (bool relu : {false, true}) {
                std::vector<std::int8_t> expect = y0;
                detail::residual_add_with(SimdKernel::Portable, expect.data(), r.data(), count, shift, relu);
                for (SimdKernel kernel : kernels) {
                    test_data::GuardedBuffer y(static_cast<std::size_t>(count));
                    std::copy(y0.begin(), y0.end(), y.int8());
                    detail::residual_add_with(kernel, y.int8(), r_guarded.int8(), count, shift, relu);
                    ASSERT_TRUE(std::equal(expect.begin(), expect.end(), y.int8()))
                        << to_string(kernel) << ", count " << count << ", shift " << shift << ", relu " << relu;
                }
            }
    }
}

TEST(PostProc, Im2colAndResidualAddTakeTheWidestVectorPathTheCpuHas) {
    // Both have AVX-512BW, AVX2 and portable forms that write the same bytes, so every other test
    // stays green when a vector path drops out (a broken feature check, a wrong order of
    // preference): this one compares the kernels their dispatch chose with CPUID and XCR0 read
    // here.  avx512 > avx2 > portable.
    const test_cpu::VectorFeatures cpu = test_cpu::vector_features();
    const bool avx512bw = cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
    const SimdKernel widest = avx512bw ? SimdKernel::Avx512 : cpu.avx2 ? SimdKernel::Avx2 : SimdKernel::Portable;
    const std::string cpuid = std::string("CPUID says AVX-512F/BW/VL ") + (avx512bw ? "present" : "absent") +
                              ", AVX2 " + (cpu.avx2 ? "present" : "absent");
    EXPECT_EQ(to_string(im2col_kernel()), std::string(to_string(widest))) << cpuid;
    EXPECT_EQ(to_string(residual_add_kernel()), std::string(to_string(widest))) << cpuid;
    if (cpu.avx2)   // what the task that added the AVX2 forms is about: a Zen 3 must not fall back
        EXPECT_NE(im2col_kernel(), SimdKernel::Portable) << cpuid;
    for (SimdKernel k : {SimdKernel::Portable, SimdKernel::Avx2, SimdKernel::Avx512})
        EXPECT_EQ(simd_kernel_available(k), k == SimdKernel::Portable || (k == SimdKernel::Avx2 && cpu.avx2) ||
                                                (k == SimdKernel::Avx512 && avx512bw))
            << to_string(k) << ", " << cpuid;
    std::cout << "[ path     ] im2col " << to_string(im2col_kernel()) << ", residual add "
              << to_string(residual_add_kernel()) << "\n";
}

TEST(PostProc, AKernelTheCpuLacksIsRefusedByNameAndWritesNothing) {
    // The *_with entry points run the kernel a test names; one the CPU lacks would die of an
    // illegal instruction, so it is refused before a byte is touched (on a CPU with every form
    // this checks only that the available ones run).
    const WindowGeometry g{{4, 5, 3}, Window{3, 3, 1, 1, 1, 1, 1, 1}};
    const std::vector<std::int8_t> x(std::size_t(g.in.size()), 7);
    for (SimdKernel k : {SimdKernel::Portable, SimdKernel::Avx2, SimdKernel::Avx512}) {
        std::vector<std::uint8_t> operand(std::size_t(g.p() * g.m()), 0xAB);
        std::vector<std::uint8_t> padded(std::size_t(padded_input_bytes(g)), 0xAB);
        std::int8_t y[3] = {1, 2, 3};
        const std::int8_t r[3] = {4, 5, 6};
        const auto im2col_call = [&] { detail::im2col_pixels_into_with(k, x.data(), g, 0, g.m(), operand.data(), 0, g.p()); };
        const auto pad_call = [&] { detail::pad_input_into_with(k, x.data(), g, 1, 0, padded.data()); };
        const auto residual_call = [&] { detail::residual_add_with(k, y, r, 3, 0, false); };
        if (simd_kernel_available(k)) {
            EXPECT_NO_THROW(im2col_call()) << to_string(k);
            EXPECT_NO_THROW(pad_call()) << to_string(k);
            EXPECT_NO_THROW(residual_call()) << to_string(k);
            continue;
        }
        for (const auto& call : {std::function<void()>(im2col_call), std::function<void()>(pad_call),
                                 std::function<void()>(residual_call)}) {
            try {
                call();
                ADD_FAILURE() << to_string(k) << " ran on a CPU without it";
            } catch (const std::invalid_argument& e) {
                EXPECT_NE(std::string(e.what()).find(std::string("'") + to_string(k) + "' is not available"),
                          std::string::npos) << e.what();
            }
        }
        EXPECT_TRUE(std::all_of(operand.begin(), operand.end(), [](std::uint8_t b) { return b == 0xAB; }));
        EXPECT_TRUE(std::all_of(padded.begin(), padded.end(), [](std::uint8_t b) { return b == 0xAB; }));
        EXPECT_EQ(y[0], 1);
        EXPECT_EQ(y[2], 3);
    }
}

TEST(PostProc, ResidualAlignBothSignsAndSaturation) {
    EXPECT_EQ(align(5, 2), 20);
    EXPECT_EQ(align(-5, 2), -20);
    EXPECT_EQ(align(5, -1), 3);     // 2.5 -> 3
    EXPECT_EQ(align(-5, -1), -2);   // -2.5 -> -2
    EXPECT_EQ(align(-128, -8), 0);  // -128/256 = -0.5 -> round half up: 0
    std::int8_t y[] = {100, -100, 10, -10};
    const std::int8_t r[] = {64, -64, -128, 127};
    residual_add(y, r, 4, 1, false);   // r << 1
    EXPECT_EQ(y[0], 127);
    EXPECT_EQ(y[1], -128);
    EXPECT_EQ(y[2], -128);   // 10 - 256 saturates
    EXPECT_EQ(y[3], 127);    // -10 + 254 saturates
    std::int8_t z[] = {10, 10};
    const std::int8_t s[] = {-21, -23};
    residual_add(z, s, 2, -1, true);   // -21/2 = -10.5 -> -10; -23/2 = -11.5 -> -11
    EXPECT_EQ(z[0], 0);
    EXPECT_EQ(z[1], 0);
    std::int8_t u[] = {10, 10};
    residual_add(u, s, 2, -1, false);
    EXPECT_EQ(u[0], 0);
    EXPECT_EQ(u[1], -1);
}

TEST(PostProc, MaxPoolPaddingNeverWins) {
    // All-negative 2x2x1 input, 3x3 window with pad 1: every output is the max of real pixels.
    const std::int8_t x[] = {-5, -7, -9, -128};
    std::int8_t y[4];
    max_pool(x, WindowGeometry{{2, 2, 1}, Window::square(3, 1, 1)}, y);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], -5);
}

TEST(PostProc, AvgPoolIsAScaledWindowSumWithZeroPadding) {
    // 2x2x2 input, 3x3 window pad 1: every window covers the whole input (and 5 padding zeros).
    const std::int8_t x[] = {1, -10, 2, -20, 3, -30, 4, -41};
    std::int8_t y[8];
    avg_pool(x, WindowGeometry{{2, 2, 2}, Window::square(3, 1, 1)}, 57, 9, y);   // 57/512 ~ 1/9
    // channel 0: 57 * 10 = 570 -> (570 + 256) >> 9 = 1; channel 1: 57 * -101 = -5757 -> -11.24 -> -11
    for (int p = 0; p < 4; ++p) {
        EXPECT_EQ(y[2 * p], 1);
        EXPECT_EQ(y[2 * p + 1], -11);
    }
    EXPECT_THROW(avg_pool(x, WindowGeometry{{2, 2, 2}, Window::square(3, 1, 3)}, 57, 9, y), FormatError);
}

TEST(Inference, AllBackendsAgreeOnASmallNetworkWithEveryLayerKind) {
    const Network net = small_network();
    const Tensor8 image = random_image(net.input_shape, 5);
    const auto reference = run_network(net, image, GemmBackend::Reference);
    expect_same_outputs(run_network(net, image, GemmBackend::Fast), reference, "fast");
    expect_same_outputs(run_network(net, image, GemmBackend::CycleSA), reference, "cycle SA");
    for (FastKernel k : kAllFastKernels) {
        if (!fast_kernel_available(k)) continue;
        RunOptions opt;
        opt.kernel = k;
        opt.threads = 2;
        expect_same_outputs(run_network(net, image, opt), reference, to_string(k));
    }
    // The outputs are not degenerate: every layer has both zero and non-zero values somewhere.
    for (const auto& t : reference) {
        int nonzero = 0;
        for (auto v : t.data) nonzero += v != 0;
        EXPECT_GT(nonzero, 0);
    }
}

TEST(Inference, ResNet18FastEqualsReferenceAtReducedSize) {
    const Network net = zoo::resnet18(3, 32, 10);
    const Tensor8 image = random_image(net.input_shape, 8);
    const auto reference = run_network(net, image, GemmBackend::Reference);
    expect_same_outputs(run_network(net, image, GemmBackend::Fast), reference, "resnet18 fast");
    ASSERT_EQ(reference.back().shape, (Shape3{1, 1, 10}));
}

TEST(Inference, BatchResultsDoNotDependOnThreadCount) {
    const Network net = zoo::resnet18(4, 32, 10);
    std::vector<Tensor8> images;
    for (int i = 0; i < 3; ++i) images.push_back(random_image(net.input_shape, 100 + i));
    RunOptions opt;
    opt.threads = 1;
    const auto serial = run_network_batch(net, images, opt);
    for (int threads : {2, 3, 0}) {
        opt.threads = threads;
        const auto parallel = run_network_batch(net, images, opt);
        for (std::size_t i = 0; i < images.size(); ++i)
            expect_same_outputs(parallel[i], serial[i], std::to_string(threads) + " threads image " + std::to_string(i));
    }
    // A batch of one spends the threads inside the GEMM instead: same bytes.
    opt.threads = 2;
    expect_same_outputs(run_network_batch(net, {images[1]}, opt)[0], serial[1], "single image, 2 GEMM threads");
}

TEST(Inference, MicroBatchesThreadsAndKeptLayersNeverChangeAByte) {
    // Each image alone, one thread, one image per GEMM is the reference; then micro-batches of
    // 1, 2, 3 and 8 images (several per GEMM, 7x7 layers stacked) on 1-3 threads, and a run that
    // keeps only two layers (the others come back as shapes without data).
    const Network net = zoo::resnet18(4, 32, 10);
    std::vector<Tensor8> images;
    for (int i = 0; i < 7; ++i) images.push_back(random_image(net.input_shape, 300 + i));
    RunOptions one;
    one.threads = 1;
    one.batch = 1;
    std::vector<std::vector<Tensor8>> alone;
    for (const auto& image : images) alone.push_back(run_network(net, image, one));
    for (int batch : {1, 2, 3, 8, 0})
        for (int threads : {1, 2, 3}) {
            RunOptions opt;
            opt.batch = batch;
            opt.threads = threads;
            const auto together = run_network_batch(net, images, opt);
            for (std::size_t i = 0; i < images.size(); ++i)
                expect_same_outputs(together[i], alone[i], "batch " + std::to_string(batch) + ", " +
                                                               std::to_string(threads) + " threads, image " +
                                                               std::to_string(i));
        }
    RunOptions keep;
    keep.threads = 2;
    keep.keep.assign(net.layers.size(), false);
    keep.keep[3] = keep.keep.back() = true;
    const auto kept = run_network_batch(net, images, keep);
    for (std::size_t i = 0; i < images.size(); ++i)
        for (std::size_t l = 0; l < net.layers.size(); ++l) {
            EXPECT_EQ(kept[i][l].shape, alone[i][l].shape);
            if (keep.keep[l])
                EXPECT_EQ(kept[i][l].data, alone[i][l].data) << "layer " << l;
            else
                EXPECT_TRUE(kept[i][l].data.empty()) << "layer " << l << " was not asked for";
        }
    keep.keep.pop_back();
    EXPECT_THROW(run_network_batch(net, images, keep), FormatError);
}

// A copy of `net` with layer 2's weights redrawn from `seed`, and the WeightView that gives the PU
// those weights for layer 2 and the network's own for every other layer.
struct LayerTwoRedrawn : WeightView {
    Network noisy;
    LayerTwoRedrawn(const Network& net, std::uint64_t seed) : noisy(net) {
        pcg32 rng(seed);
        noisy.layers[2].weights = random_int8(rng, std::int64_t(net.layers[2].weights.size()));
    }
    const std::int8_t* weights(int i) const override { return i == 2 ? noisy.layers[2].weights.data() : nullptr; }
};

TEST(Inference, PackedNetworkServesEveryRunAndViewedLayersArePackedPerRun) {
    const Network net = small_network();
    const LayerTwoRedrawn view(net, 78);
    const Network& noisy = view.noisy;
    const PackedNetwork packed(net);
    EXPECT_GT(packed.bytes(), net.layers[0].weights.size());
    const Tensor8 image = random_image(net.input_shape, 9);
    RunOptions opt;
    opt.packed = &packed;
    expect_same_outputs(run_network(net, image, opt), run_network(net, image, GemmBackend::Reference), "packed");
    opt.weights = &view;
    expect_same_outputs(run_network(net, image, opt), run_network(noisy, image, GemmBackend::Reference),
                        "packed + view");
    const PackedNetwork other(zoo::resnet18(4, 32, 10));
    opt.packed = &other;
    EXPECT_THROW(run_network(net, image, opt), FormatError);
}

TEST(Inference, WeightViewReplacesTheWeightsThePuReads) {
    const Network net = small_network();
    const LayerTwoRedrawn view(net, 77);
    const Network& noisy = view.noisy;

    const Tensor8 image = random_image(net.input_shape, 6);
    const auto expect = run_network(noisy, image, GemmBackend::Reference);
    const auto clean = run_network(net, image, GemmBackend::Reference);
    expect_same_outputs(run_network(net, image, GemmBackend::Fast, &view), expect, "fast + view");
    expect_same_outputs(run_network(net, image, GemmBackend::Reference, &view), expect, "reference + view");
    EXPECT_EQ(run_network(net, image, GemmBackend::Fast, &view)[1].data, clean[1].data);   // before layer 2
    EXPECT_NE(expect[2].data, clean[2].data);
}

TEST(Inference, WrongInputShapeIsAFormatError) {
    const Network net = small_network();
    Tensor8 image = random_image({9, 11, 4}, 1);
    EXPECT_THROW(run_network(net, image, GemmBackend::Fast), FormatError);
    Network unresolved;
    unresolved.input_shape = {1, 1, 1};
    unresolved.layers.push_back(Layer{});
    EXPECT_THROW(run_network(unresolved, random_image({1, 1, 1}, 1), GemmBackend::Fast), FormatError);
}

TEST(Inference, PointwiseConvOnAlignedDepthReadsTheInputInPlace) {
    // A stride-1 1x1 conv whose depth is a multiple of 64 skips IM2COL on the kernels that take
    // plain int8 rows (AMX, oneDNN); P = 35 leaves a partial tile of rows at the end.
    pcg32 rng(31);
    Network net;
    net.name = "pointwise";
    net.input_shape = {5, 7, 128};
    net.layers.push_back(gemm_layer("pw", LayerKind::Conv, -1, 1, 1, 0, 70, 128, rng, 10));
    net.resolve();
    const Tensor8 image = random_image(net.input_shape, 2);
    const auto reference = run_network(net, image, GemmBackend::Reference);
    for (FastKernel k : kAllFastKernels) {
        if (!fast_kernel_available(k)) continue;
        RunOptions opt;
        opt.kernel = k;
        expect_same_outputs(run_network(net, image, opt), reference, to_string(k));
    }
}
