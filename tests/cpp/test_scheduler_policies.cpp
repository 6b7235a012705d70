// Weight-transfer scheduler: a hand-computed example, the memory constraint on every tile
// (checked independently of the simulator's bookkeeping), and the policies against an exhaustive
// optimum and a lower bound on random small cases.
#include <gtest/gtest.h>

#include <pcg_random.hpp>

#include "common/errors.hpp"
#include "perf_model/scheduler.hpp"
#include "perf_model/system.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;

namespace {

SchedTile tile(double e, double l, std::int64_t m) {
    SchedTile t;
    t.exec_s = e;
    t.load_s = l;
    t.entries = m;
    return t;
}

// URAM occupancy at time t over the whole simulated timeline: tile j of round k holds m_j over
// [load_start, exec_end).  Computed from the intervals alone, not from the simulator's counters.
double occupancy_at(const ScheduleProblem& p, const ScheduleResult& r, double t) {
    double used = 0;
    for (const TileInterval& iv : r.timeline)
        if (iv.load_start <= t && t < iv.exec_end) used += double(p.tiles[std::size_t(iv.tile)].entries);
    return used;
}

// Memory never exceeds the capacity (occupancy only grows when a load starts, so checking every
// load start of every round suffices), every tile runs after its load, tiles run in order
// without overlap, and the last round's stalls add up to its length.
void expect_valid(const ScheduleProblem& p, const ScheduleResult& r) {
    ASSERT_TRUE(r.feasible);
    const double tol = 1e-12 * r.period_s;
    for (const TileInterval& iv : r.timeline)
        EXPECT_LE(occupancy_at(p, r, iv.load_start + tol), double(p.capacity))
            << "tile " << iv.tile << " round " << iv.round;
    double stall = 0;
    for (std::size_t j = 0; j < p.tiles.size(); ++j) {
        const TileSchedule& t = r.tiles[j];
        EXPECT_LE(t.occupancy, 1.0 + 1e-12);
        EXPECT_LE(t.load_start, t.load_end + tol);
        EXPECT_LE(t.load_end, t.exec_start + tol) << "tile " << j << " runs before its weights arrive";
        EXPECT_NEAR(t.exec_end - t.exec_start, p.tiles[j].exec_s, tol + 1e-18);
        EXPECT_GE(t.stall, -tol);
        stall += t.stall;
    }
    EXPECT_NEAR(r.last_round_s, r.exec_s + stall, 1e-9 * r.period_s);
    EXPECT_NEAR(r.period_s, r.exec_s + r.stall_s, 1e-9 * r.period_s);
}

ScheduleProblem random_problem(pcg32& rng, int n) {
    ScheduleProblem p;
    p.capacity = 8 + rng(24);
    for (int i = 0; i < n; ++i) {
        SchedTile t = tile(0.1 + rng(100) / 10.0, 0.1 + rng(100) / 10.0, 1 + rng(std::uint32_t(p.capacity / 2)));
        if (rng(3) == 0) t.side_port_s = t.exec_s * rng(50) / 100.0;
        p.tiles.push_back(t);
    }
    return p;
}

}  // namespace

// A(e=10, l=2), B(e=1, l=5), C(e=10, l=8), ample URAM.  Baseline: C's load starts when B starts
// (t=10) and ends at 18, B ended at 11: stall 7, period 28.  Adaptive moves C's load into A's
// window (stall 2), then into the previous C's window, where it hides completely.
TEST(Scheduler, HandComputedExample) {
    ScheduleProblem p;
    p.capacity = 100;
    p.tiles = {tile(10, 2, 1), tile(1, 5, 1), tile(10, 8, 1)};
    const ScheduleResult base = schedule(p, SchedulePolicy::Baseline);
    EXPECT_NEAR(base.period_s, 28.0, 1e-12);
    EXPECT_NEAR(base.tiles[2].stall, 7.0, 1e-12);
    EXPECT_NEAR(base.tiles[0].stall, 0.0, 1e-12);
    EXPECT_NEAR(base.tiles[1].time_ratio, 1.0 / 8.0, 1e-12);
    const ScheduleResult adapt = schedule(p, SchedulePolicy::Adaptive);
    EXPECT_NEAR(adapt.stall_s, 0.0, 1e-12);
    EXPECT_EQ(adapt.tiles[2].lead, 3);
    EXPECT_EQ(adapt.relocations_kept, 2);
    expect_valid(p, base);
    expect_valid(p, adapt);
    EXPECT_NEAR(stall_lower_bound(p), 0.0, 1e-12);
}

