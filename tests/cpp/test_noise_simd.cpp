// The vectorised noise math (noise_models/simd.hpp) against <cmath> and long double over each
// documented domain, block draws against one-at-a-time draws, and the fused PCM-like read against
// the formulas evaluated per device with the scalar closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <stdexcept>
#include <cmath>
#include <iostream>
#include <numbers>
#include <vector>

#include <pcg_random.hpp>

#include "noise_models/pcm.hpp"
#include "noise_models/rng.hpp"
#include "noise_models/simd.hpp"
#include "noise_models/simd_kernels.hpp"
#include "cpuid_features.hpp"

using namespace aimcemu::noise;

namespace {

#define REQUIRE_SIMD()                                                                  \
    if (!simd::available()) GTEST_SKIP() << "this CPU has no AVX2/FMA: scalar path only"

// Runs `body` once on every vector implementation this CPU has (AVX2, AVX-512), routing the
// dispatch to it, and says on stdout which ran; restores the default choice afterwards.
template <class Body>
void on_each_vector_isa(Body&& body) {
    const simd::Isa before = simd::active();
    for (simd::Isa isa : {simd::Isa::Avx2, simd::Isa::Avx512}) {
        if (!simd::supported(isa)) {
            std::cout << "[ path     ] " << simd::name(isa) << ": not on this CPU, skipped\n";
            continue;
        }
        simd::use(isa);
        std::cout << "[ path     ] " << simd::name(isa) << "\n";
        SCOPED_TRACE(simd::name(isa));
        body();
    }
    simd::use(before);
}

// |got - want| in units of the last place of want.
double ulps(double got, double want) { return std::abs(got - want) / (std::abs(want) * DBL_EPSILON); }

}  // namespace

TEST(NoiseSimd, LogIsWithinFourUlpOverPositiveNormals) {
    REQUIRE_SIMD();
    pcg32 rng(1);
    std::vector<double> x;
    for (int i = 0; i < 200000; ++i) x.push_back(std::exp(-700.0 + 1400.0 * (double(rng()) * 0x1p-32)));
    for (double v : {1.0, 2.0, 0.5, std::numbers::sqrt2, std::nextafter(std::numbers::sqrt2, 2.0), 1e-7,
                     0.5 * 0x1p-32, 1.0 - 0x1p-32, DBL_MIN, DBL_MAX, 1.0 + DBL_EPSILON})
        x.push_back(v);
    on_each_vector_isa([&] {
        std::vector<double> y(x.size());
        simd::log(x.data(), y.data(), x.size());
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double want = double(std::log((long double)x[i]));
            worst = std::max(worst, want == 0 ? std::abs(y[i]) / DBL_MIN : ulps(y[i], want));
        }
        EXPECT_LE(worst, 4.0);
        // Near 1 the result is small and must keep its relative accuracy (computing log m as a
        // polynomial in m - 1 rounded to the absolute accuracy of log 2 would not).
        const double near_one = 1.0 + 1e-9, got = [&] { double r; simd::log(&near_one, &r, 1); return r; }();
        EXPECT_LE(ulps(got, double(std::log((long double)near_one))), 4.0);
    });
}

TEST(NoiseSimd, ExpIsWithinFourUlpOnItsDomain) {
    REQUIRE_SIMD();
    pcg32 rng(2);
    std::vector<double> x;
    for (int i = 0; i < 200000; ++i) x.push_back(-700.0 + 1400.0 * (double(rng()) * 0x1p-32));
    for (double v : {0.0, -0.0, 1.0, -1.0, 0.34657359027997264, -0.34657359027997264, 700.0, -700.0, 1e-300})
        x.push_back(v);
    on_each_vector_isa([&] {
        std::vector<double> y(x.size());
        simd::exp(x.data(), y.data(), x.size());
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], double(std::exp((long double)x[i]))));
        EXPECT_LE(worst, 4.0);
    });
}

