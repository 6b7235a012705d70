// The emulation loop: a round through the modelled HBM (clean region -> NIU -> back buffer ->
// publish -> PU lease) gives exactly the bytes of the direct path (niu::apply_layer + run_network
// with those weights as an override), for several rounds and thread counts; the PU never runs a
// mix of two rounds; digital layers' and clean weights are never written; AIMC regions are
// 32-byte aligned and disjoint.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <unistd.h>
#include <pcg_random.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "emulator/emulator.hpp"
#include "emulator/round_metrics.hpp"
#include "formats/results.hpp"
#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "niu_test_model.hpp"
#include "common/errors.hpp"
#include "random_layers.hpp"

using namespace aimcemu;
using namespace aimcemu::niu;
using niu_test::niu_noise_model;

namespace {

using test_data::random_int8;

Layer gemm_layer(const std::string& name, LayerKind kind, int input, int k, int pad, int n, std::int64_t m, pcg32& rng,
                 int out_shift) {
    return test_data::random_gemm_layer(name, kind, input, Window::square(k, 1, pad), n, m, rng, 2, out_shift,
                                         kind == LayerKind::Conv);
}

// conv 3x3 (layer 0) -> max pool (1) -> conv 3x3 (2) -> conv 1x1 + residual (3) -> linear (4).
// Weight counts (5*9*3=135, 8*9*5=360, 8*8=64, 10*3*3*8=720) are not all multiples of 32.
Network hybrid_network() {
    pcg32 rng(23);
    Network net;
    net.name = "hybrid";
    net.input_shape = {6, 6, 3};
    net.layers.push_back(gemm_layer("c0", LayerKind::Conv, kNetworkInput, 3, 1, 5, 3 * 3 * 3, rng, 9));
    net.layers.push_back(test_data::max_pool_layer("pool", 0, Window::square(2, 2)));  // 3x3x5
    net.layers.push_back(gemm_layer("c1", LayerKind::Conv, 1, 3, 1, 8, 3 * 3 * 5, rng, 10));
    net.layers.push_back(gemm_layer("c2", LayerKind::Conv, 2, 1, 0, 8, 8, rng, 8));
    net.layers[3].residual_input = 2;
    net.layers.push_back(gemm_layer("fc", LayerKind::Linear, 3, 1, 0, 10, 3 * 3 * 8, rng, 11));
    net.resolve();
    return net;
}

std::vector<Tensor8> random_images(const Network& net, int count, std::uint64_t seed) {
    pcg32 rng(seed);
    std::vector<Tensor8> images;
    for (int i = 0; i < count; ++i) images.push_back({net.input_shape, random_int8(rng, net.input_shape.size())});
    return images;
}

// One program for the AIMC layers at (chip, round), addresses left at 0: the emulator sets them.
NiuProgram program_for(const Network& net, const std::vector<int>& aimc, std::uint64_t round) {
    static const auto model = niu_noise_model("pcm_like", {});
    std::vector<NiuLayerSpec> specs;
    for (int l : aimc) {
        const auto& w = net.layers[std::size_t(l)].weights;
        specs.push_back({.layer_id = std::uint64_t(l), .count = std::uint32_t(w.size()),
                         .absmax = clean_absmax(w, AbsMaxMode::Layer)});
    }
    return compile_program(*model, specs, {.seed = 3, .chip = 1, .round = round, .t = 3600.0});
}

// The direct path: noisy weights from apply_layer, handed to the PU as an override.
class OverrideWeights : public WeightView {
public:
    explicit OverrideWeights(std::size_t layers) : table_(layers) {}
    void set(int layer, std::vector<std::int8_t> w) { table_[std::size_t(layer)] = std::move(w); }
    const std::int8_t* weights(int layer) const override {
        const auto& w = table_[std::size_t(layer)];
        return w.empty() ? nullptr : w.data();
    }

private:
    std::vector<std::vector<std::int8_t>> table_;
};

std::vector<std::vector<Tensor8>> direct_round(const Network& net, const std::vector<int>& aimc,
                                               const NiuProgram& program, const std::vector<Tensor8>& images) {
    OverrideWeights view(net.layers.size());
    for (std::size_t k = 0; k < aimc.size(); ++k)
        view.set(aimc[k], apply_layer(program.layers[k], net.layers[std::size_t(aimc[k])].weights, 1));
    std::vector<std::vector<Tensor8>> out;
    for (const Tensor8& image : images) out.push_back(run_network(net, image, GemmBackend::Reference, &view));
    return out;
}

void expect_same(const std::vector<std::vector<Tensor8>>& a, const std::vector<std::vector<Tensor8>>& b,
                 const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].size(), b[i].size()) << what;
        for (std::size_t l = 0; l < a[i].size(); ++l) EXPECT_EQ(a[i][l].data, b[i][l].data) << what << " image " << i << " layer " << l;
    }
}

