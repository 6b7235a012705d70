// Statistical tests of the device noise models against closed forms.
//
// The expected values are the published fits, written out in this file (namespace `published`,
// from aihwkit 1.2.0's inference/noise and docs/noise_models.md) with each model's default
// parameters: nothing here asks the model under test for a sigma, a drift exponent or a g_max,
// so a wrong coefficient, a wrong default or a sigma evaluated at g instead of g/g_max fails.
//
// Tolerances: every estimate is compared with its closed form within kZ standard errors of
// the estimator at the test's sample size n (kZ = 5: a false alarm has probability < 1e-6 per
// check; seeds are fixed, so the tests are deterministic anyway).  Standard errors:
//   mean:        s / sqrt(n)
//   std (normal): s / sqrt(2n)
//   std (other):  s * sqrt((kurtosis - 1) / (4n)), kurtosis estimated from the sample
//   proportion:   sqrt(p (1 - p) / n)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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

// The published fits, at each model's default parameters (g in uS, x = g / g_max).
namespace published {

double polynomial(std::initializer_list<double> c, double x) {  // c0 first
    double value = 0.0, power = 1.0;
    for (double coeff : c) {
        value += coeff * power;
        power *= x;
    }
    return value;
}

// One PCM-family member: aihwkit's PCMLikeNoiseModel, HermesNoiseModel (2 or 1 devices),
// StateIndependentNoiseModel.
struct PcmFit {
    double g_max, t0, t_read;
    std::function<double(double x)> prog_sigma, nu_mean, nu_std, read_q;
    // sqrt(ln((t + t0 + t_read) / (2 t_read))): the 1/f factor at t seconds after programming
    double read_time_factor(double t) const { return std::sqrt(std::log((t + t0 + t_read) / (2.0 * t_read))); }
};

double clip(double v, double low, double high) { return std::min(std::max(v, low), high); }
double ln_clipped(double x) { return std::log(std::max(x, 1e-7)); }  // aihwkit's _ZERO_CLIP

// pcm.py (Nandakumar et al. 2019, Joshi et al. 2020): prog_coeff refers to g_max 25 uS.
const PcmFit pcm_like{25.0, 20.0, 250e-9,
                      [](double x) { return polynomial({0.26348, 1.9650, -1.1731}, x) * 25.0 / 25.0; },
                      [](double x) { return clip(-0.0155 * ln_clipped(x) + 0.0244, 0.049, 0.1); },
                      [](double x) { return clip(-0.0125 * ln_clipped(x) - 0.0059, 0.008, 0.045); },
                      [](double x) { return std::min(0.0088 / std::max(std::pow(x, 0.65), 1e-3), 0.2); }};

// hermes.py (Le Gallo et al. 2023): the mean of nu is shared by both unit cells.
double hermes_nu_mean(double x) {
    return x < 0.0945 ? clip(-0.0387 * ln_clipped(x) - 0.0182, 0.072, 0.13) : -0.0436 * x * x - 0.0126 * x + 0.0736;
}
const PcmFit hermes_2{20.7, 300.0, 512e-9,
                      [](double x) { return polynomial({0.16603222, 4.71806468, -8.48101252, 4.68961419}, x); },
                      hermes_nu_mean,
                      [](double x) {
                          return x < 0.3055 ? clip(-0.0117 * ln_clipped(x) - 0.0057, 0.0091, 0.04)
                                            : -0.0118 * x * x + 0.0093 * x + 0.0073;
                      },
                      [](double x) {
                          return x < 0.16 ? clip(-0.0117 * std::log(x) - 0.0069, 0.015, 0.04)
                                          : polynomial({0.0123, 0.0211, -0.0280, 0.0069}, x);
                      }};
const PcmFit hermes_1{10.35, 200.0, 512e-9,
                      [](double x) { return polynomial({0.15781817, 2.32443916, -2.16310839, 0.68841818}, x); },
                      hermes_nu_mean,
                      [](double x) {
                          return x < 0.3039 ? clip(-0.0120 * ln_clipped(x) - 0.0023, 0.0124, 0.04)
                                            : -0.0165 * x * x + 0.0116 * x + 0.0104;
                      },
                      [](double x) {
                          return x < 0.1591 ? clip(-0.0078 * std::log(x) + 0.0038, 0.0179, 0.04)
                                            : polynomial({0.0088, 0.0768, -0.1352, 0.0664}, x);
                      }};

// custom.py StateIndependentNoiseModel: constant programming sigma 0.2 uS, nu ~ |N(0.1, 0.05^2)|;
// its read sigma is |g/g_max| sqrt(ln(..)) in uS, i.e. read_q = 1/g_max.
const PcmFit state_independent{25.0, 20.0, 250e-9, [](double) { return 0.2; }, [](double) { return 0.1; },
                                [](double) { return 0.05; }, [](double) { return 1.0 / 25.0; }};

const PcmFit& pcm_fit(const std::string& name, const NoiseParams& params) {
    if (name == "pcm_like") return pcm_like;
    if (name == "state_independent") return state_independent;
    const auto devices = params.find("num_devices");
    return devices != params.end() && std::get<double>(devices->second) == 1.0 ? hermes_1 : hermes_2;
}

// reram.py ReRamWan2022NoiseModel (Wan et al. 2022): sigma_t(x) in uS at the default g_max 25 uS
// (coeff_g_max_reference = g_max: the 40 uS of its comment is never applied).
double wan_sigma(double x, double t) {
    if (t == 1.0) return polynomial({0.348, 16.030, -43.853, 45.393, -16.815}, x);
    if (t == 86400.0) return polynomial({0.701, 22.086, -50.773, 47.095, -16.458}, x);
    return polynomial({0.782, 20.274, -43.507, 37.062, -11.934}, x);  // 2 days
}
constexpr double kWanGMax = 25.0;

// reram.py ReRamCMONoiseModel (acceptance range 0.2 %): single device on [9, 88.199997] uS,
// sigma_prog = c0 + c1 g (g in uS, not relative); relaxation after t seconds: mean shift
// -0.08900206 ln t, spread 0.04201137 ln t + 0.41183342.
constexpr double kCmoGMin = 9.0, kCmoGMax = 88.199997;
// generic (not in aihwkit): the default single-pair converter's g_max.
constexpr double kGenericGMax = 25.0;
double cmo_prog_sigma(double g) { return 0.00081107 + 0.00106879 * g; }
double cmo_relaxation_mean(double t) { return -0.08900206 * std::log(t); }
double cmo_relaxation_sigma(double t) { return 0.04201137 * std::log(t) + 0.41183342; }

}  // namespace published

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
        const published::PcmFit& fit = published::pcm_fit(name, params);
        for (double x : {0.25, 0.5, 0.75, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {7, 1, 2});
            const Moments mo = moments(positive_devices(s.g_prog, kN));
            const double g_t = x * fit.g_max, sigma = fit.prog_sigma(x);
            expect_mean(mo, g_t, sigma, name.c_str());
            expect_sd(mo, sigma, name.c_str());
        }
    }
}

