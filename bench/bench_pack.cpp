// Packing ResNet-50's 54 GEMM layers (25.5 M weights) for the VNNI kernel, as every noisy pass
// does for its AIMC layers (one PackedWeights per layer, layers shared over the threads, the
// packed bytes recycled through a PassBuffers as the emulator's passes do): the one-pass
// vectorised packer (what runs) against the definition (scalar vnni_pack_weights after a zero
// fill, then the row and segment sums, into buffers allocated once), alternating in one run,
// best of the repeats, wall and process CPU time.
// Usage: bench_pack [threads] [repeats]   (default 2 threads, 7 repeats)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <memory>
#include <vector>

#include "formats/zoo.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/inference.hpp"

using namespace aimcemu;

namespace {

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The definition's work per layer: packed bytes plus the row sums and the segment prefix sums.
void definition_pack(const Network& net, int threads, std::vector<std::vector<std::int8_t>>& out) {
    parallel_for(std::int64_t(net.layers.size()), threads, [&](std::int64_t i) {
        const Layer& l = net.layers[std::size_t(i)];
        if (!l.is_gemm()) return;
        const std::int64_t n = l.gemm_n(), m = l.gemm_m();
        auto& packed = out[std::size_t(i)];
        detail::vnni_pack_weights(l.weights.data(), n, m, packed.data());
        const std::int64_t segment = l.kind == LayerKind::Conv && l.window.kernel_h > 1 ? l.window.kernel_w * l.in_shape.c : 0;
        std::vector<std::int64_t> rowsum(std::size_t(n), 0);
        std::vector<std::uint32_t> sums(std::size_t(n) * std::size_t(segment ? m / segment + 1 : 1), 0);
        for (std::int64_t row = 0; row < n; ++row) {
            std::uint32_t prefix = 0;
            for (std::int64_t k = 0; k < m; ++k) {
                rowsum[std::size_t(row)] += l.weights[std::size_t(row * m + k)];
                prefix += 128u * std::uint32_t(std::int32_t(l.weights[std::size_t(row * m + k)]));
                if (segment && (k + 1) % segment == 0) sums[std::size_t((k + 1) / segment * n + row)] = prefix;
            }
        }
    });
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
    if (!detail::cpu_has_vnni512()) {
        std::printf("no AVX-512 VNNI on this CPU\n");
        return 0;
    }
    Network net = zoo::by_name("resnet50");
    net.resolve("<bench>");
    std::int64_t weights = 0;
    std::vector<std::vector<std::int8_t>> definition(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (net.layers[i].is_gemm()) {
            weights += std::int64_t(net.layers[i].weights.size());
            definition[i].resize(std::size_t(detail::vnni_packed_size(net.layers[i].gemm_n(), net.layers[i].gemm_m())));
        }
    PassBuffers buffers;
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}};   // [one pass, definition][wall, cpu]
    for (int r = 0; r < repeats; ++r) {
        for (int side = 0; side < 2; ++side) {
            const double w0 = wall_seconds(), c0 = cpu_seconds();
            if (side == 0) {
                buffers.begin_pass();
                std::vector<std::unique_ptr<PackedWeights>> packed(net.layers.size());
                parallel_for(std::int64_t(net.layers.size()), threads, [&](std::int64_t i) {
                    const Layer& l = net.layers[std::size_t(i)];
                    if (!l.is_gemm()) return;
                    const std::int64_t segment =
                        l.kind == LayerKind::Conv && l.window.kernel_h > 1 ? l.window.kernel_w * l.in_shape.c : 0;
                    packed[std::size_t(i)] = std::make_unique<PackedWeights>(
                        l.weights.data(), l.bias.data(), l.bias_shift, l.gemm_n(), l.gemm_m(), FastKernel::Vnni512,
                        segment, &buffers);
                });
            } else {
                definition_pack(net, threads, definition);
            }
            best[side][0] = std::min(best[side][0], wall_seconds() - w0);
            best[side][1] = std::min(best[side][1], cpu_seconds() - c0);
        }
    }
    std::printf("ResNet-50, %lld weights, %d threads, best of %d\n", (long long)weights, threads, repeats);
    std::printf("%-34s %9s %9s %12s\n", "", "wall ms", "cpu ms", "M weights/s");
    const char* names[2] = {"one-pass packer (recycled buffers)", "definition (scalar pack + sums)"};
    for (int side = 0; side < 2; ++side)
        std::printf("%-34s %9.2f %9.2f %12.0f\n", names[side], 1e3 * best[side][0], 1e3 * best[side][1],
                    double(weights) / best[side][0] / 1e6);
    std::printf("definition / one pass, wall: %.2f\n", best[1][0] / best[0][0]);
    return 0;
}
