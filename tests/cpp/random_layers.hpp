// Synthetic layers for the C++ tests: int8 codes drawn from a pcg32 stream, so that a test's
// network is the same on every machine and every run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <pcg_random.hpp>

#include "formats/network.hpp"

namespace aimcemu::test_data {

// `count` int8 codes, uniform on [-span, span], one draw each (span 128 draws +128 too, stored as
// -128: some tests want every int8 code, -128 included).
inline std::vector<std::int8_t> random_int8(pcg32& rng, std::int64_t count, int span = 127) {
    std::vector<std::int8_t> codes(static_cast<std::size_t>(count));
    for (auto& code : codes) code = std::int8_t(int(rng(std::uint32_t(2 * span + 1))) - span);
    return codes;
}

// A conv or linear layer with `out_channels` outputs of `inputs_per_output` inputs each
// (kernel^2 x C_in), reading layer `input` through `window`.  Its weights are drawn first, then
// its bias: the tests' fixed networks depend on that order.
inline Layer random_gemm_layer(const std::string& name, LayerKind kind, int input, const Window& window,
                               int out_channels, std::int64_t inputs_per_output, pcg32& rng, int bias_shift,
                               int out_shift, bool relu = false) {
    Layer layer;
    layer.name = name;
    layer.kind = kind;
    layer.input = input;
    layer.window = window;
    layer.out_channels = out_channels;
    layer.weights = random_int8(rng, out_channels * inputs_per_output);
    layer.bias = random_int8(rng, out_channels);
    layer.bias_shift = bias_shift;
    layer.out_shift = out_shift;
    layer.relu = relu;
    return layer;
}

// A max pool over layer `input` through `window`.
inline Layer max_pool_layer(const std::string& name, int input, const Window& window) {
    Layer layer;
    layer.name = name;
    layer.kind = LayerKind::MaxPool;
    layer.input = input;
    layer.window = window;
    return layer;
}

}  // namespace aimcemu::test_data
