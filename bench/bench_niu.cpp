// NIU model throughput on a ResNet-50-sized layer set (all 54 GEMM layers, 25.5 M weights), as
// weights per second per core, with the float64 reference noise model (noise_models/) measured
// in the same run on the same weights as the yardstick.  Ratios, not absolute times, are the
// result: the machines are shared and noisy.
//
// Usage: bench_niu [threads]   (default: hardware concurrency for the multi-thread line)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Layers {
    std::vector<const std::vector<std::int8_t>*> clean;
    std::size_t total = 0;
};

Layers gemm_layers(const Network& net) {
    Layers l;
    for (const Layer& layer : net.layers)
        if (layer.is_gemm()) {
            l.clean.push_back(&layer.weights);
            l.total += layer.weights.size();
        }
    return l;
}

double time_niu(const Layers& layers, const noise::NoiseModel& model, int threads) {
    std::vector<niu::NiuLayerSpec> specs;
    for (std::size_t i = 0; i < layers.clean.size(); ++i)
        specs.push_back({.layer_id = i, .count = std::uint32_t(layers.clean[i]->size()),
                         .absmax = niu::clean_absmax(*layers.clean[i], niu::AbsMaxMode::Layer)});
    const auto start = Clock::now();
    const niu::NiuProgram program = niu::compile_program(model, specs, {.seed = 1, .chip = 0, .round = 1, .t = 3600.0});
    std::vector<std::int8_t> out;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        out.resize(layers.clean[i]->size());
        niu::apply_layer(program.layers[i], *layers.clean[i], out, threads);
    }
    return seconds_since(start);
}

// Float reference, single thread: {program (per chip), read (per round)} seconds.
std::pair<double, double> time_float(const Layers& layers, noise::NoiseModel& model) {
    model.set_num_threads(1);
    double program_s = 0, read_s = 0;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        const std::vector<double> w(layers.clean[i]->begin(), layers.clean[i]->end());
        auto start = Clock::now();
        const auto state = model.program(w, {std::int64_t(w.size())}, {1, 0, i});
        program_s += seconds_since(start);
        start = Clock::now();
        const auto noisy = model.read(state, 3600.0, 1);
        read_s += seconds_since(start);
    }
    return {program_s, read_s};
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : int(std::max(1u, std::thread::hardware_concurrency()));
    const Network net = zoo::resnet50(zoo::ResNetVariant::V1, 1, 224, 1000);
    const Layers layers = gemm_layers(net);
    auto model = noise::make_noise_model("pcm_like", {{"drift_reference", std::string("programmed")}});
    const double n = double(layers.total);

    const double niu_1 = time_niu(layers, *model, 1);
    const double niu_n = time_niu(layers, *model, threads);
    const auto [float_prog, float_read] = time_float(layers, *model);

    std::printf("ResNet-50 GEMM layers: %zu layers, %.2f M weights, model pcm_like, t = 1 h\n", layers.clean.size(), n / 1e6);
    std::printf("NIU model, 1 thread          : %8.2f M weights/s/core  (%.3f s per round)\n", n / niu_1 / 1e6, niu_1);
    std::printf("NIU model, %2d threads        : %8.2f M weights/s total (%.3f s per round, scaling %.2fx)\n", threads,
                n / niu_n / 1e6, niu_n, niu_1 / niu_n);
    std::printf("float64 reference, read only : %8.2f M weights/s/core  (%.3f s)\n", n / float_read / 1e6, float_read);
    std::printf("float64 reference, prog+read : %8.2f M weights/s/core  (%.3f s)\n", n / (float_prog + float_read) / 1e6,
                float_prog + float_read);
    std::printf("ratio NIU / float read       : %8.2f x\n", float_read / niu_1);
    std::printf("ratio NIU / float prog+read  : %8.2f x  (the NIU redraws programming noise every round)\n",
                (float_prog + float_read) / niu_1);
    return 0;
}
