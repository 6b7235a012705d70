// Co-simulation: the Verilated analog tile peripherals (rtl/pu_periph.sv) against the bit-exact
// C++ model (niu/peripherals.hpp), result for result.
//
// Each random case draws settings (ideal, noise only, bound only, ADC of 2..2^20 steps, DAC
// steps with input bounds from 2^-26 to 64, both noise managements), weight and input scales, and
// a (seed, chip, layer, round, image) key; the harness loads the lanes' generator states, streams
// chunks of R_g accumulators (random gaps between them: the generators step only on valid chunks)
// and compares every result with periph_datapath() and the C++ streams.  Further cases pin the
// DAC step's shift at the ends of its range (SCALE_SHIFT 16, the largest step, to 63).  A layer
// case runs Peripherals::apply_output on a whole conv layer's accumulators (N not a multiple of
// R_g: padded chunks) and compares the RTL's results with it.  Negative test: one wrong bit in one
// lane's loaded state changes that lane's results and no other lane's.
#include <gtest/gtest.h>

#include <pcg_random.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "Vpu_periph.h"
#include "niu/peripherals.hpp"
#include "verilated.h"

using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

constexpr int kLanes = kPeriphLanes;

class Harness {
public:
    Harness() : top_(std::make_unique<Vpu_periph>()) {
        top_->clk_i = 0;
        top_->rst_ni = 0;
        top_->valid_i = 0;
        top_->seed_load_i = 0;
        top_->eval();
        tick();
        top_->rst_ni = 1;
        top_->eval();
    }

    void set_registers(const PeriphRegisters& r) {
        top_->scale_i = std::uint32_t(r.scale);
        top_->scale_shift_i = std::uint32_t(r.scale_shift);
        top_->sigma_i = std::uint32_t(r.sigma);
        top_->clip_i = r.clip;
        top_->bound_i = std::uint32_t(r.bound);
        top_->adc_i = r.adc;
        top_->recip_i = std::uint32_t(r.recip);
        top_->recip_shift_i = std::uint32_t(r.recip_shift);
        top_->step_i = std::uint32_t(r.step);
        top_->step_shift_i = std::uint32_t(r.step_shift);
        top_->code_max_i = std::uint32_t(r.code_max);
    }

    void load(int lane, const RngState& s) {
        top_->seed_load_i = 1u << lane;
        for (int w = 0; w < 4; ++w) top_->seed_state_i[w] = s[std::size_t(w)];
        tick();
        top_->seed_load_i = 0;
    }

    // Drives one cycle: a chunk (valid) or a gap; collects any chunk that leaves.
    void cycle(const std::array<std::int32_t, kLanes>* chunk) {
        top_->valid_i = chunk != nullptr;
        for (int l = 0; l < kLanes; ++l) top_->acc_i[l] = chunk ? std::uint32_t((*chunk)[std::size_t(l)]) : 0xDEADBEEFu;
        tick();
        if (top_->valid_o) {
            std::array<std::int32_t, kLanes> y{};
            for (int l = 0; l < kLanes; ++l) y[std::size_t(l)] = std::int32_t(top_->y_o[l]);
            out.push_back(y);
        }
    }

    void drain() {
        for (int i = 0; i < gen::NIU_PERIPH_PIPE_STAGES + 2; ++i) cycle(nullptr);
    }

    std::vector<std::array<std::int32_t, kLanes>> out;

private:
    void tick() {
        top_->clk_i = 0;
        top_->eval();
        top_->clk_i = 1;
        top_->eval();
    }
    std::unique_ptr<Vpu_periph> top_;
};

PeripheralSettings random_settings(pcg32& rng) {
    PeripheralSettings s;
    const int kind = int(rng(6));
    if (kind == 0) return s;                                   // ideal
    s.out_noise = kind == 2 ? 0.0 : 0.5 * double(rng(1000)) / 1000.0;
    s.noise_management = rng(2) ? NoiseManagement::AbsMax : NoiseManagement::None;
    if (rng(2)) s.inp_steps = 1 + int(rng(254));
    // Half the bounds log-uniform over 2^-26 .. 64: DAC steps from below 2^-33 (SCALE_SHIFT 63)
    // up to 2^13 (shift 17).
    const double log_uniform = std::ldexp(1.0 + double(rng(1000)) / 1000.0, int(rng(32)) - 26);
    s.inp_bound = rng(2) ? 0.25 + double(rng(8)) / 2.0 : log_uniform;
    if (kind >= 2) s.out_bound = 0.5 + double(rng(4000)) / 100.0;
    if (kind >= 3) s.out_steps = 1 << (1 + int(rng(20)));     // 2 .. 2^20 steps
    if (kind == 5) s.out_steps += int(rng(2));                 // odd step counts too
    return s;
}

