// Statistical tests of the device noise models against closed forms.
//
// Tolerances: every estimate is compared with its closed form within kZ standard errors of
// the estimator at the test's sample size n (kZ = 5: a false alarm has probability < 1e-6 per
// check; seeds are fixed, so the tests are deterministic anyway).  Standard errors:
//   mean:        s / sqrt(n)
//   std (normal): s / sqrt(2n)
//   std (other):  s * sqrt((kurtosis - 1) / (4n)), kurtosis estimated from the sample
//   proportion:   sqrt(p (1 - p) / n)
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <span>
#include <vector>

#include "noise_models/generic.hpp"
#include "noise_models/pcm.hpp"
#include "noise_models/reram.hpp"

using namespace aimcemu::noise;

namespace {

constexpr double kZ = 5.0;

struct Moments {
    double mean = 0, sd = 0, kurtosis = 3;
    std::size_t n = 0;
};

Moments moments(const std::vector<double>& x) {
    Moments m;
    m.n = x.size();
    for (double v : x) m.mean += v;
    m.mean /= double(m.n);
    double m2 = 0, m4 = 0;
    for (double v : x) {
        const double d = (v - m.mean) * (v - m.mean);
        m2 += d;
        m4 += d * d;
    }
    m2 /= double(m.n);
    m4 /= double(m.n);
    m.sd = std::sqrt(m2);
    m.kurtosis = m4 / (m2 * m2);
    return m;
}

void expect_mean(const Moments& m, double expected, double sd_expected, const char* what) {
    EXPECT_NEAR(m.mean, expected, kZ * sd_expected / std::sqrt(double(m.n))) << what;
}
void expect_sd(const Moments& m, double expected, const char* what) {
    const double se = expected * std::sqrt((m.kurtosis - 1.0) / (4.0 * double(m.n)));
    EXPECT_NEAR(m.sd, expected, kZ * se) << what;
}

double phi_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

// Folded normal |N(mu, s^2)|: closed-form mean and standard deviation.
double folded_mean(double mu, double s) {
    return s * std::sqrt(2.0 / std::numbers::pi) * std::exp(-mu * mu / (2 * s * s)) + mu * (1 - 2 * phi_cdf(-mu / s));
}
double folded_sd(double mu, double s) {
    const double m = folded_mean(mu, s);
    return std::sqrt(mu * mu + s * s - m * m);
}
// E[exp(-L |X|)], X ~ N(mu, s^2): the mean drift factor (t/t0)^-nu with L = ln(t/t0).
double folded_laplace(double mu, double s, double L) {
    return std::exp(-L * mu + L * L * s * s / 2) * phi_cdf((mu - L * s * s) / s) +
           std::exp(L * mu + L * L * s * s / 2) * phi_cdf((-mu - L * s * s) / s);
}

// A layer of n weights equal to x (relative to the abs-max) plus one anchor weight 1.0 that
// fixes the scale, so every g+ device but the last has g_target = x * g_max.
std::vector<double> constant_layer(std::size_t n, double x) {
    std::vector<double> w(n + 1, x);
    w[n] = 1.0;
    return w;
}

// The g+ devices (index 0 of each pair) of the first n weights.
std::vector<double> positive_devices(std::span<const double> g, std::size_t n) {
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = g[2 * i];
    return out;
}

std::unique_ptr<NoiseModel> model(const std::string& name, NoiseParams p = {}) { return make_noise_model(name, p); }

// The PCM-family models under test, with extra parameters merged in.
struct Family {
    std::string name;
    NoiseParams params;
};
std::vector<Family> families(const std::vector<std::string>& names, const NoiseParams& extra) {
    std::vector<Family> out;
    for (const std::string& name : names) {
        out.push_back({name, extra});
        if (name == "hermes") {  // both HERMES fits
            NoiseParams one = extra;
            one["num_devices"] = 1.0;
            out.push_back({name, one});
        }
    }
    return out;
}

constexpr std::size_t kN = 100000;

}  // namespace

TEST(NoiseStats, ProgrammingSigmaMatchesPolynomialAtSeveralConductances) {
    for (const auto& [name, params] : families({"pcm_like", "hermes"}, {{"drift_reference", std::string("programmed")}})) {
        auto m = model(name, params);
        const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*m);
        for (double x : {0.25, 0.5, 0.75, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {7, 1, 2});
            const Moments mo = moments(positive_devices(s.g_prog, kN));
            const double g_t = x * pcm.g_max(), sigma = pcm.prog_sigma(g_t);
            expect_mean(mo, g_t, sigma, name.c_str());
            expect_sd(mo, sigma, name.c_str());
        }
    }
}

