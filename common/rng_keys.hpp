// Key folding for every random stream in aimcemu: one 64-bit stream seed per
// (seed, chip, layer, purpose, round).  The float64 noise models (noise_models/rng.hpp) and the
// NIU (niu/niu_rng.hpp) both start their streams here, so a key means the same thing on both
// sides and the hash exists once.
//
//   stream_seed = splitmix64(splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ chip) ^ layer)
//                            ^ purpose) ^ round)
//
// Folding the fields one after another means (a, b) and (b, a) give different streams.
#pragma once
#include <cstdint>

namespace aimcemu {

// splitmix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a bijection on 64-bit words with full avalanche.
inline constexpr std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// The 64-bit seed of the stream named by (seed, chip, layer, purpose, round).
inline constexpr std::uint64_t fold_stream_key(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer,
                                               std::uint64_t purpose, std::uint64_t round) {
    std::uint64_t h = splitmix64(seed);
    h = splitmix64(h ^ chip);
    h = splitmix64(h ^ layer);
    h = splitmix64(h ^ purpose);
    return splitmix64(h ^ round);
}

}  // namespace aimcemu
