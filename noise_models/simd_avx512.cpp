// AVX-512 implementation of noise_models/simd.hpp (simd_kernels.hpp's avx512::): eight doubles
// per step.  The math and the kernels are noise_models/simd_body.inc's; this file defines the
// vector operations it is written in, for 512-bit vectors, and the vector pcg32 generator.
//
// Compiled for AVX-512 F/DQ/VL through a target pragma and entered only through simd.cpp's
// dispatch, after a CPU check.  Like the AVX2 file it uses no standard-library templates (no
// AVX-512 code can be merged into inline functions that run elsewhere).  A partial last vector
// is loaded and stored under a lane mask instead of through a padded copy.
//
// Keeping the bits equal to AVX2's: every operation maps to the AVX-512 instruction with the
// same IEEE result (fmadd, div, sqrt, round-to-nearest via roundscale, min/max with the same
// operand order); AVX2's blendv selections become mask blends on the same comparisons, its sign
// XORs masked XORs; the exact u32 -> double conversion uses vcvtudq2pd instead of the 2^52
// trick (both exact).
#include <immintrin.h>

#include <cstdint>

#include "noise_models/simd_kernels.hpp"
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx512f,avx512dq,avx512vl,avx2,fma")

namespace aimcemu::noise::simd::avx512 {
namespace {

using V = __m512d;
using Mask = __mmask8;
using Bits = __m512i;
using Int32s = __m256i;   // one 32-bit integer per double lane
using Int32Mask = __mmask8;
constexpr std::size_t kLanes = 8;

// The lanes [0, count) of a vector (all eight when count >= 8).
inline Mask lanes(std::size_t count) { return count >= kLanes ? Mask(0xFF) : Mask((1u << count) - 1u); }

inline V splat(double v) { return _mm512_set1_pd(v); }
inline V zero() { return _mm512_setzero_pd(); }
inline V add(V a, V b) { return _mm512_add_pd(a, b); }
inline V sub(V a, V b) { return _mm512_sub_pd(a, b); }
inline V mul(V a, V b) { return _mm512_mul_pd(a, b); }
inline V div(V a, V b) { return _mm512_div_pd(a, b); }
inline V fmadd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
inline V fnmadd(V a, V b, V c) { return _mm512_fnmadd_pd(a, b, c); }
inline V sqrt(V a) { return _mm512_sqrt_pd(a); }
inline V min(V a, V b) { return _mm512_min_pd(a, b); }
inline V max(V a, V b) { return _mm512_max_pd(a, b); }
inline V vabs(V v) { return _mm512_andnot_pd(splat(-0.0), v); }
// roundscale with scale 0 and round-to-nearest-even is AVX2's _mm256_round_pd(TO_NEAREST_INT).
inline V round_nearest(V v) { return _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

inline Mask greater(V a, V b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
inline Mask greater_equal(V a, V b) { return _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ); }
inline Mask equal(V a, V b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
inline V select(Mask m, V if_set, V if_clear) { return _mm512_mask_blend_pd(m, if_clear, if_set); }
inline Mask either(Mask a, Mask b) { return Mask(a | b); }
inline bool all_lanes(Mask m) { return m == Mask(0xFF); }
inline V negate_where(V v, Mask m) { return _mm512_mask_xor_pd(v, m, v, splat(-0.0)); }

inline Bits as_bits(V v) { return _mm512_castpd_si512(v); }
inline V from_bits(Bits b) { return _mm512_castsi512_pd(b); }
inline Bits set64(long long v) { return _mm512_set1_epi64(v); }
inline Bits and64(Bits a, Bits b) { return _mm512_and_si512(a, b); }
inline Bits or64(Bits a, Bits b) { return _mm512_or_si512(a, b); }
inline Bits add64(Bits a, Bits b) { return _mm512_add_epi64(a, b); }
template <int N> inline Bits shift_right64(Bits b) { return _mm512_srli_epi64(b, N); }
template <int N> inline Bits shift_left64(Bits b) { return _mm512_slli_epi64(b, N); }

inline Int32s set32(int v) { return _mm256_set1_epi32(v); }
inline Int32s and32(Int32s a, Int32s b) { return _mm256_and_si256(a, b); }
inline Int32s xor32(Int32s a, Int32s b) { return _mm256_xor_si256(a, b); }
inline Int32s sub32(Int32s a, Int32s b) { return _mm256_sub_epi32(a, b); }
template <int N> inline Int32s shift_right32(Int32s v) { return _mm256_srli_epi32(v, N); }
inline Int32Mask equal32(Int32s a, Int32s b) { return _mm256_cmpeq_epi32_mask(a, b); }
inline Int32s select32(Int32Mask m, Int32s if_set, Int32s if_clear) { return _mm256_mask_blend_epi32(m, if_clear, if_set); }
inline Mask widen(Int32Mask m) { return m; }   // one mask bit per lane either way
inline V int32_to_double(Int32s v) { return _mm512_cvtepi32_pd(v); }
inline V uint32_to_double(Int32s v) { return _mm512_cvtepu32_pd(v); }

inline V load(const double* p, std::size_t count, double fill) {
    if (count >= kLanes) return _mm512_loadu_pd(p);
    return _mm512_mask_loadu_pd(splat(fill), lanes(count), p);
}
inline void store(double* p, V v, std::size_t count) {
    if (count >= kLanes) {
        _mm512_storeu_pd(p, v);
        return;
    }
    _mm512_mask_storeu_pd(p, lanes(count), v);
}
inline Int32s load_u32(const std::uint32_t* p, std::size_t count) { return _mm256_maskz_loadu_epi32(lanes(count), p); }
// The a and b outputs of up to eight pairs stored a0 b0 a1 b1 ... (missing pairs are zeros).
inline void load_pairs(const std::uint32_t* raw, std::size_t pairs, Int32s& a, Int32s& b) {
    const __m512i ab = pairs >= kLanes ? _mm512_loadu_si512(raw)
                                       : _mm512_maskz_loadu_epi32(__mmask16((1u << (2 * pairs)) - 1u), raw);
    const __m512i split =
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), ab);
    a = _mm512_castsi512_si256(split);
    b = _mm512_extracti64x4_epi64(split, 1);
}

// Interleaves two vectors: lo = a0 b0 a1 b1 a2 b2 a3 b3, hi = a4 b4 ... a7 b7.
inline V interleave_lo(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), b); }
inline V interleave_hi(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), b); }
// Even and odd elements of the 16 doubles in (a, b), in order (g+ and g- of eight weights).
inline V evens(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), b); }
inline V odds(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), b); }

}  // namespace

#include "noise_models/simd_body.inc"

void pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n) {
    // Lane k holds the state k steps ahead; all eight step together (detail::pcg32_lanes).
    const detail::Pcg32Lanes lanes = detail::pcg32_lanes(state, increment);
    __m512i s = _mm512_loadu_si512(lanes.state);
    const __m512i mul = _mm512_set1_epi64(std::int64_t(lanes.multiplier)), add = _mm512_set1_epi64(std::int64_t(lanes.increment));
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        // XSH-RR: rotate the 32 bits ((s >> 18) ^ s) >> 27 right by s >> 59.
        const __m256i xorshifted = _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_xor_si512(_mm512_srli_epi64(s, 18), s), 27));
        const __m256i rot = _mm512_cvtepi64_epi32(_mm512_srli_epi64(s, 59));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_rorv_epi32(xorshifted, rot));
        s = _mm512_add_epi64(_mm512_mullo_epi64(s, mul), add);
    }
    // The state after the i outputs written is s's first lane.
    state = detail::pcg32_outputs_scalar(std::uint64_t(_mm_cvtsi128_si64(_mm512_castsi512_si128(s))), increment, out + i, n - i);
}

}  // namespace aimcemu::noise::simd::avx512

AIMCEMU_ISA_END()
