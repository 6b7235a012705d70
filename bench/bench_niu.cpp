// NIU model throughput on a ResNet-50-sized layer set (all 54 GEMM layers, 25.5 M weights) in
// weights per second, against the float64 reference noise model (noise_models/) on the same
// weights in the same run.  Measurements are interleaved (each repeat times every variant once)
// and the best of the repeats is reported, so a noisy shared machine disturbs the ratios less;
// rerun on an idle machine for absolute figures.  Each line also gives weights per CPU-second
// (process CPU time, all threads): on a shared machine that is the closer figure for one core.
//
//   NIU, one round     compile the program (tables, stream states) and apply every layer: what a
//                      hybrid run pays per (chip, t, round), scalar and AVX2 kernels, 1 and 2 threads
//   chip state         the chip half of every layer (programmed devices), once per chip
//   kept state         compile + the round half of every layer with the chip states kept: what a
//                      round costs after a chip's first, each kernel on 1 thread and the best on N
//   float64 reference  program (once per chip) + read (per round), and read alone, 1 thread
//
// Usage: bench_niu [threads] [repeats]   (default: 2 threads, 3 repeats)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "formats/zoo.hpp"
#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"

using namespace aimcemu;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Wall and CPU seconds of one measured span.
struct Span {
    double wall = 0, cpu = 0;
    Span& operator+=(const Span& o) {
        wall += o.wall;
        cpu += o.cpu;
        return *this;
    }
};

struct Stopwatch {
    Clock::time_point wall = Clock::now();
    double cpu = cpu_seconds();
    Span stop() const { return {seconds_since(wall), cpu_seconds() - cpu}; }
};

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

std::vector<niu::NiuLayerSpec> specs_of(const Layers& layers) {
    std::vector<niu::NiuLayerSpec> specs;
    for (std::size_t i = 0; i < layers.clean.size(); ++i)
        specs.push_back({.layer_id = i, .count = std::uint32_t(layers.clean[i]->size()),
                         .absmax = niu::clean_absmax(*layers.clean[i], niu::AbsMaxMode::Layer)});
    return specs;
}

// One round: compile + apply every layer.  kernel "" = the best kernel with `threads` threads.
Span time_niu(const Layers& layers, const noise::NoiseModel& model, const std::string& kernel, int threads) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, {.seed = 1, .chip = 0, .round = 1, .t = 3600.0});
    std::vector<std::int8_t> out;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        out.resize(layers.clean[i]->size());
        if (kernel.empty()) niu::apply_layer(program.layers[i], *layers.clean[i], out, threads);
        else niu::apply_layer_kernel(kernel, program.layers[i], *layers.clean[i], out);
    }
    return watch.stop();
}

// The chip half of every layer (once per chip): chip-state computation on `threads` threads.
Span time_chip_states(const Layers& layers, const noise::NoiseModel& model, int threads,
                      std::vector<niu::NiuChipState>& states) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, {.seed = 1, .chip = 0, .round = 0, .t = 0.0});
    states.clear();
    for (std::size_t i = 0; i < layers.clean.size(); ++i) states.push_back(niu::chip_state(program.layers[i], *layers.clean[i], threads));
    return watch.stop();
}

// One round with kept chip states: compile + the round half of every layer.  kernel "" = the
// best kernel with `threads` threads.
Span time_kept(const Layers& layers, const noise::NoiseModel& model, const std::vector<niu::NiuChipState>& states,
               const std::string& kernel, int threads) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, {.seed = 1, .chip = 0, .round = 1, .t = 3600.0});
    std::vector<std::int8_t> out;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        out.resize(layers.clean[i]->size());
        if (kernel.empty()) niu::apply_kept(program.layers[i], states[i], out, threads);
        else niu::apply_kept_kernel(kernel, program.layers[i], states[i], out);
    }
    return watch.stop();
}

