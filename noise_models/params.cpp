// ParamTable: a model's declared parameters, resolved and checked in one place.
#include "noise_models/params.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {

const char* type_name(const ParamValue& v) {
    if (std::holds_alternative<double>(v)) return "a number";
    if (std::holds_alternative<std::vector<double>>(v)) return "a list of numbers";
    return "a string";
}

const char* expected_name(ParamType type) {
    switch (type) {
        case ParamType::Number: return "a number";
        case ParamType::Whole: return "a whole number";
        case ParamType::Numbers: return "a list of numbers";
        case ParamType::Text: return "a string";
    }
    return "";
}

bool has_type(ParamType type, const ParamValue& v) {
    switch (type) {
        case ParamType::Number:
        case ParamType::Whole: return std::holds_alternative<double>(v);
        case ParamType::Numbers: return std::holds_alternative<std::vector<double>>(v);
        case ParamType::Text: return std::holds_alternative<std::string>(v);
    }
    return false;
}

double bound_value(const ParamBound& bound, const NoiseParams& resolved) {
    return bound.derive ? bound.derive(resolved) : bound.value;
}

bool derived(const std::optional<ParamBound>& bound) { return bound && bound->derive; }

bool within(const ParamSpec& spec, double x, const NoiseParams& resolved) {
    if (!std::isfinite(x)) return false;
    if (spec.min) {
        const double low = bound_value(*spec.min, resolved);
        if (spec.min->inclusive ? x < low : x <= low) return false;
    }
    if (spec.max) {
        const double high = bound_value(*spec.max, resolved);
        if (spec.max->inclusive ? x > high : x >= high) return false;
    }
    return true;
}

std::string format_number(double x) {
    std::ostringstream s;
    s.precision(8);
    s << x;
    return s.str();
}

// A value for an error message, cut short: a config value can be huge.
std::string shortened(std::string text, std::size_t limit = 80) {
    if (text.size() > limit) text = text.substr(0, limit) + "...";
    return text;
}

}  // namespace

// --- ParamRow -------------------------------------------------------------------------------
ParamRow::ParamRow(std::string name, ParamType type) {
    spec_.name = std::move(name);
    spec_.type = type;
}
ParamRow& ParamRow::fallback(ParamValue value) {
    spec_.fallback = std::move(value);
    return *this;
}
ParamRow& ParamRow::derive(std::function<ParamValue(const NoiseParams&)> rule, std::string text) {
    return derive_from_given([rule = std::move(rule)](const NoiseParams& resolved, const NoiseParams&) { return rule(resolved); },
                             std::move(text));
}
ParamRow& ParamRow::derive_from_given(std::function<ParamValue(const NoiseParams&, const NoiseParams&)> rule,
                                      std::string text) {
    spec_.derive = std::move(rule);
    spec_.default_text = std::move(text);
    return *this;
}
ParamRow& ParamRow::at_least(double value) {
    spec_.min = ParamBound{value, true};
    return *this;
}
ParamRow& ParamRow::above(double value) {
    spec_.min = ParamBound{value, false};
    return *this;
}
ParamRow& ParamRow::at_most(double value) {
    spec_.max = ParamBound{value, true};
    return *this;
}
ParamRow& ParamRow::at_most(std::function<double(const NoiseParams&)> rule, std::string text) {
    spec_.max = ParamBound{0.0, true, std::move(rule), std::move(text)};
    return *this;
}
ParamRow& ParamRow::one_of(std::vector<ParamValue> values) {
    spec_.choices = std::move(values);
    return *this;
}
ParamRow& ParamRow::min_items(std::size_t count) {
    spec_.min_items = count;
    return *this;
}
ParamRow& ParamRow::only_if(std::function<bool(const NoiseParams&)> rule, std::string text) {
    spec_.applies = std::move(rule);
    spec_.applies_text = std::move(text);
    return *this;
}
ParamRow& ParamRow::unit(std::string unit) {
    spec_.unit = std::move(unit);
    return *this;
}
ParamRow& ParamRow::doc(std::string doc) {
    spec_.doc = std::move(doc);
    return *this;
}

// --- ParamTable -----------------------------------------------------------------------------
ParamTable::ParamTable(std::string source, std::vector<ParamSpec> specs)
    : source_(std::move(source)), specs_(std::move(specs)) {}

const ParamSpec* ParamTable::find(const std::string& name) const {
    for (const ParamSpec& spec : specs_)
        if (spec.name == name) return &spec;
    return nullptr;
}