namespace {

// Doubles over the whole range: `count` random bit patterns (every sign, exponent and mantissa,
// subnormals and NaNs included), uniform values in [-span, span], the specials, and every double
// within 2000 ulp of each of `edges` (where a range guard switches).
std::vector<double> whole_range(std::uint64_t seed, double span, std::initializer_list<double> edges) {
    pcg32 rng(seed);
    std::vector<double> x;
    for (int i = 0; i < 100000; ++i) {
        const std::uint64_t bits = (std::uint64_t(rng()) << 32) | rng();
        double v;
        std::memcpy(&v, &bits, sizeof v);
        x.push_back(v);
        x.push_back(-span + 2 * span * (double(rng()) * 0x1p-32));
    }
    for (double v : {0.0, -0.0, DBL_MIN, -DBL_MIN, DBL_TRUE_MIN, -DBL_TRUE_MIN, DBL_MAX, -DBL_MAX, 1e308, -1e308,
                     -720.0, -745.0, -746.0, 710.0, 1000.0, -1000.0, 1e6, -1e6, HUGE_VAL, -HUGE_VAL, std::nan(""),
                     -std::nan("")})
        x.push_back(v);
    for (double edge : edges) {
        double below = edge, above = edge;
        for (int i = 0; i < 2000; ++i) {
            x.push_back(below = std::nextafter(below, -HUGE_VAL));
            x.push_back(above = std::nextafter(above, HUGE_VAL));
        }
        x.push_back(edge);
    }
    return x;
}

}  // namespace

TEST(NoiseSimd, ExpFollowsStdExpOverTheWholeDoubleRange) {
    // Outside [ln DBL_MIN, ln DBL_MAX] the exponent arithmetic wrapped: exp(-720) gave -6.6e303
    // and exp(710) NaN.  Now: overflow to +inf, underflow (subnormal results too) to +0, NaN kept.
    REQUIRE_SIMD();
    const double min_normal_arg = -0x1.6232bdd7abcd2p+9, max_finite_arg = 0x1.62e42fefa39efp+9;
    ASSERT_GE(std::exp(min_normal_arg), DBL_MIN);
    ASSERT_LT(std::exp(std::nextafter(min_normal_arg, -HUGE_VAL)), DBL_MIN);
    ASSERT_TRUE(std::isfinite(std::exp(max_finite_arg)));
    ASSERT_TRUE(std::isinf(std::exp(std::nextafter(max_finite_arg, HUGE_VAL))));
    const std::vector<double> x = whole_range(4, 1000.0, {min_normal_arg, max_finite_arg, 0.0});
    on_each_vector_isa([&] {
        std::vector<double> y(x.size());
        simd::exp(x.data(), y.data(), x.size());
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double want = std::exp(x[i]);
            if (std::isnan(x[i])) {
                ASSERT_TRUE(std::isnan(y[i])) << "exp(NaN) gave " << y[i];
            } else if (std::isinf(want)) {
                ASSERT_EQ(y[i], HUGE_VAL) << "exp(" << x[i] << ")";
            } else if (want < DBL_MIN) {   // underflow, or a subnormal result: +0
                ASSERT_EQ(y[i], 0.0) << "exp(" << x[i] << ")";
                ASSERT_FALSE(std::signbit(y[i])) << "exp(" << x[i] << ")";
            } else {
                ASSERT_GE(y[i], DBL_MIN) << "exp(" << x[i] << ") must stay normal";
                worst = std::max(worst, ulps(y[i], double(std::exp((long double)x[i]))));
            }
        }
        EXPECT_LE(worst, 4.0);
    });
}

