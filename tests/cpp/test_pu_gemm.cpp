// IM2COL and the three GEMM paths (reference, fast kernels, cycle-level SA) against a direct
// convolution written here from the definition, on randomized layer shapes.
#include <gtest/gtest.h>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <pcg_random.hpp>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"
#include "pu_model/sa_cycle.hpp"
#include "guarded_buffer.hpp"

using namespace aimcemu;

namespace {

std::vector<std::int8_t> random_int8(pcg32& rng, std::int64_t count) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = std::int8_t(int(rng(256)) - 128);
    return v;
}

// The P x M operand `x` laid out as the fast kernel reads it for `packed`: rows of
// x_row_stride() bytes, each value XORed with x_xor_mask(), the row's padding the mask itself.
std::vector<std::uint8_t> operand_as_packed_reads(const PackedWeights& packed, const std::vector<std::int8_t>& x,
                                                  std::int64_t p, std::int64_t m) {
    const std::int64_t stride = packed.x_row_stride();
    std::vector<std::uint8_t> operand(std::size_t(p * stride), packed.x_xor_mask());
    for (std::int64_t row = 0; row < p; ++row)
        for (std::int64_t col = 0; col < m; ++col)
            operand[std::size_t(row * stride + col)] = std::uint8_t(x[std::size_t(row * m + col)]) ^ packed.x_xor_mask();
    return operand;
}

// acc[p][n] of a convolution straight from its definition on the HWC input (no IM2COL).
std::vector<std::int32_t> direct_conv(const std::vector<std::int8_t>& x, const WindowGeometry& g,
                                      const std::vector<std::int8_t>& w, const std::vector<std::int8_t>& bias,
                                      int bias_shift, int n) {
    const Window& win = g.window;
    const int oh = g.out_h(), ow = g.out_w(), kh = win.kernel_h, kw = win.kernel_w, c = g.in.c;
    std::vector<std::int32_t> acc(std::size_t(std::int64_t(oh) * ow * n));
    for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox)
            for (int o = 0; o < n; ++o) {
                std::int64_t sum = std::int64_t(bias[std::size_t(o)]) << bias_shift;
                for (int ky = 0; ky < kh; ++ky)
                    for (int kx = 0; kx < kw; ++kx)
                        for (int ch = 0; ch < c; ++ch) {
                            const int iy = oy * win.stride_h - win.pad_top + ky;
                            const int ix = ox * win.stride_w - win.pad_left + kx;
                            if (iy < 0 || iy >= g.in.h || ix < 0 || ix >= g.in.w) continue;
                            sum += std::int64_t(w[std::size_t(((std::int64_t(o) * kh + ky) * kw + kx) * c + ch)]) *
                                   x[std::size_t((std::int64_t(iy) * g.in.w + ix) * c + ch)];
                        }
                acc[std::size_t((std::int64_t(oy) * ow + ox) * n + o)] = std::int32_t(sum);
            }
    return acc;
}

// Strides 1..3 and four independent pads below the kernel's extent, drawn in that order (the
// kernel sizes already set): the random geometries of the tests below share these draws.
void random_strides_and_pads(Window& w, pcg32& rng) {
    w.stride_h = 1 + int(rng(3));
    w.stride_w = 1 + int(rng(3));
    w.pad_top = int(rng(std::uint32_t(w.kernel_h)));
    w.pad_bottom = int(rng(std::uint32_t(w.kernel_h)));
    w.pad_left = int(rng(std::uint32_t(w.kernel_w)));
    w.pad_right = int(rng(std::uint32_t(w.kernel_w)));
}

struct ConvCase {
    WindowGeometry g;
    int n;
    int bias_shift;
};

// Randomized shapes covering k in {1,3,5,7}, stride 1-2, pad 0..min(3, k-1), channel counts that
// are not multiples of 4, 8, 16 or 64, and depths up to thousands (hundreds of SA rounds).
std::vector<ConvCase> random_cases(int count, std::uint64_t seed) {
    pcg32 rng(seed);
    const int kernels[] = {1, 3, 5, 7};
    const int channels[] = {1, 3, 5, 13, 67, 70};
    const int outputs[] = {1, 7, 10, 17, 65, 70, 130};
    std::vector<ConvCase> cases;
    for (int i = 0; i < count; ++i) {
        ConvCase c;
        const int kernel = kernels[rng(4)];
        const int stride = 1 + int(rng(2));
        const int pad = int(rng(std::uint32_t(std::min(3, kernel - 1) + 1)));
        c.g.window = Window::square(kernel, stride, pad);
        c.g.in = {kernel + int(rng(6)), kernel + int(rng(6)), channels[rng(6)]};
        c.n = outputs[rng(7)];
        c.bias_shift = int(rng(12));
        cases.push_back(c);
    }
    return cases;
}

// Non-square windows: the named shapes of issue 14 (1x7, 7x1, 3x5 with stride (1, 2) and pads
// top/bottom/left/right (0, 1, 2, 1)), then random kernels, strides and four independent pads per
// case, including inputs exactly as large as the padded window.
std::vector<ConvCase> nonsquare_cases(int count, std::uint64_t seed) {
    std::vector<ConvCase> cases = {
        {{{9, 11, 5}, Window{1, 7, 1, 1, 0, 0, 3, 3}}, 7, 2},
        {{{11, 9, 3}, Window{7, 1, 1, 1, 3, 3, 0, 0}}, 17, 0},
        {{{8, 10, 13}, Window{3, 5, 1, 2, 0, 1, 2, 1}}, 10, 5},
        {{{3, 5, 67}, Window{3, 5, 2, 1, 0, 0, 0, 0}}, 65, 3},
    };
    pcg32 rng(seed);
    const int kernels[] = {1, 2, 3, 5, 7};
    const int channels[] = {1, 3, 5, 13, 67, 70};
    const int outputs[] = {1, 7, 10, 17, 65, 70, 130};
    for (int i = 0; i < count; ++i) {
        ConvCase c;
        Window& w = c.g.window;
        w.kernel_h = kernels[rng(5)];
        w.kernel_w = kernels[rng(5)];
        random_strides_and_pads(w, rng);
        // The smallest input the window fits in, plus 0..5.
        c.g.in = {std::max(1, w.kernel_h - w.pad_top - w.pad_bottom) + int(rng(6)),
                  std::max(1, w.kernel_w - w.pad_left - w.pad_right) + int(rng(6)), channels[rng(6)]};
        c.n = outputs[rng(7)];
        c.bias_shift = int(rng(12));
        cases.push_back(c);
    }
    return cases;
}

std::string describe(const ConvCase& c) {
    const Window& w = c.g.window;
    return "in " + std::to_string(c.g.in.h) + "x" + std::to_string(c.g.in.w) + "x" + std::to_string(c.g.in.c) +
           " k" + std::to_string(w.kernel_h) + "x" + std::to_string(w.kernel_w) + " s" + std::to_string(w.stride_h) +
           "," + std::to_string(w.stride_w) + " p" + std::to_string(w.pad_top) + "," + std::to_string(w.pad_bottom) +
           "," + std::to_string(w.pad_left) + "," + std::to_string(w.pad_right) + " N" + std::to_string(c.n) +
           " bias_shift " + std::to_string(c.bias_shift);
}

std::vector<FastKernel> available_fast_kernels() {
    std::vector<FastKernel> kernels;
    for (FastKernel k : kAllFastKernels)
        if (fast_kernel_available(k)) kernels.push_back(k);
    return kernels;
}

}  // namespace

// IM2COL of one case against its definition: patch row p = (oy, ox), column (ky, kx, c).
void check_im2col_definition(const ConvCase& c, pcg32& rng) {
    {
        const auto x = random_int8(rng, c.g.in.size());
        const auto patches = im2col(x.data(), c.g);
        const std::int64_t m = c.g.m(), stride = m + 5;
        std::vector<std::uint8_t> offset(std::size_t(c.g.p() * stride));
        im2col_into(x.data(), c.g, 0x80, stride, offset.data());
        const Window& win = c.g.window;
        const int ow = c.g.out_w(), kw = win.kernel_w, ch = c.g.in.c;
        for (std::int64_t p = 0; p < c.g.p(); ++p)
            for (std::int64_t col = 0; col < m; ++col) {
                const int oy = int(p / ow), ox = int(p % ow);
                const int ky = int(col / (kw * ch)), kx = int(col / ch % kw), cc = int(col % ch);
                const int iy = oy * win.stride_h - win.pad_top + ky, ix = ox * win.stride_w - win.pad_left + kx;
                const bool inside = iy >= 0 && iy < c.g.in.h && ix >= 0 && ix < c.g.in.w;
                const std::int8_t expect = inside ? x[std::size_t((std::int64_t(iy) * c.g.in.w + ix) * ch + cc)] : 0;
                ASSERT_EQ(patches[std::size_t(p * m + col)], expect) << describe(c);
                ASSERT_EQ(offset[std::size_t(p * stride + col)], std::uint8_t(expect + 128)) << describe(c);
            }
    }
}

TEST(Im2col, MatchesTheDefinitionIncludingPaddingAndXorOffset) {
    pcg32 rng(7);
    for (const auto& c : random_cases(40, 11)) check_im2col_definition(c, rng);
}

TEST(Im2col, NonSquareWindowsMatchTheDefinition) {
    pcg32 rng(8);
    for (const auto& c : nonsquare_cases(60, 12)) {
        EXPECT_EQ(c.g.m(), std::int64_t(c.g.window.kernel_h) * c.g.window.kernel_w * c.g.in.c) << describe(c);
        check_im2col_definition(c, rng);
    }
}