std::vector<std::int8_t> region_bytes(const Hbm& hbm, HbmRegionKind kind, int layer, int buffer = 0) {
    const auto bytes = hbm.region(hbm.layout().at(kind, layer, buffer));
    return {bytes.begin(), bytes.end()};
}

}  // namespace

TEST(NiuEmulator, RoundsEqualTheDirectNiuAndPuPathForAnyThreadCount) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {2, 0, 4};  // any order: program layer k is aimc[k]
    const auto images = random_images(net, 3, 5);
    for (int threads : {1, 2, 3}) {
        Emulator emulator(net, aimc);
        for (std::uint64_t round = 0; round < 3; ++round) {
            const NiuProgram program = program_for(net, aimc, round);
            RunOptions options;
            options.threads = threads;
            const RoundOutputs got = emulator.run_round(program, images, options);
            EXPECT_EQ(got.round, round + 1);
            const std::string what = "threads " + std::to_string(threads) + " round " + std::to_string(round);
            expect_same(got.outputs, direct_round(net, aimc, program, images), what);
            for (std::size_t k = 0; k < aimc.size(); ++k)
                EXPECT_EQ(emulator.weights(aimc[k]), apply_layer(program.layers[k], net.layers[std::size_t(aimc[k])].weights, 1))
                    << what << " layer " << aimc[k];
        }
    }
}

TEST(NiuEmulator, NoisyWeightsDifferFromCleanSoTheComparisonHasTeeth) {
    const Network net = hybrid_network();
    Emulator emulator(net, {0, 2});
    emulator.write_round(program_for(net, {0, 2}, 0), 1);
    EXPECT_NE(emulator.weights(0), net.layers[0].weights);
    EXPECT_NE(emulator.weights(2), net.layers[2].weights);
    const auto images = random_images(net, 2, 8);
    RunOptions options;
    const auto noisy = emulator.run_published(images, options, 1);
    bool differs = false;
    for (std::size_t i = 0; i < images.size(); ++i)
        differs |= noisy.outputs[i].back().data != run_network(net, images[i], GemmBackend::Fast).back().data;
    EXPECT_TRUE(differs);
}

TEST(NiuEmulator, DigitalAndCleanWeightsAreNeverWritten) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {2, 3};
    Emulator emulator(net, aimc);
    RunOptions options;
    options.threads = 2;
    for (std::uint64_t round = 0; round < 3; ++round)
        emulator.run_round(program_for(net, aimc, round), random_images(net, 1, round), options);
    for (int l : {0, 4}) {
        EXPECT_EQ(region_bytes(emulator.hbm(), HbmRegionKind::Weights, l), net.layers[std::size_t(l)].weights) << l;
        EXPECT_EQ(emulator.weights(l), net.layers[std::size_t(l)].weights) << l;
    }
    for (int l : aimc)
        EXPECT_EQ(region_bytes(emulator.hbm(), HbmRegionKind::CleanWeights, l), net.layers[std::size_t(l)].weights) << l;
}

TEST(NiuEmulator, AimcRegionsAreAlignedAndDisjoint) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {0, 2, 3, 4};
    Emulator emulator(net, aimc);
    std::vector<const HbmRegion*> regions;
    for (int l : aimc) {
        regions.push_back(&emulator.hbm().layout().at(HbmRegionKind::CleanWeights, l));
        regions.push_back(&emulator.hbm().layout().at(HbmRegionKind::Weights, l, 0));
        regions.push_back(&emulator.hbm().layout().at(HbmRegionKind::Weights, l, 1));
    }
    for (const HbmRegion* r : regions) {
        EXPECT_EQ(r->base % kHbmAlign, 0u) << r->name;
        EXPECT_GT(r->bytes, 0u) << r->name;
        EXPECT_LE(r->base + r->bytes, emulator.hbm().layout().size()) << r->name;
    }
    for (std::size_t i = 0; i < regions.size(); ++i)
        for (std::size_t j = i + 1; j < regions.size(); ++j)
            EXPECT_TRUE(regions[i]->base + regions[i]->bytes <= regions[j]->base ||
                        regions[j]->base + regions[j]->bytes <= regions[i]->base)
                << regions[i]->name << " overlaps " << regions[j]->name;
}

// A writer publishes rounds 1..kRounds while a reader runs whatever round is published: every
// run must equal the direct path of the round its lease names, never a mix.
TEST(NiuEmulator, ThePuNeverRunsAMixOfTwoRounds) {
    constexpr std::uint64_t kRounds = 12;
    const Network net = hybrid_network();
    const std::vector<int> aimc = {0, 2, 4};
    std::vector<NiuProgram> programs;
    for (std::uint64_t r = 0; r < kRounds; ++r) programs.push_back(program_for(net, aimc, r));
    const auto images = random_images(net, 1, 9);
    Emulator emulator(net, aimc);
    emulator.write_round(programs[0], 1);
    std::atomic<bool> done = false;
    std::thread writer([&] {
        for (std::uint64_t r = 1; r < kRounds; ++r) emulator.write_round(programs[r], 1);
        done = true;
    });
    std::vector<RoundOutputs> seen;
    RunOptions options;
    while (!done || seen.size() < 3) seen.push_back(emulator.run_published(images, options));
    writer.join();
    for (const RoundOutputs& run : seen) {
        ASSERT_GE(run.round, 1u);
        ASSERT_LE(run.round, kRounds);
        expect_same(run.outputs, direct_round(net, aimc, programs[run.round - 1], images),
                    "leased round " + std::to_string(run.round));
    }
}

