// Generic device non-idealities, for sensitivity studies that do not need a device fit.
//
// Per device (conductances in uS, g_max/g_min from the converter):
//   programming: g_q = nearest of `levels` evenly spaced values in [g_min, g_max] (levels = 0: continuous)
//                g_prog = g_q + sqrt((prog_additive*g_max)^2 + (prog_multiplicative*g_q)^2) * xi
//                stuck at g_min with probability stuck_low_prob, at g_max with stuck_high_prob
//   read:        g = g_start + sqrt((read_additive*g_max)^2 + (read_multiplicative*g_start)^2) * xi
//                (stuck devices read their stuck value, without noise)
// An additive sigma s relative to g_max is s*w_max per device in weight units, so a single
// pair gives sqrt(2)*s*w_max on the weight.  No clipping: the Gaussian terms stay exact.
#pragma once
#include "noise_models/noise_model.hpp"

namespace aimcemu::noise {

// The model's parameters, typed (read from its table).
struct GenericParams {
    double prog_additive = 0.0;        // sigma / g_max
    double prog_multiplicative = 0.0;  // sigma / g
    double read_additive = 0.0;
    double read_multiplicative = 0.0;
    double stuck_low_prob = 0.0;
    double stuck_high_prob = 0.0;
    int levels = 0;                    // 0 = continuous, else >= 2
};

class GenericModel final : public NoiseModel {
public:
    explicit GenericModel(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "generic"; }
    const GenericParams& generic_params() const { return p_; }

    double quantize(double g) const;  // to the nearest level (identity for levels = 0)
    ProgrammedDevice program_device(double g_target, const DeviceDraws& draws) const override;
    double read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const override;
    bool uses_purpose(Purpose p) const override {
        return p == Purpose::Programming || p == Purpose::Fault || p == Purpose::Read;
    }

private:
    GenericParams p_;
};

}  // namespace aimcemu::noise