TEST(NoiseSimd, LogFollowsStdLogOverTheWholeDoubleRange) {
    // The exponent field misread outside the positive normals: log(0) was -709.1 (not -inf),
    // log of a negative finite, log(+inf) 709.8, log of a subnormal off by its missing leading 1.
    REQUIRE_SIMD();
    const std::vector<double> x = whole_range(5, 1e300, {DBL_MIN, 0.0});
    on_each_vector_isa([&] {
        std::vector<double> y(x.size());
        simd::log(x.data(), y.data(), x.size());
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            if (std::isnan(x[i]) || x[i] < 0) {
                ASSERT_TRUE(std::isnan(y[i])) << "log(" << x[i] << ") gave " << y[i];
            } else if (x[i] == 0) {
                ASSERT_EQ(y[i], -HUGE_VAL) << "log(" << x[i] << ")";
            } else if (std::isinf(x[i])) {
                ASSERT_EQ(y[i], HUGE_VAL);
            } else {
                const double want = double(std::log((long double)x[i]));
                worst = std::max(worst, want == 0 ? std::abs(y[i]) / DBL_MIN : ulps(y[i], want));
            }
        }
        EXPECT_LE(worst, 4.0);
    });
}

TEST(NoiseSimd, PcmReadOfAFullyDriftedDeviceIsZeroNotHuge) {
    // -nu * log_time below ln DBL_MIN (drift_scale 500 at a year: nu ~ 30, log_time ~ 14) gave
    // conductances up to 3.5e305 and NaN; the device has drifted to 0, as std::exp says.
    REQUIRE_SIMD();
    const auto model = make_noise_model("pcm_like", {{"drift_scale", 500.0}});
    const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*model);
    const double year = 365.25 * 86400;
    for (double nu : {50.0, 60.0, 1e3, 1e300, HUGE_VAL}) {
        on_each_vector_isa([&] {
            EXPECT_EQ(pcm.drift_factor(nu, year), 0.0) << "nu " << nu;
            const double log_time = std::log((year + 20.0) / 20.0);
            const simd::PcmLikeBlock c;
            std::vector<double> g_start(9, 20.0), nus(9, nu), z(9, 1.5), g(9, -1.0);
            simd::pcm_like_read(c, log_time, 1.0, g_start.data(), nus.data(), z.data(), g.size(), g.data());
            for (double v : g) EXPECT_EQ(v, 0.0) << "nu " << nu;
        });
    }
    // And at the top end a negative exponent argument that overflows reads +inf, not NaN.
    on_each_vector_isa([&] { EXPECT_EQ(pcm.drift_factor(-100.0, year), HUGE_VAL); });
    std::vector<double> w(64);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * double(i));
    const LayerState s = model->program(w, {64}, {5, 6, 7});
    on_each_vector_isa([&] {
        for (double v : model->read(s, year, 0)) {
            ASSERT_TRUE(std::isfinite(v));
            ASSERT_LE(std::abs(v), 2.0);
        }
    });
}

TEST(NoiseSimd, SinCosOfTurnsIsWithinTwoUlpOfOneEverywhere) {
    REQUIRE_SIMD();
    pcg32 rng(3);
    std::vector<std::uint32_t> b;
    for (int i = 0; i < 200000; ++i) b.push_back(rng());
    for (std::uint32_t k = 0; k < 8; ++k)   // octant edges and their neighbours
        for (std::int64_t d : {-1, 0, 1}) b.push_back(std::uint32_t(std::int64_t(k) * 0x20000000 + d));
    on_each_vector_isa([&] {
        std::vector<double> s(b.size()), c(b.size());
        simd::sincos_turns(b.data(), s.data(), c.data(), b.size());
        double worst = 0;
        for (std::size_t i = 0; i < b.size(); ++i) {
            const long double angle = 2.0L * 3.14159265358979323846264338327950288L * ((long double)b[i] / 4294967296.0L);
            worst = std::max({worst, std::abs(s[i] - double(std::sin(angle))), std::abs(c[i] - double(std::cos(angle)))});
        }
        EXPECT_LE(worst, 2 * DBL_EPSILON);
    });
}