TEST(NiuEmulator, TheHbmHoldsTheOnlyCopyOfTheWeights) {
    // Once the regions are filled the emulator's network keeps shapes and biases, not weights;
    // the clean weights and their abs-max come from the clean region.
    const Network net = hybrid_network();
    const std::vector<int> aimc = {3, 0};
    const Emulator emulator(net, aimc);
    for (std::size_t l = 0; l < net.layers.size(); ++l) {
        EXPECT_TRUE(emulator.network().layers[l].weights.empty()) << l;
        EXPECT_EQ(emulator.network().layers[l].bias, net.layers[l].bias) << l;
    }
    ASSERT_EQ(emulator.clean_absmax().size(), aimc.size());
    for (std::size_t k = 0; k < aimc.size(); ++k) {
        const auto& w = net.layers[std::size_t(aimc[k])].weights;
        const auto clean = emulator.clean_weights(k);
        EXPECT_EQ(std::vector<std::int8_t>(clean.begin(), clean.end()), w) << k;
        EXPECT_EQ(emulator.clean_absmax()[k], clean_absmax(w, AbsMaxMode::Layer)) << k;
    }
    EXPECT_THROW(emulator.clean_weights(2), FormatError);
}

TEST(NiuEmulator, TheCleanAbsMaxSeesEveryWeightOfALayerLargerThanACopyChunk) {
    // The constructor takes each AIMC layer's abs-max while copying it into the clean region, a
    // chunk at a time: the largest |w| may sit in any chunk (here only in the last bytes, then
    // only in the first), and a layer of small weights keeps its own maximum, not 127.
    for (const std::int64_t at : {std::int64_t(-1), std::int64_t(0), std::int64_t(70000)}) {
        SCOPED_TRACE("peak at " + std::to_string(at));
        pcg32 rng(5);
        Network net;
        net.name = "wide";
        net.input_shape = {1, 1, 640};
        net.layers.push_back(gemm_layer("fc", LayerKind::Linear, kNetworkInput, 1, 0, 300, 640, rng, 9));
        auto& w = net.layers[0].weights;   // 192 000 weights: three 64 KiB chunks
        for (auto& v : w) v = std::int8_t(std::int32_t(rng(11)) - 5);
        w[std::size_t(at < 0 ? std::int64_t(w.size()) - 1 : at)] = -97;
        net.resolve();
        const Emulator emulator(net, {0});
        EXPECT_EQ(emulator.clean_absmax()[0], 97);
        EXPECT_EQ(emulator.clean_absmax()[0], clean_absmax(w, AbsMaxMode::Layer));
    }
}

