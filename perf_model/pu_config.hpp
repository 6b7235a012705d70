// PU parameters for the timing model: systolic array, clocks, AXI ports, URAM, HBM.
//
// Every constant the timing model uses lives here, with its source: the paper's facts (array
// shape, clocks, port widths, URAM count) and the few physical assumptions that the paper does
// not state (ADM command overhead, HBM latency, pipeline depths).  docs/timing.md explains each.
#pragma once
#include <cstdint>
#include <string>

namespace aimcemu {

struct PuConfig {
    std::string name = "PU2x";

    // Systolic array (paper Sec. II-A / IV): R_SA rows x C_SA columns of DSP48E2 at the fast clock.
    int r_sa = 64;
    int c_sa = 8;
    int r_g = 8;                      // WRB read side, bytes per fast cycle
    double fast_hz = 600e6;           // SA, URAM, WRB clock
    double axi_hz = 300e6;            // system / AXI clock (half the fast clock)

    // AXI ports (two 256-bit ports per PU: I/O, and weights+bias+residual).
    int axi_bytes = 32;               // one beat
    int align_bytes = 32;             // ADM minimum transfer / alignment (paper Sec. V)
    // Extra AXI cycles per ADM command that the IM2COL unit issues (one command per in-image
    // kernel pixel, per output segment, per residual segment).  Not in the paper: fitted to the
    // footnote of Table I (ResNet-50 with the first layer's IM2COL in the FPGA); see docs/timing.md.
    double adm_command_overhead = 1.52;

    // URAM weight store: 64 URAMs x 4096 x 72 bit; 64 bits of weights + the spare byte (bias).
    int uram_count = 64;
    int uram_entries = 4096;
    int uram_weight_bits = 64;
    int uram_subregions = 1;          // PU1x: 2 sub-regions of 32 bit, matching its C_SA = 4

    // Pipeline depth (fast cycles) after the WRB, for the per-layer drain (the SA's own drain comes
    // from sa_pipeline_cycles in timing.hpp).
    int postproc_pipeline = 16;       // ReLU, residual SIMD add, ReLU, width upsizer, clock converter
    double hbm_latency_s = 107e-9;    // HBM read latency (Shuhai, Wang et al. FCCM 2020, page hit)

    // Derived quantities.
    double macs_per_cycle() const { return double(r_sa) * c_sa; }
    double peak_ops() const { return 2.0 * macs_per_cycle() * fast_hz; }   // ops/s
    double port_bytes_per_s() const { return double(axi_bytes) * axi_hz; }
    // Weights held by one URAM entry (one SA row reads C_SA weights per fast cycle).
    int weights_per_entry() const { return c_sa; }
    std::int64_t entries_per_row() const { return std::int64_t(uram_entries) * uram_subregions; }
    // Fast cycles per AXI cycle.
    double fast_per_axi() const { return fast_hz / axi_hz; }

    // Throws FormatError(source, field, ...) for any inconsistent field.
    void validate(const std::string& source = "<memory>") const;
};

PuConfig pu2x();   // R_SA = 64, C_SA = 8  (514 DSP)
PuConfig pu1x();   // R_SA = 64, C_SA = 4  (258 DSP), URAM split into two 32-bit sub-regions
// "pu2x" / "pu1x" (case-insensitive); FormatError otherwise.
PuConfig pu_by_name(const std::string& name, const std::string& source = "<memory>");

// HBM as seen by the system (U50: 32 pseudo-channels, each 256 bit at 450 MHz on the AXI side).
struct HbmConfig {
    int channels = 32;
    double channel_bytes_per_s = 32.0 * 450e6;   // 14.4 GB/s per pseudo-channel
    void validate(const std::string& source = "<memory>") const;
};

}  // namespace aimcemu