// The vector path of whichever kernel this CPU runs (AVX-512 moves for pixels whose window lies
// inside the input: one masked ymm or zmm per kernel row up to 64 bytes, whole zmm and a masked
// rest beyond; AVX2: whole 8/16/32-byte pieces where the row has room, exact pieces elsewhere;
// on a CPU with neither every case runs the generic path) against the definition: kernel rows of
// 1..65 bytes around the 32- and 64-byte limits, 127-129 and 192 bytes (whole zmm with and
// without a rest: the 64-channel 3x3 window), the 3-channel 7x7/2 stem window, rows padded by 0,
// 3, 64 and 70 bytes, a kernel wider than the input with no left pad (no pixel is inside), 1 and
// 2 threads.
TEST(Im2col, MaskedMovePathMatchesTheDefinitionAtItsLimits) {
    struct Case {
        WindowGeometry g;
        const char* what;
    };
    const Case cases[] = {
        {{{23, 23, 3}, Window::square(7, 2, 3)}, "stem 7x7/2/3, 21-byte rows"},
        {{{9, 12, 1}, Window::square(1, 1, 0)}, "1-byte rows"},
        {{{6, 7, 31}, Window::square(1, 1, 0)}, "31-byte rows"},
        {{{6, 7, 32}, Window::square(1, 2, 0)}, "32-byte rows"},
        {{{6, 7, 11}, Window::square(3, 1, 1)}, "33-byte rows"},
        {{{6, 7, 21}, Window::square(3, 2, 2)}, "63-byte rows"},
        {{{8, 9, 64}, Window::square(1, 1, 0)}, "64-byte rows"},
        {{{6, 7, 13}, Window::square(5, 1, 2)}, "65-byte rows"},
        {{{7, 8, 127}, Window::square(1, 1, 0)}, "127-byte rows"},
        {{{7, 8, 128}, Window::square(1, 2, 0)}, "128-byte rows"},
        {{{6, 7, 43}, Window::square(3, 2, 1)}, "129-byte rows, stride 2"},
        {{{6, 7, 64}, Window::square(3, 1, 1)}, "192-byte rows (3x3 over 64 channels)"},
        {{{9, 9, 64}, Window::square(3, 2, 1)}, "192-byte rows, stride 2"},
        {{{5, 2, 3}, Window{3, 3, 1, 2, 1, 1, 0, 1}}, "kernel wider than the input, no left pad"},
        {{{8, 11, 5}, Window{3, 5, 2, 3, 0, 2, 4, 0}}, "non-square, stride 3, pad left 4 only"},
    };
    pcg32 rng(23);
    for (const Case& c : cases) {
        c.g.validate("test");
        const auto x = random_int8(rng, c.g.in.size());
        const std::int64_t m = c.g.m(), p = c.g.p();
        const Window& win = c.g.window;
        const int ow = c.g.out_w(), kw = win.kernel_w, ch = c.g.in.c;
        for (const std::int64_t pad : {0, 3, 64, 70})
            for (const std::uint8_t mask : {std::uint8_t(0), std::uint8_t(0x80)})
                for (const int threads : {1, 2}) {
                    const std::int64_t stride = m + pad;
                    std::vector<std::uint8_t> got(std::size_t(p * stride), 0x5A);
                    im2col_into(x.data(), c.g, mask, stride, got.data(), threads);
                    for (std::int64_t row = 0; row < p; ++row)
                        for (std::int64_t col = 0; col < stride; ++col) {
                            std::uint8_t expect = mask;
                            if (col < m) {
                                const int oy = int(row / ow), ox = int(row % ow);
                                const int ky = int(col / (kw * ch)), kx = int(col / ch % kw), cc = int(col % ch);
                                const int iy = oy * win.stride_h - win.pad_top + ky;
                                const int ix = ox * win.stride_w - win.pad_left + kx;
                                if (iy >= 0 && iy < c.g.in.h && ix >= 0 && ix < c.g.in.w)
                                    expect ^= std::uint8_t(x[std::size_t((std::int64_t(iy) * c.g.in.w + ix) * ch + cc)]);
                            }
                            ASSERT_EQ(got[std::size_t(row * stride + col)], expect)
                                << c.what << ", row padding " << pad << ", mask " << int(mask) << ", " << threads
                                << " threads, pixel " << row << ", byte " << col;
                        }
                }
    }
}

// im2col_pixels_into over any cut of a batch's pixels (partial output rows, ranges that cross
// from one image into the next, single pixels) writes exactly the bytes im2col_into writes for
// each image.
TEST(Im2col, PixelRangesOfABatchEqualTheWholeOperand) {
    const WindowGeometry shapes[] = {{{23, 23, 3}, Window::square(7, 2, 3)},
                                     {{9, 10, 13}, Window::square(3, 1, 1)},
                                     {{7, 6, 64}, Window::square(1, 1, 0)},
                                     {{8, 11, 5}, Window{3, 5, 2, 3, 0, 2, 4, 0}}};
    pcg32 rng(31);
    for (const WindowGeometry& g : shapes) {
        const int images = 3;
        const std::int64_t p = g.p(), stride = g.m() + 3;
        const auto x = random_int8(rng, g.in.size() * images);
        std::vector<std::uint8_t> whole(std::size_t(images * p * stride));
        for (int b = 0; b < images; ++b)
            im2col_into(x.data() + b * g.in.size(), g, 0x80, stride, whole.data() + b * p * stride);
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<std::uint8_t> pieces(whole.size(), 0x5A);
            for (std::int64_t begin = 0; begin < images * p;) {
                const std::int64_t end = std::min(images * p, begin + 1 + std::int64_t(rng(std::uint32_t(p + p / 2))));
                im2col_pixels_into(x.data(), g, 0x80, stride, pieces.data() + begin * stride, begin, end);
                begin = end;
            }
            ASSERT_EQ(pieces, whole) << "in " << g.in.h << "x" << g.in.w << "x" << g.in.c << ", trial " << trial;
        }
    }
}

namespace {

// The vector kernels of IM2COL (avx2, avx512) this CPU has; the portable one is their reference.
std::vector<SimdKernel> vector_simd_kernels() {
    std::vector<SimdKernel> kernels;
    for (SimdKernel k : {SimdKernel::Avx2, SimdKernel::Avx512})
        if (simd_kernel_available(k)) kernels.push_back(k);
    return kernels;
}

// A random window geometry: kernel 1..7 per axis, stride 1..3, any pads, the smallest input the
// window fits plus 0..9 (odd and even widths), channels 1..130.
WindowGeometry random_window_geometry(pcg32& rng) {
    WindowGeometry g;
    Window& w = g.window;
    w.kernel_h = 1 + int(rng(7));
    w.kernel_w = 1 + int(rng(7));
    random_strides_and_pads(w, rng);
    g.in = {std::max(1, w.kernel_h - w.pad_top - w.pad_bottom) + int(rng(10)),
            std::max(1, w.kernel_w - w.pad_left - w.pad_right) + int(rng(10)), 1 + int(rng(130))};
    return g;
}

std::string describe(const WindowGeometry& g) {
    const Window& w = g.window;
    return "in " + std::to_string(g.in.h) + "x" + std::to_string(g.in.w) + "x" + std::to_string(g.in.c) + " k" +
           std::to_string(w.kernel_h) + "x" + std::to_string(w.kernel_w) + " s" + std::to_string(w.stride_h) + "," +
           std::to_string(w.stride_w) + " p" + std::to_string(w.pad_top) + "," + std::to_string(w.pad_bottom) + "," +
           std::to_string(w.pad_left) + "," + std::to_string(w.pad_right);
}

// Rows [p_begin, p_end) of `images` images' operand with `kernel` and with the portable kernel,
// compared byte for byte.  The input ends at a guard page (a load past the last image's last byte
// faults) and so does the kernel's output (a store past the last row faults); both outputs start
// as 0x5A, so a byte either kernel leaves unwritten shows too.
void expect_im2col_kernel_equals_portable(SimdKernel kernel, const WindowGeometry& g, int images, std::uint8_t mask,
                                          std::int64_t row_stride, std::int64_t p_begin, std::int64_t p_end,
                                          pcg32& rng) {
    test_data::GuardedBuffer x(std::size_t(g.in.size() * images));
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = std::uint8_t(rng(256));
    const std::size_t bytes = std::size_t((p_end - p_begin) * row_stride);
    std::vector<std::uint8_t> expect(bytes, 0x5A);
    detail::im2col_pixels_into_with(SimdKernel::Portable, x.int8(), g, mask, row_stride, expect.data(), p_begin, p_end);
    test_data::GuardedBuffer got(bytes, 0x5A);
    detail::im2col_pixels_into_with(kernel, x.int8(), g, mask, row_stride, got.data(), p_begin, p_end);
    const auto first_diff = std::mismatch(expect.begin(), expect.end(), got.data()).first - expect.begin();
    ASSERT_EQ(first_diff, std::ptrdiff_t(bytes))
        << to_string(kernel) << " differs from portable at row " << p_begin + first_diff / row_stride << ", byte "
        << first_diff % row_stride << ": " << describe(g) << ", " << images << " images, mask " << int(mask)
        << ", row stride " << row_stride << " (m " << g.m() << "), rows " << p_begin << ".." << p_end;
}

}  // namespace

