// The residual add of conv layers with AVX-512BW (see postproc.hpp, detail::residual_add_avx512).
//
// Why: ResNet-50's bottleneck outputs take a residual on 5.5 M values per image; the plain loop,
// vectorised by the compiler for the baseline ISA (16 bytes per step, widened to int32), was 8 %
// of a pass's CPU time.  Here 32 values per step in int16 lanes: exact, since |r << s| <= 2^15
// for the alignment shifts (-8..8) and the add saturates in int16 only where the int8 result
// saturates anyway (|y| <= 128 cannot move a saturated sum back into range).
//
// Compiled for AVX-512BW through a target pragma and entered only after
// detail::cpu_has_avx512bw() said yes; no standard-library templates (common/isa_target.hpp).
#include <immintrin.h>

#include <cstdint>

#include "pu_model/postproc.hpp"
#include "common/isa_target.hpp"

AIMCEMU_ISA_BEGIN("avx512f,avx512bw,avx512vl")

namespace aimcemu::detail {

void residual_add_avx512(std::int8_t* y, const std::int8_t* r, std::int64_t count, int shift, bool relu) {
    const __m256i floor = _mm256_set1_epi8(relu ? 0 : -128);
    const __m128i left = _mm_cvtsi32_si128(shift > 0 ? shift : 0);
    const __m128i right = _mm_cvtsi32_si128(shift < 0 ? -shift : 0);
    const __m128i right_less_one = _mm_cvtsi32_si128(shift < 0 ? -shift - 1 : 0);
    const __m512i one = _mm512_set1_epi16(1);
    for (std::int64_t at = 0; at < count; at += 32) {
        const std::int64_t left_over = count - at;
        const __mmask32 mask = left_over >= 32 ? ~__mmask32(0) : (__mmask32(1) << left_over) - 1;
        const __m512i yw = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, y + at));
        const __m512i rw = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, r + at));
        // align(r, shift): r << shift, or round half up of r / 2^-shift (round_shift32's form:
        // the floor plus bit -shift - 1 of r).
        const __m512i aligned = shift >= 0 ? _mm512_sll_epi16(rw, left)
                                           : _mm512_add_epi16(_mm512_sra_epi16(rw, right),
                                                              _mm512_and_si512(_mm512_sra_epi16(rw, right_less_one), one));
        const __m256i sum = _mm512_cvtsepi16_epi8(_mm512_adds_epi16(yw, aligned));   // sat8
        _mm256_mask_storeu_epi8(y + at, mask, _mm256_max_epi8(sum, floor));
    }
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
