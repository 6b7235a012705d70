// Whole-network, bit-exact INT8 inference on the PU functional model.
//
// Runs every layer of a resolved Network in order (conv/linear through IM2COL + GEMM +
// post-processing, adds and pools through post-processing; pu_model/postproc.hpp has the rules)
// and returns every layer's output, since researchers study per-layer activations.  The GEMM
// backend is a choice: Fast (production), Reference (the definition) or CycleSA (the cycle-level
// systolic-array model; slow, small networks only).  All three give identical bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "pu_model/gemm.hpp"
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

// The weights the PU actually reads.  By default a layer's own; the NIU supplies noisy ones.
// weights(i) returns layer i's N*M int8 weights in the network's layout, or nullptr to use the
// layer's own.  It is only asked about conv/linear layers and must stay valid during the call.
struct WeightView {
    virtual ~WeightView();
    virtual const std::int8_t* weights(int layer_index) const = 0;
};

struct RunOptions {
    GemmBackend backend = GemmBackend::Fast;
    int threads = 1;                         // 0 = all hardware threads; results never depend on it
    FastKernel kernel = FastKernel::Auto;    // which fast kernel (Fast backend only)
    SaConfig sa;                             // the modelled array (CycleSA backend only)
    const WeightView* weights = nullptr;
    // Analog tile peripherals of AIMC layers (DAC before the GEMM; output noise, bound and ADC
    // between the accumulator and requantisation), nullptr for none.  Their noise is keyed by the
    // image's index in the run: first_image + the image's position in the batch.
    const LayerPeripherals* peripherals = nullptr;
    std::int64_t first_image = 0;
};

// One output per layer, in network order.  The network must be resolved; the input must have the
// network's input shape (FormatError naming "input" otherwise).
std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, GemmBackend backend,
                                 const WeightView* weights = nullptr);
std::vector<Tensor8> run_network(const Network& net, const Tensor8& input, const RunOptions& options);

// N images on a pool of options.threads threads (one image per task; with a single image the
// threads go to the GEMM instead).  result[i] holds image i's per-layer outputs; identical bytes
// for any thread count.
std::vector<std::vector<Tensor8>> run_network_batch(const Network& net, const std::vector<Tensor8>& images,
                                                    const RunOptions& options);

}  // namespace aimcemu
