// Benchmark of every conv/linear layer of ResNet-18 and ResNet-50 (v1, 224x224) on the fast INT8
// path against oneDNN's own convolution and matmul primitives, measured in the same run.
//
// The same work on both sides, weights prepared once on both sides:
//   ours   = IM2COL (into the operand layout of the chosen fast kernel) + fast GEMM + bias +
//            requantisation to int8 with ReLU in the GEMM's epilogue, weights packed beforehand;
//   oneDNN = convolution_forward (conv layers) or matmul (linear layers) with u8/s8 source,
//            s8 weights in the primitive's preferred layout (format_tag::any, reordered once),
//            s32 bias, an output scale of 2^-shift, a ReLU post-op and s8 output: oneDNN's
//            fused equivalent of our requantisation (its rounding differs; speed only here).
// Activations are in [0, 127] (post-ReLU, as in the network) except for the 3-channel input
// layer, whose input is signed.  `--batch B` stacks B images per call on both sides; `--kernel K`
// (amx, vnni512, avx2, portable) picks our kernel instead of the fastest; `--threads T` the
// second table's thread count; `--only TEXT` keeps the shapes whose name contains TEXT;
// `--budget S` times each side for about S seconds per shape (default 0.25) for more repeats on a
// busy machine.  Each table ends with the process's CPU time beside its wall time, so a reader
// can tell how much of the machine the run had.
//
// For each shape and thread count (1 and all cores) the two sides alternate, best of repeated
// runs, so load from other processes hits both alike; GOPS = 2*N*M*P / seconds.  The table also
// gives our GOPS as a fraction of the fast kernel's peak on this CPU, from a clock measured here
// (the AVX2 kernel's peak is 32 int8 MACs per cycle per core; VNNI's is measured: docs/performance.md).
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include <pcg_random.hpp>

#include "common/errors.hpp"
#include "formats/zoo.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"

#ifdef AIMCEMU_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

using namespace aimcemu;

namespace {

struct Shape {
    WindowGeometry g;
    int n;
    bool linear;
    auto key() const {
        const Window& w = g.window;
        return std::tie(g.in.h, g.in.w, g.in.c, w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_bottom,
                        w.pad_left, w.pad_right, n, linear);
    }
    bool operator<(const Shape& o) const { return key() < o.key(); }
    bool signed_input() const { return g.in.c == 3; }   // the network's input layer
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Best-of timing of a and b, alternating, until each had about `budget` seconds (>= 3 runs).
double g_budget = 0.25;   // --budget

std::pair<double, double> best_of_alternating(const std::function<void()>& a, const std::function<void()>& b,
                                              double budget) {
    double best_a = 1e30, best_b = 1e30, spent = 0;
    for (int run = 0; run < 3 || spent < 2 * budget; ++run) {
        const double t0 = now();
        a();
        const double t1 = now();
        b();
        const double t2 = now();
        best_a = std::min(best_a, t1 - t0);
        best_b = std::min(best_b, t2 - t1);
        spent += t2 - t0;
        if (run > 300 * std::max(1.0, budget / 0.25)) break;
    }
    return {best_a, best_b};
}

// Clock of this core in GHz: a chain of dependent 64-bit imul, 3 cycles each on every x86-64
// core of the last fifteen years (Intel and AMD alike), timed in CPU time of this thread, so time
// taken by other processes does not count.  Not a chain of `add $1`: Intel's Golden Cove and later
// fold immediate adds in the renamer and retired that loop four times as fast as the clock (11.7
// GHz on a 2.95 GHz Xeon), which made the VNNI peak twice too high (1,496 against 755 GOPS per
// core: the instructions per cycle, 0.5 against that clock, rounded up to 1).
double measure_ghz() {
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
        timespec t0, t1;
        long iterations = 50000000, x = 3;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        asm volatile("1:\n imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0\n dec %1\n jnz 1b"
                     : "+r"(x), "+r"(iterations));
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        const double s = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
        best = std::max(best, 3 * 4 * 50e6 / s / 1e9);
    }
    return best;
}

// Independent zmm vpdpbusd per cycle on this core, timed against the clock above: Intel's server
// cores issue two per cycle, AMD Zen 4 one (it splits a 512-bit op over its two 256-bit units),
// so the VNNI peak is measured rather than assumed.  12 accumulators cover the latency.
__attribute__((target("avx512f,avx512vnni"))) double measure_vnni512_per_cycle(double ghz) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        timespec t0, t1;
        long iterations = 20000000;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        asm volatile(
            "vpxord %%zmm31, %%zmm31, %%zmm31\n vpxord %%zmm30, %%zmm30, %%zmm30\n"
            "1:\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm1\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm2\n vpdpbusd %%zmm30, %%zmm31, %%zmm3\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm4\n vpdpbusd %%zmm30, %%zmm31, %%zmm5\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm6\n vpdpbusd %%zmm30, %%zmm31, %%zmm7\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm8\n vpdpbusd %%zmm30, %%zmm31, %%zmm9\n"
            " vpdpbusd %%zmm30, %%zmm31, %%zmm10\n vpdpbusd %%zmm30, %%zmm31, %%zmm11\n"
            " dec %0\n jnz 1b"
            : "+r"(iterations)
            :
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
              "xmm30", "xmm31", "cc");
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        const double s = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
        best = std::max(best, 12 * 20e6 / s / 1e9 / ghz);
    }
    return best;
}