TEST(NiuEmulator, AProgramCompiledForAnotherCleanAbsMaxIsRefused) {
    // A program's code table is compiled for one abs-max A; for another layer's A it would map
    // the codes to other conductances (wrong noise, no error).  The emulator checks every layer
    // of every program it writes against its clean region: the layer's A or 127 (absmax "fixed").
    Network net = hybrid_network();
    for (auto& w : net.layers[2].weights) w = std::int8_t(w / 2);  // abs-max 63
    const std::vector<int> aimc = {0, 2};
    Emulator emulator(net, aimc);
    ASSERT_EQ(emulator.clean_absmax()[1], 63);
    const auto model = niu_noise_model("pcm_like", {});
    auto program_with = [&](int absmax_of_layer_2) {
        return compile_program(*model,
                               {{.layer_id = 0, .count = 135, .absmax = clean_absmax(net.layers[0].weights, AbsMaxMode::Layer)},
                                {.layer_id = 2, .count = 360, .absmax = absmax_of_layer_2}},
                               {.seed = 3, .chip = 1, .round = 0, .t = 3600.0});
    };
    for (int wrong : {62, 64, 1, 126}) {
        try {
            emulator.write_round(program_with(wrong), 1);
            ADD_FAILURE() << "abs-max " << wrong << " accepted";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("program.layers[1].absmax"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("'c1' has 63"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(emulator.published_round(), 0u);
    EXPECT_EQ(emulator.write_round(program_with(63), 1), 1u);
    EXPECT_EQ(emulator.weights(2), apply_layer(program_with(63).layers[1], net.layers[2].weights, 1));
    EXPECT_EQ(emulator.write_round(program_with(127), 1), 2u);  // absmax "fixed"
    EXPECT_EQ(emulator.weights(2), apply_layer(program_with(127).layers[1], net.layers[2].weights, 1));
}

TEST(NiuEmulator, BadProgramsAndQueriesAreFormatErrors) {
    const Network net = hybrid_network();
    Emulator emulator(net, {0, 2});
    EXPECT_THROW(emulator.weights(2), FormatError);  // nothing published yet
    EXPECT_THROW(emulator.weights(1), FormatError);  // a pool has no weights
    EXPECT_THROW(emulator.write_round(program_for(net, {0}, 0), 1), FormatError);     // too few layers
    try {  // a layer larger than the region the emulator holds for it: the field is named
        emulator.write_round(program_for(net, {2, 0}, 0), 1);
        ADD_FAILURE() << "counts do not match";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("program.layers[0].count"), std::string::npos) << e.what();
    }
    EXPECT_EQ(emulator.published_round(), 0u);                                        // nothing was published
    EXPECT_EQ(emulator.write_round(program_for(net, {0, 2}, 0), 1), 1u);
    EXPECT_THROW(emulator.run_published(random_images(net, 1, 1), RunOptions{}, 2), FormatError);  // round 1 is leased
    EXPECT_THROW(Emulator(net, {0, 0}), FormatError);
    EXPECT_THROW(Emulator(net, {1}), FormatError);
    EXPECT_THROW(Emulator(net, {5}), FormatError);
}

// The emulator reads the caller's network in place: an invalid one is refused with the
// FormatError Network::resolve gives (source "<emulator>"), before anything is built; a valid
// one whose shapes are not filled in is resolved in a copy and runs the same rounds as the
// resolved network; the caller's network is left as it was either way.
TEST(NiuEmulator, TakesTheCallersNetworkInPlaceWithResolvesChecks) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {0, 2};

    Network bad = net;
    bad.layers[2].weights.pop_back();
    std::string expected;
    try {
        Network copy = bad;
        copy.resolve("<emulator>");
    } catch (const FormatError& e) {
        expected = e.what();
    }
    ASSERT_FALSE(expected.empty());
    try {
        Emulator emulator(bad, aimc);
        ADD_FAILURE() << "an invalid network was accepted";
    } catch (const FormatError& e) {
        EXPECT_EQ(std::string(e.what()), expected);
    }

    Network unresolved = net;
    for (Layer& l : unresolved.layers) l.in_shape = l.out_shape = Shape3{};
    Emulator from_unresolved(unresolved, aimc);
    EXPECT_EQ(unresolved.layers[4].out_shape, Shape3{});   // resolved in the emulator's copy only
    EXPECT_EQ(from_unresolved.network().layers[4].out_shape, net.layers[4].out_shape);
    Emulator from_resolved(net, aimc);
    EXPECT_EQ(net.layers[2].weights.size(), std::size_t(8 * 3 * 3 * 5));   // read, not moved from
    EXPECT_EQ(from_unresolved.clean_absmax(), from_resolved.clean_absmax());
    const auto images = random_images(net, 2, 7);
    const NiuProgram program = program_for(net, aimc, 0);
    expect_same(from_unresolved.run_round(program, images, RunOptions{}).outputs,
                from_resolved.run_round(program, images, RunOptions{}).outputs, "unresolved vs resolved");
}

TEST(NiuEmulator, AnAbandonedWriteKeepsTheFrontRoundAndReusesTheBackBuffer) {
    const Network net = hybrid_network();
    const HbmLayout layout = HbmLayout::for_network(net, {0});
    WeightRoundFence fence(layout, {0});
    auto first = fence.begin_write();
    fence.abandon(first);
    EXPECT_EQ(fence.published_round(), 0u);
    auto again = fence.begin_write();  // would wait forever if the abandoned write still held the fence
    EXPECT_EQ(again.round, first.round);
    EXPECT_EQ(again.buffer, first.buffer);
    EXPECT_THROW(fence.abandon(WeightRoundFence::WriteTicket{}), FormatError);  // not the write in progress
    fence.publish(again);
    EXPECT_EQ(fence.acquire().round(), 1u);
}

TEST(NiuEmulator, KeptChipStatesGiveTheFullModelAcrossChipsRoundsAndTimes) {
    // write_round keeps each layer's chip half between rounds of a chip and recomputes it when
    // the chip changes; every round's weights must still be the full model's (apply_layer), the
    // bytes write_round produced before chip states were kept.
    const Network net = hybrid_network();
    const std::vector<int> aimc = {4, 2};
    const auto model = niu_noise_model("hermes", {});
    std::vector<NiuLayerSpec> specs;
    for (int l : aimc) {
        const auto& w = net.layers[std::size_t(l)].weights;
        specs.push_back({.layer_id = std::uint64_t(l), .count = std::uint32_t(w.size()), .absmax = clean_absmax(w, AbsMaxMode::Layer)});
    }
    struct Step {
        std::uint64_t chip, round;
        double t;
    };
    const std::vector<Step> steps = {{1, 0, 0.0}, {1, 1, 3600.0}, {1, 2, 3.15e7}, {2, 0, 60.0}, {2, 5, 60.0}, {1, 3, 86400.0}};
    for (int threads : {1, 2}) {
        Emulator emulator(net, aimc);
        for (const Step& s : steps) {
            const NiuProgram program = compile_program(*model, specs, {.seed = 8, .chip = s.chip, .round = s.round, .t = s.t});
            emulator.write_round(program, threads);
            for (std::size_t k = 0; k < aimc.size(); ++k)
                ASSERT_EQ(emulator.weights(aimc[k]), apply_layer(program.layers[k], net.layers[std::size_t(aimc[k])].weights, 1))
                    << "chip " << s.chip << " round " << s.round << " t " << s.t << " layer " << aimc[k] << " threads " << threads;
        }
    }
}

namespace {
// A layer's activations of every image, one after another (the results file's [image][HWC]).
std::vector<std::int8_t> layer_of_all(const std::vector<std::vector<Tensor8>>& outputs, int layer) {
    std::vector<std::int8_t> all;
    for (const auto& image : outputs) all.insert(all.end(), image[std::size_t(layer)].data.begin(), image[std::size_t(layer)].data.end());
    return all;
}
}  // namespace

TEST(NiuEmulator, RoundMetricsTakenInThePassEqualTheWholeLayersSumsForAnyThreadCount) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {0, 2, 3, 4};
    const auto images = random_images(net, 5, 9);  // 5 images: micro-batches of unequal size
    RunOptions clean_options;
    const auto reference = run_network_batch(net, images, clean_options);

    const auto path = std::filesystem::temp_directory_path() / ("aimcemu_round_metrics_" + std::to_string(::getpid()) + ".h5");
    ResultsSpec spec;
    spec.labels.assign(images.size(), 0);
    spec.rounds = {RoundInfo{}};
    spec.stored_layers = {"c1"};
    ResultsWriter writer(path.string(), net, spec);  // never committed: leaves no file
    for (int l = 0; l < int(net.layers.size()); ++l) writer.set_reference(l, layer_of_all(reference, l));

    Emulator emulator(net, aimc);
    emulator.write_round(program_for(net, aimc, 0), 1);
    RunOptions plain;
    const auto full = emulator.run_published(images, plain).outputs;  // every layer, no observer
    for (int threads : {1, 2, 3}) {
        for (int batch : {0, 2}) {
            const std::string what = "threads " + std::to_string(threads) + " batch " + std::to_string(batch);
            const RoundMetrics metrics(writer, net);
            // Measured: what the file neither stores (c1) nor needs as the output (fc).
            EXPECT_EQ(metrics.keep(), (std::vector<bool>{false, false, true, false, true})) << what;
            RunOptions options;
            options.threads = threads;
            options.batch = batch;
            options.observer = &metrics;
            options.keep = metrics.keep();
            const auto got = emulator.run_published(images, options).outputs;
            for (int l = 0; l < int(net.layers.size()); ++l) {
                if (!metrics.measured(l)) {
                    EXPECT_EQ(layer_of_all(got, l), layer_of_all(full, l)) << what << " layer " << l;
                    continue;
                }
                EXPECT_TRUE(layer_of_all(got, l).empty()) << what << " layer " << l << " was kept";
                ActivationErrorSums expected;
                expected.accumulate_kernel("scalar", layer_of_all(full, l), layer_of_all(reference, l));
                EXPECT_EQ(metrics.sums(l), expected) << what << " layer " << l;
            }
        }
    }
    // The noisy round differs from the reference on a measured layer, so the comparison has teeth.
    EXPECT_NE(layer_of_all(full, 3), layer_of_all(reference, 3));
}

// A RoundMetrics shares the writer's reference bytes: used after commit() and after the writer
// is gone it measures against the same reference (it used to read the freed copies: garbage sums).
TEST(NiuEmulator, RoundMetricsOutliveTheWritersCommitAndTheWriter) {
    const Network net = hybrid_network();
    const std::vector<int> aimc = {0, 2, 3, 4};
    const auto images = random_images(net, 3, 6);
    const auto reference = run_network_batch(net, images, RunOptions{});
    Emulator emulator(net, aimc);
    emulator.write_round(program_for(net, aimc, 0), 1);
    const auto full = emulator.run_published(images, RunOptions{}).outputs;
    for (const bool shared : {false, true}) {
        const auto path = std::filesystem::temp_directory_path() /
                          ("aimcemu_metrics_commit_" + std::to_string(::getpid()) + (shared ? "_s" : "_o") + ".h5");
        ResultsSpec spec;
        spec.labels.assign(images.size(), 0);
        spec.rounds = {RoundInfo{}};
        spec.stored_layers = {"c1"};
        auto writer = std::make_unique<ResultsWriter>(path.string(), net, spec);
        if (shared) {   // the reference a sweep shares; this test drops its own hold on it
            auto held = std::make_shared<ReferenceActivations>(net, images.size(),
                                                                std::vector<bool>(net.layers.size(), true));
            ASSERT_TRUE(held->begin_filling());
            for (int l = 0; l < int(net.layers.size()); ++l)
                held->store(l, 0, int(images.size()), layer_of_all(reference, l));
            held->seal();
            writer->set_reference(std::shared_ptr<const ReferenceActivations>(std::move(held)));
        } else {
            for (int l = 0; l < int(net.layers.size()); ++l) writer->set_reference(l, layer_of_all(reference, l));
        }
        const RoundMetrics metrics(*writer, net);
        RunOptions options;
        options.observer = &metrics;
        options.keep = metrics.keep();
        const auto got = emulator.run_published(images, options).outputs;
        for (int l = 0; l < int(net.layers.size()); ++l) {
            if (metrics.measured(l)) writer->set_round_sums(0, l, metrics.sums(l));
            else writer->set_round(0, l, layer_of_all(got, l));
        }
        writer->commit();
        std::filesystem::remove(path);
        try {
            writer->reference(0);
            ADD_FAILURE() << "reference read after commit";
        } catch (const FormatError& e) {
            EXPECT_EQ(e.field(), "file") << e.what();
        }
        EXPECT_THROW({ const RoundMetrics late(*writer, net); }, FormatError);
        EXPECT_THROW(writer->commit(), FormatError);
        emulator.run_published(images, options);   // after commit
        writer.reset();
        // Refill the freed heap so that a stale read would see other bytes.
        std::vector<std::vector<std::int8_t>> junk;
        for (int k = 0; k < 64; ++k) junk.emplace_back(std::size_t(4096 << (k % 6)), std::int8_t(0x7f));
        options.threads = 2;
        emulator.run_published(images, options);   // after the writer is gone
        for (int l = 0; l < int(net.layers.size()); ++l) {
            if (!metrics.measured(l)) continue;
            ActivationErrorSums once, thrice;
            once.accumulate_kernel("scalar", layer_of_all(full, l), layer_of_all(reference, l));
            for (int k = 0; k < 3; ++k) thrice += once;
            EXPECT_EQ(metrics.sums(l), thrice) << (shared ? "shared" : "own") << " layer " << l;
        }
    }
}

TEST(NiuEmulator, SetRoundSumsRefusesStoredOrOutputLayersAndPartialSums) {
    const Network net = hybrid_network();
    const auto images = random_images(net, 2, 4);
    const auto reference = run_network_batch(net, images, RunOptions{});
    const auto path = std::filesystem::temp_directory_path() / ("aimcemu_round_sums_" + std::to_string(::getpid()) + ".h5");
    ResultsSpec spec;
    spec.labels.assign(images.size(), 0);
    spec.rounds = {RoundInfo{}};
    spec.stored_layers = {"c1"};
    ResultsWriter writer(path.string(), net, spec);
    ActivationErrorSums whole;
    whole.accumulate(layer_of_all(reference, 0), layer_of_all(reference, 0));
    EXPECT_THROW(writer.set_round_sums(0, 0, whole), FormatError);  // reference not set yet
    for (int l = 0; l < int(net.layers.size()); ++l) writer.set_reference(l, layer_of_all(reference, l));
    for (int l : {2, 4}) {  // c1 is stored, fc is the output: the file needs their values
        ActivationErrorSums sums;
        sums.accumulate(layer_of_all(reference, l), layer_of_all(reference, l));
        try {
            writer.set_round_sums(0, l, sums);
            ADD_FAILURE() << "layer " << l << " accepted";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("layers/" + net.layers[std::size_t(l)].name + "/activations"), std::string::npos) << e.what();
        }
    }
    ActivationErrorSums half;
    const auto first = layer_of_all(reference, 0);
    half.accumulate(std::span(first).first(first.size() / 2), std::span(first).first(first.size() / 2));
    EXPECT_THROW(writer.set_round_sums(0, 0, half), FormatError);
    EXPECT_THROW(writer.set_round_sums(1, 0, whole), FormatError);  // no round 1
    writer.set_round_sums(0, 0, whole);
    EXPECT_EQ(writer.reference(3).size(), layer_of_all(reference, 3).size());
}