TEST(NoiseStats, ZeroTargetDeviceIsRectifiedNormal) {
    // aihwkit quirk kept: the "off" device of a pair (g_T = 0) gets sigma_prog(0) and is clipped
    // at 0, so it is max(0, sigma*xi): P(0) = 1/2, mean sigma/sqrt(2 pi), E[g^2] = sigma^2/2.
    auto m = model("pcm_like");
    const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*m);
    const LayerState s = m->program(constant_layer(kN, 0.5), {std::int64_t(kN + 1)}, {3, 0, 0});
    std::vector<double> off(kN);
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < kN; ++i) {
        off[i] = s.g_prog[2 * i + 1];
        zeros += off[i] == 0.0;
    }
    const double sigma = pcm.prog_sigma(0.0);
    const Moments mo = moments(off);
    const double sd = sigma * std::sqrt(0.5 - 1 / (2 * std::numbers::pi));
    expect_mean(mo, sigma / std::sqrt(2 * std::numbers::pi), sd, "rectified-normal mean");
    expect_sd(mo, sd, "rectified-normal sd");
    EXPECT_NEAR(double(zeros) / kN, 0.5, kZ * 0.5 / std::sqrt(double(kN)));
}

TEST(NoiseStats, DriftExponentIsFoldedNormal) {
    for (const auto& [name, params] : families({"pcm_like", "hermes", "state_independent"}, {})) {
        auto m = model(name, params);
        const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*m);
        for (double x : {0.02, 0.1, 0.5, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {11, 4, 0});
            const Moments mo = moments(positive_devices(s.nu, kN));
            const double g_t = x * pcm.g_max();
            const double mu = pcm.nu_mean(g_t), sd = pcm.nu_std(g_t);
            expect_mean(mo, folded_mean(mu, sd), folded_sd(mu, sd), name.c_str());
            expect_sd(mo, folded_sd(mu, sd), name.c_str());
        }
    }
}

TEST(NoiseStats, ReadNoiseSigmaFollowsOneOverFLaw) {
    // With programming noise and drift off, g_read / g_T - 1 ~ N(0, Q_s * sqrt(ln((t+t0+t_r)/(2 t_r)))).
    const NoiseParams read_only = {{"prog_noise_scale", 0.0}, {"drift_scale", 0.0}, {"drift_reference", std::string("programmed")}};
    for (const auto& [name, params] : families({"pcm_like", "hermes"}, read_only)) {
        auto m = model(name, params);
        const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*m);
        for (double x : {0.3, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {5, 0, 1});
            const double g_t = x * pcm.g_max();
            for (double t : {0.0, 3600.0, 365.0 * 86400.0}) {
                const std::vector<double> g = positive_devices(m->read_conductances(s, t, 9), kN);
                std::vector<double> rel(kN);
                for (std::size_t i = 0; i < kN; ++i) rel[i] = g[i] / g_t - 1.0;
                const double sigma = pcm.read_q(g_t) * pcm.read_time_factor(t);
                const Moments mo = moments(rel);
                expect_mean(mo, 0.0, sigma, name.c_str());
                expect_sd(mo, sigma, name.c_str());
            }
        }
    }
}

TEST(NoiseStats, MeanDriftMatchesFoldedNormalLaplaceTransform) {
    const NoiseParams drift_only = {{"prog_noise_scale", 0.0}, {"read_noise_scale", 0.0}, {"drift_reference", std::string("programmed")}};
    for (const auto& [name, params] : families({"pcm_like", "hermes"}, drift_only)) {
        auto m = model(name, params);
        const auto& pcm = dynamic_cast<const PcmFamilyModel&>(*m);
        for (double x : {0.05, 0.5}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {21, 0, 0});
            const double g_t = x * pcm.g_max();
            for (double t : {3600.0, 86400.0, 365.0 * 86400.0}) {
                const std::vector<double> g = positive_devices(m->read_conductances(s, t, 0), kN);
                std::vector<double> factor(kN);
                for (std::size_t i = 0; i < kN; ++i) factor[i] = g[i] / g_t;
                const Moments mo = moments(factor);
                const double L = std::log((t + pcm.t0()) / pcm.t0());
                expect_mean(mo, folded_laplace(pcm.nu_mean(g_t), pcm.nu_std(g_t), L), mo.sd, name.c_str());
            }
        }
    }
}

TEST(NoiseStats, GenericGaussianTermsAddInQuadrature) {
    auto m = model("generic", {{"prog_additive", 0.02}, {"prog_multiplicative", 0.05}, {"read_additive", 0.01}, {"read_multiplicative", 0.03}});
    const double g_max = m->converter().g_max(), x = 0.6, g_t = x * g_max;
    const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {1, 2, 3});
    const Moments prog = moments(positive_devices(s.g_prog, kN));
    const double sp = std::hypot(0.02 * g_max, 0.05 * g_t);
    expect_mean(prog, g_t, sp, "generic programming mean");
    expect_sd(prog, sp, "generic programming sd");
    // read minus programmed: N(0, hypot(read_add*g_max, read_mul*g_prog)); normalise per device
    const std::vector<double> g = m->read_conductances(s, 10.0, 4);
    std::vector<double> z(kN);
    for (std::size_t i = 0; i < kN; ++i)
        z[i] = (g[2 * i] - s.g_prog[2 * i]) / std::hypot(0.01 * g_max, 0.03 * s.g_prog[2 * i]);
    const Moments rz = moments(z);
    expect_mean(rz, 0.0, 1.0, "standardised read noise mean");
    expect_sd(rz, 1.0, "standardised read noise sd");
}

