// The bit-exact NIU model: beat-level (RTL structure) and fast paths agree bit for bit, results
// do not depend on threads, the noise-free datapath is the identity, drift and compensation follow
// the closed form, chip persistence holds on the NIU's own output, bad input is rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "common/errors.hpp"

using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

std::vector<std::int8_t> random_codes(std::size_t n, std::uint32_t seed) {
    std::mt19937 gen(seed);  // test data only; the bit pattern, not its distribution, matters
    std::vector<std::int8_t> v(n);
    for (auto& c : v) c = std::int8_t(int(gen() % 256) - 128);
    return v;
}

NiuProgram compile_one(const std::string& model, const noise::NoiseParams& params, std::uint32_t count, int absmax,
                       NiuCompileOptions options, double alpha = 1.0) {
    auto m = noise::make_noise_model(model, params);
    NiuLayerSpec spec;
    spec.layer_id = 3;
    spec.count = count;
    spec.absmax = absmax;
    spec.alpha = alpha;
    return compile_program(*m, {spec}, options);
}

std::vector<std::int8_t> run_beats(const NiuLayerProgram& layer, const std::vector<std::int8_t>& clean) {
    NiuBeatModel beats(layer);
    std::vector<std::int8_t> out;
    for (std::size_t b = 0; b * kLanes < clean.size(); ++b) {
        std::array<std::int8_t, kLanes> in{};
        for (int k = 0; k < kLanes && b * kLanes + std::size_t(k) < clean.size(); ++k) in[std::size_t(k)] = clean[b * kLanes + std::size_t(k)];
        const auto res = beats.next_beat(in);
        for (int k = 0; k < kLanes; ++k) {
            if (b * kLanes + std::size_t(k) < clean.size()) out.push_back(res[std::size_t(k)]);
            else EXPECT_EQ(res[std::size_t(k)], 0) << "tail lane " << k;
        }
    }
    return out;
}

const noise::NoiseParams kNoNoise = {{"prog_noise_scale", 0.0}, {"read_noise_scale", 0.0}, {"drift_scale", 0.0}};

}  // namespace

TEST(NiuModel, BeatLevelModelEqualsFastPath) {
    const std::uint32_t count = 32 * 37 + 13;  // not a multiple of the beat
    const auto clean = random_codes(count, 1);
    for (double t : {0.0, 3600.0, 3.15e7}) {
        const NiuProgram p = compile_one("pcm_like", {}, count, 127, {.seed = 5, .chip = 2, .round = 7, .t = t});
        EXPECT_EQ(run_beats(p.layers[0], clean), apply_layer(p.layers[0], clean, 1)) << "t = " << t;
    }
}

TEST(NiuModel, SameKeyGivesIdenticalOutputForAnyThreadCount) {
    const std::uint32_t count = 200'003;  // several 32 Ki chunks and a ragged end
    const auto clean = random_codes(count, 2);
    const NiuProgram p = compile_one("hermes", {}, count, 127, {.seed = 1, .chip = 4, .round = 9, .t = 86400.0});
    const auto one = apply_layer(p.layers[0], clean, 1);
    for (int threads : {2, 3, 8}) EXPECT_EQ(apply_layer(p.layers[0], clean, threads), one) << threads;
    const NiuProgram again = compile_one("hermes", {}, count, 127, {.seed = 1, .chip = 4, .round = 9, .t = 86400.0});
    EXPECT_EQ(apply_layer(again.layers[0], clean, 2), one);
}

TEST(NiuModel, NoiseFreeDatapathIsTheIdentity) {
    std::vector<std::int8_t> clean;
    for (int c = -128; c <= 127; ++c) clean.push_back(std::int8_t(c));
    const NiuProgram fixed = compile_one("pcm_like", kNoNoise, 256, 127, {.t = 3600.0});
    const auto out = apply_layer(fixed.layers[0], clean);
    for (std::size_t i = 0; i < clean.size(); ++i) EXPECT_EQ(out[i], std::max<int>(clean[i], -127)) << int(clean[i]);

    // Layer abs-max mapping: codes up to A map to g_max and back exactly.
    std::vector<std::int8_t> small;
    for (int c = -90; c <= 90; ++c) small.push_back(std::int8_t(c));
    const NiuProgram layer = compile_one("pcm_like", kNoNoise, std::uint32_t(small.size()), clean_absmax(small, AbsMaxMode::Layer), {});
    EXPECT_EQ(clean_absmax(small, AbsMaxMode::Layer), 90);
    EXPECT_EQ(apply_layer(layer.layers[0], small), small);

    // A 4-bit PU weight code: code = round(c * 7 / 127), saturating at +-7.
    const NiuProgram four = compile_one("pcm_like", kNoNoise, 256, 127, {.out_bits = 4});
    const auto out4 = apply_layer(four.layers[0], clean);
    for (std::size_t i = 0; i < clean.size(); ++i) {
        const int c = std::max<int>(clean[i], -127);
        EXPECT_EQ(out4[i], (c < 0 ? -1 : 1) * int(std::floor(std::abs(c) * 7.0 / 127.0 + 0.5))) << c;
    }
}

