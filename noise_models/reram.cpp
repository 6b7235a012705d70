// ReRAM models (constants from aihwkit's reram.py; see reram.hpp and docs/noise_models.md).
#include "noise_models/reram.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
double polynomial(const std::vector<double>& coeff, double x) {
    double value = 0.0;
    for (std::size_t k = coeff.size(); k-- > 0;) value = value * x + coeff[k];
    return value;
}
}  // namespace

// --- Wan 2022 -----------------------------------------------------------------------------------
const std::map<double, std::vector<double>>& ReRamWan2022Model::coefficients() {
    static const std::map<double, std::vector<double>> table = {
        {1.0, {0.348, 16.030, -43.853, 45.393, -16.815}},
        {86400.0, {0.701, 22.086, -50.773, 47.095, -16.458}},
        {172800.0, {0.782, 20.274, -43.507, 37.062, -11.934}},
    };
    return table;
}

const ParamTable& ReRamWan2022Model::table() {
    static const ParamTable table(
        "noise model 'reram_wan2022'",
        {converter_row("single_pair"), g_max_row(kDefaultGMax), scale_row("prog_noise_scale", "programming noise"),
         scale_row("read_noise_scale", "read noise (aihwkit has one noise_scale for both)"),
         number("coeff_g_max_reference")
             .derive([](const NoiseParams& p) { return p.at("g_max"); }, "g_max")
             .positive()
             .unit("uS")
             .doc("g_max the sigma fits refer to (aihwkit in effect uses g_max; its comment says 40)"),
         drift_reference_row("reconverted"), g_min_row(0.0), pair_factors_row()});
    return table;
}

ReRamWan2022Model::ReRamWan2022Model(const NoiseParams& params)
    : NoiseModel(table().resolve(params)),
      prog_noise_scale_(param_value("prog_noise_scale")),
      read_noise_scale_(param_value("read_noise_scale")),
      coeff_g_max_reference_(param_value("coeff_g_max_reference")) {}

double ReRamWan2022Model::sigma(double g_target, double t_key) const {
    const double g_max = converter().g_max();
    return polynomial(coefficients().at(t_key), g_target / g_max) * (g_max / coeff_g_max_reference_);
}

void ReRamWan2022Model::check_time(double t) const {
    if (coefficients().count(t)) return;
    std::ostringstream keys;
    for (const auto& [key, coeff] : coefficients()) keys << key << " ";
    throw FormatError("noise model 'reram_wan2022'", "t", "the fit exists only at t = " + keys.str() + "s");
}

ProgrammedDevice ReRamWan2022Model::program_device(double g_target, const DeviceDraws& draws) const {
    const double t_key = coefficients().begin()->first;
    return {std::max(0.0, g_target + prog_noise_scale_ * sigma(g_target, t_key) * draws.prog), 0.0, Fault::Healthy};
}

double ReRamWan2022Model::read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const {
    return std::max(0.0, device.g_target + read_noise_scale_ * sigma(device.g_target, read.t) * draws.read);
}

// --- CMO / HfOx ---------------------------------------------------------------------------------
namespace {
constexpr double kCmoDecayMean = -0.08900206;
constexpr double kCmoDecayStd[2] = {0.04201137, 0.41183342};
constexpr double kCmoReadK = 0.0277316483;
constexpr double kCmoReadTime = 1e-6;

// K log10(g) * time_factor; aihwkit yields NaN for g <= 0 (or t < t_read): such reads get no
// read noise here.
double read_sigma_at(double g_drift, double time_factor) {
    if (g_drift <= 0.0) return 0.0;
    return kCmoReadK * std::log10(g_drift) * time_factor;
}

// sqrt(ln((t + t_read) / (2 t_read))), 0 where the logarithm is not positive (t < t_read).
double read_time_factor(double t) {
    const double log_ratio = std::log((t + kCmoReadTime) / (2.0 * kCmoReadTime));
    return log_ratio > 0.0 ? std::sqrt(log_ratio) : 0.0;
}

// The relaxation fit, written once: the public helpers (the statistics' closed forms) and the
// sampler (read_device, from the read context's ln t) both evaluate these.
double relaxation_mean_shift_at(double log_t) { return kCmoDecayMean * log_t; }
double relaxation_sigma_at(double log_t) { return kCmoDecayStd[0] * log_t + kCmoDecayStd[1]; }

}  // namespace

const CmoFit& ReRamCmoModel::fit() {
    static const CmoFit fit{{{0.2, {0.00081107, 0.00106879}}, {2.0, {0.0112185391, 0.01129027418}}},
                            kCmoDecayMean,
                            {kCmoDecayStd[0], kCmoDecayStd[1]},
                            kCmoReadK,
                            kCmoReadTime};
    return fit;
}

const ParamTable& ReRamCmoModel::table() {
    static const ParamTable table(
        "noise model 'reram_cmo'",
        {number("acceptance_range").fallback(0.2).one_of({0.2, 2.0})
             .doc("programming acceptance range in percent of the target: selects the fit"),
         converter_row("single_device"), g_max_row(88.199997), g_min_row(9.0),
         scale_row("prog_noise_scale", "programming noise"), scale_row("read_noise_scale", "read noise"),
         scale_row("drift_scale", "relaxation (mean shift and spread)"), drift_reference_row("reconverted"),
         pair_factors_row()});
    return table;
}

ReRamCmoModel::ReRamCmoModel(const NoiseParams& params)
    : NoiseModel(table().resolve(params)),
      acceptance_range_(param_value("acceptance_range")),
      prog_noise_scale_(param_value("prog_noise_scale")),
      read_noise_scale_(param_value("read_noise_scale")),
      drift_scale_(param_value("drift_scale")),
      prog_coeff_(fit().prog_coeff.at(acceptance_range_)) {}

double ReRamCmoModel::prog_sigma(double g) const { return prog_coeff_[0] + prog_coeff_[1] * g; }
double ReRamCmoModel::relaxation_mean_shift(double t) const { return relaxation_mean_shift_at(std::log(t)); }
double ReRamCmoModel::relaxation_sigma(double t) const { return relaxation_sigma_at(std::log(t)); }
double ReRamCmoModel::read_sigma(double g_drift, double t) const { return read_sigma_at(g_drift, read_time_factor(t)); }

ReadContext ReRamCmoModel::read_context(double t) const {
    ReadContext c{t};
    c.log_time = std::log(t);
    c.read_factor = read_time_factor(t);
    return c;
}

ProgrammedDevice ReRamCmoModel::program_device(double g_target, const DeviceDraws& draws) const {
    return {g_target + prog_noise_scale_ * prog_sigma(g_target) * draws.prog, 0.0, Fault::Healthy};
}

double ReRamCmoModel::read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const {
    if (read.t == 0.0) return device.g_start;  // aihwkit: no relaxation and no read noise at t = 0
    const double g_mean = device.g_start + relaxation_mean_shift_at(read.log_time) * drift_scale_;
    const double g_drift = g_mean + draws.relaxation * relaxation_sigma_at(read.log_time) * drift_scale_;
    const double g_final = g_drift + draws.read * read_sigma_at(g_drift, read.read_factor) * read_noise_scale_;
    return std::clamp(g_final, converter().g_min(), converter().g_max());
}

}  // namespace aimcemu::noise
