// Co-simulation: the Verilated NIU RTL (built for NIU_LANES lanes) against the bit-exact C++ NIU
// model (niu/niu_model.hpp), byte for byte.  One binary per lane count in NIU_LANES_BUILT.
//
// Each random case compiles a program (every PCM-family model, t, seed/chip/round, code width
// 2..8, drift compensation, 1-3 layers of random sizes, most not a multiple of a beat), places it
// and the clean weights at random addresses in an AXI memory, runs the RTL to completion through
// its AXI4-Lite port, and compares every byte the RTL wrote with niu::apply_layer().  Four cases
// in five stall every AXI channel at random (the five AXI4 channels of the memory and the five
// AXI4-Lite channels of the control port); every fifth case runs on an ideal bus.  Bytes around
// each destination must be untouched (tail strobes, no stray bursts).
//
// Negative tests, with unconditional assertions: a wrong table entry and a wrong generator state
// in the image the RTL loads each change >= 1000 weights, exactly the ones the model says they
// change; bad headers, bad layer fields, misaligned programs and bus errors end with their error
// codes.  Reset asserted in the middle of a read or a write burst leaves an instance that runs the
// next program exactly.
#include <gtest/gtest.h>

#include <pcg_random.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include NIU_MODEL_HEADER
#include "common/errors.hpp"
#include "niu/niu_model.hpp"
#include "niu/niu_timing.hpp"
#include "niu/program.hpp"
#include "niu_harness.hpp"
#include "noise_models/noise_model.hpp"

using namespace aimcemu;
using namespace aimcemu::cosim;

namespace {

// The NIU runs drift_reference "programmed" only (docs/niu_datapath.md section 3; the float64
// models default to aihwkit's "reconverted"), so every model here names it.
std::unique_ptr<noise::NoiseModel> niu_noise_model(const std::string& name, noise::NoiseParams params) {
    params.try_emplace("drift_reference", std::string("programmed"));
    return noise::make_noise_model(name, params);
}

using Top = NIU_MODEL;
using Harness = NiuHarness<Top>;
constexpr int kLanes = NIU_LANES;
constexpr std::size_t kMemoryBytes = std::size_t{4} << 20;
constexpr std::uint64_t kBeat = gen::NIU_AXI_BEAT_BYTES;
constexpr std::uint64_t kWordBytes = gen::NIU_WORD_BITS / 8;

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
    RegionAllocator(pcg32& rng, std::size_t memory_bytes) : rng_(rng), limit_(memory_bytes) {}
    std::uint64_t take(std::uint64_t bytes) {
        next_ += 64 + kBeat * uniform(rng_, 128);  // a guard gap and a random page offset
        const std::uint64_t addr = next_;
        next_ = (addr + bytes + kBeat - 1) / kBeat * kBeat;
        if (next_ + 64 > limit_) throw std::runtime_error("test memory too small");
        return addr;
    }

private:
    pcg32& rng_;
    std::size_t limit_;
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
    double lite_delay = 0.0;
    std::string description;
    std::uint64_t top_window_bytes = 0;  // memory also at [2^AXI_ADDR_BITS - this, 2^AXI_ADDR_BITS)
};

// Every PCM-family model the NIU supports, with its defaults (custom_drift_pcm with a table).
std::unique_ptr<noise::NoiseModel> model_by_index(std::uint64_t i, std::string& name) {
    switch (i) {
        case 0: name = "pcm_like"; return niu_noise_model("pcm_like", {});
        case 1: name = "hermes(2)"; return niu_noise_model("hermes", {});
        case 2: name = "hermes(1)"; return niu_noise_model("hermes", {{"num_devices", 1.0}});
        case 3: name = "state_independent"; return niu_noise_model("state_independent", {});
        default:
            name = "custom_drift_pcm";
            return niu_noise_model("custom_drift_pcm", {{"g_lst", std::vector<double>{0.0, 10.0, 25.0}},
                                                                {"nu_mean_lst", std::vector<double>{0.08, 0.06, 0.05}},
                                                                {"nu_std_lst", std::vector<double>{0.03, 0.02, 0.01}}});
    }
}

Case random_case(std::uint64_t seed, int index) {
    pcg32 rng(seed, 77);
    Case c;
    static const double kTimes[] = {0.0, 25.0, 3600.0, 86400.0, 3.15e7};
    std::string model_name;
    const auto noise = model_by_index(uniform(rng, 5), model_name);
    niu::NiuCompileOptions options;
    options.seed = rng();
    options.chip = uniform(rng, 50);
    options.round = uniform(rng, 1000);
    options.t = kTimes[uniform(rng, 5)];
    options.out_bits = 2 + int(uniform(rng, 7));

    RegionAllocator regions(rng, kMemoryBytes);
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
    c.program = niu::compile_program(*noise, specs, options);
    c.prog_addr = regions.take(4 * c.program.to_words().size());

    static const unsigned kBursts[] = {0, 1, 3, 7, 15, 127, 255};
    c.max_burst_len = kBursts[uniform(rng, 7)];
    const bool ideal = index % 5 == 0;
    auto p = [&] { return 0.3 + 0.6 * double(uniform(rng, 1000)) / 1000.0; };  // stalls in 10-70 % of cycles
    if (!ideal) {
        c.bp = {p(), p(), p(), p(), p()};
        c.lite_delay = 1.0 - p();
    }
    c.description = model_name + " t=" + std::to_string(options.t) + " B=" + std::to_string(options.out_bits) +
                    " layers=" + std::to_string(num_layers) + " max_len=" + std::to_string(c.max_burst_len) +
                    (ideal ? " ideal bus" : " stalls on every channel");
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

RunResult run_rtl(const Case& c, const std::vector<std::uint32_t>& image, std::uint64_t seed, ErrorRegion error_region = {}) {
    Harness sim(kMemoryBytes, seed * 31 + 1, c.bp, seed, c.lite_delay);
    sim.memory().set_error_region(error_region.begin, error_region.end);
    if (c.top_window_bytes)
        sim.memory().add_window((std::uint64_t{1} << gen::NIU_AXI_ADDR_BITS) - c.top_window_bytes, c.top_window_bytes);
    sim.store_words(c.prog_addr, image);
    for (const Layer& l : c.layers) {
        sim.store_bytes(l.spec.src_addr, l.clean);
        auto& m = sim.memory().bytes();
        std::fill(m.begin() + std::ptrdiff_t(l.spec.dst_addr - kGuardBytes),
                  m.begin() + std::ptrdiff_t(l.spec.dst_addr + l.spec.count + kGuardBytes), kGuard);
    }
    RunResult r;
    std::uint64_t weights = 0;
    for (const Layer& l : c.layers) weights += (l.spec.count + kBeat - 1) / kBeat * kBeat;
    const std::uint64_t budget = 40 * (weights / kLanes + c.layers.size() * 1200 + 100) + 200'000;
    r.status = sim.run_program(c.prog_addr, c.max_burst_len, budget);
    r.stream_cycles = sim.read_reg(gen::NIU_REG_STREAM_CYCLES).data;
    r.stream_beats = sim.read_reg(gen::NIU_REG_STREAM_BEATS).data;
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

// One layer of `count` weights at fixed addresses on an ideal bus.
Case single_layer_case(std::vector<std::int8_t> clean, const std::string& model, double t) {
    Case c;
    Layer layer;
    layer.spec.count = std::uint32_t(clean.size());
    layer.spec.absmax = niu::clean_absmax(clean, niu::AbsMaxMode::Layer);
    layer.spec.layer_id = 7;
    layer.spec.src_addr = 4096;
    layer.spec.dst_addr = 4096 + (clean.size() + 8192) / 4096 * 4096;
    layer.clean = std::move(clean);
    c.program = niu::compile_program(*niu_noise_model(model, {}), {layer.spec}, {.seed = 1, .chip = 2, .round = 3, .t = t});
    c.prog_addr = layer.spec.dst_addr + (layer.spec.count + 8192) / 4096 * 4096;
    c.layers.push_back(std::move(layer));
    return c;
}

}  // namespace

class NiuCosim : public ::testing::TestWithParam<int> {};

TEST_P(NiuCosim, RtlWritesExactlyTheModelsNoisyWeights) {
    const std::uint64_t seed = 1000 + 97 * std::uint64_t(kLanes) + std::uint64_t(GetParam());
    const Case c = random_case(seed, GetParam());
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

// 60 programs per lane count (240 over the four builds).
INSTANTIATE_TEST_SUITE_P(RandomPrograms, NiuCosim, ::testing::Range(0, 60));

TEST(NiuCosimRegisters, ConfigIdAndUnknownAddresses) {
    Harness sim(kMemoryBytes, 3, {}, 3, 0.5);
    const RegAccess config = sim.read_reg(gen::NIU_REG_CONFIG);
    EXPECT_EQ(config.resp, 0u);
    EXPECT_EQ(config.data & 0xFFu, unsigned(kLanes));
    EXPECT_EQ((config.data >> 8) & 0xFFu, unsigned(gen::NIU_BEAT_LANES));
    EXPECT_EQ(config.data >> 16, unsigned(gen::NIU_PROG_VERSION_VALUE));
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_ID).data, std::uint32_t(gen::NIU_PROG_MAGIC_VALUE));
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_MAX_BURST).data, unsigned(gen::NIU_MAX_BURST_DEFAULT));
    // Byte strobes: only the written byte of PROG_ADDR_LO changes.
    EXPECT_EQ(sim.write_reg(gen::NIU_REG_PROG_ADDR_LO, 0x11223344u), 0u);
    EXPECT_EQ(sim.write_reg(gen::NIU_REG_PROG_ADDR_LO, 0xAABBCCDDu, 0x4u), 0u);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_PROG_ADDR_LO).data, 0x11BB3344u);
    // An address that names no register answers SLVERR.
    EXPECT_EQ(sim.read_reg(0xFC).resp, unsigned(gen::NIU_AXI_RESP_SLVERR));
    EXPECT_EQ(sim.write_reg(0xFC, 1), unsigned(gen::NIU_AXI_RESP_SLVERR));
    EXPECT_FALSE(sim.status().busy);  // the write to 0xFC started nothing
}