// int8 MACs per cycle per core of a fast kernel at its peak (instruction throughput).
double peak_macs_per_cycle(FastKernel k, double ghz) {
    switch (k) {
        case FastKernel::Avx2: return 32;   // vpmaddubsw + vpmaddwd, one each per cycle (Zen 3)
        case FastKernel::Vnni512:           // 64 MACs per vpdpbusd zmm, at the measured rate rounded
            return 64 * std::max(1.0, std::round(measure_vnni512_per_cycle(ghz)));
        case FastKernel::Amx: return 1024;  // tdpbssd: 16x16x64 MACs per 16 cycles
        default: return 0;
    }
}

// oneDNN threads through OpenMP; reach omp_set_num_threads without linking libgomp ourselves.
void set_omp_threads(int threads) {
    using SetFn = void (*)(int);
    static auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (fn) fn(threads);
}

std::vector<std::int8_t> random_bytes(pcg32& rng, std::int64_t count, int lo, int hi) {
    std::vector<std::int8_t> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = std::int8_t(lo + int(rng(std::uint32_t(hi - lo + 1))));
    return v;
}

constexpr int kBiasShift = 4, kOutShift = 12;

struct Case {
    Shape s;
    int batch;
    std::vector<std::int8_t> x, w, bias;
    std::int64_t n() const { return s.n; }
    std::int64_t m() const { return s.g.m(); }
    std::int64_t p() const { return s.g.p() * batch; }
    double ops() const { return 2.0 * double(n()) * double(m()) * double(p()); }
};

// The fast kernel under test: --kernel NAME (default: auto, the fastest this CPU has).
FastKernel g_kernel = FastKernel::Auto;

// The depth segment the VNNI kernel may skip where it reads padding: a conv's kernel row (as
// inference passes it).
std::int64_t kernel_row(const Shape& s) {
    return !s.linear && s.g.window.kernel_h > 1 ? std::int64_t(s.g.window.kernel_w) * s.g.in.c : 0;
}

