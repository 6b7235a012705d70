// The NIU's random numbers, bit-exact with the RTL (docs/niu_datapath.md section 4).
//
//   - xoshiro128++ (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
//     ACM TOMS 2021): 128-bit state, 32-bit output, no multiplier, so an FPGA lane steps it in
//     one cycle with XORs and two adders;
//   - streams: every layer has BEAT_LANES = 32 streams per generator, stream k serving the
//     weights i with i mod 32 = k, one step per weight.  The draws of weight i therefore depend
//     only on (seed, chip, layer, round, i): not on the lanes of the hardware, the thread count,
//     or the chunking of the C++ model;
//   - keyed start states (splitmix64 of the stream key), and jump-ahead by any number of steps
//     (the generator is linear over GF(2), so a jump is a 128x128 bit matrix);
//   - the Gaussian: a 24-bit (chip draws) or 16-bit (read draws) uniform -> a cell of the |z|
//     inverse CDF -> Q3.12 from a generated ROM.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

#include "common/rng_keys.hpp"
#include "niu_constants.hpp"

namespace aimcemu::niu {

using aimcemu::splitmix64;  // common/rng_keys.hpp

// Round half up after an arithmetic right shift by s >= 1 (the PU's rounding rule).
inline std::int64_t rshr(std::int64_t p, int s) { return (p + (std::int64_t(1) << (s - 1))) >> s; }

inline std::int64_t clamp64(std::int64_t v, std::int64_t lo, std::int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---- xoshiro128++ ---------------------------------------------------------------------------

using RngState = std::array<std::uint32_t, 4>;  // s0, s1, s2, s3
static_assert(gen::NIU_RNG_STATE_WORDS == 4 && gen::NIU_RNG_WORD_BITS == 32 && gen::NIU_RNG_STATE_BITS == 128,
              "RngState is the generated xoshiro128 state: four 32-bit words");

inline constexpr int kStreams = gen::NIU_BEAT_LANES;   // streams per generator and layer
inline constexpr int kChipGens = gen::NIU_RNG_CHIP_GENS;
inline constexpr int kReadGens = gen::NIU_RNG_READ_GENS;
inline constexpr int kGens = gen::NIU_RNG_GENS;         // chip generators first, then read

// The output of a state (before its step): rotl(s0 + s3, 7) + s0.
inline std::uint32_t xoshiro_output(const RngState& s) {
    return std::rotl(s[0] + s[3], gen::NIU_RNG_ROT_OUT) + s[0];
}

// One step of the xoshiro128 linear engine.
inline void xoshiro_step(RngState& s) {
    const std::uint32_t t = s[1] << gen::NIU_RNG_SHIFT_A;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = std::rotl(s[3], gen::NIU_RNG_ROT_B);
}

inline std::uint32_t xoshiro_next(RngState& s) {
    const std::uint32_t out = xoshiro_output(s);
    xoshiro_step(s);
    return out;
}

// State after `steps` steps, in O(log steps) 128-bit matrix-vector products.
RngState xoshiro_jump(const RngState& s, std::uint64_t steps);

// Start state of generator `gen` (0..kGens-1), stream k, of a (seed, chip, layer, round) key:
// chip generators use purpose NIU_PURPOSE_CHIP and round 0, read generators NIU_PURPOSE_READ and
// the round (docs section 4.1).
RngState stream_state(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t round, int gen,
                      int stream);

// ---- Gaussian ------------------------------------------------------------------------------

// ROM address of a uniform u of `ubits` bits (docs section 4.3): sign = u[ubits-1]; the magnitude
// v (ubits-1 bits) is cut into groups of three bits aligned at its top bit, group g holding bits
// 3g+o .. 3g+o-2 with o = (ubits-2) mod 3; the address is {sign, g of v's leading one, the 6-bit
// window v[3g+o : 3g+o-5]} (v = 0: group 0, window 0).
inline int gauss_index(std::uint32_t u, int ubits) {
    constexpr int span = gen::NIU_GAUSS_GROUP_SPAN, wbits = gen::NIU_GAUSS_WINDOW_BITS;
    const int vbits = ubits - 1, offset = (vbits - 1) % span;
    const std::uint32_t sign = (u >> vbits) & 1u;
    const std::uint32_t v = u & ((1u << vbits) - 1);
    const int lead = 31 - std::countl_zero(v);  // -1 for v = 0
    const int group = std::max(lead - offset + span - 1, 0) / span;
    const std::uint32_t window = ((v << (wbits - 1)) >> (span * group + offset)) & ((1u << wbits) - 1);
    return int((sign << (gen::NIU_GAUSS_GROUP_BITS + wbits)) | (std::uint32_t(group) << wbits) | window);
}

// A multiply and a shift that divide every x in 0..max_x by `divisor` exactly: (x * mul) >> shift
// == x / divisor, with x * mul below 2^31 (a signed 32-bit vector lane).  The vector kernels
// divide by NIU_GAUSS_GROUP_SPAN this way (SIMD has no integer division); shift = -1 says none
// was found, which their static_asserts refuse.
struct ExactReciprocal {
    std::int64_t mul;
    int shift;
};
constexpr ExactReciprocal exact_reciprocal(int divisor, int max_x) {
    for (int shift = 0; shift < 31; ++shift) {
        const std::int64_t mul = ((std::int64_t(1) << shift) + divisor - 1) / divisor;
        bool exact = true;
        for (std::int64_t x = 0; x <= max_x && exact; ++x)
            exact = x * mul < (std::int64_t(1) << 31) && ((x * mul) >> shift) == x / divisor;
        if (exact) return {mul, shift};
    }
    return {0, -1};
}

// The largest numerator gauss_index divides by the group span for `ubits`-bit uniforms: the
// leading one of the magnitude sits at most at bit ubits - 2.
constexpr int gauss_group_numerator_max(int ubits) {
    const int vbits = ubits - 1, offset = (vbits - 1) % gen::NIU_GAUSS_GROUP_SPAN;
    return (vbits - 1) - offset + gen::NIU_GAUSS_GROUP_SPAN - 1;
}

// Normals (Q3.12) of the chip draws (24-bit uniforms) and of the read draws (16-bit uniforms).
inline std::int32_t gaussian_chip(std::uint32_t u24) {
    return gen::NIU_GAUSS_CHIP_ROM[std::size_t(gauss_index(u24, gen::NIU_GAUSS_CHIP_U_BITS))];
}
inline std::int32_t gaussian_read(std::uint32_t u16) {
    return gen::NIU_GAUSS_READ_ROM[std::size_t(gauss_index(u16, gen::NIU_GAUSS_READ_U_BITS))];
}

// The six uniforms of one weight from its four generator outputs (docs section 4.2):
// z1+ = c0[31:8], z1- = c1[31:8], z2+ = c2[31:8], z2- = {c0[7:0], c1[7:0], c2[7:0]} (24 bits);
// z3+ = r0[31:16], z3- = r0[15:0] (16 bits).
struct WeightUniforms {
    std::uint32_t prog_plus, prog_minus, nu_plus, nu_minus, read_plus, read_minus;
};

// The field layout of those uniforms, derived from the generated widths as rtl/niu_lane.sv derives
// it (its ByteBits): a chip uniform is the top NIU_GAUSS_CHIP_U_BITS of an output, and the low
// bits left over by the three chip outputs make the fourth chip uniform; a read output is two read
// uniforms.  The vector kernels use the same names.
inline constexpr int kChipLowBits = gen::NIU_RNG_WORD_BITS - gen::NIU_GAUSS_CHIP_U_BITS;  // 8
inline constexpr std::uint32_t kChipLowMask = (1u << kChipLowBits) - 1;
inline constexpr std::uint32_t kReadLowMask = (1u << gen::NIU_GAUSS_READ_U_BITS) - 1;
static_assert(kChipGens * kChipLowBits == gen::NIU_GAUSS_CHIP_U_BITS,
              "z2- is the low bits of the three chip outputs, one chip uniform wide");
static_assert(2 * gen::NIU_GAUSS_READ_U_BITS == gen::NIU_RNG_WORD_BITS, "a read output is exactly two read uniforms");

inline WeightUniforms split_uniforms(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t r0) {
    const std::uint32_t low = ((c0 & kChipLowMask) << (2 * kChipLowBits)) | ((c1 & kChipLowMask) << kChipLowBits) |
                              (c2 & kChipLowMask);
    return {c0 >> kChipLowBits, c1 >> kChipLowBits, c2 >> kChipLowBits, low, r0 >> gen::NIU_GAUSS_READ_U_BITS,
            r0 & kReadLowMask};
}

}  // namespace aimcemu::niu