// Float reference, single thread: {program (per chip), read (per round)} seconds.
std::pair<Span, Span> time_float(const Layers& layers, noise::NoiseModel& model) {
    model.set_num_threads(1);
    Span program_s, read_s;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        const std::vector<double> w(layers.clean[i]->begin(), layers.clean[i]->end());
        const Stopwatch program_watch;
        const auto state = model.program(w, {std::int64_t(w.size())}, {1, 0, i});
        program_s += program_watch.stop();
        const Stopwatch read_watch;
        const auto noisy = model.read(state, 3600.0, 1);
        read_s += read_watch.stop();
    }
    return {program_s, read_s};
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
    const Network net = zoo::resnet50(zoo::ResNetVariant::V1, 1, 224, 1000);
    const Layers layers = gemm_layers(net);
    auto model = noise::make_noise_model("pcm_like", {{"drift_reference", std::string("programmed")}});
    const double n = double(layers.total);

    // Best wall time and, separately, best CPU time of each variant.
    std::map<std::string, double> best, best_cpu;
    auto keep = [&](const std::string& name, Span s) {
        best[name] = best.count(name) ? std::min(best[name], s.wall) : s.wall;
        best_cpu[name] = best_cpu.count(name) ? std::min(best_cpu[name], s.cpu) : s.cpu;
    };
    const auto kernels = niu::available_kernels();
    for (int r = 0; r < repeats; ++r) {
        for (const std::string& k : kernels) keep("niu " + k + ", 1 thread", time_niu(layers, *model, k, 1));
        keep("niu best kernel, " + std::to_string(threads) + " threads", time_niu(layers, *model, "", threads));
        std::vector<niu::NiuChipState> states;
        keep("chip state (once per chip), 1 thread", time_chip_states(layers, *model, 1, states));
        keep("chip state (once per chip), " + std::to_string(threads) + " threads", time_chip_states(layers, *model, threads, states));
        for (const std::string& k : kernels) keep("kept state " + k + ", 1 thread", time_kept(layers, *model, states, k, 1));
        keep("kept state best, " + std::to_string(threads) + " threads", time_kept(layers, *model, states, "", threads));
        const auto [prog, read] = time_float(layers, *model);
        keep("float64 read", read);
        Span both = prog;
        both += read;
        keep("float64 program + read", both);
    }

    std::printf("ResNet-50 GEMM layers: %zu layers, %.2f M weights, pcm_like, t = 1 h; best of %d interleaved repeats\n",
                layers.clean.size(), n / 1e6, repeats);
    std::printf("  %-34s %9s  %14s  %s\n", "", "wall", "per CPU-second", "wall per round");
    for (const auto& [name, s] : best)
        std::printf("  %-34s %9.2f  %14.2f  M weights/s  (%.3f s)\n", name.c_str(), n / s / 1e6, n / best_cpu[name] / 1e6, s);
    const std::string fast1 = "niu " + kernels.back() + ", 1 thread";
    const std::string fastn = "niu best kernel, " + std::to_string(threads) + " threads";
    std::printf("ratios:\n");
    std::printf("  %-44s %7.2f x\n", (kernels.back() + " / scalar kernel, 1 thread").c_str(), best["niu scalar, 1 thread"] / best[fast1]);
    std::printf("  %-44s %7.2f x\n", (std::to_string(threads) + " threads / 1 thread").c_str(), best[fast1] / best[fastn]);
    const std::string kept1 = "kept state " + kernels.back() + ", 1 thread";
    const std::string keptn = "kept state best, " + std::to_string(threads) + " threads";
    std::printf("  %-44s %7.2f x  (wall)  %7.2f x  (per CPU-second)\n", (std::to_string(threads) + " threads / 1 thread, kept state").c_str(),
                best[kept1] / best[keptn], best_cpu[kept1] / best_cpu[keptn]);
    std::printf("  %-44s %7.2f x\n", "kept-state round / full round, 1 thread", best[fast1] / best[kept1]);
    std::printf("  %-44s %7.2f x\n", "kept-state round 1 thread / float64 read", best["float64 read"] / best[kept1]);
    std::printf("  %-44s %7.2f x\n", "NIU 1 thread / float64 read", best["float64 read"] / best[fast1]);
    std::printf("  %-44s %7.2f x  (the NIU redraws the chip noise every round)\n", "NIU 1 thread / float64 program + read",
                best["float64 program + read"] / best[fast1]);
    return 0;
}