// Every vector kernel of IM2COL the CPU has writes the bytes of the portable kernel: the ResNet
// stem (7x7x3/2, 21-byte runs), a 56x56x64 3x3 layer (192-byte runs), 1x1 windows whose last
// pixel is the input's last bytes, then 400 random geometries (channels 1..130, kernels 1..7,
// strides 1..3, any pads, odd widths), each with both masks, a random row padding (0 to 35 bytes:
// whether a whole 32-byte piece fits the last run), the whole operand of 1 or 2 images and a random
// cut of it.  Inputs end at a guard page, so an over-long load at the last pixel faults.
TEST(Im2col, EveryVectorKernelWritesThePortableBytesOverRandomGeometries) {
    const auto kernels = vector_simd_kernels();
    if (kernels.empty()) GTEST_SKIP() << "this CPU has no AVX2";
    std::vector<WindowGeometry> shapes = {
        {{23, 23, 3}, Window::square(7, 2, 3)},    // stem, odd width
        {{29, 29, 3}, Window::square(7, 2, 0)},    // stem without padding: the last window ends the input
        {{56, 56, 64}, Window::square(3, 1, 1)},   // 56x56x64 3x3
        {{7, 9, 3}, Window::square(1, 1, 0)},      // 3-byte runs, last pixel = last 3 bytes
        {{5, 5, 1}, Window::square(1, 1, 0)},      // 1-byte runs
        {{6, 7, 8}, Window{2, 3, 1, 2, 0, 0, 0, 0}},
        {{6, 7, 16}, Window{2, 2, 1, 1, 0, 0, 0, 0}},
        {{6, 7, 130}, Window::square(3, 2, 1)},
    };
    pcg32 rng(41);
    for (int i = 0; i < 400; ++i) shapes.push_back(random_window_geometry(rng));
    const std::int64_t paddings[] = {0, 1, 3, 4, 11, 32, 35};
    for (const WindowGeometry& g : shapes) {
        g.validate("test");
        const std::int64_t row_stride = g.m() + paddings[rng(7)];
        const int images = 1 + int(rng(2));
        const std::int64_t rows = g.p() * images;
        const std::int64_t cut_begin = rng(std::uint32_t(rows));
        const std::int64_t cut_end = cut_begin + 1 + rng(std::uint32_t(rows - cut_begin));
        for (SimdKernel kernel : kernels) {
            for (std::uint8_t mask : {std::uint8_t(0), std::uint8_t(0x80)})
                expect_im2col_kernel_equals_portable(kernel, g, images, mask, row_stride, 0, rows, rng);
            expect_im2col_kernel_equals_portable(kernel, g, images, 0x80, row_stride, cut_begin, cut_end, rng);
            if (HasFatalFailure()) return;
        }
    }
}

// IM2COL + each GEMM path (reference, every fast kernel, the cycle-level SA) against the direct
// convolution, bit for bit.
void check_conv_paths(const ConvCase& c, pcg32& rng) {
    const auto kernels = available_fast_kernels();
    {
        const auto x = random_int8(rng, c.g.in.size());
        const std::int64_t m = c.g.m(), p = c.g.p();
        const auto w = random_int8(rng, c.n * m);
        const auto bias = random_int8(rng, c.n);
        const auto expect = direct_conv(x, c.g, w, bias, c.bias_shift, c.n);
        const auto patches = im2col(x.data(), c.g);

        std::vector<std::int32_t> acc(expect.size());
        gemm_reference(w.data(), patches.data(), m, bias.data(), c.bias_shift, c.n, m, p, acc.data());
        ASSERT_EQ(acc, expect) << "reference, " << describe(c);
        for (FastKernel k : kernels) {
            std::fill(acc.begin(), acc.end(), 0);
            gemm_fast(w.data(), patches.data(), bias.data(), c.bias_shift, c.n, m, p, acc.data(), 2, k);
            ASSERT_EQ(acc, expect) << to_string(k) << ", " << describe(c);
        }
        for (SaConfig sa : {SaConfig{64, 8, 8}, SaConfig{64, 4, 8}, SaConfig{16, 3, 4}}) {
            std::fill(acc.begin(), acc.end(), 0);
            sa_cycle_gemm(w.data(), patches.data(), m, bias.data(), c.bias_shift, c.n, m, p, sa, acc.data());
            ASSERT_EQ(acc, expect) << "cycle SA " << sa.rows << "x" << sa.cols << ", " << describe(c);
        }
    }
}

TEST(Gemm, ReferenceFastAndCycleSaAgreeWithDirectConvolution) {
    pcg32 rng(2024);
    for (const auto& c : random_cases(60, 5)) check_conv_paths(c, rng);
}

TEST(Gemm, NonSquareConvolutionsAgreeWithDirectConvolution) {
    pcg32 rng(2025);
    for (const auto& c : nonsquare_cases(60, 6)) check_conv_paths(c, rng);
}

