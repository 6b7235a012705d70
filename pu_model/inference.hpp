// Whole-network, bit-exact INT8 inference on the PU functional model.
//
// Runs every layer of a resolved Network in order (conv/linear through IM2COL + GEMM +
// post-processing, adds and pools through post-processing; pu_model/postproc.hpp has the rules)
// and returns the layers' outputs, since researchers study per-layer activations (all of them,
// or only those RunOptions::keep names, so that a long run does not hold what it will not store).
// The GEMM backend is a choice: Fast (production), Reference (the definition) or CycleSA (the
// cycle-level systolic-array model; slow, small networks only).  All three give identical bytes.
//
// Speed (docs/performance.md): images run in micro-batches of RunOptions::batch images, layer by
// layer, with one GEMM per layer over the whole micro-batch (more rows per weight panel on the
// small 7x7 layers).  With several micro-batches, each thread runs its own; with one, the
// threads split each GEMM.  Fast-kernel weights are packed once per call, or once for many calls
// with a PackedNetwork.  A pass's buffers (activations, IM2COL operands, weights it packs itself)
// are recycled (pu_model/pass_buffers.hpp): within the call, and from call to call through
// RunOptions::buffers.  Bytes never depend on threads, batch, packing or recycling.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pu_model/gemm.hpp"
#include "pu_model/pass_buffers.hpp"
#include "pu_model/peripherals.hpp"
#include "formats/network.hpp"
#include "pu_model/sa_cycle.hpp"

namespace aimcemu {

struct Tensor8 {
    Shape3 shape;                     // HWC
    std::vector<std::int8_t> data;    // shape.size() values, HWC order
};

enum class GemmBackend { Fast, Reference, CycleSA };
const char* to_string(GemmBackend backend);
// The backend a name gives ("fast", "reference", "cycle_sa"); FormatError(source, field) naming the
// known ones otherwise.
GemmBackend gemm_backend_from_string(const std::string& name, const std::string& source = "<memory>",
                                     const std::string& field = "backend");

// The weights the PU actually reads.  By default a layer's own; the NIU supplies noisy ones.
// weights(i) returns layer i's N*M int8 weights in the network's layout, or nullptr to use the
// layer's own.  It is only asked about conv/linear layers and must stay valid during the call.
struct WeightView {
    virtual ~WeightView();
    virtual const std::int8_t* weights(int layer_index) const = 0;
};

// Fast-kernel weights of every GEMM layer of one network, packed once (packing costs as much as
// a GEMM on the 7x7 layers) and shared by any number of runs and threads.  Layers whose weights
// a WeightView replaces are packed per run instead.
class PackedNetwork {
public:
    PackedNetwork(const Network& net, FastKernel kernel = FastKernel::Auto, int threads = 0);
    // Packs every GEMM layer except those in `skip` (e.g. layers whose weights change every run:
    // a run packs those itself).
    // weights: where each layer's weights are read (a layer it gives no pointer for: the layer's
    // own), e.g. for a network whose weights live elsewhere (the emulator's HBM).
    PackedNetwork(const Network& net, FastKernel kernel, int threads, const std::vector<int>& skip,
                  const WeightView* weights = nullptr);
    // Layer `index`'s packed weights (nullptr for a layer without weights or one skipped).
    const PackedWeights* layer(int index) const { return layers_[std::size_t(index)].get(); }
    std::size_t layer_count() const { return layers_.size(); }
    FastKernel kernel() const { return kernel_; }
    std::size_t bytes() const;   // memory held by the packed weights

private:
    FastKernel kernel_;
    std::vector<std::unique_ptr<PackedWeights>> layers_;
};

// Sees every layer's output of a run as soon as it is computed, while it is still in cache: a
// micro-batch's `count` images (positions first .. first + count - 1 of the call's images), one
// after another, HWC each.  Called from the worker threads at once (one call per micro-batch and
// layer, in no fixed order), so an implementation must be thread-safe and must not depend on
// the order of the calls (e.g. exact integer sums).  The values are valid only during the call.
struct LayerOutputObserver {
    virtual ~LayerOutputObserver();
    virtual void layer_output(int layer, std::int64_t first, int count, std::span<const std::int8_t> values) const = 0;
};

struct RunOptions {
    GemmBackend backend = GemmBackend::Fast;
    // 0 = every CPU this thread may run on (resolve_threads); results never depend on it.  The default stays 1,
    // not Python's 0: a C++ caller often runs passes in parallel itself (worker processes, a
    // thread pool of its own), where every core per pass would oversubscribe the machine unasked;
    // more threads are asked for, not imposed.  Python never relies on it:
    // aimcemu.run passes its resolved count (the results file's config.threads_used).
    int threads = 1;
    FastKernel kernel = FastKernel::Auto;    // which fast kernel (Fast backend only)
    SaConfig sa;                             // the modelled array (CycleSA backend only)
    const WeightView* weights = nullptr;
    // Which layers' outputs to return (empty = all).  A layer not kept comes back with its shape
    // and no data, and its buffer is freed as soon as the layers that read it have run.
    std::vector<bool> keep;
    int batch = 0;                           // images per GEMM (0 = automatic); never changes a byte
    const PackedNetwork* packed = nullptr;   // prepared weights of this network (Fast backend)
    // Analog tile peripherals of AIMC layers (DAC before the GEMM; output noise, bound and ADC
    // between the accumulator and requantisation), nullptr for none.  Their noise is keyed by the
    // image's index in the run: first_image + the image's position in the batch.
    const LayerPeripherals* peripherals = nullptr;
    std::int64_t first_image = 0;
    // Sees each layer's output as it is made (e.g. per-layer metrics of a noisy round, so that a
    // layer nobody stores need not be kept); nullptr for none.  keep still says what comes back.
    const LayerOutputObserver* observer = nullptr;
    // Where the pass takes its buffers and gives them back (pass_buffers.hpp): a caller running
    // pass after pass (the emulator's rounds) keeps one, so that a pass reuses the last one's
    // memory instead of page-faulting it in again.  nullptr: the call recycles within itself and
    // frees everything when it returns.  May be shared by passes running at once.
    PassBuffers* buffers = nullptr;
};

// One output per layer, in network order.  The network must be resolved; the input must have the
// network's input shape (FormatError naming "input" otherwise).
std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, GemmBackend backend,
                                 const WeightView* weights = nullptr);
std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, const RunOptions& options);

// N images on options.threads threads (see the top of this file for how they are shared out).
// result[i] holds image i's per-layer outputs; identical bytes for any thread count and batch.
std::vector<std::vector<Tensor8>> run_network_batch(const Network& net, const std::vector<Tensor8>& images,
                                                    const RunOptions& options);

}  // namespace aimcemu
