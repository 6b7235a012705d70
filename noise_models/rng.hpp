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
// Only <cmath> log/sqrt/sin/cos are used: bit-identical across runs and thread counts on one
// platform (libm and compiler flags must match for bit-identity across machines; builds that
// contract a*b+c into FMA, e.g. -march=native, round differently).
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>

#include <pcg_random.hpp>

#include "common/rng_keys.hpp"

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
        const double a = gen_();
        const double b = gen_();
        const double radius = std::sqrt(-2.0 * std::log((a + 0.5) * 0x1p-32));
        const double angle = 2.0 * std::numbers::pi * (b * 0x1p-32);
        sine_ = radius * std::sin(angle);
        if (start_odd_) {  // this stream starts at an odd device: its first draw is a sine
            start_odd_ = false;
            return sine_;
        }
        has_sine_ = true;
        return radius * std::cos(angle);
    }

    // One uniform in [0, 1) with 32-bit resolution.
    double uniform() {
        if (start_odd_) {
            gen_.discard(1);
            start_odd_ = false;
        }
        return double(gen_()) * 0x1p-32;
    }

private:
    pcg32 gen_;
    bool start_odd_;
    bool has_sine_ = false;
    double sine_ = 0.0;
};

}  // namespace aimcemu::noise