TEST(NoiseSimd, BlockPcg32GivesTheSequentialOutputs) {
    const auto check = [] {
        for (std::size_t n : {0, 1, 3, 4, 5, 7, 15, 16, 17, 23, 24, 1000, 4099}) {
            BlockPcg32 block(12345, 678);
            pcg32 plain(12345, 678);
            block.advance(n * 3);
            plain.advance(n * 3);
            std::vector<std::uint32_t> out(n);
            block.fill_raw(out.data(), n);
            for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], plain()) << "n " << n << ", output " << i;
            EXPECT_EQ(block(), plain()) << "the generator continues where n calls would leave it";
        }
    };
    check();   // the active path (or the scalar one on a CPU without AVX2)
    on_each_vector_isa(check);
}

TEST(NoiseSimd, BlockDrawsEqualDrawsOneAtATime) {
    const ChipKey key{7, 1, 2};
    for (std::uint64_t first : {0, 1, 6, 9}) {
        DeviceStream one(key, Purpose::Read, 3, first), block(key, Purpose::Read, 3, first);
        DeviceStream u_one(key, Purpose::Fault, 0, first), u_block(key, Purpose::Fault, 0, first);
        for (std::size_t n : {1, 2, 5, 600, 513, 4}) {   // odd sizes leave a sine for the next call
            std::vector<double> z(n), u(n);
            block.gaussians(z.data(), n);
            u_block.uniforms(u.data(), n);
            for (std::size_t i = 0; i < n; ++i) {
                ASSERT_EQ(z[i], one.gaussian()) << "first device " << first << ", block of " << n << ", draw " << i;
                ASSERT_EQ(u[i], u_one.uniform()) << "first device " << first << ", block of " << n << ", draw " << i;
            }
        }
    }
}

TEST(NoiseSimd, FusedPcmReadMatchesThePerDeviceFormulas) {
    // The fused read (re-conversion, drift, Q_s and read noise of the carrying device only)
    // against the same steps written out per device with the public closed forms and the draws
    // of the read stream.  Libm's pow and exp differ from ours by a few ulp, so the comparison
    // allows 1e-12 relative; a wrong device, draw or scale is off by percents.
    const auto model = make_noise_model("pcm_like", {});
    const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*model);
    std::vector<double> w(3001);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * double(i)) * (i % 7 ? 1.0 : 0.01);
    const LayerState s = model->program(w, {3001}, {5, 6, 7});
    const double t = 3600.0;
    const std::vector<double> got = model->read(s, t, 2), g_got = model->read_conductances(s, t, 2);
    const std::vector<double> w_prog = model->programmed_weights(s);
    double abs_max = 0;
    for (double v : w_prog) abs_max = std::max(abs_max, std::abs(v));
    const double scale = 25.0 / abs_max;
    DeviceStream draws(s.key, Purpose::Read, 2, 0);
    for (std::size_t i = 0; i < w.size(); ++i) {
        const double z_plus = draws.gaussian(), z_minus = draws.gaussian();
        const bool plus = w_prog[i] >= 0;
        const double g0 = std::min(std::abs(w_prog[i]) * scale, 25.0);
        const double nu = s.nu[2 * i + (plus ? 0 : 1)];
        const double g_drift = g0 * pcm.drift_factor(nu, t);
        const double g = std::max(0.0, g_drift + std::abs(g_drift) * pcm.read_q(g0) * pcm.read_time_factor(t) *
                                                     (plus ? z_plus : z_minus));
        const double expect = plus ? g / scale : -g / scale;
        ASSERT_NEAR(got[i], expect, 1e-12 * std::abs(expect) + 1e-300) << "weight " << i;
        EXPECT_EQ(g_got[2 * i + (plus ? 1 : 0)], 0.0) << "the device that does not carry the weight reads 0";
    }
}

