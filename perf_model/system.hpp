// System model: several PUs (and NIUs that replace some of them) on one FPGA with shared HBM.
//
// Two ways to use the PUs:
//   frame-parallel  every PU runs whole frames on its own (the paper's Table I): FPS is the sum
//                   of the PUs' rates; latency is one PU's round time.
//   layer-pipelined the layers are cut into contiguous stages, one per PU; activations cross
//                   stages through HBM; the slowest stage, a shared HBM channel, or the NIUs set
//                   the rate.  A stage whose weights fit in URAM keeps its digital layers resident.
// NIUs (noise injection units) take PU slots.  Each round, every PU that runs AIMC layers needs
// those layers' weights re-noised (one copy per PU in frame-parallel mode; one copy in total when
// pipelined).  An NIU's rate comes from the NIU model (niu/niu_timing.hpp), passed in here as a
// plain NiuThroughput so that pu_model/ does not depend on niu/.  The NIU for round r+1 works
// while the PU runs round r (the weight region in HBM is double-buffered).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/network.hpp"
#include "perf_model/pu_config.hpp"
#include "perf_model/scheduler.hpp"
#include "perf_model/timing.hpp"

namespace aimcemu {

enum class MultiPuMode { FrameParallel, LayerPipelined };
enum class NiuSharing { Shared, PerPu };
const char* to_string(MultiPuMode m);
const char* to_string(NiuSharing s);
MultiPuMode multi_pu_mode_from_string(const std::string& s, const std::string& source = "<memory>");
NiuSharing niu_sharing_from_string(const std::string& s, const std::string& source = "<memory>");

// What one NIU sustains (from niu/niu_timing.hpp): weights re-noised per second, the time a
// program costs besides its weights (once, and per layer: the program block, the pipeline's fill
// and hand-offs, the memory latency), and the HBM bytes it moves per weight on its channel (read
// clean + write noisy).  Re-noising W weights of L >= 1 layers takes
// W / weights_per_s + program_seconds + L x layer_seconds (niu_round_time).
struct NiuThroughput {
    double weights_per_s = 0;
    double program_seconds = 0;
    double layer_seconds = 0;
    double channel_bytes_per_weight = 2;
    std::string bound;  // what limits it ("datapath" or "hbm-channel")
};

struct SystemConfig {
    std::vector<PuConfig> pus;                 // PU slots; NIUs take slots from the end
    HbmConfig hbm;
    TimingOptions timing;
    SchedulePolicy policy = SchedulePolicy::Adaptive;
    MultiPuMode mode = MultiPuMode::FrameParallel;
    int niu_count = 0;                         // Shared: NIUs replacing the last slots
    NiuSharing niu_sharing = NiuSharing::Shared;  // PerPu: half the slots become NIUs, one per PU
    NiuThroughput niu;
    void validate(const std::string& source = "<memory>") const;
};

// The paper's U50 build: 5 PU2x + 5 PU1x (PU2x first, so NIUs replace PU1x first).
SystemConfig u50_system();
// "5xPU2x+5xPU1x" style mixes; FormatError on anything else.
std::vector<PuConfig> parse_pu_mix(const std::string& mix, const std::string& source = "<memory>");

// One PU's round: its layers' timing, the schedule of their weight tiles, and the result.
struct PuRun {
    NetworkTiming timing;          // all layers of the network on this PU type
    std::vector<int> layers;       // the layers this PU runs (network indices)
    ScheduleProblem problem;       // dynamic tiles (static ones have zero load and entries)
    ScheduleResult schedule;       // chosen policy
    ScheduleResult baseline;       // phase-1 schedule, for comparison
    double lower_bound_stall_s = 0;
    std::int64_t static_entries = 0;   // URAM entries kept resident across rounds
    double compute_s = 0;          // sum of the layers' times
    double latency_s = 0;          // steady-state round time (compute + stalls)
    std::int64_t weight_bytes_per_round = 0;  // moved HBM -> URAM each round
    std::int64_t aimc_weight_bytes = 0;       // weights of AIMC layers (re-noised each round)
    double macs = 0;
};

// Times `layers` (empty: all) of `net` on one PU.  AIMC layers (aimc[i] true) are always fetched
// every round; with pin_static, digital layers whose weights fit stay in URAM.
PuRun run_pu(const Network& net, const PuConfig& pu, const TimingOptions& timing, SchedulePolicy policy,
             const std::vector<int>& layers, const std::vector<bool>& aimc, bool pin_static);

struct PuReport {
    int slot = 0;
    std::string pu;
    std::vector<int> layers;
    double compute_s = 0, stall_s = 0, baseline_stall_s = 0, lower_bound_stall_s = 0, latency_s = 0;
    double fps = 0;                 // frames per second this PU delivers (after NIU throttling)
    int niu = -1;                   // serving NIU, -1 none
    double weight_channel_use = 0;  // fraction of its weight channel (PU reads + NIU writes)
    double activation_channel_use = 0;
    double residual_channel_use = 0;
};

struct NiuReport {
    int slot = 0;
    std::vector<int> pus;           // PU slots it serves (pipelined: stages)
    double weights_per_s_needed = 0;
    // Busy time per second at the PUs' unthrottled demand: weights / weights_per_s plus each
    // layer's layer_seconds, per copy it re-noises (>1 means it throttles its PUs).
    double utilization = 0;
    double channel_use = 0;
};

struct SystemReport {
    MultiPuMode mode = MultiPuMode::FrameParallel;
    double fps = 0;
    double latency_s = 0;           // frame-parallel: slowest PU's round; pipelined: sum of stages
    double peak_ops = 0;            // SA ops/s of the PUs present
    double efficiency = 0;          // fps * 2 * MACs / peak_ops
    double macs_per_frame = 0;
    std::string bottleneck;         // what sets the FPS
    std::int64_t aimc_weights = 0;  // weights re-noised per copy per round
    int aimc_layers = 0;            // layers re-noised per copy per round
    double max_channel_use = 0;     // busiest HBM channel
    int channels_used = 0;
    std::vector<PuReport> pus;
    std::vector<NiuReport> nius;
};

SystemReport evaluate_system(const Network& net, const SystemConfig& cfg, const std::vector<bool>& aimc = {});

}  // namespace aimcemu
