// Weight-transfer scheduler: simulation of a lead assignment, the paper's two phases, baselines,
// exhaustive optimum and a lower bound (see scheduler.hpp).
#include "perf_model/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/errors.hpp"

namespace aimcemu {

const char* to_string(SchedulePolicy p) {
    switch (p) {
        case SchedulePolicy::Baseline: return "baseline";
        case SchedulePolicy::Adaptive: return "adaptive";
        case SchedulePolicy::DoubleBuffer: return "double-buffer";
        case SchedulePolicy::InOrderPrefetch: return "in-order-prefetch";
    }
    return "?";
}

SchedulePolicy schedule_policy_from_string(const std::string& name, const std::string& source) {
    for (auto p : {SchedulePolicy::Baseline, SchedulePolicy::Adaptive, SchedulePolicy::DoubleBuffer,
                   SchedulePolicy::InOrderPrefetch})
        if (name == to_string(p)) return p;
    throw FormatError(source, "scheduler",
                      "unknown policy '" + name + "' (known: baseline, adaptive, double-buffer, in-order-prefetch)");
}

void ScheduleProblem::validate() const {
    if (tiles.empty()) throw FormatError(source, "tiles", "no tiles to schedule");
    if (capacity <= 0) throw FormatError(source, "capacity", "URAM capacity must be positive");
    if (!(port_headroom >= 1.0)) throw FormatError(source, "port_headroom", "must be >= 1");
    if (!(load_latency_s >= 0.0)) throw FormatError(source, "load_latency_s", "must be >= 0");
    for (std::size_t i = 0; i < tiles.size(); ++i) {
        const SchedTile& t = tiles[i];
        const std::string field = "tiles/" + std::to_string(i);
        if (!(t.exec_s >= 0) || !(t.load_s >= 0) || !(t.side_port_s >= 0) || t.entries < 0)
            throw FormatError(source, field, "times and sizes must be >= 0");
        if (t.entries > capacity)
            throw FormatError(source, field, "tile needs " + std::to_string(t.entries) + " entries, capacity is " +
                                                 std::to_string(capacity));
    }
}

namespace {

// Round 0 starts cold; rounds 2 and 3 give the steady state; round 4 exists so that round 3 carries
// the next round's loads like every round in a long run (the final round of a run would not).
constexpr int kRounds = 5;
constexpr int kMeasured = 3;        // the round whose tiles are reported
constexpr int kAveraged = 2;        // rounds averaged for the period (the regime may alternate)
constexpr double kEps = 1e-15;

// Timeline of kRounds consecutive rounds of the tile sequence.
//
// The port serves loads in the order of their release windows (window, then tile index), so a
// load moved into an earlier window overtakes the loads released later: that is what lets the
// adaptive phase use port time the baseline leaves idle.  Tiles execute in index order.  A load
// waits until the URAM has room; if the room could only come from a tile that cannot execute
// before this load completes, the schedule deadlocks and is infeasible.
class Timeline {
public:
    Timeline(const ScheduleProblem& p, const std::vector<int>& leads, bool double_buffer)
        : p_(p), leads_(leads), double_buffer_(double_buffer), t_(p.tiles.size()) {
        const std::size_t n = t_ * kRounds;
        s_.assign(n, 0);
        e_.assign(n, 0);
        ls_.assign(n, 0);
        le_.assign(n, 0);
        release_.assign(n, 0);
        occ_.assign(n, 0);
        loaded_.assign(n, false);
    }

