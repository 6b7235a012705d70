// Generic Gaussian, fault and finite-level model (see generic.hpp).
#include "noise_models/generic.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
const std::string kSource = "noise model 'generic'";

// sqrt(a^2 + b^2).  std::hypot is 5x slower and the sigmas are small, so it only takes over where
// a square would overflow (prog_additive = 1e300 gave sigma = inf and NaN weights); below that
// bound the plain formula runs, so ordinary sigmas keep their bits.
double quadrature_sum(double a, double b) {
    constexpr double kSquareSafe = 1e150;   // (1e150)^2 * 2 is far below DBL_MAX
    if (std::abs(a) < kSquareSafe && std::abs(b) < kSquareSafe) return std::sqrt(a * a + b * b);
    return std::hypot(a, b);
}

ParamSpec sigma_row(const std::string& name, const std::string& what) {
    return number(name).fallback(0.0).non_negative().doc(what);
}
ParamSpec probability_row(const std::string& name, const std::string& what) {
    return number(name).fallback(0.0).probability().doc(what);
}

GenericParams read_generic(const NoiseParams& p) {
    GenericParams g;
    g.prog_additive = get_number(p, "prog_additive");
    g.prog_multiplicative = get_number(p, "prog_multiplicative");
    g.read_additive = get_number(p, "read_additive");
    g.read_multiplicative = get_number(p, "read_multiplicative");
    g.stuck_low_prob = get_number(p, "stuck_low_prob");
    g.stuck_high_prob = get_number(p, "stuck_high_prob");
    g.levels = int(get_number(p, "levels"));
    return g;
}
}  // namespace

const ParamTable& GenericModel::table() {
    static const ParamTable table(
        kSource,
        {sigma_row("prog_additive", "programming sigma relative to g_max"),
         sigma_row("prog_multiplicative", "programming sigma relative to the target g"),
         sigma_row("read_additive", "read sigma relative to g_max"),
         sigma_row("read_multiplicative", "read sigma relative to the programmed g"),
         probability_row("stuck_low_prob", "probability that a device is stuck at g_min"),
         probability_row("stuck_high_prob", "probability that a device is stuck at g_max"),
         whole("levels").fallback(0.0).at_least(0.0).at_most(1e9)
             .doc("programmable conductance levels, evenly spaced in [g_min, g_max]: 0 = continuous, else >= 2"),
         converter_row("single_pair"), g_max_row(kDefaultGMax), drift_reference_row("programmed"), g_min_row(0.0),
         pair_factors_row()});
    return table;
}

GenericModel::GenericModel(const NoiseParams& params) : NoiseModel(table().resolve(params)), p_(read_generic(this->params())) {
    if (p_.stuck_low_prob + p_.stuck_high_prob > 1.0)
        throw FormatError(kSource, "stuck_high_prob", "stuck_low_prob + stuck_high_prob must be <= 1");
    if (p_.levels == 1) throw FormatError(kSource, "levels", "must be 0 (continuous) or >= 2");
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
