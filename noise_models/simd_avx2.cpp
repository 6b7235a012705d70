// AVX2 + FMA implementation of noise_models/simd.hpp (simd_kernels.hpp's avx2::): four doubles
// per step.  The math and the kernels are noise_models/simd_body.inc's; this file defines the
// vector operations it is written in, for 256-bit vectors.
//
// Compiled for AVX2/FMA through a target pragma and entered only through simd.cpp's dispatch,
// after a CPU check.  It uses no standard-library templates, so no AVX2 code can be merged into
// inline functions that run elsewhere.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "noise_models/simd_kernels.hpp"
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx2,fma")

namespace aimcemu::noise::simd::avx2 {
namespace {

using V = __m256d;
using Mask = __m256d;      // all ones in the selected lanes, as the compare instructions give it
using Bits = __m256i;
using Int32s = __m128i;    // one 32-bit integer per double lane
using Int32Mask = __m128i;
constexpr std::size_t kLanes = 4;

inline V splat(double v) { return _mm256_set1_pd(v); }
inline V zero() { return _mm256_setzero_pd(); }
inline V add(V a, V b) { return _mm256_add_pd(a, b); }
inline V sub(V a, V b) { return _mm256_sub_pd(a, b); }
inline V mul(V a, V b) { return _mm256_mul_pd(a, b); }
inline V div(V a, V b) { return _mm256_div_pd(a, b); }
inline V fmadd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
inline V fnmadd(V a, V b, V c) { return _mm256_fnmadd_pd(a, b, c); }
inline V sqrt(V a) { return _mm256_sqrt_pd(a); }
inline V min(V a, V b) { return _mm256_min_pd(a, b); }
inline V max(V a, V b) { return _mm256_max_pd(a, b); }
inline V vabs(V v) { return _mm256_andnot_pd(splat(-0.0), v); }
inline V round_nearest(V v) { return _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

inline Mask greater(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
inline Mask greater_equal(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
inline Mask equal(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
inline V select(Mask m, V if_set, V if_clear) { return _mm256_blendv_pd(if_clear, if_set, m); }
inline Mask either(Mask a, Mask b) { return _mm256_or_pd(a, b); }
inline bool all_lanes(Mask m) { return _mm256_movemask_pd(m) == 0xF; }
inline V negate_where(V v, Mask m) { return _mm256_xor_pd(v, _mm256_and_pd(m, splat(-0.0))); }

inline Bits as_bits(V v) { return _mm256_castpd_si256(v); }
inline V from_bits(Bits b) { return _mm256_castsi256_pd(b); }
inline Bits set64(long long v) { return _mm256_set1_epi64x(v); }
inline Bits and64(Bits a, Bits b) { return _mm256_and_si256(a, b); }
inline Bits or64(Bits a, Bits b) { return _mm256_or_si256(a, b); }
inline Bits add64(Bits a, Bits b) { return _mm256_add_epi64(a, b); }
template <int N> inline Bits shift_right64(Bits b) { return _mm256_srli_epi64(b, N); }
template <int N> inline Bits shift_left64(Bits b) { return _mm256_slli_epi64(b, N); }

inline Int32s set32(int v) { return _mm_set1_epi32(v); }
inline Int32s and32(Int32s a, Int32s b) { return _mm_and_si128(a, b); }
inline Int32s xor32(Int32s a, Int32s b) { return _mm_xor_si128(a, b); }
inline Int32s sub32(Int32s a, Int32s b) { return _mm_sub_epi32(a, b); }
template <int N> inline Int32s shift_right32(Int32s v) { return _mm_srli_epi32(v, N); }
inline Int32Mask equal32(Int32s a, Int32s b) { return _mm_cmpeq_epi32(a, b); }
inline Int32s select32(Int32Mask m, Int32s if_set, Int32s if_clear) { return _mm_blendv_epi8(if_clear, if_set, m); }
inline Mask widen(Int32Mask m) { return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(m)); }
inline V int32_to_double(Int32s v) { return _mm256_cvtepi32_pd(v); }
// Exact: the u32 goes into the low mantissa bits of 2^52, and 2^52 comes off again.
inline V uint32_to_double(Int32s v) {
    return sub(from_bits(or64(_mm256_cvtepu32_epi64(v), set64(0x4330000000000000LL))), splat(4503599627370496.0));
}

// Loads/stores of a possibly partial vector (count < 4 pads with `fill`).
inline V load(const double* p, std::size_t count, double fill) {
    if (count >= kLanes) return _mm256_loadu_pd(p);
    double padded[kLanes] = {fill, fill, fill, fill};
    std::memcpy(padded, p, count * sizeof(double));
    return _mm256_loadu_pd(padded);
}
inline void store(double* p, V v, std::size_t count) {
    if (count >= kLanes) {
        _mm256_storeu_pd(p, v);
        return;
    }
    double lanes[kLanes];
    _mm256_storeu_pd(lanes, v);
    std::memcpy(p, lanes, count * sizeof(double));
}
inline Int32s load_u32(const std::uint32_t* p, std::size_t count) {
    std::uint32_t lanes[kLanes] = {0, 0, 0, 0};
    std::memcpy(lanes, p, (count < kLanes ? count : kLanes) * sizeof(std::uint32_t));
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(lanes));
}
// The a and b outputs of up to four pairs stored a0 b0 a1 b1 ... (missing pairs are zeros).
inline void load_pairs(const std::uint32_t* raw, std::size_t pairs, Int32s& a, Int32s& b) {
    __m256i ab;
    if (pairs >= kLanes) {
        ab = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw));
    } else {
        std::uint32_t lanes[2 * kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(lanes, raw, 2 * pairs * sizeof(std::uint32_t));
        ab = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes));
    }
    const __m256i split = _mm256_permutevar8x32_epi32(ab, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    a = _mm256_castsi256_si128(split);
    b = _mm256_extracti128_si256(split, 1);
}

// Even and odd elements of the 8 doubles in (a, b), in order (g+ and g- of four weights).
inline V evens(V a, V b) { return _mm256_permute4x64_pd(_mm256_unpacklo_pd(a, b), 0xD8); }
inline V odds(V a, V b) { return _mm256_permute4x64_pd(_mm256_unpackhi_pd(a, b), 0xD8); }
// Interleaves two vectors: lo = a0 b0 a1 b1, hi = a2 b2 a3 b3.
inline V interleave_lo(V a, V b) { return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x20); }
inline V interleave_hi(V a, V b) { return _mm256_permute2f128_pd(_mm256_unpacklo_pd(a, b), _mm256_unpackhi_pd(a, b), 0x31); }


// A 64-bit product's low half from 32-bit multiplies (AVX2 has no vpmullq):
// lo64(s a) = s_lo a_lo + ((s_hi a_lo + s_lo a_hi) << 32), where a_hi holds a's high half.
inline __m256i mul_lo64(__m256i s, __m256i a, __m256i a_hi) {
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(s, 32), a), _mm256_mul_epu32(s, a_hi));
    return _mm256_add_epi64(_mm256_mul_epu32(s, a), _mm256_slli_epi64(cross, 32));
}

