// make_noise_model: the one place that maps config names to model classes.
#include <functional>
#include <map>

#include "noise_models/generic.hpp"
#include "noise_models/noise_model.hpp"
#include "noise_models/pcm.hpp"
#include "noise_models/reram.hpp"
#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
using Builder = std::function<std::unique_ptr<NoiseModel>(const NoiseParams&)>;

const std::map<std::string, Builder>& builders() {
    static const std::map<std::string, Builder> table = {
        {"pcm_like", [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(PcmLikeModel::from_params(p)); }},
        {"hermes", [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(HermesModel::from_params(p)); }},
        {"custom_drift_pcm",
         [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(CustomDriftPcmModel::from_params(p)); }},
        {"state_independent",
         [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(StateIndependentModel::from_params(p)); }},
        {"reram_wan2022", [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(ReRamWan2022Model::from_params(p)); }},
        {"reram_cmo", [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(ReRamCmoModel::from_params(p)); }},
        {"generic", [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(GenericModel::from_params(p)); }},
    };
    return table;
}
}  // namespace

std::unique_ptr<NoiseModel> make_noise_model(const std::string& name, const NoiseParams& params) {
    auto it = builders().find(name);
    if (it == builders().end()) {
        std::string known;
        for (const auto& [n, b] : builders()) known += (known.empty() ? "" : ", ") + n;
        throw FormatError("noise config", "model", "unknown noise model '" + name + "' (known: " + known + ")");
    }
    return it->second(params);
}

std::vector<std::string> noise_model_names() {
    std::vector<std::string> names;
    for (const auto& [n, b] : builders()) names.push_back(n);
    return names;
}

}  // namespace aimcemu::noise
