// The HDF5 results file of one run (layout and metric definitions in docs/hdf5_layout.md).
//
// One file per run, written atomically: everything goes to a temporary file beside the target
// and is renamed over it by commit(); a writer destroyed without commit() (an exception, a full
// disk) removes its temporary file, so no half-written results file is ever visible.
//
// The writer is streamed: the caller hands over the noise-free reference activations of every
// layer and then, for every noisy round, every layer's activations.  Per-layer metrics (SNR,
// cosine, mismatch rate) are computed against the reference as data arrives, predictions and
// accuracy come from the network's output layer, and activations are stored (chunked, deflated)
// only for the selected layers.  A digital run has zero noisy rounds: only the reference.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "analysis/metrics.hpp"
#include "formats/network.hpp"

namespace aimcemu {

inline constexpr const char* kResultsFormat = "aimcemu-results";
inline constexpr int kResultsFormatVersion = 2;  // 2: round is the position; niu_round, drift_compensation added

// Coordinates of one noisy round.  The file's `round` dimension is the round's position in
// ResultsSpec::rounds (0..R-1, unique); these are auxiliary coordinates on it.
struct RoundInfo {
    std::int64_t niu_round = 0;                // the NIU round id (read-noise key; repeats across chips and t)
    std::int64_t chip = 0;                     // chip instance (seed of programming noise and drift)
    double t = 0.0;                            // time since programming, seconds
    std::string drift_compensation = "none";   // the round's drift compensation ("none", "global")
};

struct ResultsSpec {
    std::string config_json = "{}";          // the full resolved configuration
    std::vector<std::int64_t> labels;        // one per image; fixes the number of images
    std::vector<RoundInfo> rounds;           // noisy rounds; empty for a digital run
    std::vector<std::string> stored_layers;  // layers whose activations are stored; empty = all
    bool store_no_activations = false;       // true: store none (metrics and predictions only)
    int deflate_level = 1;                   // 1..4 for activations
    bool replace_existing = true;            // false: commit() fails, leaving it alone, if the file exists
};

class ResultsWriter {
public:
    // `net` must be resolved and outlive the writer.  Throws FormatError for a bad spec (unknown
    // layer name, empty labels) and for a path that cannot be written.
    ResultsWriter(const std::string& path, const Network& net, ResultsSpec spec);
    ~ResultsWriter();
    ResultsWriter(const ResultsWriter&) = delete;
    ResultsWriter& operator=(const ResultsWriter&) = delete;

    // Noise-free activations of `layer`, [image, y, x, channel] int8 in HWC order per image.
    void set_reference(int layer, std::span<const std::int8_t> activations);
    // Noisy activations of `layer` in round `round_index` (position in spec.rounds).  The
    // layer's reference must already be set.
    void set_round(std::size_t round_index, int layer, std::span<const std::int8_t> activations);
    // The metrics of `layer` in round `round_index` from sums already taken against reference(layer)
    // (e.g. by the PU as it computed the layer), for a layer whose activations the file does not
    // need (round_data_needed false; FormatError otherwise): every element of every image once.
    void set_round_sums(std::size_t round_index, int layer, const ActivationErrorSums& sums);
    // Whether set_round needs `layer`'s activations themselves: it stores them or is the output.
    bool round_data_needed(int layer) const;
    // The reference activations the metrics compare with ([image][HWC]; FormatError before
    // set_reference).  Valid until commit; set_round and set_round_sums never change them, so
    // other threads may read them while rounds are written.
    std::span<const std::int8_t> reference(int layer) const;
    // A per-round float64 series of one layer, written at commit as layers/NAME/`name` [round]
    // with the round coordinates (e.g. the drift-compensation factor of an AIMC layer).
    // `per_round` needs one value per noisy round; a name the layout already uses is refused.
    void set_layer_series(int layer, const std::string& name, std::span<const double> per_round);
    // A string attribute of a layer's group (e.g. device = "aimc"); written at once.
    void set_layer_attribute(int layer, const std::string& name, const std::string& value);
    // Whether commit() needs `layer`'s reference: when the layer is stored, is the network's
    // output (predictions and accuracy) or has noisy rounds to be compared with it.  A run without
    // noisy rounds may skip the others, and then need not keep their activations at all.
    bool reference_needed(int layer) const;
    // Checks that every needed reference and every round was given, writes predictions, accuracy
    // and metrics, closes the file and moves it into place.
    void commit();

    // Results so far (valid for what has been set): accuracy of the reference and of each round.
    double reference_accuracy() const;
    std::vector<double> round_accuracy() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace aimcemu
