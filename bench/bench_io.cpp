// Benchmark: writing an HDF5 results file (formats/results.hpp), against two references
// measured in the same run on the same bytes: zlib's compress2 at the writer's deflate level (the
// floor for a deflated file) and a plain binary write of the activations (the floor for an
// uncompressed one).  Data: ResNet-18 at 64x64, a batch of images, the noise-free reference
// plus noisy rounds made by flipping a few percent of the activation codes by +-1..3.
// Prints MB/s and ratios; asserts nothing.
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <pcg_random.hpp>

#include "formats/results.hpp"
#include "pu_model/inference.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kImages = 8;
constexpr int kRounds = 8;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Per layer: reference [image, y, x, c] and per-round noisy copies.
struct Activations {
    std::vector<std::vector<std::int8_t>> reference;           // [layer]
    std::vector<std::vector<std::vector<std::int8_t>>> rounds;  // [round][layer]
    std::size_t bytes = 0;
};

Activations make_activations(const Network& net) {
    pcg32 rng(7, 11);
    std::vector<Tensor8> images(kImages);
    for (auto& img : images) {
        img.shape = net.input_shape;
        img.data.resize(std::size_t(img.shape.size()));
        for (auto& v : img.data) v = std::int8_t(int(rng(256u)) - 128);
    }
    RunOptions options;
    options.threads = 0;
    const auto outputs = run_network_batch(net, images, options);
    Activations a;
    a.reference.resize(net.layers.size());
    for (std::size_t l = 0; l < net.layers.size(); ++l)
        for (const auto& per_image : outputs) {
            const auto& d = per_image[l].data;
            a.reference[l].insert(a.reference[l].end(), d.begin(), d.end());
        }
    a.rounds.assign(kRounds, a.reference);
    for (auto& round : a.rounds)
        for (auto& layer : round)
            for (auto& v : layer)
                if (rng(100u) < 5) v = std::int8_t(std::clamp(int(v) + int(rng(7u)) - 3, -128, 127));
    for (const auto& layer : a.reference) a.bytes += layer.size() * (1 + kRounds);
    return a;
}

double write_results(const Network& net, const Activations& a, const std::string& path) {
    ResultsSpec spec;
    spec.labels.assign(kImages, 0);
    for (int r = 0; r < kRounds; ++r) spec.rounds.push_back({r, 0, 0.0, "none"});
    const auto t0 = Clock::now();
    ResultsWriter writer(path, net, spec);
    for (std::size_t l = 0; l < net.layers.size(); ++l) writer.set_reference(int(l), a.reference[l]);
    for (int r = 0; r < kRounds; ++r)
        for (std::size_t l = 0; l < net.layers.size(); ++l) writer.set_round(std::size_t(r), int(l), a.rounds[r][l]);
    writer.commit();
    return seconds_since(t0);
}

double zlib_compress_all(const Activations& a, std::size_t& compressed) {
    const auto t0 = Clock::now();
    compressed = 0;
    auto squeeze = [&](const std::vector<std::int8_t>& bytes) {
        uLongf out_size = compressBound(uLong(bytes.size()));
        std::vector<Bytef> out(out_size);
        compress2(out.data(), &out_size, reinterpret_cast<const Bytef*>(bytes.data()), uLong(bytes.size()), 1);
        compressed += out_size;
    };
    for (const auto& layer : a.reference) squeeze(layer);
    for (const auto& round : a.rounds)
        for (const auto& layer : round) squeeze(layer);
    return seconds_since(t0);
}

double raw_write_all(const Activations& a, const std::string& path) {
    const auto t0 = Clock::now();
    {
        std::ofstream out(path, std::ios::binary);
        for (const auto& layer : a.reference) out.write(reinterpret_cast<const char*>(layer.data()), std::streamsize(layer.size()));
        for (const auto& round : a.rounds)
            for (const auto& layer : round) out.write(reinterpret_cast<const char*>(layer.data()), std::streamsize(layer.size()));
    }
    return seconds_since(t0);
}

}  // namespace

int main() {
    const Network net = zoo::resnet18(1, 64, 1000);
    const Activations a = make_activations(net);
    const auto dir = std::filesystem::temp_directory_path();
    const std::string h5 = (dir / "aimcemu_bench_io.h5").string(), raw = (dir / "aimcemu_bench_io.bin").string();
    const double mb = double(a.bytes) / 1e6;

    double best_h5 = 1e300, best_zlib = 1e300, best_raw = 1e300;
    std::size_t compressed = 0;
    for (int rep = 0; rep < 3; ++rep) {  // interleaved so machine load hits all three alike
        best_h5 = std::min(best_h5, write_results(net, a, h5));
        best_zlib = std::min(best_zlib, zlib_compress_all(a, compressed));
        best_raw = std::min(best_raw, raw_write_all(a, raw));
    }
    const auto file_bytes = std::filesystem::file_size(h5);
    std::printf("results file: ResNet-18 @64x64, %d images, reference + %d noisy rounds, %zu layers: %.1f MB of int8\n",
                kImages, kRounds, net.layers.size(), mb);
    std::printf("%-34s %10s %10s %12s\n", "path", "time [s]", "MB/s", "writer t / t");
    std::printf("%-34s %10.3f %10.1f %12.2f\n", "ResultsWriter (deflate 1, metrics)", best_h5, mb / best_h5, 1.0);
    std::printf("%-34s %10.3f %10.1f %12.2f\n", "zlib compress2 level 1 (same bytes)", best_zlib, mb / best_zlib, best_h5 / best_zlib);
    std::printf("%-34s %10.3f %10.1f %12.2f\n", "raw binary write (same bytes)", best_raw, mb / best_raw, best_h5 / best_raw);
    std::printf("file %.1f MB (zlib alone %.1f MB): writer time / zlib time = %.2f\n", double(file_bytes) / 1e6,
                double(compressed) / 1e6, best_h5 / best_zlib);
    std::filesystem::remove(h5);
    std::filesystem::remove(raw);
    return 0;
}