// The HBM latency, a residual stream sharing the port and the port headroom, worked by hand.
// A(e=3, l=6, residual 1.5 of port time), B(e=10, l=2), ample URAM, load latency 1, headroom 1.05.
// While A runs its residual takes half the port, so loads get min(1, 1.05 x 0.5) = 0.525 of it.
// Baseline, steady state: A's load for the next round (released when B starts) queues behind
// nothing and ends long before B does; B's load is released when A starts, finds the port idle,
// waits 1 for its first data and then gets (3 - 1) x 0.525 = 1.05 of its 2 done while A runs, the
// remaining 0.95 at the full rate after A: B stalls 0.95, the round is 3 + 10 + 0.95 = 13.95.
// No latency: 3 x 0.525 = 1.575 done, stall 0.425; headroom 1: (3 - 1) x 0.5 = 1, stall 1; no
// residual: (3 - 1) x 1 = 2, stall 0.
TEST(Scheduler, HandComputedLatencyAndPortSharing) {
    ScheduleProblem p;
    p.capacity = 100;
    p.tiles = {tile(3, 6, 1), tile(10, 2, 1)};
    p.tiles[0].side_port_s = 1.5;
    p.load_latency_s = 1;
    p.port_headroom = 1.05;
    const ScheduleResult base = schedule(p, SchedulePolicy::Baseline);
    EXPECT_NEAR(base.period_s, 13.95, 1e-12);
    EXPECT_NEAR(base.tiles[1].stall, 0.95, 1e-12);
    EXPECT_NEAR(base.tiles[0].stall, 0.0, 1e-12);
    expect_valid(p, base);
    ScheduleProblem no_latency = p;
    no_latency.load_latency_s = 0;
    EXPECT_NEAR(schedule(no_latency, SchedulePolicy::Baseline).period_s, 13.425, 1e-12);
    ScheduleProblem no_headroom = p;
    no_headroom.port_headroom = 1;
    EXPECT_NEAR(schedule(no_headroom, SchedulePolicy::Baseline).period_s, 14.0, 1e-12);
    ScheduleProblem no_residual = p;
    no_residual.tiles[0].side_port_s = 0;
    EXPECT_NEAR(schedule(no_residual, SchedulePolicy::Baseline).period_s, 13.0, 1e-12);
    // Adaptive: B's load moves into the previous B's window (B alone can conceal it: 10 >= 2),
    // queued behind A's load (1 + 6), both done 9 into B's 10: no stall.
    const ScheduleResult adapt = schedule(p, SchedulePolicy::Adaptive);
    EXPECT_NEAR(adapt.period_s, 13.0, 1e-12);
    EXPECT_EQ(adapt.tiles[1].lead, 2);
    // A's load finds the port idle and waits 1 for its first data; B's, queued right behind it,
    // has its latency hidden.
    EXPECT_NEAR(adapt.tiles[0].load_end - adapt.tiles[0].load_start, 1.0 + 6.0, 1e-12);
    EXPECT_NEAR(adapt.tiles[1].load_start, adapt.tiles[0].load_end, 1e-12);
    EXPECT_NEAR(adapt.tiles[1].load_end - adapt.tiles[1].load_start, 2.0, 1e-12);
    expect_valid(p, adapt);
}

// Where the adaptive phase finds no window (no single prior tile can conceal the load, e_k < l_j)
// it keeps the baseline, while in-order prefetch spreads the load over several tiles.
// A(e=2, l=1), B(e=2, l=1), C(e=2, l=5), no latency.  Baseline and adaptive: C's load starts when
// B starts and A's load (1) is done, ends 5 later, 3 after B ends: round 2 + 2 + 2 + 3 = 9.  In-order
// prefetch: 7 of loads per 6 of execution, the port never idles: round 7 (the lower bound).
TEST(Scheduler, InOrderPrefetchDiffersFromAdaptiveWhereNoWindowConceals) {
    ScheduleProblem p;
    p.capacity = 100;
    p.tiles = {tile(2, 1, 1), tile(2, 1, 1), tile(2, 5, 1)};
    const ScheduleResult base = schedule(p, SchedulePolicy::Baseline);
    const ScheduleResult adapt = schedule(p, SchedulePolicy::Adaptive);
    const ScheduleResult pre = schedule(p, SchedulePolicy::InOrderPrefetch);
    EXPECT_NEAR(base.period_s, 9.0, 1e-12);
    EXPECT_NEAR(adapt.period_s, 9.0, 1e-12);
    EXPECT_EQ(adapt.relocations_tried, 0);
    EXPECT_NEAR(pre.period_s, 7.0, 1e-12);
    EXPECT_NEAR(stall_lower_bound(p), 1.0, 1e-12);
    for (const ScheduleResult* r : {&base, &adapt, &pre}) expect_valid(p, *r);
}

