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
//   kept network       the same round as one job for all layers (apply_kept_network), on chip
//                      states on 2 MiB pages and, for comparison, on 4 KiB pages
//   compile alone      the program of a round (serial work before the layers run)
//   float64 reference  program (once per chip) + read (per round), and read alone, 1 thread
//
// Every round writes into output buffers allocated and touched before the timing.
// Usage: bench_niu [threads] [repeats] [kept]   (default: 2 threads, 3 repeats; "kept": only
// the kept-state rounds with the fastest kernel, per layer and network job, on 2 MiB and 4 KiB
// pages, 1 and N threads)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/huge_pages.hpp"
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

// The noisy weights of every layer, allocated and touched once before any timing, as the
// emulator's weight regions are (a round writes into memory it already has).
using Outputs = std::vector<std::vector<std::int8_t>>;
Outputs outputs_of(const Layers& layers) {
    Outputs outs;
    for (const auto* clean : layers.clean) outs.emplace_back(clean->size(), std::int8_t(1));
    return outs;
}

const niu::NiuCompileOptions kRoundOptions{.seed = 1, .chip = 0, .round = 1, .t = 3600.0};

// One round: compile + apply every layer.  kernel "" = the best kernel with `threads` threads.
Span time_niu(const Layers& layers, const noise::NoiseModel& model, const std::string& kernel, int threads, Outputs& outs) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, kRoundOptions);
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        if (kernel.empty()) niu::apply_layer(program.layers[i], *layers.clean[i], outs[i], threads);
        else niu::apply_layer_kernel(kernel, program.layers[i], *layers.clean[i], outs[i]);
    }
    return watch.stop();
}

// The program of a round alone (tables and stream states of every layer): serial work that
// every round pays before its layers run.
Span time_compile(const Layers& layers, const noise::NoiseModel& model) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, kRoundOptions);
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
               const std::string& kernel, int threads, Outputs& outs) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, kRoundOptions);
    for (std::size_t i = 0; i < layers.clean.size(); ++i) {
        if (kernel.empty()) niu::apply_kept(program.layers[i], states[i], outs[i], threads);
        else niu::apply_kept_kernel(kernel, program.layers[i], states[i], outs[i]);
    }
    return watch.stop();
}

// The same round as one network-wide job (apply_kept_network): one contiguous range of all
// layers' beats per thread.  kernel "" = the best.
Span time_kept_network(const Layers& layers, const noise::NoiseModel& model, const std::vector<niu::NiuChipState>& states,
                       const std::string& kernel, int threads, Outputs& outs) {
    const auto specs = specs_of(layers);
    const Stopwatch watch;
    const niu::NiuProgram program = niu::compile_program(model, specs, kRoundOptions);
    std::vector<niu::KeptLayer> round;
    for (std::size_t i = 0; i < layers.clean.size(); ++i) round.push_back({&program.layers[i], &states[i], outs[i]});
    niu::apply_kept_network(round, threads, kernel);
    return watch.stop();
}

// Kilobytes of this process's anonymous memory on huge pages (/proc/self/smaps_rollup), -1 if
// the file is not there.
long anon_huge_kib() {
    std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) break;
    std::fclose(f);
    return kib;
}