TEST(NoiseStats, ZeroTargetDeviceIsRectifiedNormal) {
    // aihwkit quirk kept: the "off" device of a pair (g_T = 0) gets sigma_prog(0) and is clipped
    // at 0, so it is max(0, sigma*xi): P(0) = 1/2, mean sigma/sqrt(2 pi), E[g^2] = sigma^2/2.
    auto m = model("pcm_like");
    const LayerState s = m->program(constant_layer(kN, 0.5), {std::int64_t(kN + 1)}, {3, 0, 0});
    std::vector<double> off(kN);
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < kN; ++i) {
        off[i] = s.g_prog[2 * i + 1];
        zeros += off[i] == 0.0;
    }
    const double sigma = published::pcm_like.prog_sigma(0.0);  // c0 = 0.26348 uS
    const Moments mo = moments(off);
    const double sd = sigma * std::sqrt(0.5 - 1 / (2 * std::numbers::pi));
    expect_mean(mo, sigma / std::sqrt(2 * std::numbers::pi), sd, "rectified-normal mean");
    expect_sd(mo, sd, "rectified-normal sd");
    EXPECT_NEAR(double(zeros) / kN, 0.5, kZ * 0.5 / std::sqrt(double(kN)));
}

TEST(NoiseStats, DriftExponentIsFoldedNormal) {
    for (const auto& [name, params] : families({"pcm_like", "hermes", "state_independent"}, {})) {
        auto m = model(name, params);
        const published::PcmFit& fit = published::pcm_fit(name, params);
        for (double x : {0.02, 0.1, 0.5, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {11, 4, 0});
            const Moments mo = moments(positive_devices(s.nu, kN));
            const double mu = fit.nu_mean(x), sd = fit.nu_std(x);
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
        const published::PcmFit& fit = published::pcm_fit(name, params);
        for (double x : {0.3, 1.0}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {5, 0, 1});
            const double g_t = x * fit.g_max;
            for (double t : {0.0, 3600.0, 365.0 * 86400.0}) {
                const std::vector<double> g = positive_devices(m->read_conductances(s, t, 9), kN);
                std::vector<double> rel(kN);
                for (std::size_t i = 0; i < kN; ++i) rel[i] = g[i] / g_t - 1.0;
                const double sigma = fit.read_q(x) * fit.read_time_factor(t);
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
        const published::PcmFit& fit = published::pcm_fit(name, params);
        for (double x : {0.05, 0.5}) {
            const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {21, 0, 0});
            const double g_t = x * fit.g_max;
            for (double t : {3600.0, 86400.0, 365.0 * 86400.0}) {
                const std::vector<double> g = positive_devices(m->read_conductances(s, t, 0), kN);
                std::vector<double> factor(kN);
                for (std::size_t i = 0; i < kN; ++i) factor[i] = g[i] / g_t;
                const Moments mo = moments(factor);
                const double L = std::log((t + fit.t0) / fit.t0);
                expect_mean(mo, folded_laplace(fit.nu_mean(x), fit.nu_std(x), L), mo.sd, name.c_str());
            }
        }
    }
}

TEST(NoiseStats, GenericGaussianTermsAddInQuadrature) {
    auto m = model("generic", {{"prog_additive", 0.02}, {"prog_multiplicative", 0.05}, {"read_additive", 0.01}, {"read_multiplicative", 0.03}});
    const double g_max = published::kGenericGMax, x = 0.6, g_t = x * g_max;
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
    const double g_max = published::kGenericGMax, step = g_max / 15.0;
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
    const double x = 0.5, g_t = x * published::kWanGMax;
    const LayerState s = m->program(constant_layer(kN, x), {std::int64_t(kN + 1)}, {2, 0, 0});
    const Moments prog = moments(positive_devices(s.g_prog, kN));
    expect_mean(prog, g_t, published::wan_sigma(x, 1.0), "Wan programming mean");
    expect_sd(prog, published::wan_sigma(x, 1.0), "Wan programming sigma (1 s fit)");
    for (double t : {86400.0, 172800.0}) {
        const Moments r = moments(positive_devices(m->read_conductances(s, t, 1), kN));
        expect_mean(r, g_t, published::wan_sigma(x, t), "Wan read mean");
        expect_sd(r, published::wan_sigma(x, t), "Wan read sigma");
    }
}

TEST(NoiseStats, ReRamCmoProgrammingAndRelaxation) {
    auto m = model("reram_cmo", {{"read_noise_scale", 0.0}, {"drift_reference", std::string("programmed")}});
    std::vector<double> w(kN + 2, 0.5);  // single device: [min W, max W] -> [9, 88.2] uS
    w[kN] = 0.0;
    w[kN + 1] = 1.0;
    const LayerState s = m->program(w, {std::int64_t(kN + 2)}, {4, 0, 0});
    const double g_t = published::kCmoGMin + 0.5 * (published::kCmoGMax - published::kCmoGMin);
    EXPECT_NEAR(s.g_target[0], g_t, 1e-12 * g_t) << "single_device converter at its default range";
    const std::vector<double> g_prog(s.g_prog.begin(), s.g_prog.begin() + kN);
    const Moments prog = moments(g_prog);
    expect_mean(prog, g_t, published::cmo_prog_sigma(g_t), "CMO programming mean");
    expect_sd(prog, published::cmo_prog_sigma(g_t), "CMO programming sigma");
    const double t = 3600.0;
    const std::vector<double> g = m->read_conductances(s, t, 2);
    std::vector<double> shift(kN);
    for (std::size_t i = 0; i < kN; ++i) shift[i] = g[i] - s.g_prog[i];
    const Moments r = moments(shift);
    expect_mean(r, published::cmo_relaxation_mean(t), published::cmo_relaxation_sigma(t), "CMO relaxation mean");
    expect_sd(r, published::cmo_relaxation_sigma(t), "CMO relaxation sigma");
}