// When a tile cannot share the URAM with its predecessor, its whole load is a stall.
TEST(Scheduler, MemoryBoundTileStallsItsWholeLoad) {
    ScheduleProblem p;
    p.capacity = 10;
    p.tiles = {tile(5, 1, 4), tile(5, 3, 8)};
    EXPECT_NEAR(stall_lower_bound(p), 3.0 + 1.0, 1e-12);  // both pairs exceed the capacity
    for (auto pol : {SchedulePolicy::Baseline, SchedulePolicy::Adaptive, SchedulePolicy::InOrderPrefetch}) {
        const ScheduleResult r = schedule(p, pol);
        EXPECT_NEAR(r.stall_s, 4.0, 1e-12) << to_string(pol);
        expect_valid(p, r);
    }
}

TEST(Scheduler, PoliciesAgainstExhaustiveOptimumOnRandomCases) {
    pcg32 rng(2026, 5);
    for (int c = 0; c < 40; ++c) {
        const ScheduleProblem p = random_problem(rng, 3 + int(rng(3)));
        const ScheduleResult opt = optimal_schedule(p);
        const double lb = stall_lower_bound(p);
        const double tol = 1e-9 * opt.period_s;
        EXPECT_GE(opt.stall_s, lb - tol) << "case " << c;
        const ScheduleResult base = schedule(p, SchedulePolicy::Baseline);
        const ScheduleResult adapt = schedule(p, SchedulePolicy::Adaptive);
        const ScheduleResult pre = schedule(p, SchedulePolicy::InOrderPrefetch);
        for (const ScheduleResult* r : {&base, &adapt, &pre}) {
            EXPECT_GE(r->stall_s, opt.stall_s - tol) << "case " << c << " " << to_string(r->policy);
            expect_valid(p, *r);
        }
        expect_valid(p, opt);
        EXPECT_LE(adapt.stall_s, base.stall_s + tol) << "case " << c;
        const ScheduleResult db = schedule(p, SchedulePolicy::DoubleBuffer);
        if (db.feasible) expect_valid(p, db);
    }
}

// The paper's Fig. 5(c) claim, on our model: ResNet-18 on PU2x, every tile of the adaptive
// schedule respects the URAM capacity.
TEST(Scheduler, ResNet18OnPu2xKeepsMemoryConstraintsForEveryTile) {
    const PuRun run = run_pu(zoo::resnet18(), pu2x(), {}, SchedulePolicy::Adaptive, {}, {}, false);
    expect_valid(run.problem, run.schedule);
    expect_valid(run.problem, run.baseline);
    EXPECT_LE(run.schedule.peak_occupancy, 1.0);
    EXPECT_LT(run.schedule.stall_s, run.baseline.stall_s);
    EXPECT_GE(run.schedule.stall_s, run.lower_bound_stall_s);
    for (std::size_t j = 0; j + 1 < run.problem.tiles.size(); ++j) {
        const double expected = double(run.problem.tiles[j].entries + run.problem.tiles[j + 1].entries) / double(run.problem.capacity);
        EXPECT_DOUBLE_EQ(run.schedule.tiles[j].memory_ratio, expected);
    }
}

TEST(Scheduler, RejectsBadInput) {
    ScheduleProblem empty;
    empty.capacity = 4;
    EXPECT_THROW(schedule(empty, SchedulePolicy::Baseline), FormatError);
    ScheduleProblem big;
    big.capacity = 4;
    big.tiles = {tile(1, 1, 5)};
    EXPECT_THROW(schedule(big, SchedulePolicy::Adaptive), FormatError);
    ScheduleProblem ok;
    ok.capacity = 4;
    ok.tiles = {tile(1, 1, 1), tile(1, 1, 1)};
    EXPECT_THROW(simulate_schedule(ok, {1, 3}), FormatError);
    EXPECT_THROW(simulate_schedule(ok, {1}), FormatError);
    EXPECT_THROW(schedule_policy_from_string("fastest"), FormatError);
    ScheduleProblem seven = ok;
    seven.tiles.resize(7, tile(1, 1, 1));
    EXPECT_THROW(optimal_schedule(seven), FormatError);
}
