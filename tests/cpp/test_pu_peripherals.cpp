// Analog tile peripherals in the PU model: ideal settings give the exact digital path bit for bit,
// bad settings are rejected naming the layer and the field, noise is keyed by (seed, chip, layer,
// round, image, output) so thread counts and batching never change results, and the driver's
// registers hold the values the settings define.  Statistics against aihwkit's definitions are
// in tests/python/test_peripherals.py; the RTL co-simulation in tests/cosim/test_periph_cosim.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <pcg_random.hpp>

#include "common/errors.hpp"
#include "niu/peripherals.hpp"
#include "pu_model/inference.hpp"
#include "random_layers.hpp"

using namespace aimcemu;
using namespace aimcemu::niu;

namespace {

using test_data::random_int8;

Layer gemm(const std::string& name, LayerKind kind, int input, int k, int pad, int n, std::int64_t m, pcg32& rng,
           int out_shift) {
    return test_data::random_gemm_layer(name, kind, input, Window::square(k, 1, pad), n, m, rng, 2, out_shift,
                                         kind == LayerKind::Conv);
}

// conv 3x3 (N = 13: a partial chunk of R_g lanes) -> max pool -> conv 1x1 -> linear.
Network network() {
    pcg32 rng(5);
    Network net;
    net.name = "periph";
    net.input_shape = {7, 6, 3};
    net.layers.push_back(gemm("c0", LayerKind::Conv, -1, 3, 1, 13, 27, rng, 8));
    net.layers.push_back(test_data::max_pool_layer("mp", 0, Window::square(2, 2)));
    net.layers.push_back(gemm("c1", LayerKind::Conv, 1, 1, 0, 16, 13, rng, 7));
    net.layers.push_back(gemm("fc", LayerKind::Linear, 2, 1, 0, 10, 3 * 3 * 16, rng, 10));
    net.resolve();
    return net;
}

std::vector<Tensor8> images(const Network& net, int count, std::uint64_t seed) {
    pcg32 rng(seed);
    std::vector<Tensor8> out;
    for (int i = 0; i < count; ++i) out.push_back({net.input_shape, random_int8(rng, net.input_shape.size(), 128)});
    return out;
}

using Settings = std::vector<std::optional<PeripheralSettings>>;

Settings on_gemm_layers(const Network& net, const PeripheralSettings& s) {
    Settings out(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (net.layers[i].is_gemm()) out[i] = s;
    return out;
}

PeripheralSettings aihwkit_default() {   // IOParameters' defaults
    PeripheralSettings s;
    s.inp_steps = 126;
    s.inp_bound = 1.0;
    s.out_noise = 0.06;
    s.out_bound = 12.0;
    s.out_steps = 510;
    return s;
}

std::vector<std::vector<Tensor8>> run(const Network& net, const std::vector<Tensor8>& in, const Peripherals* p,
                                      int threads, GemmBackend backend = GemmBackend::Fast, std::int64_t first = 0) {
    RunOptions o;
    o.backend = backend;
    o.threads = threads;
    o.peripherals = p;
    o.first_image = first;
    return run_network_batch(net, in, o);
}

// The bytes of every layer of every image.
std::vector<std::vector<std::int8_t>> bytes(const std::vector<std::vector<Tensor8>>& outputs) {
    std::vector<std::vector<std::int8_t>> out;
    for (const auto& image : outputs)
        for (const auto& layer : image) out.push_back(layer.data);
    return out;
}

}  // namespace

TEST(Peripherals, IdealSettingsGiveTheDigitalPathBitForBit) {
    const Network net = network();
    const auto in = images(net, 5, 1);
    const auto digital = run(net, in, nullptr, 2);
    for (NoiseManagement nm : {NoiseManagement::AbsMax, NoiseManagement::None}) {
        PeripheralSettings ideal;
        ideal.noise_management = nm;
        ASSERT_TRUE(ideal.ideal());
        const Peripherals p(net, on_gemm_layers(net, ideal), 7, 1, 3);
        for (GemmBackend b : {GemmBackend::Fast, GemmBackend::Reference})
            EXPECT_EQ(bytes(run(net, in, &p, 2, b)), bytes(digital)) << to_string(nm) << " " << to_string(b);
    }
}

TEST(Peripherals, NonIdealSettingsChangeOutputs) {
    const Network net = network();
    const auto in = images(net, 3, 2);
    const auto digital = run(net, in, nullptr, 1);
    const Peripherals p(net, on_gemm_layers(net, aihwkit_default()), 7, 0, 0);
    const auto analog = run(net, in, &p, 1);
    EXPECT_NE(analog[0][0].data, digital[0][0].data);
    EXPECT_EQ(analog[0][1].shape, digital[0][1].shape);
}

TEST(Peripherals, ResultsIndependentOfThreadsBatchingAndBackend) {
    const Network net = network();
    const auto in = images(net, 6, 3);
    const Peripherals p(net, on_gemm_layers(net, aihwkit_default()), 11, 2, 5);
    const auto one = bytes(run(net, in, &p, 1));
    EXPECT_EQ(bytes(run(net, in, &p, 3)), one);
    EXPECT_EQ(bytes(run(net, in, &p, 2, GemmBackend::Reference)), one);
    // Image k's noise is keyed by its index in the run, not its position in a batch.
    for (int k : {0, 4}) {
        const auto alone = run(net, {in[std::size_t(k)]}, &p, 1, GemmBackend::Fast, k);
        const auto layers = bytes(alone);
        for (std::size_t l = 0; l < layers.size(); ++l)
            EXPECT_EQ(layers[l], one[std::size_t(k) * layers.size() + l]) << "image " << k << " layer " << l;
    }
}

TEST(Peripherals, NoiseKeyedBySeedChipRoundAndImage) {
    const Network net = network();
    const auto in = images(net, 1, 4);
    PeripheralSettings noisy;
    noisy.out_noise = 0.2;
    const auto c0 = [&](std::uint64_t seed, std::uint64_t chip, std::uint64_t round, std::int64_t image) {
        const Peripherals p(net, on_gemm_layers(net, noisy), seed, chip, round);
        return run(net, in, &p, 1, GemmBackend::Fast, image)[0][0].data;
    };
    const auto base = c0(1, 0, 0, 0);
    EXPECT_EQ(c0(1, 0, 0, 0), base);
    EXPECT_NE(c0(2, 0, 0, 0), base);
    EXPECT_NE(c0(1, 1, 0, 0), base);
    EXPECT_NE(c0(1, 0, 1, 0), base);
    EXPECT_NE(c0(1, 0, 0, 1), base);
}

TEST(Peripherals, BadSettingsNameTheLayerAndTheField) {
    const Network net = network();
    const auto expect_rejected = [&](PeripheralSettings s, int layer, const std::string& field) {
        Settings settings(net.layers.size());
        settings[std::size_t(layer)] = s;
        try {
            Peripherals p(net, settings, 0, 0, 0, "cfg.yaml");
            ADD_FAILURE() << "accepted " << field;
        } catch (const FormatError& e) {
            EXPECT_EQ(e.source(), "cfg.yaml");
            EXPECT_EQ(e.field(), "peripherals." + net.layers[std::size_t(layer)].name + "." + field) << e.what();
        }
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    PeripheralSettings s;
    s.inp_steps = -1;
    expect_rejected(s, 0, "inp_res");
    s = {};
    s.inp_steps = 255;   // codes beyond the INT8 GEMM
    expect_rejected(s, 2, "inp_res");
    s = {};
    s.inp_bound = -1.0;
    expect_rejected(s, 0, "inp_bound");
    s = {};
    s.inp_bound = 0.0;
    expect_rejected(s, 0, "inp_bound");
    s = {};
    s.out_bound = -12.0;
    expect_rejected(s, 3, "out_bound");
    s = {};
    s.out_bound = nan;
    expect_rejected(s, 3, "out_bound");
    s = {};
    s.out_noise = nan;
    expect_rejected(s, 0, "out_noise");
    s = {};
    s.out_noise = -0.1;
    expect_rejected(s, 0, "out_noise");
    s = {};
    s.out_steps = 64;   // an ADC without a bound
    expect_rejected(s, 0, "out_res");
    s.out_bound = 10.0;
    s.out_steps = -4;
    expect_rejected(s, 0, "out_res");
    // A layer without weights has no tile.
    Settings on_pool(net.layers.size());
    on_pool[1] = PeripheralSettings{};
    EXPECT_THROW(Peripherals(net, on_pool, 0, 0, 0), FormatError);
}

// The field of the FormatError `call` throws ("<none>" when it throws none).
template <typename Call>
std::string refused_field(Call call) {
    try {
        call();
    } catch (const FormatError& e) {
        EXPECT_EQ(e.source(), "cfg.yaml") << e.what();
        return e.field();
    }
    return "<none>";
}

// Calls that used to read a disengaged optional, an empty bias table or past its end.
TEST(Peripherals, BadLayerIndexInputOrAccumulatorIsRefused) {
    const Network net = network();
    Settings settings(net.layers.size());
    settings[3] = aihwkit_default();   // fc only: 10 outputs from a 3x3x16 input
    const Peripherals p(net, settings, 1, 0, 0, "cfg.yaml");
    const Tensor8 x{net.layers[3].in_shape, std::vector<std::int8_t>(3 * 3 * 16, 5)};
    std::vector<std::int32_t> acc(2 * 10 + 64, 0);
    for (int layer : {-1, 4, 1000}) {
        EXPECT_EQ(refused_field([&] { p.input_codes(layer, x); }), "layer");
        EXPECT_EQ(refused_field([&] { p.apply_output(layer, 0, x, acc.data(), 1, 10); }), "layer");
        EXPECT_EQ(refused_field([&] { p.registers(layer, x); }), "layer");
    }
    const Tensor8 x0{net.layers[0].in_shape, std::vector<std::int8_t>(std::size_t(net.layers[0].in_shape.size()), 5)};
    EXPECT_EQ(refused_field([&] { p.input_codes(0, x0); }), "peripherals.c0");
    EXPECT_EQ(refused_field([&] { p.apply_output(0, 0, x0, acc.data(), 1, 13); }), "peripherals.c0");
    for (std::int64_t n : {0, 9, 11, 74})
        EXPECT_EQ(refused_field([&] { p.apply_output(3, 0, x, acc.data(), 1, n); }), "acc") << n;
    EXPECT_EQ(refused_field([&] { p.apply_output(3, 0, x, acc.data(), -1, 10); }), "acc");
    EXPECT_EQ(refused_field([&] { p.apply_output(3, 0, x, nullptr, 1, 10); }), "acc");
    const Tensor8 short_x{{1, 1, 16}, std::vector<std::int8_t>(16, 5)};
    EXPECT_EQ(refused_field([&] { p.input_codes(3, short_x); }), "x");
    EXPECT_EQ(refused_field([&] { p.apply_output(3, 0, short_x, acc.data(), 1, 10); }), "x");
    EXPECT_EQ(refused_field([&] { p.apply_output(3, 0, x, acc.data(), 2, 10); }), "<none>");   // any row count
}

// Peripherals sized for one network, run on another (same layer count, another width or bias):
// the run used to read past the bias table or subtract another layer's bias.
TEST(Peripherals, RunOnAnotherNetworkIsRefused) {
    const Network net = network();
    const Peripherals p(net, on_gemm_layers(net, aihwkit_default()), 1, 0, 0, "cfg.yaml");
    const auto in = images(net, 2, 4);
    const auto same = bytes(run(net, in, &p, 1));   // a copy of the same network runs
    EXPECT_EQ(bytes(run(Network(net), in, &p, 2)), same);

    Network wider = net;
    wider.layers[3].out_channels = 12;
    wider.layers[3].weights.resize(std::size_t(12 * 3 * 3 * 16), 1);
    wider.layers[3].bias.resize(12, 0);
    wider.resolve();
    EXPECT_EQ(refused_field([&] { run(wider, in, &p, 1); }), "peripherals.fc");

    Network other_bias = net;
    other_bias.layers[2].bias[5] = std::int8_t(other_bias.layers[2].bias[5] ^ 0x40);
    EXPECT_EQ(refused_field([&] { run(other_bias, in, &p, 1); }), "peripherals.c1");

    Network shorter = net;
    shorter.layers.pop_back();
    shorter.resolve();
    EXPECT_EQ(refused_field([&] { run(shorter, in, &p, 1); }), "peripherals");
}

TEST(Peripherals, RegistersHoldTheSettingsInAccumulatorUnits) {
    const PeripheralSettings s = aihwkit_default();
    const PeriphRegisters r = periph_registers(s, 127, 100);
    const double unit = 127.0 * 100.0;
    // DAC step 200 / 126 = 2^0 * 1.587: a normalised 31-bit mantissa, shift 30.
    EXPECT_EQ(r.scale_shift, 30);
    EXPECT_EQ(r.scale, std::uint64_t(std::llround(std::ldexp(2.0 * 100.0 / 126.0, 30))));
    EXPECT_EQ(r.sigma, std::uint64_t(std::llround(0.06 * unit * 256.0)));
    EXPECT_TRUE(r.clip);
    EXPECT_TRUE(r.adc);
    EXPECT_EQ(r.code_max, 255);
    const double step = 24.0 * unit / 510.0;   // 597.6: 2^9 * 1.167
    EXPECT_EQ(r.step_shift, 30 - 9);
    EXPECT_EQ(r.step, std::uint64_t(std::llround(std::ldexp(step, 21))));
    EXPECT_EQ(r.recip_shift, 31 + 9);
    EXPECT_EQ(r.recip, std::uint64_t(std::llround(std::ldexp(1.0 / step, 40))));
    // No DAC: SCALE is one, 2^30 / 2^30, and the stage passes every accumulator unchanged.
    const PeriphRegisters ideal = periph_registers(PeripheralSettings{}, 127, 100);
    EXPECT_EQ(ideal.scale, std::uint64_t(1) << 30);
    EXPECT_EQ(ideal.scale_shift, 30);
    for (std::int32_t acc : {std::numeric_limits<std::int32_t>::min(), -1, 0, 1, 2147483647})
        EXPECT_EQ(periph_datapath(ideal, acc, 0), acc);
    // A DAC step of 2^-25 (inp_bound 2^-19, one 128th of full scale 1): the same mantissa, shift 55.
    PeripheralSettings tiny;
    tiny.inp_steps = 128;
    tiny.inp_bound = std::ldexp(1.0, -19);
    const PeriphRegisters t = periph_registers(tiny, 1, 1);
    EXPECT_EQ(t.scale, std::uint64_t(1) << 30);
    EXPECT_EQ(t.scale_shift, 55);
    // An ADC finer than one accumulator unit leaves only the bound.
    PeripheralSettings fine;
    fine.out_bound = 1.0;
    fine.out_steps = 1 << 20;
    const PeriphRegisters f = periph_registers(fine, 10, 10);
    EXPECT_TRUE(f.clip);
    EXPECT_FALSE(f.adc);
    EXPECT_EQ(f.bound, 100);
}

TEST(Peripherals, AdcOutputsAreLevelsWithinTheBound) {
    PeripheralSettings s;
    s.out_bound = 3.0;
    s.out_steps = 16;
    const PeriphRegisters r = periph_registers(s, 64, 32);   // unit 2048, step 768, bound 6144
    ASSERT_TRUE(r.adc);
    std::int32_t previous = std::numeric_limits<std::int32_t>::min();
    for (std::int32_t acc = -20000; acc <= 20000; acc += 7) {
        const std::int32_t y = periph_datapath(r, acc, 0);
        EXPECT_EQ(y % 768, 0) << acc;
        EXPECT_LE(std::abs(y), 6144) << acc;
        EXPECT_GE(y, previous) << acc;   // monotone
        previous = y;
        if (std::abs(acc) < 6144 + 384) EXPECT_LE(std::abs(y - acc), 384) << acc;   // nearest level
    }
    EXPECT_EQ(periph_datapath(r, 383, 0), 0);
    EXPECT_EQ(periph_datapath(r, 385, 0), 768);
    EXPECT_EQ(periph_datapath(r, -384, 0), 0);
    EXPECT_EQ(periph_datapath(r, -385, 0), -768);
    EXPECT_EQ(periph_datapath(r, 6144 + 10000, 0), 6144);
    // A step that is not a power of two: thresholds within 2^-30 of the ideal ones.
    PeripheralSettings odd;
    odd.out_bound = 1.0;
    odd.out_steps = 510;
    const PeriphRegisters o = periph_registers(odd, 127, 127);   // step 63.25...
    const double step = 2.0 * 127 * 127 / 510;
    for (int k = -255; k < 255; ++k) {
        const double threshold = (k + 0.5) * step;
        const auto below = std::int32_t(std::floor(threshold - 1e-3)), above = std::int32_t(std::ceil(threshold + 1e-3));
        EXPECT_EQ(periph_datapath(o, below, 0), std::llround(k * step)) << k;
        EXPECT_EQ(periph_datapath(o, above, 0), std::llround((k + 1) * step)) << k;
    }
}

TEST(Peripherals, DacCodesAreAihwkitsDiscretisedInputs) {
    PeripheralSettings s;
    s.inp_steps = 126;   // aihwkit inp_res = 1/126 over [-1, 1]: step 2/126 of the full scale
    for (int s_x : {1, 37, 100, 128}) {
        const auto codes = dac_codes(s, s_x);
        for (int x = -128; x < 128; ++x) {
            // value = round(x / s_x / res) * res with res = 2/126, then clipped at 1: code = value / res.
            const double levels = std::floor(double(x) / s_x * 63.0 + 0.5);
            EXPECT_EQ(int(codes[std::size_t(x + 128)]), int(std::clamp(levels, -63.0, 63.0))) << s_x << " " << x;
        }
    }
    // abs-max noise management: the full scale is the image's largest |x|; none: 128.
    const std::int8_t x[] = {3, -90, 17, 0};
    EXPECT_EQ(dac_full_scale(s, x, 4), 90);
    s.noise_management = NoiseManagement::None;
    EXPECT_EQ(dac_full_scale(s, x, 4), 128);
}

namespace {

// Exact rational arithmetic for the DAC-step test below: acc * dac_step = num / den with
// dac_step = 2 * inp_bound * s_x / steps and inp_bound's exact double value (an odd integer times
// a power of two).  Products of a 32-bit accumulator, a 53-bit mantissa and s_x stay below 2^93.
using Int128 = __int128;

struct Rational {
    Int128 num, den;   // den > 0
};

Rational exact_product(std::int32_t acc, double inp_bound, int s_x, int steps) {
    int exponent = 0;
    auto mantissa = std::int64_t(std::ldexp(std::frexp(inp_bound, &exponent), 53));   // exact
    exponent -= 53;
    while (mantissa % 2 == 0) {
        mantissa /= 2;
        ++exponent;
    }
    Rational r{Int128(acc) * 2 * mantissa * s_x, Int128(steps)};
    if (exponent >= 0) r.num <<= exponent;
    else r.den <<= -exponent;
    return r;
}

Int128 floor_div(Int128 a, Int128 b) {   // b > 0
    const Int128 q = a / b;
    return q * b > a ? q - 1 : q;
}

// floor(num / den + 1/2), and the distance from num / den to the nearest rounding boundary (a
// value k + 1/2), as a fraction of one unit.
struct Rounded {
    Int128 value;
    double boundary_distance;
};

Rounded round_half_up(const Rational& r) {
    const Int128 twice = 2 * r.den;
    const Int128 value = floor_div(2 * r.num + r.den, twice);
    const Int128 above = 2 * r.num + r.den - value * twice;   // in [0, 2 den): 0 = exactly on a boundary
    return {value, double(std::min(above, twice - above)) / double(twice)};
}

std::int32_t saturate32(Int128 v) {
    return std::int32_t(std::clamp<Int128>(v, std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::max()));
}

// Accumulators: every value near zero, log-uniform magnitudes up to the int32 range, the extremes.
std::vector<std::int32_t> accumulators(pcg32& rng) {
    std::vector<std::int32_t> out;
    for (std::int32_t a = -4096; a <= 4096; ++a) out.push_back(a);
    for (int i = 0; i < 4000; ++i) {
        const auto magnitude = std::int64_t(std::ldexp(1.0 + double(rng(1u << 20)) / double(1u << 20), int(rng(31))));
        out.push_back(std::int32_t(std::min<std::int64_t>(magnitude, 2147483647) * (rng(2) ? 1 : -1)));
    }
    for (std::int32_t a : {std::numeric_limits<std::int32_t>::min(), -(1 << 30), (1 << 30), 2147483647})
        out.push_back(a);
    return out;
}

}  // namespace

// The output stage folds the DAC step back into accumulator units: with no noise, bound or ADC its
// result must be round-half-up(acc * dac_step), saturated to int32, for every DAC step the
// settings allow, here 2^-25 .. 2^14.  The register holds dac_step to 31 significant bits
// (relative error at most 2^-31, plus 2^-52 from the driver's doubles), so a value within
// |acc * dac_step| * (2^-31 + 2^-50) of a rounding boundary may go either way (then it must be
// one of the boundary's two neighbours; few values are that close).  All others, and every value
// of a step with at most 31 significant bits, must be exact.  The reference is exact rational
// arithmetic on the settings, not the driver's doubles.
TEST(Peripherals, DacStepScalesAccumulatorsExactlyAtEveryStepSize) {
    struct Case {
        double inp_bound;
        int s_x, steps;
        bool step_has_31_bits;   // dac_step = m * 2^e with m < 2^31: no rounding boundary is uncertain
    };
    const std::vector<Case> cases = {
        {1.0, 1, 254, false},                   // image whose largest |x| is 1: 1/127
        {0.1, 1, 254, false},                   // 1/1270
        {1e-3, 1, 254, false},                  // 1/127000, below 2^-16
        {1.0, 128, 254, false},                 // noise management none: 128/127
        {1.0, 37, 126, false},
        {1.0, 111, 254, false},                 // 2^30 * dac_step ends in .992: a truncated SCALE is 2^-31 off
        {std::ldexp(1.0, -19), 1, 128, true},   // 2^-25
        {std::ldexp(1.0, -12), 3, 64, true},    // 3 * 2^-17
        {0.75, 100, 8, true},                   // 18.75
        {64.0, 128, 1, true},                   // 2^14, the largest step the settings allow
    };
    pcg32 rng(31);
    const std::vector<std::int32_t> accs = accumulators(rng);
    for (const Case& c : cases) {
        PeripheralSettings s;
        s.inp_steps = c.steps;
        s.inp_bound = c.inp_bound;
        const PeriphRegisters r = periph_registers(s, 1, c.s_x);
        const double dac_step = 2.0 * c.inp_bound * c.s_x / c.steps;
        int wrong = 0, small = 0, small_near_boundary = 0;   // small: |acc * dac_step| < 2^20
        for (std::int32_t acc : accs) {
            const Rounded exact = round_half_up(exact_product(acc, c.inp_bound, c.s_x, c.steps));
            const std::int32_t expected = saturate32(exact.value);
            const std::int32_t got = periph_datapath(r, acc, 0);
            const double register_error = std::ldexp(1.0, -31) + std::ldexp(1.0, -50);   // relative
            const double uncertain = c.step_has_31_bits ? -1.0 : std::abs(double(acc)) * dac_step * register_error;
            const bool near = exact.boundary_distance <= uncertain;
            const bool is_small = exact.value > -(1 << 20) && exact.value < (1 << 20);
            small += is_small;
            small_near_boundary += near && is_small;
            const bool ok = near ? std::abs(std::int64_t(got) - expected) <= 1 : got == expected;
            if (!ok && ++wrong == 1)
                ADD_FAILURE() << "dac_step " << dac_step << " acc " << acc << ": got " << got << ", expected "
                              << expected;
        }
        EXPECT_EQ(wrong, 0) << "dac_step " << dac_step << " (inp_bound " << c.inp_bound << ", s_x " << c.s_x
                            << ", " << c.steps << " steps): " << wrong << " of " << accs.size() << " wrong";
        // Below 2^20 the uncertain band is under 2^-11 of a unit: few values fall in it.
        EXPECT_LT(small_near_boundary, small / 100) << "dac_step " << dac_step;
    }
}