std::int32_t random_acc(pcg32& rng) {
    switch (rng(3)) {
        case 0: return std::int32_t(rng());                                  // anywhere in int32
        case 1: return std::int32_t(int(rng(2000001)) - 1000000);
        default: return std::int32_t(int(rng(20001)) - 10000);
    }
}

// Streams random chunks through the block with registers r and the lanes' streams of a random
// key, and compares every result with the model.
void expect_block_equals_model(pcg32& rng, const PeriphRegisters& r, const std::string& where) {
    const std::uint64_t seed = rng(), chip = rng(4), layer = rng(50), round = rng(9), image = rng(1000);
    Harness h;
    h.set_registers(r);
    std::array<RngState, kLanes> model{};
    for (int l = 0; l < kLanes; ++l) {
        model[std::size_t(l)] = periph_stream_state(seed, chip, layer, round, image, l);
        h.load(l, model[std::size_t(l)]);
    }
    std::vector<std::array<std::int32_t, kLanes>> expected;
    const int chunks = 40 + int(rng(200));
    for (int k = 0; k < chunks; ++k) {
        std::array<std::int32_t, kLanes> acc{}, y{};
        for (int l = 0; l < kLanes; ++l) {
            acc[std::size_t(l)] = random_acc(rng);
            const std::int32_t z = gaussian_chip(xoshiro_next(model[std::size_t(l)]) >> 8);
            y[std::size_t(l)] = periph_datapath(r, acc[std::size_t(l)], z);
        }
        expected.push_back(y);
        while (rng(4) == 0) h.cycle(nullptr);   // gaps: nothing steps
        h.cycle(&acc);
    }
    h.drain();
    ASSERT_EQ(h.out.size(), expected.size()) << where;
    for (std::size_t k = 0; k < expected.size(); ++k)
        for (int l = 0; l < kLanes; ++l)
            ASSERT_EQ(h.out[k][std::size_t(l)], expected[k][std::size_t(l)])
                << where << " chunk " << k << " lane " << l << " adc " << r.adc << " clip " << r.clip
                << " scale " << r.scale << " >> " << r.scale_shift;
}

}  // namespace

TEST(PeriphCosim, RandomRegistersAndStreams) {
    pcg32 rng(2024);
    int fewest_shift = 64, most_shift = 0;   // of the cases with a DAC
    for (int c = 0; c < 60; ++c) {
        const PeripheralSettings s = random_settings(rng);
        const int s_w = 1 + int(rng(127)), s_x = 1 + int(rng(128));
        const PeriphRegisters r = periph_registers(s, s_w, s_x);
        if (s.inp_steps > 0) {
            fewest_shift = std::min(fewest_shift, r.scale_shift);
            most_shift = std::max(most_shift, r.scale_shift);
        }
        expect_block_equals_model(rng, r, "case " + std::to_string(c));
        if (HasFatalFailure()) return;
    }
    // The draws reach both small and large DAC-step shifts (steps of about 2^6 and 2^-25).
    EXPECT_LE(fewest_shift, 24);
    EXPECT_GE(most_shift, 55);
}

// The DAC step at the ends of SCALE_SHIFT's range, with noise, bound and ADC on and off.
TEST(PeriphCosim, DacStepsAtTheEndsOfTheShiftRange) {
    struct Case {
        double inp_bound;
        int s_x, steps, shift;
    };
    const Case cases[] = {
        {64.0, 128, 1, 16},                   // 2^14, the largest step the settings allow
        {64.0, 127, 3, 18},
        {1.0, 1, 254, 37},                    // 1/127: an image whose largest |x| is 1
        {1e-3, 1, 254, 47},
        {std::ldexp(1.0, -19), 1, 128, 55},   // 2^-25
        {std::ldexp(1.5, -27), 1, 128, 63},   // 1.5 * 2^-33: the last normalised mantissa
        {std::ldexp(1.0, -30), 1, 254, 63},   // below 2^-33: every product rounds to 0
    };
    pcg32 rng(7);
    for (const Case& c : cases)
        for (int variant = 0; variant < 3; ++variant) {
            PeripheralSettings s;
            s.inp_steps = c.steps;
            s.inp_bound = c.inp_bound;
            if (variant >= 1) s.out_noise = 0.05;
            if (variant == 2) {
                s.out_bound = 4.0;
                s.out_steps = 254;
            }
            const PeriphRegisters r = periph_registers(s, 100, c.s_x);
            ASSERT_EQ(r.scale_shift, c.shift) << "inp_bound " << c.inp_bound;
            expect_block_equals_model(rng, r, "inp_bound " + std::to_string(c.inp_bound) + " variant " +
                                                  std::to_string(variant));
            if (HasFatalFailure()) return;
        }
}