// With a bus that never stalls, a long layer streams at Lanes weights per cycle; the measured rate
// goes to $AIMCEMU_NIU_RATE_DIR/niu_rate_lanes<L>.json for scripts/synth_niu.sh and the timing model.
TEST(NiuCosimThroughput, LanesWeightsPerCycleOnAnIdealBus) {
    pcg32 rng(5, 5);
    constexpr std::uint64_t kBeats = 2000;
    const Case c = single_layer_case(random_codes(rng, kBeats * kBeat), "pcm_like", 3600.0);
    const RunResult r = run_rtl(c, c.program.to_words(), 9);
    ASSERT_EQ(r.status.error, 0u);
    EXPECT_EQ(mismatches(r.written[0], model_output(c.program.layers[0], c.layers[0].clean)), 0u);
    EXPECT_EQ(r.stream_beats, kBeats);
    // One group of `kLanes` weights per cycle; overhead: pipeline fill, read latency, last B.
    const std::uint64_t ideal = kBeats * kBeat / kLanes;
    EXPECT_GE(r.stream_cycles, ideal);
    EXPECT_LE(r.stream_cycles, ideal + 60);
    const double rate = double(kBeats * kBeat) / double(r.stream_cycles);
    std::printf("ideal bus, %d lanes: %llu weights in %llu cycles = %.3f weights/cycle\n", kLanes,
                (unsigned long long)(kBeats * kBeat), (unsigned long long)r.stream_cycles, rate);
    if (const char* dir = std::getenv("AIMCEMU_NIU_RATE_DIR")) {
        std::ofstream f(std::string(dir) + "/niu_rate_lanes" + std::to_string(kLanes) + ".json");
        f << "{\"lanes\": " << kLanes << ", \"weights\": " << kBeats * kBeat << ", \"stream_cycles\": " << r.stream_cycles
          << ", \"weights_per_cycle\": " << rate << "}\n";
    }
}

// A wrong per-code table entry in the image: the RTL writes exactly what the model computes from
// that image, which differs from the correct program's output on >= 1000 weights, all of them
// weights whose magnitude selects the corrupted entry.
TEST(NiuCosimNegative, WrongTableEntryIsDetected) {
    pcg32 rng(11, 11);
    constexpr int kMagnitude = 40;
    std::vector<std::int8_t> clean(6000);
    for (std::size_t i = 0; i < clean.size(); ++i)
        clean[i] = i % 2 ? std::int8_t((uniform(rng, 2) ? 1 : -1) * kMagnitude) : std::int8_t(int(uniform(rng, 255)) - 127);
    const Case c = single_layer_case(clean, "pcm_like", 86400.0);
    std::vector<std::uint32_t> image = c.program.to_words();
    // GT of magnitude 40, moved by 1/8 g_max: every weight that uses it shifts by about 16 codes.
    image[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_CODE_TABLE + 2 * kMagnitude] += 1u << 11;
    const RunResult r = run_rtl(c, image, 11);
    ASSERT_EQ(r.status.error, 0u);
    const auto corrupted = niu::NiuProgram::from_words(image);
    EXPECT_EQ(mismatches(r.written[0], model_output(corrupted.layers[0], clean)), 0u);
    const auto expected = model_output(c.program.layers[0], clean);
    std::size_t changed = 0, elsewhere = 0;
    for (std::size_t i = 0; i < clean.size(); ++i) {
        if (r.written[0][i] == expected[i]) continue;
        ++changed;
        elsewhere += std::abs(int(clean[i])) != kMagnitude;
    }
    EXPECT_GE(changed, 1000u);
    EXPECT_EQ(elsewhere, 0u);
}

// A wrong generator state (chip generator 0 of stream 5) in the image: >= 1000 weights change,
// all of them weights of stream 5 (i mod 32 = 5), exactly as the model computes from that image.
TEST(NiuCosimNegative, WrongStreamStateIsDetected) {
    pcg32 rng(12, 12);
    constexpr std::size_t kStream = 5;
    const Case c = single_layer_case(random_codes(rng, 96 * 1024), "pcm_like", 3600.0);
    std::vector<std::uint32_t> image = c.program.to_words();
    const std::size_t word = gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_RNG_STATES + 4 * (0 * gen::NIU_BEAT_LANES + kStream);
    image[word] ^= 0x9e3779b9u;
    image[word + 3] ^= 0x7f4a7c15u;
    const RunResult r = run_rtl(c, image, 12);
    ASSERT_EQ(r.status.error, 0u);
    const auto corrupted = niu::NiuProgram::from_words(image);
    EXPECT_EQ(mismatches(r.written[0], model_output(corrupted.layers[0], c.layers[0].clean)), 0u);
    const auto expected = model_output(c.program.layers[0], c.layers[0].clean);
    std::size_t changed = 0, elsewhere = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        if (r.written[0][i] == expected[i]) continue;
        ++changed;
        elsewhere += i % gen::NIU_BEAT_LANES != kStream;
    }
    EXPECT_GE(changed, 1000u);
    EXPECT_EQ(elsewhere, 0u);
}