TEST(Gemm, ExtremeOperandsAtTheDeepestLayerStayExact) {
    // All products at +-128*127 or 128*128 over M = 4608 (a 3x3x512 layer), plus the largest bias:
    // |acc| reaches 7.5e7, the VNNI offset term 128*rowsum adds as much again.
    const std::int64_t n = 33, m = 4608, p = 7;
    for (int pattern = 0; pattern < 4; ++pattern) {
        std::vector<std::int8_t> w(std::size_t(n * m)), x(std::size_t(p * m)), bias(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::int8_t(pattern & 1 ? -128 : (i % 3 ? 127 : -128));
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int8_t(pattern & 2 ? -128 : 127);
        for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = std::int8_t(i % 2 ? 127 : -128);
        std::vector<std::int32_t> ref(std::size_t(n * p)), acc(ref.size());
        gemm_reference(w.data(), x.data(), m, bias.data(), 16, n, m, p, ref.data());
        for (FastKernel k : available_fast_kernels()) {
            gemm_fast(w.data(), x.data(), bias.data(), 16, n, m, p, acc.data(), 1, k);
            EXPECT_EQ(acc, ref) << to_string(k) << " pattern " << pattern;
        }
    }
    // One closed form: w = -128, x = -128 everywhere gives acc = M * 16384 + (bias << 16).
    std::vector<std::int8_t> w(std::size_t(n * m), -128), x(std::size_t(p * m), -128), bias(std::size_t(n), -128);
    std::vector<std::int32_t> acc(std::size_t(n * p));
    gemm_fast(w.data(), x.data(), bias.data(), 16, n, m, p, acc.data(), 1);
    EXPECT_EQ(acc[0], 4608 * 16384 - (128 << 16));
}

TEST(Gemm, UnsignedOperandsAtTheSaturationBoundStayExact) {
    // The AVX2 kernel sums pairs of u8 x s8 products in 16-bit lanes.  Post-ReLU activations
    // (0..127) against -128 give pairs of -32512, the closest to saturation the unsigned path gets;
    // a block with one negative byte takes the wide (int16) path (where x = w = -128 everywhere,
    // pairs of +32768, one past int16, is ExtremeOperandsAtTheDeepestLayerStayExact's case).
    // Pixels alternate between all-non-negative blocks and blocks with a single -128 so that both
    // paths meet in one GEMM.  The last check shows the data can catch a saturating kernel: with
    // x offset to u8 (x + 128, what a VNNI-less u8s8 kernel does) the same pairs saturate.
    const std::int64_t n = 37, m = 4608, p = 203;
    std::vector<std::int8_t> w(std::size_t(n * m)), x(std::size_t(p * m)), bias(std::size_t(n), 127);
    pcg32 rng(17);
    for (auto& v : w) v = rng(4) ? std::int8_t(-128) : std::int8_t(127);
    for (std::int64_t row = 0; row < p; ++row)
        for (std::int64_t k = 0; k < m; ++k) x[std::size_t(row * m + k)] = rng(8) ? std::int8_t(127) : std::int8_t(0);
    for (std::int64_t row = 40; row < p; row += 50) x[std::size_t(row * m + row % m)] = -128;
    std::vector<std::int32_t> ref(std::size_t(n * p)), acc(ref.size());
    gemm_reference(w.data(), x.data(), m, bias.data(), 8, n, m, p, ref.data());
    for (FastKernel k : available_fast_kernels()) {
        std::fill(acc.begin(), acc.end(), 0);
        gemm_fast(w.data(), x.data(), bias.data(), 8, n, m, p, acc.data(), 2, k);
        EXPECT_EQ(acc, ref) << to_string(k);
    }
    const int offset_pair = (127 + 128) * -128 * 2;   // u8 operand 255 against two -128 weights
    EXPECT_LT(offset_pair, -32768) << "the operands would not expose a saturating u8 x s8 kernel";
}

TEST(Gemm, ASingleNegativeByteAnywhereInARowIsMultipliedExactly) {
    // The AVX2 kernel multiplies a block of rows as unsigned bytes unless one of its bytes is
    // negative (then the wide, int16 path); a -128 that the check misses is read as +128.  One
    // -128 at a time, in the last column of a row (depths not a multiple of 4 or 32, so that it
    // sits in the check's tail) and in the first, in rows at the edges of the kernel's row tiles
    // (6) and blocks (96 rows at these depths, 36 past depth 1024).  A check that stopped one
    // byte short of a row passed every other test here (review of 2026-12-04).
    const std::int64_t n = 20, p = 200;
    pcg32 rng(5);
    for (std::int64_t m : {1, 2, 3, 5, 31, 33, 63, 147, 150, 1030}) {
        std::vector<std::int8_t> w(std::size_t(n * m)), bias(static_cast<std::size_t>(n));
        for (auto& v : w) {   // -127..127 without 0: every column's weights see the -128
            const int r = int(rng(255)) - 127;
            v = std::int8_t(r == 0 ? 1 : r);
        }
        for (auto& v : bias) v = std::int8_t(int(rng(256)) - 128);
        std::vector<std::int8_t> x(std::size_t(p * m));
        for (auto& v : x) v = std::int8_t(rng(128));   // 0..127: the unsigned path's operands
        for (std::int64_t row : {0, 5, 6, 35, 36, 95, 96, 199})
            for (std::int64_t column : {m - 1, std::int64_t(0)}) {
                std::vector<std::int8_t> one = x;
                one[std::size_t(row * m + column)] = -128;
                std::vector<std::int32_t> ref(std::size_t(n * p)), acc(ref.size());
                gemm_reference(w.data(), one.data(), m, bias.data(), 4, n, m, p, ref.data());
                for (FastKernel k : available_fast_kernels()) {
                    std::fill(acc.begin(), acc.end(), 0);
                    gemm_fast(w.data(), one.data(), bias.data(), 4, n, m, p, acc.data(), 1, k);
                    ASSERT_EQ(acc, ref) << to_string(k) << ": m " << m << ", -128 at row " << row << ", column "
                                        << column;
                }
            }
    }
}

namespace {

// The kernels this CPU must offer, from CPUID read here (independently of gemm.cpp), unless the
// environment names them: AIMCEMU_EXPECT_KERNELS=amx,vnni512,avx2,dnnl,portable.
std::vector<std::string> expected_kernels() {
    std::vector<std::string> names;
    if (const char* env = std::getenv("AIMCEMU_EXPECT_KERNELS")) {
        std::stringstream list(env);
        for (std::string name; std::getline(list, name, ',');)
            if (!name.empty()) names.push_back(name);
        return names;
    }
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2");
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vnni");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool amx_cpu = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 24)) && (edx & (1u << 25));
#ifdef AIMCEMU_AMX_TILE_MODEL
    // This binary's amx kernel runs on the tile model (pu_model/amx_tile_model.hpp), which needs
    // only the AVX-512BW of the kernel's epilogue.
    const bool amx = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    (void)amx_cpu;
#else
    const bool amx = amx_cpu && vnni && syscall(SYS_arch_prctl, 0x1023, 18) == 0;   // ARCH_REQ_XCOMP_PERM, tile data
#endif
    if (amx) names.emplace_back("amx");
    if (vnni) names.emplace_back("vnni512");
    if (avx2) names.emplace_back("avx2");
#ifdef AIMCEMU_HAVE_DNNL
    if (vnni) names.emplace_back("dnnl");
#endif
    names.emplace_back("portable");
    return names;
}

}  // namespace

TEST(Gemm, EveryKernelTheCpuOffersIsAvailableAndServesCalls) {
    // A kernel that silently dropped out (a broken CPUID check, a build without the ISA) would
    // leave every other test green on the remaining kernels: this one names what ran.
    const auto expected = expected_kernels();
    ASSERT_FALSE(expected.empty());
    pcg32 rng(5);
    const std::int64_t n = 20, m = 75, p = 9;
    const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
    std::vector<std::int32_t> ref(std::size_t(n * p)), acc(ref.size());
    gemm_reference(w.data(), x.data(), m, bias.data(), 2, n, m, p, ref.data());
    std::string ran;
    for (const std::string& name : expected) {
        const FastKernel k = fast_kernel_from_string(name);
        ASSERT_TRUE(fast_kernel_available(k)) << "this CPU offers " << name << " but the kernel is unavailable";
        const std::int64_t before = fast_kernel_calls(k);
        gemm_fast(w.data(), x.data(), bias.data(), 2, n, m, p, acc.data(), 1, k);
        EXPECT_EQ(fast_kernel_calls(k), before + 1) << name << " did not serve the call";
        EXPECT_EQ(acc, ref) << name;
        ran += (ran.empty() ? "" : ",") + name;
    }
    EXPECT_EQ(to_string(resolve_fast_kernel(FastKernel::Auto)), expected.front()) << "auto must pick the fastest";
    for (FastKernel k : kAllFastKernels)
        if (fast_kernel_available(k))
            EXPECT_NE(std::find(expected.begin(), expected.end(), std::string(to_string(k))), expected.end())
                << to_string(k) << " is available but not expected on this CPU";
    RecordProperty("kernels_ran", ran);
    std::cout << "[ kernels  ] ran: " << ran << "\n";
    EXPECT_THROW(fast_kernel_from_string("avx9"), FormatError);
}

namespace {

// What a kernel needs that this CPU or build may lack, for the skip message (read from CPUID
// here, independently of gemm.cpp's checks).
std::string missing_feature(FastKernel k) {
    __builtin_cpu_init();
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vnni");
    switch (k) {
        case FastKernel::Amx:
            return "needs AMX-TILE + AMX-INT8 (CPUID.7.0:EDX bits 24, 25), AVX-512 VNNI and Linux's tile-data "
                   "permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
        case FastKernel::Vnni512: return "needs AVX-512F, AVX-512BW and AVX-512 VNNI";
        case FastKernel::Avx2: return "needs AVX2";
        case FastKernel::Dnnl:
#ifdef AIMCEMU_HAVE_DNNL
            return vnni ? "unavailable although the CPU has AVX-512 VNNI"
                        : "needs AVX-512 VNNI (without it oneDNN's s8 GEMM sums u8*s8 pairs in saturating int16)";
#else
            (void)vnni;
            return "this build has no oneDNN (AIMCEMU_USE_DNNL=OFF or libdnnl-dev missing)";
#endif
        default: return "unavailable";
    }
}

class EachKernel : public ::testing::TestWithParam<FastKernel> {};

}  // namespace

// Every kernel by name, so that a run on any CPU lists each one as passed or skipped with the
// feature it lacks (the tests above loop over whatever is available and would stay silent).
TEST_P(EachKernel, MatchesTheReferenceOnRandomAndExtremeOperands) {
    const FastKernel k = GetParam();
    if (!fast_kernel_available(k)) GTEST_SKIP() << to_string(k) << ": " << missing_feature(k);
    pcg32 rng(77);
    for (const auto& c : random_cases(40, 11)) {
        const auto x = random_int8(rng, c.g.in.size());
        const auto w = random_int8(rng, c.n * c.g.m());
        const auto bias = random_int8(rng, c.n);
        const auto expect = direct_conv(x, c.g, w, bias, c.bias_shift, c.n);
        const auto patches = im2col(x.data(), c.g);
        std::vector<std::int32_t> acc(expect.size());
        gemm_fast(w.data(), patches.data(), bias.data(), c.bias_shift, c.n, c.g.m(), c.g.p(), acc.data(), 2, k);
        ASSERT_EQ(acc, expect) << describe(c);
    }
    // +-128 and 127 everywhere over the deepest ResNet depth: every pair at the int16 bounds.
    const std::int64_t n = 35, m = 4608, p = 13;
    for (int xv : {-128, 127, 0})
        for (int wv : {-128, 127}) {
            std::vector<std::int8_t> w(std::size_t(n * m), std::int8_t(wv)), x(std::size_t(p * m), std::int8_t(xv));
            std::vector<std::int8_t> bias(std::size_t(n), -128);
            std::vector<std::int32_t> acc(std::size_t(n * p));
            gemm_fast(w.data(), x.data(), bias.data(), 16, n, m, p, acc.data(), 1, k);
            EXPECT_EQ(acc.front(), std::int32_t(m * xv * wv - (128 << 16))) << "x " << xv << ", w " << wv;
            EXPECT_EQ(acc.back(), acc.front());
        }
}

INSTANTIATE_TEST_SUITE_P(Gemm, EachKernel, ::testing::ValuesIn(kAllFastKernels),
                         [](const ::testing::TestParamInfo<FastKernel>& info) { return std::string(to_string(info.param)); });

TEST(Gemm, RequantisedOutputEqualsRequantizeOfTheAccumulators) {
    // The fused epilogue (in registers for AVX2 and VNNI, per block for the others) against the
    // plain requantize() of the reference accumulators: every shift 0..24, with and without ReLU,
    // N not a multiple of 16 inside one VNNI panel of 64 channels (45) and past it (100: a full
    // panel, then a partial one), and accumulators that saturate int8 either way and sit on
    // rounding ties.
    pcg32 rng(41);
    for (const std::int64_t n : {45, 100}) {
        const std::int64_t m = 300, p = 23;
        const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
        std::vector<std::int32_t> acc(std::size_t(n * p));
        gemm_reference(w.data(), x.data(), m, bias.data(), 6, n, m, p, acc.data());
        for (FastKernel k : available_fast_kernels()) {
            const PackedWeights packed(w.data(), bias.data(), 6, n, m, k);
            const auto operand = operand_as_packed_reads(packed, x, p, m);
            for (int shift = 0; shift <= 24; ++shift)
                for (bool relu : {false, true}) {
                    std::vector<std::int8_t> expect(acc.size()), got(acc.size(), 99);
                    requantize(acc.data(), std::int64_t(acc.size()), shift, relu, expect.data());
                    GemmOutput out;
                    out.y = got.data();
                    out.out_shift = shift;
                    out.relu = relu;
                    gemm_fast(packed, operand.data(), p, out, 2);
                    ASSERT_EQ(got, expect) << to_string(k) << " n " << n << " shift " << shift << (relu ? " relu" : "");
                }
        }
    }
}

TEST(Gemm, RequantisationStaysExactWhereTheRoundingHalfCannotBeFolded) {
    // The VNNI epilogue starts its accumulators at 2^(shift-1) and rounds with one shift only when
    // |acc| + 2^(shift-1) < 2^31 for any operands; otherwise it rounds in the epilogue.  Both sides
    // of that limit, with every accumulator at its extreme (so the folded start would wrap if it
    // were used past the limit): depth 131000 with bias shift 0 (|acc| may reach
    // 131000 * 2^14 + 2^7 = 2^31 - 1179520: shift 21 folds, 22 does not), and depth 4608 with bias
    // shift 16 (every shift up to 31 folds).  Every kernel against requantize() of the reference
    // accumulators.
    struct Case {
        std::int64_t m;
        int bias_shift;
    };
    for (const Case c : {Case{131000, 0}, Case{4608, 16}})
        for (const int xv : {-128, 127})
            for (const int wv : {-128, 127}) {
                const std::int64_t n = 17, p = 7;
                std::vector<std::int8_t> w(std::size_t(n * c.m), std::int8_t(wv)), x(std::size_t(p * c.m), std::int8_t(xv));
                std::vector<std::int8_t> bias(static_cast<std::size_t>(n));
                for (std::int64_t i = 0; i < n; ++i) bias[std::size_t(i)] = std::int8_t(i % 2 ? 127 : -128);
                std::vector<std::int32_t> acc(std::size_t(n * p));
                gemm_reference(w.data(), x.data(), c.m, bias.data(), c.bias_shift, n, c.m, p, acc.data());
                for (FastKernel k : available_fast_kernels()) {
                    const PackedWeights packed(w.data(), bias.data(), c.bias_shift, n, c.m, k);
                    const auto operand = operand_as_packed_reads(packed, x, p, c.m);
                    for (const int shift : {1, 21, 22, 31})
                        for (const bool relu : {false, true}) {
                            std::vector<std::int8_t> expect(acc.size()), got(acc.size(), 99);
                            requantize(acc.data(), std::int64_t(acc.size()), shift, relu, expect.data());
                            GemmOutput out;
                            out.y = got.data();
                            out.out_shift = shift;
                            out.relu = relu;
                            gemm_fast(packed, operand.data(), p, out, 1);
                            ASSERT_EQ(got, expect) << to_string(k) << " m " << c.m << " bias_shift " << c.bias_shift
                                                   << " x " << xv << " w " << wv << " shift " << shift
                                                   << (relu ? " relu" : "");
                        }
                }
            }
}

TEST(Gemm, WorkSplitOverRowsAndChannelPanelsNeverChangesTheResult) {
    // The VNNI kernel splits small layers over 64-channel panels as well as row tiles when it has
    // several workers (and takes one worker per 2^21 multiply-adds at most, hence the deep M):
    // P from 1 (the classifier) to a few tiles of 6 rows, N below, at and past the panel of 64 and
    // not a multiple of 16, 1-5 threads; int32 and requantised outputs against the reference.
    pcg32 rng(101);
    const std::int64_t m = 16387;
    struct Size {
        std::int64_t n, p;
    };
    for (const Size size : {Size{15, 1}, Size{65, 7}, Size{130, 1}, Size{1000, 1}, Size{70, 49}, Size{17, 97}}) {
        const std::int64_t n = size.n, p = size.p;
        const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
        std::vector<std::int32_t> expect(std::size_t(n * p));
        gemm_reference(w.data(), x.data(), m, bias.data(), 2, n, m, p, expect.data());
        std::vector<std::int8_t> expect_y(expect.size());
        requantize(expect.data(), std::int64_t(expect.size()), 7, true, expect_y.data());
        for (FastKernel k : available_fast_kernels()) {
            const PackedWeights packed(w.data(), bias.data(), 2, n, m, k);
            const auto operand = operand_as_packed_reads(packed, x, p, m);
            for (const int threads : {1, 2, 3, 5}) {
                std::vector<std::int32_t> acc(expect.size(), 12345);
                gemm_fast(packed, operand.data(), p, acc.data(), threads);
                ASSERT_EQ(acc, expect) << to_string(k) << " n " << n << " p " << p << ", " << threads << " threads";
                std::vector<std::int8_t> y(expect.size(), 99);
                GemmOutput out;
                out.y = y.data();
                out.out_shift = 7;
                out.relu = true;
                gemm_fast(packed, operand.data(), p, out, threads);
                ASSERT_EQ(y, expect_y) << to_string(k) << " n " << n << " p " << p << ", " << threads << " threads";
            }
        }
    }
}

// The GEMMs whose operand rows are written chunk by chunk (RowPreparer, RowWriter): depth 4099
// (deep enough for several workers), one worker (P = 1), a layer split over channel panels (P =
// 49), several chunks over three panel blocks (130 x 200) and rows only (P = 1000); bias shift 1,
// the expected output requantised by 9.
struct ChunkedCase {
    std::int64_t n, p, m;
    std::vector<std::int8_t> w, x, bias, expect;
};
// Random operands of one N x M x P GEMM (bias shift 1) and the reference output requantised by
// `out_shift` (no ReLU).
ChunkedCase random_case(pcg32& rng, std::int64_t n, std::int64_t m, std::int64_t p, int out_shift) {
    ChunkedCase c{n, p, m, random_int8(rng, n * m), random_int8(rng, p * m), random_int8(rng, n), {}};
    std::vector<std::int32_t> acc(std::size_t(n * p));
    gemm_reference(c.w.data(), c.x.data(), m, c.bias.data(), 1, n, m, p, acc.data());
    c.expect.resize(acc.size());
    requantize(acc.data(), std::int64_t(acc.size()), out_shift, false, c.expect.data());
    return c;
}

std::vector<ChunkedCase> chunked_cases(pcg32& rng) {
    std::vector<ChunkedCase> cases;
    for (const auto& [n, p] : {std::pair<std::int64_t, std::int64_t>{17, 1}, {200, 49}, {130, 200}, {17, 1000}})
        cases.push_back(random_case(rng, n, 4099, p, 9));
    return cases;
}

TEST(Gemm, PreparedRowsAreWrittenOnceBeforeTheKernelReadsThem) {
    // gemm_fast with a RowPreparer: the operand starts as garbage and each row is written only by
    // prepare.  Every row must be prepared exactly once and the result must equal the reference
    // (a row read before it was prepared would read garbage), for every kernel, 1-3 threads: one
    // worker (P = 1), layers split over channel panels (P = 49: one row chunk per worker; 130 x
    // 200: several chunks of unequal size over three panel blocks, whose later blocks wait for
    // the chunk's first) and one split over row chunks only.  The first chunk's preparation is
    // slow, so that another worker reaches one of its later blocks while it is being written.
    pcg32 rng(57);
    for (const ChunkedCase& c : chunked_cases(rng)) {
        const std::int64_t n = c.n, p = c.p, m = c.m;
        const auto &w = c.w, &x = c.x, &bias = c.bias, &expect = c.expect;
        for (FastKernel k : available_fast_kernels()) {
            const PackedWeights packed(w.data(), bias.data(), 1, n, m, k);
            const std::int64_t stride = packed.x_row_stride();
            for (const int threads : {1, 2, 3}) {
                std::vector<std::uint8_t> operand(std::size_t(p * stride), 0xA5);
                std::vector<std::atomic<int>> prepared(static_cast<std::size_t>(p));
                std::vector<std::int8_t> y(expect.size(), 99);
                GemmOutput out;
                out.y = y.data();
                out.out_shift = 9;
                gemm_fast(packed, operand.data(), p, out, threads, [&](std::int64_t begin, std::int64_t end) {
                    if (begin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
                    for (std::int64_t row = begin; row < end; ++row) {
                        ++prepared[std::size_t(row)];
                        for (std::int64_t col = 0; col < stride; ++col)
                            operand[std::size_t(row * stride + col)] =
                                (col < m ? std::uint8_t(x[std::size_t(row * m + col)]) : 0) ^ packed.x_xor_mask();
                    }
                });
                for (std::int64_t row = 0; row < p; ++row)
                    ASSERT_EQ(prepared[std::size_t(row)].load(), 1) << to_string(k) << " row " << row;
                ASSERT_EQ(y, expect) << to_string(k) << " n " << n << " p " << p << ", " << threads << " threads";
            }
        }
    }
}

TEST(Gemm, StreamedOperandRowsAreWrittenOnceAndGiveTheSameBytes) {
    // gemm_fast_streamed: the kernel never sees a whole operand; each chunk of rows is written
    // into a scratch block handed to `write` just before it is multiplied.  Every row must be
    // written exactly once, into a block with room for the chunk (each write fills its rows
    // completely, so a block too small corrupts the heap under ASan), and the bytes must equal the
    // reference, for every kernel and 1-3 threads: one worker (P = 1), a layer split over channel
    // panels (P = 49, where the rows go into one shared operand), several chunks (130 x 200) and a
    // long one (P = 1000).  Blocks are garbage-filled first so that a row read before it was
    // written would show.
    pcg32 rng(59);
    for (const ChunkedCase& c : chunked_cases(rng)) {
        const std::int64_t n = c.n, p = c.p, m = c.m;
        const auto &w = c.w, &x = c.x, &bias = c.bias, &expect = c.expect;
        for (FastKernel k : available_fast_kernels()) {
            const PackedWeights packed(w.data(), bias.data(), 1, n, m, k);
            const std::int64_t stride = packed.x_row_stride();
            PassBuffers buffers;
            for (const int threads : {1, 2, 3}) {
                std::vector<std::atomic<int>> written(static_cast<std::size_t>(p));
                std::vector<std::int8_t> y(expect.size(), 99);
                GemmOutput out;
                out.y = y.data();
                out.out_shift = 9;
                const std::int64_t calls = fast_kernel_calls(k);
                gemm_fast_streamed(
                    packed, p, out, threads,
                    [&](std::int64_t begin, std::int64_t end, std::uint8_t* rows) {
                        for (std::int64_t row = begin; row < end; ++row) {
                            ++written[std::size_t(row)];
                            std::uint8_t* dst = rows + (row - begin) * stride;
                            for (std::int64_t col = 0; col < stride; ++col)
                                dst[col] = (col < m ? std::uint8_t(x[std::size_t(row * m + col)]) : 0) ^ packed.x_xor_mask();
                        }
                    },
                    threads == 2 ? &buffers : nullptr);
                EXPECT_EQ(fast_kernel_calls(k), calls + 1) << to_string(k);
                for (std::int64_t row = 0; row < p; ++row)
                    ASSERT_EQ(written[std::size_t(row)].load(), 1) << to_string(k) << " row " << row;
                ASSERT_EQ(y, expect) << to_string(k) << " n " << n << " p " << p << ", " << threads << " threads";
            }
        }
    }
}

TEST(Gemm, AStreamedGemmInsideARowWriterLeavesTheOuterRowsAlone) {
    // Nested pool jobs run on the calling worker, so a row writer that itself runs a streamed
    // GEMM must not be handed the block the outer rows live in: the outer result must still equal
    // the reference whether the inner chunk is smaller, equal or larger (which would regrow the
    // block under the outer kernel), for every kernel and 1-2 threads.
    pcg32 rng(67);
    const std::int64_t n = 40, m = 300, p = 96;
    const ChunkedCase c = random_case(rng, n, m, p, 8);
    const auto &w = c.w, &x = c.x, &bias = c.bias, &expect = c.expect;
    for (FastKernel k : available_fast_kernels()) {
        const PackedWeights packed(w.data(), bias.data(), 1, n, m, k);
        const auto operand = operand_as_packed_reads(packed, x, p, m);
        const std::int64_t stride = packed.x_row_stride();
        for (const std::int64_t inner_p : {std::int64_t(6), std::int64_t(96), std::int64_t(400)})
            for (const int threads : {1, 2}) {
                std::vector<std::int8_t> y(expect.size(), 99), inner_y(std::size_t(n * inner_p));
                GemmOutput out, inner;
                out.y = y.data();
                out.out_shift = 8;
                inner.y = inner_y.data();
                gemm_fast_streamed(packed, p, out, threads, [&](std::int64_t begin, std::int64_t end, std::uint8_t* rows) {
                    std::copy(operand.begin() + begin * stride, operand.begin() + end * stride, rows);
                    gemm_fast_streamed(packed, inner_p, inner, 1, [&](std::int64_t b, std::int64_t e, std::uint8_t* r) {
                        std::fill(r, r + (e - b) * stride, std::uint8_t(0x5A));
                    });
                });
                ASSERT_EQ(y, expect) << to_string(k) << ", inner P " << inner_p << ", " << threads << " threads";
            }
    }
}

TEST(Gemm, FusedResidualAddEqualsItsDefinitionOnEveryKernel) {
    // GemmOutput::residual: y = sat8(relu?(sat8(round_shift(acc, out_shift))) + align(r, shift)),
    // then ReLU if relu_after_residual, computed here from postproc.hpp's scalar definitions on
    // the reference accumulators.  Every alignment shift (-8..8, rounding half up on the right),
    // with and without either ReLU, out_shift 0 (no rounding), 1 and 11 (the folded rounding), N
    // with a masked tail (70 = 4 x 16 + 6), residuals at -128 and 127 among random ones, 1 and 2
    // threads, the whole operand and the streamed one.
    pcg32 rng(61);
    const std::int64_t n = 70, m = 300, p = 37;
    const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
    auto r = random_int8(rng, n * p);
    r[0] = -128, r[1] = 127, r[2] = -1, r[3] = 1;
    std::vector<std::int32_t> acc(std::size_t(n * p));
    gemm_reference(w.data(), x.data(), m, bias.data(), 3, n, m, p, acc.data());
    for (FastKernel k : available_fast_kernels()) {
        const PackedWeights packed(w.data(), bias.data(), 3, n, m, k);
        const auto operand = operand_as_packed_reads(packed, x, p, m);
        const std::int64_t stride = packed.x_row_stride();
        for (const int out_shift : {0, 1, 11})
            for (int shift = kAlignShiftRange.min; shift <= kAlignShiftRange.max; ++shift)
                for (const int relus : {0, 1, 2, 3}) {
                    const bool relu = relus & 1, relu_after = relus & 2;
                    std::vector<std::int8_t> expect(acc.size());
                    for (std::size_t i = 0; i < acc.size(); ++i) {
                        std::int8_t v = sat8(round_shift(acc[i], out_shift));
                        if (relu) v = relu8(v);
                        v = sat8(std::int64_t(v) + align(r[i], shift));
                        expect[i] = relu_after ? relu8(v) : v;
                    }
                    GemmOutput out;
                    out.out_shift = out_shift;
                    out.relu = relu;
                    out.residual = r.data();
                    out.residual_shift = shift;
                    out.relu_after_residual = relu_after;
                    for (const int threads : {1, 2}) {
                        std::vector<std::int8_t> y(expect.size(), 99), streamed(expect.size(), 99);
                        out.y = y.data();
                        gemm_fast(packed, operand.data(), p, out, threads);
                        out.y = streamed.data();
                        gemm_fast_streamed(packed, p, out, threads,
                                           [&](std::int64_t begin, std::int64_t end, std::uint8_t* rows) {
                                               std::copy(operand.begin() + begin * stride,
                                                         operand.begin() + end * stride, rows);
                                           });
                        const std::string what = std::string(to_string(k)) + " out_shift " + std::to_string(out_shift) +
                                                 " shift " + std::to_string(shift) + " relu " + std::to_string(relus) +
                                                 ", " + std::to_string(threads) + " threads";
                        ASSERT_EQ(y, expect) << what;
                        ASSERT_EQ(streamed, expect) << what << ", streamed";
                    }
                }
        // Refused: a residual without the int8 output, or a shift outside the format's range.
        std::vector<std::int8_t> y(acc.size());
        GemmOutput bad;
        bad.acc = acc.data();
        bad.residual = r.data();
        EXPECT_THROW(gemm_fast(packed, operand.data(), p, bad, 1), std::invalid_argument) << to_string(k);
        bad.y = y.data();
        bad.residual_shift = kAlignShiftRange.max + 1;
        EXPECT_THROW(gemm_fast(packed, operand.data(), p, bad, 1), std::invalid_argument) << to_string(k);
    }
}

TEST(Gemm, AFailingRowPreparerIsRethrownAndLeavesNoWorkerWaiting) {
    // On a layer split over channel panels, a chunk's later panel blocks wait for its first to
    // prepare the rows; when that preparation throws they must stop waiting and the call must
    // rethrow, for every thread count, and the pool must still run the next call.
    pcg32 rng(58);
    const std::int64_t n = 130, m = 4099, p = 200;
    const auto w = random_int8(rng, n * m), bias = random_int8(rng, n);
    for (FastKernel k : available_fast_kernels()) {
        const PackedWeights packed(w.data(), bias.data(), 1, n, m, k);
        std::vector<std::uint8_t> operand(std::size_t(p * packed.x_row_stride()), packed.x_xor_mask());
        std::vector<std::int32_t> acc(std::size_t(n * p));
        GemmOutput out;
        out.acc = acc.data();
        for (const int threads : {1, 2, 3}) {
            for (const std::int64_t failing_row : {std::int64_t(0), p / 2, p - 1}) {
                const auto fail_at = [&](std::int64_t begin, std::int64_t end) {
                    if (begin <= failing_row && failing_row < end) throw std::runtime_error("prepare failed");
                };
                EXPECT_THROW(gemm_fast(packed, operand.data(), p, out, threads, fail_at), std::runtime_error)
                    << to_string(k) << ", " << threads << " threads, row " << failing_row;
            }
            std::vector<std::int32_t> expect(acc.size());
            std::vector<std::int8_t> x(std::size_t(p * m), 0);
            gemm_reference(w.data(), x.data(), m, bias.data(), 1, n, m, p, expect.data());
            gemm_fast(packed, operand.data(), p, out, threads, [](std::int64_t, std::int64_t) {});
            ASSERT_EQ(acc, expect) << to_string(k) << ", " << threads << " threads, after the failures";
        }
    }
}

TEST(Gemm, VnniSkipsKernelRowsThatReadZeroAndStaysExact) {
    // PackedWeights' skip_segment: the VNNI kernel leaves out the kernel rows that read as zero in
    // every row of a register tile (the padding above and below the image, or input rows that are
    // all zero) and adds their share of the +128 offset to the accumulators' start.  Convolutions
    // with kernel rows of a multiple of 4 bytes, padding on every side, stride 1 and 2, against the
    // direct convolution: random input, input with zero rows, an all-zero input (a tile with no
    // depth left) and extreme weights; int32 and requantised outputs, 1 and 2 threads.  A segment
    // that is no multiple of 4 or does not divide M is ignored (still exact).
    if (!fast_kernel_available(FastKernel::Vnni512)) GTEST_SKIP() << "needs AVX-512 VNNI";
    struct Case {
        WindowGeometry g;
        int n;
        std::int64_t segment;   // 0: the conv's kernel row
    };
    const Case cases[] = {
        {{{7, 7, 64}, Window::square(3, 1, 1)}, 70, 0},     // the 7 x 7 layer's shape, 64 channels
        {{{9, 8, 12}, Window::square(3, 2, 1)}, 17, 0},
        {{{11, 10, 4}, Window::square(5, 1, 2)}, 65, 0},
        {{{8, 9, 8}, Window{3, 5, 1, 2, 2, 1, 0, 2}}, 33, 0},   // non-square, uneven padding
        {{{9, 9, 8}, Window::square(7, 2, 3)}, 16, 0},
        {{{7, 7, 3}, Window::square(7, 2, 3)}, 16, 21},       // 21 bytes: no multiple of 4, ignored
        {{{7, 7, 8}, Window::square(3, 1, 1)}, 16, 48},       // 48 does not divide 72: ignored
    };
    pcg32 rng(71);
    for (const Case& c : cases) {
        const std::int64_t m = c.g.m(), p = c.g.p();
        const std::int64_t segment = c.segment ? c.segment : std::int64_t(c.g.window.kernel_w) * c.g.in.c;
        for (int input = 0; input < 4; ++input) {
            auto x = random_int8(rng, c.g.in.size());
            auto w = random_int8(rng, c.n * m);
            if (input == 1)   // every other input row all zero
                for (int y = 0; y < c.g.in.h; y += 2)
                    std::fill_n(x.begin() + std::int64_t(y) * c.g.in.w * c.g.in.c, c.g.in.w * c.g.in.c, 0);
            if (input == 2) std::fill(x.begin(), x.end(), 0);
            if (input == 3) {   // extreme weights and input
                std::fill(w.begin(), w.end(), -128);
                std::fill(x.begin(), x.end(), 127);
            }
            const auto bias = random_int8(rng, c.n);
            const auto expect = direct_conv(x, c.g, w, bias, 3, c.n);
            std::vector<std::int8_t> expect_y(expect.size());
            requantize(expect.data(), std::int64_t(expect.size()), 10, true, expect_y.data());
            const PackedWeights packed(w.data(), bias.data(), 3, c.n, m, FastKernel::Vnni512, segment);
            EXPECT_EQ(packed.skip_segment(), segment % 4 == 0 && m % segment == 0 ? segment : 0);
            std::vector<std::uint8_t> operand(std::size_t(p * packed.x_row_stride()));
            im2col_into(x.data(), c.g, packed.x_xor_mask(), packed.x_row_stride(), operand.data());
            for (const int threads : {1, 2}) {
                std::vector<std::int32_t> acc(expect.size());
                gemm_fast(packed, operand.data(), p, acc.data(), threads);
                ASSERT_EQ(acc, expect) << "in " << c.g.in.h << "x" << c.g.in.w << "x" << c.g.in.c << " input " << input
                                       << ", " << threads << " threads";
                std::vector<std::int8_t> y(expect.size(), 99);
                GemmOutput out;
                out.y = y.data();
                out.out_shift = 10;
                out.relu = true;
                gemm_fast(packed, operand.data(), p, out, threads);
                ASSERT_EQ(y, expect_y) << "in " << c.g.in.h << "x" << c.g.in.w << "x" << c.g.in.c << " input " << input
                                       << ", " << threads << " threads";
            }
        }
    }
}

TEST(Im2col, PaddedInputIsTheInputXoredInsideItsPadding) {
    // pad_input_into: every image's input, each byte XORed with the mask, framed by the window's
    // padding on every side with the mask itself; rows of 1 to 3 x 64 bytes and a rest, uneven
    // padding, 1 and 3 images; the 64-byte moves (AVX-512BW) and the portable words alike.
    const WindowGeometry shapes[] = {{{5, 7, 4}, Window::square(3, 1, 1)},
                                     {{4, 3, 64}, Window{3, 5, 2, 1, 0, 2, 4, 1}},
                                     {{3, 11, 12}, Window::square(7, 2, 3)},
                                     {{2, 2, 100}, Window::square(3, 1, 0)}};
    pcg32 rng(37);
    for (const WindowGeometry& g : shapes)
        for (const int images : {1, 3}) {
            const auto x = random_int8(rng, g.in.size() * images);
            const Window& w = g.window;
            const int ph = g.in.h + w.pad_top + w.pad_bottom, pw = g.in.w + w.pad_left + w.pad_right, c = g.in.c;
            ASSERT_EQ(padded_input_bytes(g), std::int64_t(ph) * pw * c);
            std::vector<std::uint8_t> expect(std::size_t(padded_input_bytes(g) * images), 0x80);
            for (int b = 0; b < images; ++b)
                for (int y = 0; y < g.in.h; ++y)
                    for (int xx = 0; xx < g.in.w; ++xx)
                        for (int k = 0; k < c; ++k)
                            expect[std::size_t(((std::int64_t(b) * ph + y + w.pad_top) * pw + xx + w.pad_left) * c + k)] =
                                std::uint8_t(x[std::size_t(((std::int64_t(b) * g.in.h + y) * g.in.w + xx) * c + k)]) ^ 0x80;
            std::vector<std::uint8_t> got(expect.size(), 0x11);
            pad_input_into(x.data(), g, images, 0x80, got.data());
            ASSERT_EQ(got, expect) << "in " << g.in.h << "x" << g.in.w << "x" << c << ", " << images << " images";
        }
}

// pad_input_into with every vector kernel the CPU has against the portable one: rows of 1 to
// 390 bytes (whole 32- and 64-byte moves and every length of rest), both masks, 1 to 3 images;
// the input ends at a guard page and so does the output.
TEST(Im2col, PaddedInputOfEveryVectorKernelEqualsThePortableOne) {
    const auto kernels = vector_simd_kernels();
    if (kernels.empty()) GTEST_SKIP() << "this CPU has no AVX2";
    pcg32 rng(43);
    for (int i = 0; i < 300; ++i) {
        WindowGeometry g = random_window_geometry(rng);
        g.in.w = 1 + int(rng(3));   // rows of 1..3 pixels x 1..130 channels
        const int images = 1 + int(rng(3));
        const std::uint8_t mask = rng(2) ? 0x80 : 0x00;
        test_data::GuardedBuffer x(std::size_t(g.in.size() * images));
        for (std::size_t b = 0; b < x.size(); ++b) x.data()[b] = std::uint8_t(rng(256));
        const std::size_t bytes = std::size_t(padded_input_bytes(g) * images);
        std::vector<std::uint8_t> expect(bytes, 0x5A);
        detail::pad_input_into_with(SimdKernel::Portable, x.int8(), g, images, mask, expect.data());
        for (SimdKernel kernel : kernels) {
            test_data::GuardedBuffer got(bytes, 0x5A);
            detail::pad_input_into_with(kernel, x.int8(), g, images, mask, got.data());
            ASSERT_TRUE(std::equal(expect.begin(), expect.end(), got.data()))
                << to_string(kernel) << ", " << describe(g) << ", " << images << " images, mask " << int(mask);
        }
    }
}

TEST(Gemm, VnniConvReadInPlaceEqualsTheDirectConvolution) {
    // gemm_fast_conv: the VNNI kernel reads each output pixel's window straight from the padded
    // input (no IM2COL operand).  Against the direct convolution of every image: stride 1 and 2,
    // padding on every side and uneven, non-square windows, 4 to 64 channels, output channels with
    // a masked tail, 1-3 images (tiles of 6 pixels that cross output rows and images), with and
    // without the depth skip (a kernel row per segment), inputs with zero rows, all zero and
    // extreme; int32 and requantised outputs with a fused residual, 1-3 threads.
    if (!fast_kernel_available(FastKernel::Vnni512)) GTEST_SKIP() << "needs AVX-512 VNNI";
    struct Case {
        WindowGeometry g;
        int n;
    };
    const Case cases[] = {
        {{{7, 7, 64}, Window::square(3, 1, 1)}, 70},
        {{{9, 8, 12}, Window::square(3, 2, 1)}, 17},
        {{{11, 10, 4}, Window::square(5, 1, 2)}, 65},
        {{{8, 9, 8}, Window{3, 5, 1, 2, 2, 1, 0, 2}}, 33},   // non-square, uneven padding
        {{{9, 9, 8}, Window::square(7, 2, 3)}, 16},
        {{{6, 13, 4}, Window{1, 3, 1, 1, 0, 0, 1, 1}}, 20},   // one kernel row, padded left and right
        {{{5, 5, 16}, Window::square(3, 1, 0)}, 64},          // no padding
    };
    pcg32 rng(73);
    for (const Case& c : cases) {
        const std::int64_t m = c.g.m(), image_p = c.g.p(), image_in = c.g.in.size();
        for (const int images : {1, 3})
            for (int input = 0; input < 4; ++input) {
                auto x = random_int8(rng, image_in * images);
                auto w = random_int8(rng, c.n * m);
                if (input == 1)   // every other input row all zero
                    for (std::int64_t y = 0; y < std::int64_t(c.g.in.h) * images; y += 2)
                        std::fill_n(x.begin() + y * c.g.in.w * c.g.in.c, c.g.in.w * c.g.in.c, 0);
                if (input == 2) std::fill(x.begin(), x.end(), 0);
                if (input == 3) {
                    std::fill(w.begin(), w.end(), -128);
                    std::fill(x.begin(), x.end(), 127);
                }
                const auto bias = random_int8(rng, c.n);
                std::vector<std::int32_t> expect;
                for (int b = 0; b < images; ++b) {
                    const std::vector<std::int8_t> image(x.begin() + b * image_in, x.begin() + (b + 1) * image_in);
                    const auto acc = direct_conv(image, c.g, w, bias, 3, c.n);
                    expect.insert(expect.end(), acc.begin(), acc.end());
                }
                const auto residual = random_int8(rng, std::int64_t(expect.size()));
                std::vector<std::int8_t> expect_y(expect.size());
                for (std::size_t i = 0; i < expect.size(); ++i)
                    expect_y[i] = relu8(sat8(std::int64_t(relu8(sat8(round_shift(expect[i], 10)))) + align(residual[i], -2)));
                std::vector<std::uint8_t> padded(std::size_t(padded_input_bytes(c.g) * images), 0x11);
                pad_input_into(x.data(), c.g, images, 0x80, padded.data());
                for (const std::int64_t skip : {std::int64_t(0), std::int64_t(c.g.window.kernel_w) * c.g.in.c}) {
                    const PackedWeights packed(w.data(), bias.data(), 3, c.n, m, FastKernel::Vnni512, skip);
                    ASSERT_TRUE(conv_reads_in_place(packed, c.g));
                    for (const int threads : {1, 2, 3}) {
                        const std::string what = "in " + std::to_string(c.g.in.h) + "x" + std::to_string(c.g.in.w) + "x" +
                                                 std::to_string(c.g.in.c) + " kernel " + std::to_string(c.g.window.kernel_h) +
                                                 "x" + std::to_string(c.g.window.kernel_w) + ", " + std::to_string(images) +
                                                 " images, input " + std::to_string(input) + ", skip " +
                                                 std::to_string(skip) + ", " + std::to_string(threads) + " threads";
                        std::vector<std::int32_t> acc(expect.size(), 12345);
                        GemmOutput wide;
                        wide.acc = acc.data();
                        gemm_fast_conv(packed, padded.data(), c.g, images, wide, threads);
                        ASSERT_EQ(acc, expect) << what;
                        std::vector<std::int8_t> y(expect.size(), 99);
                        GemmOutput out;
                        out.y = y.data();
                        out.out_shift = 10;
                        out.relu = true;
                        out.residual = residual.data();
                        out.residual_shift = -2;
                        out.relu_after_residual = true;
                        gemm_fast_conv(packed, padded.data(), c.g, images, out, threads);
                        ASSERT_EQ(y, expect_y) << what;
                    }
                }
            }
    }
    // Where the kernel cannot read the windows in place it refuses: 3 channels, a 1 x 1 window.
    pcg32 small(5);
    const auto w = random_int8(small, 16 * 27), bias = random_int8(small, 16);
    const WindowGeometry three{{5, 5, 3}, Window::square(3, 1, 1)};
    const PackedWeights packed3(w.data(), bias.data(), 0, 16, 27, FastKernel::Vnni512);
    EXPECT_FALSE(conv_reads_in_place(packed3, three));
    std::vector<std::uint8_t> padded(std::size_t(padded_input_bytes(three)));
    std::vector<std::int32_t> acc(std::size_t(16 * three.p()));
    GemmOutput out;
    out.acc = acc.data();
    EXPECT_THROW(gemm_fast_conv(packed3, padded.data(), three, 1, out, 1), std::invalid_argument);
    const WindowGeometry pointwise{{5, 5, 8}, Window::square(1, 2, 0)};
    const PackedWeights packed1(w.data(), bias.data(), 0, 16, 8, FastKernel::Vnni512);
    EXPECT_FALSE(conv_reads_in_place(packed1, pointwise));
}

TEST(Gemm, ThreadCountNeverChangesTheResult) {
    pcg32 rng(99);
    const std::int64_t n = 70, m = 3 * 3 * 67, p = 1000;
    const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
    std::vector<std::int32_t> one(std::size_t(n * p));
    gemm_fast(w.data(), x.data(), bias.data(), 3, n, m, p, one.data(), 1);
    for (FastKernel k : available_fast_kernels())
        for (int threads : {1, 2, 3, 5, 0}) {
            std::vector<std::int32_t> many(one.size());
            gemm_fast(w.data(), x.data(), bias.data(), 3, n, m, p, many.data(), threads, k);
            EXPECT_EQ(many, one) << to_string(k) << ", " << threads << " threads";
        }
}

TEST(Gemm, RejectsDepthsThatCanOverflowInt32) {
    EXPECT_THROW(check_gemm_fits_int32(131072, 0, "w"), FormatError);
    EXPECT_NO_THROW(check_gemm_fits_int32(131000, 0, "w"));
    EXPECT_THROW(check_gemm_fits_int32(16, 25, "w"), FormatError);
    EXPECT_THROW(check_gemm_fits_int32(0, 0, "w"), FormatError);
}

TEST(SaCycle, ComputeBoundShapeRunsAtOneWavePerRoundPlusPipelineFill) {
    // G = ceil(M / C) = 64 >= R / R_g = 8: the WRB read side (8 B/cycle) outpaces the array, so the
    // only cost beyond waves * G is the drain of the last group (read at cycle waves * G - 1) through
    // the top row: C + R - 2 cycles of systolic delay, 4 pipeline registers (buffer read, A/B, M, P),
    // scale/merge 1, the aggregator's write to the WRB and the read one cycle later (2), and 1
    // because the count is inclusive.
    pcg32 rng(3);
    const std::int64_t n = 128, m = 512, p = 5;
    const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
    std::vector<std::int32_t> acc(std::size_t(n * p));
    const SaConfig cfg{64, 8, 8};
    const SaCycleStats s = sa_cycle_gemm(w.data(), x.data(), m, bias.data(), 0, n, m, p, cfg, acc.data());
    EXPECT_EQ(s.waves, p * 2);
    EXPECT_EQ(s.cycles_per_wave, 64);
    EXPECT_EQ(s.chunks, p * 2 * 8);
    EXPECT_EQ(s.sa_stall_cycles, 0);
    EXPECT_EQ(s.out_of_order_writes, 0);
    EXPECT_EQ(s.cycles, s.waves * 64 - 1 + (cfg.cols + cfg.rows - 2) + 4 + 1 + 2 + 1);
}

TEST(SaCycle, ShallowLayersAreBoundByTheWrbReadRateAndWriteOutOfOrder) {
    // G = 1: the array could start a wave every cycle, but each wave is 8 chunks and the WRB reads
    // one per cycle, so that is the ceiling; the aggregator's fixed slot-per-lane arbitration loses
    // some slots to collisions (the model gives about 0.84 chunk/cycle here; assert >= 3/4).
    // Later waves' low row-blocks overtake earlier waves' high ones (out-of-order WRB writes).
    pcg32 rng(4);
    const std::int64_t n = 64, m = 8, p = 50;
    const auto w = random_int8(rng, n * m), x = random_int8(rng, p * m), bias = random_int8(rng, n);
    std::vector<std::int32_t> acc(std::size_t(n * p)), ref(acc.size());
    const SaConfig cfg{64, 8, 8};
    const SaCycleStats s = sa_cycle_gemm(w.data(), x.data(), m, bias.data(), 2, n, m, p, cfg, acc.data());
    gemm_reference(w.data(), x.data(), m, bias.data(), 2, n, m, p, ref.data());
    EXPECT_EQ(acc, ref);
    EXPECT_EQ(s.chunks, p * 8);
    EXPECT_GE(s.cycles, s.chunks);
    EXPECT_LE(s.cycles, s.chunks * 4 / 3 + cfg.cols + cfg.rows + 11);
    EXPECT_LT(s.compute_cycles * 4, s.cycles);   // the array itself is mostly idle
    EXPECT_GT(s.sa_stall_cycles, 0);
    EXPECT_GT(s.out_of_order_writes, 0);
}

TEST(SaCycle, RejectsBadConfiguration) {
    std::vector<std::int8_t> w(8, 1), x(8, 1), bias(1, 0);
    std::vector<std::int32_t> acc(1);
    EXPECT_THROW(sa_cycle_gemm(w.data(), x.data(), 8, bias.data(), 0, 1, 8, 1, SaConfig{64, 8, 7}, acc.data()),
                 FormatError);
    EXPECT_THROW(sa_cycle_gemm(w.data(), x.data(), 8, bias.data(), 0, 1, 8, 1, SaConfig{64, 0, 8}, acc.data()),
                 FormatError);
}

#ifdef AIMCEMU_AMX_TILE_MODEL
#include "pu_model/amx_tile_model.hpp"

namespace {

// A palette-1 configuration block (the layout LDTILECFG reads) with the given tiles' shapes.
struct TileShapes {
    alignas(64) std::uint8_t block[64] = {1};
    TileShapes& tile(int t, int rows, int bytes_per_row) {
        block[16 + 2 * t] = std::uint8_t(bytes_per_row);
        block[48 + t] = std::uint8_t(rows);
        return *this;
    }
};

}  // namespace

// The model against the instruction's definition, worked out element by element here: signed
// bytes, four products per 32-bit column and group, 32-bit wrap-around of the accumulator.
TEST(AmxTileModel, DotProductOfSignedBytesWrapsInThirtyTwoBits) {
    using namespace aimcemu::detail;
    TileShapes shapes;
    shapes.tile(0, 2, 12).tile(1, 2, 8).tile(2, 2, 12);   // dst 2 x 3 int32, a 2 x 8 bytes, b 2 groups x 3 columns
    _tile_loadconfig(shapes.block);
    const std::int8_t a[2][8] = {{127, -128, 1, -1, 5, -7, 0, 3}, {127, 127, 127, 127, -128, -128, -128, -128}};
    std::int8_t b[2][12];
    for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 12; ++j) b[k][j] = std::int8_t(j % 2 ? -128 : 127 - 9 * j - k);
    std::int32_t acc[2][3] = {{2147483647, 0, -5}, {-2147483647 - 1, 17, 1}};
    _tile_loadd(1, a, 8);
    _tile_loadd(2, b, 12);
    _tile_loadd(0, acc, 12);
    _tile_dpbssd(0, 1, 2);
    std::int32_t got[2][3];
    _tile_stored(0, got, 12);
    _tile_release();
    for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 3; ++n) {
            std::int64_t sum = acc[m][n];
            for (int k = 0; k < 2; ++k)
                for (int i = 0; i < 4; ++i) sum += std::int64_t(a[m][4 * k + i]) * b[k][4 * n + i];
            const auto wrapped = std::int32_t(std::uint32_t(std::uint64_t(sum)));
            EXPECT_EQ(got[m][n], wrapped) << "row " << m << " column " << n;
        }
    EXPECT_LT(got[0][0], 0) << "the first accumulator must have wrapped past INT32_MAX";
}

