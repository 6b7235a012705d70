// System model: U50 frame-parallel throughput (Table I), PU mixes, NIU sharing, layer pipelining.
#include <gtest/gtest.h>

#include <numeric>

#include "niu/niu_timing.hpp"
#include "common/errors.hpp"
#include "perf_model/system.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;

namespace {

const Network& r50() {
    static const Network net = zoo::resnet50();
    return net;
}

std::vector<bool> all_aimc(const Network& net) {
    std::vector<bool> v(net.layers.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = net.layers[i].is_gemm();
    return v;
}

}  // namespace

// Frame-parallel accounting on the U50 (the figures themselves: test_timing_paper.cpp).
TEST(TimingSystem, FrameParallelAccounting) {
    const SystemReport s50 = evaluate_system(r50(), u50_system());
    // FPS is the sum of the PUs' rates; efficiency is against 4.608 TOPS of SA.
    double sum = 0;
    for (const PuReport& p : s50.pus) sum += 1.0 / p.latency_s;
    EXPECT_NEAR(s50.fps, sum, 1e-9 * sum);
    EXPECT_NEAR(s50.peak_ops, 4.608e12, 1e3);
    EXPECT_NEAR(s50.efficiency, s50.fps * 2 * s50.macs_per_frame / 4.608e12, 1e-12);
    EXPECT_LE(s50.efficiency, 1.0);
    EXPECT_EQ(s50.channels_used, 30);
    EXPECT_LT(s50.max_channel_use, 1.0);
}

TEST(TimingSystem, NiuThroughputIsTheSmallestBound) {
    NiuConfig cfg;
    const NiuThroughput t = niu_throughput(cfg);
    // The channel carries a read and a write per weight: 316 GB/s / 32 channels at the sustained share.
    EXPECT_DOUBLE_EQ(t.weights_per_s, 316e9 / 32 * (425.0 / 460.8) / 2);
    EXPECT_EQ(t.bound, "hbm-channel");
    cfg.lanes_per_cycle = 8;
    EXPECT_DOUBLE_EQ(niu_throughput(cfg).weights_per_s, 8 * 300e6);
    EXPECT_EQ(niu_throughput(cfg).bound, "datapath");
    const NiuRoundTime r = niu_round_time(cfg, 100);
    EXPECT_EQ(r.bytes_read, 128);  // four whole 32-byte beats
    EXPECT_DOUBLE_EQ(r.seconds, 100 / (8 * 300e6));
    cfg.lanes_per_cycle = 33;
    EXPECT_THROW(niu_throughput(cfg), FormatError);
}

// One shared NIU for nine PUs: it must re-noise every PU's copy of the AIMC weights each round,
// so the system runs at the NIU's rate divided by the weights per frame.
TEST(TimingSystem, SharedNiuThrottlesAllAimcResNet50) {
    SystemConfig cfg = u50_system();
    cfg.niu_count = 1;
    cfg.niu = niu_throughput(NiuConfig{});
    const std::vector<bool> aimc = all_aimc(r50());
    const SystemReport r = evaluate_system(r50(), cfg, aimc);
    ASSERT_EQ(r.pus.size(), 9u);
    ASSERT_EQ(r.nius.size(), 1u);
    EXPECT_EQ(r.aimc_weights, r50().total_weights());  // every conv and FC weight, no bias
    EXPECT_EQ(r.bottleneck, "NIU");
    EXPECT_NEAR(r.fps, cfg.niu.weights_per_s / double(r.aimc_weights), 1e-9 * r.fps);
    EXPECT_NEAR(r.nius[0].channel_use, 1.0, 1e-9);
}

TEST(TimingSystem, PerPuNiusHalveThePus) {
    SystemConfig cfg = u50_system();
    cfg.niu_sharing = NiuSharing::PerPu;
    cfg.niu = niu_throughput(NiuConfig{});
    const SystemReport r = evaluate_system(r50(), cfg, all_aimc(r50()));
    ASSERT_EQ(r.pus.size(), 5u);
    ASSERT_EQ(r.nius.size(), 5u);
    for (const PuReport& p : r.pus) {
        EXPECT_EQ(p.pu, "PU2x");  // NIUs take the slots from the end (the PU1x)
        EXPECT_NE(p.niu, -1);
    }
    // Each NIU serves one PU2x: re-noising 25.5 M weights takes ~3.5 ms < 12.9 ms, so PUs set the pace.
    EXPECT_NEAR(r.fps, 5.0 / r.pus[0].latency_s, 1e-9 * r.fps);
}

TEST(TimingSystem, LayerPipelinedCoversEveryLayerOnce) {
    SystemConfig cfg = u50_system();
    cfg.mode = MultiPuMode::LayerPipelined;
    const SystemReport r = evaluate_system(r50(), cfg);
    std::vector<int> seen;
    double latency = 0, slowest = 0;
    for (const PuReport& p : r.pus) {
        seen.insert(seen.end(), p.layers.begin(), p.layers.end());
        latency += p.latency_s;
        slowest = std::max(slowest, p.latency_s);
    }
    std::vector<int> all(r50().layers.size());
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all);
    EXPECT_NEAR(r.latency_s, latency, 1e-12);
    EXPECT_LE(r.fps, 1.0 / slowest * (1 + 1e-12));
    EXPECT_GT(r.fps, 0.0);
}

TEST(TimingSystem, PuMixesAndErrors) {
    EXPECT_EQ(parse_pu_mix("5xPU2x+5xPU1x").size(), 10u);
    EXPECT_EQ(parse_pu_mix("2xpu1x")[1].c_sa, 4);
    EXPECT_THROW(parse_pu_mix("5PU2x"), FormatError);
    EXPECT_THROW(parse_pu_mix("2xPU9x"), FormatError);
    SystemConfig cfg = u50_system();
    EXPECT_THROW(evaluate_system(r50(), cfg, all_aimc(r50())), FormatError);  // AIMC without an NIU
    cfg.niu_count = 10;
    EXPECT_THROW(evaluate_system(r50(), cfg), FormatError);
    cfg.niu_count = 0;
    EXPECT_THROW(evaluate_system(r50(), cfg, std::vector<bool>(3, false)), FormatError);
    SystemConfig crowded;
    crowded.pus = parse_pu_mix("11xPU2x");
    EXPECT_THROW(evaluate_system(r50(), crowded), FormatError);  // 33 HBM channels > 32
}
