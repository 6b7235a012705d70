// The NIU's random numbers, bit-exact with the RTL (docs/niu_datapath.md section 4).
//
//   - pcg32 (pcg-cpp's setseq_xsh_rr_64_32) state arithmetic written out, so that the model can
//     hold the same 64-bit states the RTL holds and jump them by constants;
//   - stream keying by (seed, chip, layer, purpose, round);
//   - interleaved sub-streams: S units x P sub-states that together emit pcg-cpp's output order
//     one beat at a time without a one-cycle 64x64 multiply loop;
//   - the table inverse-CDF Gaussian (one 32-bit output -> Q3.12 standard normal).
#pragma once
#include <bit>
#include <cstdint>
#include <vector>

#include "common/rng_keys.hpp"
#include "niu_constants.hpp"

namespace aimcemu::niu {

using aimcemu::splitmix64;  // common/rng_keys.hpp

// round half up after an arithmetic right shift by s >= 1 (the PU's rounding rule).
inline std::int64_t rshr(std::int64_t p, int s) { return (p + (std::int64_t(1) << (s - 1))) >> s; }

inline std::int64_t clamp64(std::int64_t v, std::int64_t lo, std::int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---- pcg32 --------------------------------------------------------------------------------

inline constexpr std::uint64_t kPcgMult = gen::NIU_PCG_MULT;

// pcg-cpp's XSH-RR output of one 64-bit state (the state *before* the step).
inline std::uint32_t pcg_output(std::uint64_t s) {
    const auto xorshifted = std::uint32_t(((s >> 18) ^ s) >> 27);
    return std::rotr(xorshifted, int(s >> 59));
}

// An affine map s -> s * mult + add (mod 2^64): one LCG step, or any number of them.
struct LcgJump {
    std::uint64_t mult = 1;
    std::uint64_t add = 0;
    std::uint64_t apply(std::uint64_t s) const { return s * mult + add; }
};

// (A^steps, A^(steps-1) + ... + A + 1): the jump by `steps` positions is
// {mult, inc * sum}.  O(log steps) by squaring.
struct JumpConstants {
    std::uint64_t mult = 1;
    std::uint64_t sum = 0;
};
JumpConstants jump_constants(std::uint64_t steps);

inline LcgJump jump_for(const JumpConstants& c, std::uint64_t inc) { return {c.mult, inc * c.sum}; }

// A pcg32 stream as the NIU sees it: its increment and the state at position 0.
struct PcgStream {
    std::uint64_t inc = 1;
    std::uint64_t state0 = 0;

    // Same stream as pcg-cpp's `pcg32 gen(state_seed, stream_id)`.
    static PcgStream from_seed(std::uint64_t state_seed, std::uint64_t stream_id);
    // State at stream position n (output n is pcg_output(state_at(n))).
    std::uint64_t state_at(std::uint64_t n) const;
};

// The stream of one (seed, chip, layer, purpose, round) key (docs section 4.1).
PcgStream keyed_stream(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t purpose,
                       std::uint64_t round);

// Sequential reader of one stream from a given position (the fast model path).
class PcgCursor {
public:
    PcgCursor(const PcgStream& stream, std::uint64_t position) : inc_(stream.inc), state_(stream.state_at(position)) {}
    std::uint32_t next() {
        const std::uint32_t out = pcg_output(state_);
        state_ = state_ * kPcgMult + inc_;
        return out;
    }

private:
    std::uint64_t inc_;
    std::uint64_t state_;
};

// S units x P sub-states, the RTL's structure: unit u's sub-state p starts at position p*S + u;
// beat b uses sub-state b mod P of every unit, which then jumps by S*P positions.  Emits
// positions b*S .. b*S + S-1 at beat b, i.e. exactly the stream's order.
class SubStreamBank {
public:
    // initial_states[k] = state at position k, k < P*S (the program's CHIP_/READ_STATES).
    SubStreamBank(std::vector<std::uint64_t> initial_states, int units, int pipe, LcgJump jump);
    // Writes the S outputs of the next beat and steps the sub-state that produced them.
    void next_beat(std::uint32_t* out);
    int units() const { return units_; }

private:
    std::vector<std::uint64_t> states_;  // [p * units + u]
    int units_, pipe_;
    LcgJump jump_;
    std::uint64_t beat_ = 0;
};

// ---- Gaussian ------------------------------------------------------------------------------

// Table inverse CDF (docs section 4.3): a standard normal in Q3.12 from one pcg32 output.
inline std::int32_t gaussian_q12(std::uint32_t r) {
    constexpr int seg_bits = gen::NIU_GAUSS_SEG_BITS;
    constexpr int frac_bits = gen::NIU_GAUSS_FRAC_BITS;
    std::uint32_t v = r & 0x7FFFFFFFu;
    if (v == 0) v = 1;
    const int octave = std::countl_zero(v) - 1;  // 0..30
    const std::uint32_t n = v << octave;          // leading one at bit 30
    const int j = (gen::NIU_GAUSS_OCTAVES - 1 - octave) * (1 << seg_bits) + int((n >> frac_bits) & ((1u << seg_bits) - 1));
    const std::int64_t f = n & ((1u << frac_bits) - 1);
    const std::int64_t lo = gen::NIU_GAUSS_Z[j], hi = gen::NIU_GAUSS_Z[j + 1];
    const std::int64_t m = lo + rshr((hi - lo) * f, frac_bits);
    return std::int32_t((r >> 31) ? -m : m);
}

}  // namespace aimcemu::niu
