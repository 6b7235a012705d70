// Benchmark of the fast INT8 conv path against oneDNN's s8 GEMM, measured in the same run.
//
// For every distinct conv/linear shape of ResNet-18 and ResNet-50 (v1) at 224x224, batch 1:
//   ours   = IM2COL (into the operand layout of the chosen fast kernel: AMX, else VNNI, ...) + fast
//            GEMM + requantisation to int8, with the weights packed beforehand (packing is reported
//            separately as a percentage: run_network_batch packs once per batch);
//   oneDNN = dnnl_gemm_s8s8s32 alone, on the already-IM2COL'd int8 operand (no IM2COL, no
//            requantisation), i.e. oneDNN is given the easier job.
// Single thread and all threads.  GOPS = 2*N*M*P / seconds (best of repeated runs).  The total
// weights each shape by how often it occurs in the two networks.  Not a test: numbers only.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <functional>
#include <map>
#include <thread>
#include <tuple>

#include <pcg_random.hpp>

#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"
#include "formats/zoo.hpp"

#ifdef AIMCEMU_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

using namespace aimcemu;

namespace {

struct Shape {
    WindowGeometry g;
    int n;
    bool operator<(const Shape& o) const {
        return std::tie(g.in.h, g.in.w, g.in.c, g.kernel, g.stride, g.pad, n) <
               std::tie(o.g.in.h, o.g.in.w, o.g.in.c, o.g.kernel, o.g.stride, o.g.pad, o.n);
    }
};

// Best-of timing: repeats until about `budget` seconds were spent (at least 3 runs).
double best_seconds(const std::function<void()>& fn, double budget = 0.15) {
    double best = 1e30, spent = 0;
    for (int run = 0; run < 3 || spent < budget; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
        spent += s;
        if (run > 200) break;
    }
    return best;
}

// oneDNN threads through OpenMP; reach omp_set_num_threads without linking libgomp ourselves.
void set_omp_threads(int threads) {
    using SetFn = void (*)(int);
    static auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (fn) fn(threads);
}

std::vector<std::int8_t> random_int8(pcg32& rng, std::int64_t count) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = std::int8_t(int(rng(256)) - 128);
    return v;
}

struct Result {
    double ours = 0, pack = 0, dnnl = 0;   // seconds
};

Result measure(const Shape& s, int threads) {
    pcg32 rng(1);
    const std::int64_t n = s.n, m = s.g.m(), p = s.g.p();
    const auto x = random_int8(rng, s.g.in.size());
    const auto w = random_int8(rng, n * m);
    const auto bias = random_int8(rng, n);
    Result r;
    r.pack = best_seconds([&] { PackedWeights packed(w.data(), bias.data(), 4, n, m); }, 0.05);
    const PackedWeights packed(w.data(), bias.data(), 4, n, m);
    std::vector<std::uint8_t> operand(std::size_t(p * packed.x_row_stride()));
    std::vector<std::int32_t> acc(std::size_t(n * p));
    std::vector<std::int8_t> y(acc.size());
    r.ours = best_seconds([&] {
        im2col_into(x.data(), s.g, packed.x_xor_mask(), packed.x_row_stride(), operand.data(), threads);
        gemm_fast(packed, operand.data(), p, acc.data(), threads);
        requantize(acc.data(), std::int64_t(acc.size()), 12, true, y.data(), threads);
    });
#ifdef AIMCEMU_HAVE_DNNL
    const auto patches = im2col(x.data(), s.g);
    std::vector<std::int32_t> column(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) column[std::size_t(i)] = std::int32_t(bias[std::size_t(i)]) << 4;
    set_omp_threads(threads == 0 ? resolve_threads(0) : threads);
    r.dnnl = best_seconds([&] {
        dnnl_gemm_s8s8s32('N', 'T', 'R', p, n, m, 1.0f, patches.data(), m, 0, w.data(), m, 0, 0.0f, acc.data(), n,
                          column.data());
    });
#endif
    return r;
}

std::map<Shape, int> distinct_shapes() {
    std::map<Shape, int> shapes;
    for (const Network& net : {zoo::resnet18(), zoo::resnet50()}) {
        for (const Layer& l : net.layers) {
            if (!l.is_gemm()) continue;
            Shape s;
            s.n = l.out_channels;
            s.g = l.kind == LayerKind::Linear ? WindowGeometry{{1, 1, int(l.gemm_m())}, 1, 1, 0}
                                              : WindowGeometry{l.in_shape, l.kernel, l.stride, l.pad};
            ++shapes[s];
        }
    }
    return shapes;
}

void run_table(const std::map<Shape, int>& shapes, int threads) {
    std::printf("\n== %s (%d thread%s), fast kernel: %s ==\n", threads == 1 ? "single thread" : "all threads",
                resolve_threads(threads), resolve_threads(threads) == 1 ? "" : "s",
                to_string(resolve_fast_kernel(FastKernel::Auto)));
    std::printf("%-22s %5s %5s %6s %5s | %9s %9s %7s | %8s\n", "in HxWxC k/s/p", "N", "M", "P", "count",
                "ours GOPS", "dnnl GOPS", "ratio", "pack %");
    double ops_total = 0, ours_total = 0, dnnl_total = 0;
    for (const auto& [s, count] : shapes) {
        const double ops = 2.0 * s.n * double(s.g.m()) * double(s.g.p());
        const Result r = measure(s, threads);
        char name[64];
        std::snprintf(name, sizeof name, "%dx%dx%d %d/%d/%d", s.g.in.h, s.g.in.w, s.g.in.c, s.g.kernel, s.g.stride,
                      s.g.pad);
        std::printf("%-22s %5d %5lld %6lld %5d | %9.1f %9.1f %7.2f | %7.1f%%\n", name, s.n, (long long)s.g.m(),
                    (long long)s.g.p(), count, ops / r.ours / 1e9, r.dnnl > 0 ? ops / r.dnnl / 1e9 : 0.0,
                    r.dnnl > 0 ? r.dnnl / r.ours : 0.0, 100.0 * r.pack / r.ours);
        ops_total += ops * count;
        ours_total += r.ours * count;
        dnnl_total += r.dnnl * count;
    }
    std::printf("%-22s %5s %5s %6s %5s | %9.1f %9.1f %7.2f |  (ours incl. IM2COL+requant; dnnl GEMM only)\n",
                "TOTAL (weighted)", "", "", "", "", ops_total / ours_total / 1e9,
                dnnl_total > 0 ? ops_total / dnnl_total / 1e9 : 0.0, dnnl_total > 0 ? dnnl_total / ours_total : 0.0);
}

}  // namespace

int main(int, char** argv) {
    // oneDNN's OpenMP threads spin after each call by default and would steal the second core
    // from our path when the two alternate; make them sleep.  libgomp reads the variable when it
    // loads, so set it and start again.
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
    const auto shapes = distinct_shapes();
    std::printf("bench_gemm: %zu distinct conv/linear shapes of ResNet-18 + ResNet-50 v1 at 224x224, batch 1\n",
                shapes.size());
#ifndef AIMCEMU_HAVE_DNNL
    std::printf("(built without oneDNN: no reference column)\n");
#endif
    run_table(shapes, 1);
    if (resolve_threads(0) > 1) run_table(shapes, 0);
    return 0;
}
