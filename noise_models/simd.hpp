// Vectorised float64 math and kernels of the noise models (AVX-512 or AVX2 + FMA).
//
// Why: a noise sweep programs and reads tens of millions of devices per chip instance; the
// per-device scalar path (libm log/exp/sin/cos behind virtual calls) ran at half of aihwkit's
// PyTorch speed.  These routines do the same float64 arithmetic four lanes at a time with our own
// polynomial log, exp and sin/cos (no libm), so results are a pure function of the inputs: the
// same on every AVX2 machine and for any thread count (each lane sees only its own device).
//
// Accuracy (tests/cpp/test_noise_simd.cpp checks it against <cmath> over each domain):
//   log(x)        x positive (normal or subnormal) relative error <= 2^-51 (a few ulp)
//   exp(x)        ln DBL_MIN <= x <= ln DBL_MAX     relative error <= 2^-51
//   sin/cos of 2*pi*b/2^32 for a 32-bit b          absolute error <= 2^-52
// Outside those domains both follow std::log / std::exp: log(+-0) = -inf, log(x < 0) = NaN,
// log(+inf) = +inf; exp(x > ln DBL_MAX) = +inf (so exp(+inf) too), exp(x < ln DBL_MIN) = +0
// (the one difference from std::exp: results in the subnormal range, below 2.2e-308, flush to
// +0), exp(-inf) = +0; NaN gives NaN in both.  The kernels' drift exp is the same function (Q_s's
// exp skips the range fix-up: its argument -0.65 ln x lies in [-461.4, 4.5]); their inline log
// takes positive normals only, which is all they pass it (clipped at 1e-7, or a uniform in (0, 1)).
// Gaussians are the Box-Muller pairs of rng.hpp, evaluated with these functions.
//
// Two implementations, picked at run time: AVX-512 (F/DQ/VL, eight doubles per step) where the
// CPU has it, else AVX2 + FMA (four).  Both do the same operations per element, so their results
// are bit-identical (simd_kernels.hpp).  available() is false on a CPU without AVX2/FMA; callers
// then take the scalar path (<cmath>), whose results agree to a few ulp but not bit for bit
// (docs/noise_models.md).
#pragma once
#include <cstddef>
#include <cstdint>

namespace aimcemu::noise::simd {

enum class Isa { Scalar, Avx2, Avx512 };

// Whether this CPU can run `isa` (Scalar always).
bool supported(Isa isa);
// The implementation picked at start, the best supported one: what active() returns until use()
// chooses another.  Tests check it against CPUID read on their own, so that a vector path the CPU
// has cannot silently drop out; benchmarks print it.
Isa preferred();
// The implementation the functions below use: preferred(), unless use() chose another.
Isa active();
// Routes every later call to `isa` (which must be supported, else std::invalid_argument) and
// returns the previous choice.  For tests and benchmarks that compare the paths; not thread-safe
// against calls in flight.
Isa use(Isa isa);
const char* name(Isa isa);

// active() != Scalar.
bool available();

// Element-wise math over arrays (the kernels inline the same code; these entry points are for
// tests and for the scalar closed forms that must agree with the kernels).
void log(const double* x, double* out, std::size_t n);
void exp(const double* x, double* out, std::size_t n);
void sincos_turns(const std::uint32_t* b, double* sin_out, double* cos_out, std::size_t n);

// Standard normals from raw pcg32 outputs, Box-Muller as rng.hpp defines it: pair j uses
// raw[2j] (radius) and raw[2j+1] (angle); z[2j] is the cosine, z[2j+1] the sine.  n may be odd
// (the last sine is dropped); raw must hold 2 * ceil(n / 2) values.
void box_muller(const std::uint32_t* raw, double* z, std::size_t n);

// pcg32's outputs from a state: XSH-RR of the 64-bit LCG (multiplier 6364136223846793005, the
// stream's odd increment), exactly what n calls of pcg32 return; advances `state` by n steps.
// Returns false and does nothing on the scalar path (rng.hpp's four interleaved scalar states
// serve it); AVX2 and AVX-512 run eight states in 64-bit lanes.
bool pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n);

// The PCM-like device physics (pcm.hpp, aihwkit's PCMLikeNoiseModel) on a block of weights
// converted by a single pair (device 2i = g+, 2i+1 = g- of weight i).
struct PcmLikeBlock {
    // model constants
    double g_max = 25.0;
    const double* prog_coeff = nullptr;   // sigma polynomial in g/g_max, lowest order first
    int prog_coeff_count = 0;
    double prog_sigma_scale = 1.0;        // g_max / prog_coeff_g_max_reference
    double prog_noise_scale = 1.0, drift_scale = 1.0, read_noise_scale = 1.0;
};

// Programming of `devices` devices: g_prog = max(0, g + s * sigma(g) * z_prog);
// nu = drift_scale * |mu(g) + sd(g) * z_nu|.
void pcm_like_program(const PcmLikeBlock& c, const double* g_target, const double* z_prog, const double* z_nu,
                      std::size_t devices, double* g_prog, double* nu);

// One read of `devices` devices from their starting conductances:
//   g = max(0, g_drift + read_noise_scale * |g_drift| * Q(g_start) * read_factor * z),
//   g_drift = g_start * exp(-nu * log_time).
void pcm_like_read(const PcmLikeBlock& c, double log_time, double read_factor, const double* g_start,
                   const double* nu, const double* z_read, std::size_t devices, double* g_out);

// The same read for a single pair re-converted like aihwkit (DriftReference::Reconverted):
// w_prog = (g+ - g-) / scale_prog, and only the device that carries w_prog (g+ for w_prog >= 0,
// else g-) has a non-zero starting conductance min(|w_prog| * scale_read, g_max); the other reads
// exactly 0.  Writes the read conductances (2 per weight, may be null) and the weights
// w = (g+ - g-) / scale_read (may be null).
void pcm_like_read_reconverted(const PcmLikeBlock& c, double log_time, double read_factor, double scale_prog,
                               double scale_read, const double* g_prog, const double* nu, const double* z_read,
                               std::size_t weights, double* g_out, double* w_out);

// A single pair's conversion of n weights (SinglePairConverter::convert_into, the same values):
// g[2i] = clamp(w[i] * scale, 0, g_max) + g_min, g[2i+1] = clamp(-w[i] * scale, 0, g_max) + g_min.
void single_pair_convert(const double* w, std::size_t n, double scale, double g_max, double g_min, double* g);

}  // namespace aimcemu::noise::simd