    // Returns false if the schedule deadlocks (or double buffering meets a tile over half the URAM).
    bool run() {
        const std::size_t n = s_.size();
        // Port order: by release window, then by tile (a counting sort: windows lie in [-n, n)).
        auto window = [&](std::size_t g) { return g == 0 ? -long(n) : long(g) - leads_[g % t_]; };
        std::vector<std::size_t> count(2 * n + 1, 0), order(n);
        for (std::size_t g = 0; g < n; ++g) ++count[std::size_t(window(g) + long(n)) + 1];
        for (std::size_t k = 1; k < count.size(); ++k) count[k] += count[k - 1];
        for (std::size_t g = 0; g < n; ++g) order[count[std::size_t(window(g) + long(n))]++] = g;
        double port_free = 0;
        bool feasible = true;
        for (std::size_t g : order) {
            const SchedTile& t = tile(g);
            const long w = window(g);
            if (w >= 0 && std::size_t(w) >= exec_next_) return false;  // release window not reached: cannot happen
            release_[g] = w < 0 ? 0.0 : s_[std::size_t(w)];
            // A resident tile (nothing to load, no entries to claim) does not queue on the port.
            const bool resident = t.load_s <= 0 && t.entries == 0;
            double start = std::max(release_[g], g == 0 || resident ? 0.0 : port_free);
            if (double_buffer_) {
                if (2 * t.entries > p_.capacity) feasible = false;
                if (g >= 2) {
                    if (g - 2 >= exec_next_) return false;
                    start = std::max(start, e_[g - 2]);
                }
            } else {
                const double room = make_room(t.entries, start);
                if (room < 0) return false;
                start = std::max(start, room);
            }
            release_alive(start);
            allocated_ += t.entries;
            alive_.insert(std::upper_bound(alive_.begin(), alive_.end(), g), g);
            occ_[g] = double(allocated_);
            ls_[g] = start;
            if (g == 0 || resident) {
                le_[g] = g == 0 ? 0.0 : start;
            } else {
                const bool port_was_idle = start > port_free;
                const double first_data = port_was_idle ? start + p_.load_latency_s : start;
                le_[g] = port_finish(first_data, t.load_s);
                port_free = le_[g];
            }
            loaded_[g] = true;
            advance_execution();
        }
        return feasible && exec_next_ == n;
    }

    ScheduleResult steady_state(SchedulePolicy policy) const {
        ScheduleResult r;
        r.policy = policy;
        const std::size_t base = t_ * kMeasured;
        const double origin = e_[base - 1];
        r.period_s = period();
        r.last_round_s = e_[base + t_ - 1] - origin;
        r.tiles.resize(t_);
        r.timeline.reserve(s_.size());
        for (std::size_t g = 0; g < s_.size(); ++g)
            r.timeline.push_back(TileInterval{int(g % t_), int(g / t_), ls_[g], e_[g]});
        for (std::size_t j = 0; j < t_; ++j) {
            const std::size_t g = base + j;
            TileSchedule& ts = r.tiles[j];
            ts.lead = leads_[j];
            ts.load_start = ls_[g] - origin;
            ts.load_end = le_[g] - origin;
            ts.exec_start = s_[g] - origin;
            ts.exec_end = e_[g] - origin;
            ts.stall = s_[g] - e_[g - 1];
            const SchedTile& next = p_.tiles[(j + 1) % t_];
            ts.time_ratio = next.load_s > 0 ? p_.tiles[j].exec_s / next.load_s : INFINITY;
            ts.memory_ratio = double(p_.tiles[j].entries + next.entries) / double(p_.capacity);
            ts.occupancy = occ_[g] / double(p_.capacity);
            r.exec_s += p_.tiles[j].exec_s;
            r.peak_occupancy = std::max(r.peak_occupancy, ts.occupancy);
        }
        r.stall_s = std::max(0.0, r.period_s - r.exec_s);
        return r;
    }

    // Steady-state round time (cheaper than steady_state() when only the total matters).
    double period() const {
        return (e_[t_ * (kMeasured + 1) - 1] - e_[t_ * (kMeasured + 1 - kAveraged) - 1]) / kAveraged;
    }

private:
    const SchedTile& tile(std::size_t g) const { return p_.tiles[g % t_]; }

    // Frees the tiles that finished executing by time t.  alive_ is sorted by tile index, and
    // tiles finish in index order, so the finished ones are a prefix.
    void release_alive(double t) {
        std::size_t k = 0;
        while (k < alive_.size() && alive_[k] < exec_next_ && e_[alive_[k]] <= t) allocated_ -= tile(alive_[k++]).entries;
        alive_.erase(alive_.begin(), alive_.begin() + long(k));
    }

