// Cross-check: the analytic SA pipeline count (timing.hpp) against the cycle-level SA model
// (sa_cycle.hpp) on every small shape where the analytic model claims to be exact.
#include <gtest/gtest.h>

#include <vector>

#include "pu_model/sa_cycle.hpp"
#include "perf_model/timing.hpp"

using namespace aimcemu;

TEST(TimingSaCrossCheck, AnalyticEqualsCycleLevelOnExactShapes) {
    int checked = 0;
    for (int c_sa : {4, 8})
        for (int r_sa : {8, 16, 32, 64})
            for (std::int64_t n : {1, 5, 8, 16, 32, 64, 128})
                for (std::int64_t m : {1, 7, 8, 33, 64, 147, 300})
                    for (std::int64_t p : {1, 2, 7}) {
                        PuConfig pu = c_sa == 8 ? pu2x() : pu1x();
                        pu.r_sa = r_sa;
                        if (!sa_pipeline_exact(pu, n, m)) continue;
                        SaConfig sa;
                        sa.rows = r_sa;
                        sa.cols = c_sa;
                        sa.rg = pu.r_g;
                        // A chunk holds its FIFO credit for the array's round trip (up to G + C + R + 5
                        // cycles); at G = R/R_g that is more waves than 16 credits on arrays under 64 rows.
                        if (r_sa < 64) sa.fifo_depth = 32;
                        std::vector<std::int8_t> w(std::size_t(n * m), 1), x(std::size_t(p * m), 1), b(std::size_t(n), 0);
                        std::vector<std::int32_t> acc(std::size_t(p * n));
                        const SaCycleStats s = sa_cycle_gemm(w.data(), x.data(), m, b.data(), 0, n, m, p, sa, acc.data());
                        ASSERT_EQ(s.sa_stall_cycles, 0) << "C=" << c_sa << " R=" << r_sa << " N=" << n << " M=" << m;
                        EXPECT_EQ(sa_pipeline_cycles(pu, n, m, p), s.cycles)
                            << "C=" << c_sa << " R=" << r_sa << " N=" << n << " M=" << m << " P=" << p;
                        ++checked;
                    }
    EXPECT_EQ(checked, 819);
}

// Outside the exact domain (WRB-bound waves) the analytic count is still a lower bound.
TEST(TimingSaCrossCheck, AnalyticIsALowerBoundWhenWrbBound) {
    for (std::int64_t m : {1, 8, 16}) {
        PuConfig pu = pu2x();
        SaConfig sa;
        sa.rows = 64;
        sa.cols = 8;
        sa.rg = 8;
        const std::int64_t n = 64, p = 9;
        std::vector<std::int8_t> w(std::size_t(n * m), 1), x(std::size_t(p * m), 1), b(std::size_t(n), 0);
        std::vector<std::int32_t> acc(std::size_t(p * n));
        const SaCycleStats s = sa_cycle_gemm(w.data(), x.data(), m, b.data(), 0, n, m, p, sa, acc.data());
        EXPECT_FALSE(sa_pipeline_exact(pu, n, m));
        EXPECT_LE(sa_pipeline_cycles(pu, n, m, p) - 8, s.cycles) << m;
    }
}
