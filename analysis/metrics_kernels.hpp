// The exact-sum kernels behind ActivationErrorSums::accumulate (metrics.cpp dispatches).
//
// Each returns the same five integer sums over n elements; integer sums are exact, so every
// kernel gives the same numbers.  The metrics derived from them do not depend on the CPU either:
// cosine and mismatch rate are a few correctly rounded IEEE operations, and snr_db's logarithm is computed
// without libm (decibel.hpp), since glibc's log10 differs in the last bit by CPU.
#pragma once
#include <cstddef>
#include <cstdint>

namespace aimcemu::detail {

struct MetricSums {
    std::int64_t ref_energy = 0, noisy_energy = 0, cross = 0, error_energy = 0, mismatches = 0;
    MetricSums& operator+=(const MetricSums& o) {
        ref_energy += o.ref_energy;
        noisy_energy += o.noisy_energy;
        cross += o.cross;
        error_energy += o.error_energy;
        mismatches += o.mismatches;
        return *this;
    }
};

// Plain C++ (the compiler vectorises it for the build's baseline ISA).
MetricSums metric_sums_scalar(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n);
// AVX-512BW, 64 elements per step (metrics_avx512.cpp); only called when cpu_has_avx512bw_metrics().
MetricSums metric_sums_avx512(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n);
bool cpu_has_avx512bw_metrics();
// AVX2, 32 elements per step (metrics_avx2.cpp); only called when cpu_has_avx2_metrics().
MetricSums metric_sums_avx2(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n);
bool cpu_has_avx2_metrics();

// Per-element terms are at most 255^2 = 65025 < 2^16, so a block of 2^15 elements sums exactly
// in int32 lanes (2^15 * 65025 < 2^31, even with the whole block in one lane, as in the plain
// loop; the vector kernels spread it over 8 or 16 lanes); the int64 totals stay exact for any layer.
inline constexpr std::size_t kMetricBlock = std::size_t(1) << 15;

}  // namespace aimcemu::detail
