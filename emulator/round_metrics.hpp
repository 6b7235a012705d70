// Per-layer metrics of one noisy round, taken by the PU as it computes each layer.
//
// A noisy round's results are a few numbers per layer (the exact sums behind SNR, cosine and
// mismatch rate, analysis/metrics.hpp) plus the activations of the layers the results file
// stores.  RoundMetrics is the PU's LayerOutputObserver for one round: it compares every layer
// that the file does not store (and that is not the output) with the writer's reference right
// after the layer is computed, while it is still in cache, so that the run need not keep the
// layer, copy it out or hand it to the writer (docs/architecture.md, "A noisy round's results").
// The sums are exact integers, so the order in which micro-batches report does not change them:
// the metrics are bit-identical to ResultsWriter::set_round on the whole layer, for any thread
// count.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "analysis/metrics.hpp"
#include "formats/network.hpp"
#include "formats/results.hpp"
#include "pu_model/inference.hpp"

namespace aimcemu {

class RoundMetrics : public LayerOutputObserver {
public:
    // Measures every layer of `net` whose activations `writer` does not need (round_data_needed
    // false) against writer.reference(layer); the writer must hold those references (FormatError
    // from the writer for a reference never set, or once committed).  The references are shared
    // (ResultsWriter::reference_owner), not copied: this object may outlive the writer's commit
    // and the writer itself, and measures against the same bytes.
    RoundMetrics(const ResultsWriter& writer, const Network& net);

    void layer_output(int layer, std::int64_t first, int count, std::span<const std::int8_t> values) const override;

    // FormatError unless a pass of `net` on `images` images fits what these metrics were made
    // for: the same layers (count, names, output shapes: "metrics", "metrics.<layer>") and no more
    // images than the reference holds ("images"; the pass's image i is compared with reference
    // image i).  Without it a pass on another network or more images stopped in layer_output's
    // range check, a RuntimeError that named no argument.
    void check_run(const Network& net, std::size_t images, const std::string& source) const;
    // FormatError unless these metrics were taken against `writer`'s references as they are now
    // (`net` is the writer's network): not another writer's, nor a reference set again since
    // ("metrics.<layer>"); the writer's own FormatError once it is committed.  Sums taken against
    // other bytes of the same size would otherwise be stored as this file's metrics.
    void check_writer(const ResultsWriter& writer, const Network& net, const std::string& source) const;

    // Claims these metrics for round `round_index` of the writer that stores them: FormatError
    // ("metrics") when they were stored for a round already.  A RoundMetrics measures one pass,
    // so the same sums stored for a second round would repeat the first round's metrics under the
    // second's coordinates without a word.  release_round() takes back the claim of a store that
    // failed, so that the caller may store the metrics again.
    void claim_round(std::size_t round_index, const std::string& source) const;
    void release_round() const { stored_round_.store(kNotStored); }

    std::size_t layer_count() const { return layers_.size(); }
    bool measured(int layer) const { return layers_.at(std::size_t(layer)).measured; }
    // One flag per layer: true for the layers a run must still return (those not measured).
    std::vector<bool> keep() const;
    // The sums of `layer` so far (what the run has reported).
    ActivationErrorSums sums(int layer) const;

private:
    void check_network(const Network& net, const std::string& source) const;

    struct LayerSums {
        std::string name;                        // of the network made for (check_network)
        Shape3 out_shape;
        bool measured = false;
        std::span<const std::int8_t> reference;  // every image's reference, one after another
        std::shared_ptr<const void> reference_owner;  // keeps `reference` alive
        std::int64_t image_size = 0;             // values per image
        // Totals of the micro-batches reported so far; integer additions in any order give the same.
        // Workers add under the lock once per micro-batch, after the sums of the batch are taken.
        mutable std::mutex lock;
        mutable ActivationErrorSums totals;
    };
    std::vector<LayerSums> layers_;
    static constexpr std::int64_t kNotStored = -1;
    mutable std::atomic<std::int64_t> stored_round_{kNotStored};  // claim_round's round
};

}  // namespace aimcemu
