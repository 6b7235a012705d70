// The bit-exact NIU model: the per-weight specification (a plain loop here, stepping each stream
// one weight at a time), the beat model at every lane count, and the fast path's kernels (scalar
// and, where the CPU has it, AVX2) agree bit for bit for any thread count; the noise-free datapath
// is the identity; drift and compensation follow the closed form; chip persistence holds on the
// NIU's own output; bad input is rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/errors.hpp"
#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "niu_test_model.hpp"

using namespace aimcemu;
using namespace aimcemu::niu;
using niu_test::niu_noise_model;

namespace {

std::vector<std::int8_t> random_codes(std::size_t n, std::uint32_t seed) {
    std::mt19937 gen(seed);  // test data only; the bit pattern, not its distribution, matters
    std::vector<std::int8_t> v(n);
    for (auto& c : v) c = std::int8_t(int(gen() % 256) - 128);
    return v;
}

NiuProgram compile_one(const std::string& model, const noise::NoiseParams& params, std::uint32_t count, int absmax,
                       NiuCompileOptions options, double alpha = 1.0) {
    auto m = niu_noise_model(model, params);
    NiuLayerSpec spec;
    spec.layer_id = 3;
    spec.count = count;
    spec.absmax = absmax;
    spec.alpha = alpha;
    return compile_program(*m, {spec}, options);
}

// The specification as a loop: weight i takes one output of each generator of stream i mod 32.
std::vector<std::int8_t> reference(const NiuLayerProgram& layer, const std::vector<std::int8_t>& clean) {
    auto states = layer.rng;
    std::vector<std::int8_t> out(clean.size());
    for (std::size_t i = 0; i < clean.size(); ++i) {
        const std::size_t k = i % kStreams;
        std::uint32_t o[kGens];
        for (int g = 0; g < kGens; ++g) o[g] = xoshiro_next(states[std::size_t(g) * kStreams + k]);
        out[i] = noisy_code(layer, clean[i], draws_of(split_uniforms(o[0], o[1], o[2], o[3])));
    }
    return out;
}

std::vector<std::int8_t> run_groups(const NiuLayerProgram& layer, const std::vector<std::int8_t>& clean, int lanes) {
    NiuBeatModel model(layer, lanes);
    std::vector<std::int8_t> out;
    for (std::size_t g = 0; g * std::size_t(lanes) < (clean.size() + 31) / 32 * 32; ++g) {
        std::vector<std::int8_t> in(std::size_t(lanes), 0);
        for (int j = 0; j < lanes && g * std::size_t(lanes) + std::size_t(j) < clean.size(); ++j)
            in[std::size_t(j)] = clean[g * std::size_t(lanes) + std::size_t(j)];
        const auto res = model.next_group(in);
        for (int j = 0; j < lanes; ++j) {
            if (g * std::size_t(lanes) + std::size_t(j) < clean.size()) out.push_back(res[std::size_t(j)]);
            else EXPECT_EQ(res[std::size_t(j)], 0) << "tail lane " << j;
        }
    }
    return out;
}

const noise::NoiseParams kNoNoise = {{"prog_noise_scale", 0.0}, {"read_noise_scale", 0.0}, {"drift_scale", 0.0}};

}  // namespace

TEST(NiuModel, EveryPathEqualsTheSpecificationLoop) {
    const std::uint32_t count = 32 * 37 + 13;  // not a multiple of the beat
    const auto clean = random_codes(count, 1);
    for (double t : {0.0, 3600.0, 3.15e7}) {
        const NiuProgram p = compile_one("pcm_like", {}, count, 127, {.seed = 5, .chip = 2, .round = 7, .t = t});
        const auto expected = reference(p.layers[0], clean);
        for (int lanes : {1, 2, 4, 8, 16, 32}) EXPECT_EQ(run_groups(p.layers[0], clean, lanes), expected) << "lanes " << lanes;
        for (const std::string& kernel : available_kernels()) {
            std::vector<std::int8_t> out(clean.size());
            apply_layer_kernel(kernel, p.layers[0], clean, out);
            EXPECT_EQ(out, expected) << kernel << " t = " << t;
        }
    }
}

