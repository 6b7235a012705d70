// Post-processing rules of the PU (see postproc.hpp for the contract).
#include "pu_model/postproc.hpp"

#include <algorithm>
#include <vector>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"

namespace aimcemu {

namespace {

// round_shift for int32 without a wider type, so the loops below vectorise: with q = v >> s
// (floor) and r = v - q * 2^s, (v + 2^(s-1)) >> s is q + [r >= 2^(s-1)], and that bracket is bit
// s-1 of v.  Exact for every int32 v and 0 <= s <= 31.
inline std::int32_t round_shift32(std::int32_t v, int s) { return s == 0 ? v : (v >> s) + ((v >> (s - 1)) & 1); }

inline std::int8_t clamp8(std::int32_t v, std::int32_t lo) { return std::int8_t(std::min(std::max(v, lo), 127)); }

void requantize_slice(const std::int32_t* acc, std::int64_t count, int out_shift, bool relu, std::int8_t* out) {
    const std::int32_t lo = relu ? 0 : -128;   // ReLU after sat8 is a clamp at 0
    if (out_shift == 0) {
        for (std::int64_t i = 0; i < count; ++i) out[i] = clamp8(acc[i], lo);
        return;
    }
    const int s = out_shift;
    for (std::int64_t i = 0; i < count; ++i) out[i] = clamp8((acc[i] >> s) + ((acc[i] >> (s - 1)) & 1), lo);
}

}  // namespace

void requantize(const std::int32_t* acc, std::int64_t count, int out_shift, bool relu, std::int8_t* out,
                int threads) {
    constexpr std::int64_t kSlice = std::int64_t(1) << 16;   // smaller slices cost more than they save
    const std::int64_t slices = (count + kSlice - 1) / kSlice;
    if (threads == 1 || slices <= 1) {
        requantize_slice(acc, count, out_shift, relu, out);
        return;
    }
    parallel_for(slices, threads, [&](std::int64_t s) {
        const std::int64_t begin = s * kSlice;
        requantize_slice(acc + begin, std::min(kSlice, count - begin), out_shift, relu, out + begin);
    });
}

SimdKernel residual_add_kernel() {
    static const SimdKernel kernel = detail::best_simd_kernel();   // the CPU does not change
    return kernel;
}

namespace {

void residual_add_portable(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu) {
    const std::int32_t lo = relu ? 0 : -128;
    if (shift >= 0) {
        for (std::int64_t i = 0; i < count; ++i) y[i] = clamp8(std::int32_t(y[i]) + (std::int32_t(r[i]) << shift), lo);
        return;
    }
    for (std::int64_t i = 0; i < count; ++i) y[i] = clamp8(std::int32_t(y[i]) + round_shift32(r[i], -shift), lo);
}

void residual_add_by(SimdKernel kernel, std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift,
                     bool relu) {
    // The vector forms work in int16 lanes, exact only for the alignment range's shifts.
    const bool in_range = shift >= kAlignShiftRange.min && shift <= kAlignShiftRange.max;
    if (kernel == SimdKernel::Avx512 && in_range) return detail::residual_add_avx512(y, r, count, shift, relu);
    if (kernel == SimdKernel::Avx2 && in_range) return detail::residual_add_avx2(y, r, count, shift, relu);
    residual_add_portable(y, r, count, shift, relu);
}

}  // namespace

void residual_add(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu) {
    residual_add_by(residual_add_kernel(), y, r, count, shift, relu);
}

void detail::residual_add_with(SimdKernel kernel, std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift,
                               bool relu) {
    require_simd_kernel(kernel);
    residual_add_by(kernel, y, r, count, shift, relu);
}

void add_tensors(const std::int8_t* a, int shift_a, const std::int8_t* b, int shift_b, std::int64_t count, bool relu,
                 std::int8_t* out) {
    for (std::int64_t i = 0; i < count; ++i) {
        const std::int8_t sum = sat8(align(a[i], shift_a) + align(b[i], shift_b));
        out[i] = relu ? relu8(sum) : sum;
    }
}

void relu_inplace(std::int8_t* y, std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) y[i] = relu8(y[i]);
}

namespace {

// Calls visit(out_index_base, in_pixel_base) for every in-image tap of every output pixel, with
// the number of taps (including padding) of that window.
template <typename Start, typename Visit, typename Finish>
void for_each_window(const WindowGeometry& g, Start start, Visit visit, Finish finish) {
    const int oh = g.out_h(), ow = g.out_w(), c = g.in.c;
    const Window& w = g.window;
    for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
            const std::int64_t out_base = (std::int64_t(oy) * ow + ox) * c;
            start(out_base);
            for (int ky = 0; ky < w.kernel_h; ++ky) {
                const int iy = oy * w.stride_h - w.pad_top + ky;
                if (iy < 0 || iy >= g.in.h) continue;
                for (int kx = 0; kx < w.kernel_w; ++kx) {
                    const int ix = ox * w.stride_w - w.pad_left + kx;
                    if (ix < 0 || ix >= g.in.w) continue;
                    visit(out_base, (std::int64_t(iy) * g.in.w + ix) * c);
                }
            }
            finish(out_base);
        }
    }
}

}  // namespace

void max_pool(const std::int8_t* x, const WindowGeometry& g, std::int8_t* out) {
    g.validate("max_pool");
    const int c = g.in.c;
    // Each pad < its axis' kernel guarantees every window holds at least one in-image tap, so padding never wins.
    std::vector<std::int8_t> best(std::size_t(c), 0);
    for_each_window(
        g, [&](std::int64_t) { std::fill(best.begin(), best.end(), std::int8_t(-128)); },
        [&](std::int64_t, std::int64_t in) {
            for (int ch = 0; ch < c; ++ch) best[std::size_t(ch)] = std::max(best[std::size_t(ch)], x[in + ch]);
        },
        [&](std::int64_t o) { std::copy(best.begin(), best.end(), out + o); });
}

void avg_pool(const std::int8_t* x, const WindowGeometry& g, int avg_mult, int out_shift, std::int8_t* out) {
    g.validate("avg_pool");
    if (std::int64_t(avg_mult < 0 ? -avg_mult : avg_mult) * 128 * g.window.taps() >= (std::int64_t(1) << 31))
        throw FormatError("<memory>", "avg_pool", "avg_mult * 128 * kernel_h * kernel_w can overflow the int32 accumulator");
    const int c = g.in.c;
    std::vector<std::int32_t> sum(std::size_t(c), 0);
    for_each_window(
        g, [&](std::int64_t) { std::fill(sum.begin(), sum.end(), 0); },
        [&](std::int64_t, std::int64_t in) {
            for (int ch = 0; ch < c; ++ch) sum[std::size_t(ch)] += x[in + ch];
        },
        [&](std::int64_t o) {
            for (int ch = 0; ch < c; ++ch)
                out[o + ch] = sat8(round_shift(std::int64_t(avg_mult) * sum[std::size_t(ch)], out_shift));
        });
}

}  // namespace aimcemu
