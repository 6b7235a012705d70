// The per-ISA implementations behind noise_models/simd.hpp; simd.cpp picks one at run time.
//
// avx2:: (simd_avx2.cpp, four doubles per step) and avx512:: (simd_avx512.cpp, eight) compile
// one source, simd_body.inc, each over its own vector operations: the same IEEE operations per
// element in the same order (no approximate instructions, no reassociation), so their results
// are bit-identical; tests/cpp/test_noise_simd.cpp checks that for every function.  Call them only on a CPU that simd::supported() says has the ISA.
#pragma once
#include <cstddef>
#include <cstdint>

#include "noise_models/simd.hpp"

#define AIMCEMU_SIMD_KERNELS                                                                                     \
    void log(const double* x, double* out, std::size_t n);                                                       \
    void exp(const double* x, double* out, std::size_t n);                                                       \
    void sincos_turns(const std::uint32_t* b, double* sin_out, double* cos_out, std::size_t n);                  \
    void box_muller(const std::uint32_t* raw, double* z, std::size_t n);                                         \
    void pcm_like_program(const PcmLikeBlock& c, const double* g_target, const double* z_prog, const double* z_nu, \
                          std::size_t devices, double* g_prog, double* nu);                                      \
    void pcm_like_read(const PcmLikeBlock& c, double log_time, double read_factor, const double* g_start,        \
                       const double* nu, const double* z_read, std::size_t devices, double* g_out);              \
    void pcm_like_read_reconverted(const PcmLikeBlock& c, double log_time, double read_factor, double scale_prog, \
                                   double scale_read, const double* g_prog, const double* nu, const double* z_read, \
                                   std::size_t weights, double* g_out, double* w_out);                  \
    void single_pair_convert(const double* w, std::size_t n, double scale, double g_max, double g_min, double* g); \
    void pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n);

namespace aimcemu::noise::simd {
namespace detail {
// What the vector pcg32 generators share (simd.cpp, compiled for the baseline ISA).
// Eight states, state[k] being `state` k steps on; all eight step together by x -> x * multiplier
// + increment, with multiplier = A^8 and increment = C (A^7 + ... + A + 1).
struct Pcg32Lanes {
    std::uint64_t state[8];
    std::uint64_t multiplier, increment;
};
Pcg32Lanes pcg32_lanes(std::uint64_t state, std::uint64_t increment);
// n outputs one call at a time from `state` (the vector loops' tail); returns the state after them.
std::uint64_t pcg32_outputs_scalar(std::uint64_t state, std::uint64_t increment, std::uint32_t* out, std::size_t n);
}  // namespace detail
namespace avx2 {
AIMCEMU_SIMD_KERNELS
}
namespace avx512 {
AIMCEMU_SIMD_KERNELS
}
}  // namespace aimcemu::noise::simd

#undef AIMCEMU_SIMD_KERNELS
