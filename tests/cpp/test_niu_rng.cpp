// NIU random numbers: xoshiro128++ against a literal transcription of the published reference
// code, jump-ahead against repeated steps, stream keying, and the Gaussian ROM against the normal
// distribution's closed forms (erfc), enumerated over every one of the 2^24 uniforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "niu/niu_rng.hpp"

using namespace aimcemu::niu;

namespace {

// Blackman and Vigna's xoshiro128plusplus.c, written out independently of niu_rng.hpp.
struct Reference {
    std::uint32_t s[4];
    static std::uint32_t rotl(std::uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }
    std::uint32_t next() {
        const std::uint32_t result = rotl(s[0] + s[3], 7) + s[0];
        const std::uint32_t t = s[1] << 9;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 11);
        return result;
    }
};

}  // namespace

TEST(NiuXoshiro, MatchesTheReferenceCode) {
    for (const RngState start : {RngState{1, 2, 3, 4}, RngState{0x9e3779b9u, 0, 0, 0}, RngState{~0u, ~0u, ~0u, ~0u}}) {
        RngState s = start;
        Reference ref{{start[0], start[1], start[2], start[3]}};
        for (int k = 0; k < 100000; ++k) ASSERT_EQ(xoshiro_next(s), ref.next()) << "output " << k;
    }
}

TEST(NiuXoshiro, JumpEqualsRepeatedSteps) {
    const RngState start{0x12345678u, 0x9abcdef0u, 0x0fedcba9u, 0x87654321u};
    RngState stepped = start;
    std::uint64_t done = 0;
    for (std::uint64_t n : {0ull, 1ull, 63ull, 64ull, 65ull, 1000ull, 4096ull, 123457ull}) {
        for (; done < n; ++done) xoshiro_step(stepped);
        EXPECT_EQ(xoshiro_jump(start, n), stepped) << n;
    }
    // Far jumps compose: 2^40 + 12345 = (2^40) then 12345, and 3 * 2^33 in three parts.
    const std::uint64_t far = std::uint64_t(1) << 40;
    EXPECT_EQ(xoshiro_jump(start, far + 12345), xoshiro_jump(xoshiro_jump(start, far), 12345));
    const std::uint64_t part = std::uint64_t(1) << 33;
    EXPECT_EQ(xoshiro_jump(start, 3 * part), xoshiro_jump(xoshiro_jump(xoshiro_jump(start, part), part), part));
    EXPECT_NE(xoshiro_jump(start, far), start);
}

TEST(NiuXoshiro, StreamStatesFollowTheirKey) {
    // Chip generators (0..2) ignore the round; read generators (3, 4) follow it.
    for (int g = 0; g < kGens; ++g) {
        const RngState a = stream_state(1, 2, 3, 4, g, 5);
        EXPECT_EQ(a, stream_state(1, 2, 3, 4, g, 5));
        EXPECT_NE(a, stream_state(9, 2, 3, 4, g, 5));
        EXPECT_NE(a, stream_state(1, 9, 3, 4, g, 5));
        EXPECT_NE(a, stream_state(1, 2, 9, 4, g, 5));
        EXPECT_NE(a, stream_state(1, 2, 3, 4, g, 6));
        if (g < kChipGens) EXPECT_EQ(a, stream_state(1, 2, 3, 9, g, 5));
        else EXPECT_NE(a, stream_state(1, 2, 3, 9, g, 5));
    }
    // All 160 start states of a layer are distinct.
    std::set<RngState> seen;
    for (int g = 0; g < kGens; ++g)
        for (int k = 0; k < kStreams; ++k) seen.insert(stream_state(7, 0, 1, 2, g, k));
    EXPECT_EQ(seen.size(), std::size_t(kGens * kStreams));
}

TEST(NiuXoshiro, UniformsOfAWeightUseEveryOutputBitOnce) {
    const WeightUniforms u = split_uniforms(0xA1B2C3D4u, 0x11223344u, 0x55667788u, 0x99AABBCCu, 0xDDEEFF00u);
    EXPECT_EQ(u.prog_plus, 0xA1B2C3u);
    EXPECT_EQ(u.prog_minus, 0x112233u);
    EXPECT_EQ(u.nu_plus, 0x556677u);
    EXPECT_EQ(u.nu_minus, 0xD44488u);
    EXPECT_EQ(u.read_plus, 0x99AABBu);
    EXPECT_EQ(u.read_minus, 0xDDEEFFu);
}

// ---- Gaussian -------------------------------------------------------------------------------