TEST(NoiseStats, StuckAtFaultRatesAndLevels) {
    const double p_low = 0.01, p_high = 0.003;
    auto m = model("generic", {{"stuck_low_prob", p_low}, {"stuck_high_prob", p_high}, {"levels", 16.0}});
    std::vector<double> w(kN);
    for (std::size_t i = 0; i < kN; ++i) w[i] = std::sin(double(i));  // spread over [-1, 1]
    const LayerState s = m->program(w, {std::int64_t(kN)}, {8, 8, 8});
    const double g_max = m->converter().g_max(), step = g_max / 15.0;
    std::size_t low = 0, high = 0;
    for (std::size_t i = 0; i < s.g_prog.size(); ++i) {
        const Fault f = Fault(s.fault[i]);
        if (f == Fault::StuckLow) {
            ++low;
            EXPECT_EQ(s.g_prog[i], 0.0);
        } else if (f == Fault::StuckHigh) {
            ++high;
            EXPECT_EQ(s.g_prog[i], g_max);
        } else {
            const double k = s.g_prog[i] / step;  // a level, and the nearest one to the target
            EXPECT_NEAR(k, std::round(k), 1e-9);
            EXPECT_LE(std::abs(s.g_prog[i] - s.g_target[i]), step / 2 + 1e-9);
        }
    }
    const double n = double(s.g_prog.size());
    EXPECT_NEAR(low / n, p_low, kZ * std::sqrt(p_low * (1 - p_low) / n));
    EXPECT_NEAR(high / n, p_high, kZ * std::sqrt(p_high * (1 - p_high) / n));
    // stuck devices read their stuck value at any time and round
    const std::vector<double> g = m->read_conductances(s, 1e6, 3);
    for (std::size_t i = 0; i < g.size(); ++i) {
        if (Fault(s.fault[i]) == Fault::StuckLow) EXPECT_EQ(g[i], 0.0);
        if (Fault(s.fault[i]) == Fault::StuckHigh) EXPECT_EQ(g[i], g_max);
    }
}

TEST(NoiseStats, ReRamWanSigmaPerTimeKey) {
    auto m = model("reram_wan2022");
    const auto& wan = dynamic_cast<const ReRamWan2022Model&>(*m);
    const double x = 0.5, g_t = x * m->converter().g_max();
    const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {2, 0, 0});
    const Moments prog = moments(positive_devices(s.g_prog, kN));
    expect_sd(prog, wan.sigma(g_t, 1.0), "Wan programming sigma (1 s fit)");
    for (double t : {86400.0, 172800.0}) {
        const Moments r = moments(positive_devices(m->read_conductances(s, t, 1), kN));
        expect_mean(r, g_t, wan.sigma(g_t, t), "Wan read mean");
        expect_sd(r, wan.sigma(g_t, t), "Wan read sigma");
    }
}

TEST(NoiseStats, ReRamCmoProgrammingAndRelaxation) {
    auto m = model("reram_cmo", {{"read_noise_scale", 0.0}, {"drift_reference", std::string("programmed")}});
    const auto& cmo = dynamic_cast<const ReRamCmoModel&>(*m);
    std::vector<double> w(kN + 2, 0.5);  // single device: [min W, max W] -> [9, 88.2] uS
    w[kN] = 0.0;
    w[kN + 1] = 1.0;
    const LayerState s = m->program(w, {std::int64_t(kN + 2)}, {4, 0, 0});
    const double g_t = s.g_target[0];
    const std::vector<double> g_prog(s.g_prog.begin(), s.g_prog.begin() + kN);
    const Moments prog = moments(g_prog);
    expect_mean(prog, g_t, cmo.prog_sigma(g_t), "CMO programming mean");
    expect_sd(prog, cmo.prog_sigma(g_t), "CMO programming sigma");
    const double t = 3600.0;
    const std::vector<double> g = m->read_conductances(s, t, 2);
    std::vector<double> shift(kN);
    for (std::size_t i = 0; i < kN; ++i) shift[i] = g[i] - s.g_prog[i];
    const Moments r = moments(shift);
    expect_mean(r, cmo.relaxation_mean_shift(t), cmo.relaxation_sigma(t), "CMO relaxation mean");
    expect_sd(r, cmo.relaxation_sigma(t), "CMO relaxation sigma");
}
