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
#include <atomic>
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

// The rules the reader holds a file's round coordinates and labels to; the writer applies the same
// ones to what it is given, so it never commits a file its reader refuses.  Both throw a
// FormatError naming `path` and the field (`field_prefix` + "chip", "t", "niu_round",
// "drift_compensation"; "labels").
void require_valid_round(const RoundInfo& round, const std::string& path, const std::string& field_prefix);
void require_class_labels(std::span<const std::int64_t> labels, std::int64_t classes, const std::string& path);

struct ResultsSpec {
    std::string config_json = "{}";          // the full resolved configuration
    std::vector<std::int64_t> labels;        // one per image; fixes the number of images
    std::vector<RoundInfo> rounds;           // noisy rounds; empty for a digital run
    std::vector<std::string> stored_layers;  // layers whose activations are stored; empty = all
    bool store_no_activations = false;       // true: store none (metrics and predictions only)
    int deflate_level = 1;                   // 1..4 for activations
    bool replace_existing = true;            // false: commit() fails, leaving it alone, if the file exists
};

// The noise-free reference activations of a run: the layers a results file needs, each
// [image][HWC] int8, in one buffer of their own (on 2 MiB pages where the kernel gives them).
// Filled once, during the PU's pass, one micro-batch at a time while it is still in cache
// (store(), from the pass's worker threads at once), then sealed: from then on it is immutable,
// so one object may be shared without a copy by every writer whose run has the same network
// and images (a sweep's runs reuse it; python/aimcemu/reference.py).
class ReferenceActivations {
public:
    // Room for `images` images of every layer of `net` whose flag in `layers` is set (one flag
    // per layer).  The network's shapes are copied; `net` need not outlive this object.
    ReferenceActivations(const Network& net, std::size_t images, const std::vector<bool>& layers);
    ~ReferenceActivations();
    ReferenceActivations(const ReferenceActivations&) = delete;
    ReferenceActivations& operator=(const ReferenceActivations&) = delete;

    // Copies images first .. first + count - 1 of `layer` (`values`: count whole images, HWC
    // each).  Thread-safe for disjoint image ranges.  A layer not held is ignored; a range that
    // does not fit, or a store after seal(), is a logic_error (a bug in the caller).
    void store(int layer, std::int64_t first, int count, std::span<const std::int8_t> values);
    // Claims the filling for one pass: false when another has claimed it (a pass on another
    // thread is filling it) or it is sealed.  A pass that fails gives it back with
    // abandon_filling(), which forgets what was stored, so the object can be filled again.
    bool begin_filling();
    void abandon_filling();
    // Ends the filling: every held layer must have received every image once (logic_error
    // otherwise).  After it the object is read-only.
    void seal();
    bool sealed() const { return sealed_.load(std::memory_order_acquire); }

    std::size_t images() const { return images_; }
    std::size_t layer_count() const { return layers_.size(); }
    bool holds(int layer) const;
    // A held layer's activations [image][HWC] (logic_error before seal() or for a layer not held).
    std::span<const std::int8_t> layer(int layer) const;
    std::size_t bytes() const { return bytes_; }

private:
    struct Slot {
        std::size_t offset = 0, image_size = 0;
        bool held = false;
        std::unique_ptr<std::atomic<std::int64_t>> stored;  // images stored so far
    };
    std::vector<Slot> layers_;
    std::size_t images_ = 0, bytes_ = 0;
    std::int8_t* data_ = nullptr;
    std::atomic<bool> filling_{false}, sealed_{false};
};

class ResultsWriter {
public:
    // `net` must be resolved and outlive the writer.  Throws FormatError for a bad spec (unknown
    // layer name, empty labels) and for a path that cannot be written.
    ResultsWriter(const std::string& path, const Network& net, ResultsSpec spec);
    ~ResultsWriter();
    ResultsWriter(const ResultsWriter&) = delete;
    ResultsWriter& operator=(const ResultsWriter&) = delete;

    // Noise-free activations of `layer`, [image, y, x, channel] int8 in HWC order per image
    // (copied: the writer keeps its own).
    void set_reference(int layer, std::span<const std::int8_t> activations);
    // Every needed layer's reference at once from a sealed ReferenceActivations, which the writer
    // then shares instead of copying (FormatError for a reference made for other images or
    // another network, or missing a layer reference_needed names).  Layers already set keep theirs.
    void set_reference(std::shared_ptr<const ReferenceActivations> reference);
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
    // set_reference or after commit).  set_round and set_round_sums never change them, so other
    // threads may read them while rounds are written.  The span is valid while the writer is
    // uncommitted, and for as long as reference_owner(layer) is held.
    std::span<const std::int8_t> reference(int layer) const;
    // What keeps reference(layer)'s bytes alive (the writer's own copy or the shared
    // ReferenceActivations): whoever keeps a span of it past commit, or past the writer (a
    // RoundMetrics), holds this too.  Shared, never copied.
    std::shared_ptr<const void> reference_owner(int layer) const;
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
    // and metrics, closes the file and moves it into place.  Afterwards every call that reads or
    // sets a layer, and a second commit, is a FormatError ("file": already committed).
    void commit();

    // Results so far (valid for what has been set): accuracy of the reference and of each round.
    double reference_accuracy() const;
    std::vector<double> round_accuracy() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace aimcemu
