// Model parameters as a plain name -> value map, the form configs and to_dict/from_dict use.
//
// Values are a number, a list of numbers or a string.  ParamReader checks every name against
// the model's list and reports unknown names or wrong types as FormatError, naming the field.
#pragma once
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace aimcemu::noise {

using ParamValue = std::variant<double, std::vector<double>, std::string>;
using NoiseParams = std::map<std::string, ParamValue>;

// Reads typed parameters from a NoiseParams map for one model; remembers which it consumed so
// that finish() can reject names the model does not know.
class ParamReader {
public:
    ParamReader(const NoiseParams& params, std::string model) : params_(params), model_(std::move(model)) {}

    double number(const std::string& name, double fallback);
    std::vector<double> numbers(const std::string& name, const std::vector<double>& fallback);
    std::string text(const std::string& name, const std::string& fallback);
    bool has(const std::string& name) const { return params_.count(name) != 0; }
    // Throws FormatError for any parameter that no reader call asked for.
    void finish() const;

private:
    const NoiseParams& params_;
    std::string model_;
    std::set<std::string> used_;
};

}  // namespace aimcemu::noise
