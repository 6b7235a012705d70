// Co-simulation: the Verilated NIU RTL against the bit-exact C++ NIU model (niu/niu_model.hpp).
//
// Each case compiles a random NIU program (noise model, t, seed/chip/round, code width, drift
// compensation, 1-3 layers of random sizes, many not a multiple of a beat), places it and the
// clean weights at random addresses in an AXI memory that applies random back-pressure and a
// random maximum burst length, runs the RTL to completion, and compares every byte the RTL wrote
// with niu::apply_layer() -- the model's fast path, which steps each pcg32 stream sequentially
// from s_0 and so also checks the compiler's interleaved sub-state seeds that the RTL loads.
// Bytes around each destination region must be untouched (tail strobes, no stray bursts).
// A deliberately wrong table entry or stream state must make the comparison fail.
#include <gtest/gtest.h>

#include <pcg_random.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "niu_harness.hpp"
#include "noise_models/noise_model.hpp"

using namespace aimcemu;
using namespace aimcemu::cosim;

namespace {

constexpr std::size_t kMemoryBytes = std::size_t{4} << 20;
constexpr std::uint64_t kBeat = 32;

std::uint64_t uniform(pcg32& rng, std::uint64_t n) { return rng() % n; }  // n << 2^32: bias is irrelevant here

std::vector<std::int8_t> random_codes(pcg32& rng, std::size_t n) {
    // Mixes full-range codes with small ones, so both ends of the tables are exercised.
    const bool small = uniform(rng, 3) == 0;
    std::vector<std::int8_t> v(n);
    for (auto& c : v) c = small ? std::int8_t(int(uniform(rng, 31)) - 15) : std::int8_t(int(uniform(rng, 256)) - 128);
    return v;
}

// Hands out non-overlapping, beat-aligned regions at random offsets inside 4 KiB pages.
class RegionAllocator {
public:
    explicit RegionAllocator(pcg32& rng) : rng_(rng) {}
    std::uint64_t take(std::uint64_t bytes) {
        next_ += 64 + kBeat * uniform(rng_, 128);  // a guard gap and a random page offset
        const std::uint64_t addr = next_;
        next_ = (addr + bytes + kBeat - 1) / kBeat * kBeat;
        if (next_ + 64 > kMemoryBytes) throw std::runtime_error("test memory too small");
        return addr;
    }

private:
    pcg32& rng_;
    std::uint64_t next_ = 0;
};

struct Layer {
    std::vector<std::int8_t> clean;
    niu::NiuLayerSpec spec;
};

struct Case {
    niu::NiuProgram program;
    std::vector<Layer> layers;
    std::uint64_t prog_addr = 0;
    unsigned max_burst_len = 127;
    BackPressure bp;
    std::string description;
};

Case random_case(std::uint64_t seed) {
    pcg32 rng(seed, 77);
    Case c;
    static const char* kModels[] = {"pcm_like", "hermes", "state_independent"};
    static const double kTimes[] = {0.0, 25.0, 3600.0, 86400.0, 3.15e7};
    const std::string model = kModels[uniform(rng, 3)];
    niu::NiuCompileOptions options;
    options.seed = rng();
    options.chip = uniform(rng, 50);
    options.round = uniform(rng, 1000);
    options.t = kTimes[uniform(rng, 5)];
    options.out_bits = 2 + int(uniform(rng, 7));
    if (uniform(rng, 2)) options.out_bits = 8;  // the default is the common case

    RegionAllocator regions(rng);
    const std::size_t num_layers = 1 + uniform(rng, 3);
    for (std::size_t l = 0; l < num_layers; ++l) {
        Layer layer;
        const std::uint32_t count = uniform(rng, 4) == 0 ? std::uint32_t(1 + uniform(rng, 40))
                                                         : std::uint32_t(32 + uniform(rng, 1500));
        layer.clean = random_codes(rng, count);
        layer.spec.layer_id = uniform(rng, 100);
        layer.spec.count = count;
        layer.spec.absmax = niu::clean_absmax(layer.clean, uniform(rng, 2) ? niu::AbsMaxMode::Layer : niu::AbsMaxMode::Fixed127);
        layer.spec.alpha = uniform(rng, 2) ? 1.0 : 0.8 + 0.05 * double(uniform(rng, 12));
        layer.spec.src_addr = regions.take(count);
        layer.spec.dst_addr = regions.take(count);
        c.layers.push_back(std::move(layer));
    }
    std::vector<niu::NiuLayerSpec> specs;
    for (const Layer& l : c.layers) specs.push_back(l.spec);
    const auto noise = noise::make_noise_model(model, {});
    c.program = niu::compile_program(*noise, specs, options);
    c.prog_addr = regions.take(4 * c.program.to_words().size());

    static const unsigned kBursts[] = {0, 1, 3, 7, 15, 127, 255};
    c.max_burst_len = kBursts[uniform(rng, 7)];
    auto p = [&] { return 0.3 + 0.7 * double(uniform(rng, 1000)) / 1000.0; };
    if (uniform(rng, 4) != 0) c.bp = {p(), p(), p(), p(), p()};
    c.description = model + " t=" + std::to_string(options.t) + " B=" + std::to_string(options.out_bits) +
                    " layers=" + std::to_string(num_layers) + " max_len=" + std::to_string(c.max_burst_len);
    return c;
}

// Guard bytes written around each destination; the RTL must leave them alone.
constexpr std::uint8_t kGuard = 0xA5;
constexpr std::uint64_t kGuardBytes = 64;

struct RunResult {
    NiuStatus status;
    std::vector<std::vector<std::int8_t>> written;  // per layer, count bytes at dst
    std::size_t guard_damage = 0;
    std::vector<std::string> bus_errors;
    std::uint64_t stream_cycles = 0, stream_beats = 0;
};

struct ErrorRegion {
    std::uint64_t begin = 0, end = 0;  // bus accesses touching [begin, end) get SLVERR
};

RunResult run_rtl(const Case& c, const std::vector<std::uint32_t>& image, std::uint64_t seed,
                  ErrorRegion error_region = {}) {
    NiuHarness sim(kMemoryBytes, seed * 31 + 1, c.bp, seed);
    sim.memory().set_error_region(error_region.begin, error_region.end);
    sim.store_words(c.prog_addr, image);
    for (const Layer& l : c.layers) {
        sim.store_bytes(l.spec.src_addr, l.clean);
        auto& m = sim.memory().bytes();
        std::fill(m.begin() + std::ptrdiff_t(l.spec.dst_addr - kGuardBytes),
                  m.begin() + std::ptrdiff_t(l.spec.dst_addr + l.spec.count + kGuardBytes), kGuard);
    }
    RunResult r;
    std::uint64_t beats = 0;
    for (const Layer& l : c.layers) beats += (l.spec.count + kBeat - 1) / kBeat;
    const std::uint64_t budget = 40 * (beats + c.layers.size() * 400 + 100) + 200'000;
    r.status = sim.run_program(c.prog_addr, c.max_burst_len, budget);
    r.stream_cycles = sim.read_reg(kRegStreamCycles);
    r.stream_beats = sim.read_reg(kRegStreamBeats);
    const auto& m = sim.memory().bytes();
    for (const Layer& l : c.layers) {
        const std::uint64_t d = l.spec.dst_addr;
        r.written.emplace_back(m.begin() + std::ptrdiff_t(d), m.begin() + std::ptrdiff_t(d + l.spec.count));
        for (std::uint64_t a = d - kGuardBytes; a < d; ++a) r.guard_damage += m[a] != kGuard;
        for (std::uint64_t a = d + l.spec.count; a < d + l.spec.count + kGuardBytes; ++a) r.guard_damage += m[a] != kGuard;
    }
    r.bus_errors = sim.memory().errors();
    return r;
}

std::vector<std::int8_t> model_output(const niu::NiuLayerProgram& layer, const std::vector<std::int8_t>& clean) {
    return niu::apply_layer(layer, clean, 1);
}

std::size_t mismatches(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
    return n;
}

}  // namespace