// A program image with a bad magic word is refused before any weight is written.
TEST(NiuCosimErrors, BadHeaderStopsWithAnError) {
    const Case c = random_case(4244, 1);
    std::vector<std::uint32_t> image = c.program.to_words();
    image[gen::NIU_PROG_MAGIC] ^= 1u;
    const RunResult r = run_rtl(c, image, 4244);
    EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_BAD_HEADER));
    EXPECT_EQ(r.guard_damage, 0u);
    for (std::size_t l = 0; l < c.layers.size(); ++l)
        EXPECT_TRUE(std::all_of(r.written[l].begin(), r.written[l].end(), [](std::int8_t v) { return std::uint8_t(v) == kGuard; }));
}

// A layer with OUT_BITS outside 2..8 stops the program before that layer's weights are written.
TEST(NiuCosimErrors, BadLayerFieldStopsWithAnError) {
    const Case c = random_case(4247, 1);
    std::vector<std::uint32_t> image = c.program.to_words();
    image[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_OUT_BITS] = 9;
    const RunResult r = run_rtl(c, image, 4247);
    EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_BAD_LAYER));
    EXPECT_EQ(r.guard_damage, 0u);
    EXPECT_TRUE(std::all_of(r.written[0].begin(), r.written[0].end(), [](std::int8_t v) { return std::uint8_t(v) == kGuard; }));
}

// Bus error responses end the program with the matching STATUS error, without hanging.
TEST(NiuCosimErrors, ReadErrorResponseIsReported) {
    const Case c = random_case(4245, 1);
    const auto& src = c.layers[0].spec;
    const RunResult r = run_rtl(c, c.program.to_words(), 4245, {src.src_addr, src.src_addr + 1});
    EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_READ_RESP));
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
}

// A read error stops the writes: nothing from the first beat with RRESP != OKAY on reaches the
// PU region, not even its noised data, and no write burst is started for those beats (bursts
// whose AW went out before the error was seen complete with WSTRB = 0).  The beats before it
// are written exactly as the model computes them.  A 64-beat layer with SLVERR on the read
// burst that holds beats 32..39: the memory answers SLVERR for every beat of a burst touching
// its error region, so the first error beat is the first beat of that burst (32 for bursts of
// 1, 4, 8 and 16 beats; 0 for one 64-beat burst).  With the AW channel racing ahead of W and W
// racing ahead of AW.  Found by review: all 1,024 bytes after the error were written.
TEST(NiuCosimErrors, ReadErrorStopsTheWritesAtTheErrorBeat) {
    constexpr std::uint64_t kBeats = 64;
    pcg32 rng(4250, 1);
    Case c = single_layer_case(random_codes(rng, kBeats * kBeat), "pcm_like", 3600.0);
    const niu::NiuLayerSpec& spec = c.layers[0].spec;
    ASSERT_EQ(spec.src_addr % 4096, 0u);  // burst boundaries at multiples of the burst length
    const auto expected = model_output(c.program.layers[0], c.layers[0].clean);
    const BackPressure aw_ahead{1.0, 0.7, 1.0, 0.2, 1.0}, w_ahead{1.0, 0.7, 0.15, 1.0, 0.6};
    for (const unsigned max_len : {0u, 3u, 7u, 15u, 127u}) {
        for (const BackPressure& bp : {BackPressure{}, aw_ahead, w_ahead}) {
            SCOPED_TRACE("max_len " + std::to_string(max_len) + " aw_ready " + std::to_string(bp.aw_ready));
            c.max_burst_len = max_len;
            c.bp = bp;
            const std::uint64_t burst = std::min<std::uint64_t>(max_len + 1, kBeats);
            const std::uint64_t first_error_beat = 35 / burst * burst;  // error region: beat 35 only
            const std::uint64_t error_at = spec.src_addr + 35 * kBeat;
            const RunResult r = run_rtl(c, c.program.to_words(), 4250 + max_len, {error_at, error_at + kBeat});
            EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_READ_RESP));
            EXPECT_FALSE(r.status.busy);
            EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
            EXPECT_EQ(r.guard_damage, 0u);
            const std::size_t split = std::size_t(first_error_beat * kBeat);
            const std::vector<std::int8_t> before(r.written[0].begin(), r.written[0].begin() + std::ptrdiff_t(split));
            EXPECT_EQ(before, std::vector<std::int8_t>(expected.begin(), expected.begin() + std::ptrdiff_t(split)));
            std::size_t written_after = 0;
            for (std::size_t i = split; i < r.written[0].size(); ++i) written_after += std::uint8_t(r.written[0][i]) != kGuard;
            EXPECT_EQ(written_after, 0u) << "bytes written from the error beat on";
        }
    }
}

TEST(NiuCosimErrors, WriteErrorResponseIsReported) {
    const Case c = random_case(4246, 1);
    const auto& dst = c.layers[0].spec;
    const RunResult r = run_rtl(c, c.program.to_words(), 4246, {dst.dst_addr, dst.dst_addr + 1});
    EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_WRITE_RESP));
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
}

// An error response on the last write burst, delivered late: STATUS.done must wait for every B
// response (not only for the last W beat), or the host reads the weights while an error is owed.
TEST(NiuCosimErrors, LateWriteErrorOnTheLastBurstIsReported) {
    pcg32 rng(7, 7);
    Case c = single_layer_case(random_codes(rng, 40 * kBeat + 5), "pcm_like", 3600.0);
    c.max_burst_len = 3;
    c.bp.b_valid = 0.02;
    const std::uint64_t last_beat = c.layers[0].spec.dst_addr + 40 * kBeat;
    const RunResult r = run_rtl(c, c.program.to_words(), 7, {last_beat, last_beat + 1});
    EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_WRITE_RESP));
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
}

// A program address that is not 32-byte aligned is refused at start.
TEST(NiuCosimErrors, MisalignedProgramIsRefused) {
    Harness sim(kMemoryBytes, 1, {}, 1);
    const NiuStatus s = sim.run_program(4096 + 4, 127, 1000);
    EXPECT_EQ(s.error, unsigned(gen::NIU_ERR_ALIGNMENT));
    EXPECT_FALSE(s.busy);
    EXPECT_TRUE(sim.memory().errors().empty());
    EXPECT_EQ(sim.memory().read_bursts(), 0u);
}

