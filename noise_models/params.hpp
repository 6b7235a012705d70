// The parameters of a noise model, declared once in a table.
//
// A model's ParamTable lists every parameter it takes: name, type, default, valid range, unit
// and meaning.  The table is the one declaration that
//   - reads a config (ParamTable::resolve: unknown names, wrong types and out-of-range values
//     throw FormatError naming the field; absent ones get their default),
//   - writes it back (the model keeps the resolved map: params()),
//   - gives Python its constructors and their docstrings (aimcemu._core.noise.param_table), and
//   - gives docs/noise_models.md its parameter tables (checked by tests/python/test_noise_params.py).
// A bound may depend on parameters earlier in the table (hermes' g_max: at most its fit's);
// relations that are no bound of one parameter (g_min < g_max, a drift table covering the
// converter's range, probabilities summing to <= 1) are checked by the model that uses them.
//
// Values are a number, a list of numbers or a string; whole numbers (ParamType::Whole) are
// numbers that must be integral (Python shows them as int).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace aimcemu::noise {

using ParamValue = std::variant<double, std::vector<double>, std::string>;
using NoiseParams = std::map<std::string, ParamValue>;

enum class ParamType { Number, Whole, Numbers, Text };

// A lower or upper limit on a number (or on every element of a list of numbers).  With `derive`,
// the limit is computed from the parameters resolved before this one (as ParamSpec::derive does a
// default), and `text` says in words what it is, for docs, docstrings and errors.
struct ParamBound {
    double value = 0.0;
    bool inclusive = true;
    std::function<double(const NoiseParams& resolved)> derive;
    std::string text;
};

struct ParamSpec {
    std::string name;
    ParamType type = ParamType::Number;
    // The default; monostate-like "required" when neither fallback nor derive is set.
    std::optional<ParamValue> fallback;
    // A default computed from parameters earlier in the table (e.g. hermes' g_max from
    // num_devices); `default_text` then says in words what it is, for docs and docstrings.
    // Called with the parameters resolved so far and those the caller gave (some defaults
    // depend on whether another parameter was given at all, not on its value).
    std::function<ParamValue(const NoiseParams& resolved, const NoiseParams& given)> derive;
    std::string default_text;
    std::optional<ParamBound> min, max;
    std::vector<ParamValue> choices;  // allowed values; empty: any within min/max
    std::size_t min_items = 0;        // lists: at least this many elements
    // The parameter exists only when this holds for the parameters before it (e.g.
    // pair_factors only with the n_pair converter); empty: always.
    std::function<bool(const NoiseParams&)> applies;
    std::string applies_text;         // in words, for docs and errors
    std::string unit;                 // "uS", "s", "" (dimensionless)
    std::string doc;                  // one line: what it is
};

// Builders for readable tables: number("t0").fallback(20.0).positive().unit("s").doc("...").
class ParamRow {
public:
    ParamRow(std::string name, ParamType type);
    ParamRow& fallback(ParamValue value);
    ParamRow& derive(std::function<ParamValue(const NoiseParams&)> rule, std::string text);
    ParamRow& derive_from_given(std::function<ParamValue(const NoiseParams& resolved, const NoiseParams& given)> rule,
                                std::string text);
    ParamRow& at_least(double value);
    ParamRow& above(double value);
    ParamRow& at_most(double value);
    // At most a value computed from the parameters before this one; `text` says which ("20.7 (num_devices 1: 10.35)").
    ParamRow& at_most(std::function<double(const NoiseParams&)> rule, std::string text);
    ParamRow& non_negative() { return at_least(0.0); }
    ParamRow& positive() { return above(0.0); }
    ParamRow& probability() { return at_least(0.0).at_most(1.0); }
    ParamRow& one_of(std::vector<ParamValue> values);
    ParamRow& min_items(std::size_t count);
    ParamRow& only_if(std::function<bool(const NoiseParams&)> rule, std::string text);
    ParamRow& unit(std::string unit);
    ParamRow& doc(std::string doc);
    operator ParamSpec() const { return spec_; }  // rows convert into table entries

private:
    ParamSpec spec_;
};

inline ParamRow number(std::string name) { return ParamRow(std::move(name), ParamType::Number); }
inline ParamRow whole(std::string name) { return ParamRow(std::move(name), ParamType::Whole); }
inline ParamRow numbers(std::string name) { return ParamRow(std::move(name), ParamType::Numbers); }
inline ParamRow text(std::string name) { return ParamRow(std::move(name), ParamType::Text); }

class ParamTable {
public:
    // `source` names the owner in errors: "noise model 'pcm_like'", "converter".
    ParamTable(std::string source, std::vector<ParamSpec> specs);

    // Every applicable parameter: the given value, checked, or its default.  Throws
    // FormatError(source, name, ...) for unknown names, wrong types, values out of range or
    // not among the choices, a required parameter that is missing, and a parameter given
    // where it does not apply.
    NoiseParams resolve(const NoiseParams& given) const;

    const std::string& source() const { return source_; }
    const std::vector<ParamSpec>& specs() const { return specs_; }
    const ParamSpec* find(const std::string& name) const;

private:
    void check(const ParamSpec& spec, const ParamValue& value, const NoiseParams& resolved) const;

    std::string source_;
    std::vector<ParamSpec> specs_;
};

// Typed reads of a resolved map (the table has checked the types).
double get_number(const NoiseParams& params, const std::string& name);
std::vector<double> get_numbers(const NoiseParams& params, const std::string& name);
std::string get_text(const NoiseParams& params, const std::string& name);

// A value as the docs print it: 25, 2.5e-07, [0.26348, 1.965, -1.1731], 'reconverted'.
std::string format_value(const ParamValue& value);
// The valid range of a spec in words ("> 0", "[0, 1]", "one of 1, 2"), empty if any value goes.  A
// derived bound is given by its text ("> 0 and <= 20.7 (num_devices 1: 10.35)"), or, with `resolved`
// (the parameters before the spec), by its value for them ("(0, 10.35]").
std::string describe_range(const ParamSpec& spec, const NoiseParams* resolved = nullptr);

}  // namespace aimcemu::noise