TEST(NiuEmulator, KeptChipStateMemoryIsRecomputedForTheNextEmulatorWhateverItHeld) {
    // A destroyed emulator leaves its chip states' memory to the next one.  The next network
    // here has the same shapes and, its weights negated, the same abs-max, so the same programs
    // (seed, chip, layer, code table): a kept state used as it is would give the first
    // network's noisy weights, not the full model's on the second's.
    const std::vector<int> aimc = {2, 0};
    const Network first = hybrid_network();
    Network second = first;
    for (int l : aimc)
        for (auto& w : second.layers[std::size_t(l)].weights) w = std::int8_t(-w);
    const NiuProgram program = program_for(first, aimc, 0);
    ASSERT_EQ(program_for(second, aimc, 0).layers[0].code, program.layers[0].code);
    release_kept_chip_states();
    {
        Emulator emulator(first, aimc);
        emulator.write_round(program, 1);
    }
    const std::size_t kept = kept_chip_state_bytes();
    EXPECT_GE(kept, 8 * (first.layers[0].weights.size() + first.layers[2].weights.size()));
    for (int threads : {1, 2}) {
        Emulator emulator(second, aimc);
        EXPECT_EQ(kept_chip_state_bytes(), 0u);  // taken by this emulator
        emulator.write_round(program, threads);
        for (std::size_t k = 0; k < aimc.size(); ++k)
            ASSERT_EQ(emulator.weights(aimc[k]), apply_layer(program.layers[k], second.layers[std::size_t(aimc[k])].weights, 1))
                << "layer " << aimc[k] << " threads " << threads;
    }
    EXPECT_EQ(kept_chip_state_bytes(), kept);
    EXPECT_EQ(release_kept_chip_states(), kept);
    EXPECT_EQ(kept_chip_state_bytes(), 0u);
    const std::size_t limit = set_kept_chip_state_limit(kept - 1);
    {
        Emulator emulator(first, aimc);
        emulator.write_round(program, 1);
    }
    EXPECT_EQ(kept_chip_state_bytes(), 0u);  // over the limit: freed
    set_kept_chip_state_limit(limit);
}

