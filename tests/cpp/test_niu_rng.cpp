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
    const WeightUniforms u = split_uniforms(0xA1B2C3D4u, 0x11223344u, 0x55667788u, 0x99AABBCCu);
    EXPECT_EQ(u.prog_plus, 0xA1B2C3u);
    EXPECT_EQ(u.prog_minus, 0x112233u);
    EXPECT_EQ(u.nu_plus, 0x556677u);
    EXPECT_EQ(u.nu_minus, 0xD44488u);
    EXPECT_EQ(u.read_plus, 0x99AAu);
    EXPECT_EQ(u.read_minus, 0xBBCCu);
}

// The vector kernels divide by the group span with a multiply and a shift (no SIMD division):
// exact_reciprocal must give one that is exact for every numerator up to its bound, with the
// product inside a signed 32-bit lane, and the bound must cover every group numerator of both
// uniform widths (the leading one of a magnitude sits at most at bit ubits - 2).
TEST(NiuGaussian, ExactReciprocalDividesEveryNumeratorUpToItsBound) {
    for (int divisor = 1; divisor <= 9; ++divisor)
        for (int max_x : {7, 14, 23, 30, 255, 4095}) {
            const ExactReciprocal r = exact_reciprocal(divisor, max_x);
            ASSERT_GE(r.shift, 0) << divisor << " " << max_x;
            for (std::int64_t x = 0; x <= max_x; ++x) {
                ASSERT_LT(x * r.mul, std::int64_t(1) << 31);
                ASSERT_EQ((x * r.mul) >> r.shift, x / divisor) << divisor << " " << x;
            }
        }
    for (const int ubits : {gen::NIU_GAUSS_CHIP_U_BITS, gen::NIU_GAUSS_READ_U_BITS}) {
        const int span = gen::NIU_GAUSS_GROUP_SPAN, offset = (ubits - 2) % span;
        const int top_numerator = (ubits - 2) - offset + span - 1;  // v = 2^(ubits-1) - 1
        EXPECT_EQ(gauss_group_numerator_max(ubits), top_numerator);
        EXPECT_EQ(top_numerator / span, gauss_index((1u << (ubits - 1)) - 1, ubits) >> gen::NIU_GAUSS_WINDOW_BITS);
    }
}

// ---- Gaussian -------------------------------------------------------------------------------

namespace {

constexpr double kLsb = 1.0 / 4096.0;  // Q3.12

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

// The cell of a magnitude v of vbits bits by a bit loop (not countl_zero): three-bit groups
// aligned at bit vbits-1, the group of the leading one, and the six bits from the group's top.
int cell_of(std::uint32_t v, int vbits) {
    const int offset = (vbits - 1) % 3;
    int lead = -1;  // v = 0: group 0, window 0
    for (int b = 0; b < vbits; ++b)
        if ((v >> b) & 1u) lead = b;
    int group = 0;
    while (3 * (group + 1) + offset - 2 <= lead) ++group;  // the next group's lowest bit is at or below lead
    int window = 0;
    for (int b = 3 * group + offset; b > 3 * group + offset - gen::NIU_GAUSS_WINDOW_BITS; --b)
        window = 2 * window + (b >= 0 ? int((v >> b) & 1u) : 0);
    return (group << gen::NIU_GAUSS_WINDOW_BITS) | window;
}

struct Rom {
    int ubits;
    const std::array<std::int16_t, gen::NIU_GAUSS_ENTRIES>* table;
    std::int32_t (*gaussian)(std::uint32_t);
};
const Rom kRoms[] = {{gen::NIU_GAUSS_CHIP_U_BITS, &gen::NIU_GAUSS_CHIP_ROM, gaussian_chip},
                     {gen::NIU_GAUSS_READ_U_BITS, &gen::NIU_GAUSS_READ_ROM, gaussian_read}};

}  // namespace

TEST(NiuGaussian, IndexAndSignMatchABitLoop) {
    const int half = gen::NIU_GAUSS_ENTRIES / 2;
    for (const Rom& rom : kRoms) {
        const int vbits = rom.ubits - 1;
        for (std::uint32_t v = 0; v < (1u << vbits); v = v < 4096 ? v + 1 : v * 3 + 1) {
            ASSERT_EQ(gauss_index(v, rom.ubits), cell_of(v, vbits)) << rom.ubits << " " << v;
            ASSERT_EQ(gauss_index(v | (1u << vbits), rom.ubits), half + cell_of(v, vbits)) << rom.ubits << " " << v;
        }
        for (int i = 0; i < half; ++i) EXPECT_EQ((*rom.table)[std::size_t(half + i)], -(*rom.table)[std::size_t(i)]) << i;
    }
}

