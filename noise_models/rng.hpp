// Counter-keyed random numbers for the noise models: every draw is a pure function of
// (seed, chip, layer, purpose, round, device index), so results never depend on thread count,
// tiling or the order in which layers are processed.
//
// Keying (also in docs/noise_models.md):
//   stream_seed = mix(seed, chip, layer, purpose, round) -- a splitmix64 chain, 64 bit
//   stream_id   = mix(stream_seed, 0x5bd1e995)           -- a different hash of the same key
//   pcg32 gen(stream_seed, stream_id)
// Output k of the stream belongs to device k: one uniform per device, or, for normals, devices
// 2j and 2j+1 share outputs 2j and 2j+1 (one Box-Muller pair).  A worker that starts at
// device i advances the generator by i (rounded down to even, then uses the pair's second
// half when i is odd), so it produces exactly the draws a single sequential pass would.
//
// Standard normals: Box-Muller on the pcg32 outputs a = out[2j], b = out[2j+1]:
//   u1 = (a + 0.5) / 2^32  in (0, 1),  u2 = b / 2^32  in [0, 1)
//   z[2j] = sqrt(-2 ln u1) * cos(2 pi u2),  z[2j+1] = sqrt(-2 ln u1) * sin(2 pi u2)
// The tail reaches sqrt(-2 ln(2^-33)) = 6.76 sigma.  Uniforms: u = out[k] / 2^32.
// ln, sin and cos are simd.hpp's own polynomials (AVX2 + FMA, or AVX-512 with the same
// operations per element), so draws are bit-identical on every such machine, for any thread count and whether drawn one at a time or in blocks.  On a
// CPU without AVX2 <cmath> stands in (agreeing to a few ulp, not bit for bit).
//
// Blocks: pcg32 is a 64-bit LCG, so four interleaved copies of the state, each stepping by
// A^4 and C(A^3 + A^2 + A + 1), produce the stream's outputs four at a time without the
// multiply latency chain of one state (fill_raw; the same outputs as calling gen() n times).
// On the AVX2 and AVX-512 paths eight copies run in 64-bit vector lanes (simd::pcg32_outputs).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>

#include <pcg_random.hpp>

#include "common/rng_keys.hpp"
#include "noise_models/simd.hpp"

namespace aimcemu::noise {

using aimcemu::splitmix64;

// What a random stream is used for; part of the key, so purposes never share draws.
enum class Purpose : std::uint64_t {
    Programming = 1,   // programming noise (chip-fixed)
    DriftExponent = 2, // drift exponent nu (chip-fixed)
    Fault = 3,         // stuck-at faults (chip-fixed)
    Read = 4,          // read noise (per round)
    Relaxation = 5,    // per-read conductance relaxation (ReRAM CMO; per round)
};

// Identifies one programmed layer of one chip instance.
struct ChipKey {
    std::uint64_t seed = 0;   // master seed of the study
    std::uint64_t chip = 0;   // chip instance
    std::uint64_t layer = 0;  // layer index (or any id that is unique per layer)
};

// The stream seed of one (chip key, purpose, round): common/rng_keys.hpp folds the fields.
inline std::uint64_t stream_seed(const ChipKey& key, Purpose purpose, std::uint64_t round) {
    return fold_stream_key(key.seed, key.chip, key.layer, static_cast<std::uint64_t>(purpose), round);
}

// pcg32 with block output: fill_raw(out, n) writes exactly what n calls of operator() return and
// leaves the generator where they would.
class BlockPcg32 : public pcg32 {
public:
    using pcg32::pcg32;