// Ours: IM2COL + GEMM with requantisation (shift, round, saturate, ReLU) in the kernel's
// epilogue, as run_network does it (each chunk of rows IM2COL'd into the worker's scratch block in
// the same work item that multiplies it, or, where conv_reads_in_place, the input padded once and
// the windows read in place); weights packed once.
class Ours {
public:
    explicit Ours(const Case& l)
        : l_(l), packed_(l.w.data(), l.bias.data(), kBiasShift, l.n(), l.m(), g_kernel, kernel_row(l.s)),
          padded_(!l.s.linear && conv_reads_in_place(packed_, l.s.g) ? std::size_t(padded_input_bytes(l.s.g) * l.batch) : 0),
          y_(std::size_t(l.n() * l.p())) {}
    void run(int threads) {
        GemmOutput out;
        out.y = y_.data();
        out.out_shift = kOutShift;
        out.relu = true;
        if (!l_.s.linear && conv_reads_in_place(packed_, l_.s.g)) {   // padded once, windows read in place
            pad_input_into(l_.x.data(), l_.s.g, l_.batch, packed_.x_xor_mask(), padded_.data());
            gemm_fast_conv(packed_, padded_.data(), l_.s.g, l_.batch, out, threads);
            return;
        }
        gemm_fast_streamed(packed_, l_.p(), out, threads,
                           [&](std::int64_t begin, std::int64_t end, std::uint8_t* rows) {
                               im2col_pixels_into(l_.x.data(), l_.s.g, packed_.x_xor_mask(), packed_.x_row_stride(),
                                                  rows, begin, end);
                           });
    }

private:
    const Case& l_;
    PackedWeights packed_;
    std::vector<std::uint8_t> padded_;
    std::vector<std::int8_t> y_;
};

#ifdef AIMCEMU_HAVE_DNNL
// oneDNN's conv (or matmul) primitive with the same fused work and weights reordered once.
class OneDnn {
public:
    explicit OneDnn(const Case& l) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        const auto& g = l.s.g;
        const dt src_type = l.s.signed_input() ? dt::s8 : dt::u8;
        dnnl::primitive_attr attr;
        attr.set_output_scales(0, {1.0f / float(1 << kOutShift)});
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
        dnnl::memory::desc src_md, w_md, user_w_md, dst_md;
        const dnnl::memory::desc bias_md({l.n()}, dt::s32, tag::x);
        if (!l.s.linear) {
            const dnnl::memory::dims src_dims{l.batch, g.in.c, g.in.h, g.in.w};
            const dnnl::memory::dims w_dims{l.n(), g.in.c, g.window.kernel_h, g.window.kernel_w};
            const dnnl::memory::dims dst_dims{l.batch, l.n(), g.out_h(), g.out_w()};
            src_md = dnnl::memory::desc(src_dims, src_type, tag::nhwc);
            dst_md = dnnl::memory::desc(dst_dims, dt::s8, tag::nhwc);
            w_md = dnnl::memory::desc(w_dims, dt::s8, tag::any);
            user_w_md = dnnl::memory::desc(w_dims, dt::s8, tag::ohwi);   // our [N][kh][kw][Cin]
            const dnnl::convolution_forward::desc desc(
                dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md, w_md, bias_md, dst_md,
                {g.window.stride_h, g.window.stride_w}, {g.window.pad_top, g.window.pad_left},
                {g.window.pad_bottom, g.window.pad_right});
            const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine_);
            prim_ = dnnl::convolution_forward(pd);
            w_md = pd.weights_desc();
            impl_ = pd.impl_info_str();
        } else {
            src_md = dnnl::memory::desc({l.batch, l.m()}, src_type, tag::ab);
            dst_md = dnnl::memory::desc({l.batch, l.n()}, dt::s8, tag::ab);
            w_md = dnnl::memory::desc({l.m(), l.n()}, dt::s8, tag::any);
            user_w_md = dnnl::memory::desc({l.m(), l.n()}, dt::s8, tag::ba);   // W^T of our [N][M]
            const dnnl::memory::desc mm_bias({1, l.n()}, dt::s32, tag::ab);
            const dnnl::matmul::desc desc(src_md, w_md, mm_bias, dst_md);
            const dnnl::matmul::primitive_desc pd(desc, attr, engine_);
            prim_ = dnnl::matmul(pd);
            w_md = pd.weights_desc();
            impl_ = pd.impl_info_str();
        }
        src_ = dnnl::memory(src_md, engine_, const_cast<std::int8_t*>(l.x.data()));
        dst_ = dnnl::memory(dst_md, engine_);
        bias32_.assign(l.bias.begin(), l.bias.end());
        for (auto& b : bias32_) b <<= kBiasShift;
        bias_ = dnnl::memory(l.s.linear ? dnnl::memory::desc({1, l.n()}, dt::s32, tag::ab) : bias_md, engine_,
                             bias32_.data());
        // The weights, reordered once into the primitive's layout (not timed).
        dnnl::memory user_w(user_w_md, engine_, const_cast<std::int8_t*>(l.w.data()));
        weights_ = dnnl::memory(w_md, engine_);
        dnnl::reorder(user_w, weights_).execute(stream_, user_w, weights_);
        stream_.wait();
    }
    void run() {
        prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_BIAS, bias_},
                                {DNNL_ARG_DST, dst_}});
        stream_.wait();
    }
    const std::string& impl() const { return impl_; }

