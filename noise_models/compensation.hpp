// Drift compensation as aihwkit computes it (compensation/drift.py), for a layer whose weights
// are row-major with shape[0] = output channels.
//
// aihwkit reads the tile out with one-hot inputs (eye(in_size)) through an ideal periphery, so
// the readout y is the weight matrix itself and
//   global:      readout(W) = max(mean |W|, 1e-4)                 (one scalar per layer)
//   per_column:  readout(W)[n] = max(mean_m |W[n, m]|, 1e-4)      (one per output channel)
//   alpha = baseline / readout(W_read),  compensated output = alpha * output.
// The baseline is the readout of the programmed weights (after programming noise, before
// drift and read noise), taken at programming time; with exact_reference it is the readout of
// the clean weights (aihwkit's GlobalDriftCompensationWithExactReference).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "noise_models/noise_model.hpp"

namespace aimcemu::noise {

// aihwkit's floor on a readout (and so on the baseline): an all-zero layer reads 1e-4.
inline constexpr double kReadoutFloor = 1e-4;

enum class CompensationKind : std::uint8_t { Global, PerColumn };

class DriftCompensation {
public:
    DriftCompensation(CompensationKind kind, bool exact_reference = false) : kind_(kind), exact_reference_(exact_reference) {}
    // "global" or "per_column"; unknown names throw FormatError.
    static DriftCompensation from_name(const std::string& name, bool exact_reference = false);

    CompensationKind kind() const { return kind_; }
    bool exact_reference() const { return exact_reference_; }
    std::string name() const { return kind_ == CompensationKind::Global ? "global" : "per_column"; }

    std::vector<double> readout(std::span<const double> weights, std::size_t rows) const;
    std::vector<double> baseline(const NoiseModel& model, const LayerState& state) const;
    // alpha per readout entry (size 1 for global, rows for per-column).
    std::vector<double> alpha(std::span<const double> baseline, std::span<const double> read_weights,
                              std::size_t rows) const;
    // alpha * weights (row-wise for per-column): the weights a compensated layer effectively uses.
    std::vector<double> apply(std::span<const double> alpha, std::span<const double> read_weights, std::size_t rows) const;

private:
    CompensationKind kind_;
    bool exact_reference_;
};

}  // namespace aimcemu::noise
