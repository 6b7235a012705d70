// Peripheral settings: names and rules (see peripherals.hpp).
#include "pu_model/peripherals.hpp"

#include <cmath>

#include "common/errors.hpp"

namespace aimcemu {

LayerPeripherals::~LayerPeripherals() = default;

const char* to_string(NoiseManagement nm) {
    switch (nm) {
        case NoiseManagement::AbsMax: return "abs_max";
        case NoiseManagement::None: return "none";
    }
    return "?";
}

namespace {

void check_steps(int steps, int most, const std::string& source, const std::string& field) {
    if (steps < 0 || steps > most)
        throw FormatError(source, field,
                          "expected 1.." + std::to_string(most) + " steps (0 levels is no converter at all; leave it "
                          "unset for an ideal one), got " + std::to_string(steps));
}

// A finite number in (0, most] (positive_only) or [0, most].
void check_range(double value, double most, bool positive_only, const std::string& source, const std::string& field) {
    if (std::isnan(value)) throw FormatError(source, field, "is NaN");
    if (value < 0 || (positive_only && value == 0) || value > most)
        throw FormatError(source, field,
                          std::string("expected ") + (positive_only ? "> 0" : ">= 0") + " and <= " +
                              std::to_string(most) + ", got " + std::to_string(value));
}

}  // namespace

void PeripheralSettings::validate(const std::string& source, const std::string& prefix) const {
    const auto field = [&](const char* name) { return prefix.empty() ? std::string(name) : prefix + "." + name; };
    check_steps(inp_steps, kMaxInpSteps, source, field("inp_res"));
    check_range(inp_bound, kMaxInpBound, true, source, field("inp_bound"));
    check_range(out_noise, kMaxOutNoise, false, source, field("out_noise"));
    if (out_bound != kUnbounded) check_range(out_bound, kMaxOutBound, true, source, field("out_bound"));
    check_steps(out_steps, kMaxOutSteps, source, field("out_res"));
    if (out_steps > 0 && out_bound == kUnbounded)
        throw FormatError(source, field("out_res"), "an ADC needs a finite out_bound (its steps span [-out_bound, out_bound])");
}

}  // namespace aimcemu