TEST(NiuGaussian, EveryCellHoldsAValueInsideItsQuantileRange) {
    // Count the v of each cell by enumeration, then check that the cell's value lies between the
    // |z| at its two tail probabilities (within half an LSB) and that |z| falls as v grows.
    const int half = gen::NIU_GAUSS_ENTRIES / 2;
    for (const Rom& rom : kRoms) {
        const int vbits = rom.ubits - 1;
        std::vector<std::uint32_t> first(std::size_t(half), ~0u), count(std::size_t(half), 0);
        std::vector<int> order;
        for (std::uint32_t v = 0; v < (1u << vbits); ++v) {
            const int c = gauss_index(v, rom.ubits);
            if (first[std::size_t(c)] == ~0u) {
                first[std::size_t(c)] = v;
                order.push_back(c);
            }
            ++count[std::size_t(c)];
        }
        for (int c = 0; c < half; ++c)
            if (count[std::size_t(c)] == 0) EXPECT_EQ((*rom.table)[std::size_t(c)], 0) << "empty cell " << c;
        double previous = 1e9;
        for (int c : order) {  // cells in increasing v
            const double q_lo = double(first[std::size_t(c)]) / double(1u << vbits);
            const double q_hi = double(first[std::size_t(c)] + count[std::size_t(c)]) / double(1u << vbits);
            const double z = (*rom.table)[std::size_t(c)] * kLsb;
            EXPECT_LE(z, (q_lo == 0.0 ? 40.0 : z_of_tail(q_lo)) + 0.5 * kLsb) << rom.ubits << " cell " << c;
            EXPECT_GE(z, z_of_tail(q_hi) - 0.5 * kLsb) << rom.ubits << " cell " << c;
            EXPECT_LE(z, previous) << rom.ubits << " cell " << c;
            previous = z;
        }
    }
}

TEST(NiuGaussian, ExactMomentsAndTailsOverAllUniforms) {
    // Every uniform once: the exact distribution the NIU draws from.  Tolerances are the ROMs'
    // stated deviations (docs/niu_datapath.md 4.3): variance 1 - 7e-5 from quantising |z| to
    // cells, and the Q3.12 rounding of each cell (half an LSB = 1.2e-4 on E|Z|).
    for (const Rom& rom : kRoms) {
        double s1 = 0, sa = 0, s2 = 0, s4 = 0;
        const std::vector<double> thresholds{1.0, 2.0, 3.0, 4.0};
        std::vector<double> above(thresholds.size(), 0.0);
        const double n = double(1u << rom.ubits);
        for (std::uint32_t u = 0; u < (1u << rom.ubits); ++u) {
            const double z = rom.gaussian(u) * kLsb;
            s1 += z;
            sa += std::abs(z);
            s2 += z * z;
            s4 += z * z * z * z;
            for (std::size_t t = 0; t < thresholds.size(); ++t) above[t] += std::abs(z) > thresholds[t];
        }
        EXPECT_EQ(s1, 0.0);  // the sign bit splits every cell exactly
        EXPECT_NEAR(sa / n, std::sqrt(2.0 / M_PI), 0.5 * kLsb) << rom.ubits;
        EXPECT_NEAR(s2 / n, 1.0, 1.5e-4) << rom.ubits;
        EXPECT_NEAR(s4 / n, 3.0, 1e-3) << rom.ubits;
        // Tails: the step CDF can be off by at most the mass of the cell that straddles z, which is
        // at most 1/8 of the tail probability there (a window of 8 to 63).
        for (std::size_t t = 0; t < thresholds.size(); ++t) {
            const double p = two_sided_tail(thresholds[t]);
            EXPECT_NEAR(above[t] / n, p, p / 8.0) << rom.ubits << " P(|Z| > " << thresholds[t] << ")";
        }
    }
    // Reach: the deepest cell (v = 0) sits beyond 5.4 sigma for the chip draws, 4.3 for the read draws.
    EXPECT_GT(gaussian_chip(0) * kLsb, 5.4);
    EXPECT_GT(gaussian_read(0) * kLsb, 4.3);
}