TEST(NiuModel, KernelsAgreeOnEveryModelWidthAndScale) {
    // Every kernel the CPU has, against the scalar one, over models, times, code widths, alpha.
    const auto kernels = available_kernels();
    if (kernels.size() == 1) GTEST_SKIP() << "this CPU has no AVX2: only the scalar kernel exists";
    const std::uint32_t count = 32 * 4099 + 5;
    const auto clean = random_codes(count, 11);
    int cases = 0;
    for (const char* model : {"pcm_like", "hermes", "state_independent"})
        for (double t : {0.0, 86400.0, 3.15e7})
            for (int out_bits : {8, 5, 2}) {
                const NiuProgram p = compile_one(model, {}, count, 100, {.seed = 9, .chip = 1, .round = 3, .t = t, .out_bits = out_bits},
                                                 out_bits == 5 ? 1.7 : 1.0);
                std::vector<std::int8_t> scalar(count), fast(count);
                apply_layer_kernel("scalar", p.layers[0], clean, scalar);
                for (const std::string& k : kernels) {
                    apply_layer_kernel(k, p.layers[0], clean, fast);
                    ASSERT_EQ(fast, scalar) << k << " " << model << " t=" << t << " B=" << out_bits;
                }
                ++cases;
            }
    EXPECT_EQ(cases, 27);
}

TEST(NiuModel, SameKeyGivesIdenticalOutputForAnyThreadCount) {
    const std::uint32_t count = 1'000'003;  // several thread parts and a ragged end
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
    for (double t : {3600.0, 86400.0, 3.15e7}) {
        const double df = std::pow((t + 20.0) / 20.0, -0.1);
        std::vector<std::int8_t> clean;
        for (int c = -127; c <= 127; ++c) clean.push_back(std::int8_t(c));
        const auto drifted = apply_layer(compile_one("state_independent", p, 255, 127, {.t = t}).layers[0], clean);
        // The exp2 interpolation and Q1.14 rounding stay within 0.02 code of the closed form.
        for (std::size_t i = 0; i < clean.size(); ++i) EXPECT_NEAR(drifted[i], clean[i] * df, 0.5 + 0.02) << int(clean[i]) << " t " << t;
        // Global drift compensation alpha = 1/df folded into K restores every code.
        const auto compensated = apply_layer(compile_one("state_independent", p, 255, 127, {.t = t}, 1.0 / df).layers[0], clean);
        EXPECT_EQ(compensated, clean) << "t " << t;
    }
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
    EXPECT_GT(fraction_differing(programmed, clean), 0.5);                     // programming noise is there
    EXPECT_GT(fraction_differing(programmed, run(prog_only, 2, 0, 0.0)), 0.5);  // another chip differs
    // Read noise is fresh in every round.
    EXPECT_GT(fraction_differing(run({}, 1, 0, 3600.0), run({}, 1, 1, 3600.0)), 0.3);
}

TEST(NiuModel, StreamKeysFollowChipRoundAndTime) {
    auto compile = [](std::uint64_t round, double t) {
        return compile_one("pcm_like", {}, 64, 127, {.seed = 1, .chip = 1, .round = round, .t = t}).layers[0];
    };
    const NiuLayerProgram a = compile(0, 0.0), b = compile(0, 3600.0), c = compile(4, 3600.0);
    auto chip_part = [](const NiuLayerProgram& l) { return std::vector<RngState>(l.rng.begin(), l.rng.begin() + kChipGens * kStreams); };
    auto read_part = [](const NiuLayerProgram& l) { return std::vector<RngState>(l.rng.begin() + kChipGens * kStreams, l.rng.end()); };
    EXPECT_EQ(chip_part(a), chip_part(b));
    EXPECT_EQ(chip_part(a), chip_part(c));
    EXPECT_EQ(read_part(a), read_part(b));  // read noise keyed by round, not t
    EXPECT_NE(read_part(b), read_part(c));
    EXPECT_EQ(a.drift_lt, 0u);
    EXPECT_NE(a.drift_lt, b.drift_lt);
    EXPECT_NE(a.rt, b.rt);
}

TEST(NiuProgramImage, RoundTripsAndRejectsCorruptImages) {
    auto m = niu_noise_model("pcm_like", {});
    std::vector<NiuLayerSpec> specs(2);
    specs[0] = {.layer_id = 1, .count = 100, .absmax = 127, .alpha = 1.0, .src_addr = 0, .dst_addr = 4096};
    specs[1] = {.layer_id = 2, .count = 70, .absmax = 64, .alpha = 1.5, .src_addr = 128, .dst_addr = 8192};
    const NiuProgram p = compile_program(*m, specs, {.seed = 3, .t = 60.0});
    const auto words = p.to_words();
    EXPECT_EQ(words.size(), std::size_t(gen::NIU_PROG_HEADER_WORDS + 2 * gen::NIU_LAYER_WORDS));
    EXPECT_EQ(NiuProgram::from_words(words), p);

    auto expect_field = [](const std::vector<std::uint32_t>& image, const std::string& field) {
        try {
            NiuProgram::from_words(image, "prog.bin");
            ADD_FAILURE() << "no error for " << field;
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("prog.bin"), std::string::npos) << e.what();
        }
    };
    auto bad = words;
    bad[gen::NIU_PROG_MAGIC] ^= 1u;
    expect_field(bad, "MAGIC");
    expect_field(std::vector<std::uint32_t>(words.begin(), words.end() - 1), "NUM_LAYERS");
    bad = words;
    bad[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_OUT_BITS] = 9;
    expect_field(bad, "layers[0].OUT_BITS");
    bad = words;
    bad[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_CODE_TABLE + 2 * 5] |= 1u << 15;  // GT[5] wider than 15 bits
    expect_field(bad, "layers[0].CODE_TABLE[5].GT");
    bad = words;
    for (int i = 0; i < 4; ++i) bad[gen::NIU_PROG_HEADER_WORDS + gen::NIU_LAYER_WORDS + gen::NIU_LAYER_RNG_STATES + 4 * 7 + i] = 0;
    expect_field(bad, "layers[1].RNG_STATES[7]");
}