class NiuCosim : public ::testing::TestWithParam<int> {};

TEST_P(NiuCosim, RtlWritesExactlyTheModelsNoisyWeights) {
    const std::uint64_t seed = 1000 + std::uint64_t(GetParam());
    const Case c = random_case(seed);
    SCOPED_TRACE(c.description);
    const RunResult r = run_rtl(c, c.program.to_words(), seed);
    EXPECT_EQ(r.status.error, 0u);
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
    EXPECT_EQ(r.guard_damage, 0u);
    std::uint64_t beats = 0;
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
        const auto expected = model_output(c.program.layers[l], c.layers[l].clean);
        EXPECT_EQ(mismatches(r.written[l], expected), 0u) << "layer " << l << " count " << c.layers[l].spec.count;
        beats += (c.layers[l].spec.count + kBeat - 1) / kBeat;
    }
    EXPECT_EQ(r.stream_beats, beats);
}

// 40 programs, about 80 layers and 60 k weights in all: a few seconds of simulation.
INSTANTIATE_TEST_SUITE_P(RandomPrograms, NiuCosim, ::testing::Range(0, 40));

// With a bus that never stalls, a long layer streams at one beat (32 lanes) per cycle.
TEST(NiuCosimThroughput, OneBeatPerCycleOnAnIdealBus) {
    pcg32 rng(5, 5);
    Layer layer;
    layer.clean = random_codes(rng, 32 * 2000);
    layer.spec.count = std::uint32_t(layer.clean.size());
    layer.spec.absmax = 127;
    layer.spec.src_addr = 4096;
    layer.spec.dst_addr = 4096 + 4 * 65536;
    Case c;
    c.program = niu::compile_program(*noise::make_noise_model("pcm_like", {}), {layer.spec}, {.seed = 1, .t = 3600.0});
    c.layers.push_back(layer);
    c.prog_addr = 3 * 65536 * 4;
    c.max_burst_len = 127;
    const RunResult r = run_rtl(c, c.program.to_words(), 9);
    ASSERT_EQ(r.status.error, 0u);
    EXPECT_EQ(mismatches(r.written[0], model_output(c.program.layers[0], layer.clean)), 0u);
    // Overhead: pipeline fill (~15), read latency and the last B response; nothing per beat.
    EXPECT_EQ(r.stream_beats, 2000u);
    EXPECT_LE(r.stream_cycles, 2000u + 40u);
    RecordProperty("stream_cycles", std::to_string(r.stream_cycles));
    std::printf("ideal bus: %llu beats in %llu cycles = %.3f lanes/cycle\n", (unsigned long long)r.stream_beats,
                (unsigned long long)r.stream_cycles, 32.0 * double(r.stream_beats) / double(r.stream_cycles));
}