namespace {

// The whole HBM except the AIMC layers' round buffers (unspecified until the NIU first writes them).
std::vector<std::int8_t> hbm_outside_round_buffers(const Emulator& emulator) {
    std::vector<std::int8_t> out;
    const Hbm& hbm = emulator.hbm();
    std::uint64_t at = 0;
    auto append = [&](std::uint64_t end) {
        const auto bytes = hbm.bytes(at, end - at);
        out.insert(out.end(), bytes.begin(), bytes.end());
    };
    for (const HbmRegion& r : hbm.layout().regions()) {
        const auto& aimc = emulator.aimc_layers();
        if (r.kind != HbmRegionKind::Weights || std::find(aimc.begin(), aimc.end(), r.layer) == aimc.end()) continue;
        append(r.base);
        at = r.base + r.bytes;
    }
    append(hbm.layout().size());
    return out;
}

std::vector<std::int8_t> whole_hbm(const Emulator& emulator) {
    const auto bytes = emulator.hbm().bytes(0, emulator.hbm().layout().size());
    return {bytes.begin(), bytes.end()};
}

}  // namespace

TEST(NiuEmulator, KeptHbmMemoryHoldsNothingOfTheLastEmulatorForTheNext) {
    // A destroyed emulator leaves its HBM's memory to the next one.  The first emulator here maps
    // every GEMM layer to AIMC, so its weights and noisy rounds lie where the second one's layout
    // (one AIMC layer) has activation regions and gaps: the second emulator must read the same
    // bytes as one built in fresh memory, before its first round and after two.
    const Network net = hybrid_network();
    const std::vector<int> every = {0, 2, 3, 4}, one = {2};
    const std::vector<Tensor8> images = random_images(net, 3, 41);
    release_kept_hbm();
    std::vector<std::int8_t> fresh_before;
    std::vector<std::int8_t> fresh_after;
    std::vector<std::vector<Tensor8>> fresh_outputs;
    {
        Emulator fresh(net, one);
        fresh_before = hbm_outside_round_buffers(fresh);
        for (std::uint64_t round = 0; round < 2; ++round)
            fresh_outputs = fresh.run_round(program_for(net, one, round), images, {.threads = 1}).outputs;
        fresh_after = whole_hbm(fresh);
    }
    EXPECT_GT(kept_hbm_bytes(), 0u);
    release_kept_hbm();
    std::size_t kept = 0, second_size = 0;
    const std::int8_t* first_address = nullptr;
    {
        Emulator first(net, every);
        for (std::uint64_t round = 0; round < 2; ++round) first.run_round(program_for(net, every, round), images, {.threads = 2});
        kept = first.hbm().layout().size();
        first_address = first.hbm().bytes(0, 1).data();
    }
    EXPECT_EQ(kept_hbm_bytes(), kept);
    for (int threads : {1, 2}) {
        Emulator second(net, one);
        EXPECT_EQ(kept_hbm_bytes(), 0u);  // taken by this emulator
        EXPECT_EQ(second.hbm().bytes(0, 1).data(), first_address) << "the first emulator's memory was not reused";
        second_size = second.hbm().layout().size();
        ASSERT_LE(second_size, kept);
        EXPECT_EQ(hbm_outside_round_buffers(second), fresh_before) << threads << " threads";
        std::vector<std::vector<Tensor8>> outputs;
        for (std::uint64_t round = 0; round < 2; ++round)
            outputs = second.run_round(program_for(net, one, round), images, {.threads = threads}).outputs;
        EXPECT_EQ(whole_hbm(second), fresh_after) << threads << " threads";
        expect_same(outputs, fresh_outputs, "threads " + std::to_string(threads));
    }
    // The memory went from emulator to emulator, not freed, shrunk to the smaller layout's pages.
    const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    EXPECT_EQ(release_kept_hbm(), (second_size + page - 1) / page * page);
    EXPECT_EQ(kept_hbm_bytes(), 0u);
    const std::size_t limit = set_kept_chip_state_limit(kept - 1);
    { Emulator over(net, every); }
    EXPECT_EQ(kept_hbm_bytes(), 0u);  // over the limit: unmapped
    set_kept_chip_state_limit(limit);
}

