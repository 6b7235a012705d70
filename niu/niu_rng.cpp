// pcg32 state arithmetic, stream keying and interleaved sub-streams (see niu_rng.hpp).
#include "niu/niu_rng.hpp"

#include <stdexcept>
#include <utility>

namespace aimcemu::niu {

JumpConstants jump_constants(std::uint64_t steps) {
    // Square-and-multiply on the affine map s -> A*s + 1 (Brown, "Random number generation
    // with arbitrary strides"); with increment 1 the additive part is the geometric sum.
    JumpConstants acc{1, 0};
    std::uint64_t cur_mult = kPcgMult, cur_plus = 1;
    while (steps > 0) {
        if (steps & 1u) {
            acc.mult *= cur_mult;
            acc.sum = acc.sum * cur_mult + cur_plus;
        }
        cur_plus = (cur_mult + 1) * cur_plus;
        cur_mult *= cur_mult;
        steps >>= 1;
    }
    return acc;
}

PcgStream PcgStream::from_seed(std::uint64_t state_seed, std::uint64_t stream_id) {
    // pcg-cpp: inc = (stream << 1) | 1; state = bump(seed + inc) with bump(s) = s*A + inc.
    PcgStream s;
    s.inc = (stream_id << 1) | 1u;
    s.state0 = (state_seed + s.inc) * kPcgMult + s.inc;
    return s;
}

std::uint64_t PcgStream::state_at(std::uint64_t n) const { return jump_for(jump_constants(n), inc).apply(state0); }

PcgStream keyed_stream(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t purpose,
                       std::uint64_t round) {
    const std::uint64_t state_seed = fold_stream_key(seed, chip, layer, purpose, round);
    return PcgStream::from_seed(state_seed, splitmix64(state_seed ^ gen::NIU_STREAM_SALT));
}

SubStreamBank::SubStreamBank(std::vector<std::uint64_t> initial_states, int units, int pipe, LcgJump jump)
    : states_(std::move(initial_states)), units_(units), pipe_(pipe), jump_(jump) {
    if (units <= 0 || pipe <= 0 || states_.size() != std::size_t(units) * std::size_t(pipe))
        throw std::invalid_argument("SubStreamBank: need units*pipe initial states");
}

void SubStreamBank::next_beat(std::uint32_t* out) {
    std::uint64_t* sub = states_.data() + std::size_t(beat_ % std::uint64_t(pipe_)) * std::size_t(units_);
    for (int u = 0; u < units_; ++u) {
        out[u] = pcg_output(sub[u]);
        sub[u] = jump_.apply(sub[u]);
    }
    ++beat_;
}

}  // namespace aimcemu::niu
