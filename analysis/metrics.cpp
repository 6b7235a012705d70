// Per-layer activation metrics: see metrics.hpp for the definitions.
#include "analysis/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace aimcemu {

void ActivationErrorSums::accumulate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    if (noisy.size() != reference.size())
        throw std::invalid_argument("metrics: noisy and reference activations differ in size (" +
                                    std::to_string(noisy.size()) + " vs " + std::to_string(reference.size()) + ")");
    // Per-element terms are at most 255^2 = 65025 < 2^16, so a block of 2^15 elements sums
    // exactly in int32 (2^15 * 65025 < 2^31); int32 lanes let the compiler vectorise the loop
    // (int64 accumulators did not), and the int64 totals stay exact for any layer.
    constexpr std::size_t kBlock = std::size_t(1) << 15;
    for (std::size_t begin = 0; begin < noisy.size(); begin += kBlock) {
        const std::size_t end = std::min(noisy.size(), begin + kBlock);
        std::int32_t rr = 0, nn = 0, rn = 0, dd = 0, diff = 0;
        for (std::size_t i = begin; i < end; ++i) {
            const std::int32_t n = noisy[i], r = reference[i], d = n - r;
            rr += r * r;
            nn += n * n;
            rn += r * n;
            dd += d * d;
            diff += d != 0;
        }
        ref_energy += rr;
        noisy_energy += nn;
        cross += rn;
        error_energy += dd;
        mismatches += diff;
    }
    count += std::int64_t(noisy.size());
}

ActivationErrorSums& ActivationErrorSums::operator+=(const ActivationErrorSums& other) {
    ref_energy += other.ref_energy;
    noisy_energy += other.noisy_energy;
    cross += other.cross;
    error_energy += other.error_energy;
    mismatches += other.mismatches;
    count += other.count;
    return *this;
}

double ActivationErrorSums::snr_db() const {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (error_energy == 0) return inf;
    if (ref_energy == 0) return -inf;
    return 10.0 * std::log10(double(ref_energy) / double(error_energy));
}

double ActivationErrorSums::cosine() const {
    if (ref_energy == 0 && noisy_energy == 0) return 1.0;
    if (ref_energy == 0 || noisy_energy == 0) return 0.0;
    return double(cross) / std::sqrt(double(ref_energy) * double(noisy_energy));
}

double ActivationErrorSums::mismatch_rate() const { return count == 0 ? 0.0 : double(mismatches) / double(count); }

namespace {
ActivationErrorSums sums_of(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    ActivationErrorSums s;
    s.accumulate(noisy, reference);
    return s;
}
}  // namespace

double snr_db(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    return sums_of(noisy, reference).snr_db();
}
double cosine_similarity(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    return sums_of(noisy, reference).cosine();
}
double mismatch_rate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    return sums_of(noisy, reference).mismatch_rate();
}

}  // namespace aimcemu
