// Conductance converters: map a layer's weights to device conductances (uS) and back.
//
// SinglePairConverter   one differential pair; the layer abs-max maps to g_max (aihwkit's
//                       SinglePairConductanceConverter).  devices: [g+, g-].
// NPairConverter        N pairs of significance f_k, lowest-significance pair filled first
//                       (aihwkit's NPairConductanceConverter; DualPair = 2 factors).
//                       devices: [g+_0, g-_0, g+_1, g-_1, ...].
// SingleDeviceConverter one device; [min W, max W] maps affinely onto [g_min, g_max]
//                       (aihwkit's SingleDeviceConductanceConverter, used by ReRAM CMO).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "noise_models/params.hpp"

namespace aimcemu::noise {

// What a converter fitted on one layer: the weight -> conductance scale and the weight range.
struct Conversion {
    double scale = 1.0;  // uS per weight unit
    double w_min = 0.0;  // smallest weight (single-device converter)
    double w_max = 0.0;  // largest weight (single-device converter)
};

class ConductanceConverter {
public:
    ConductanceConverter(double g_max, double g_min);
    virtual ~ConductanceConverter() = default;

    virtual std::string name() const = 0;
    virtual int devices_per_weight() const = 0;
    // Depends only on the smallest and the largest weight (NoiseModel::program fits on those two,
    // found on its workers); a converter that needs more of the weights must change program too.
    virtual Conversion fit(std::span<const double> weights) const = 0;
    virtual void to_conductances(double w, const Conversion& c, double* g) const = 0;
    virtual double to_weight(const double* g, const Conversion& c) const = 0;
    virtual NoiseParams params() const;  // {"converter": name, "g_max", "g_min", ...}
    virtual std::unique_ptr<ConductanceConverter> clone() const = 0;

    double g_max() const { return g_max_; }
    double g_min() const { return g_min_; }

    // Whole-layer helpers: conductances are laid out [weight][device].  Converters may override
    // them with a loop that gives the same values without a virtual call per weight.
    std::vector<double> convert(std::span<const double> weights, const Conversion& c) const;
    // The same into g[0, weights.size() * devices_per_weight()).
    virtual void convert_into(std::span<const double> weights, const Conversion& c, double* g) const;
    virtual std::vector<double> convert_back(std::span<const double> g, const Conversion& c) const;

protected:
    double g_max_, g_min_;
};

class SinglePairConverter final : public ConductanceConverter {
public:
    SinglePairConverter(double g_max, double g_min);
    std::string name() const override { return "single_pair"; }
    int devices_per_weight() const override { return 2; }
    Conversion fit(std::span<const double> weights) const override;
    void to_conductances(double w, const Conversion& c, double* g) const override;
    double to_weight(const double* g, const Conversion& c) const override;
    void convert_into(std::span<const double> weights, const Conversion& c, double* g) const override;
    std::vector<double> convert_back(std::span<const double> g, const Conversion& c) const override;
    std::unique_ptr<ConductanceConverter> clone() const override;
};

class NPairConverter final : public ConductanceConverter {
public:
    NPairConverter(std::vector<double> factors, double g_max, double g_min);
    std::string name() const override { return "n_pair"; }
    int devices_per_weight() const override { return 2 * int(factors_.size()); }
    Conversion fit(std::span<const double> weights) const override;
    void to_conductances(double w, const Conversion& c, double* g) const override;
    double to_weight(const double* g, const Conversion& c) const override;
    NoiseParams params() const override;
    std::unique_ptr<ConductanceConverter> clone() const override;
    const std::vector<double>& factors() const { return factors_; }

private:
    std::vector<double> factors_;
};

class SingleDeviceConverter final : public ConductanceConverter {
public:
    SingleDeviceConverter(double g_max, double g_min);
    std::string name() const override { return "single_device"; }
    int devices_per_weight() const override { return 1; }
    Conversion fit(std::span<const double> weights) const override;
    void to_conductances(double w, const Conversion& c, double* g) const override;
    double to_weight(const double* g, const Conversion& c) const override;
    std::unique_ptr<ConductanceConverter> clone() const override;
};

// The table rows a model shares with its converter, with the model's defaults.  aihwkit's
// default g_max, 25 uS, is kDefaultGMax.
inline constexpr double kDefaultGMax = 25.0;
ParamSpec converter_row(const std::string& fallback);
ParamRow g_max_row(double fallback);
ParamRow g_max_row(std::function<ParamValue(const NoiseParams&)> derive, std::string text);
ParamSpec g_min_row(double fallback);
ParamSpec pair_factors_row();  // only with converter "n_pair"

// A converter alone (aimcemu.noise's converter classes): converter, g_max, g_min and
// pair_factors, with each converter's own defaults.
const ParamTable& converter_table();

// Builds the converter a resolved parameter map names ("converter", "g_max", "g_min",
// "pair_factors"; a model's or converter_table()'s resolve() has checked them).
std::unique_ptr<ConductanceConverter> make_converter(const NoiseParams& resolved);

}  // namespace aimcemu::noise