// The kernels of a full round (compile + apply_layer), each named by what runs: the full model
// has no AVX-512 form, so the name "avx512" runs the AVX2 kernel (niu/niu_model.hpp,
// available_kernels).  Timing it again under its own name would show an AVX-512 gain or loss
// that is only noise; only the kept-state round half has an AVX-512 kernel.
std::vector<std::string> full_round_kernels(const std::vector<std::string>& kernels) {
    std::vector<std::string> full;
    for (const std::string& k : kernels)
        if (k != "avx512") full.push_back(k);
    return full;
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
    const bool kept_only = argc > 3 && std::string(argv[3]) == "kept";  // only the kept-state rounds
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
    const auto kernels = niu::available_kernels();                // kept-state round half
    const auto full_kernels = full_round_kernels(kernels);         // full round
    const std::string nt = std::to_string(threads) + " threads";
    Outputs outs = outputs_of(layers);
    long huge_kib = 0;
    for (int r = 0; r < repeats; ++r) {
        std::vector<niu::NiuChipState> states, small_page_states;
        keep("compile alone", time_compile(layers, *model));
        if (!kept_only) {
            for (const std::string& k : full_kernels) keep("niu " + k + ", 1 thread", time_niu(layers, *model, k, 1, outs));
            keep("niu best kernel, " + nt, time_niu(layers, *model, "", threads, outs));
            keep("chip state (once per chip), 1 thread", time_chip_states(layers, *model, 1, states));
        }
        set_huge_page_advice(false);  // the same states on 4 KiB pages, for the comparison below
        time_chip_states(layers, *model, threads, small_page_states);
        set_huge_page_advice(true);
        keep("chip state (once per chip), " + nt, time_chip_states(layers, *model, threads, states));
        huge_kib = std::max(huge_kib, anon_huge_kib());
        // Alternating: per-layer jobs, the network job, and the network job on 4 KiB pages.
        for (const std::string& k : kernels) {
            if (kept_only && k != kernels.back()) continue;
            keep("kept state " + k + ", 1 thread", time_kept(layers, *model, states, k, 1, outs));
            keep("kept network " + k + ", 1 thread", time_kept_network(layers, *model, states, k, 1, outs));
        }
        keep("kept state best, " + nt, time_kept(layers, *model, states, "", threads, outs));
        keep("kept network best, " + nt, time_kept_network(layers, *model, states, "", threads, outs));
        keep("kept network best, 1 thread, 4K pages", time_kept_network(layers, *model, small_page_states, "", 1, outs));
        keep("kept network best, " + nt + ", 4K pages", time_kept_network(layers, *model, small_page_states, "", threads, outs));
        if (kept_only) continue;
        const auto [prog, read] = time_float(layers, *model);
        keep("float64 read", read);
        Span both = prog;
        both += read;
        keep("float64 program + read", both);
    }

    std::printf("ResNet-50 GEMM layers: %zu layers, %.2f M weights, pcm_like, t = 1 h; best of %d interleaved repeats\n",
                layers.clean.size(), n / 1e6, repeats);
    std::printf("anonymous memory on huge pages with the chip states held: %ld MiB\n", huge_kib / 1024);
    std::printf("  %-34s %9s  %14s  %s\n", "", "wall", "per CPU-second", "wall per round");
    for (const auto& [name, s] : best)
        std::printf("  %-34s %9.2f  %14.2f  M weights/s  (%.3f s)\n", name.c_str(), n / s / 1e6, n / best_cpu[name] / 1e6, s);
    const std::string kept1 = "kept state " + kernels.back() + ", 1 thread";
    const std::string keptn = "kept state best, " + nt;
    const std::string net1 = "kept network " + kernels.back() + ", 1 thread";
    const std::string netn = "kept network best, " + nt;
    auto ratio = [&](const std::string& what, const std::string& one, const std::string& many) {
        std::printf("  %-44s %7.2f x  (wall)  %7.2f x  (per CPU-second)\n", what.c_str(), best[one] / best[many],
                    best_cpu[one] / best_cpu[many]);
    };
    std::printf("ratios:\n");
    ratio(nt + " / 1 thread, kept state per layer", kept1, keptn);
    ratio(nt + " / 1 thread, kept network job", net1, netn);
    ratio("network job / per layer, 1 thread", kept1, net1);
    ratio("network job / per layer, " + nt, keptn, netn);
    ratio("2 MiB / 4 KiB pages, network job, 1 thread", "kept network best, 1 thread, 4K pages", net1);
    ratio("2 MiB / 4 KiB pages, network job, " + nt, "kept network best, " + nt + ", 4K pages", netn);
    if (kept_only) return 0;
    const std::string fast1 = "niu " + full_kernels.back() + ", 1 thread";
    const std::string fastn = "niu best kernel, " + std::to_string(threads) + " threads";
    std::printf("  %-44s %7.2f x\n", ("full round " + full_kernels.back() + " / scalar kernel, 1 thread").c_str(),
                best["niu scalar, 1 thread"] / best[fast1]);
    std::printf("  %-44s %7.2f x\n", ("full round " + std::to_string(threads) + " threads / 1 thread").c_str(),
                best[fast1] / best[fastn]);
    std::printf("  %-44s %7.2f x\n",
                ("kept-state " + kernels.back() + " / full round " + full_kernels.back() + ", 1 thread").c_str(),
                best[fast1] / best[kept1]);
    std::printf("  %-44s %7.2f x\n", "kept-state round 1 thread / float64 read", best["float64 read"] / best[kept1]);
    std::printf("  %-44s %7.2f x\n", "NIU 1 thread / float64 read", best["float64 read"] / best[fast1]);
    std::printf("  %-44s %7.2f x  (the NIU redraws the chip noise every round)\n", "NIU 1 thread / float64 program + read",
                best["float64 program + read"] / best[fast1]);
    return 0;
}