// Where the hardware faults, the model stops the test: a kernel with a wrong tile configuration
// cannot pass on the model and then fault on an AMX CPU.
TEST(AmxTileModelDeathTest, FaultsWhereTheHardwareWould) {
    using namespace aimcemu::detail;
    EXPECT_DEATH(_tile_zero(0), "before a tile configuration");
    EXPECT_DEATH(
        {
            TileShapes shapes;
            shapes.tile(0, 16, 64).tile(1, 16, 64).tile(2, 15, 64);   // b needs 16 rows for a's 64 bytes
            _tile_loadconfig(shapes.block);
            _tile_dpbssd(0, 1, 2);
        },
        "shapes do not fit");
    EXPECT_DEATH(
        {
            TileShapes shapes;
            shapes.tile(0, 17, 64);
            _tile_loadconfig(shapes.block);
        },
        "beyond palette 1");
    EXPECT_DEATH(
        {
            TileShapes shapes;
            shapes.tile(0, 16, 64).tile(8, 1, 4);
            _tile_loadconfig(shapes.block);
        },
        "beyond palette 1's eight");
    EXPECT_DEATH(
        {
            TileShapes shapes;
            shapes.tile(0, 16, 64);
            shapes.block[1] = 1;   // start_row
            _tile_loadconfig(shapes.block);
        },
        "start row");
}
#endif
