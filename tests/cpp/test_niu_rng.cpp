// NIU random numbers: pcg32 arithmetic and interleaved sub-streams against pcg-cpp itself, and
// the table Gaussian against the normal distribution's closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <pcg_random.hpp>
#include <vector>

#include "niu/niu_rng.hpp"

using namespace aimcemu::niu;

namespace {

// Advances s by n single LCG steps (the definition the jump constants must reproduce).
std::uint64_t step_n(std::uint64_t s, std::uint64_t inc, std::uint64_t n) {
    for (std::uint64_t k = 0; k < n; ++k) s = s * kPcgMult + inc;
    return s;
}

}  // namespace

TEST(NiuPcg, KnownAnswerOfPcgC) {
    // pcg-c's published demo output for pcg32_srandom(42, 54).
    const PcgStream s = PcgStream::from_seed(42, 54);
    PcgCursor cur(s, 0);
    const std::uint32_t expected[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (std::uint32_t e : expected) EXPECT_EQ(cur.next(), e);
}

TEST(NiuPcg, StreamMatchesPcgCppIncludingPositions) {
    for (std::uint64_t seed : {0ull, 1ull, 0xdeadbeefcafef00dull}) {
        const std::uint64_t stream_id = splitmix64(seed);
        const PcgStream s = PcgStream::from_seed(seed, stream_id);
        pcg32 ref(seed, stream_id);
        PcgCursor cur(s, 0);
        for (int k = 0; k < 5000; ++k) ASSERT_EQ(cur.next(), ref()) << "output " << k;
        // A cursor started at position n equals pcg-cpp advanced by n.
        for (std::uint64_t n : {1ull, 31ull, 4096ull, 123456789ull}) {
            pcg32 adv(seed, stream_id);
            adv.advance(n);
            PcgCursor at(s, n);
            for (int k = 0; k < 10; ++k) ASSERT_EQ(at.next(), adv());
        }
    }
}

TEST(NiuPcg, JumpConstantsEqualRepeatedSteps) {
    const std::uint64_t inc = 0x1234567887654321ull | 1u;
    for (std::uint64_t n : {0ull, 1ull, 2ull, 7ull, 64ull, 512ull, 1000ull}) {
        const LcgJump j = jump_for(jump_constants(n), inc);
        EXPECT_EQ(j.apply(99), step_n(99, inc, n)) << n;
    }
    // The generated constants are the ones the C++ computes for the generated configuration.
    const auto chip = jump_constants(std::uint64_t(gen::NIU_CHIP_SLOTS) * gen::NIU_RNG_PIPE);
    const auto read = jump_constants(std::uint64_t(gen::NIU_READ_SLOTS) * gen::NIU_RNG_PIPE);
    EXPECT_EQ(chip.mult, gen::NIU_CHIP_JUMP_MULT);
    EXPECT_EQ(chip.sum, gen::NIU_CHIP_JUMP_SUM);
    EXPECT_EQ(read.mult, gen::NIU_READ_JUMP_MULT);
    EXPECT_EQ(read.sum, gen::NIU_READ_JUMP_SUM);
}

// S units x P sub-states must emit pcg-cpp's exact output order, one beat of S at a time.
class SubStreams : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SubStreams, ReproducePcgCppOrder) {
    const auto [units, pipe] = GetParam();
    const std::uint64_t seed = 0x853c49e6748fea9bull, stream_id = 0xda3e39cb94b95bdbull;
    const PcgStream s = PcgStream::from_seed(seed, stream_id);
    std::vector<std::uint64_t> init(std::size_t(units) * std::size_t(pipe));
    for (std::size_t k = 0; k < init.size(); ++k) init[k] = s.state_at(k);
    SubStreamBank bank(init, units, pipe, jump_for(jump_constants(std::uint64_t(units) * std::uint64_t(pipe)), s.inc));
    pcg32 ref(seed, stream_id);
    std::vector<std::uint32_t> beat(std::size_t(units), 0);
    const int beats = (1 << 18) / units;  // 262144 outputs
    for (int b = 0; b < beats; ++b) {
        bank.next_beat(beat.data());
        for (int u = 0; u < units; ++u) ASSERT_EQ(beat[std::size_t(u)], ref()) << "beat " << b << " unit " << u;
    }
}

INSTANTIATE_TEST_SUITE_P(PipelineDepths, SubStreams,
                         ::testing::Values(std::tuple{1, 1}, std::tuple{1, 4}, std::tuple{1, 8},       //
                                           std::tuple{64, 1}, std::tuple{64, 4}, std::tuple{64, 8},    //
                                           std::tuple{128, 1}, std::tuple{128, 4}, std::tuple{128, 8}));

TEST(NiuPcg, KeyedStreamsDifferPerKeyField) {
    const PcgStream base = keyed_stream(1, 2, 3, 4, 5);
    EXPECT_EQ(base.state0, keyed_stream(1, 2, 3, 4, 5).state0);
    for (const PcgStream& other : {keyed_stream(9, 2, 3, 4, 5), keyed_stream(1, 9, 3, 4, 5), keyed_stream(1, 2, 9, 4, 5),
                                   keyed_stream(1, 2, 3, 9, 5), keyed_stream(1, 2, 3, 4, 9), keyed_stream(2, 1, 3, 4, 5)}) {
        EXPECT_NE(other.state0, base.state0);
        EXPECT_NE(other.inc, base.inc);
    }
}