// The NIU drifts from the programmed conductances; a model whose drift starts from aihwkit's
// re-converted weights (the float64 models' default) would run as "programmed" while its config
// said "reconverted", so the compiler refuses it, naming the field, for every PCM-family model.
TEST(NiuCompiler, RefusesReconvertedDriftReference) {
    const NiuLayerSpec ok{.layer_id = 0, .count = 10};
    for (const std::string name : {"pcm_like", "hermes", "state_independent", "custom_drift_pcm"}) {
        // custom_drift_pcm has no default drift table: a small one inside [0, g_max].
        noise::NoiseParams params;
        if (name == "custom_drift_pcm")
            params = {{"g_lst", std::vector<double>{0.0, 10.0, 25.0}}, {"nu_mean_lst", std::vector<double>{0.08, 0.06, 0.05}},
                      {"nu_std_lst", std::vector<double>{0.03, 0.02, 0.01}}};
        const auto model_default = noise::make_noise_model(name, params);
        params["drift_reference"] = std::string("reconverted");
        const auto reconverted = noise::make_noise_model(name, params);
        for (const auto* model : {reconverted.get(), model_default.get()}) {
            if (model->drift_reference() != noise::DriftReference::Reconverted) continue;
            for (int check = 0; check < 3; ++check) {
                try {
                    if (check == 0) check_model(*model);
                    if (check == 1) compile_program(*model, {ok}, {});
                    if (check == 2) check_runs_at(*model, 60.0);
                    ADD_FAILURE() << name << ": reconverted accepted by check " << check;
                } catch (const FormatError& e) {
                    const std::string what = e.what();
                    EXPECT_NE(what.find("'drift_reference'"), std::string::npos) << what;
                    EXPECT_NE(what.find("programmed"), std::string::npos) << what;
                }
            }
        }
        params.erase("drift_reference");
        EXPECT_NO_THROW(check_model(*niu_noise_model(name, params)));
    }
}

TEST(NiuCompiler, RejectsBadInput) {
    auto pcm = niu_noise_model("pcm_like", {});
    const NiuLayerSpec ok{.layer_id = 0, .count = 10};
    EXPECT_THROW(compile_program(*pcm, {ok}, {.t = -1.0}), FormatError);
    EXPECT_THROW(compile_program(*pcm, {ok}, {.t = std::nan("")}), FormatError);
    EXPECT_THROW(compile_program(*pcm, {ok}, {.out_bits = 9}), FormatError);
    EXPECT_THROW(noise::make_noise_model("no_such_model", {}), FormatError);
    auto reram = niu_noise_model("reram_cmo", {});
    try {
        compile_program(*reram, {ok}, {});
        ADD_FAILURE() << "reram_cmo accepted";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("model"), std::string::npos) << e.what();
    }
    NiuLayerSpec bad = ok;
    bad.alpha = 0.0;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad = ok;
    bad.alpha = max_alpha(127) * 1.01;  // K no longer fits its field
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad.alpha = max_alpha(127) * 0.99;
    EXPECT_NO_THROW(compile_program(*pcm, {bad}, {}));
    bad = ok;
    bad.absmax = 0;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad = ok;
    bad.dst_addr = 16;
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    bad = ok;
    bad.dst_addr = std::uint64_t(1) << gen::NIU_AXI_ADDR_BITS;  // beyond the NIU's address space
    EXPECT_THROW(compile_program(*pcm, {bad}, {}), FormatError);
    const NiuProgram p = compile_program(*pcm, {ok}, {});
    const std::vector<std::int8_t> wrong(11);
    EXPECT_THROW(apply_layer(p.layers[0], wrong), FormatError);
}