// MAX_BURST rewritten while a layer streams.  AW runs ahead of W (W stalls in 70 % of cycles), so
// a limit read live by both burst generators would put WLAST where no AWLEN says and leave the W
// generator waiting forever; each transfer keeps the limit it started with (docs/niu_rtl.md).
TEST(NiuCosimRegisters, MaxBurstWrittenWhileStreamingKeepsBurstsWhole) {
    pcg32 rng(1, 1);
    const Case c = single_layer_case(random_codes(rng, 400 * kBeat), "pcm_like", 3600.0);
    Harness sim(kMemoryBytes, 7, BackPressure{.w_ready = 0.3}, 7);
    sim.store_words(c.prog_addr, c.program.to_words());
    sim.store_bytes(c.layers[0].spec.src_addr, c.layers[0].clean);
    sim.start_program(c.prog_addr, 15);
    for (int i = 0; i < 1600; ++i) sim.tick();
    ASSERT_TRUE(sim.status().busy);
    ASSERT_GT(sim.read_reg(gen::NIU_REG_STREAM_BEATS).data, 0u);  // the layer is streaming
    EXPECT_EQ(sim.write_reg(gen::NIU_REG_MAX_BURST, 0), 0u);
    NiuStatus s;
    EXPECT_NO_THROW(s = sim.wait_done(100'000));
    EXPECT_TRUE(sim.memory().errors().empty()) << sim.memory().errors().size() << " violations, first: " << sim.memory().errors().front();
    ASSERT_TRUE(s.done);
    EXPECT_EQ(s.error, 0u);
    const auto& m = sim.memory().bytes();
    const std::uint64_t dst = c.layers[0].spec.dst_addr;
    const std::vector<std::int8_t> written(m.begin() + std::ptrdiff_t(dst), m.begin() + std::ptrdiff_t(dst + c.layers[0].spec.count));
    EXPECT_EQ(mismatches(written, model_output(c.program.layers[0], c.layers[0].clean)), 0u);
    // Nothing is left stuck: the same instance runs the program again, in one-beat bursts.
    const std::uint64_t bursts_before = sim.memory().write_bursts();
    EXPECT_EQ(sim.run_program(c.prog_addr, 0, 100'000).error, 0u);
    EXPECT_EQ(sim.memory().write_bursts() - bursts_before, 400u);
}

// Crafted images that from_words accepts and compile_program never produces: every table field at
// its maximum.  They drive the datapath into its saturation clamps (programmed conductance, drift
// exponent, drifted conductance, noisy conductance, back-conversion), which compiled programs never
// reach; the RTL must still match the model computed from the same image.
namespace {

constexpr std::uint32_t field_max(int bits) { return (std::uint32_t{1} << bits) - 1; }

std::uint32_t& layer_word(std::vector<std::uint32_t>& image, int offset) { return image[std::size_t(gen::NIU_PROG_HEADER_WORDS + offset)]; }

void expect_rtl_matches_model_on(const std::vector<std::uint32_t>& image, const Case& c, std::uint64_t seed) {
    const niu::NiuProgram crafted = niu::NiuProgram::from_words(image);
    const RunResult r = run_rtl(c, image, seed);
    ASSERT_EQ(r.status.error, 0u);
    const auto expected = model_output(crafted.layers[0], c.layers[0].clean);
    EXPECT_EQ(mismatches(r.written[0], expected), 0u);
    // The image really changes the weights (the corner is reached, not skipped).
    EXPECT_GT(mismatches(expected, model_output(c.program.layers[0], c.layers[0].clean)), 1000u);
}

Case corner_case() {
    pcg32 rng(3, 3);
    return single_layer_case(random_codes(rng, 150 * kBeat), "pcm_like", 3.15e7);
}

}  // namespace

TEST(NiuCosimCorners, CodeTableDriftAndBackScaleAtTheirMaxima) {
    const Case c = corner_case();
    std::vector<std::uint32_t> image = c.program.to_words();
    for (int a = 0; a < gen::NIU_CODE_TABLE; ++a) {
        layer_word(image, gen::NIU_LAYER_CODE_TABLE + 2 * a) = field_max(gen::NIU_G_BITS) | field_max(gen::NIU_SP_BITS) << gen::NIU_TABLE_FIELD_BITS;
        layer_word(image, gen::NIU_LAYER_CODE_TABLE + 2 * a + 1) = field_max(gen::NIU_NU_BITS) | field_max(gen::NIU_NU_BITS) << gen::NIU_TABLE_FIELD_BITS;
    }
    layer_word(image, gen::NIU_LAYER_DRIFT_LT) = field_max(gen::NIU_LT_BITS);
    layer_word(image, gen::NIU_LAYER_BACK_K) = field_max(gen::NIU_K_BITS);
    expect_rtl_matches_model_on(image, c, 31);
}

TEST(NiuCosimCorners, ReadSigmaAtItsMaximumWithoutDrift) {
    const Case c = corner_case();
    std::vector<std::uint32_t> image = c.program.to_words();
    for (int j = 0; j < gen::NIU_RT_SEGMENTS; ++j) layer_word(image, gen::NIU_LAYER_READ_TABLE + j) = field_max(gen::NIU_RT_VALUE_BITS);
    // Large targets with a small programming sigma, so the read noise pushes g past its maximum.
    for (int a = 1; a < gen::NIU_CODE_TABLE; ++a) layer_word(image, gen::NIU_LAYER_CODE_TABLE + 2 * a) = 0x7000u | 0x100u << gen::NIU_TABLE_FIELD_BITS;
    layer_word(image, gen::NIU_LAYER_DRIFT_LT) = 0;
    expect_rtl_matches_model_on(image, c, 32);
}

// Images that from_words refuses are refused by the RTL too, before any weight is written: the
// model and the hardware agree on every image, either by computing the same bytes or by both
// refusing it.
namespace {

void expect_refused_by_both(const Case& c, const std::vector<std::uint32_t>& image, unsigned error, std::uint64_t seed) {
    EXPECT_THROW(niu::NiuProgram::from_words(image), FormatError);
    const RunResult r = run_rtl(c, image, seed);
    EXPECT_EQ(r.status.error, error);
    EXPECT_FALSE(r.status.busy);
    EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();
    EXPECT_EQ(r.guard_damage, 0u);
    for (const auto& written : r.written)
        EXPECT_TRUE(std::all_of(written.begin(), written.end(), [](std::int8_t v) { return std::uint8_t(v) == kGuard; }));
}

}  // namespace

// A read-table segment whose end (RT + RD) leaves RT's 16 bits: the datapath would wrap the
// interpolated sigma where the model keeps it, so both refuse the image (ERR_BAD_LAYER).
TEST(NiuCosimErrors, ReadTableSegmentOutsideItsRangeIsRefused) {
    const Case c = corner_case();
    const std::uint32_t above = 65000u | 2000u << gen::NIU_TABLE_FIELD_BITS;  // ends at 67000
    const std::uint32_t below = 0u | 0xFFFFu << gen::NIU_TABLE_FIELD_BITS;   // 0 + (-1)
    for (const std::uint32_t entry : {above, below}) {
        SCOPED_TRACE(entry);
        std::vector<std::uint32_t> image = c.program.to_words();
        for (int j = 0; j < gen::NIU_RT_SEGMENTS; ++j) layer_word(image, gen::NIU_LAYER_READ_TABLE + j) = entry;
        layer_word(image, gen::NIU_LAYER_DRIFT_LT) = 0;
        expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_BAD_LAYER), 33);
    }
}

// A layer that starts inside the address space and runs past its end: its later bursts
// would wrap to address 0, so the layer's end is checked as well as its start (ERR_ADDR_RANGE).
TEST(NiuCosimErrors, LayerRunningPastTheAddressSpaceIsRefused) {
    pcg32 rng(5, 5);
    const Case c = single_layer_case(random_codes(rng, 2 * kBeat), "pcm_like", 3600.0);
    const std::uint64_t last_beat = (std::uint64_t{1} << gen::NIU_AXI_ADDR_BITS) - kBeat;
    for (const int field : {gen::NIU_LAYER_SRC_ADDR, gen::NIU_LAYER_DST_ADDR}) {
        SCOPED_TRACE(field);
        std::vector<std::uint32_t> image = c.program.to_words();
        layer_word(image, field) = std::uint32_t(last_beat);
        layer_word(image, field + 1) = std::uint32_t(last_beat >> 32);
        expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_ADDR_RANGE), 5);
    }
}