// The comparison has teeth: a wrong table entry or a wrong RNG sub-state in the image the RTL
// loads changes the written weights (and only where that entry or stream is used).
TEST(NiuCosimNegative, WrongTableEntryIsDetected) {
    const Case c = random_case(4242);
    std::vector<std::uint32_t> image = c.program.to_words();
    // GT of the most common magnitude in layer 0, moved by 1/8 g_max: every weight using it shifts.
    const std::vector<std::int8_t>& clean = c.layers[0].clean;
    std::vector<int> histogram(128, 0);
    for (std::int8_t v : clean) ++histogram[std::min(std::abs(int(v)), 127)];
    const int a = int(std::max_element(histogram.begin() + 1, histogram.end()) - histogram.begin());
    image[niu::gen::NIU_PROG_HEADER_WORDS + niu::gen::NIU_LAYER_GT + a] += 1u << 13;
    const RunResult r = run_rtl(c, image, 4242);
    ASSERT_EQ(r.status.error, 0u);
    const auto expected = model_output(c.program.layers[0], clean);
    EXPECT_GT(mismatches(r.written[0], expected), 0u);
    for (std::size_t i = 0; i < clean.size(); ++i)
        if (r.written[0][i] != expected[i]) EXPECT_EQ(std::min(std::abs(int(clean[i])), 127), a) << "weight " << i;
}

