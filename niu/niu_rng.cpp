// xoshiro128++ stream keying and jump-ahead (see niu_rng.hpp).
#include "niu/niu_rng.hpp"

#include <vector>

namespace aimcemu::niu {
namespace {

// A 128x128 matrix over GF(2) acting on the state bits (bit 32*w + b = bit b of s[w]), stored
// for fast application as 32 nibble tables: entry [n][v] = M * (v << 4n).
struct BitMatrix {
    std::array<RngState, 128> columns{};  // M * e_i

    static BitMatrix engine() {
        BitMatrix m;
        for (int i = 0; i < 128; ++i) {
            RngState e{};
            e[std::size_t(i / 32)] = 1u << (i % 32);
            xoshiro_step(e);
            m.columns[std::size_t(i)] = e;
        }
        return m;
    }
    RngState apply(const RngState& s) const {
        RngState r{};
        for (int i = 0; i < 128; ++i)
            if ((s[std::size_t(i / 32)] >> (i % 32)) & 1u)
                for (int w = 0; w < 4; ++w) r[std::size_t(w)] ^= columns[std::size_t(i)][std::size_t(w)];
        return r;
    }
    BitMatrix squared() const {
        BitMatrix m;
        for (int i = 0; i < 128; ++i) m.columns[std::size_t(i)] = apply(columns[std::size_t(i)]);
        return m;
    }
};

struct NibbleTables {
    std::array<std::array<RngState, 16>, 32> t{};

    explicit NibbleTables(const BitMatrix& m) {
        for (int n = 0; n < 32; ++n)
            for (int v = 0; v < 16; ++v) {
                RngState r{};
                for (int b = 0; b < 4; ++b)
                    if ((v >> b) & 1)
                        for (int w = 0; w < 4; ++w) r[std::size_t(w)] ^= m.columns[std::size_t(4 * n + b)][std::size_t(w)];
                t[std::size_t(n)][std::size_t(v)] = r;
            }
    }
    RngState apply(const RngState& s) const {
        RngState r{};
        for (int n = 0; n < 32; ++n) {
            const RngState& e = t[std::size_t(n)][(s[std::size_t(n / 8)] >> (4 * (n % 8))) & 15u];
            for (int w = 0; w < 4; ++w) r[std::size_t(w)] ^= e[std::size_t(w)];
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
    RngState s{std::uint32_t(a), std::uint32_t(a >> 32), std::uint32_t(b), std::uint32_t(b >> 32)};
    if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;  // the all-zero state is a fixed point
    return s;
}

}  // namespace aimcemu::niu