// The address space is the U50's 8 GiB of HBM, whose AXI ports carry 33 address bits: a layer
// region that ends above 8 GiB, or lies wholly in 8..16 GiB, would alias into low HBM there, so
// the RTL refuses it (ERR_ADDR_RANGE) before any burst, as the compiler and from_words do (with
// the former 34-bit space, 8..16 GiB ran and its bursts left the port's address range).
TEST(NiuCosimErrors, LayerEndingAboveTheEightGiBMemoryIsRefused) {
    constexpr std::uint64_t kMemory = std::uint64_t{8} << 30;
    pcg32 rng(6, 6);
    const Case c = single_layer_case(random_codes(rng, 2 * kBeat), "pcm_like", 3600.0);
    for (const std::uint64_t addr : {kMemory - kBeat, kMemory, kMemory + 4096, std::uint64_t{12} << 30}) {
        for (const int field : {gen::NIU_LAYER_SRC_ADDR, gen::NIU_LAYER_DST_ADDR}) {
            SCOPED_TRACE(std::to_string(addr) + " field " + std::to_string(field));
            std::vector<std::uint32_t> image = c.program.to_words();
            layer_word(image, field) = std::uint32_t(addr);
            layer_word(image, field + 1) = std::uint32_t(addr >> 32);
            expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_ADDR_RANGE), 6);
        }
    }
}

// A program within a layer block of the top of the address space: the block's read would wrap to
// address 0 and run on the words there (from_words cannot see where a program lies, and accepts
// it), so the NIU checks each block's end before reading it (ERR_ADDR_RANGE), for the first block
// (after the header) and for a later one (after a layer ran).  Found by review: error 0 and
// weights other than the model's before.
TEST(NiuCosimErrors, ALayerBlockRunningPastTheAddressSpaceIsRefusedBeforeItsRead) {
    const std::uint64_t top = std::uint64_t{1} << gen::NIU_AXI_ADDR_BITS;
    const std::uint64_t header_bytes = 4 * std::uint64_t(gen::NIU_PROG_HEADER_WORDS);
    const std::uint64_t block_bytes = 4 * std::uint64_t(gen::NIU_LAYER_WORDS);
    Case c;
    for (std::uint64_t seed = 4260; c.layers.size() < 2; ++seed) c = random_case(seed, 0);
    const std::vector<std::uint32_t> image = c.program.to_words();
    EXPECT_NO_THROW(niu::NiuProgram::from_words(image));
    for (const std::uint64_t blocks_that_fit : {std::uint64_t{0}, std::uint64_t{1}}) {
        SCOPED_TRACE(blocks_that_fit);
        // Half of the next block below the top (beat aligned), the rest would be past it.
        c.prog_addr = top - header_bytes - blocks_that_fit * block_bytes - block_bytes / 2 / kBeat * kBeat;
        c.top_window_bytes = 8192;
        const std::size_t words_below_top = std::size_t((top - c.prog_addr) / 4);
        const std::vector<std::uint32_t> stored(image.begin(), image.begin() + std::ptrdiff_t(words_below_top));
        const RunResult r = run_rtl(c, stored, 4260 + blocks_that_fit);
        EXPECT_EQ(r.status.error, unsigned(gen::NIU_ERR_ADDR_RANGE));
        EXPECT_FALSE(r.status.busy);
        EXPECT_TRUE(r.bus_errors.empty()) << r.bus_errors.front();  // no read went past the top
        EXPECT_EQ(r.guard_damage, 0u);
        for (std::size_t i = blocks_that_fit; i < r.written.size(); ++i)  // layers after the refused block: untouched
            EXPECT_TRUE(std::all_of(r.written[i].begin(), r.written[i].end(),
                                    [](std::int8_t v) { return std::uint8_t(v) == kGuard; }));
        if (blocks_that_fit == 1) EXPECT_EQ(r.written[0], model_output(c.program.layers[0], c.layers[0].clean));
    }
}

// NUM_LAYERS beyond what the LAYERS_DONE counter (NIU_LAYER_COUNT_BITS) counts: the program could
// never end, the NIU would read on past it; the header check refuses it (ERR_BAD_HEADER).
TEST(NiuCosimErrors, MoreLayersThanLayersDoneCountsIsRefused) {
    const Case c = random_case(4248, 1);
    std::vector<std::uint32_t> image = c.program.to_words();
    image[gen::NIU_PROG_NUM_LAYERS] = 1u << gen::NIU_LAYER_COUNT_BITS;
    expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_BAD_HEADER), 4248);
}

// The other program checks, each with the error code docs/niu_generated.md gives it.
TEST(NiuCosimErrors, HeaderVersionAndLayerBlockSizeAreChecked) {
    const Case c = random_case(4249, 1);
    for (const int word : {gen::NIU_PROG_VERSION, gen::NIU_PROG_LAYER_WORDS}) {
        SCOPED_TRACE(word);
        std::vector<std::uint32_t> image = c.program.to_words();
        image[std::size_t(word)] += 1;
        expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_BAD_HEADER), 4249);
    }
}

TEST(NiuCosimErrors, MisalignedLayerAddressesAreRefused) {
    const Case c = random_case(4250, 1);
    for (const int field : {gen::NIU_LAYER_SRC_ADDR, gen::NIU_LAYER_DST_ADDR}) {
        SCOPED_TRACE(field);
        std::vector<std::uint32_t> image = c.program.to_words();
        layer_word(image, field) += 4;
        expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_ALIGNMENT), 4250);
    }
}

TEST(NiuCosimErrors, BackScaleAndDriftWiderThanTheirFieldsAreRefused) {
    const Case c = random_case(4251, 1);
    for (const auto& [field, bits] : {std::pair{gen::NIU_LAYER_BACK_K, gen::NIU_K_BITS}, std::pair{gen::NIU_LAYER_DRIFT_LT, gen::NIU_LT_BITS}}) {
        SCOPED_TRACE(field);
        std::vector<std::uint32_t> image = c.program.to_words();
        layer_word(image, field) = 1u << bits;
        expect_refused_by_both(c, image, unsigned(gen::NIU_ERR_BAD_LAYER), 4251);
    }
}

// A program of no layers: the header is read, nothing else, and the NIU reports success.
TEST(NiuCosimErrors, ZeroLayerProgramEndsAfterItsHeader) {
    Harness sim(kMemoryBytes, 8, {}, 8);
    const std::vector<std::uint32_t> image = niu::NiuProgram{}.to_words();
    ASSERT_EQ(image.size(), std::size_t(gen::NIU_PROG_HEADER_WORDS));
    ASSERT_NO_THROW(niu::NiuProgram::from_words(image));
    sim.store_words(4096, image);
    const NiuStatus s = sim.run_program(4096, 127, 10'000);
    EXPECT_EQ(s.error, 0u);
    EXPECT_FALSE(s.busy);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 0u);
    EXPECT_EQ(sim.memory().read_bursts(), 1u);
    EXPECT_EQ(sim.memory().write_bursts(), 0u);
    EXPECT_TRUE(sim.memory().errors().empty()) << sim.memory().errors().front();
}