private:
    dnnl::engine engine_;
    dnnl::stream stream_;
    dnnl::primitive prim_;
    dnnl::memory src_, weights_, bias_, dst_;
    std::vector<std::int32_t> bias32_;
    std::string impl_;
};
#endif

std::map<Shape, int> distinct_shapes() {
    std::map<Shape, int> shapes;
    for (const Network& net : {zoo::resnet18(), zoo::resnet50()}) {
        for (const Layer& l : net.layers) {
            if (!l.is_gemm()) continue;
            Shape s;
            s.n = l.out_channels;
            s.linear = l.kind == LayerKind::Linear;
            s.g = s.linear ? WindowGeometry{{1, 1, int(l.gemm_m())}, Window{}} : WindowGeometry{l.in_shape, l.window};
            ++shapes[s];
        }
    }
    return shapes;
}

struct Totals {
    double ops = 0, ours = 0, dnnl = 0;
};

double process_cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::string shape_name(const Shape& s) {
    char name[64];
    std::snprintf(name, sizeof name, "%dx%dx%d %dx%d/%d/%d", s.g.in.h, s.g.in.w, s.g.in.c, s.g.window.kernel_h,
                  s.g.window.kernel_w, s.g.window.stride_h, s.g.window.pad_top);
    return name;
}

void run_table(const std::map<Shape, int>& shapes, int batch, int threads, double ghz, Totals& total) {
    const double wall0 = now(), cpu0 = process_cpu_seconds();
    const FastKernel kernel = resolve_fast_kernel(g_kernel);
    const double peak = peak_macs_per_cycle(kernel, ghz) * 2 * ghz * threads;   // GOPS
    std::printf("\n== %d thread%s, batch %d, fast kernel %s, IM2COL %s, peak %.0f GOPS ==\n", threads,
                threads == 1 ? "" : "s", batch, to_string(kernel), to_string(im2col_kernel()), peak);
    std::printf("%-20s %4s %5s %6s %3s | %8s %8s %6s %6s | %s\n", "in HxWxC k/s/p", "N", "M", "P", "cnt", "ours",
                "oneDNN", "ratio", "%peak", "oneDNN implementation");
    for (const auto& [s, count] : shapes) {
        pcg32 rng(1);
        Case l{s, batch, {}, {}, {}};
        l.x = s.signed_input() ? random_bytes(rng, s.g.in.size() * batch, -128, 127)
                               : random_bytes(rng, s.g.in.size() * batch, 0, 127);
        l.w = random_bytes(rng, l.n() * l.m(), -128, 127);
        l.bias = random_bytes(rng, l.n(), -128, 127);
        Ours ours(l);
        double t_ours = 0, t_dnnl = 0;
        std::string impl = "-";
#ifdef AIMCEMU_HAVE_DNNL
        set_omp_threads(threads);
        OneDnn dnnl(l);
        impl = dnnl.impl();
        std::tie(t_ours, t_dnnl) = best_of_alternating([&] { ours.run(threads); }, [&] { dnnl.run(); }, g_budget);
#else
        std::tie(t_ours, t_dnnl) = best_of_alternating([&] { ours.run(threads); }, [] {}, g_budget);
        t_dnnl = 0;
#endif
        const std::string name = shape_name(s);
        const double ops = l.ops();
        std::printf("%-20s %4d %5lld %6lld %3d | %8.1f %8.1f %6.2f %5.0f%% | %s\n", name.c_str(), s.n, (long long)l.m(),
                    (long long)l.p(), count, ops / t_ours / 1e9, t_dnnl > 0 ? ops / t_dnnl / 1e9 : 0.0,
                    t_dnnl > 0 ? t_dnnl / t_ours : 0.0, peak > 0 ? 100.0 * ops / t_ours / 1e9 / peak : 0.0,
                    impl.c_str());
        std::fflush(stdout);
        total.ops += ops * count;
        total.ours += t_ours * count;
        total.dnnl += t_dnnl * count;
    }
    std::printf("%-20s %4s %5s %6s %3s | %8.1f %8.1f %6.2f %5.0f%% | (weighted by occurrences; GOPS)\n",
                "TOTAL", "", "", "", "", total.ops / total.ours / 1e9,
                total.dnnl > 0 ? total.ops / total.dnnl / 1e9 : 0.0, total.dnnl > 0 ? total.dnnl / total.ours : 0.0,
                peak > 0 ? 100.0 * total.ops / total.ours / 1e9 / peak : 0.0);
    std::printf("(this table: %.1f s wall, %.1f s process CPU)\n", now() - wall0, process_cpu_seconds() - cpu0);
}