// The address space is the memory's 8 GiB (the U50's HBM, whose AXI ports carry 33 address
// bits): a weight region that ends above 8 GiB would alias into low memory on that port, so the
// compiler refuses it, naming the field, and accepts one in the top beats below it.  (With a
// 34-bit space, 8..16 GiB passed.)  The end (address + COUNT, exclusive) must be below 2^33, as
// the RTL checks it.  The RTL refuses the same images: NiuCosimErrors in
// tests/cosim/test_niu_cosim.cpp.
TEST(NiuCompiler, RefusesWeightRegionsEndingAboveTheEightGiBMemory) {
    constexpr std::uint64_t kMemory = std::uint64_t{8} << 30;
    EXPECT_EQ(std::uint64_t{1} << gen::NIU_AXI_ADDR_BITS, kMemory);
    auto pcm = niu_noise_model("pcm_like", {});
    const NiuLayerSpec ok{.layer_id = 0, .count = 64, .absmax = 127, .alpha = 1.0, .src_addr = 0,
                          .dst_addr = kMemory - 96};  // ends one beat below the top
    EXPECT_NO_THROW(compile_program(*pcm, {ok}, {}));
    struct Bad {
        std::uint64_t src, dst;
    };
    for (const Bad b : {Bad{kMemory - 32, 4096}, Bad{0, kMemory - 32}, Bad{kMemory, 4096}, Bad{0, kMemory + 4096},
                        Bad{(std::uint64_t{12} << 30), 4096}}) {
        SCOPED_TRACE(std::to_string(b.src) + " -> " + std::to_string(b.dst));
        NiuLayerSpec bad = ok;
        bad.src_addr = b.src;
        bad.dst_addr = b.dst;
        try {
            compile_program(*pcm, {bad}, {});
            ADD_FAILURE() << "a region ending above 8 GiB was accepted";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("layers[0].addr"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("33-bit address space"), std::string::npos) << e.what();
        }
    }
}

// Images the RTL refuses (docs/niu_rtl.md, "Program checks") are refused here too, so the model
// never computes weights for an image the hardware would run differently or not at all.
TEST(NiuProgramImage, RejectsImagesTheRtlRefuses) {
    auto m = niu_noise_model("pcm_like", {});
    const NiuLayerSpec spec{.layer_id = 1, .count = 100, .absmax = 127, .alpha = 1.0, .src_addr = 0, .dst_addr = 4096};
    const auto words = compile_program(*m, {spec}, {.seed = 3, .t = 60.0}).to_words();
    auto expect_refused = [](const std::vector<std::uint32_t>& image, const std::string& field, const std::string& why) {
        try {
            NiuProgram::from_words(image, "prog.bin");
            ADD_FAILURE() << "no error for " << field;
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("prog.bin"), std::string::npos) << e.what();
        }
    };
    auto layer_word = [](std::vector<std::uint32_t>& image, int offset) -> std::uint32_t& {
        return image[std::size_t(gen::NIU_PROG_HEADER_WORDS + offset)];
    };
    // A read-table segment that interpolates above the 16-bit read sigma (the RTL would wrap it).
    auto bad = words;
    layer_word(bad, gen::NIU_LAYER_READ_TABLE + 5) = 65000u | 2000u << 16;
    expect_refused(bad, "layers[0].READ_TABLE[5]", "above");
    layer_word(bad, gen::NIU_LAYER_READ_TABLE + 5) = 0xFFFFu;  // ends exactly at the maximum: fine
    EXPECT_NO_THROW(NiuProgram::from_words(bad));
    // A layer that starts inside the address space and ends beyond it (its bursts would wrap to 0).
    const std::uint64_t last_beat = (std::uint64_t{1} << gen::NIU_AXI_ADDR_BITS) - gen::NIU_AXI_BEAT_BYTES;
    bad = words;
    layer_word(bad, gen::NIU_LAYER_SRC_ADDR) = std::uint32_t(last_beat);
    layer_word(bad, gen::NIU_LAYER_SRC_ADDR + 1) = std::uint32_t(last_beat >> 32);
    expect_refused(bad, "layers[0].SRC_ADDR", "address space");
    bad = words;
    layer_word(bad, gen::NIU_LAYER_DST_ADDR) = std::uint32_t(last_beat);
    layer_word(bad, gen::NIU_LAYER_DST_ADDR + 1) = std::uint32_t(last_beat >> 32);
    expect_refused(bad, "layers[0].DST_ADDR", "address space");
    // More layers than the 16-bit LAYERS_DONE counter can count (refused before the size check).
    bad = words;
    bad[gen::NIU_PROG_NUM_LAYERS] = 1u << gen::NIU_LAYER_COUNT_BITS;
    expect_refused(bad, "NUM_LAYERS", "at most");
}

