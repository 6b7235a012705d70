// The residual add of conv layers with AVX2 (see postproc.hpp, detail::residual_add_avx2), for
// CPUs without AVX-512 (AMD Zen 2 and 3).
//
// Why: the plain loop, vectorised by the compiler for the baseline ISA, takes 16 bytes per step
// widened to int32 (on AVX-512 CPUs the same loop was 8 % of a ResNet-50 pass:
// postproc_avx512.cpp).  Here 32 values per step in two vectors of int16 lanes, exact for the
// same reason as the AVX-512 form: |r << s| <= 2^15 for the alignment shifts (-8..8), and the
// add saturates in int16 only where the int8 result saturates anyway.  AVX2 has no byte masks, so
// the last count % 32 values go through a 32-byte local copy (nothing past y or r is read or
// written).
//
// Compiled for AVX2 through a target pragma and entered only after detail::cpu_has_avx2() said
// yes; no standard-library templates (common/isa_target.hpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pu_model/postproc.hpp"
#include "common/isa_target.hpp"

AIMCEMU_ISA_BEGIN("avx2")

namespace aimcemu::detail {
namespace {

// The shift counts and constants of one call.
struct Residual {
    bool shift_left;
    __m128i left, right, right_less_one;
    __m256i one, floor;
};

// align(r, shift) on 16 int16 lanes: r << shift, or round half up of r / 2^-shift (round_shift32's
// form: the floor plus bit -shift - 1 of r).
inline __m256i align16(__m256i r, const Residual& a) {
    if (a.shift_left) return _mm256_sll_epi16(r, a.left);
    return _mm256_add_epi16(_mm256_sra_epi16(r, a.right), _mm256_and_si256(_mm256_sra_epi16(r, a.right_less_one), a.one));
}

// sat8(y + align(r, shift)), then the ReLU floor, for 32 values.
inline __m256i residual_step(__m256i y, __m256i r, const Residual& a) {
    const __m256i y_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(y));
    const __m256i y_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(y, 1));
    const __m256i r_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(r));
    const __m256i r_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(r, 1));
    const __m256i sum_lo = _mm256_adds_epi16(y_lo, align16(r_lo, a));
    const __m256i sum_hi = _mm256_adds_epi16(y_hi, align16(r_hi, a));
    // packs works per 128-bit half (lo 0-7, hi 0-7, lo 8-15, hi 8-15): put the quarters in order.
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(sum_lo, sum_hi), 0xD8);
    return _mm256_max_epi8(bytes, a.floor);
}

}  // namespace

void residual_add_avx2(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu) {
    const Residual a{shift >= 0,
                     _mm_cvtsi32_si128(shift > 0 ? shift : 0),
                     _mm_cvtsi32_si128(shift < 0 ? -shift : 0),
                     _mm_cvtsi32_si128(shift < 0 ? -shift - 1 : 0),
                     _mm256_set1_epi16(1),
                     _mm256_set1_epi8(char(relu ? 0 : -128))};
    std::int64_t at = 0;
    for (; at + 32 <= count; at += 32) {
        const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + at));
        const __m256i rv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + at));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + at), residual_step(yv, rv, a));
    }
    const std::int64_t rest = count - at;   // < 32
    if (rest == 0) return;
    alignas(32) std::int8_t y_rest[32] = {}, r_rest[32] = {};
    std::memcpy(y_rest, y + at, std::size_t(rest));
    std::memcpy(r_rest, r + at, std::size_t(rest));
    const __m256i sum = residual_step(_mm256_load_si256(reinterpret_cast<const __m256i*>(y_rest)),
                                      _mm256_load_si256(reinterpret_cast<const __m256i*>(r_rest)), a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(y_rest), sum);
    std::memcpy(y + at, y_rest, std::size_t(rest));
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
