// Per-layer activation metrics: see metrics.hpp for the definitions.
#include "analysis/metrics.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace aimcemu {

void ActivationErrorSums::accumulate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    if (noisy.size() != reference.size())
        throw std::invalid_argument("metrics: noisy and reference activations differ in size (" +
                                    std::to_string(noisy.size()) + " vs " + std::to_string(reference.size()) + ")");
    // Per-element terms are below 2^16, so an int64 sum is exact for any realistic layer.
    for (std::size_t i = 0; i < noisy.size(); ++i) {
        const std::int64_t n = noisy[i], r = reference[i], d = n - r;
        ref_energy += r * r;
        noisy_energy += n * n;
        cross += r * n;
        error_energy += d * d;
        mismatches += d != 0;
    }
    count += std::int64_t(noisy.size());
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