// The compiler refuses a program the RTL would refuse for its length (checked before any layer
// is compiled, so this costs nothing).
TEST(NiuProgramImage, CompilerRefusesMoreLayersThanLayersDoneCounts) {
    auto m = niu_noise_model("pcm_like", {});
    const NiuLayerSpec spec{.layer_id = 1, .count = 32, .absmax = 127, .alpha = 1.0, .src_addr = 0, .dst_addr = 4096};
    const std::vector<NiuLayerSpec> specs(std::size_t{1} << gen::NIU_LAYER_COUNT_BITS, spec);
    try {
        compile_program(*m, specs, {});
        ADD_FAILURE() << "no error for " << specs.size() << " layers";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("layers"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("at most 65535"), std::string::npos) << e.what();
    }
}

TEST(NiuBeatModelLanes, RejectsALaneCountTheRtlCannotHave) {
    const NiuProgram p = compile_one("pcm_like", {}, 64, 127, {});
    for (int lanes : {0, 3, 5, 12, 64}) {
        try {
            NiuBeatModel m(p.layers[0], lanes);
            ADD_FAILURE() << "lanes " << lanes << " accepted";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("lanes"), std::string::npos) << e.what();
        }
    }
}

// ---- kept chip state --------------------------------------------------------------------------

namespace {

// Every way of computing a chip state (each kernel on one thread, the best kernel on 1-3 threads).
// The words of a chip state are the specification's programmed devices: weight i's g+ and g-
// from its chip draws, runs of sixteen (gp+, nu+, gp-, nu-); the words past the layer are 0.
void expect_specified_words(const NiuLayerProgram& layer, const std::vector<std::int8_t>& clean, const NiuChipState& s) {
    const std::uint32_t count = std::uint32_t(clean.size());
    ASSERT_EQ(s.words.size(), std::size_t(count + 31) / 32 * 128);
    auto states = layer.rng;
    for (std::uint32_t i = 0; i < count; ++i) {
        std::uint32_t o[kGens];
        for (int g = 0; g < kGens; ++g) o[g] = xoshiro_next(states[std::size_t(g) * kStreams + i % kStreams]);
        const WeightDraws z = draws_of(split_uniforms(o[0], o[1], o[2], o[3]));
        const bool negative = clean[i] < 0;
        const CodeEntry& on = layer.code[std::size_t(std::min(std::abs(int(clean[i])), kCodeTable - 1))];
        const CodeEntry& off = layer.code[0];
        const ProgrammedDevice plus = program_device(negative ? off : on, z.prog_plus, z.nu_plus);
        const ProgrammedDevice minus = program_device(negative ? on : off, z.prog_minus, z.nu_minus);
        const std::size_t w = i / 16 * 64 + i % 16;  // runs of sixteen: gp+, nu+, gp-, nu-
        ASSERT_EQ(s.words[w], std::uint16_t(plus.gp | (negative ? 0x8000 : 0))) << i;
        ASSERT_EQ(s.words[w + 16], std::uint16_t(plus.nu)) << i;
        ASSERT_EQ(s.words[w + 32], std::uint16_t(minus.gp)) << i;
        ASSERT_EQ(s.words[w + 48], std::uint16_t(minus.nu)) << i;
    }
    for (std::size_t w = 0; w < s.words.size(); ++w)
        if (w / 64 * 16 + w % 16 >= count) ASSERT_EQ(s.words[w], 0) << "padding word " << w;
}

std::vector<std::pair<std::string, NiuChipState>> chip_states_every_way(const NiuLayerProgram& layer,
                                                                        const std::vector<std::int8_t>& clean) {
    std::vector<std::pair<std::string, NiuChipState>> states;
    for (const std::string& k : available_kernels()) states.emplace_back(k, chip_state_kernel(k, layer, clean));
    for (int threads : {1, 2, 3}) states.emplace_back("best, " + std::to_string(threads) + " threads", chip_state(layer, clean, threads));
    return states;
}

}  // namespace