// --- AVX-512 against AVX2: the same operations per element, so the same bits ----------------------
namespace {

#define REQUIRE_BOTH_PATHS()                                                                              \
    if (!simd::supported(simd::Isa::Avx512) || !simd::supported(simd::Isa::Avx2))                         \
        GTEST_SKIP() << "this CPU lacks AVX-512 or AVX2: nothing to compare";                             \
    std::cout << "[ path     ] comparing " << simd::name(simd::Isa::Avx512) << " with " << simd::name(simd::Isa::Avx2) << "\n"

// Lengths around both vector widths and a block: every partial-vector case of each path.
const std::size_t kLengths[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 23, 31, 33, 512, 1001};

// Bitwise equality of two double arrays (distinguishes -0.0 from 0.0 and compares NaN payloads).
void expect_same_bits(const std::vector<double>& a, const std::vector<double>& b, const char* what, std::size_t n) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0)
            << what << ", length " << n << ", element " << i << ": " << a[i] << " vs " << b[i];
}

std::vector<std::uint32_t> raw_outputs(std::size_t n, std::uint64_t seed) {
    pcg32 rng(seed);
    std::vector<std::uint32_t> r(n);
    for (auto& v : r) v = rng();
    return r;
}

}  // namespace

TEST(NoiseSimdPaths, MathFunctionsAreBitIdentical) {
    REQUIRE_BOTH_PATHS();
    pcg32 rng(11);
    for (std::size_t n : kLengths) {
        std::vector<double> x(n), e(n);
        for (std::size_t i = 0; i < n; ++i) {
            x[i] = std::exp(-700.0 + 1400.0 * (double(rng()) * 0x1p-32));
            e[i] = -700.0 + 1400.0 * (double(rng()) * 0x1p-32);
        }
        if (n > 3) x[0] = DBL_MIN, x[1] = DBL_MAX, x[2] = 1.0, e[0] = 0.0, e[1] = -0.0, e[2] = 700.0;
        std::vector<double> a(n, -1.0), b(n, -1.0);
        simd::avx2::log(x.data(), a.data(), n);
        simd::avx512::log(x.data(), b.data(), n);
        expect_same_bits(a, b, "log", n);
        simd::avx2::exp(e.data(), a.data(), n);
        simd::avx512::exp(e.data(), b.data(), n);
        expect_same_bits(a, b, "exp", n);
        std::vector<std::uint32_t> turns = raw_outputs(n, n + 1);
        for (std::size_t k = 0; k < n && k < 24; ++k)   // octant edges and their neighbours
            turns[k] = std::uint32_t(std::int64_t(k / 3) * 0x20000000 + std::int64_t(k % 3) - 1);
        std::vector<double> s2(n, -1.0), c2(n, -1.0), s5(n, -1.0), c5(n, -1.0);
        simd::avx2::sincos_turns(turns.data(), s2.data(), c2.data(), n);
        simd::avx512::sincos_turns(turns.data(), s5.data(), c5.data(), n);
        expect_same_bits(s2, s5, "sin", n);
        expect_same_bits(c2, c5, "cos", n);
    }
}

TEST(NoiseSimdPaths, BoxMullerIsBitIdentical) {
    REQUIRE_BOTH_PATHS();
    for (std::size_t n : kLengths) {
        std::vector<std::uint32_t> raw = raw_outputs(2 * ((n + 1) / 2), 100 + n);
        if (n >= 4) raw[0] = 0, raw[1] = 0xFFFFFFFFu, raw[2] = 0xFFFFFFFFu, raw[3] = 0x20000000u;   // extreme radius/angles
        std::vector<double> a(n, -1.0), b(n, -1.0);
        simd::avx2::box_muller(raw.data(), a.data(), n);
        simd::avx512::box_muller(raw.data(), b.data(), n);
        expect_same_bits(a, b, "box_muller", n);
    }
}

// The PCM-like kernels' constants for the path comparisons (PCM's programming polynomial,
// scales away from 1 so that a dropped factor changes the bits).
simd::PcmLikeBlock pcm_block_for_tests() {
    static const double coeff[] = {0.26348, 1.9650, -1.1731};
    simd::PcmLikeBlock c;
    c.prog_coeff = coeff;
    c.prog_coeff_count = 3;
    c.prog_noise_scale = 1.3, c.drift_scale = 0.9, c.read_noise_scale = 1.1;
    return c;
}

