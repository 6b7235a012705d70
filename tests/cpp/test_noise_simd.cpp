// The vectorised noise math (noise_models/simd.hpp) against <cmath> and long double over each
// documented domain, block draws against one-at-a-time draws, and the fused PCM-like read against
// the formulas evaluated per device with the scalar closed forms.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <numbers>
#include <vector>

#include <pcg_random.hpp>

#include "noise_models/pcm.hpp"
#include "noise_models/rng.hpp"
#include "noise_models/simd.hpp"

using namespace aimcemu::noise;

namespace {

#define REQUIRE_SIMD()                                                                  \
    if (!simd::available()) GTEST_SKIP() << "this CPU has no AVX2/FMA: scalar path only"

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
}

TEST(NoiseSimd, ExpIsWithinFourUlpOnItsDomain) {
    REQUIRE_SIMD();
    pcg32 rng(2);
    std::vector<double> x;
    for (int i = 0; i < 200000; ++i) x.push_back(-700.0 + 1400.0 * (double(rng()) * 0x1p-32));
    for (double v : {0.0, -0.0, 1.0, -1.0, 0.34657359027997264, -0.34657359027997264, 700.0, -700.0, 1e-300})
        x.push_back(v);
    std::vector<double> y(x.size());
    simd::exp(x.data(), y.data(), x.size());
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], double(std::exp((long double)x[i]))));
    EXPECT_LE(worst, 4.0);
}

TEST(NoiseSimd, SinCosOfTurnsIsWithinTwoUlpOfOneEverywhere) {
    REQUIRE_SIMD();
    pcg32 rng(3);
    std::vector<std::uint32_t> b;
    for (int i = 0; i < 200000; ++i) b.push_back(rng());
    for (std::uint32_t k = 0; k < 8; ++k)   // octant edges and their neighbours
        for (std::int64_t d : {-1, 0, 1}) b.push_back(std::uint32_t(std::int64_t(k) * 0x20000000 + d));
    std::vector<double> s(b.size()), c(b.size());
    simd::sincos_turns(b.data(), s.data(), c.data(), b.size());
    double worst = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        const long double angle = 2.0L * 3.14159265358979323846264338327950288L * ((long double)b[i] / 4294967296.0L);
        worst = std::max({worst, std::abs(s[i] - double(std::sin(angle))), std::abs(c[i] - double(std::cos(angle)))});
    }
    EXPECT_LE(worst, 2 * DBL_EPSILON);
}

TEST(NoiseSimd, BlockPcg32GivesTheSequentialOutputs) {
    for (std::size_t n : {0, 1, 3, 4, 5, 7, 1000}) {
        BlockPcg32 block(12345, 678);
        pcg32 plain(12345, 678);
        block.advance(n * 3);
        plain.advance(n * 3);
        std::vector<std::uint32_t> out(n);
        block.fill_raw(out.data(), n);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], plain()) << "n " << n << ", output " << i;
        EXPECT_EQ(block(), plain()) << "the generator continues where n calls would leave it";
    }
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