// CTRL.start while a program runs is ignored: the program runs once, to the end, unchanged.
TEST(NiuCosimRegisters, StartWhileBusyIsIgnored) {
    pcg32 rng(9, 9);
    // Long enough to still stream after 1200 cycles at 32 lanes (the block alone loads in ~900).
    const Case c = single_layer_case(random_codes(rng, 2000 * kBeat), "pcm_like", 3600.0);
    Harness sim(kMemoryBytes, 9, {}, 9);
    sim.store_words(c.prog_addr, c.program.to_words());
    sim.store_bytes(c.layers[0].spec.src_addr, c.layers[0].clean);
    sim.start_program(c.prog_addr, 127);
    for (int i = 0; i < 1200; ++i) sim.tick();
    ASSERT_TRUE(sim.status().busy);
    EXPECT_EQ(sim.write_reg(gen::NIU_REG_CTRL, 1), 0u);
    const NiuStatus s = sim.wait_done(200'000);
    EXPECT_EQ(s.error, 0u);
    EXPECT_FALSE(sim.status().busy);  // no second run started behind the first
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 1u);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_STREAM_BEATS).data, 2000u);
    const auto& m = sim.memory().bytes();
    const std::uint64_t dst = c.layers[0].spec.dst_addr;
    const std::vector<std::int8_t> written(m.begin() + std::ptrdiff_t(dst), m.begin() + std::ptrdiff_t(dst + c.layers[0].spec.count));
    EXPECT_EQ(mismatches(written, model_output(c.program.layers[0], c.layers[0].clean)), 0u);
}

// Reset asserted in the middle of a burst, or after a program ended, then a fresh program on the
// same instance.  The bus is reset as a whole (the AXI memory drops what was in flight,
// AxiMemory::reset), as a system reset resets both sides of an interface.  The flip-flops start at
// zero, as an FPGA configures them: a register missing from the reset then passes power-up and only
// this reset shows it (its mid-run value survives).  So every register the host reads must hold
// something other than its reset value when reset comes: LAYERS_DONE (a reset in the second
// layer), STATUS.done (after a finished program), the error code (after a failed one).  The NIU
// must hold ARVALID, AWVALID and WVALID low throughout reset (AXI A3.1.2), start nothing until
// CTRL.start, come out idle with no error and no layers done, and then run another program (other
// round and seed, other MAX_BURST) exactly as the model computes it, every destination byte
// rewritten (the aborted run's bytes are overwritten with the guard first) and no protocol
// violation on the bus.
namespace {

enum class ResetPoint { BlockRead, WeightRead, WeightWrite, SecondLayerWrite, AfterDone, AfterError };

struct ResetCase {
    ResetPoint point;
    const char* name;
};

std::string reset_case_name(const ::testing::TestParamInfo<ResetCase>& info) { return info.param.name; }

// Whether the bus is in the middle of the burst the reset should land in.  Header and block reads
// come before any write burst, the weights' reads overlap their writes; a write burst is caught
// with a W beat waiting for WREADY, so that the output buffer holds data when reset comes.  Layer
// 0 (300 beats in bursts of at most 16, split at 4 KiB) takes about 22 write bursts, so the 26th
// is in layer 1 (the test checks LAYERS_DONE before it resets).
bool in_reset_burst(const AxiMemory& m, ResetPoint point) {
    switch (point) {
        case ResetPoint::BlockRead: return m.write_bursts() == 0 && m.read_bursts() >= 3 && m.read_burst_open();
        case ResetPoint::WeightRead: return m.write_bursts() >= 1 && m.read_burst_open();
        case ResetPoint::WeightWrite: return m.write_bursts() >= 2 && m.write_burst_open() && m.write_beat_waiting();
        case ResetPoint::SecondLayerWrite:
            return m.write_bursts() >= 26 && m.write_burst_open() && m.write_beat_waiting();
        default: return false;
    }
}

// Two layers (the second not a whole number of beats) compiled twice: program A (round 3) is the
// one interrupted, program B (another seed and round) the one run after the reset.
struct TwoPrograms {
    Case a;
    niu::NiuProgram b;
    std::uint64_t b_addr = 0;
};

TwoPrograms reset_programs() {
    pcg32 rng(21, 21);
    TwoPrograms p;
    const std::uint32_t counts[] = {300 * kBeat, 173 * kBeat + 5};
    std::uint64_t next = 8192 + 96;  // not page-aligned: bursts also stop at 4 KiB boundaries
    std::vector<niu::NiuLayerSpec> specs;
    for (int l = 0; l < 2; ++l) {
        Layer layer;
        layer.clean = random_codes(rng, counts[l]);
        layer.spec.layer_id = std::uint32_t(l + 4);
        layer.spec.count = counts[l];
        layer.spec.absmax = niu::clean_absmax(layer.clean, niu::AbsMaxMode::Layer);
        layer.spec.src_addr = next;
        layer.spec.dst_addr = next + 16384;
        next += 32768 + 160;
        specs.push_back(layer.spec);
        p.a.layers.push_back(std::move(layer));
    }
    const auto noise = niu_noise_model("pcm_like", {});
    p.a.program = niu::compile_program(*noise, specs, {.seed = 5, .chip = 1, .round = 3, .t = 3600.0});
    p.b = niu::compile_program(*noise, specs, {.seed = 6, .chip = 1, .round = 4, .t = 86400.0});
    p.a.prog_addr = next + 4096 + 64;
    p.b_addr = p.a.prog_addr + kWordBytes * p.a.program.to_words().size() + 4096 + kBeat;
    p.a.max_burst_len = 15;
    p.a.bp = {.ar_ready = 0.6, .r_valid = 0.7, .aw_ready = 0.6, .w_ready = 0.5, .b_valid = 0.6};
    return p;
}

void fill_guard(Harness& sim, const Layer& l) {
    auto& m = sim.memory().bytes();
    std::fill(m.begin() + std::ptrdiff_t(l.spec.dst_addr - kGuardBytes),
              m.begin() + std::ptrdiff_t(l.spec.dst_addr + l.spec.count + kGuardBytes), kGuard);
}

void clock_into_burst(Harness& sim, ResetPoint point) {
    std::uint64_t waited = 0;
    while (!in_reset_burst(sim.memory(), point)) {
        sim.tick();
        ASSERT_LT(++waited, 400'000u) << "the bus never reached the reset point";
    }
}

// Runs program A up to the reset point: into a burst, or to its end (done, or failed by an error
// response to layer 1's first write).  Fails the test unless the registers the host reads then hold
// other values than after reset.
// Starts program A and clocks until STATUS.done, which it leaves set (Harness::wait_done clears it).
NiuStatus run_leaving_done_set(Harness& sim, const Case& a) {
    sim.start_program(a.prog_addr, a.max_burst_len);
    NiuStatus s = sim.status();
    for (std::uint64_t waited = 0; !s.done && waited < 400'000; waited += 64, s = sim.status())
        for (int i = 0; i < 64; ++i) sim.tick();
    return s;
}

void run_to_reset_point(Harness& sim, const TwoPrograms& p, ResetPoint point) {
    const Case& a = p.a;
    if (point == ResetPoint::AfterDone) {
        const NiuStatus s = run_leaving_done_set(sim, a);
        ASSERT_TRUE(s.done);
        ASSERT_EQ(s.error, 0u);
        ASSERT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 2u);
        return;
    }
    if (point == ResetPoint::AfterError) {
        const std::uint64_t dst = a.layers[1].spec.dst_addr;
        sim.memory().set_error_region(dst, dst + 1);
        const NiuStatus s = run_leaving_done_set(sim, a);
        sim.memory().set_error_region(0, 0);
        ASSERT_TRUE(s.done);
        ASSERT_EQ(s.error, unsigned(gen::NIU_ERR_WRITE_RESP));
        // Layer 0 finished cleanly and counts; layer 1, whose write failed, does not (nor does reset
        // leave the 1 standing: the test reads 0 after it).
        ASSERT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 1u);
        return;
    }
    sim.start_program(a.prog_addr, a.max_burst_len);
    clock_into_burst(sim, point);
    if (point == ResetPoint::SecondLayerWrite) {
        ASSERT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 1u);  // the register read takes cycles:
        clock_into_burst(sim, point);                                  // land in a burst again
    }
}

}  // namespace