    void fill_raw(std::uint32_t* out, std::size_t n) {
        if (n >= 16 && simd::pcg32_outputs(state_, increment(), out, n)) return;   // AVX2, AVX-512: eight lanes
        constexpr std::uint64_t a = 6364136223846793005ULL;   // pcg32's LCG multiplier
        const std::uint64_t c = increment();
        const std::uint64_t a2 = a * a, a4 = a2 * a2;
        const std::uint64_t c4 = c * (a2 * a + a2 + a + 1);
        std::uint64_t s0 = state_, s1 = s0 * a + c, s2 = s1 * a + c, s3 = s2 * a + c;
        std::size_t i = 0;
        for (; i + 4 <= n; i += 4) {
            out[i] = xsh_rr(s0);
            out[i + 1] = xsh_rr(s1);
            out[i + 2] = xsh_rr(s2);
            out[i + 3] = xsh_rr(s3);
            s0 = s0 * a4 + c4;
            s1 = s1 * a4 + c4;
            s2 = s2 * a4 + c4;
            s3 = s3 * a4 + c4;
        }
        state_ = s0;
        for (; i < n; ++i) out[i] = (*this)();
    }

private:
    // pcg32's output function (XSH-RR) of a state.
    static std::uint32_t xsh_rr(std::uint64_t s) {
        const auto xorshifted = std::uint32_t(((s >> 18u) ^ s) >> 27u);
        const auto rot = std::uint32_t(s >> 59u);
        return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
    }
};

// A positional stream of one draw per device: draw k belongs to device first_device + k.
// Use one stream either for normals or for uniforms, never both.
class DeviceStream {
public:
    DeviceStream(const ChipKey& key, Purpose purpose, std::uint64_t round, std::uint64_t first_device)
        : gen_(stream_seed(key, purpose, round), splitmix64(stream_seed(key, purpose, round) ^ 0x5bd1e995ULL)),
          start_odd_((first_device & 1u) != 0) {
        gen_.advance(first_device & ~std::uint64_t(1));
    }

    // One standard normal (Box-Muller pair: cosine for even devices, sine for odd ones).
    double gaussian() {
        if (has_sine_) {
            has_sine_ = false;
            return sine_;
        }
        std::uint32_t raw[2];
        gen_.fill_raw(raw, 2);
        double z[2];
        box_muller_pair(raw, z);
        sine_ = z[1];
        if (start_odd_) {  // this stream starts at an odd device: its first draw is a sine
            start_odd_ = false;
            return sine_;
        }
        has_sine_ = true;
        return z[0];
    }

    // The next n normals at once (the same values as n calls of gaussian()).
    void gaussians(double* out, std::size_t n) {
        std::size_t i = 0;
        while (i < n && (has_sine_ || start_odd_)) out[i++] = gaussian();
        constexpr std::size_t kPairs = 256;
        std::uint32_t raw[2 * kPairs];
        while (i < n) {
            const std::size_t values = std::min<std::size_t>(n - i, 2 * kPairs), pairs = (values + 1) / 2;
            gen_.fill_raw(raw, 2 * pairs);
            if (values % 2 == 0) {
                box_muller(raw, out + i, values);
            } else {   // keep the last pair's sine for the next draw, as gaussian() would
                double tail[2];
                box_muller(raw, out + i, values - 1);
                box_muller_pair(raw + 2 * (pairs - 1), tail);
                out[i + values - 1] = tail[0];
                sine_ = tail[1];
                has_sine_ = true;
            }
            i += values;
        }
    }

    // One uniform in [0, 1) with 32-bit resolution.
    double uniform() {
        if (start_odd_) {
            gen_.discard(1);
            start_odd_ = false;
        }
        return double(gen_()) * 0x1p-32;
    }

    // The next n uniforms at once.
    void uniforms(double* out, std::size_t n) {
        if (n == 0) return;
        out[0] = uniform();
        constexpr std::size_t kBlock = 512;
        std::uint32_t raw[kBlock];
        for (std::size_t i = 1; i < n; i += kBlock) {
            const std::size_t count = std::min(kBlock, n - i);
            gen_.fill_raw(raw, count);
            for (std::size_t k = 0; k < count; ++k) out[i + k] = double(raw[k]) * 0x1p-32;
        }
    }

private:
    static void box_muller(const std::uint32_t* raw, double* z, std::size_t n) {
        if (simd::available()) {
            simd::box_muller(raw, z, n);
            return;
        }
        for (std::size_t j = 0; 2 * j < n; ++j) {
            double pair[2];
            box_muller_pair(raw + 2 * j, pair);
            z[2 * j] = pair[0];
            if (2 * j + 1 < n) z[2 * j + 1] = pair[1];
        }
    }
    static void box_muller_pair(const std::uint32_t* raw, double* z) {
        if (simd::available()) {
            simd::box_muller(raw, z, 2);
            return;
        }
        const double radius = std::sqrt(-2.0 * std::log((double(raw[0]) + 0.5) * 0x1p-32));
        const double angle = 2.0 * std::numbers::pi * (double(raw[1]) * 0x1p-32);
        z[0] = radius * std::cos(angle);
        z[1] = radius * std::sin(angle);
    }

    BlockPcg32 gen_;
    bool start_odd_;
    bool has_sine_ = false;
    double sine_ = 0.0;
};

}  // namespace aimcemu::noise