void ParamTable::check(const ParamSpec& spec, const ParamValue& value, const NoiseParams& resolved) const {
    if (!has_type(spec.type, value))
        throw FormatError(source_, spec.name, std::string("expected ") + expected_name(spec.type) + ", got " + type_name(value) + " " +
                                                  shortened(format_value(value)));
    if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end())
        throw FormatError(source_, spec.name, "must be " + describe_range(spec) + ", got " + format_value(value));
    // a derived bound by its value here, and in words (where it comes from)
    std::string range = describe_range(spec, &resolved);
    for (const auto* bound : {&spec.min, &spec.max})
        if (derived(*bound)) range += std::string(" (") + (bound == &spec.min ? ">" : "<") +
                                      ((*bound)->inclusive ? "= " : " ") + (*bound)->text + ")";
    if (const auto* x = std::get_if<double>(&value)) {
        if (!within(spec, *x, resolved)) throw FormatError(source_, spec.name, "must be finite" + (range.empty() ? "" : " and " + range));
        if (spec.type == ParamType::Whole && *x != std::floor(*x))
            throw FormatError(source_, spec.name, "must be a whole number");
    }
    if (const auto* xs = std::get_if<std::vector<double>>(&value)) {
        if (xs->size() < spec.min_items)
            throw FormatError(source_, spec.name, "needs at least " + std::to_string(spec.min_items) + " value(s)");
        for (double x : *xs)
            if (!within(spec, x, resolved))
                throw FormatError(source_, spec.name, "every value must be finite" + (range.empty() ? "" : " and " + range));
    }
}

NoiseParams ParamTable::resolve(const NoiseParams& given) const {
    NoiseParams resolved;
    for (const ParamSpec& spec : specs_) {
        const auto it = given.find(spec.name);
        if (spec.applies && !spec.applies(resolved)) {
            if (it != given.end()) throw FormatError(source_, spec.name, "applies only " + spec.applies_text);
            continue;
        }
        if (it != given.end()) {
            check(spec, it->second, resolved);
            resolved[spec.name] = it->second;
        } else if (spec.derive) {
            resolved[spec.name] = spec.derive(resolved, given);
        } else if (spec.fallback) {
            resolved[spec.name] = *spec.fallback;
        } else {
            throw FormatError(source_, spec.name, "is required");
        }
    }
    for (const auto& [name, value] : given)
        if (!find(name)) throw FormatError(source_, name, "unknown parameter");
    return resolved;
}

// --- reading a resolved map -------------------------------------------------------------------
double get_number(const NoiseParams& params, const std::string& name) { return std::get<double>(params.at(name)); }
std::vector<double> get_numbers(const NoiseParams& params, const std::string& name) {
    return std::get<std::vector<double>>(params.at(name));
}
std::string get_text(const NoiseParams& params, const std::string& name) { return std::get<std::string>(params.at(name)); }

// --- words for docs and errors ------------------------------------------------------------------
std::string format_value(const ParamValue& value) {
    if (const auto* x = std::get_if<double>(&value)) return format_number(*x);
    if (const auto* s = std::get_if<std::string>(&value)) return "'" + *s + "'";
    std::string out = "[";
    for (double x : std::get<std::vector<double>>(value)) out += (out.size() > 1 ? ", " : "") + format_number(x);
    return out + "]";
}

std::string describe_range(const ParamSpec& spec, const NoiseParams* resolved) {
    if (!spec.choices.empty()) {
        std::string out = "one of ";
        for (std::size_t i = 0; i < spec.choices.size(); ++i) out += (i ? ", " : "") + format_value(spec.choices[i]);
        return out;
    }
    // A bound in words: its number, or a derived one's text (its value when `resolved` is given).
    const auto words = [&](const ParamBound& bound) {
        return bound.derive ? (resolved ? format_number(bound.derive(*resolved)) : bound.text) : format_number(bound.value);
    };
    const bool in_words = !resolved && (derived(spec.min) || derived(spec.max));
    if (spec.min && spec.max && !in_words)
        return std::string(spec.min->inclusive ? "[" : "(") + words(*spec.min) + ", " + words(*spec.max) +
               (spec.max->inclusive ? "]" : ")");
    const std::string low = spec.min ? std::string(spec.min->inclusive ? ">= " : "> ") + words(*spec.min) : "";
    const std::string high = spec.max ? std::string(spec.max->inclusive ? "<= " : "< ") + words(*spec.max) : "";
    return low + (spec.min && spec.max ? " and " : "") + high;
}

}  // namespace aimcemu::noise
