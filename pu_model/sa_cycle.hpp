// PE-level, cycle-by-cycle model of the PU's systolic array (SA), its output aggregator and the
// wave reorder buffer (WRB), after the paper's Fig. 2(b).
//
// Every register that carries data is modelled: the activation buffer read, the per-column input
// skew, the DSP48E2 input cascade that moves activations up each column, each row's URAM read
// (enabled in systolic alignment, with the per-column weight skew), the A/B, M and P registers of
// every PE, the bias entering the first column's C port, the partial sums moving right into the
// neighbour's C port, and the last column accumulating ceil(M/C_SA) rounds.  Finished rows are
// scaled, merged into R_g-wide chunks, queued in one FIFO per row-block, climb the aggregator
// chain and are written to the WRB at the address its free list hands out (arrival order); a
// table indexed by the chunk's tag remembers where it went.  The read side walks (wave,
// row-block) in strict order, and the output is written in read order by a counter that knows
// nothing of tags: a chunk that arrives with a wrong tag lands in the wrong place, and one that
// never arrives stops the run with a FormatError naming its wave (a cycle limit guards the loop).
//
// Pipeline depths: sa_pipeline.hpp (shared with the analytic timing model).  The model is slow
// (R_SA x C_SA PEs stepped every fast cycle) and meant for small shapes: it is the cycle-count
// reference for perf_model/timing.hpp and the third bit-exact GEMM path.  docs/arithmetic.md.
#pragma once
#include <cstdint>
#include <vector>

namespace aimcemu {

// Deliberate defects, for the mutation tests that show a broken datapath cannot pass: each gives
// a wrong result or a FormatError naming the wave, never a hang.
enum class SaFault {
    None,
    InputSkew,      // column `column`'s input skew line is one register short
    SwapChunkTags,  // wave `wave`: the chunks of row-blocks `block` and `block + 1` swap their tags
    DropChunk,      // wave `wave`: row-block `block`'s chunk is lost between aggregator and WRB
};

struct SaFaultSpec {
    SaFault kind = SaFault::None;
    int column = 1;
    std::int64_t wave = 0;
    int block = 0;
};

// The largest SaConfig validate() accepts: 16x the paper's 64 x 8 array, and FIFO / WRB depths
// far beyond what any array streams through (deeper ones change no cycle).
inline constexpr int kSaMaxRows = 1024, kSaMaxCols = 1024, kSaMaxDepth = 1 << 16;

struct SaConfig {
    int rows = 64;          // R_SA: PE rows (output channels) per wave
    int cols = 8;           // C_SA: depth positions per cycle (PU2x 8, PU1x 4)
    int rg = 8;             // R_g: rows per chunk, WRB read chunks per cycle; must divide rows
    // The paper gives no depths; these defaults let the array stream at full rate whenever the
    // WRB read side keeps up (a chunk spends up to G + C + R + the pipeline depth in flight).
    int fifo_depth = 16;    // chunks per row-block FIFO incl. those in the array (credits): covers
                            // the round trip of a 64-row array at G >= R_SA/R_g; smaller arrays
                            // at G = 1 need up to C_SA + R_SA + 5 (deeper FIFOs slow the
                            // read-bound regime: more waves in flight collide in the chain)
    int wrb_waves = 64;     // WRB capacity in waves (64 x 64 B = one BRAM36); the SA starts a
                            // wave only when the WRB has space reserved for it
    // Wave order: false, pixel-major (every section of a column, then the next column: the order
    // the paper's Sec. II-B describes); true, tile-major (every column of a section, then the next
    // section: the order perf_model/timing.hpp times, one weight tile at a time).
    bool tile_major = false;
    std::int64_t cycle_limit = 0;  // 0: derived from the shape and depths (an upper bound of a sound datapath)
    SaFaultSpec fault;      // SaFault::None for the real datapath
    void validate() const;  // throws FormatError naming the bad field
};

struct SaCycleStats {
    std::int64_t cycles = 0;             // first input cycle to the last WRB read, inclusive
    std::int64_t waves = 0;              // input rounds = P * ceil(N / rows)
    std::int64_t cycles_per_wave = 0;    // ceil(M / cols)
    std::int64_t chunks = 0;             // R_g-wide chunks written to and read from the WRB
    std::int64_t compute_cycles = 0;     // waves * cycles_per_wave: the SA's busy cycles
    std::int64_t sa_stall_cycles = 0;    // cycles the SA was free but could not start a wave
    std::int64_t wrb_full_cycles = 0;    // ... of which because the WRB had no space for it
    std::int64_t out_of_order_writes = 0;// chunks written to the WRB before an older chunk
    std::int64_t first_output_cycle = 0; // cycle of the first WRB read
    std::int64_t max_wrb_chunks = 0;     // peak WRB occupancy in chunks
    std::int64_t cycle_limit = 0;        // the guard this run had
    // Tile-major runs: per section, the cycle its first wave started (the first 0); empty for
    // pixel-major runs.
    std::vector<std::int64_t> section_start_cycles;
};

// acc (P x N int32) = W (N x M) * X + (bias << bias_shift), with X given as P rows of M int8
// (row stride ldx), computed by the modelled array.  Returns the cycle statistics.  Throws
// FormatError for a bad configuration, and for a datapath that loses a chunk or overruns the
// cycle limit (only possible with a fault injected).
SaCycleStats sa_cycle_gemm(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                           int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, const SaConfig& config,
                           std::int32_t* acc);

}  // namespace aimcemu