// ---- Gaussian -------------------------------------------------------------------------------

namespace {
constexpr double kLsb = 1.0 / 4096.0;  // Q3.12
// Two-sided tail P(|Z| > z) of the standard normal.
double two_sided_tail(double z) { return std::erfc(z / std::sqrt(2.0)); }
}  // namespace

TEST(NiuGaussian, KnotsAreTheInverseCdfWithinHalfAnLsb) {
    // Independent of the generator's inv_cdf: check Z[j] brackets q_j through erfc.
    const int segs = 1 << gen::NIU_GAUSS_SEG_BITS;
    for (int j = 0; j + 1 < gen::NIU_GAUSS_ENTRIES; ++j) {
        const int octave = gen::NIU_GAUSS_OCTAVES - 1 - j / segs;
        const double q = double(segs + j % segs) * std::ldexp(1.0, -(octave + gen::NIU_GAUSS_SEG_BITS + 1));
        const double z = gen::NIU_GAUSS_Z[std::size_t(j)] * kLsb;
        EXPECT_LE(two_sided_tail(z + 0.5 * kLsb), q * (1 + 1e-12)) << j;
        EXPECT_GE(two_sided_tail(z - 0.5 * kLsb), q * (1 - 1e-12)) << j;
    }
    EXPECT_EQ(gen::NIU_GAUSS_Z.back(), 0);
    EXPECT_NEAR(gen::NIU_GAUSS_Z.front() * kLsb, 6.23, 0.01);  // reach: q = 2^-31
}

TEST(NiuGaussian, SegmentStartsMapToKnotsAndMappingIsMonotone) {
    // v at the start of segment j (frac = 0) must give exactly Z[j]; |z| never increases with v.
    // In octaves deeper than 26 a segment holds fewer than one v per step, so only the segment
    // starts that a 31-bit v can express are checked there.
    const int segs = 1 << gen::NIU_GAUSS_SEG_BITS;
    const int frac_bits = gen::NIU_GAUSS_FRAC_BITS;
    std::int32_t previous = gen::NIU_GAUSS_Z[0];
    for (int j = 0; j + 1 < gen::NIU_GAUSS_ENTRIES; ++j) {
        const int octave = gen::NIU_GAUSS_OCTAVES - 1 - j / segs;
        const std::uint32_t normalized = std::uint32_t(segs + j % segs) << frac_bits;
        const std::uint32_t v = normalized >> octave;
        if ((v << octave) != normalized) continue;
        EXPECT_EQ(gaussian_q12(v), gen::NIU_GAUSS_Z[std::size_t(j)]) << j;
        EXPECT_EQ(gaussian_q12(v | 0x80000000u), -gen::NIU_GAUSS_Z[std::size_t(j)]) << j;
        const std::uint64_t width = std::uint64_t(1) << (frac_bits - std::min(octave, frac_bits));
        for (std::uint64_t step = 0; step < 16; ++step) {  // points inside the segment, increasing
            const auto inside = std::uint32_t(v + (width * step) / 16);
            const std::int32_t z = gaussian_q12(inside);
            EXPECT_LE(z, previous) << j;
            previous = z;
        }
    }
    EXPECT_EQ(gaussian_q12(0), gen::NIU_GAUSS_Z[0]);  // v = 0 is treated as v = 1
    EXPECT_EQ(gaussian_q12(0x7FFFFFFFu), 0);
}

TEST(NiuGaussian, MomentsAndTailsMatchTheNormal) {
    // 2^22 draws from one pcg32 stream.  Tolerances: 5 standard errors of each estimator plus the
    // table's own bias (piecewise-linear inverse CDF: Var = 1 + 1.2e-4, kurtosis 3 + 4e-4).
    const std::size_t n = std::size_t(1) << 22;
    pcg32 rng(7, 11);
    double s1 = 0, s2 = 0, s4 = 0;
    std::size_t over3 = 0, over4 = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double z = gaussian_q12(rng()) * kLsb;
        s1 += z;
        s2 += z * z;
        s4 += z * z * z * z;
        over3 += std::abs(z) > 3.0;
        over4 += std::abs(z) > 4.0;
    }
    const double dn = double(n);
    EXPECT_NEAR(s1 / dn, 0.0, 5.0 / std::sqrt(dn));
    EXPECT_NEAR(s2 / dn, 1.0, 5.0 * std::sqrt(2.0 / dn) + 2e-4);
    EXPECT_NEAR(s4 / dn, 3.0, 5.0 * std::sqrt(96.0 / dn) + 1e-3);
    for (auto [count, z] : {std::pair{over3, 3.0}, std::pair{over4, 4.0}}) {
        const double p = two_sided_tail(z);
        EXPECT_NEAR(double(count), p * dn, 5.0 * std::sqrt(p * (1 - p) * dn)) << "tail beyond " << z;
    }
}
