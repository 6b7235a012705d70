// AVX2 kernel of the activation metrics' exact sums (see metrics_kernels.hpp), for CPUs without
// AVX-512BW (e.g. AMD Zen 2/3), where every noisy round's per-layer comparison otherwise runs the
// baseline build's SSE2 loop.
//
// The same exact-integer argument as the AVX-512 kernel, with 8 int32 lanes instead of 16: 32 int8
// pairs per step are widened to int16 and multiplied and pair-summed into int32 lanes with vpmaddwd
// (a pair of terms is at most 2 * 255^2 = 130050, far from vpmaddwd's one overflowing case,
// -32768 * -32768 twice).  A block of kMetricBlock = 2^15 elements spreads its terms evenly over the
// 8 lanes, so a lane adds at most 2^15 / 8 = 2^12 terms of at most 65025 each:
// 2^12 * 65025 = 266,342,400 < 2^31 - 1.  Half the AVX-512 kernel's lanes only halve its margin
// (8 lanes would hold a block of up to 8 * 33025 elements; the plain loop's one int32 per sum is
// what bounds the shared 2^15), so the block size stays; each block's lane totals go to the int64
// sums.  Mismatches are a byte compare's mask, counted with popcnt.
// Every sum is an exact integer, so the results equal the plain loop's bit for bit.
//
// Like the other ISA kernels: compiled for the ISA through a target pragma (with a clang attribute
// twin), entered only after cpu_has_avx2_metrics() said yes, and no standard-library templates
// inside the region (their instantiations could carry AVX2 code into shared baseline copies).
#include <immintrin.h>

#include <cstdint>

#include "analysis/metrics_kernels.hpp"
#include "common/isa_target.hpp"

namespace aimcemu::detail {

bool cpu_has_avx2_metrics() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt"); }

}  // namespace aimcemu::detail

AIMCEMU_ISA_BEGIN("avx2,popcnt")

namespace aimcemu::detail {
namespace {

// The eight int32 lanes of `v` summed in int64.
std::int64_t lane_total(__m256i v) {
    const __m256i low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
    const __m256i high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
    const __m256i quads = _mm256_add_epi64(low, high);
    const __m128i pairs = _mm_add_epi64(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
    return _mm_cvtsi128_si64(pairs) + _mm_extract_epi64(pairs, 1);
}

// The four int32 lane sums of one block, each lane at most 2^12 terms (see the top of the file).
struct BlockLanes {
    __m256i rr, nn, rn, dd;

    // Written out: GCC would define an implicit constructor outside the target region.
    BlockLanes() : rr(_mm256_setzero_si256()), nn(rr), rn(rr), dd(rr) {}

    // Adds the terms of 16 int8 pairs, widened to int16.
    void add16(const std::int8_t* noisy, const std::int8_t* reference) {
        const __m256i n16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(noisy)));
        const __m256i r16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reference)));
        const __m256i d16 = _mm256_sub_epi16(n16, r16);
        rr = _mm256_add_epi32(rr, _mm256_madd_epi16(r16, r16));
        nn = _mm256_add_epi32(nn, _mm256_madd_epi16(n16, n16));
        rn = _mm256_add_epi32(rn, _mm256_madd_epi16(r16, n16));
        dd = _mm256_add_epi32(dd, _mm256_madd_epi16(d16, d16));
    }

    void add_to(MetricSums& total) const {
        total.ref_energy += lane_total(rr);
        total.noisy_energy += lane_total(nn);
        total.cross += lane_total(rn);
        total.error_energy += lane_total(dd);
    }
};

// The number of the 32 pairs at `noisy`, `reference` that differ.
std::int64_t mismatches32(const std::int8_t* noisy, const std::int8_t* reference) {
    const __m256i n8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(noisy));
    const __m256i r8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reference));
    const unsigned equal = unsigned(_mm256_movemask_epi8(_mm256_cmpeq_epi8(n8, r8)));
    return _mm_popcnt_u32(~equal);
}

}  // namespace

MetricSums metric_sums_avx2(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n) {
    MetricSums total;
    for (std::size_t begin = 0; begin < n; begin += kMetricBlock) {
        const std::size_t end = n - begin < kMetricBlock ? n : begin + kMetricBlock;
        BlockLanes lanes;
        std::size_t i = begin;
        for (; i + 32 <= end; i += 32) {
            total.mismatches += mismatches32(noisy + i, reference + i);
            lanes.add16(noisy + i, reference + i);
            lanes.add16(noisy + i + 16, reference + i + 16);
        }
        lanes.add_to(total);
        if (i < end) total += metric_sums_scalar(noisy + i, reference + i, end - i);  // the last block's tail
    }
    return total;
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
