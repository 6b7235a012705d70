// Drift compensation (see compensation.hpp).
#include "noise_models/compensation.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {

void check_rows(std::size_t size, std::size_t rows) {
    if (rows == 0 || size % rows != 0)
        throw FormatError("<memory>", "rows", "weights do not split into the given number of output channels");
}
}  // namespace

DriftCompensation DriftCompensation::from_name(const std::string& name, bool exact_reference) {
    if (name == "global") return DriftCompensation(CompensationKind::Global, exact_reference);
    if (name == "per_column") return DriftCompensation(CompensationKind::PerColumn, exact_reference);
    throw FormatError("drift compensation", "kind", "unknown kind '" + name + "' (global, per_column)");
}

std::vector<double> DriftCompensation::readout(std::span<const double> weights, std::size_t rows) const {
    check_rows(weights.size(), rows);
    if (kind_ == CompensationKind::Global) {
        double sum = 0.0;
        for (double w : weights) sum += std::abs(w);
        return {std::max(sum / double(weights.size()), kReadoutFloor)};
    }
    const std::size_t cols = weights.size() / rows;
    std::vector<double> out(rows);
    for (std::size_t n = 0; n < rows; ++n) {
        double sum = 0.0;
        for (std::size_t m = 0; m < cols; ++m) sum += std::abs(weights[n * cols + m]);
        out[n] = std::max(sum / double(cols), kReadoutFloor);
    }
    return out;
}

std::vector<double> DriftCompensation::baseline(const NoiseModel& model, const LayerState& state) const {
    if (exact_reference_) return readout(state.weights, state.rows());
    return readout(model.programmed_weights(state), state.rows());
}

std::vector<double> DriftCompensation::alpha(std::span<const double> baseline, std::span<const double> read_weights,
                                             std::size_t rows) const {
    const std::vector<double> now = readout(read_weights, rows);
    if (baseline.size() != now.size())
        throw FormatError("<memory>", "baseline", "baseline size does not match this compensation kind and layer");
    std::vector<double> a(now.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = baseline[i] / now[i];
    return a;
}

std::vector<double> DriftCompensation::apply(std::span<const double> alpha, std::span<const double> read_weights,
                                             std::size_t rows) const {
    check_rows(read_weights.size(), rows);
    const std::size_t expected = kind_ == CompensationKind::Global ? 1 : rows;
    if (alpha.size() != expected) throw FormatError("<memory>", "alpha", "alpha size does not match the compensation kind");
    const std::size_t cols = read_weights.size() / rows;
    std::vector<double> out(read_weights.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = read_weights[i] * alpha[expected == 1 ? 0 : i / cols];
    return out;
}

}  // namespace aimcemu::noise
