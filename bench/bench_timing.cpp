// Benchmark: how long the analytic timing model takes to time ResNet-50 on the whole U50 system,
// against a reference measured in the same run: the PE-level SA model (sa_cycle.hpp) on one
// ResNet-50 layer shape, extrapolated per simulated cycle to the whole network.  Prints ms and
// ratios; it asserts nothing (timing belongs here, not in tests).
#include <chrono>
#include <cstdio>
#include <vector>

#include "pu_model/sa_cycle.hpp"
#include "perf_model/system.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;
using Clock = std::chrono::steady_clock;

namespace {

template <class F>
double best_ms(int repeats, F&& f) {
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        f();
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return best;
}

}  // namespace

int main() {
    const Network net = zoo::resnet50();
    double sink = 0;

    const double t_layers = best_ms(5, [&] { sink += time_network(net, pu2x()).compute_s; });
    SystemConfig base = u50_system();
    base.policy = SchedulePolicy::Baseline;
    const double t_sys_base = best_ms(5, [&] { sink += evaluate_system(net, base).fps; });
    const double t_sys_adaptive = best_ms(3, [&] { sink += evaluate_system(net, u50_system()).fps; });
    SystemConfig piped = u50_system();
    piped.mode = MultiPuMode::LayerPipelined;
    const double t_sys_pipe = best_ms(3, [&] { sink += evaluate_system(net, piped).fps; });

    // Reference: the PE-level model on layer1.0.conv2's shape (N=64, M=576) for 256 columns.
    const std::int64_t n = 64, m = 576, p = 256;
    std::vector<std::int8_t> w(std::size_t(n * m), 3), x(std::size_t(p * m), 5), b(std::size_t(n), 1);
    std::vector<std::int32_t> acc(std::size_t(n * p));
    SaConfig sa;
    SaCycleStats stats;
    const double t_cycle = best_ms(3, [&] { stats = sa_cycle_gemm(w.data(), x.data(), m, b.data(), 0, n, m, p, sa, acc.data()); });
    double network_sa_cycles = 0;
    for (const LayerTiming& lt : time_network(net, pu2x()).layers) network_sa_cycles += double(lt.sa_cycles);
    const double t_cycle_network = t_cycle / double(stats.cycles) * network_sa_cycles;

    std::printf("ResNet-50 timing model (ms, best of runs)\n");
    std::printf("  per-layer timing, one PU type            %9.3f\n", t_layers);
    std::printf("  U50 system, baseline schedule            %9.3f\n", t_sys_base);
    std::printf("  U50 system, adaptive schedule (default)  %9.3f\n", t_sys_adaptive);
    std::printf("  U50 system, layer-pipelined              %9.3f\n", t_sys_pipe);
    std::printf("reference: PE-level SA model, %lld cycles in %.3f ms -> whole network on PU2x ~%.0f ms\n",
                static_cast<long long>(stats.cycles), t_cycle, t_cycle_network);
    std::printf("ratio PE-level network / analytic system (adaptive): %.0fx\n", t_cycle_network / t_sys_adaptive);
    std::printf("(checksum %g)\n", sink);
    return 0;
}
