// Counter-keyed random numbers for the noise models: every draw is a pure function of
// (seed, chip, layer, purpose, round, device index), so results never depend on thread count,
// tiling or the order in which layers are processed.
//
// Keying (also in docs/noise_models.md):
//   stream_seed = mix(seed, chip, layer, purpose, round) -- a splitmix64 chain, 64 bit
//   stream_id   = mix(stream_seed, 0x5bd1e995)           -- a different hash of the same key
//   pcg32 gen(stream_seed, stream_id); gen.advance(2 * device_index)
// Each device consumes exactly two pcg32 outputs per purpose (one standard normal, or one
// uniform plus one unused output), so a worker that starts at device i advances by 2*i and
// produces exactly the draws a single sequential pass would.
//
// Standard normal: Box-Muller on two pcg32 outputs a, b (cosine branch only):
//   u1 = (a + 0.5) / 2^32  in (0, 1),  u2 = b / 2^32  in [0, 1)
//   z  = sqrt(-2 ln u1) * cos(2 pi u2)
// The tail reaches sqrt(-2 ln(2^-33)) = 6.76 sigma.  Only <cmath> log/sqrt/cos are used
// (correctly rounded enough on glibc to be bit-identical across runs on one platform).
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>

#include <pcg_random.hpp>

namespace aimcemu::noise {

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

inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Folds the key fields one after another, so (a, b) and (b, a) give different streams.
inline std::uint64_t stream_seed(const ChipKey& key, Purpose purpose, std::uint64_t round) {
    std::uint64_t h = splitmix64(key.seed);
    h = splitmix64(h ^ key.chip);
    h = splitmix64(h ^ key.layer);
    h = splitmix64(h ^ static_cast<std::uint64_t>(purpose));
    return splitmix64(h ^ round);
}

// A positional stream of one draw per device: draw k belongs to device first_device + k.
class DeviceStream {
public:
    static constexpr std::uint64_t kOutputsPerDevice = 2;

    DeviceStream(const ChipKey& key, Purpose purpose, std::uint64_t round, std::uint64_t first_device)
        : gen_(stream_seed(key, purpose, round), splitmix64(stream_seed(key, purpose, round) ^ 0x5bd1e995ULL)) {
        gen_.advance(first_device * kOutputsPerDevice);
    }

    // One standard normal (Box-Muller, cosine branch).
    double gaussian() {
        const double a = gen_();
        const double b = gen_();
        const double u1 = (a + 0.5) * 0x1p-32;
        const double u2 = b * 0x1p-32;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

    // One uniform in [0, 1) with 32-bit resolution; the second output is skipped to keep the
    // two-outputs-per-device layout.
    double uniform() {
        const double a = gen_();
        gen_.discard(1);
        return a * 0x1p-32;
    }

private:
    pcg32 gen_;
};

}  // namespace aimcemu::noise
