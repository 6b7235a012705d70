// Weight-transfer scheduling: when each weight tile moves from HBM to URAM, and what it stalls.
//
// Model (paper Sec. III): tiles execute in order on the SA; tile i runs for e_i once its
// weights are in URAM, its load takes l_i on the weights port, and it holds m_i URAM entries
// from the start of its load until its execution ends.  Loads go one at a time, in tile order,
// on the port they share with the residual fetch (a tile's residual stream takes its share of the
// port while the tile runs).  A schedule gives each load a release window: load j may start when
// tile j - lead_j starts executing.  The baseline uses lead 1 (load the next tile while the
// preceding one runs); the adaptive phase moves stalled loads into earlier windows and keeps a
// move only if the total stall drops.
//
// Inference runs round after round, and every tile is fetched in every round (so AIMC weights
// rewritten by an NIU are always picked up).  Schedules are cyclic: a lead may reach into the
// previous round.  The first round starts with tile 0 pre-loaded; the simulation runs five
// rounds, the period is the mean of rounds 2 and 3 (the regime may alternate between rounds),
// and the per-tile records are round 3's (round 4 keeps round 3's port as busy as in a long run).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aimcemu {

struct SchedTile {
    double exec_s = 0;       // e_i
    double load_s = 0;       // l_i at the full port rate
    std::int64_t entries = 0;  // m_i (URAM entries per row)
    double side_port_s = 0;  // port time taken by the tile's residual stream while it runs
    std::string label;       // e.g. "layer3.0.conv2#1", for reports
};

struct ScheduleProblem {
    std::vector<SchedTile> tiles;
    std::int64_t capacity = 0;  // URAM entries per row available to dynamic tiles
    // The weights port's AXI rate over the weight-load rate (>= 1).  A residual stream that takes a
    // share r of the AXI port leaves the loads min(1, port_headroom * (1 - r)) of their rate: when
    // the URAM write side, not the AXI port, limits the loads, residuals use the spare AXI beats.
    double port_headroom = 1.0;
    // A load that starts while the port idles waits this long for its first data (HBM read
    // latency); a load queued behind another has its latency hidden by the one before.
    double load_latency_s = 0.0;
    std::string source = "<schedule>";
    void validate() const;      // FormatError for empty input, negative times, a tile larger than capacity
};

enum class SchedulePolicy {
    Baseline,        // paper phase 1: load j during tile j-1
    Adaptive,        // paper phase 2: baseline + relocation of stalls into earlier windows
    DoubleBuffer,    // URAM split into two halves: load j into the half tile j-2 vacated
    InOrderPrefetch, // capacity-limited in-order prefetch: every load as early as port and memory allow
};
const char* to_string(SchedulePolicy p);
SchedulePolicy schedule_policy_from_string(const std::string& name, const std::string& source = "<memory>");

struct TileSchedule {
    int lead = 1;               // load released at the start of tile (index - lead)
    double load_start = 0, load_end = 0, exec_start = 0, exec_end = 0;  // seconds from the round's start
    double stall = 0;           // SA idle before this tile: exec_start - previous exec_end
    double time_ratio = 0;      // e_{i} / l_{i+1} (paper Fig. 5b)
    double memory_ratio = 0;    // (m_i + m_{i+1}) / capacity (paper Fig. 5c)
    double occupancy = 0;       // URAM entries allocated when this tile's load starts / capacity
};

// One tile of one simulated round, in absolute time (for independent checks and plots).
struct TileInterval {
    int tile = 0;
    int round = 0;
    double load_start = 0, exec_end = 0;   // URAM entries are held over [load_start, exec_end)
};

struct ScheduleResult {
    SchedulePolicy policy = SchedulePolicy::Baseline;
    std::vector<TileSchedule> tiles;       // the reported round (round 3)
    std::vector<TileInterval> timeline;    // every simulated round
    double period_s = 0;        // steady-state round time (mean of the last two rounds)
    double last_round_s = 0;    // the reported round alone (= exec_s + sum of its tiles' stalls)
    double exec_s = 0;          // sum of e_i
    double stall_s = 0;         // period - exec
    double peak_occupancy = 0;  // max URAM occupancy / capacity over the round (<= 1)
    int relocations_tried = 0;
    int relocations_kept = 0;
    bool feasible = true;       // false: double buffering with a tile larger than half the URAM
};

// Runs a policy.  Adaptive searches at most `max_lead` windows back per stalled tile, in
// `passes` passes over the remaining stalls (1 = the paper's single pass).
ScheduleResult schedule(const ScheduleProblem& problem, SchedulePolicy policy, int max_lead = 128, int passes = 1);

// Simulates given leads (one per tile, >= 1) and returns the steady-state round.
ScheduleResult simulate_schedule(const ScheduleProblem& problem, const std::vector<int>& leads,
                                 SchedulePolicy policy_label = SchedulePolicy::Baseline);

// Exact optimum over all leads (1..T each): exhaustive, for T <= 8.  FormatError otherwise.
ScheduleResult optimal_schedule(const ScheduleProblem& problem);

// A lower bound on the steady-state stall of any schedule that fetches every tile every round:
// max(load work - what the port can carry while tiles execute, sum over tiles that cannot share
// URAM with their predecessor of l_j).
double stall_lower_bound(const ScheduleProblem& problem);

}  // namespace aimcemu
