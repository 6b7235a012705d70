// Conductance converters (see converter.hpp for the formulas and their aihwkit counterparts).
#include "noise_models/converter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/errors.hpp"
#include "noise_models/simd.hpp"

namespace aimcemu::noise {

namespace {
constexpr double kMinAbsMax = 1e-7;  // aihwkit's floor on max|W| (all-zero layers)

void check_range(const std::string& converter, double g_max, double g_min) {
    const std::string src = "converter '" + converter + "'";
    if (!(g_max > 0.0) || !std::isfinite(g_max)) throw FormatError(src, "g_max", "must be a finite number > 0 uS");
    if (!(g_min >= 0.0) || !(g_min < g_max)) throw FormatError(src, "g_min", "must satisfy 0 <= g_min < g_max");
}

// Eight running maxima, not one: a single chain waits a max latency per weight.  A maximum is
// the same in any order (std::max skips a NaN in every lane as it did in one chain).
double abs_max(std::span<const double> w) {
    double lane[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= w.size(); i += 8)
        for (std::size_t k = 0; k < 8; ++k) lane[k] = std::max(lane[k], std::abs(w[i + k]));
    for (; i < w.size(); ++i) lane[0] = std::max(lane[0], std::abs(w[i]));
    double m = 0.0;
    for (double x : lane) m = std::max(m, x);
    return m;
}
}  // namespace

ConductanceConverter::ConductanceConverter(double g_max, double g_min) : g_max_(g_max), g_min_(g_min) {}

NoiseParams ConductanceConverter::params() const {
    return {{"converter", name()}, {"g_max", g_max_}, {"g_min", g_min_}};
}

std::vector<double> ConductanceConverter::convert(std::span<const double> weights, const Conversion& c) const {
    std::vector<double> g(weights.size() * std::size_t(devices_per_weight()));
    convert_into(weights, c, g.data());
    return g;
}

void ConductanceConverter::convert_into(std::span<const double> weights, const Conversion& c, double* g) const {
    const std::size_t d = std::size_t(devices_per_weight());
    for (std::size_t i = 0; i < weights.size(); ++i) to_conductances(weights[i], c, g + i * d);
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

void SinglePairConverter::convert_into(std::span<const double> weights, const Conversion& c, double* g) const {
    if (simd::available()) {   // the same expression, four or eight weights per step
        simd::single_pair_convert(weights.data(), weights.size(), c.scale, g_max_, g_min_, g);
        return;
    }
    for (std::size_t i = 0; i < weights.size(); ++i) {   // to_conductances, inlined
        g[2 * i] = std::clamp(weights[i] * c.scale, 0.0, g_max_) + g_min_;
        g[2 * i + 1] = std::clamp(-weights[i] * c.scale, 0.0, g_max_) + g_min_;
    }
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
    // Finite weights whose span is not (e.g. +-1e308): scale would be 0 and every conductance
    // and weight back NaN.  aihwkit gives NaN there too; refused instead.
    if (!std::isfinite(c.w_max - c.w_min)) {
        char range[64];
        std::snprintf(range, sizeof range, "[%.17g, %.17g]", c.w_min, c.w_max);
        throw FormatError("<memory>", "weights",
                          std::string("the weights' range ") + range +
                              " is wider than a double holds; the single_device converter maps it onto [g_min, g_max]");
    }
    // A constant layer (span 0) maps onto g_min: aihwkit divides by zero there (NaN weights).
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

// --- parameters -----------------------------------------------------------------------------
namespace {
constexpr double kSingleDeviceGMax = 88.199997;  // aihwkit's ReRAM CMO range, uS
constexpr double kSingleDeviceGMin = 9.0;
const std::vector<double> kDefaultPairFactors = {1.0, 3.0};

bool is_single_device(const NoiseParams& p) { return get_text(p, "converter") == "single_device"; }
}  // namespace

ParamSpec converter_row(const std::string& fallback) {
    return text("converter")
        .fallback(fallback)
        .one_of({std::string("single_pair"), std::string("n_pair"), std::string("single_device")})
        .doc("how weights map to conductances (a converter object, or its name with its fields given flat)");
}

ParamRow g_max_row(double fallback) {
    return number("g_max").fallback(fallback).positive().unit("uS").doc("largest programmable conductance");
}

ParamRow g_max_row(std::function<ParamValue(const NoiseParams&)> derive, std::string text) {
    return number("g_max").derive(std::move(derive), std::move(text)).positive().unit("uS")
        .doc("largest programmable conductance");
}

ParamSpec g_min_row(double fallback) {
    return number("g_min").fallback(fallback).non_negative().unit("uS").doc("smallest conductance (< g_max)");
}

ParamSpec pair_factors_row() {
    return numbers("pair_factors")
        .fallback(kDefaultPairFactors)
        .positive()
        .min_items(1)
        .only_if([](const NoiseParams& p) { return get_text(p, "converter") == "n_pair"; }, "with converter 'n_pair'")
        .doc("significance of each pair, lowest first (aihwkit's f_lst)");
}

const ParamTable& converter_table() {
    static const ParamTable table(
        "converter",
        {converter_row("single_pair"),
         g_max_row([](const NoiseParams& p) { return ParamValue(is_single_device(p) ? kSingleDeviceGMax : kDefaultGMax); },
                   "25 (single_device: 88.199997)"),
         number("g_min")
             .derive([](const NoiseParams& p) { return ParamValue(is_single_device(p) ? kSingleDeviceGMin : 0.0); },
                     "0 (single_device: 9)")
             .non_negative()
             .unit("uS")
             .doc("smallest conductance (< g_max)"),
         pair_factors_row()});
    return table;
}

std::unique_ptr<ConductanceConverter> make_converter(const NoiseParams& resolved) {
    const std::string name = get_text(resolved, "converter");
    const double g_max = get_number(resolved, "g_max");
    const double g_min = get_number(resolved, "g_min");
    if (name == "n_pair") return std::make_unique<NPairConverter>(get_numbers(resolved, "pair_factors"), g_max, g_min);
    if (name == "single_device") return std::make_unique<SingleDeviceConverter>(g_max, g_min);
    return std::make_unique<SinglePairConverter>(g_max, g_min);
}

}  // namespace aimcemu::noise
