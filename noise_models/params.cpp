// ParamReader: typed access to a model's parameter map with errors that name the field.
#include "noise_models/params.hpp"

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {
const char* type_name(const ParamValue& v) {
    if (std::holds_alternative<double>(v)) return "a number";
    if (std::holds_alternative<std::vector<double>>(v)) return "a list of numbers";
    return "a string";
}
}  // namespace

double ParamReader::number(const std::string& name, double fallback) {
    used_.insert(name);
    auto it = params_.find(name);
    if (it == params_.end()) return fallback;
    if (auto* d = std::get_if<double>(&it->second)) return *d;
    throw FormatError("noise model '" + model_ + "'", name, std::string("expected a number, got ") + type_name(it->second));
}

std::vector<double> ParamReader::numbers(const std::string& name, const std::vector<double>& fallback) {
    used_.insert(name);
    auto it = params_.find(name);
    if (it == params_.end()) return fallback;
    if (auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
    throw FormatError("noise model '" + model_ + "'", name,
                      std::string("expected a list of numbers, got ") + type_name(it->second));
}

std::string ParamReader::text(const std::string& name, const std::string& fallback) {
    used_.insert(name);
    auto it = params_.find(name);
    if (it == params_.end()) return fallback;
    if (auto* s = std::get_if<std::string>(&it->second)) return *s;
    throw FormatError("noise model '" + model_ + "'", name, std::string("expected a string, got ") + type_name(it->second));
}

void ParamReader::finish() const {
    for (const auto& [name, value] : params_)
        if (!used_.count(name)) throw FormatError("noise model '" + model_ + "'", name, "unknown parameter");
}

}  // namespace aimcemu::noise
