// noisy_rounds: the whole emulation loop from C++, without Python.
//
// Loads a model file and a data set (each read first by the checking helper process, as the
// Python front end does), puts every conv/FC layer on PCM-like AIMC tiles, and runs noisy rounds:
// for each round the NIU compiles the noise program for (seed, chip, round, t), streams every
// AIMC layer's clean weights from their HBM region, writes the noisy ones into the PU's weight
// buffer and publishes it; the PU then runs the data set on that round (docs/hybrid_runs.md, "A
// round through HBM").  Prints the digital accuracy and each round's.
//
// The bytes are those of `aimcemu run MODEL --data DATA --mapping all --noise pcm_like
// --t T --rounds R --seed S --drift-compensation none` for chip 0: the same program per round
// (layer ids = network layer indices, the clean abs-max of each layer), so the accuracies match
// that run's round_accuracy exactly (tests/python/test_cpp_example.py checks it).
//
//   noisy_rounds MODEL.h5 DATA.h5 [--t SECONDS] [--rounds R] [--seed S] [--threads N]
//                [--check-file HELPER]
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/emulator.hpp"
#include "formats/model_file.hpp"
#include "formats/untrusted_file.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "pu_model/inference.hpp"

using namespace aimcemu;

namespace {

struct Options {
    std::string model, data, check_file = AIMCEMU_CHECK_FILE_HELPER;
    double t = 86400.0;  // one day after programming
    std::uint32_t rounds = 3;
    std::uint64_t seed = 0;
    std::uint32_t threads = 0;  // 0: every core; the bytes never depend on it
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "noisy_rounds: %s\nusage: noisy_rounds MODEL.h5 DATA.h5 [--t SECONDS] [--rounds R] [--seed S] "
                 "[--threads N] [--check-file HELPER]\n",
                 why);
    std::exit(2);
}

// The limits aimcemu run has for the same options (python/aimcemu/validate.py).
constexpr std::uint64_t kMaxRounds = std::uint64_t(1) << 20;
constexpr std::uint64_t kMaxThreads = 4096;

[[noreturn]] void usage(const std::string& why) { usage(why.c_str()); }

// A whole-string number, or usage(): atof-style silent zeros would run a different study.  NaN
// and infinities are refused too (t is compared and compiled into the NIU program).
double finite_number(const char* flag, const char* text) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(value))
        usage(std::string(flag) + " expects a finite number, got '" + text + "'");
    return value;
}

// A whole number in lo..hi written as decimal digits, or usage().  Nothing is rounded, wrapped or
// cast: read through a double, seeds above 2^53 would merge, --rounds 1.9 would run 1 round,
// --seed -1 would wrap to 2^64 - 1 and --seed 1e30 would be undefined behaviour.
std::uint64_t whole_number(const char* flag, const char* text, std::uint64_t lo, std::uint64_t hi) {
    const std::string_view digits(text);
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    const bool whole = !digits.empty() && error == std::errc() && end == digits.data() + digits.size();
    if (!whole || value < lo || value > hi)
        usage(std::string(flag) + " expects a whole number from " + std::to_string(lo) + " to " +
              std::to_string(hi) + " (decimal digits, no sign, fraction or exponent), got '" + text + "'");
    return value;
}

Options parse(int argc, char** argv) {
    Options opts;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with("--")) {
            if (i + 1 >= argc) usage("a flag without its value");
            const char* value = argv[++i];
            if (arg == "--t") opts.t = finite_number("--t", value);
            else if (arg == "--rounds") opts.rounds = std::uint32_t(whole_number("--rounds", value, 1, kMaxRounds));
            else if (arg == "--seed") opts.seed = whole_number("--seed", value, 0, UINT64_MAX);
            else if (arg == "--threads") opts.threads = std::uint32_t(whole_number("--threads", value, 0, kMaxThreads));
            else if (arg == "--check-file") opts.check_file = value;
            else usage("unknown flag");
        } else {
            positional.emplace_back(arg);
        }
    }
    if (positional.size() != 2) usage("give a model file and a data set file");
    if (opts.t < 0) usage("--t must be >= 0");
    opts.model = positional[0];
    opts.data = positional[1];
    return opts;
}