TEST(PeriphCosim, WholeLayerEqualsTheModelsApplyOutput) {
    // A 1x1 conv of N = 21 outputs per pixel (three chunks, the last padded) with zero bias, so
    // that its accumulators are what the SA hands the block.
    Network net;
    net.name = "cosim";
    net.input_shape = {5, 4, 3};
    Layer l;
    l.name = "conv";
    l.kind = LayerKind::Conv;
    l.window = Window::square(1);
    l.out_channels = 21;
    pcg32 rng(9);
    l.weights.resize(21 * 3);
    for (auto& w : l.weights) w = std::int8_t(int(rng(255)) - 127);
    l.bias.assign(21, 0);
    net.layers.push_back(l);
    net.resolve();
    Tensor8 x{net.input_shape, std::vector<std::int8_t>(std::size_t(net.input_shape.size()))};
    for (auto& v : x.data) v = std::int8_t(int(rng(256)) - 128);

    PeripheralSettings s;
    s.out_noise = 0.3;
    s.out_bound = 2.0;
    s.out_steps = 64;
    const std::uint64_t seed = 77, chip = 1, round = 4, image = 12;
    const Peripherals p(net, {s}, seed, chip, round);
    const std::int64_t pixels = 20, n = 21;
    std::vector<std::int32_t> acc(std::size_t(pixels * n));
    for (auto& a : acc) a = std::int32_t(int(rng(200001)) - 100000);
    std::vector<std::int32_t> model = acc;
    p.apply_output(0, std::int64_t(image), x, model.data(), pixels, n);

    Harness h;
    h.set_registers(p.registers(0, x));
    for (int lane = 0; lane < kLanes; ++lane) h.load(lane, periph_stream_state(seed, chip, 0, round, image, lane));
    for (std::int64_t px = 0; px < pixels; ++px)
        for (std::int64_t c = 0; c < n; c += kLanes) {
            std::array<std::int32_t, kLanes> chunk{};
            for (int k = 0; k < kLanes; ++k) chunk[std::size_t(k)] = c + k < n ? acc[std::size_t(px * n + c + k)] : 0;
            h.cycle(&chunk);
        }
    h.drain();
    const std::int64_t per_pixel = (n + kLanes - 1) / kLanes;
    ASSERT_EQ(std::int64_t(h.out.size()), pixels * per_pixel);
    int changed = 0;
    for (std::int64_t px = 0; px < pixels; ++px)
        for (std::int64_t o = 0; o < n; ++o) {
            const std::int32_t rtl = h.out[std::size_t(px * per_pixel + o / kLanes)][std::size_t(o % kLanes)];
            ASSERT_EQ(rtl, model[std::size_t(px * n + o)]) << "pixel " << px << " output " << o;
            changed += rtl != acc[std::size_t(px * n + o)];
        }
    EXPECT_GT(changed, pixels * n * 9 / 10);   // the case exercises the block, not a bypass
}

TEST(PeriphCosim, AWrongGeneratorStateChangesOnlyItsLane) {
    PeripheralSettings s;
    s.out_noise = 0.5;
    const PeriphRegisters r = periph_registers(s, 100, 100);
    std::vector<std::array<std::int32_t, kLanes>> runs[2];
    for (int variant = 0; variant < 2; ++variant) {
        Harness h;
        h.set_registers(r);
        for (int l = 0; l < kLanes; ++l) {
            RngState st = periph_stream_state(1, 2, 3, 4, 5, l);
            if (variant == 1 && l == 3) st[2] ^= 1u << 17;
            h.load(l, st);
        }
        const std::array<std::int32_t, kLanes> zero{};
        for (int k = 0; k < 200; ++k) h.cycle(&zero);
        h.drain();
        runs[variant] = h.out;
    }
    ASSERT_EQ(runs[0].size(), 200u);
    int differ[kLanes] = {};
    for (std::size_t k = 0; k < runs[0].size(); ++k)
        for (int l = 0; l < kLanes; ++l) differ[l] += runs[0][k][std::size_t(l)] != runs[1][k][std::size_t(l)];
    for (int l = 0; l < kLanes; ++l) {
        if (l == 3) EXPECT_GT(differ[l], 150) << "lane " << l;
        else EXPECT_EQ(differ[l], 0) << "lane " << l;
    }
}
