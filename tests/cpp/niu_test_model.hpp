// Noise models for NIU tests: the NIU compiler runs only drift_reference "programmed" (the
// datapath drifts each device from its programmed conductance; docs/niu_datapath.md section 3),
// while the float64 models default to aihwkit's "reconverted".  Tests that build a model to
// compile NIU programs take it from here, with "programmed" unless they name drift_reference.
#pragma once

#include <memory>
#include <string>

#include "noise_models/noise_model.hpp"

namespace niu_test {

inline std::unique_ptr<aimcemu::noise::NoiseModel> niu_noise_model(const std::string& name,
                                                                   aimcemu::noise::NoiseParams params = {}) {
    params.try_emplace("drift_reference", std::string("programmed"));
    return aimcemu::noise::make_noise_model(name, params);
}

}  // namespace niu_test
