// Per-layer metrics between noisy and noise-free (reference) int8 activations.
//
// Definitions (also in docs/hdf5_layout.md), with sums taken exactly in int64 over all elements:
//   snr_db        = 10 log10( sum ref^2 / sum (noisy - ref)^2 );  +inf when noisy == ref,
//                   -inf when ref is all zero but noisy is not.  Correctly rounded from the two
//                   exact sums without libm (decibel.hpp), so its bits do not depend on the CPU.
//   cosine        = sum ref*noisy / sqrt(sum ref^2 * sum noisy^2);  1 when both are all zero,
//                   0 when exactly one is.
//   mismatch_rate = (number of elements where noisy != ref) / (number of elements);  0 when empty.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace aimcemu {

// Exact sums that all three metrics derive from; accumulate() adds a block, so a caller can
// stream a layer in pieces and still get the same numbers.
struct ActivationErrorSums {
    std::int64_t ref_energy = 0;     // sum ref^2
    std::int64_t noisy_energy = 0;   // sum noisy^2
    std::int64_t cross = 0;          // sum ref*noisy
    std::int64_t error_energy = 0;   // sum (noisy-ref)^2
    std::int64_t mismatches = 0;
    std::int64_t count = 0;

    // Throws std::invalid_argument if the spans differ in length.
    // Uses the fastest kernel of metric_kernels(); every kernel gives the same sums.
    void accumulate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference);
    // The same with a named kernel (tests compare them); std::invalid_argument for one the CPU lacks.
    void accumulate_kernel(const std::string& kernel, std::span<const std::int8_t> noisy,
                           std::span<const std::int8_t> reference);
    // Adds the sums of other pieces of the same layer (exact: any order gives the same totals).
    ActivationErrorSums& operator+=(const ActivationErrorSums& other);
    bool operator==(const ActivationErrorSums&) const = default;
    double snr_db() const;
    double cosine() const;
    double mismatch_rate() const;
};

// The sum kernels this CPU can run, fastest first: "avx512" (AVX-512BW) where the CPU has it,
// "avx2" where it has AVX2, then "scalar" (plain C++, vectorised by the compiler for the build's
// baseline).
std::vector<std::string> metric_kernels();

double snr_db(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference);
double cosine_similarity(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference);
double mismatch_rate(std::span<const std::int8_t> noisy, std::span<const std::int8_t> reference);

}  // namespace aimcemu