namespace {

constexpr double kLsb = 1.0 / 4096.0;  // Q3.12
constexpr int kV = gen::NIU_GAUSS_V_BITS;

double two_sided_tail(double z) { return std::erfc(z / std::sqrt(2.0)); }

// |z| with two-sided tail q, by bisection on erfc (independent of the generator's inv_cdf).
double z_of_tail(double q) {
    double lo = 0.0, hi = 40.0;
    for (int i = 0; i < 200; ++i) {
        const double mid = 0.5 * (lo + hi);
        (two_sided_tail(mid) > q ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

// The cell of v by a bit loop (not countl_zero): the group of the leading one (bits 2g, 2g-1) and
// the five bits from 2g down.
int cell_of(std::uint32_t v) {
    int lead = -1;  // v = 0: group 0, window 0
    for (int b = 0; b < kV; ++b)
        if ((v >> b) & 1u) lead = b;
    const int group = (lead + 1) / 2;
    int window = 0;
    for (int b = 2 * group; b > 2 * group - gen::NIU_GAUSS_WINDOW_BITS; --b) window = 2 * window + (b >= 0 ? int((v >> b) & 1u) : 0);
    return (group << gen::NIU_GAUSS_WINDOW_BITS) | window;
}

}  // namespace

TEST(NiuGaussian, IndexAndSignMatchABitLoop) {
    const int half = gen::NIU_GAUSS_ENTRIES / 2;
    for (std::uint32_t v : {0u, 1u, 2u, 3u, 5u, 15u, 16u, 17u, 31u, 1000u, 123456u, (1u << kV) - 1, 1u << (kV - 1)}) {
        EXPECT_EQ(gauss_index(v), cell_of(v)) << v;
        EXPECT_EQ(gauss_index(v | (1u << kV)), half + cell_of(v)) << v;
    }
    for (int i = 0; i < half; ++i) EXPECT_EQ(gen::NIU_GAUSS_ROM[std::size_t(half + i)], -gen::NIU_GAUSS_ROM[std::size_t(i)]) << i;
}

TEST(NiuGaussian, EveryCellHoldsAValueInsideItsQuantileRange) {
    // Count the v of each cell by enumeration, then check that the cell's value lies between the
    // |z| at its two tail probabilities (within half an LSB) and that |z| falls as v grows.
    const int half = gen::NIU_GAUSS_ENTRIES / 2;
    std::vector<std::uint32_t> first(std::size_t(half), ~0u), count(std::size_t(half), 0);
    for (std::uint32_t v = 0; v < (1u << kV); ++v) {
        const int c = gauss_index(v);
        if (first[std::size_t(c)] == ~0u) first[std::size_t(c)] = v;
        ++count[std::size_t(c)];
    }
    double previous = 1e9;
    for (int c = 0; c < half; ++c) {
        if (count[std::size_t(c)] == 0) {
            EXPECT_EQ(gen::NIU_GAUSS_ROM[std::size_t(c)], 0) << "empty cell " << c;
            continue;
        }
        const double q_lo = double(first[std::size_t(c)]) / double(1u << kV);
        const double q_hi = double(first[std::size_t(c)] + count[std::size_t(c)]) / double(1u << kV);
        const double z = gen::NIU_GAUSS_ROM[std::size_t(c)] * kLsb;
        const double z_top = q_lo == 0.0 ? 40.0 : z_of_tail(q_lo);
        EXPECT_LE(z, z_top + 0.5 * kLsb) << c;
        EXPECT_GE(z, z_of_tail(q_hi) - 0.5 * kLsb) << c;
        EXPECT_LE(z, previous) << c;
        previous = z;
    }
}

TEST(NiuGaussian, ExactMomentsAndTailsOverAllUniforms) {
    // Every 24-bit uniform once: the exact distribution the NIU draws from.  Tolerances are the
    // ROM's stated deviations (docs/niu_datapath.md 4.3): variance 1 - 1.5e-4 from quantising |z|
    // to cells, and the Q3.12 rounding of each cell (half an LSB = 1.2e-4 on E|Z|).
    double s1 = 0, sa = 0, s2 = 0, s4 = 0;
    std::vector<double> thresholds{1.0, 2.0, 3.0, 4.0, 5.0};
    std::vector<double> above(thresholds.size(), 0.0);
    const double n = double(1u << gen::NIU_GAUSS_U_BITS);
    for (std::uint32_t u = 0; u < (1u << gen::NIU_GAUSS_U_BITS); ++u) {
        const double z = gaussian_q12(u) * kLsb;
        s1 += z;
        sa += std::abs(z);
        s2 += z * z;
        s4 += z * z * z * z;
        for (std::size_t t = 0; t < thresholds.size(); ++t) above[t] += std::abs(z) > thresholds[t];
    }
    EXPECT_EQ(s1, 0.0);  // the sign bit splits every cell exactly
    EXPECT_NEAR(sa / n, std::sqrt(2.0 / M_PI), 0.5 * kLsb);
    EXPECT_NEAR(s2 / n, 1.0, 2e-4);
    EXPECT_GT(s2 / n, 1.0 - 2e-4);
    EXPECT_NEAR(s4 / n, 3.0, 1e-3);
    // Tails: the step CDF can be off by at most the mass of the cell that straddles z, which is
    // at most 1/8 of the tail probability there (a window of 8 to 31).
    for (std::size_t t = 0; t < thresholds.size(); ++t) {
        const double p = two_sided_tail(thresholds[t]);
        EXPECT_NEAR(above[t] / n, p, p / 8.0) << "P(|Z| > " << thresholds[t] << ")";
    }
    // Reach: the deepest cell (tail mass 2^-22) sits beyond 5.3 sigma.
    EXPECT_GT(gaussian_q12(0) * kLsb, 5.3);
}