TEST(NiuModel, DriftAndCompensationFollowTheClosedForm) {
    // Every device drifts with nu = 0.1 exactly; no programming or read noise.
    const noise::NoiseParams p = {{"prog_coeff", std::vector<double>{0.0, 0.0, 0.0}}, {"drift_nu_mean", 0.1},
                                  {"drift_nu_std", 0.0}, {"read_noise_scale", 0.0}};
    const double t = 86400.0;
    const double df = std::pow((t + 20.0) / 20.0, -0.1);
    std::vector<std::int8_t> clean;
    for (int c = -127; c <= 127; ++c) clean.push_back(std::int8_t(c));
    const auto drifted = apply_layer(compile_one("state_independent", p, 255, 127, {.t = t}).layers[0], clean);
    for (std::size_t i = 0; i < clean.size(); ++i) EXPECT_NEAR(drifted[i], clean[i] * df, 0.5 + 0.01) << int(clean[i]);
    // Global drift compensation alpha = 1/df folded into K restores every code.
    const auto compensated = apply_layer(compile_one("state_independent", p, 255, 127, {.t = t}, 1.0 / df).layers[0], clean);
    EXPECT_EQ(compensated, clean);
}

TEST(NiuModel, ChipPersistenceOnTheNiuOutput) {
    const std::uint32_t count = 20'000;
    const auto clean = random_codes(count, 3);
    auto run = [&](const noise::NoiseParams& params, std::uint64_t chip, std::uint64_t round, double t) {
        return apply_layer(compile_one("pcm_like", params, count, 127, {.seed = 11, .chip = chip, .round = round, .t = t}).layers[0], clean);
    };
    auto fraction_differing = [](const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b) {
        std::size_t n = 0;
        for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
        return double(n) / double(a.size());
    };
    // Programming and drift-exponent draws are the same in every round ...
    const noise::NoiseParams no_read = {{"read_noise_scale", 0.0}};
    EXPECT_EQ(run(no_read, 1, 0, 3600.0), run(no_read, 1, 5, 3600.0));
    // ... and at every t (no drift: only programming noise is left).
    const noise::NoiseParams prog_only = {{"read_noise_scale", 0.0}, {"drift_scale", 0.0}};
    const auto programmed = run(prog_only, 1, 0, 0.0);
    EXPECT_EQ(programmed, run(prog_only, 1, 3, 3.15e7));
    EXPECT_GT(fraction_differing(programmed, clean), 0.5);                // programming noise is there
    EXPECT_GT(fraction_differing(programmed, run(prog_only, 2, 0, 0.0)), 0.5);  // another chip differs
    // Read noise is fresh in every round.
    EXPECT_GT(fraction_differing(run({}, 1, 0, 3600.0), run({}, 1, 1, 3600.0)), 0.3);
}

TEST(NiuModel, StreamKeysFollowChipRoundAndTime) {
    auto compile = [](std::uint64_t round, double t) { return compile_one("pcm_like", {}, 64, 127, {.seed = 1, .chip = 1, .round = round, .t = t}).layers[0]; };
    const NiuLayerProgram a = compile(0, 0.0), b = compile(0, 3600.0), c = compile(4, 3600.0);
    EXPECT_EQ(a.chip_states, b.chip_states);
    EXPECT_EQ(a.chip_states, c.chip_states);
    EXPECT_EQ(a.read_states, b.read_states);  // read noise keyed by round, not t
    EXPECT_NE(b.read_states, c.read_states);
    EXPECT_NE(a.df, b.df);
}

TEST(NiuProgramImage, RoundTripsAndRejectsCorruptImages) {
    auto m = noise::make_noise_model("pcm_like", {});
    std::vector<NiuLayerSpec> specs(2);
    specs[0] = {.layer_id = 1, .count = 100, .absmax = 127, .alpha = 1.0, .src_addr = 0, .dst_addr = 4096};
    specs[1] = {.layer_id = 2, .count = 70, .absmax = 64, .alpha = 1.5, .src_addr = 128, .dst_addr = 8192};
    const NiuProgram p = compile_program(*m, specs, {.seed = 3, .t = 60.0});
    const auto words = p.to_words();
    EXPECT_EQ(words.size(), std::size_t(gen::NIU_PROG_HEADER_WORDS + 2 * gen::NIU_LAYER_WORDS));
    EXPECT_EQ(NiuProgram::from_words(words), p);

    auto bad = words;
    bad[gen::NIU_PROG_MAGIC] ^= 1u;
    EXPECT_THROW(NiuProgram::from_words(bad), FormatError);
    EXPECT_THROW(NiuProgram::from_words(std::span(words).first(words.size() - 1)), FormatError);
    bad = words;
    bad[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_OUT_BITS] = 9;
    EXPECT_THROW(NiuProgram::from_words(bad), FormatError);
}

TEST(NiuCompiler, RejectsBadInput) {
    auto pcm = noise::make_noise_model("pcm_like", {});
    const NiuLayerSpec ok{.layer_id = 0, .count = 10};
    EXPECT_THROW(compile_program(*pcm, {ok}, {.t = -1.0}), FormatError);
    EXPECT_THROW(compile_program(*pcm, {ok}, {.t = std::nan("")}), FormatError);
    EXPECT_THROW(compile_program(*pcm, {ok}, {.out_bits = 9}), FormatError);
    EXPECT_THROW(noise::make_noise_model("no_such_model", {}), FormatError);
    auto reram = noise::make_noise_model("reram_cmo", {});
    EXPECT_THROW(compile_program(*reram, {ok}, {}), FormatError);  // not a PCM-family model
    NiuLayerSpec bad = ok;
    bad.alpha = 0.0;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad = ok;
    bad.absmax = 0;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad = ok;
    bad.dst_addr = 16;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    const NiuProgram p = compile_program(*pcm, {ok}, {});
    const std::vector<std::int8_t> wrong(11);
    EXPECT_THROW(apply_layer(p.layers[0], wrong), FormatError);
}
