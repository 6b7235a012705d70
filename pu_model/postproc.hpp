// Post-processing of the PU: requantisation, ReLU, residual add, add layers and pooling.
//
// The rules (formats/network.hpp, docs/arithmetic.md), all in exact integer arithmetic:
//   round_shift(v, s) = (v + 2^(s-1)) >> s for s > 0 (arithmetic shift: round half up), v for s = 0
//   align(r, s)       = r << s for s >= 0, round_shift(r, -s) for s < 0
//   sat8(v)           = clamp(v, -128, 127)
//   conv / linear:  y = sat8(round_shift(acc, out_shift)), relu if `relu`
//   residual:       y = sat8(y + align(r, residual_shift)), relu if `relu_after_residual`
//   add layer:      y = sat8(align(a, input_shift) + align(b, residual_shift)), relu if `relu` or
//                   `relu_after_residual`
//   max_pool:       exact max over the window, padding never wins; relu if `relu`
//   avg_pool:       y = sat8(round_shift(avg_mult * window_sum, out_shift)) with zero padding
//                   counted in the window (it is a GEMM with a constant weight); relu if `relu`
#pragma once
#include <cstdint>

#include "pu_model/im2col.hpp"

namespace aimcemu {

inline std::int64_t round_shift(std::int64_t v, int s) {
    return s == 0 ? v : (v + (std::int64_t(1) << (s - 1))) >> s;   // >> of a signed value is arithmetic (C++20)
}
inline std::int64_t align(std::int64_t r, int s) { return s >= 0 ? r * (std::int64_t(1) << s) : round_shift(r, -s); }
inline std::int8_t sat8(std::int64_t v) { return std::int8_t(v < -128 ? -128 : (v > 127 ? 127 : v)); }
inline std::int8_t relu8(std::int8_t v) { return v < 0 ? std::int8_t(0) : v; }

// out[i] = sat8(round_shift(acc[i], out_shift)), then ReLU if asked.  `threads` > 1 splits large
// arrays over the worker pool in fixed slices; the bytes written never depend on it.
void requantize(const std::int32_t* acc, std::int64_t count, int out_shift, bool relu, std::int8_t* out,
                int threads = 1);
// y[i] = sat8(y[i] + align(r[i], shift)), then ReLU if asked.
void residual_add(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu);
// The kernel residual_add runs for shifts in the alignment range (-8..8; others take the portable
// loop): the widest this CPU has, chosen at the first call and kept.  Tests check it against CPUID
// read on their own, so that a vector path cannot silently drop out.
SimdKernel residual_add_kernel();
namespace detail {
// residual_add with a kernel named by the caller (tests compare every kernel the CPU has with
// the portable one).  Throws std::invalid_argument unless simd_kernel_available(kernel).
void residual_add_with(SimdKernel kernel, std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift,
                       bool relu);
// residual_add in 32-value AVX-512BW steps (postproc_avx512.cpp; call only when
// cpu_has_avx512bw(); shift in the alignment range -8..8).  residual_add dispatches to it.
void residual_add_avx512(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu);
// The same in 32-value AVX2 steps (postproc_avx2.cpp; call only when cpu_has_avx2(); shift in
// -8..8).
void residual_add_avx2(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu);
}  // namespace detail
// out[i] = sat8(align(a[i], shift_a) + align(b[i], shift_b)), then ReLU if asked.
void add_tensors(const std::int8_t* a, int shift_a, const std::int8_t* b, int shift_b, std::int64_t count, bool relu,
                 std::int8_t* out);
void relu_inplace(std::int8_t* y, std::int64_t count);

// HWC pooling on an input of shape g.in; outputs g.out_h() x g.out_w() x g.in.c.
void max_pool(const std::int8_t* x, const WindowGeometry& g, std::int8_t* out);
// Throws FormatError if avg_mult * 128 * k * k can overflow int32.
void avg_pool(const std::int8_t* x, const WindowGeometry& g, int avg_mult, int out_shift, std::int8_t* out);

}  // namespace aimcemu
