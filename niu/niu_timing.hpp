// NIU timing: how long an NIU takes to re-noise a set of weights, and the HBM bytes it moves.
//
// The NIU streams clean INT8 weights in and noisy weights out through one AXI port (256-bit
// beats of 32 INT8 lanes at the 300 MHz system clock) on ONE HBM channel, read-modify-write: each
// weight costs one byte read and one byte written on that channel.  So its rate is the smaller of
//   datapath:    lanes_per_cycle x clock              (weights/s)
//   AXI port:    beat_bytes x clock per direction     (AXI reads and writes run in parallel)
//   HBM channel: channel_bytes_per_s x efficiency / 2 (reads and writes share the channel)
// lanes_per_cycle is the NIU pipeline's sustained rate; the RTL's measured value replaces the
// default (32, one full beat per cycle) once it is known.
#pragma once
#include <cstdint>
#include <string>

#include "perf_model/system.hpp"

namespace aimcemu {

struct NiuConfig {
    double lanes_per_cycle = 32;         // weights that leave the noise pipeline per clock
    double clock_hz = 300e6;             // AXI / system clock
    int beat_bytes = 32;                 // 256-bit AXI beat = 32 INT8 lanes
    // One HBM pseudo-channel of the U50 and its sustained fraction for long bursts: the same
    // constants as the PUs' channels (perf_model/pu_config.hpp).
    double channel_bytes_per_s = kU50HbmPeakBytesPerS / kU50HbmPseudoChannels;
    double channel_efficiency = kShuhaiHbmEfficiency;
    void validate(const std::string& source = "<memory>") const;
};

struct NiuRoundTime {
    std::int64_t weights = 0;
    double seconds = 0;
    std::int64_t bytes_read = 0;
    std::int64_t bytes_written = 0;
    double weights_per_s = 0;
    std::string bound;                   // "datapath", "axi-port" or "hbm-channel"
};

// The NIU's sustained rate, as the system model consumes it.
NiuThroughput niu_throughput(const NiuConfig& cfg);
// Time and traffic to re-noise `weights` weights once (one round of one PU's AIMC layers).
NiuRoundTime niu_round_time(const NiuConfig& cfg, std::int64_t weights);

}  // namespace aimcemu