// XSH-RR of four states; each output in the low 32 bits of its 64-bit lane (high bits garbage).
inline __m256i xsh_rr(__m256i s) {
    const __m256i xorshifted = _mm256_srli_epi64(_mm256_xor_si256(_mm256_srli_epi64(s, 18), s), 27);
    const __m256i rot = _mm256_srli_epi64(s, 59);
    // Rotate the low 32 bits right by rot: 32-bit shifts act on the low half on its own.
    const __m256i left = _mm256_and_si256(_mm256_sub_epi32(_mm256_set1_epi64x(32), rot), _mm256_set1_epi64x(31));
    return _mm256_or_si256(_mm256_srlv_epi32(xorshifted, rot), _mm256_sllv_epi32(xorshifted, left));
}

}  // namespace

// Eight states in two vectors: `even` holds the states 0, 2, 4, 6 steps ahead, `odd` 1, 3, 5, 7,
// so that one shift and one blend put the eight outputs in order.  The two vectors' chains are independent, which keeps the multiplier
// busy where one chain (three multiplies deep) would wait on itself.
void pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n) {
    const detail::Pcg32Lanes lanes = detail::pcg32_lanes(state, increment);
    const std::uint64_t* lane = lanes.state;
    __m256i even = _mm256_setr_epi64x(std::int64_t(lane[0]), std::int64_t(lane[2]), std::int64_t(lane[4]), std::int64_t(lane[6]));
    __m256i odd = _mm256_setr_epi64x(std::int64_t(lane[1]), std::int64_t(lane[3]), std::int64_t(lane[5]), std::int64_t(lane[7]));
    const __m256i step_mul = _mm256_set1_epi64x(std::int64_t(lanes.multiplier));
    const __m256i step_mul_hi = _mm256_set1_epi64x(std::int64_t(lanes.multiplier >> 32));
    const __m256i step_add = _mm256_set1_epi64x(std::int64_t(lanes.increment));
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        // Dwords: even lane k's output at 2k, odd lane k's (shifted up) at 2k + 1.
        const __m256i outputs = _mm256_blend_epi32(xsh_rr(even), _mm256_slli_epi64(xsh_rr(odd), 32), 0xAA);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), outputs);
        even = _mm256_add_epi64(mul_lo64(even, step_mul, step_mul_hi), step_add);
        odd = _mm256_add_epi64(mul_lo64(odd, step_mul, step_mul_hi), step_add);
    }
    // The state after the i outputs written is even's first lane.
    state = detail::pcg32_outputs_scalar(std::uint64_t(_mm256_extract_epi64(even, 0)), increment, out + i, n - i);
}

#include "noise_models/simd_body.inc"

}  // namespace aimcemu::noise::simd::avx2

AIMCEMU_ISA_END()
