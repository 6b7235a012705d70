// xoshiro128++ stream keying and jump-ahead (see niu_rng.hpp).
#include "niu/niu_rng.hpp"

#include <vector>

namespace aimcemu::niu {
namespace {

// The state's shape, as rtl/niu_gen.py generates it (niu_rng.hpp checks RngState matches).
constexpr int kStateBits = gen::NIU_RNG_STATE_BITS;   // 128
constexpr int kWordBits = gen::NIU_RNG_WORD_BITS;     // 32
constexpr int kStateWords = gen::NIU_RNG_STATE_WORDS; // 4
constexpr int kNibbles = kStateBits / 4;               // 4-bit table index per nibble of the state
constexpr int kNibblesPerWord = kWordBits / 4;

// A 128x128 matrix over GF(2) acting on the state bits (bit 32*w + b = bit b of s[w]), stored
// for fast application as 32 nibble tables: entry [n][v] = M * (v << 4n).  (128 = kStateBits,
// 32 = kWordBits.)
struct BitMatrix {
    std::array<RngState, kStateBits> columns{};  // M * e_i

    static BitMatrix engine() {
        BitMatrix m;
        for (int i = 0; i < kStateBits; ++i) {
            RngState e{};
            e[std::size_t(i / kWordBits)] = 1u << (i % kWordBits);
            xoshiro_step(e);
            m.columns[std::size_t(i)] = e;
        }
        return m;
    }
    RngState apply(const RngState& s) const {
        RngState r{};
        for (int i = 0; i < kStateBits; ++i)
            if ((s[std::size_t(i / kWordBits)] >> (i % kWordBits)) & 1u)
                for (int w = 0; w < kStateWords; ++w) r[std::size_t(w)] ^= columns[std::size_t(i)][std::size_t(w)];
        return r;
    }
    BitMatrix squared() const {
        BitMatrix m;
        for (int i = 0; i < kStateBits; ++i) m.columns[std::size_t(i)] = apply(columns[std::size_t(i)]);
        return m;
    }
};

struct NibbleTables {
    std::array<std::array<RngState, 16>, kNibbles> t{};

    explicit NibbleTables(const BitMatrix& m) {
        for (int n = 0; n < kNibbles; ++n)
            for (int v = 0; v < 16; ++v) {
                RngState r{};
                for (int b = 0; b < 4; ++b)
                    if ((v >> b) & 1)
                        for (int w = 0; w < kStateWords; ++w) r[std::size_t(w)] ^= m.columns[std::size_t(4 * n + b)][std::size_t(w)];
                t[std::size_t(n)][std::size_t(v)] = r;
            }
    }
    RngState apply(const RngState& s) const {
        RngState r{};
        for (int n = 0; n < kNibbles; ++n) {
            const RngState& e = t[std::size_t(n)][(s[std::size_t(n / kNibblesPerWord)] >> (4 * (n % kNibblesPerWord))) & 15u];
            for (int w = 0; w < kStateWords; ++w) r[std::size_t(w)] ^= e[std::size_t(w)];
        }
        return r;
    }
};

// T^(2^k) for k = 0..63, built once.
const std::vector<NibbleTables>& jump_tables() {
    static const std::vector<NibbleTables> tables = [] {
        std::vector<NibbleTables> v;
        BitMatrix m = BitMatrix::engine();
        for (int k = 0; k < 64; ++k) {
            v.emplace_back(m);
            m = m.squared();
        }
        return v;
    }();
    return tables;
}

}  // namespace

RngState xoshiro_jump(const RngState& s, std::uint64_t steps) {
    if (steps < 64) {  // stepping is cheaper than a table pass
        RngState r = s;
        for (std::uint64_t k = 0; k < steps; ++k) xoshiro_step(r);
        return r;
    }
    const auto& tables = jump_tables();
    RngState r = s;
    for (int k = 0; steps != 0; ++k, steps >>= 1)
        if (steps & 1u) r = tables[std::size_t(k)].apply(r);
    return r;
}

RngState stream_state(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t round, int gen,
                      int stream) {
    const bool is_chip = gen < kChipGens;
    const std::uint64_t key = fold_stream_key(seed, chip, layer, std::uint64_t(is_chip ? gen::NIU_PURPOSE_CHIP : gen::NIU_PURPOSE_READ),
                                              is_chip ? 0 : round);
    const int local = is_chip ? gen : gen - kChipGens;
    // Two splitmix64 words per (generator, stream); splitmix64 is a bijection, so distinct
    // (generator, stream) give distinct words for one key.
    const std::uint64_t a = splitmix64(key ^ (std::uint64_t(local) << 32 | std::uint64_t(stream)));
    const std::uint64_t b = splitmix64(a);
    RngState s{std::uint32_t(a), std::uint32_t(a >> kWordBits), std::uint32_t(b), std::uint32_t(b >> kWordBits)};
    if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;  // the all-zero state is a fixed point
    return s;
}

}  // namespace aimcemu::niu