TEST(NoiseSimdPaths, PcmKernelsAreBitIdentical) {
    REQUIRE_BOTH_PATHS();
    const simd::PcmLikeBlock c = pcm_block_for_tests();
    pcg32 rng(21);
    const auto uniform = [&] { return double(rng()) * 0x1p-32; };
    for (std::size_t n : kLengths) {
        const std::size_t devices = 2 * n;   // n weights, a pair each
        std::vector<double> g(devices), z1(devices), z2(devices), z3(devices);
        for (std::size_t i = 0; i < devices; ++i) {
            g[i] = i % 5 == 0 ? 0.0 : 25.0 * uniform();   // zeros: the clamped logs and the g_start = 0 branch
            z1[i] = 6.0 * uniform() - 3.0, z2[i] = 6.0 * uniform() - 3.0, z3[i] = 6.0 * uniform() - 3.0;
        }
        std::vector<double> gp2(devices, -1.0), nu2(devices, -1.0), gp5(devices, -1.0), nu5(devices, -1.0);
        simd::avx2::pcm_like_program(c, g.data(), z1.data(), z2.data(), devices, gp2.data(), nu2.data());
        simd::avx512::pcm_like_program(c, g.data(), z1.data(), z2.data(), devices, gp5.data(), nu5.data());
        expect_same_bits(gp2, gp5, "pcm_like_program g_prog", n);
        expect_same_bits(nu2, nu5, "pcm_like_program nu", n);
        std::vector<double> r2(devices, -1.0), r5(devices, -1.0);
        simd::avx2::pcm_like_read(c, std::log(86420.0 / 20.0), 4.1, gp2.data(), nu2.data(), z3.data(), devices, r2.data());
        simd::avx512::pcm_like_read(c, std::log(86420.0 / 20.0), 4.1, gp2.data(), nu2.data(), z3.data(), devices, r5.data());
        expect_same_bits(r2, r5, "pcm_like_read", n);
        std::vector<double> w2(n, -1.0), w5(n, -1.0);
        simd::avx2::pcm_like_read_reconverted(c, 8.4, 4.1, 0.7, 1.3, gp2.data(), nu2.data(), z3.data(), n, r2.data(), w2.data());
        simd::avx512::pcm_like_read_reconverted(c, 8.4, 4.1, 0.7, 1.3, gp2.data(), nu2.data(), z3.data(), n, r5.data(), w5.data());
        expect_same_bits(r2, r5, "pcm_like_read_reconverted g", n);
        expect_same_bits(w2, w5, "pcm_like_read_reconverted w", n);
    }
}

TEST(NoiseSimdPaths, PcmProgramKernelOnSinglePairLayoutsIsBitIdentical) {
    // Single-pair layouts, where a pair's other device is 0 (or below the log's 1e-7 floor): the
    // AVX-512 kernel takes one logarithm per pair of 16-device groups in which every pair has a
    // device at the floor, and two otherwise; both must give the AVX2 path's bits.
    REQUIRE_BOTH_PATHS();
    const simd::PcmLikeBlock c = pcm_block_for_tests();
    pcg32 rng(22);
    const auto uniform = [&] { return double(rng()) * 0x1p-32; };
    for (std::size_t n : kLengths) {
        const std::size_t devices = 2 * n;
        std::vector<double> g(devices), z1(devices), z2(devices);
        for (std::size_t k = 0; k < n; ++k) {
            const double on = 25.0 * uniform();
            switch (k % 5) {
                case 0: g[2 * k] = on, g[2 * k + 1] = 0.0; break;
                case 1: g[2 * k] = 0.0, g[2 * k + 1] = on; break;
                case 2: g[2 * k] = 0.0, g[2 * k + 1] = 0.0; break;           // a zero weight
                case 3: g[2 * k] = on, g[2 * k + 1] = 25.0 * 1e-9; break;    // below the floor, not 0
                default:                                                     // no device at the floor in some groups
                    g[2 * k] = on, g[2 * k + 1] = k % 10 == 4 ? 25.0 * uniform() : 0.0;
            }
        }
        for (std::size_t i = 0; i < devices; ++i) z1[i] = 6.0 * uniform() - 3.0, z2[i] = 6.0 * uniform() - 3.0;
        std::vector<double> gp2(devices, -1.0), nu2(devices, -1.0), gp5(devices, -1.0), nu5(devices, -1.0);
        simd::avx2::pcm_like_program(c, g.data(), z1.data(), z2.data(), devices, gp2.data(), nu2.data());
        simd::avx512::pcm_like_program(c, g.data(), z1.data(), z2.data(), devices, gp5.data(), nu5.data());
        expect_same_bits(gp2, gp5, "pcm_like_program g_prog (single pair)", n);
        expect_same_bits(nu2, nu5, "pcm_like_program nu (single pair)", n);
    }
}

