// Analytic per-layer timing of one PU (PU1x / PU2x) running a quantized network.
//
// A GEMM layer (weights N x M, activations M x P) runs tile by tile: tile t is the row-block
// [t*R_SA, t*R_SA + R_SA) of the weight matrix, and it streams all P input columns through the SA.
// One column of one tile is a "wave" of ceil(M/C_SA) fast cycles.  The wave's time is the
// slowest of the stages that work on it in parallel (ping-pong buffered, so loads overlap compute):
//   SA        ceil(M_eff / C_SA)                         fast cycles
//   WRB       ceil(rows / R_g)   (the read side drains the tile's valid row-blocks, R_g bytes/cycle);
//             where R_g * G < R_SA the SA and WRB together take the cycle-level model's count
//             (sa_cycle.hpp) for the tile, less its drain, spread over its waves
//   ADM in    IM2COL commands: per kernel row (Cin a multiple of the alignment) or per in-image
//             kernel pixel, its aligned 32-byte words + overhead; linear transfers (k=1, p=0, s=1;
//             FC; host IM2COL) and the k=1 s=2 stride pattern stream at 16 B per AXI cycle (the
//             I/O ADM's stream side), no overhead
//   ADM out   the tile's output bytes of the pixel at 16 B per AXI cycle: one linear stream for a
//             single-tile layer, else one command per segment (aligned words + overhead)
//   residual  the tile's R_SA residual bytes on the weights/residual port (same cost rule)
//   HBM       the activation channel: the input and output beats at the channel's sustained rate
// plus a per-layer fill (first column load, HBM latency, SA and post-processing depth).
// Weight-tile load stalls are not here: the scheduler (scheduler.hpp) adds them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/network.hpp"
#include "perf_model/pu_config.hpp"