TEST(NiuKeptChipState, RoundHalfEqualsTheSpecificationForEveryRoundTimeAndThreadCount) {
    // A chip half computed once (from the round-0, t = 0 program) and the round half of later
    // programs of the same chip give the specification loop's bytes for every round and t.
    // 3 * 4096 beats + a ragged end: three thread parts, a last block of 8 and a last beat cut short.
    const std::uint32_t count = 32 * 3 * 4096 + 32 * 5 + 13;
    const auto clean = random_codes(count, 21);
    int cases = 0;
    for (const char* model : {"pcm_like", "hermes"})
        for (int out_bits : {8, 4}) {
            const NiuCompileOptions at_programming{.seed = 17, .chip = 6, .round = 0, .t = 0.0, .out_bits = out_bits};
            const NiuProgram programmed = compile_one(model, {}, count, 90, at_programming);
            const auto states = chip_states_every_way(programmed.layers[0], clean);
            for (const auto& [way, state] : states) ASSERT_EQ(state.words, states[0].second.words) << way << " " << model;
            // Devices clamped at gp = 0 (off devices with negative programming noise) take the
            // kernels' no-leading-one path of the read-sigma lookup: make sure there are many.
            std::size_t zero_gp = 0;
            for (std::uint32_t i = 0; i < count; ++i)
                zero_gp += (states[0].second.words[i / 16 * 64 + i % 16] & 0x7FFF) == 0;
            EXPECT_GT(zero_gp, count / 20) << model;
            for (std::uint64_t round : {0u, 1u, 12u})
                for (double t : {0.0, 3600.0, 3.15e7}) {
                    NiuCompileOptions o = at_programming;
                    o.round = round;
                    o.t = t;
                    const NiuProgram p = compile_one(model, {}, count, 90, o);
                    const auto expected = reference(p.layers[0], clean);
                    std::vector<std::int8_t> out(count);
                    for (const std::string& k : available_kernels()) {
                        std::fill(out.begin(), out.end(), std::int8_t(99));
                        apply_kept_kernel(k, p.layers[0], states[0].second, out);
                        ASSERT_EQ(out, expected) << k << " " << model << " B=" << out_bits << " round " << round << " t=" << t;
                    }
                    for (int threads : {1, 2, 3}) {
                        std::fill(out.begin(), out.end(), std::int8_t(99));
                        apply_kept(p.layers[0], states.back().second, out, threads);
                        ASSERT_EQ(out, expected) << threads << " threads " << model << " round " << round << " t=" << t;
                    }
                    ++cases;
                }
        }
    EXPECT_EQ(cases, 2 * 2 * 3 * 3);
}

TEST(NiuKeptChipState, IsTheSameChipInEveryRoundAndAtEveryTime) {
    const std::uint32_t count = 32 * 50 + 7;
    const auto clean = random_codes(count, 22);
    const NiuProgram a = compile_one("pcm_like", {}, count, 127, {.seed = 3, .chip = 2, .round = 0, .t = 0.0});
    const NiuProgram b = compile_one("pcm_like", {}, count, 127, {.seed = 3, .chip = 2, .round = 9, .t = 1e6});
    EXPECT_TRUE(is_chip_state_of(chip_state(a.layers[0], clean, 1), b.layers[0]));
    EXPECT_EQ(chip_state(a.layers[0], clean, 1).words, chip_state(b.layers[0], clean, 1).words);
    expect_specified_words(a.layers[0], clean, chip_state(a.layers[0], clean, 1));
}

TEST(NiuKeptChipState, ARecomputedStateWritesEveryWordWhateverItsBufferHeld) {
    // recompute_chip_state reuses a state's memory without clearing it: every word must be
    // written.  Buffers of garbage (the right size, larger, smaller) and another chip's state
    // must all give the specification's words, padding included, for every kernel and thread
    // count; 2 * 4096 beats + a ragged end make several thread parts and a last beat cut short.
    const std::uint32_t count = 32 * 2 * 4096 + 32 * 3 + 13;
    const auto clean = random_codes(count, 23);
    const NiuProgram chip1 = compile_one("pcm_like", {}, count, 101, {.seed = 5, .chip = 1, .round = 0, .t = 0.0});
    const NiuProgram chip2 = compile_one("pcm_like", {}, count, 101, {.seed = 5, .chip = 2, .round = 3, .t = 60.0});
    const std::size_t words = chip_state(chip1.layers[0], clean, 1).words.size();
    int cases = 0;
    for (const std::size_t garbage_words : {words, words + 1000, words / 3, std::size_t(0)}) {
        auto state_of_garbage = [&] {
            NiuChipState s = chip_state(chip2.layers[0], clean, 1);  // another chip's state ...
            s.words.assign(garbage_words, std::uint16_t(0xA5A5));    // ... or garbage of any size
            return s;
        };
        for (const std::string& k : available_kernels()) {
            NiuChipState s = state_of_garbage();
            recompute_chip_state_kernel(k, chip1.layers[0], clean, s);
            ASSERT_TRUE(is_chip_state_of(s, chip1.layers[0])) << k;
            expect_specified_words(chip1.layers[0], clean, s);
            ++cases;
        }
        for (int threads : {1, 2, 3}) {
            NiuChipState s = state_of_garbage();
            recompute_chip_state(chip1.layers[0], clean, s, threads);
            ASSERT_TRUE(is_chip_state_of(s, chip1.layers[0])) << threads;
            expect_specified_words(chip1.layers[0], clean, s);
            ++cases;
        }
    }
    // And a state recomputed over another chip's, in place, is that chip's state, not a mix.
    NiuChipState s = chip_state(chip1.layers[0], clean, 2);
    recompute_chip_state(chip2.layers[0], clean, s, 2);
    EXPECT_FALSE(is_chip_state_of(s, chip1.layers[0]));
    EXPECT_EQ(s.words, chip_state(chip2.layers[0], clean, 1).words);
    EXPECT_EQ(cases, 4 * int(available_kernels().size() + 3));
}

