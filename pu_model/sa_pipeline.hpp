// Pipeline depths of the PU's systolic array and its output path, in fast-clock cycles.
//
// One source of truth for two models: the PE-level array (sa_cycle.hpp) is built from these
// registers, and the analytic timing model (perf_model/timing.hpp) counts the same registers in
// its closed form, so the two agree cycle for cycle wherever the closed form claims exactness.
//
// The paper (Sec. II-A) gives the structure -- activations enter at the bottom of each column and
// climb the DSP48E2 input cascade, each row's URAM read port is enabled in systolic alignment,
// partial sums move left to right into the neighbour's C port, the last column accumulates for
// ceil(M/C_SA) rounds, then scale/shift, merge into R_g-byte chunks, FIFOs, the aggregator chain
// and the WRB -- but no register counts.  The counts below are the minimum the DSP48E2 and the
// block RAMs need to run at the 600 MHz fast clock (AMD UG579, DSP48E2: AREG/BREG, MREG and PREG
// all set for full speed; UG573: BRAM and URAM read latency of one cycle without output
// registers).  Changing one changes only fill and drain, never the steady-state rate.
#pragma once
#include <cstdint>

namespace aimcemu::sa_pipeline {

inline constexpr int kBufferReadLatency = 1;  // activation ping-pong BRAM: address -> data
inline constexpr int kUramReadLatency = 1;    // URAM288 read port: enable -> data
inline constexpr int kDspInputRegs = 1;       // A register (input cascade) and B register
inline constexpr int kDspMultiplyReg = 1;     // M register after the multiplier
inline constexpr int kDspOutputReg = 1;       // P register (partial sum handed to the right)
inline constexpr int kScaleMergeStages = 1;   // scale/shift + merge of a row-block into a chunk
// The aggregator's top slot is written to the WRB at the next clock, and a line can be read the
// cycle after it was written (BRAM write-then-read).
inline constexpr int kWrbWriteAndRead = 2;

// Each row's URAM enable is delayed this much behind the activation buffer read of the same
// group (after the row's own systolic delay), so that weight and activation meet in the DSP.
inline constexpr int kUramEnableLead = kBufferReadLatency - kUramReadLatency;
static_assert(kUramEnableLead >= 0, "the URAM would have to be read before the buffer");

// Cycles from a group's buffer read to its product-and-sum in PE (row 0, column 0)'s P register.
inline constexpr int kPeDepth = kBufferReadLatency + kDspInputRegs + kDspMultiplyReg + kDspOutputReg;

// Relative to the cycle a wave of g groups starts (its group 0 is read from the buffer):
// the cycle at which `row`'s finished dot product sits in the last column's P register.
constexpr std::int64_t row_result_cycle(std::int64_t g, int c_sa, int row) {
    return (g - 1) + (c_sa - 1) + row + kPeDepth;
}
// The cycle from which row-block `block`'s chunk (R_g rows, complete with its top row) is at the
// head of its FIFO.
constexpr std::int64_t chunk_ready_cycle(std::int64_t g, int c_sa, int r_g, int block) {
    return row_result_cycle(g, c_sa, (block + 1) * r_g - 1) + kScaleMergeStages;
}
// The last cycle in which a group issued at cycle 0 still occupies a PE register of an
// r_sa x c_sa array (it leaves through the top-right PE's P register).
constexpr std::int64_t group_exit_cycle(int r_sa, int c_sa) { return row_result_cycle(1, c_sa, r_sa - 1); }

}  // namespace aimcemu::sa_pipeline
