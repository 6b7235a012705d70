// PU parameters for the timing model: systolic array, clocks, AXI ports, URAM, HBM.
//
// Every constant the timing model uses lives here, with its source: the paper's facts (array
// shape, clocks, port widths, URAM count) and the few physical assumptions that the paper does
// not state (ADM command overhead, HBM latency, pipeline depths).  docs/timing.md explains each.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace aimcemu {

// HBM of the Alveo U50: 32 pseudo-channels, 316 GB/s in total (AMD DS965, the U50 data sheet).
inline constexpr int kU50HbmPseudoChannels = 32;
inline constexpr double kU50HbmPeakBytesPerS = 316e9;
// Sustained fraction of the HBM peak for long sequential bursts: Shuhai (Wang et al., FCCM 2020)
// measured 425 GB/s over all 32 AXI channels of an Alveo U280's HBM, whose peak is 460.8 GB/s
// (PG276: 32 ports x 256 bit x 450 MHz).  The U50 has the same HBM subsystem at a lower memory
// clock; the same protocol overheads (refresh, page activation) are assumed to cost the same share.
inline constexpr double kShuhaiHbmEfficiency = 425e9 / 460.8e9;

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
    // Bytes per AXI cycle on the I/O ADM's stream side (128 bit).  Rate-matched to the PU2x: its SA
    // reads 8 bytes per fast cycle from the activation buffer and its WRB emits R_g = 8 bytes per
    // fast cycle, 16 bytes per AXI cycle each.  Transfers move whole aligned 32-byte words (the
    // paper's 32-byte minimum, no realignment), so a word takes two cycles on this side.  The paper
    // gives the port's width (256 bit), not this one: chosen against its numbers (docs/timing.md).
    int adm_io_stream_bytes = 16;
    // Extra AXI cycles per ADM command (one per IM2COL kernel row or pixel, timing.cpp; per output
    // segment, per residual segment).  Not in the paper: fitted to the ResNet-50 figure of Table I's
    // footnote (the first layer's IM2COL in the FPGA) alone; see docs/timing.md.
    double adm_command_overhead = 0.41;

    // URAM weight store: 64 URAMs x 4096 x 72 bit; 64 bits of weights + the spare byte (bias).
    int uram_count = 64;
    int uram_entries = 4096;
    int uram_weight_bits = 64;
    int uram_subregions = 1;          // PU1x: 2 sub-regions of 32 bit, matching its C_SA = 4
    // Write side (paper Sec. IV): the weights port's 256-bit, 300 MHz stream is converted to 128 bit
    // at the fast clock, "aligned with the URAM data widths", and feeds two URAM cascades of R_SA/2
    // URAMs; a cascade takes one write per cycle through the URAM's 72-bit port (AMD UG573), which
    // carries one whole URAM word: 64 weight bits of one row, both sub-regions on the PU1x (its
    // sub-regions split the read path only; uram.hpp lays a tile's entries pairwise into words).
    int uram_write_bits = 128;
    int uram_cascades = 2;

    // HBM pseudo-channel behind each of the PU's regions (weights, activations, residuals).
    double hbm_channel_peak_bytes_per_s = kU50HbmPeakBytesPerS / kU50HbmPseudoChannels;
    double hbm_efficiency = kShuhaiHbmEfficiency;

    // Pipeline depth (fast cycles) after the WRB, for the per-layer drain (the SA's own drain comes
    // from sa_pipeline_cycles in timing.hpp).
    int postproc_pipeline = 16;       // ReLU, residual SIMD add, ReLU, width upsizer, clock converter
    double hbm_latency_s = 107e-9;    // HBM read latency (Shuhai, Wang et al. FCCM 2020, page hit)

    // Derived quantities.
    double macs_per_cycle() const { return double(r_sa) * c_sa; }
    double peak_ops() const { return 2.0 * macs_per_cycle() * fast_hz; }   // ops/s
    double port_bytes_per_s() const { return double(axi_bytes) * axi_hz; }  // one AXI port, one direction
    // Bytes per second the URAM write side accepts: one URAM word (its weight bits) per cascade per
    // fast cycle, at most the converter's width.
    double uram_write_bytes_per_s() const {
        const double per_cascade = std::min(double(uram_write_bits) / 8.0 / uram_cascades, uram_weight_bits / 8.0);
        return uram_cascades * per_cascade * fast_hz;
    }
    double hbm_channel_bytes_per_s() const { return hbm_channel_peak_bytes_per_s * hbm_efficiency; }
    // The weights port's sustained rate into the URAMs: the slowest of AXI port, URAM write side and
    // the weights' HBM channel.
    double weight_port_bytes_per_s() const {
        return std::min({port_bytes_per_s(), uram_write_bytes_per_s(), hbm_channel_bytes_per_s()});
    }
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

// HBM as seen by the system: the U50's 32 pseudo-channels at their sustained rate.
struct HbmConfig {
    int channels = kU50HbmPseudoChannels;
    double channel_bytes_per_s = kU50HbmPeakBytesPerS / kU50HbmPseudoChannels * kShuhaiHbmEfficiency;
    void validate(const std::string& source = "<memory>") const;
};

}  // namespace aimcemu