class NiuCosimReset : public ::testing::TestWithParam<ResetCase> {};

TEST_P(NiuCosimReset, ResetThenAFreshProgramMatchesTheModel) {
    const TwoPrograms p = reset_programs();
    const Case& a = p.a;
    Harness sim(kMemoryBytes, 41, a.bp, 41, 0.0, InitialValues::Zero);
    sim.store_words(a.prog_addr, a.program.to_words());
    sim.store_words(p.b_addr, p.b.to_words());
    for (const auto& l : a.layers) {
        sim.store_bytes(l.spec.src_addr, l.clean);
        fill_guard(sim, l);
    }
    run_to_reset_point(sim, p, GetParam().point);
    if (HasFatalFailure()) return;
    EXPECT_EQ(sim.reset(5), 0u) << "a VALID was high during reset";

    // Out of reset: idle, nothing on the bus until the next CTRL.start.
    const std::uint64_t reads = sim.memory().read_bursts(), writes = sim.memory().write_bursts();
    for (int i = 0; i < 200; ++i) sim.tick();
    const NiuStatus idle = sim.status();
    EXPECT_FALSE(idle.busy);
    EXPECT_FALSE(idle.done);
    EXPECT_EQ(idle.error, 0u);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 0u);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_MAX_BURST).data, unsigned(gen::NIU_MAX_BURST_DEFAULT));
    EXPECT_EQ(sim.memory().read_bursts(), reads);
    EXPECT_EQ(sim.memory().write_bursts(), writes);

    // The fresh program, every destination byte to be written again.
    for (const auto& l : a.layers) fill_guard(sim, l);
    const NiuStatus s = sim.run_program(p.b_addr, 7, 400'000);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.error, 0u);
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, 2u);
    EXPECT_TRUE(sim.memory().errors().empty()) << sim.memory().errors().size() << " violations, first: " << sim.memory().errors().front();
    const auto& m = sim.memory().bytes();
    std::uint64_t beats = 0;
    for (std::size_t l = 0; l < a.layers.size(); ++l) {
        const niu::NiuLayerSpec& spec = a.layers[l].spec;
        const std::vector<std::int8_t> written(m.begin() + std::ptrdiff_t(spec.dst_addr),
                                               m.begin() + std::ptrdiff_t(spec.dst_addr + spec.count));
        const auto expected = model_output(p.b.layers[l], a.layers[l].clean);
        EXPECT_EQ(mismatches(written, expected), 0u) << "layer " << l;
        // Program B's bytes, not A's: the fresh run used its own tables and streams.
        EXPECT_GT(mismatches(expected, model_output(a.program.layers[l], a.layers[l].clean)), 1000u) << "layer " << l;
        std::size_t damaged = 0;
        for (std::uint64_t x = spec.dst_addr - kGuardBytes; x < spec.dst_addr; ++x) damaged += m[x] != kGuard;
        for (std::uint64_t x = spec.dst_addr + spec.count; x < spec.dst_addr + spec.count + kGuardBytes; ++x) damaged += m[x] != kGuard;
        EXPECT_EQ(damaged, 0u) << "layer " << l;
        beats += (spec.count + kBeat - 1) / kBeat;
    }
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_STREAM_BEATS).data, beats);
}

INSTANTIATE_TEST_SUITE_P(MidBurstAndAfterTheEnd, NiuCosimReset,
                         ::testing::Values(ResetCase{ResetPoint::BlockRead, "DuringALayerBlockRead"},
                                           ResetCase{ResetPoint::WeightRead, "DuringAWeightReadBurst"},
                                           ResetCase{ResetPoint::WeightWrite, "DuringAWriteBurst"},
                                           ResetCase{ResetPoint::SecondLayerWrite, "DuringASecondLayerWriteBurst"},
                                           ResetCase{ResetPoint::AfterDone, "AfterAFinishedProgram"},
                                           ResetCase{ResetPoint::AfterError, "AfterAFailedProgram"}),
                         reset_case_name);

// LAYERS_DONE after a bus error: a driver reads it as the number of layers whose weights are now
// in the PU region correctly, so it counts a layer only once its stream has ended with no error
// response, read or write (docs/niu_generated.md).  Program A of the reset tests (two layers,
// stalls on every channel) with an SLVERR on the first read or write burst of one layer's weights,
// or on its layer block: LAYERS_DONE is the number of layers before it, STATUS has the error code,
// and those layers hold exactly the model's bytes.
namespace {

enum class ErrorAt { WeightRead, WeightWrite, BlockRead };

struct LayersDoneCase {
    ErrorAt at;
    int layer;
    const char* name;
};

std::string layers_done_case_name(const ::testing::TestParamInfo<LayersDoneCase>& info) { return info.param.name; }

// The bytes an SLVERR region covers: the first byte of the layer's source, destination or block.
ErrorRegion error_region_for(const TwoPrograms& p, const LayersDoneCase& e) {
    const niu::NiuLayerSpec& spec = p.a.layers[std::size_t(e.layer)].spec;
    std::uint64_t at = 0;
    switch (e.at) {
        case ErrorAt::WeightRead: at = spec.src_addr; break;
        case ErrorAt::WeightWrite: at = spec.dst_addr; break;
        case ErrorAt::BlockRead:
            at = p.a.prog_addr + kWordBytes * (gen::NIU_PROG_HEADER_WORDS + std::uint64_t(e.layer) * gen::NIU_LAYER_WORDS);
            break;
    }
    return {at, at + 1};
}

}  // namespace

class NiuCosimLayersDone : public ::testing::TestWithParam<LayersDoneCase> {};