TEST(NiuProgram, TheCodeTableGivesBackTheAbsMaxItWasCompiledFor) {
    // compile_program maps |c| >= A to full scale and every smaller code below it, so A is the
    // first full-scale code, for every A the compiler takes (127: absmax "fixed").
    for (const char* model : {"pcm_like", "hermes"})
        for (int absmax = 1; absmax <= 127; ++absmax)
            ASSERT_EQ(code_table_absmax(compile_one(model, {}, 64, absmax, {.seed = 1}).layers[0]), absmax) << model;
}

TEST(NiuKeptChipState, RejectsAStateOfAnotherChipLayerOrSize) {
    const std::uint32_t count = 1000;
    const auto clean = random_codes(count, 23);
    const NiuProgram p = compile_one("pcm_like", {}, count, 127, {.seed = 3, .chip = 2, .round = 1, .t = 60.0});
    const NiuChipState s = chip_state(p.layers[0], clean);
    std::vector<std::int8_t> out(count);
    for (const NiuCompileOptions& other : {NiuCompileOptions{.seed = 3, .chip = 5, .round = 1, .t = 60.0},
                                           NiuCompileOptions{.seed = 4, .chip = 2, .round = 1, .t = 60.0}}) {
        const NiuProgram q = compile_one("pcm_like", {}, count, 127, other);
        try {
            apply_kept(q.layers[0], s, out);
            ADD_FAILURE() << "a chip state of another chip was accepted";
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find("chip_state"), std::string::npos) << e.what();
        }
    }
    // Another noise model (another code table) under the same key.
    EXPECT_THROW(apply_kept(compile_one("hermes", {}, count, 127, {.seed = 3, .chip = 2}).layers[0], s, out), FormatError);
    // Another size, and an output of the wrong size.
    EXPECT_THROW(apply_kept(compile_one("pcm_like", {}, count + 1, 127, {.seed = 3, .chip = 2}).layers[0], s, out), FormatError);
    std::vector<std::int8_t> short_out(count - 1);
    EXPECT_THROW(apply_kept(p.layers[0], s, short_out), FormatError);
    EXPECT_THROW(chip_state(p.layers[0], std::span(clean.data(), count - 1)), FormatError);
    EXPECT_THROW(chip_state_kernel("sse2", p.layers[0], clean), FormatError);
}

namespace {

// A network of layers of uneven sizes: small ones (below one thread part of 512 beats), ragged
// ends (a last beat cut short, a last block of fewer than sixteen), a single weight.
struct KeptNetwork {
    std::vector<std::vector<std::int8_t>> clean;
    NiuProgram programmed;  // round 0, t = 0: where the chip states come from
    std::vector<NiuChipState> states;
};

KeptNetwork kept_network(const std::string& model, int out_bits) {
    KeptNetwork net;
    const std::vector<std::uint32_t> counts{32 * 700 + 5, 100, 32 * 1500, 1, 32 * 37 + 31, 32 * 2000 + 17, 32 * 300};
    std::vector<NiuLayerSpec> specs;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        net.clean.push_back(random_codes(counts[i], 40 + std::uint32_t(i)));
        NiuLayerSpec spec;
        spec.layer_id = i;
        spec.count = counts[i];
        spec.absmax = clean_absmax(net.clean.back(), AbsMaxMode::Layer);
        specs.push_back(spec);
    }
    auto m = niu_noise_model(model, {});
    net.programmed = compile_program(*m, specs, {.seed = 8, .chip = 3, .round = 0, .t = 0.0, .out_bits = out_bits});
    for (std::size_t i = 0; i < counts.size(); ++i) net.states.push_back(chip_state(net.programmed.layers[i], net.clean[i], 1));
    return net;
}

}  // namespace

