// Per-layer activation metrics: see metrics.hpp for the definitions.
#include "analysis/metrics.hpp"

#include "analysis/decibel.hpp"
#include "analysis/metrics_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace aimcemu {

namespace detail {

MetricSums metric_sums_scalar(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n) {
    // int32 lanes per block let the compiler vectorise the loop (int64 accumulators did not).
    MetricSums total;
    for (std::size_t begin = 0; begin < n; begin += kMetricBlock) {
        const std::size_t end = std::min(n, begin + kMetricBlock);
        std::int32_t rr = 0, nn = 0, rn = 0, dd = 0, diff = 0;
        for (std::size_t i = begin; i < end; ++i) {
            const std::int32_t a = noisy[i], r = reference[i], d = a - r;
            rr += r * r;
            nn += a * a;
            rn += r * a;
            dd += d * d;
            diff += d != 0;
        }
        total.ref_energy += rr;
        total.noisy_energy += nn;
        total.cross += rn;
        total.error_energy += dd;
        total.mismatches += diff;
    }
    return total;
}

}  // namespace detail

namespace {

struct MetricKernel {
    const char* name;
    bool (*available)();
    detail::MetricSums (*sums)(const std::int8_t* noisy, const std::int8_t* reference, std::size_t n);
};

bool always() { return true; }

// Fastest first; every kernel gives the same sums (metrics_kernels.hpp).
constexpr MetricKernel kKernels[] = {
    {"avx512", detail::cpu_has_avx512bw_metrics, detail::metric_sums_avx512},
    {"avx2", detail::cpu_has_avx2_metrics, detail::metric_sums_avx2},
    {"scalar", always, detail::metric_sums_scalar},
};

// The kernel named `name` if this CPU can run it, else nullptr.
const MetricKernel* available_kernel(const std::string& name) {
    for (const MetricKernel& k : kKernels)
        if (name == k.name) return k.available() ? &k : nullptr;
    return nullptr;
}

}  // namespace

std::vector<std::string> metric_kernels() {
    std::vector<std::string> out;
    for (const MetricKernel& k : kKernels)
        if (k.available()) out.emplace_back(k.name);
    return out;
}

void ActivationErrorSums::accumulate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference) {
    static const std::string best = metric_kernels().front();
    accumulate_kernel(best, noisy, reference);
}

void ActivationErrorSums::accumulate_kernel(const std::string& kernel, std::span<const std::int8_t> noisy,
                                            std::span<const std::int8_t> reference) {
    if (noisy.size() != reference.size())
        throw std::invalid_argument("metrics: noisy and reference activations differ in size (" +
                                    std::to_string(noisy.size()) + " vs " + std::to_string(reference.size()) + ")");
    const MetricKernel* chosen = available_kernel(kernel);
    if (chosen == nullptr)
        throw std::invalid_argument("metrics: kernel '" + kernel + "' is not available on this CPU");
    const detail::MetricSums s = chosen->sums(noisy.data(), reference.data(), noisy.size());
    ref_energy += s.ref_energy;
    noisy_energy += s.noisy_energy;
    cross += s.cross;
    error_energy += s.error_energy;
    mismatches += s.mismatches;
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
    return decibel_ratio(ref_energy, error_energy);  // correctly rounded from the exact sums
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