TEST_P(NiuCosimLayersDone, CountsOnlyLayersFinishedWithoutAnErrorResponse) {
    const LayersDoneCase e = GetParam();
    const TwoPrograms p = reset_programs();
    const Case& a = p.a;
    Harness sim(kMemoryBytes, 43, a.bp, 43);
    sim.store_words(a.prog_addr, a.program.to_words());
    for (const auto& l : a.layers) {
        sim.store_bytes(l.spec.src_addr, l.clean);
        fill_guard(sim, l);
    }
    const ErrorRegion region = error_region_for(p, e);
    sim.memory().set_error_region(region.begin, region.end);
    const NiuStatus s = sim.run_program(a.prog_addr, a.max_burst_len, 400'000);
    EXPECT_TRUE(s.done);
    EXPECT_FALSE(s.busy);
    EXPECT_EQ(s.error, unsigned(e.at == ErrorAt::WeightWrite ? gen::NIU_ERR_WRITE_RESP : gen::NIU_ERR_READ_RESP));
    EXPECT_EQ(sim.read_reg(gen::NIU_REG_LAYERS_DONE).data, unsigned(e.layer));
    EXPECT_TRUE(sim.memory().errors().empty()) << sim.memory().errors().front();
    // The layers counted are in place, byte for byte.
    const auto& m = sim.memory().bytes();
    for (int l = 0; l < e.layer; ++l) {
        const niu::NiuLayerSpec& spec = a.layers[std::size_t(l)].spec;
        const std::vector<std::int8_t> written(m.begin() + std::ptrdiff_t(spec.dst_addr),
                                               m.begin() + std::ptrdiff_t(spec.dst_addr + spec.count));
        EXPECT_EQ(mismatches(written, model_output(a.program.layers[std::size_t(l)], a.layers[std::size_t(l)].clean)), 0u)
            << "layer " << l;
    }
}

INSTANTIATE_TEST_SUITE_P(ErrorResponses, NiuCosimLayersDone,
                         ::testing::Values(LayersDoneCase{ErrorAt::WeightRead, 0, "ReadErrorInLayer0"},
                                           LayersDoneCase{ErrorAt::WeightRead, 1, "ReadErrorInLayer1"},
                                           LayersDoneCase{ErrorAt::WeightWrite, 0, "WriteErrorInLayer0"},
                                           LayersDoneCase{ErrorAt::WeightWrite, 1, "WriteErrorInLayer1"},
                                           LayersDoneCase{ErrorAt::BlockRead, 1, "BlockReadErrorInLayer1"}),
                         layers_done_case_name);

// Memory latency against the timing model (docs/niu_rtl.md, "Memory latency and the timing
// model").  niu_program_time charges the header, each layer's program block and its stream's fill
// and hand-offs (constants read off the controller), the layers' whole beats at Lanes weights per
// cycle, and the memory latency: a memory whose R data comes `read` cycles later and whose B comes
// `write` cycles later adds `read` once (the header) and 2 read + write per layer (the controller
// waits for the block's first beat, the weights' first beat and the last B, one after the other,
// while the bursts stay pipelined and the streaming rate does not change).  On an otherwise ideal
// bus the RTL's cycles from the first AR to the last B must be the model's, exactly, at every
// latency and lane count.
namespace {

struct LatencyCase {
    unsigned read, write;
};

std::string latency_case_name(const ::testing::TestParamInfo<LatencyCase>& info) {
    return "Read" + std::to_string(info.param.read) + "Write" + std::to_string(info.param.write);
}

// Three layers (one not a whole number of beats) on an otherwise ideal bus.
Case latency_program() {
    pcg32 rng(17, 17);
    const std::uint32_t counts[] = {200 * kBeat, 57 * kBeat + 9, 400 * kBeat};
    Case c;
    std::vector<niu::NiuLayerSpec> specs;
    std::uint64_t next = 4096 + 64;
    for (std::uint32_t count : counts) {
        Layer& layer = c.layers.emplace_back();
        layer.clean = random_codes(rng, count);
        layer.spec.layer_id = std::uint32_t(specs.size());
        layer.spec.count = count;
        layer.spec.absmax = niu::clean_absmax(layer.clean, niu::AbsMaxMode::Layer);
        layer.spec.src_addr = next;
        layer.spec.dst_addr = next + 16384;
        next += 32768;
        specs.push_back(layer.spec);
    }
    c.program = niu::compile_program(*niu_noise_model("pcm_like", {}), specs, {.seed = 8, .chip = 0, .round = 1, .t = 3600.0});
    c.prog_addr = next;
    return c;
}

// Runs `c` on a memory of the given latency; returns the cycles from the first AR to the last B,
// after checking the bytes against the model and the bus for violations.
std::uint64_t cycles_with_latency(const Case& c, unsigned read, unsigned write) {
    Harness sim(kMemoryBytes, 13, {}, 13);
    sim.memory().set_latency(read, write);
    sim.store_words(c.prog_addr, c.program.to_words());
    for (const Layer& l : c.layers) sim.store_bytes(l.spec.src_addr, l.clean);
    const NiuStatus s = sim.run_program(c.prog_addr, 127, 2'000'000);
    EXPECT_EQ(s.error, 0u);
    EXPECT_TRUE(sim.memory().errors().empty()) << sim.memory().errors().front();
    const auto& m = sim.memory().bytes();
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
        const niu::NiuLayerSpec& spec = c.layers[l].spec;
        const std::vector<std::int8_t> written(m.begin() + std::ptrdiff_t(spec.dst_addr),
                                               m.begin() + std::ptrdiff_t(spec.dst_addr + spec.count));
        EXPECT_EQ(mismatches(written, model_output(c.program.layers[l], c.layers[l].clean)), 0u) << "layer " << l;
    }
    return sim.memory().last_b_cycle() - sim.memory().first_ar_cycle() + 1;
}

}  // namespace

class NiuCosimLatency : public ::testing::TestWithParam<LatencyCase> {};

TEST_P(NiuCosimLatency, CyclesAreTheModelsToTheCycle) {
    const auto [read, write] = GetParam();
    const Case c = latency_program();
    const int layers = int(c.layers.size());
    const std::uint64_t term = read + std::uint64_t(layers) * (2 * read + write);
    const std::uint64_t base = cycles_with_latency(c, 0, 0);
    const std::uint64_t rtl = cycles_with_latency(c, read, write);
    EXPECT_EQ(rtl - base, term);

    // The model at this build's datapath rate (the RTL moves Lanes weights per cycle once a stream
    // runs; its fill is charged per layer); the test memory is no HBM channel, so its limit is lifted.
    NiuConfig cfg;
    cfg.lanes_per_cycle = kLanes;
    cfg.channel_bytes_per_s = 1e15;
    std::vector<std::int64_t> layer_weights;
    for (const auto& l : c.layers) layer_weights.push_back(l.spec.count);
    const double zero_latency = niu_program_time(cfg, layer_weights).cycles;
    cfg.read_latency_cycles = read;
    cfg.write_latency_cycles = write;
    const double model = niu_program_time(cfg, layer_weights).cycles;
    std::printf("%d lanes, read latency %u, write latency %u: RTL %llu cycles, model %.1f (zero latency: RTL %llu, model %.1f)\n",
                kLanes, read, write, (unsigned long long)rtl, model, (unsigned long long)base, zero_latency);
    EXPECT_EQ(double(base), zero_latency);
    EXPECT_EQ(double(rtl), model);
}

INSTANTIATE_TEST_SUITE_P(Memory, NiuCosimLatency,
                         ::testing::Values(LatencyCase{60, 60}, LatencyCase{150, 20}, LatencyCase{10, 200}),
                         latency_case_name);