namespace aimcemu {

// How the first layer (3 input channels) is fed.
enum class FirstLayerIm2col {
    Host,   // host builds the IM2COL matrix, each patch padded to the 32-byte alignment (147 -> 160 B)
    Fpga,   // the PU's IM2COL unit: one ADM command per kernel pixel of 3 bytes
};

// How the global average pool is mapped onto the GEMM engine.
enum class AvgPoolMapping {
    BlockDiagonal,  // row-block t reads only its R_SA channels: M_eff = k*k*R_SA, P = 1 per tile;
                    // all tiles share one weight tile (avg_mult on the block diagonal), kept in URAM
    Dense,          // the full N x (k*k*C) GEMM of Layer::gemm_n/m (mostly zero weights)
};

// Which model times the layers.
enum class TimingModel {
    Full,      // every stage, the per-layer fill and drain, and (system model) weight-load stalls
    Roofline,  // SA cycles only, P * ceil(N/R_SA) * ceil(M/C_SA) with the mapped M and P: no fill,
               // no data-movement bound, no weight stall.  The straw man the paper's numbers must
               // reject (tests/cpp/test_timing_paper.cpp).
};

const char* to_string(FirstLayerIm2col v);
const char* to_string(AvgPoolMapping v);
const char* to_string(TimingModel v);

struct TimingOptions {
    FirstLayerIm2col first_layer = FirstLayerIm2col::Host;
    AvgPoolMapping avg_pool = AvgPoolMapping::BlockDiagonal;
    TimingModel model = TimingModel::Full;
    // Analog tile peripherals (docs/peripherals.md) in the post-processing of the layers flagged
    // here (by layer index; empty: none): one more streaming stage of periph_lanes results per
    // fast cycle (0: R_g, the block's design rate) and periph_latency cycles of pipeline depth.
    // The block's generated constants (NIU_PERIPH_LANES, NIU_PERIPH_PIPE_STAGES) fill these in
    // aimcemu.perf.
    std::vector<bool> peripherals;
    int periph_lanes = 0;
    int periph_latency = 0;
};

// One weight tile as the scheduler sees it.
struct TileTiming {
    int layer = -1;             // index into Network::layers
    int tile = 0;               // row-block index inside the layer
    int rows = 0;               // <= R_SA
    std::int64_t entries = 0;   // URAM entries per row
    std::int64_t load_bytes = 0;  // weights + bias bytes moved HBM -> URAM
    double exec_s = 0;          // execution once loaded (its waves; the layer fill on tile 0)
    double side_port_s = 0;     // port time its residual fetch takes on the weights port
    bool shared_static = false; // same weights as every tile of its layer, kept in URAM
};

struct LayerTiming {
    int layer = -1;
    std::string name;
    LayerKind kind = LayerKind::Conv;
    bool timed = false;          // false: fused or not a PU operation (max-pool)
    std::int64_t n = 0, m = 0, m_eff = 0, p = 0;  // GEMM view actually run (m_eff: padded/mapped M)
    std::int64_t tiles = 0;
    std::int64_t columns = 0;    // columns streamed per tile
    std::int64_t wave_cycles = 0;        // ceil(M_eff / C_SA)
    std::int64_t sa_cycles = 0;          // P * ceil(N/R_SA) * ceil(M/C_SA) with the mapped M and P
    double in_cycles_per_column = 0;     // average ADM input time of a column, fast cycles
    double out_cycles_per_column = 0;
    double residual_cycles_per_column = 0;
    double hbm_cycles_per_column = 0;    // activation channel: input + output beats at its sustained rate
    std::int64_t wrb_cycles = 0;         // ceil(R_SA / R_g): a full tile's reads per wave (the stage: the tile's valid rows)
    std::int64_t fill_cycles = 0;        // fill and drain: first column, HBM latencies, SA and post-processing depth
    double stream_cycles = 0;            // sum over tiles and columns of the slowest stage
    double adm_bound_cycles = 0;         // stream_cycles - sa_cycles: waves a data-movement stage made longer
    double cycles = 0;                   // stream + fill (no weight stalls)
    std::string bound;                   // "SA", "ADM-in", "ADM-out", "residual", "WRB", "HBM", "peripherals", "fused"
    bool wrb_condition = true;           // R_g >= R_SA / ceil(M/C_SA) (the paper's condition)
    bool peripherals = false;            // the layer's results pass the analog tile peripherals
    std::int64_t periph_cycles = 0;      // their stage per wave: ceil(R_SA / periph lanes)
    double periph_stall_cycles = 0;      // stream cycles the stage adds over the other stages
    double macs = 0;                     // useful MACs (conv/linear: N*M*P; pools: 0)
    std::int64_t weight_bytes = 0;       // weights + bias loaded per inference
    std::int64_t input_bytes = 0;        // activation bytes read from HBM (all tiles, whole aligned beats)
    std::int64_t output_bytes = 0;
    std::int64_t residual_bytes = 0;
    double time_s = 0;
    double efficiency = 0;               // macs / (cycles * R_SA * C_SA)
};

struct NetworkTiming {
    PuConfig pu;
    TimingOptions options;
    std::vector<LayerTiming> layers;     // one per network layer (untimed ones included)
    std::vector<TileTiming> tiles;       // execution order
    double compute_s = 0;                // sum of layer times (no weight stalls)
    double macs = 0;
    std::int64_t weight_bytes = 0;
};

// Throws FormatError for a layer the PU cannot run (e.g. a tile larger than the URAM).
NetworkTiming time_network(const Network& net, const PuConfig& pu, const TimingOptions& options = {});
LayerTiming time_layer(const Network& net, int layer, const PuConfig& pu, const TimingOptions& options = {});

// Cycles of the SA -> aggregator -> WRB pipeline for one GEMM (waves in column order), from the
// first input cycle to the last WRB read, as the cycle-level model (sa_cycle.hpp) counts them:
//   max( (W - 1) * G + ready(b) + (R_SA/R_g - 1 - b) + 2 + 1,      the SA issues a wave per G cycles
//        ready(0) + (R_SA/R_g - 1) + 2 + chunks )                  the WRB reads a chunk per cycle
// with W = P * ceil(N/R_SA) waves, G = ceil(M/C_SA), b the top valid row-block of the last wave,
// chunks = the valid row-blocks of all waves (rows past N make none), and ready(b) =
// (G - 1) + (C_SA - 1) + (b + 1) * R_g - 1 + 4 + 1 the cycle row-block b's chunk is at its FIFO's
// head (systolic delay; the buffer read and the three DSP registers; scale/merge: sa_pipeline.hpp);
// then it climbs R_SA/R_g - 1 - b aggregator slots, is written to the WRB and read (2), and the
// count is inclusive (1).  Exact when R_g * G >= R_SA (the paper's WRB condition) and N <= R_SA
// or N is a multiple of R_SA (a short last row-block can finish before the wave ahead of it); a
// lower bound everywhere (tests/cpp/test_timing_sa_crosscheck.cpp): where the WRB condition fails,
// FIFO credits and the aggregator chain's arbitration make the cycle-level model slower than
// either term, and the layer model runs the cycle-level model itself (timing.cpp).
std::int64_t sa_pipeline_cycles(const PuConfig& pu, std::int64_t n, std::int64_t m, std::int64_t p);
bool sa_pipeline_exact(const PuConfig& pu, std::int64_t n, std::int64_t m);

// ADM cost of one transfer of `bytes` starting at byte address `address`: the aligned beats it
// spans (the ADM reads whole aligned 32-byte words).
std::int64_t aligned_beats(const PuConfig& pu, std::int64_t address, std::int64_t bytes);

}  // namespace aimcemu