TEST(NoiseSimdPaths, WholeLayerProgramDriftReadIsBitIdentical) {
    // Program + drift + read of a layer (more than one chunk, a partial last block) through the
    // model, once per path: every draw and every result must be the same bits.
    REQUIRE_BOTH_PATHS();
    std::vector<double> w(40007);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * double(i)) * (i % 7 ? 1.0 : 0.01);
    struct Result {
        std::vector<double> g_prog, nu, g_read, w_read;
    };
    // The default re-converted read takes the fused kernel; drift_reference 'programmed' the
    // per-block read (read_block).
    for (const NoiseParams& params : {NoiseParams{}, NoiseParams{{"drift_reference", std::string("programmed")}}}) {
        const auto run = [&](simd::Isa isa) {
            const simd::Isa before = simd::use(isa);
            const auto model = make_noise_model("pcm_like", params);
            const LayerState s = model->program(w, {40007}, {5, 6, 7});
            Result r{{s.g_prog.begin(), s.g_prog.end()}, {s.nu.begin(), s.nu.end()},
                     model->read_conductances(s, 86400.0, 3), model->read(s, 86400.0, 3)};
            simd::use(before);
            return r;
        };
        const Result a = run(simd::Isa::Avx2), b = run(simd::Isa::Avx512);
        expect_same_bits(a.g_prog, b.g_prog, "programmed conductances", w.size());
        expect_same_bits(a.nu, b.nu, "drift exponents", w.size());
        expect_same_bits(a.g_read, b.g_read, "read conductances", w.size());
        expect_same_bits(a.w_read, b.w_read, "read weights", w.size());
    }
}

TEST(NoiseSimdPaths, TheWidestPathTheCpuOffersIsPreferred) {
    // The AVX-512 and AVX2 paths give the same bits, and the tests of the AVX-512 path skip through
    // simd::supported(): a broken feature check would drop the path with every test green.  This
    // one compares the dispatcher's choice with CPUID and XCR0 read here.
    const aimcemu::test_cpu::VectorFeatures cpu = aimcemu::test_cpu::vector_features();
    const bool avx2 = cpu.avx2 && cpu.fma;
    const bool avx512 = avx2 && cpu.avx512f && cpu.avx512dq && cpu.avx512vl;
    const simd::Isa expected = avx512 ? simd::Isa::Avx512 : avx2 ? simd::Isa::Avx2 : simd::Isa::Scalar;
    EXPECT_EQ(simd::supported(simd::Isa::Avx2), avx2) << "CPUID: AVX2 " << cpu.avx2 << ", FMA " << cpu.fma;
    EXPECT_EQ(simd::supported(simd::Isa::Avx512), avx512)
        << "CPUID: AVX-512F " << cpu.avx512f << ", DQ " << cpu.avx512dq << ", VL " << cpu.avx512vl;
    EXPECT_EQ(simd::preferred(), expected) << "preferred " << simd::name(simd::preferred()) << ", CPUID offers "
                                           << simd::name(expected);
    std::cout << "[ path     ] preferred: " << simd::name(simd::preferred()) << "\n";
}

