// Run-time dispatch for the vectorised noise math (simd.hpp); compiled for the baseline ISA.
#include "noise_models/simd.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

#include "noise_models/simd_kernels.hpp"

namespace aimcemu::noise::simd {

namespace {

bool cpu_has(Isa isa) {
    __builtin_cpu_init();
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case Isa::Avx512:
            return cpu_has(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vl");
    }
    return false;
}

Isa best() {
    if (cpu_has(Isa::Avx512)) return Isa::Avx512;
    if (cpu_has(Isa::Avx2)) return Isa::Avx2;
    return Isa::Scalar;
}

std::atomic<Isa>& chosen() {
    static std::atomic<Isa> isa{preferred()};
    return isa;
}

bool wide() { return chosen().load(std::memory_order_relaxed) == Isa::Avx512; }

}  // namespace

bool supported(Isa isa) {
    static const bool has[3] = {true, cpu_has(Isa::Avx2), cpu_has(Isa::Avx512)};
    return has[int(isa)];
}

Isa preferred() {
    static const Isa isa = best();   // the CPU does not change
    return isa;
}

Isa active() { return chosen().load(std::memory_order_relaxed); }

Isa use(Isa isa) {
    if (!supported(isa)) throw std::invalid_argument(std::string("simd::use: this CPU has no ") + name(isa));
    return chosen().exchange(isa);
}

const char* name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "AVX2+FMA";
        case Isa::Avx512: return "AVX-512";
    }
    return "?";
}

bool available() { return active() != Isa::Scalar; }

// Each entry point forwards to the active implementation (the scalar callers never get here:
// they check available() first).
void log(const double* x, double* out, std::size_t n) { wide() ? avx512::log(x, out, n) : avx2::log(x, out, n); }

void exp(const double* x, double* out, std::size_t n) { wide() ? avx512::exp(x, out, n) : avx2::exp(x, out, n); }

void sincos_turns(const std::uint32_t* b, double* sin_out, double* cos_out, std::size_t n) {
    wide() ? avx512::sincos_turns(b, sin_out, cos_out, n) : avx2::sincos_turns(b, sin_out, cos_out, n);
}

void box_muller(const std::uint32_t* raw, double* z, std::size_t n) {
    wide() ? avx512::box_muller(raw, z, n) : avx2::box_muller(raw, z, n);
}

namespace detail {

constexpr std::uint64_t kPcg32Multiplier = 6364136223846793005ULL;   // pcg32's LCG multiplier A

Pcg32Lanes pcg32_lanes(std::uint64_t state, std::uint64_t increment) {
    Pcg32Lanes lanes{};
    lanes.state[0] = state;
    for (int k = 1; k < 8; ++k) lanes.state[k] = lanes.state[k - 1] * kPcg32Multiplier + increment;
    lanes.multiplier = 1;
    lanes.increment = 0;
    for (int k = 0; k < 8; ++k) {
        lanes.increment = lanes.increment * kPcg32Multiplier + increment;
        lanes.multiplier *= kPcg32Multiplier;
    }
    return lanes;
}

std::uint64_t pcg32_outputs_scalar(std::uint64_t state, std::uint64_t increment, std::uint32_t* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {   // XSH-RR: rotate ((s >> 18) ^ s) >> 27 right by s >> 59
        const auto xorshifted = std::uint32_t(((state >> 18u) ^ state) >> 27u);
        const auto rot = std::uint32_t(state >> 59u);
        out[i] = (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
        state = state * kPcg32Multiplier + increment;
    }
    return state;
}

}  // namespace detail

bool pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n) {
    if (!available()) return false;
    wide() ? avx512::pcg32_outputs(state, increment, out, n) : avx2::pcg32_outputs(state, increment, out, n);
    return true;
}

void pcm_like_program(const PcmLikeBlock& c, const double* g_target, const double* z_prog, const double* z_nu,
                      std::size_t devices, double* g_prog, double* nu) {
    wide() ? avx512::pcm_like_program(c, g_target, z_prog, z_nu, devices, g_prog, nu)
           : avx2::pcm_like_program(c, g_target, z_prog, z_nu, devices, g_prog, nu);
}

void pcm_like_read(const PcmLikeBlock& c, double log_time, double read_factor, const double* g_start,
                   const double* nu, const double* z_read, std::size_t devices, double* g_out) {
    wide() ? avx512::pcm_like_read(c, log_time, read_factor, g_start, nu, z_read, devices, g_out)
           : avx2::pcm_like_read(c, log_time, read_factor, g_start, nu, z_read, devices, g_out);
}

void pcm_like_read_reconverted(const PcmLikeBlock& c, double log_time, double read_factor, double scale_prog,
                               double scale_read, const double* g_prog, const double* nu, const double* z_read,
                               std::size_t weights, double* g_out, double* w_out) {
    wide() ? avx512::pcm_like_read_reconverted(c, log_time, read_factor, scale_prog, scale_read, g_prog, nu, z_read,
                                               weights, g_out, w_out)
           : avx2::pcm_like_read_reconverted(c, log_time, read_factor, scale_prog, scale_read, g_prog, nu, z_read,
                                             weights, g_out, w_out);
}

void single_pair_convert(const double* w, std::size_t n, double scale, double g_max, double g_min, double* g) {
    wide() ? avx512::single_pair_convert(w, n, scale, g_max, g_min, g) : avx2::single_pair_convert(w, n, scale, g_max, g_min, g);
}

}  // namespace aimcemu::noise::simd