    // Earliest time >= t at which `entries` more fit: tiles free in execution (= index) order.
    // -1 if the room depends on a tile that cannot run yet (deadlock).
    double make_room(std::int64_t entries, double t) const {
        std::int64_t used = allocated_;
        for (std::size_t g : alive_) {
            if (used + entries <= p_.capacity) return t;
            if (g >= exec_next_) return -1.0;
            used -= tile(g).entries;
            t = std::max(t, e_[g]);
        }
        return used + entries <= p_.capacity ? t : -1.0;
    }

    // Computes execution for every tile whose predecessors ran and whose weights are loaded.
    void advance_execution() {
        while (exec_next_ < s_.size() && loaded_[exec_next_]) {
            const std::size_t g = exec_next_;
            s_[g] = std::max(g == 0 ? 0.0 : e_[g - 1], le_[g]);
            e_[g] = s_[g] + tile(g).exec_s;
            ++exec_next_;
        }
    }

    // Time at which a load of `work` seconds (at the full port rate) that starts at t0 ends, with
    // the port shared by the residual streams of the tiles executing meanwhile.  Only tiles whose
    // execution is known can run before the load ends (the others wait for a later load).
    double port_finish(double t0, double work) const {
        double t = t0, remaining = work;
        std::size_t i = std::size_t(std::upper_bound(e_.begin(), e_.begin() + long(exec_next_), t0) - e_.begin());
        for (; i < exec_next_; ++i) {
            if (t < s_[i]) {  // SA idle: the port is all ours
                const double gap = s_[i] - t;
                if (remaining <= gap) return t + remaining;
                remaining -= gap;
                t = s_[i];
            }
            const SchedTile& run = tile(i);
            const double share = run.exec_s > 0 ? std::min(1.0, run.side_port_s / run.exec_s) : 0.0;
            const double rate = std::min(1.0, p_.port_headroom * (1.0 - share));
            const double available = (e_[i] - t) * rate;
            if (rate > 0 && remaining <= available) return t + remaining / rate;
            remaining -= std::max(0.0, available);
            t = e_[i];
        }
        return t + remaining;
    }