// What is kept between emulators may be asked for while another thread keeps or takes it: the
// query holds the object while it measures it (a load and a dereference read freed memory under
// AddressSanitizer when a keep on the other thread deleted the object in between).
TEST(NiuEmulator, KeptMemoryCanBeMeasuredWhileAnotherThreadKeepsAndTakesIt) {
    std::atomic<bool> done{false}, querying{false};
    std::thread keeper([&] {
        while (!querying) std::this_thread::yield();  // on a busy machine the keeper could otherwise finish first
        for (int i = 0; i < 20000; ++i) {
            keep_pass_buffers(std::make_unique<PassBuffers>());
            if (i % 3 == 0) release_kept_pass_buffers();
        }
        done = true;
    });
    std::size_t queries = 0;
    do {
        EXPECT_EQ(kept_pass_buffer_bytes(), 0u);  // an empty pool holds nothing
        ++queries;
        querying = true;
    } while (!done);
    keeper.join();
    release_kept_pass_buffers();
    EXPECT_GT(queries, 0u);
}

namespace {
// The field of the FormatError `call` throws ("" when it throws none).
template <class Call>
std::string refused_field(Call call) {
    try {
        call();
    } catch (const FormatError& e) {
        return e.field();
    }
    return "";
}
}  // namespace

// A RoundMetrics refuses, naming the argument, a pass of another network or of more images than
// its reference holds (check_run), and a writer whose references it was not taken against
// (check_writer); the same network and writer pass.
TEST(NiuEmulator, RoundMetricsRefuseAnotherNetworkMoreImagesAndAnotherWritersReference) {
    const Network net = hybrid_network();
    const auto images = random_images(net, 3, 4);
    const auto reference = run_network_batch(net, images, RunOptions{});
    const auto base = std::filesystem::temp_directory_path() / ("aimcemu_metrics_checks_" + std::to_string(::getpid()));
    ResultsSpec spec;
    spec.labels.assign(images.size(), 0);
    spec.rounds = {RoundInfo{}};
    spec.store_no_activations = true;  // every layer but the output measured
    ResultsWriter writer(base.string() + "_a.h5", net, spec), other(base.string() + "_b.h5", net, spec);  // never committed
    for (int l = 0; l < int(net.layers.size()); ++l) {
        writer.set_reference(l, layer_of_all(reference, l));
        other.set_reference(l, layer_of_all(reference, l));
    }
    const RoundMetrics metrics(writer, net);
    ASSERT_TRUE(metrics.measured(0));

    EXPECT_EQ(refused_field([&] { metrics.check_run(net, images.size(), "<test>"); }), "");
    EXPECT_EQ(refused_field([&] { metrics.check_run(net, 1, "<test>"); }), "");
    EXPECT_EQ(refused_field([&] { metrics.check_run(net, images.size() + 1, "<test>"); }), "images");
    Network wider = net;
    wider.layers[0].out_shape.c += 1;
    EXPECT_EQ(refused_field([&] { metrics.check_run(wider, 1, "<test>"); }), "metrics." + net.layers[0].name);
    Network renamed = net;
    renamed.layers[1].name = "other";
    EXPECT_EQ(refused_field([&] { metrics.check_run(renamed, 1, "<test>"); }), "metrics." + net.layers[1].name);
    Network shorter = net;
    shorter.layers.pop_back();
    EXPECT_EQ(refused_field([&] { metrics.check_run(shorter, 1, "<test>"); }), "metrics");

    EXPECT_EQ(refused_field([&] { metrics.check_writer(writer, net, "<test>"); }), "");
    EXPECT_EQ(refused_field([&] { metrics.check_writer(other, net, "<test>"); }), "metrics." + net.layers[0].name);
    writer.set_reference(0, layer_of_all(reference, 0));  // the same values, a new copy
    EXPECT_EQ(refused_field([&] { metrics.check_writer(writer, net, "<test>"); }), "metrics." + net.layers[0].name);
    EXPECT_EQ(refused_field([&] { RoundMetrics(writer, net).check_writer(writer, net, "<test>"); }), "");
}
