// Conductance converters (see converter.hpp for the formulas and their aihwkit counterparts).
#include "noise_models/converter.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
constexpr double kMinAbsMax = 1e-7;  // aihwkit's floor on max|W| (all-zero layers)

void check_range(const std::string& converter, double g_max, double g_min) {
    const std::string src = "converter '" + converter + "'";
    if (!(g_max > 0.0) || !std::isfinite(g_max)) throw FormatError(src, "g_max", "must be a finite number > 0 uS");
    if (!(g_min >= 0.0) || !(g_min < g_max)) throw FormatError(src, "g_min", "must satisfy 0 <= g_min < g_max");
}

double abs_max(std::span<const double> w) {
    double m = 0.0;
    for (double x : w) m = std::max(m, std::abs(x));
    return m;
}
}  // namespace

ConductanceConverter::ConductanceConverter(double g_max, double g_min) : g_max_(g_max), g_min_(g_min) {}

NoiseParams ConductanceConverter::params() const {
    return {{"converter", name()}, {"g_max", g_max_}, {"g_min", g_min_}};
}

std::vector<double> ConductanceConverter::convert(std::span<const double> weights, const Conversion& c) const {
    const int d = devices_per_weight();
    std::vector<double> g(weights.size() * std::size_t(d));
    for (std::size_t i = 0; i < weights.size(); ++i) to_conductances(weights[i], c, g.data() + i * d);
    return g;
}

std::vector<double> ConductanceConverter::convert_back(std::span<const double> g, const Conversion& c) const {
    const std::size_t d = std::size_t(devices_per_weight());
    std::vector<double> w(g.size() / d);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = to_weight(g.data() + i * d, c);
    return w;
}

// --- single pair --------------------------------------------------------------------------
SinglePairConverter::SinglePairConverter(double g_max, double g_min) : ConductanceConverter(g_max, g_min) {
    check_range(name(), g_max, g_min);
}

Conversion SinglePairConverter::fit(std::span<const double> weights) const {
    return {(g_max_ - g_min_) / std::max(abs_max(weights), kMinAbsMax), 0.0, 0.0};
}

void SinglePairConverter::to_conductances(double w, const Conversion& c, double* g) const {
    g[0] = std::clamp(w * c.scale, 0.0, g_max_) + g_min_;
    g[1] = std::clamp(-w * c.scale, 0.0, g_max_) + g_min_;
}

double SinglePairConverter::to_weight(const double* g, const Conversion& c) const {
    return ((g[0] - g_min_) - (g[1] - g_min_)) / c.scale;
}

std::vector<double> SinglePairConverter::convert(std::span<const double> weights, const Conversion& c) const {
    std::vector<double> g(2 * weights.size());
    for (std::size_t i = 0; i < weights.size(); ++i) {   // to_conductances, inlined
        g[2 * i] = std::clamp(weights[i] * c.scale, 0.0, g_max_) + g_min_;
        g[2 * i + 1] = std::clamp(-weights[i] * c.scale, 0.0, g_max_) + g_min_;
    }
    return g;
}

std::vector<double> SinglePairConverter::convert_back(std::span<const double> g, const Conversion& c) const {
    std::vector<double> w(g.size() / 2);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = ((g[2 * i] - g_min_) - (g[2 * i + 1] - g_min_)) / c.scale;
    return w;
}

std::unique_ptr<ConductanceConverter> SinglePairConverter::clone() const {
    return std::make_unique<SinglePairConverter>(*this);
}

// --- N pairs ------------------------------------------------------------------------------
NPairConverter::NPairConverter(std::vector<double> factors, double g_max, double g_min)
    : ConductanceConverter(g_max, g_min), factors_(std::move(factors)) {
    check_range(name(), g_max, g_min);
    if (factors_.empty()) throw FormatError("converter 'n_pair'", "pair_factors", "needs at least one factor");
    for (double f : factors_)
        if (!(f > 0.0) || !std::isfinite(f)) throw FormatError("converter 'n_pair'", "pair_factors", "factors must be > 0");
}

Conversion NPairConverter::fit(std::span<const double> weights) const {
    double total = 0.0;
    for (double f : factors_) total += f * (g_max_ - g_min_);
    return {total / std::max(abs_max(weights), kMinAbsMax), 0.0, 0.0};
}

void NPairConverter::to_conductances(double w, const Conversion& c, double* g) const {
    const double w_us = w * c.scale;
    double lower_bound = 0.0;  // weight (in uS of significance 1) already carried by lower pairs
    for (std::size_t k = 0; k < factors_.size(); ++k) {
        const double f = factors_[k];
        g[2 * k] = std::clamp((std::max(w_us, 0.0) - lower_bound) / f + g_min_, g_min_, g_max_);
        g[2 * k + 1] = std::clamp((std::max(-w_us, 0.0) - lower_bound) / f + g_min_, g_min_, g_max_);
        lower_bound += f * (g_max_ - g_min_);
    }
}

double NPairConverter::to_weight(const double* g, const Conversion& c) const {
    double w_us = 0.0;
    for (std::size_t k = 0; k < factors_.size(); ++k) w_us += factors_[k] * (g[2 * k] - g[2 * k + 1]);
    return w_us / c.scale;
}

NoiseParams NPairConverter::params() const {
    NoiseParams p = ConductanceConverter::params();
    p["pair_factors"] = factors_;
    return p;
}

std::unique_ptr<ConductanceConverter> NPairConverter::clone() const { return std::make_unique<NPairConverter>(*this); }

// --- single device ------------------------------------------------------------------------
SingleDeviceConverter::SingleDeviceConverter(double g_max, double g_min) : ConductanceConverter(g_max, g_min) {
    check_range(name(), g_max, g_min);
}

Conversion SingleDeviceConverter::fit(std::span<const double> weights) const {
    Conversion c;
    if (weights.empty()) return c;
    const auto [lo, hi] = std::minmax_element(weights.begin(), weights.end());
    c.w_min = *lo;
    c.w_max = *hi;
    c.scale = (g_max_ - g_min_) / std::max(c.w_max - c.w_min, kMinAbsMax);
    return c;
}

void SingleDeviceConverter::to_conductances(double w, const Conversion& c, double* g) const {
    g[0] = std::clamp(g_min_ + (w - c.w_min) * c.scale, g_min_, g_max_);
}

double SingleDeviceConverter::to_weight(const double* g, const Conversion& c) const {
    return c.w_min + (g[0] - g_min_) / c.scale;
}

std::unique_ptr<ConductanceConverter> SingleDeviceConverter::clone() const {
    return std::make_unique<SingleDeviceConverter>(*this);
}

std::unique_ptr<ConductanceConverter> make_converter(ParamReader& reader, const std::string& default_name,
                                                     double default_g_max, double default_g_min) {
    const std::string name = reader.text("converter", default_name);
    const double g_max = reader.number("g_max", default_g_max);
    const double g_min = reader.number("g_min", default_g_min);
    if (name == "single_pair") return std::make_unique<SinglePairConverter>(g_max, g_min);
    if (name == "n_pair") return std::make_unique<NPairConverter>(reader.numbers("pair_factors", {1.0, 3.0}), g_max, g_min);
    if (name == "single_device") return std::make_unique<SingleDeviceConverter>(g_max, g_min);
    throw FormatError("noise converter", "converter",
                      "unknown converter '" + name + "' (single_pair, n_pair, single_device)");
}

}  // namespace aimcemu::noise
