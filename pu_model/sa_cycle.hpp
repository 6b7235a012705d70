// Cycle-level model of the PU's systolic array (SA), its output aggregator and the wave reorder
// buffer (WRB), after the paper's Fig. 2(b).  It computes the GEMM exactly as the array does and
// moves every result through the modelled datapath, so that the values it returns are the ones
// that leave the WRB in read order; a wrong reorder would give a wrong result.  It is slow (one
// step per fast-clock cycle) and meant for small shapes: it is the cycle-count reference for the
// analytic timing model and the third bit-exact GEMM path.  Assumptions: docs/arithmetic.md.
#pragma once
#include <cstdint>

namespace aimcemu {

struct SaConfig {
    int rows = 64;          // R_SA: PEs (output channels) per input round
    int cols = 8;           // C_SA: depth positions per cycle (PU2x 8, PU1x 4)
    int rg = 8;             // R_g: bytes per chunk, WRB read bytes per cycle; must divide rows
    // The paper gives no depths; these defaults let the array stream at full rate whenever the
    // WRB read side keeps up (a chunk spends up to G + C + R cycles in the pipeline).
    int fifo_depth = 16;    // chunks per row-block FIFO incl. those in the SA pipeline (credits)
    int wrb_waves = 64;     // WRB capacity in waves (64 x 64 B = one BRAM36); the SA starts a
                            // wave only when the WRB has space reserved for it
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
};

// acc (P x N int32) = W (N x M) * X + (bias << bias_shift), with X given as P rows of M int8
// (row stride ldx), computed by the modelled array.  Returns the cycle statistics.
SaCycleStats sa_cycle_gemm(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                           int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, const SaConfig& config,
                           std::int32_t* acc);

}  // namespace aimcemu
