// Generic Gaussian, fault and finite-level model (see generic.hpp).
#include "noise_models/generic.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
const std::string kSource = "noise model 'generic'";

// sqrt(a^2 + b^2) without std::hypot's overflow guard (5x slower; sigmas here are small).
double quadrature_sum(double a, double b) { return std::sqrt(a * a + b * b); }

void require_non_negative(const std::string& field, double v) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw FormatError(kSource, field, "must be finite and >= 0");
}
void require_probability(const std::string& field, double v) {
    if (!(v >= 0.0 && v <= 1.0)) throw FormatError(kSource, field, "must be a probability in [0, 1]");
}
}  // namespace

GenericModel::GenericModel(std::unique_ptr<ConductanceConverter> converter, GenericParams p)
    : NoiseModel(std::move(converter)), p_(p) {
    require_non_negative("prog_additive", p_.prog_additive);
    require_non_negative("prog_multiplicative", p_.prog_multiplicative);
    require_non_negative("read_additive", p_.read_additive);
    require_non_negative("read_multiplicative", p_.read_multiplicative);
    require_probability("stuck_low_prob", p_.stuck_low_prob);
    require_probability("stuck_high_prob", p_.stuck_high_prob);
    if (p_.stuck_low_prob + p_.stuck_high_prob > 1.0)
        throw FormatError(kSource, "stuck_high_prob", "stuck_low_prob + stuck_high_prob must be <= 1");
    if (p_.levels < 0 || p_.levels == 1) throw FormatError(kSource, "levels", "must be 0 (continuous) or >= 2");
    set_drift_reference(DriftReference::Programmed);
}

std::unique_ptr<GenericModel> GenericModel::from_params(const NoiseParams& params) {
    ParamReader r(params, "generic");
    auto converter = make_converter(r, "single_pair", 25.0, 0.0);
    GenericParams p;
    p.prog_additive = r.number("prog_additive", 0.0);
    p.prog_multiplicative = r.number("prog_multiplicative", 0.0);
    p.read_additive = r.number("read_additive", 0.0);
    p.read_multiplicative = r.number("read_multiplicative", 0.0);
    p.stuck_low_prob = r.number("stuck_low_prob", 0.0);
    p.stuck_high_prob = r.number("stuck_high_prob", 0.0);
    const double levels = r.number("levels", 0.0);
    if (levels != std::floor(levels) || levels < 0 || levels > 1e9)
        throw FormatError(kSource, "levels", "must be a whole number: 0 (continuous) or >= 2");
    p.levels = int(levels);
    auto model = std::make_unique<GenericModel>(std::move(converter), p);
    model->read_common(r);
    r.finish();
    return model;
}

NoiseParams GenericModel::params() const {
    NoiseParams p = NoiseModel::params();
    p["prog_additive"] = p_.prog_additive;
    p["prog_multiplicative"] = p_.prog_multiplicative;
    p["read_additive"] = p_.read_additive;
    p["read_multiplicative"] = p_.read_multiplicative;
    p["stuck_low_prob"] = p_.stuck_low_prob;
    p["stuck_high_prob"] = p_.stuck_high_prob;
    p["levels"] = double(p_.levels);
    return p;
}

double GenericModel::quantize(double g) const {
    if (p_.levels == 0) return g;
    const double g_min = converter().g_min(), g_max = converter().g_max();
    const double step = (g_max - g_min) / double(p_.levels - 1);
    const double k = std::clamp(std::round((g - g_min) / step), 0.0, double(p_.levels - 1));
    return g_min + k * step;
}

ProgrammedDevice GenericModel::program_device(double g_target, const DeviceDraws& draws) const {
    if (draws.fault < p_.stuck_low_prob) return {converter().g_min(), 0.0, Fault::StuckLow};
    if (draws.fault < p_.stuck_low_prob + p_.stuck_high_prob) return {converter().g_max(), 0.0, Fault::StuckHigh};
    const double g_q = quantize(g_target);
    const double sigma = quadrature_sum(p_.prog_additive * converter().g_max(), p_.prog_multiplicative * g_q);
    return {g_q + sigma * draws.prog, 0.0, Fault::Healthy};
}

double GenericModel::read_device(const DeviceAtRead& device, const ReadContext&, const DeviceDraws& draws) const {
    if (device.fault == Fault::StuckLow) return converter().g_min();
    if (device.fault == Fault::StuckHigh) return converter().g_max();
    const double sigma = quadrature_sum(p_.read_additive * converter().g_max(), p_.read_multiplicative * device.g_start);
    return device.g_start + sigma * draws.read;
}

}  // namespace aimcemu::noise
