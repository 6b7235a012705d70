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