std::vector<Tensor8> images_of(const DataSet& data) {
    std::vector<Tensor8> images;
    const std::size_t size = data.image_shape.size();
    for (std::int64_t i = 0; i < data.count(); ++i) {
        const auto* first = data.images.data() + std::size_t(i) * size;
        images.push_back({data.image_shape, std::vector<std::int8_t>(first, first + size)});
    }
    return images;
}

// "accuracy 0.9500 (190/200)": the images whose largest output (the first one, on a tie: NumPy's
// argmax) is their label.  The counts are printed too, so that a check can compare them exactly.
std::string accuracy(const std::vector<std::vector<Tensor8>>& outputs, const DataSet& data) {
    std::int64_t correct = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const auto& logits = outputs[i].back().data;
        const auto predicted = std::max_element(logits.begin(), logits.end()) - logits.begin();
        correct += predicted == data.labels[i];
    }
    char text[96];
    std::snprintf(text, sizeof text, "accuracy %.4f (%lld/%zu)", double(correct) / double(outputs.size()),
                  static_cast<long long>(correct), outputs.size());
    return text;
}

// Every conv and FC layer goes on AIMC (the mapping "all").
std::vector<int> gemm_layers(const Network& net) {
    std::vector<int> aimc;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const LayerKind kind = net.layers[i].kind;
        if (kind == LayerKind::Conv || kind == LayerKind::Linear) aimc.push_back(int(i));
    }
    return aimc;
}

// The NIU program of one round: one layer entry per AIMC layer, keyed by its network index so that
// its noise does not depend on which other layers are on AIMC.
niu::NiuProgram round_program(const noise::NoiseModel& model, const niu::Emulator& emulator, const Options& opts,
                              std::uint64_t round) {
    std::vector<niu::NiuLayerSpec> specs;
    for (std::size_t k = 0; k < emulator.aimc_layers().size(); ++k) {
        specs.push_back({.layer_id = std::uint64_t(emulator.aimc_layers()[k]),
                         .count = std::uint32_t(emulator.clean_weights(k).size()),
                         .absmax = emulator.clean_absmax()[k]});
    }
    return niu::compile_program(model, specs, {.seed = opts.seed, .chip = 0, .round = round, .t = opts.t});
}

int run(const Options& opts) {
    set_file_check_helper(opts.check_file);  // a hostile file crashes the helper, not this program
    Network net = load_model(opts.model);
    net.resolve();
    const DataSet data = load_dataset(opts.data);
    check_dataset_fits(data, net, opts.data);
    const std::vector<Tensor8> images = images_of(data);

    RunOptions run_options;
    run_options.threads = int(opts.threads);
    run_options.keep.assign(net.layers.size(), false);
    run_options.keep.back() = true;  // only the logits come back
    std::printf("%s: %lld images, digital %s\n", net.name.c_str(), static_cast<long long>(data.count()),
                accuracy(run_network_batch(net, images, run_options), data).c_str());

    // drift_reference "programmed": the NIU drifts from the programmed conductances (the compiler
    // refuses aihwkit's "reconverted", the float64 default).
    const auto model = noise::make_noise_model("pcm_like", {{"drift_reference", std::string("programmed")}});
    niu::Emulator emulator(net, gemm_layers(net));
    for (std::uint32_t round = 0; round < opts.rounds; ++round) {
        const niu::NiuProgram program = round_program(*model, emulator, opts, round);
        const niu::RoundOutputs noisy = emulator.run_round(program, images, run_options);
        std::printf("round %u (t = %g s, %zu AIMC layers): %s\n", round, opts.t, emulator.aimc_layers().size(),
                    accuracy(noisy.outputs, data).c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opts = parse(argc, argv);
    try {
        return run(opts);
    } catch (const std::exception& e) {  // FormatError names the file and the field
        std::fprintf(stderr, "noisy_rounds: %s\n", e.what());
        return 1;
    }
}
