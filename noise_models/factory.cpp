// make_noise_model: the one place that maps config names to model classes and their tables.
#include <functional>
#include <map>

#include "common/errors.hpp"
#include "noise_models/generic.hpp"
#include "noise_models/noise_model.hpp"
#include "noise_models/pcm.hpp"
#include "noise_models/reram.hpp"

namespace aimcemu::noise {

namespace {

struct ModelEntry {
    const ParamTable& (*table)();
    std::function<std::unique_ptr<NoiseModel>(const NoiseParams&)> build;
};

template <class Model>
ModelEntry entry() {
    return {&Model::table, [](const NoiseParams& p) { return std::unique_ptr<NoiseModel>(std::make_unique<Model>(p)); }};
}

const std::map<std::string, ModelEntry>& registry() {
    static const std::map<std::string, ModelEntry> models = {
        {"pcm_like", entry<PcmLikeModel>()},
        {"hermes", entry<HermesModel>()},
        {"custom_drift_pcm", entry<CustomDriftPcmModel>()},
        {"state_independent", entry<StateIndependentModel>()},
        {"reram_wan2022", entry<ReRamWan2022Model>()},
        {"reram_cmo", entry<ReRamCmoModel>()},
        {"generic", entry<GenericModel>()},
    };
    return models;
}

const ModelEntry& find_model(const std::string& name) {
    const auto it = registry().find(name);
    if (it == registry().end()) {
        std::string known;
        for (const auto& [n, e] : registry()) known += (known.empty() ? "" : ", ") + n;
        throw FormatError("noise config", "model", "unknown noise model '" + name + "' (known: " + known + ")");
    }
    return it->second;
}

}  // namespace

std::unique_ptr<NoiseModel> make_noise_model(const std::string& name, const NoiseParams& params) {
    return find_model(name).build(params);
}

const ParamTable& noise_model_table(const std::string& name) { return find_model(name).table(); }

std::vector<std::string> noise_model_names() {
    std::vector<std::string> names;
    for (const auto& [n, e] : registry()) names.push_back(n);
    return names;
}

}  // namespace aimcemu::noise