TEST(NiuCosimNegative, WrongStreamStateIsDetected) {
    Case c = random_case(4243);
    std::vector<std::uint32_t> image = c.program.to_words();
    // Chip unit 5 (lane 1, z1 of g-), sub-state 1: replace it with another key's state.  Only
    // weights of lane 1 in beats 1, 1 + P, 1 + 2P, ... can change.
    constexpr int kUnit = 5, kSub = 1;
    const std::size_t entry = std::size_t(kSub) * niu::gen::NIU_CHIP_SLOTS + kUnit;
    const std::size_t word = niu::gen::NIU_PROG_HEADER_WORDS + niu::gen::NIU_LAYER_CHIP_STATES + 2 * entry;
    image[word] ^= 0x9e3779b9u;
    image[word + 1] ^= 0x7f4a7c15u;
    const RunResult r = run_rtl(c, image, 4243);
    ASSERT_EQ(r.status.error, 0u);
    const auto& clean = c.layers[0].clean;
    const auto expected = model_output(c.program.layers[0], clean);
    const std::size_t beats = (clean.size() + 31) / 32;
    if (beats >= 2) EXPECT_GT(mismatches(r.written[0], expected), 0u);
    for (std::size_t i = 0; i < clean.size(); ++i) {
        if (r.written[0][i] == expected[i]) continue;
        EXPECT_EQ(i % 32, 1u) << "weight " << i;
        EXPECT_EQ((i / 32) % niu::gen::NIU_RNG_PIPE, std::size_t(kSub)) << "weight " << i;
    }
}

// A program image with a bad magic word is refused before any weight is written.
TEST(NiuCosimErrors, BadHeaderStopsWithAnError) {
    const Case c = random_case(4244);
    std::vector<std::uint32_t> image = c.program.to_words();
    image[niu::gen::NIU_PROG_MAGIC] ^= 1u;
    const RunResult r = run_rtl(c, image, 4244);
    EXPECT_EQ(r.status.error, 1u);  // niu_pkg::ErrBadHeader
    EXPECT_EQ(r.guard_damage, 0u);
    for (std::size_t l = 0; l < c.layers.size(); ++l)
        EXPECT_TRUE(std::all_of(r.written[l].begin(), r.written[l].end(), [](std::int8_t v) { return std::uint8_t(v) == kGuard; }));
}

// Bus error responses end the program with the matching STATUS error, without hanging.
TEST(NiuCosimErrors, ReadErrorResponseIsReported) {
    const Case c = random_case(4245);
    const auto& src = c.layers[0].spec;
    const RunResult r = run_rtl(c, c.program.to_words(), 4245, {src.src_addr, src.src_addr + 1});
    EXPECT_EQ(r.status.error, 4u);  // niu_pkg::ErrReadResp
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
}

TEST(NiuCosimErrors, WriteErrorResponseIsReported) {
    const Case c = random_case(4246);
    const auto& dst = c.layers[0].spec;
    const RunResult r = run_rtl(c, c.program.to_words(), 4246, {dst.dst_addr, dst.dst_addr + 1});
    EXPECT_EQ(r.status.error, 5u);  // niu_pkg::ErrWriteResp
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
}

// A program address that is not 32-byte aligned is refused at start.
TEST(NiuCosimErrors, MisalignedProgramIsRefused) {
    NiuHarness sim(kMemoryBytes, 1, {}, 1);
    const NiuStatus s = sim.run_program(4096 + 4, 127, 100);
    EXPECT_EQ(s.error, 2u);  // niu_pkg::ErrAlignment
    EXPECT_FALSE(s.busy);
    EXPECT_TRUE(sim.memory().errors().empty());
    EXPECT_EQ(sim.memory().read_bursts(), 0u);
}
