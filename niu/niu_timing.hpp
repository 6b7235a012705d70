// NIU timing and cost: how long an NIU takes to re-noise a set of weights, the HBM bytes it moves,
// what it costs in FPGA resources, and whether a configuration of PUs and NIUs fits the XCU50.
//
// The NIU streams clean INT8 weights in and noisy weights out through one AXI port (256-bit
// beats at the 300 MHz system clock) on ONE HBM channel, read-modify-write: each weight costs one
// byte read and one byte written on that channel.  Its rate is the smaller of
//   datapath:    weights per cycle x clock      (an L-lane NIU: the co-simulation's measured rate)
//   AXI port:    beat_bytes x clock per direction (AXI reads and writes run in parallel)
//   HBM channel: channel_bytes_per_s x efficiency / 2 (reads and writes share the channel)
// Beside the streaming, a program costs the RTL's controller cycles: the header, and per layer its
// program block (NIU_LAYER_WORDS words at one word per cycle) and its stream's pipeline fill and
// hand-offs, each a constant read off rtl/niu.sv's state machine; and the memory's latency: a
// memory whose read data comes R cycles and whose write responses come W cycles later than a
// zero-latency one adds R + layers x (2R + W) cycles (docs/niu_rtl.md, "Memory latency and the
// timing model").  On an ideal bus with the datapath's rate (lanes_per_cycle = the RTL's Lanes)
// niu_program_time is the RTL's bus time to the cycle (NiuCosimLatency checks it).  The NIU
// keeps no per-chip state in HBM: the chip draws are regenerated every round
// (docs/niu_datapath.md section 2), so there is no programming pass.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "niu_constants.hpp"
#include "perf_model/system.hpp"

namespace aimcemu {

struct NiuConfig {
    double lanes_per_cycle = niu::gen::NIU_BEAT_LANES;  // weights that leave the noise pipeline per clock
    double clock_hz = 300e6;                             // AXI / system clock
    int beat_bytes = niu::gen::NIU_AXI_BEAT_BYTES;       // 256-bit AXI beat = 32 INT8 lanes
    // One HBM pseudo-channel of the U50 and its sustained fraction for long bursts: the same
    // constants as the PUs' channels (perf_model/pu_config.hpp).
    double channel_bytes_per_s = kU50HbmPeakBytesPerS / kU50HbmPseudoChannels;
    double channel_efficiency = kShuhaiHbmEfficiency;
    // Memory latency in cycles beyond a memory that answers in the cycle after the handshake: R
    // delays a read burst's first beat after its AR, W a write burst's B after its last W beat.
    // 0 and 0 (the default) model a zero-latency memory.
    double read_latency_cycles = 0;
    double write_latency_cycles = 0;
    void validate(const std::string& source = "<memory>") const;
};

struct NiuRoundTime {
    std::int64_t weights = 0;
    double seconds = 0;
    double cycles = 0;                   // seconds x clock_hz
    // Everything beside streaming the weights (part of seconds): the header, the layers' program
    // blocks, each layer's pipeline fill and hand-offs, and the memory latency.
    double program_seconds = 0;
    std::int64_t bytes_read = 0;         // weights and program blocks
    std::int64_t bytes_written = 0;
    double weights_per_s = 0;
    std::string bound;                   // "datapath", "axi-port" or "hbm-channel"
};

// The NIU's sustained rate, as the system model consumes it.
NiuThroughput niu_throughput(const NiuConfig& cfg);
// Time and traffic to re-noise `weights` weights of `layers` layers once (one round of one
// PU's AIMC layers); layers = 0 leaves out the program (header, blocks, fills, latency).
NiuRoundTime niu_round_time(const NiuConfig& cfg, std::int64_t weights, int layers = 0);
// The same for a program whose layers hold these weight counts, each streamed as whole beats (a
// partial last beat costs a full one): the NIU's bus time from its first read request to its last
// write response (the few cycles from CTRL.start to the first AR and from the last B to
// STATUS.done are not part of it).  No layers: no program, no time.
NiuRoundTime niu_program_time(const NiuConfig& cfg, const std::vector<std::int64_t>& layer_weights);

// ---- cost ------------------------------------------------------------------------------------

// FPGA resources of one block.  FF is NaN where the source gives none (the paper's PUs).
struct FpgaResources {
    std::string name;
    double lut = 0, ff = 0, dsp = 0, bram36 = 0, uram = 0;
};

// One synthesized NIU configuration (rtl/synth/, generated into niu_constants.hpp).
struct NiuSynthesis {
    int lanes = 0;
    FpgaResources resources;
    double weights_per_cycle = 0;        // measured in co-simulation, ideal bus
};

// Every lane count the RTL has been synthesized and co-simulated for.
std::vector<NiuSynthesis> niu_syntheses();
// The synthesis for `lanes`; FormatError naming `field` for a lane count the RTL was not built for.
NiuSynthesis niu_synthesis(int lanes, const std::string& source = "<memory>", const std::string& field = "niu.lanes");
// An NiuConfig whose datapath rate is the RTL's measured weights per cycle at `lanes`.
NiuConfig niu_config_for_lanes(int lanes, const std::string& source = "<memory>");

// The paper's PUs (Sec. IV: LUT, DSP48E2, 20 BRAM36 and 64 URAM each; FF not reported).
FpgaResources pu_resources(const std::string& pu_name, const std::string& source = "<memory>");
// The XCU50 (AMD DS965: 872K LUT, 1,743K FF, 5,952 DSP, 47.3 Mb BRAM = 1,344 BRAM36,
// 180 Mb URAM = 640 URAM).
FpgaResources xcu50();
// What the paper's full build uses beyond its ten PUs (PCIe, HBM controller, AXI interconnect,
// instruction controllers): its reported utilisation (23.4 % LUT, 64.8 % DSP, 25.6 % BRAM, 100 %
// URAM) minus 5 PU2x + 5 PU1x, floored at 0.
FpgaResources u50_shell();

// Resources of PUs and NIUs on the XCU50: the rows, their sum with the shell, and whether it fits.
struct FitReport {
    std::vector<FpgaResources> rows;     // one per distinct block, resources times count
    std::vector<int> counts;
    FpgaResources shell, total, device;
    bool fits = false;
    std::string limiting;                // the resource closest to (or over) the device's
    double limiting_fraction = 0;
};
FitReport fit_on_xcu50(int pu2x, int pu1x, int nius, int niu_lanes, const std::string& source = "<memory>");

}  // namespace aimcemu
