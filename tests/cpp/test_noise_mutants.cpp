// Tests added by the mutation check of the noise models (docs/testing_noise.md): each one kills
// a plausible physics mistake that no earlier test caught, asserting a closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "noise_models/noise_model.hpp"
#include "noise_models/pcm.hpp"

using namespace aimcemu::noise;

namespace {

// A layer of several copy chunks whose largest weight sits in the last chunk: small weights
// (|w| <= 0.1) everywhere but one full-scale weight at the end.
std::vector<double> layer_with_its_max_in_the_last_chunk(std::size_t chunks) {
    const std::size_t n = chunks * kChunkWeights;
    std::vector<double> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = 0.1 * std::sin(0.37 * double(i) + 0.1);
    w[n - 1] = 1.0;
    return w;
}

}  // namespace

// aihwkit re-converts the programmed weights before drift with one scale for the whole layer,
// g_max / max|W_prog|; with drift and read noise off a read is then W_prog itself (a closed
// form: the conversion round trip).  A scale fitted on part of the layer (the first chunk's
// max, mutant "chunk_max") clips the larger weights at g_max and reads them back too small.
// Tolerance 1e-12 relative: the round trip is a product and a quotient by the same scale.
TEST(NoiseMutants, ReconvertedReadUsesTheWholeLayersMax) {
    for (const char* name : {"pcm_like", "hermes", "state_independent"}) {
        auto m = make_noise_model(name, {{"read_noise_scale", 0.0}, {"drift_scale", 0.0}});
        const std::vector<double> w = layer_with_its_max_in_the_last_chunk(3);
        const LayerState s = m->program(w, {std::int64_t(w.size())}, {5, 1, 2});
        const std::vector<double> w_prog = m->programmed_weights(s);
        for (double t : {0.0, 3600.0}) {
            const std::vector<double> read = m->read(s, t, 1);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < w.size(); ++i)
                wrong += std::abs(read[i] - w_prog[i]) > 1e-12 * std::abs(w_prog[i]) + 1e-15;
            EXPECT_EQ(wrong, 0u) << name << " t=" << t;
            EXPECT_NEAR(read.back(), w_prog.back(), 1e-12 * std::abs(w_prog.back())) << name;
        }
    }
}