    const ScheduleProblem& p_;
    const std::vector<int>& leads_;
    bool double_buffer_;
    std::size_t t_;
    std::vector<double> s_, e_, ls_, le_, release_, occ_;
    std::vector<bool> loaded_;
    std::vector<std::size_t> alive_;
    std::int64_t allocated_ = 0;
    std::size_t exec_next_ = 0;
};

// A schedule that deadlocks: infinite period, so that no search keeps it.
ScheduleResult infeasible(const ScheduleProblem& p, SchedulePolicy label) {
    ScheduleResult r;
    r.policy = label;
    r.feasible = false;
    r.period_s = r.stall_s = INFINITY;
    for (const SchedTile& t : p.tiles) r.exec_s += t.exec_s;
    return r;
}

ScheduleResult run_leads(const ScheduleProblem& p, const std::vector<int>& leads, SchedulePolicy label,
                         bool double_buffer = false) {
    Timeline tl(p, leads, double_buffer);
    const bool feasible = tl.run();
    if (!feasible && !double_buffer) return infeasible(p, label);
    ScheduleResult r = tl.steady_state(label);
    r.feasible = feasible;
    return r;
}

// Paper phase 2.  For each stalled tile, largest stall first, try earlier windows one by one --
// a window is a candidate if its tile's execution alone can conceal the load (e_k >= l_j) --;
// keep a move if the round's stall drops, otherwise undo it and look further back.  Stop searching
// for a tile once its stall is gone, or once a window deadlocks the URAM (earlier ones would
// hold even more).  `passes` > 1 repeats the phase on the stalls that remain (the paper describes
// one pass; docs/timing.md compares).
ScheduleResult adaptive(const ScheduleProblem& p, int max_lead, int passes) {
    const std::size_t t = p.tiles.size();
    std::vector<int> leads(t, 1);
    ScheduleResult best = run_leads(p, leads, SchedulePolicy::Adaptive);
    int tried = 0, kept = 0;
    const int lead_limit = std::min<int>(max_lead, int(t));
    for (int pass = 0; pass < passes; ++pass) {
        std::vector<std::size_t> stalled;
        for (std::size_t j = 0; j < t; ++j)
            if (best.tiles[j].stall > kEps) stalled.push_back(j);
        std::stable_sort(stalled.begin(), stalled.end(),
                         [&](std::size_t a, std::size_t b) { return best.tiles[a].stall > best.tiles[b].stall; });
        const int kept_before = kept;
        for (std::size_t j : stalled) {
            for (int lead = leads[j] + 1; lead <= lead_limit; ++lead) {
                // A candidate window is a prior tile whose execution alone can conceal the load.
                const std::size_t k = (j + t - std::size_t(lead)) % t;
                if (p.tiles[k].exec_s < p.tiles[j].load_s) continue;
                const int old = leads[j];
                leads[j] = lead;
                Timeline tl(p, leads, false);
                const bool ok = tl.run();
                ++tried;
                if (ok && tl.period() < best.period_s - 1e-12 * std::max(1.0, best.period_s)) {
                    best = tl.steady_state(SchedulePolicy::Adaptive);
                    ++kept;
                    if (best.tiles[j].stall <= kEps) break;
                } else {
                    leads[j] = old;
                    if (!ok) break;
                }
            }
        }
        if (kept == kept_before) break;
    }
    best.relocations_tried = tried;
    best.relocations_kept = kept;
    return best;
}

}  // namespace

ScheduleResult simulate_schedule(const ScheduleProblem& problem, const std::vector<int>& leads,
                                 SchedulePolicy policy_label) {
    problem.validate();
    if (leads.size() != problem.tiles.size())
        throw FormatError(problem.source, "leads", "one lead per tile expected");
    for (int lead : leads)
        if (lead < 1 || lead > int(problem.tiles.size()))
            throw FormatError(problem.source, "leads", "each lead must be in 1..number of tiles");
    return run_leads(problem, leads, policy_label);
}

ScheduleResult schedule(const ScheduleProblem& problem, SchedulePolicy policy, int max_lead, int passes) {
    problem.validate();
    const std::size_t t = problem.tiles.size();
    switch (policy) {
        case SchedulePolicy::Baseline: return run_leads(problem, std::vector<int>(t, 1), policy);
        case SchedulePolicy::DoubleBuffer: return run_leads(problem, std::vector<int>(t, 1), policy, true);
        case SchedulePolicy::InOrderPrefetch: return run_leads(problem, std::vector<int>(t, int(t)), policy);
        case SchedulePolicy::Adaptive: return adaptive(problem, std::max(1, max_lead), std::max(1, passes));
    }
    throw FormatError(problem.source, "policy", "unknown policy");
}

ScheduleResult optimal_schedule(const ScheduleProblem& problem) {
    problem.validate();
    const std::size_t t = problem.tiles.size();
    if (t > 6) throw FormatError(problem.source, "tiles", "exhaustive optimum is limited to 6 tiles");
    std::vector<int> leads(t, 1);
    ScheduleResult best = run_leads(problem, leads, SchedulePolicy::InOrderPrefetch);
    while (true) {  // odometer over leads in [1, t]^t
        std::size_t k = 0;
        while (k < t && leads[k] == int(t)) leads[k++] = 1;
        if (k == t) break;
        ++leads[k];
        ScheduleResult r = run_leads(problem, leads, SchedulePolicy::InOrderPrefetch);
        if (r.period_s < best.period_s) best = r;
    }
    return best;
}

double stall_lower_bound(const ScheduleProblem& problem) {
    problem.validate();
    const auto& tiles = problem.tiles;
    double carried = 0, loads = 0, forced = 0;  // load work the port can do while tiles execute; all load work
    for (std::size_t j = 0; j < tiles.size(); ++j) {
        const double share = tiles[j].exec_s > 0 ? std::min(1.0, tiles[j].side_port_s / tiles[j].exec_s) : 0.0;
        carried += tiles[j].exec_s * std::min(1.0, problem.port_headroom * (1.0 - share));
        loads += tiles[j].load_s;
        const SchedTile& prev = tiles[(j + tiles.size() - 1) % tiles.size()];
        // Tile j cannot be resident with its predecessor: its whole load happens while the SA idles.
        if (tiles.size() > 1 && prev.entries + tiles[j].entries > problem.capacity) forced += tiles[j].load_s;
    }
    return std::max({0.0, loads - carried, forced});
}

}  // namespace aimcemu