TEST(NoiseSimdPaths, VectorPcg32GivesTheSequentialOutputs) {
    struct Exposed : pcg32 {   // pcg32 with its state and increment reachable
        using pcg32::pcg32;
        std::uint64_t& state() { return state_; }
        std::uint64_t step() const { return increment(); }
    };
    using Generator = void (*)(std::uint64_t&, std::uint64_t, std::uint32_t*, std::size_t);
    const std::pair<simd::Isa, Generator> paths[] = {{simd::Isa::Avx2, simd::avx2::pcg32_outputs},
                                                     {simd::Isa::Avx512, simd::avx512::pcg32_outputs}};
    int tested = 0;
    for (const auto& [isa, generate] : paths) {
        if (!simd::supported(isa)) continue;
        std::cout << "[ path     ] " << simd::name(isa) << " pcg32\n";
        ++tested;
        // States whose rotation (s >> 59) is 0 and 31 come up among the 1003 outputs; the
        // streams cover increments with every high bit pattern the 32-bit products split.
        for (std::uint64_t stream : {0ULL, 1ULL, 0x5bd1e995ULL, 0x7fffffff80000000ULL, ~0ULL})
            for (std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 512, 1003}) {
                Exposed vector(0x853c49e6748fea9bULL ^ stream, stream);
                pcg32 plain(0x853c49e6748fea9bULL ^ stream, stream);
                std::vector<std::uint32_t> out(n);
                generate(vector.state(), vector.step(), out.data(), n);
                for (std::size_t i = 0; i < n; ++i)
                    ASSERT_EQ(out[i], plain()) << simd::name(isa) << ", stream " << stream << ", n " << n << ", output " << i;
                EXPECT_EQ(vector(), plain()) << "the state after n outputs, stream " << stream << ", n " << n;
            }
    }
    if (tested == 0) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
}

TEST(NoiseSimdPaths, UseRefusesAnIsaTheCpuLacks) {
    for (simd::Isa isa : {simd::Isa::Scalar, simd::Isa::Avx2, simd::Isa::Avx512}) {
        if (simd::supported(isa)) continue;
        EXPECT_THROW(simd::use(isa), std::invalid_argument) << simd::name(isa);
    }
    EXPECT_TRUE(simd::supported(simd::Isa::Scalar));
}

// The vector conversion of a single pair against std::clamp per weight, bit for bit on each path:
// signed zeros (+0 and -0 of the product), weights past either end of the range, the ends
// themselves, and lengths that leave every partial last vector.
TEST(NoiseSimd, SinglePairConvertIsTheScalarClampBitForBit) {
    REQUIRE_SIMD();
    pcg32 rng(7);
    std::vector<double> w = {0.0, -0.0, 1.0, -1.0, 1.25, -1.25, 0.999999, -1e-300, 1e-300, DBL_MIN, -DBL_MIN, 3.0};
    for (int i = 0; i < 5000; ++i) w.push_back(-1.5 + 3.0 * (double(rng()) * 0x1p-32));
    for (double g_min : {0.0, 9.0}) {
        const double g_max = 25.0, scale = 25.0 / 1.25;
        on_each_vector_isa([&] {
            for (std::size_t n : {w.size(), std::size_t(1), std::size_t(7), std::size_t(9), std::size_t(13)}) {
                std::vector<double> got(2 * n, std::nan("")), want(2 * n);
                simd::single_pair_convert(w.data(), n, scale, g_max, g_min, got.data());
                for (std::size_t i = 0; i < n; ++i) {
                    want[2 * i] = std::clamp(w[i] * scale, 0.0, g_max) + g_min;
                    want[2 * i + 1] = std::clamp(-w[i] * scale, 0.0, g_max) + g_min;
                }
                EXPECT_EQ(std::memcmp(got.data(), want.data(), 2 * n * sizeof(double)), 0)
                    << "n " << n << " g_min " << g_min;
            }
        });
    }
}
