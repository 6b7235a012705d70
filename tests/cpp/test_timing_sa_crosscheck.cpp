// Cross-check: the analytic SA pipeline count (timing.hpp) against the cycle-level SA model
// (sa_cycle.hpp) on every small shape where the analytic model claims to be exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "pu_model/sa_cycle.hpp"
#include "perf_model/timing.hpp"
#include "formats/network.hpp"

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

namespace {

// The cycle-level model's count for an all-ones GEMM of this shape (timing depends on the shape only).
std::int64_t cycle_level(const PuConfig& pu, std::int64_t n, std::int64_t m, std::int64_t p, bool tile_major = false) {
    SaConfig sa;
    sa.tile_major = tile_major;
    sa.rows = pu.r_sa;
    sa.cols = pu.c_sa;
    sa.rg = pu.r_g;
    std::vector<std::int8_t> w(std::size_t(n * m), 1), x(std::size_t(p * m), 1), b(std::size_t(n), 0);
    std::vector<std::int32_t> acc(std::size_t(p * n));
    return sa_cycle_gemm(w.data(), x.data(), m, b.data(), 0, n, m, p, sa, acc.data()).cycles;
}

// A pointwise conv, M -> N channels on an h x h image: the GEMM (N, M, P = h*h) streamed linearly.
Network pointwise(int h, int m, int n) {
    Network net;
    net.name = "pointwise";
    net.input_shape = {h, h, m};
    Layer l;
    l.name = "conv";
    l.kind = LayerKind::Conv;
    l.window = Window::square(1, 1, 0);
    l.out_channels = n;
    l.weights.assign(std::size_t(n) * std::size_t(m), 1);
    l.bias.assign(std::size_t(n), 0);
    net.layers.push_back(l);
    net.resolve();
    return net;
}

// A PU whose data movement costs (next to) nothing and whose fill is the SA's drain alone (plus the
// first column's load, a tiny fraction that the fill rounds up to one cycle): its layer cycles are
// the SA and WRB's alone.
PuConfig free_data_movement(PuConfig pu) {
    pu.axi_hz = pu.fast_hz * 1e6;  // every ADM transfer a millionth of its cycles
    pu.adm_command_overhead = 0;
    pu.hbm_channel_peak_bytes_per_s = 1e30;
    pu.hbm_latency_s = 0;
    pu.postproc_pipeline = 0;
    return pu;
}

}  // namespace

// The layer model's SA and WRB time against the cycle-level model (the independent value), over
// shapes with N under, at and over R_SA, N not a multiple of R_g or R_SA, and G both sides of the
// WRB condition: equal, to the one cycle the first column's (here negligible) load rounds the fill
// up by.  The reference runs tile-major (SaConfig::tile_major), the order the layer model times.
// Before the fix the layer model charged R_SA/R_g cycles per wave whatever the rows and whatever
// the chain's arbitration did: N = 16, M = 32, P = 64 (the digits stem) 696 cycles against 291,
// N = 64, M = 32, P = 64 585 against 723.
TEST(TimingSaCrossCheck, LayerModelAgreesWithCycleLevel) {
    int checked = 0;
    for (const PuConfig& base : {pu2x(), pu1x()})
        for (int n : {5, 16, 20, 50, 64, 100, 128})
            for (int m : {8, 20, 32, 56, 64, 100})
                for (int h : {3, 8, 12}) {
                    const PuConfig pu = free_data_movement(base);
                    TimingOptions linear;  // the layer reads the network input: no host padding of M
                    linear.first_layer = FirstLayerIm2col::Fpga;
                    const LayerTiming t = time_layer(pointwise(h, m, n), 0, pu, linear);
                    const double expected = double(cycle_level(pu, n, m, std::int64_t(h) * h, true)) + 1;
                    EXPECT_NEAR(t.cycles, expected, 1e-6) << pu.name << " N=" << n << " M=" << m << " P=" << h * h;
                    ++checked;
                }
    EXPECT_EQ(checked, 252);
}