// Sets g_kernel to the kernel named `name`; false, with the reason and the kernels this CPU has
// on stderr, for a name that is unknown or whose kernel this CPU or build lacks (a clear message
// rather than an uncaught FormatError's abort).
bool pick_kernel(const std::string& name) {
    try {
        g_kernel = resolve_fast_kernel(fast_kernel_from_string(name, "--kernel"));
        return true;
    } catch (const FormatError& e) {
        std::string offered;
        for (FastKernel k : kAllFastKernels)
            if (fast_kernel_available(k)) offered += std::string(offered.empty() ? "" : ", ") + to_string(k);
        std::fprintf(stderr, "bench_gemm: %s (this CPU and build offer: %s)\n", e.what(), offered.c_str());
        return false;
    }
}

}  // namespace

int main(int argc, char** argv) {
    // oneDNN's OpenMP threads spin after each call by default and would steal the second core
    // from our path when the two alternate; make them sleep.  libgomp reads the variable when it
    // loads, so set it and start again.
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
    int batch = 1, max_threads = resolve_threads(0);
    std::string only;
    constexpr const char* kUsage =
        "usage: bench_gemm [--threads N] [--batch N] [--kernel NAME] [--only TEXT] [--budget SECONDS]\n";
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") { std::printf("%s", kUsage); return 0; }
        if (i + 1 >= argc) { std::fprintf(stderr, "bench_gemm: %s needs a value\n%s", argv[i], kUsage); return 2; }
        const char* value = argv[i + 1];
        if (flag == "--batch") batch = std::max(1, std::atoi(value));
        else if (flag == "--threads") max_threads = std::max(1, std::atoi(value));
        else if (flag == "--kernel") {
            if (!pick_kernel(value)) return 2;
        }
        else if (flag == "--only") only = value;
        else if (flag == "--budget") g_budget = std::max(0.01, std::atof(value));
        else { std::fprintf(stderr, "bench_gemm: unknown option %s\n%s", argv[i], kUsage); return 2; }
    }
    auto shapes = distinct_shapes();
    if (!only.empty()) std::erase_if(shapes, [&](const auto& entry) { return shape_name(entry.first).find(only) == std::string::npos; });
    if (shapes.empty()) {   // an empty table would print a TOTAL of nan
        std::fprintf(stderr, "bench_gemm: --only '%s' matches no shape (names look like '7x7x512 3x3/1/1')\n", only.c_str());
        return 2;
    }
    const double ghz = measure_ghz();
    std::printf("bench_gemm: %zu distinct conv/linear shapes of ResNet-18 + ResNet-50 v1 at 224x224; "
                "measured clock %.2f GHz\n", shapes.size(), ghz);
#ifndef AIMCEMU_HAVE_DNNL
    std::printf("(built without oneDNN: no reference column)\n");
#endif
    Totals one, all;
    run_table(shapes, batch, 1, ghz, one);
    if (max_threads > 1) run_table(shapes, batch, max_threads, ghz, all);
    return 0;
}
