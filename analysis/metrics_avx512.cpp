// AVX-512BW kernel of the activation metrics' exact sums (see metrics_kernels.hpp).
//
// Why: with the metrics taken in the PU's pass (emulator/round_metrics.hpp) every noisy round
// compares every layer with its reference, and the baseline build's SSE2 loop was about a tenth
// of an all-AIMC ResNet-50 run's CPU time.  Here 64 int8 pairs per step are widened to int16 and
// multiplied and pair-summed into int32 lanes with vpmaddwd (a pair of terms is at most
// 2 * 255^2, and a block of kMetricBlock elements gives each of the 16 lanes at most
// 2^15 / 16 * 65025 < 2^31); mismatches are a byte compare's mask, counted with popcnt.  Sums are
// exact integers, so the results equal the plain loop's bit for bit.
//
// Like the other ISA kernels: compiled for the ISA through a target pragma (with a clang
// attribute twin), entered only after cpu_has_avx512bw_metrics() said yes.
#include <immintrin.h>

#include <cstdint>

#include "analysis/metrics_kernels.hpp"
#include "common/isa_target.hpp"

namespace aimcemu::detail {

bool cpu_has_avx512bw_metrics() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

}  // namespace aimcemu::detail

AIMCEMU_ISA_BEGIN("avx2,avx512f,avx512bw,popcnt")

namespace aimcemu::detail {
namespace {

// The int32 lanes of `v` summed in int64.
std::int64_t lane_total(__m512i v) {
    const __m512i low = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
    const __m512i high = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
    return _mm512_reduce_add_epi64(_mm512_add_epi64(low, high));
}

}  // namespace

MetricSums metric_sums_avx512(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n) {
    MetricSums total;
    for (std::size_t begin = 0; begin < n; begin += kMetricBlock) {
        const std::size_t end = n - begin < kMetricBlock ? n : begin + kMetricBlock;
        __m512i rr = _mm512_setzero_si512(), nn = rr, rn = rr, dd = rr;
        std::size_t i = begin;
        for (; i + 64 <= end; i += 64) {
            const __m512i n8 = _mm512_loadu_si512(noisy + i), r8 = _mm512_loadu_si512(reference + i);
            total.mismatches += std::int64_t(_mm_popcnt_u64(_mm512_cmpneq_epi8_mask(n8, r8)));
            for (int half = 0; half < 2; ++half) {
                const __m512i n16 = _mm512_cvtepi8_epi16(half ? _mm512_extracti64x4_epi64(n8, 1) : _mm512_castsi512_si256(n8));
                const __m512i r16 = _mm512_cvtepi8_epi16(half ? _mm512_extracti64x4_epi64(r8, 1) : _mm512_castsi512_si256(r8));
                const __m512i d16 = _mm512_sub_epi16(n16, r16);
                rr = _mm512_add_epi32(rr, _mm512_madd_epi16(r16, r16));
                nn = _mm512_add_epi32(nn, _mm512_madd_epi16(n16, n16));
                rn = _mm512_add_epi32(rn, _mm512_madd_epi16(r16, n16));
                dd = _mm512_add_epi32(dd, _mm512_madd_epi16(d16, d16));
            }
        }
        total.ref_energy += lane_total(rr);
        total.noisy_energy += lane_total(nn);
        total.cross += lane_total(rn);
        total.error_energy += lane_total(dd);
        if (i < end) total += metric_sums_scalar(noisy + i, reference + i, end - i);  // the last block's tail
    }
    return total;
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