// A single tile longer than the measured 256 columns is extrapolated by whole 64-wave windows from
// the cycle-level count at the same phase of the window: equal to the full run.
TEST(TimingSaCrossCheck, LongWrbBoundTilesExtrapolateExactly) {
    for (const PuConfig& base : {pu2x(), pu1x()})
        for (int n : {16, 50, 64})
            for (int m : {8, 20, 40}) {
                const PuConfig pu = free_data_movement(base);
                TimingOptions linear;
                linear.first_layer = FirstLayerIm2col::Fpga;
                for (int h : {17, 21, 24}) {
                    const LayerTiming t = time_layer(pointwise(h, m, n), 0, pu, linear);
                    const double expected = double(cycle_level(pu, n, m, std::int64_t(h) * h, true)) + 1;
                    EXPECT_NEAR(t.cycles, expected, 1e-6) << pu.name << " N=" << n << " M=" << m << " P=" << h * h;
                }
            }
}

// Tile-major order computes the same GEMM, bit for bit.
TEST(TimingSaCrossCheck, TileMajorOrderGivesTheSameProduct) {
    const std::int64_t n = 100, m = 20, p = 9;
    std::vector<std::int8_t> w(static_cast<std::size_t>(n * m)), x(static_cast<std::size_t>(p * m)), b(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::int8_t(int(i * 37 % 255) - 127);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int8_t(int(i * 91 % 251) - 125);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::int8_t(int(i * 13 % 200) - 100);
    std::vector<std::int32_t> pixel_major(std::size_t(n * p)), tile_major(std::size_t(n * p));
    SaConfig sa;
    const SaCycleStats a = sa_cycle_gemm(w.data(), x.data(), m, b.data(), 3, n, m, p, sa, pixel_major.data());
    sa.tile_major = true;
    const SaCycleStats c = sa_cycle_gemm(w.data(), x.data(), m, b.data(), 3, n, m, p, sa, tile_major.data());
    EXPECT_EQ(pixel_major, tile_major);
    EXPECT_TRUE(a.section_start_cycles.empty());
    ASSERT_EQ(c.section_start_cycles.size(), 2u);
    EXPECT_EQ(c.section_start_cycles[0], 0);
    EXPECT_GE(c.section_start_cycles[1], p * ((m + 7) / 8));
}

// sa_pipeline_cycles is a lower bound on the cycle-level count everywhere (and exact on the shapes
// of AnalyticEqualsCycleLevelOnExactShapes): N under R_SA and not a multiple of R_g, N over R_SA
// and not a multiple of it, G below R_SA/R_g.  The old formula charged every wave R_SA/R_g
// read cycles: 543 for N = 16, M = 32, P = 64 against the cycle-level model's 291, and 1016 for
// N = 100, M = 56, P = 64 against 974 (a short section's wave lets the read side catch up).
TEST(TimingSaCrossCheck, AnalyticIsALowerBoundEverywhere) {
    for (const PuConfig& pu : {pu2x(), pu1x()})
        for (std::int64_t n : {1, 5, 16, 20, 50, 64, 100, 130})
            for (std::int64_t m : {1, 8, 20, 32, 56, 64, 100})
                for (std::int64_t p : {1, 2, 9, 64}) {
                    const std::int64_t exact = cycle_level(pu, n, m, p);
                    EXPECT_LE(sa_pipeline_cycles(pu, n, m, p), exact)
                        << pu.name << " N=" << n << " M=" << m << " P=" << p;
                    if (sa_pipeline_exact(pu, n, m)) EXPECT_EQ(sa_pipeline_cycles(pu, n, m, p), exact);
                }
    EXPECT_EQ(sa_pipeline_cycles(pu2x(), 16, 32, 64), cycle_level(pu2x(), 16, 32, 64));
}
