// System model: U50 frame-parallel throughput (Table I), PU mixes, NIU sharing, layer pipelining.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "niu/niu_timing.hpp"
#include "common/errors.hpp"
#include "perf_model/system.hpp"
#include "perf_model/uram.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;

namespace {

const Network& r50() {
    static const Network net = zoo::resnet50();
    return net;
}

const Network& zoo_resnet18() {
    static const Network net = zoo::resnet18();
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
// so the system delivers one frame per NIU round: the NIU model's time for ResNet-50's 25.5 M
// weights in its 53 convolutions and one FC (each layer also loads its program block and fills
// the pipeline: the per-layer term is 2.9 % of the round at the default, channel-bound rate, 1.5 %
// at 8 lanes, so a system model charging the weights alone fails the 1e-9 bound).
TEST(TimingSystem, SharedNiuThrottlesAllAimcResNet50) {
    for (int lanes : {0, 8, 32}) {  // 0: the default NIU (channel-bound)
        SCOPED_TRACE(lanes);
        SystemConfig cfg = u50_system();
        cfg.niu_count = 1;
        const NiuConfig niu = lanes == 0 ? NiuConfig{} : niu_config_for_lanes(lanes);
        cfg.niu = niu_throughput(niu);
        const std::vector<bool> aimc = all_aimc(r50());
        const SystemReport r = evaluate_system(r50(), cfg, aimc);
        ASSERT_EQ(r.pus.size(), 9u);
        ASSERT_EQ(r.nius.size(), 1u);
        EXPECT_EQ(r.aimc_weights, r50().total_weights());  // every conv and FC weight, no bias
        EXPECT_EQ(r.aimc_layers, 54);
        EXPECT_EQ(r.bottleneck, "NIU");
        const NiuRoundTime round = niu_round_time(niu, r.aimc_weights, 54);
        EXPECT_NEAR(r.fps, 1.0 / round.seconds, 1e-9 * r.fps);
        // The channel carries a read and a write per weight while the NIU streams weights.
        const double channel_bytes_per_s = 316e9 / 32 * (425.0 / 460.8);
        EXPECT_NEAR(r.nius[0].channel_use, 2.0 * double(r.aimc_weights) * r.fps / channel_bytes_per_s, 1e-9);
        EXPECT_LT(r.nius[0].channel_use, 1.0);
    }
}

// Layer-pipelined: FPS is one frame per period, the period the slowest of the stages' rounds, the
// HBM channels and the NIUs.  A digital ResNet-50 cut over the ten PUs is set by its slowest
// stage (the cut is limited by layer granularity), so FPS x that stage's round is exactly 1; a
// model without pipelining (one frame per sum of the stages, 59 FPS against 553) fails it.
TEST(TimingSystem, LayerPipelinedRunsAtTheSlowestStage) {
    SystemConfig cfg = u50_system();
    cfg.mode = MultiPuMode::LayerPipelined;
    const SystemReport r = evaluate_system(r50(), cfg);
    ASSERT_EQ(r.bottleneck.rfind("stage ", 0), 0u) << r.bottleneck;
    double slowest = 0;
    for (const PuReport& p : r.pus) slowest = std::max(slowest, p.latency_s);
    EXPECT_NEAR(r.fps * slowest, 1.0, 1e-12);
    EXPECT_LT(r.max_channel_use, 1.0);  // no channel is slower than the stage
    for (const PuReport& p : r.pus) EXPECT_EQ(p.fps, r.fps);
}

namespace {

// What the stage cutter minimises for layers [first, last) on `pu` (system.cpp, stage_estimate):
// the stage's compute, or the time to stream its weights through the weight port when they must
// be streamed (AIMC layers always; digital ones when they overflow the URAM).
double stage_estimate(const NetworkTiming& t, const PuConfig& pu, int first, int last) {
    double compute = 0, digital_bytes = 0;
    std::int64_t entries = 0;
    for (int i = first; i < last; ++i) {
        const LayerTiming& lt = t.layers[std::size_t(i)];
        compute += lt.time_s;
        if (!lt.timed || lt.kind == LayerKind::AvgPool) continue;
        digital_bytes += double(lt.weight_bytes);
        entries += lt.tiles * uram_tile_entries(pu, lt.m_eff);
    }
    const double port = entries > uram_capacity_entries(pu) ? digital_bytes : 0.0;
    return std::max(compute, port / pu.weight_port_bytes_per_s());
}

}  // namespace

// The cut itself: the smallest largest-stage estimate over every split of the layers into at
// most ten contiguous, non-empty stages (stage k on PU k), by dynamic programming here, against the model's
// bisection with a greedy fill.  A greedy fill without the bisection, or one that cuts a stage a
// layer too early, leaves a larger slowest stage.
TEST(TimingSystem, LayerPipelinedCutIsTheBestContiguousSplit) {
    for (const Network* net : {&r50(), &zoo_resnet18()}) {
        SCOPED_TRACE(net->name);
        SystemConfig cfg = u50_system();
        cfg.mode = MultiPuMode::LayerPipelined;
        const SystemReport r = evaluate_system(*net, cfg);
        std::vector<NetworkTiming> timing;
        for (const PuConfig& pu : cfg.pus) timing.push_back(time_network(*net, pu, cfg.timing));
        const int n = int(net->layers.size()), stages = int(cfg.pus.size());
        // best[k][i]: the smallest largest estimate of layers [0, i) in stages 0..k-1, none empty
        // (the model fills the PUs in their order and may leave the last ones unused).
        const double inf = std::numeric_limits<double>::infinity();
        std::vector<std::vector<double>> best(std::size_t(stages + 1), std::vector<double>(std::size_t(n + 1), inf));
        best[0][0] = 0;
        for (int k = 1; k <= stages; ++k)
            for (int i = 0; i <= n; ++i) {
                for (int j = 0; j < i; ++j)
                    best[std::size_t(k)][std::size_t(i)] = std::min(
                        best[std::size_t(k)][std::size_t(i)],
                        std::max(best[std::size_t(k - 1)][std::size_t(j)],
                                 stage_estimate(timing[std::size_t(k - 1)], cfg.pus[std::size_t(k - 1)], j, i)));
            }
        double chosen = 0;
        for (std::size_t k = 0; k < r.pus.size(); ++k) {
            const std::vector<int>& layers = r.pus[k].layers;
            ASSERT_FALSE(layers.empty());
            chosen = std::max(chosen, stage_estimate(timing[k], cfg.pus[k], layers.front(), layers.back() + 1));
        }
        double optimum = inf;
        for (int k = 1; k <= stages; ++k) optimum = std::min(optimum, best[std::size_t(k)][std::size_t(n)]);
        EXPECT_NEAR(chosen, optimum, 1e-12 * chosen);
    }
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

// The NIU's costs come in from outside (niu_throughput, or Python): a NaN or negative one would
// make the NIU look free (NaN utilisation compares false against 1) or negative (review rev_s12).
TEST(TimingSystem, NiuCostsMustBeFiniteAndNonNegative) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (const auto& [field, value] : std::vector<std::pair<std::string, double>>{
             {"layer_seconds", nan}, {"layer_seconds", -1.0}, {"program_seconds", inf},
             {"channel_bytes_per_weight", nan}, {"weights_per_s", inf}}) {
        SCOPED_TRACE(field);
        SystemConfig cfg = u50_system();
        cfg.niu_count = 1;
        cfg.niu = niu_throughput(NiuConfig{});
        if (field == "layer_seconds") cfg.niu.layer_seconds = value;
        if (field == "program_seconds") cfg.niu.program_seconds = value;
        if (field == "channel_bytes_per_weight") cfg.niu.channel_bytes_per_weight = value;
        if (field == "weights_per_s") cfg.niu.weights_per_s = value;
        try {
            evaluate_system(r50(), cfg, all_aimc(r50()));
            ADD_FAILURE() << "accepted " << value;
        } catch (const FormatError& e) {
            EXPECT_EQ(e.field(), "niu." + field);
        }
    }
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