TEST(NiuKeptChipState, NetworkJobEqualsTheSpecificationPerLayerForEveryKernelAndThreadCount) {
    // One job over all layers splits the layers' beats end to end into one range per thread, so
    // part boundaries fall inside layers, at layer ends and around small layers; every layer's
    // bytes must still be the specification loop's (and so apply_kept's).
    int cases = 0;
    for (const char* model : {"pcm_like", "hermes"})
        for (int out_bits : {8, 4}) {
            const KeptNetwork net = kept_network(model, out_bits);
            for (std::uint64_t round : {1u, 12u}) {
                auto m = niu_noise_model(model, {});
                NiuCompileOptions o{.seed = 8, .chip = 3, .round = round, .t = 3600.0 * double(round), .out_bits = out_bits};
                std::vector<NiuLayerSpec> specs;
                for (std::size_t i = 0; i < net.clean.size(); ++i) {
                    NiuLayerSpec spec;
                    spec.layer_id = i;
                    spec.count = std::uint32_t(net.clean[i].size());
                    spec.absmax = clean_absmax(net.clean[i], AbsMaxMode::Layer);
                    specs.push_back(spec);
                }
                const NiuProgram p = compile_program(*m, specs, o);
                std::vector<std::vector<std::int8_t>> expected;
                for (std::size_t i = 0; i < net.clean.size(); ++i) expected.push_back(reference(p.layers[i], net.clean[i]));
                std::vector<std::string> kernels = available_kernels();
                kernels.push_back("");  // the best
                for (const std::string& k : kernels)
                    for (int threads : {1, 2, 3, 5, 8}) {
                        if (!k.empty() && threads > 2) continue;  // named kernels: 1 and 2 threads
                        std::vector<std::vector<std::int8_t>> out;
                        std::vector<KeptLayer> round_layers;
                        for (std::size_t i = 0; i < net.clean.size(); ++i) out.emplace_back(net.clean[i].size(), std::int8_t(99));
                        for (std::size_t i = 0; i < net.clean.size(); ++i) round_layers.push_back({&p.layers[i], &net.states[i], out[i]});
                        apply_kept_network(round_layers, threads, k);
                        for (std::size_t i = 0; i < net.clean.size(); ++i)
                            ASSERT_EQ(out[i], expected[i]) << "layer " << i << " kernel '" << k << "' " << threads << " threads "
                                                           << model << " B=" << out_bits << " round " << round;
                        ++cases;
                    }
            }
        }
    EXPECT_EQ(cases, 2 * 2 * 2 * (2 * int(available_kernels().size()) + 5));
}

TEST(NiuKeptChipState, NetworkJobNamesTheLayerOfAWrongStateOrOutput) {
    const KeptNetwork net = kept_network("pcm_like", 8);
    std::vector<std::vector<std::int8_t>> out;
    for (const auto& c : net.clean) out.emplace_back(c.size());
    auto round_of = [&](const NiuProgram& p) {
        std::vector<KeptLayer> r;
        for (std::size_t i = 0; i < net.clean.size(); ++i) r.push_back({&p.layers[i], &net.states[i], out[i]});
        return r;
    };
    auto field_of = [](const std::vector<KeptLayer>& r) {
        try {
            apply_kept_network(r, 2);
        } catch (const FormatError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    // Layer 4 given layer 5's state (another size).
    std::vector<KeptLayer> swapped = round_of(net.programmed);
    swapped[4].chip = &net.states[5];
    EXPECT_NE(field_of(swapped).find("layers[4].weights"), std::string::npos) << field_of(swapped);
    // The same layer of another chip: same size, other chip streams.
    auto m = niu_noise_model("pcm_like", {});
    const NiuProgram other_chip = compile_program(*m, {NiuLayerSpec{.layer_id = 6, .count = std::uint32_t(net.clean[6].size()),
                                                                    .absmax = clean_absmax(net.clean[6], AbsMaxMode::Layer)}},
                                                  {.seed = 8, .chip = 4, .round = 0, .t = 0.0});
    std::vector<KeptLayer> wrong_chip = round_of(net.programmed);
    wrong_chip[6].layer = &other_chip.layers[0];
    EXPECT_NE(field_of(wrong_chip).find("layers[6].chip_state"), std::string::npos) << field_of(wrong_chip);
    // An output of the wrong size.
    std::vector<KeptLayer> short_out = round_of(net.programmed);
    short_out[2].out = short_out[2].out.first(short_out[2].out.size() - 1);
    EXPECT_NE(field_of(short_out).find("layers[2].weights"), std::string::npos) << field_of(short_out);
    // A layer without a state; an unknown kernel.
    std::vector<KeptLayer> missing = round_of(net.programmed);
    missing[0].chip = nullptr;
    EXPECT_NE(field_of(missing).find("layers[0].chip_state"), std::string::npos) << field_of(missing);
    EXPECT_THROW(apply_kept_network(round_of(net.programmed), 1, "sse2"), FormatError);
}

TEST(NiuModel, EveryKernelTheCpuHasIsOffered) {
    // The kernel tests loop over available_kernels(); a kernel dropping out of that list would
    // leave it untested and unused without a failure, so the list is checked against the CPU.
    const auto kernels = available_kernels();
    const auto has = [&](const char* name) { return std::find(kernels.begin(), kernels.end(), name) != kernels.end(); };
    std::string list;
    for (const auto& k : kernels) list += k + " ";
    std::printf("NIU kernels on this CPU: %s\n", list.c_str());
    EXPECT_TRUE(has("scalar"));
    EXPECT_EQ(has("avx2"), bool(__builtin_cpu_supports("avx2")));
    EXPECT_EQ(has("avx512"), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"));
}
