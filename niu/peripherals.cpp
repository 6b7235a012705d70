// The analog tile peripherals' datapath and driver (see peripherals.hpp).
#include "niu/peripherals.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/errors.hpp"

namespace aimcemu::niu {

namespace {

constexpr int kSigmaShift = gen::NIU_PERIPH_SIGMA_FRAC + gen::NIU_Z_FRAC;
constexpr int kMantBits = gen::NIU_PERIPH_MANT_BITS;
constexpr int kShiftMax = (1 << gen::NIU_PERIPH_SHIFT_BITS) - 1;
constexpr int kScaleShiftMin = gen::NIU_PERIPH_SCALE_SHIFT_MIN;
// The RTL sizes v0 for SCALE_SHIFT >= kScaleShiftMin; the largest DAC step the settings allow
// (inp_bound at its limit, full scale 128, one step) must fit a normalised SCALE there.
static_assert(2.0 * kMaxInpBound * 128.0 / 1.0 <= double(std::int64_t(1) << (kMantBits - 1 - kScaleShiftMin)));
constexpr std::int64_t kBoundMax = (std::int64_t(1) << gen::NIU_PERIPH_BOUND_BITS) - 1;
constexpr std::int64_t kInt32Max = 2147483647;

std::int32_t sat32(std::int64_t v) { return std::int32_t(clamp64(v, -kInt32Max - 1, kInt32Max)); }

// round(v) of a non-negative double into an unsigned register, saturating at `most`.
std::uint64_t to_register(double v, std::uint64_t most) {
    return v >= double(most) ? most : std::uint64_t(std::llround(v));
}

// dac_step = 2^e * f with f in [1, 2): SCALE = dac_step * 2^(30 - e) in [2^30, 2^31), so that it
// keeps 31 significant bits at every step size (a step within 2^-31 below a power of two rounds
// to 2^31 and saturates at 2^31 - 1, still within 2^-31).  A step below 2^-33 keeps the largest
// shift (63) and a smaller mantissa: it gives 0 for every 32-bit accumulator, as the exact
// |acc * dac_step| < 1/4 does.
void set_dac_step(PeriphRegisters& r, double dac_step) {
    r.scale_shift = kShiftMax;
    if (dac_step >= std::ldexp(1.0, kMantBits - 1 - kShiftMax))
        r.scale_shift = std::max(kScaleShiftMin, kMantBits - 1 - std::ilogb(dac_step));
    r.scale = to_register(std::ldexp(dac_step, r.scale_shift), (std::uint64_t(1) << kMantBits) - 1);
}

}  // namespace

std::int32_t periph_datapath(const PeriphRegisters& r, std::int32_t acc, std::int32_t z) {
    std::int64_t v = rshr(std::int64_t(acc) * std::int64_t(r.scale), r.scale_shift);
    v += rshr(std::int64_t(r.sigma) * z, kSigmaShift);
    if (r.clip) v = clamp64(v, -r.bound, r.bound);
    if (!r.adc) return sat32(v);
    const std::int64_t code = clamp64(rshr(v * std::int64_t(r.recip), r.recip_shift), -r.code_max, r.code_max);
    return sat32(rshr(code * std::int64_t(r.step), r.step_shift));
}

PeriphRegisters periph_registers(const PeripheralSettings& s, int s_w, int s_x) {
    PeriphRegisters r;
    const double unit = double(s_w) * double(s_x);   // accumulator units of a normalised output of 1
    if (s.inp_steps > 0) set_dac_step(r, 2.0 * s.inp_bound * double(s_x) / double(s.inp_steps));
    r.sigma = to_register(std::ldexp(s.out_noise * unit, gen::NIU_PERIPH_SIGMA_FRAC),
                          (std::uint64_t(1) << gen::NIU_PERIPH_SIGMA_BITS) - 1);
    if (s.out_bound == PeripheralSettings::kUnbounded) return r;
    r.clip = true;
    r.bound = std::int64_t(to_register(s.out_bound * unit, std::uint64_t(kBoundMax)));
    const double adc_step = s.out_steps > 0 ? 2.0 * s.out_bound * unit / double(s.out_steps) : 0.0;
    // An ADC step below one accumulator unit is finer than the digital result: only the bound acts.
    if (adc_step < 1.0) return r;
    r.adc = true;
    r.code_max = s.out_steps / 2;
    // adc_step = 2^e * f with f in [1, 2), e >= 0: RECIP = 2^(31+e) / adc_step in (2^30, 2^31]
    // (one bit wider than STEP, to hold 2^31 when f = 1), STEP = adc_step * 2^(30-e) in [2^30, 2^31).
    const int e = std::ilogb(adc_step);
    r.recip_shift = kMantBits + e;
    r.recip = to_register(std::ldexp(1.0 / adc_step, r.recip_shift), std::uint64_t(1) << kMantBits);
    r.step_shift = kMantBits - 1 - e;
    r.step = to_register(std::ldexp(adc_step, r.step_shift), (std::uint64_t(1) << kMantBits) - 1);
    // Beyond the last level plus one step every value gives the extreme code: clip there first so
    // that the products keep their widths (the result is the same as clipping after rounding).
    r.bound = std::min(kBoundMax, std::int64_t(std::ceil(double(r.code_max + 1) * adc_step)));
    return r;
}

int dac_full_scale(const PeripheralSettings& s, const std::int8_t* x, std::int64_t count) {
    if (s.noise_management == NoiseManagement::None) return 128;
    int most = 0;
    for (std::int64_t i = 0; i < count; ++i) most = std::max(most, std::abs(int(x[i])));
    return std::max(most, 1);   // an all-zero image: any scale gives codes 0
}

std::vector<std::int8_t> dac_codes(const PeripheralSettings& s, int s_x) {
    std::vector<std::int8_t> codes(256);
    if (s.inp_steps == 0) {
        for (int v = -128; v < 128; ++v) codes[std::size_t(v + 128)] = std::int8_t(v);
        return codes;
    }
    // aihwkit: discretise x / s_x to the step 2 inp_bound / steps (round half up), then clip at
    // the bound; codes are the level numbers, at most steps / 2 from zero.
    const double per_code = double(s.inp_steps) / (2.0 * s.inp_bound * double(s_x));
    const int most = s.inp_steps / 2;
    for (int v = -128; v < 128; ++v) {
        // Clamped while still a double: a tiny inp_bound makes per_code huge (or infinite, and
        // 0 * inf NaN), beyond what an int holds.
        const double k = v == 0 ? 0.0 : std::clamp(std::floor(double(v) * per_code + 0.5), double(-most), double(most));
        codes[std::size_t(v + 128)] = std::int8_t(k);
    }
    return codes;
}

RngState periph_stream_state(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t round,
                             std::uint64_t image, int lane) {
    const std::uint64_t key = fold_stream_key(seed, chip, layer, std::uint64_t(gen::NIU_PURPOSE_PERIPH), round);
    const std::uint64_t a = splitmix64(splitmix64(key ^ image) ^ std::uint64_t(lane));
    const std::uint64_t b = splitmix64(a);
    constexpr int word = gen::NIU_RNG_WORD_BITS;  // two state words from each 64-bit draw
    RngState s{std::uint32_t(a), std::uint32_t(a >> word), std::uint32_t(b), std::uint32_t(b >> word)};
    if ((s[0] | s[1] | s[2] | s[3]) == 0) s[0] = 1;   // the all-zero state is a fixed point
    return s;
}

namespace {

// A layer's bias as the accumulator holds it (bias << bias_shift), element k of gemm_n.
std::int32_t bias_term(const Layer& l, std::size_t k) {
    return l.bias.empty() ? 0 : std::int32_t(l.bias[k]) * (std::int32_t(1) << l.bias_shift);
}

std::string describe(const Shape3& s) {
    return std::to_string(s.h) + "x" + std::to_string(s.w) + "x" + std::to_string(s.c);
}

}  // namespace

Peripherals::LayerShape Peripherals::shape_of(const Layer& l) {
    const bool gemm = l.kind == LayerKind::Conv || l.kind == LayerKind::Linear;
    return {l.name, l.kind, l.input, l.in_shape, l.out_shape, gemm ? l.gemm_n() : 0};
}

Peripherals::Peripherals(const Network& net, std::vector<std::optional<PeripheralSettings>> settings,
                         std::uint64_t seed, std::uint64_t chip, std::uint64_t round, const std::string& source)
    : source_(source), settings_(std::move(settings)), weight_scale_(net.layers.size(), 1),
      bias_term_(net.layers.size()), seed_(seed), chip_(chip), round_(round) {
    if (settings_.size() != net.layers.size())
        throw FormatError(source, "peripherals", "expected one entry per layer (" + std::to_string(net.layers.size()) +
                                                     "), got " + std::to_string(settings_.size()));
    layers_.reserve(net.layers.size());
    for (const Layer& l : net.layers) layers_.push_back(shape_of(l));
    for (std::size_t i = 0; i < settings_.size(); ++i) {
        if (!settings_[i]) continue;
        const Layer& l = net.layers[i];
        const std::string field = "peripherals." + l.name;
        if (l.kind != LayerKind::Conv && l.kind != LayerKind::Linear)
            throw FormatError(source, field, "only conv and linear layers run on AIMC tiles with peripherals");
        settings_[i]->validate(source, field);
        if (!l.bias.empty() && std::int64_t(l.bias.size()) != l.gemm_n())
            throw FormatError(source, field, "the layer has " + std::to_string(l.bias.size()) + " biases for " +
                                                 std::to_string(l.gemm_n()) + " outputs");
        int most = 1;
        for (std::int8_t w : l.weights) most = std::max(most, std::abs(int(w)));
        weight_scale_[i] = most;
        bias_term_[i].resize(std::size_t(l.gemm_n()));
        for (std::size_t k = 0; k < bias_term_[i].size(); ++k) bias_term_[i][k] = bias_term(l, k);
    }
}

bool Peripherals::active(int layer_index) const {
    return layer_index >= 0 && std::size_t(layer_index) < settings_.size() && settings_[std::size_t(layer_index)];
}

void Peripherals::check_network(const Network& net) const {
    if (net.layers.size() != layers_.size())
        throw FormatError(source_, "peripherals", "made for a network of " + std::to_string(layers_.size()) +
                                                      " layers, this one has " + std::to_string(net.layers.size()));
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const Layer& l = net.layers[i];
        const LayerShape& made_for = layers_[i];
        const std::string field = "peripherals." + made_for.name;
        if (!(shape_of(l) == made_for))
            throw FormatError(source_, field,
                              "made for layer " + std::to_string(i) + " '" + made_for.name + "' (" +
                                  describe(made_for.in_shape) + " -> " + describe(made_for.out_shape) + ", " +
                                  std::to_string(made_for.gemm_n) + " outputs), this network's is '" + l.name +
                                  "' (" + describe(l.in_shape) + " -> " + describe(l.out_shape) + ", " +
                                  std::to_string(shape_of(l).gemm_n) + " outputs)");
        if (!settings_[i]) continue;
        const auto& bias = bias_term_[i];
        if (!l.bias.empty() && l.bias.size() != bias.size())
            throw FormatError(source_, field, "this network's layer has " + std::to_string(l.bias.size()) +
                                                  " biases for " + std::to_string(bias.size()) + " outputs");
        for (std::size_t k = 0; k < bias.size(); ++k)
            if (bias_term(l, k) != bias[k])
                throw FormatError(source_, field, "made for another bias (output " + std::to_string(k) + ": " +
                                                      std::to_string(bias[k]) + ", this network's " +
                                                      std::to_string(bias_term(l, k)) + ")");
    }
}

const PeripheralSettings& Peripherals::settings_for(int layer_index, const Tensor8& x) const {
    if (layer_index < 0 || std::size_t(layer_index) >= settings_.size())
        throw FormatError(source_, "layer", "layer index " + std::to_string(layer_index) + " out of range (" +
                                                std::to_string(settings_.size()) + " layers)");
    const LayerShape& l = layers_[std::size_t(layer_index)];
    const auto& settings = settings_[std::size_t(layer_index)];
    if (!settings) throw FormatError(source_, "peripherals." + l.name, "the layer has no peripheral settings");
    if (std::int64_t(x.data.size()) != l.in_shape.size())
        throw FormatError(source_, "x", "layer '" + l.name + "' takes " + std::to_string(l.in_shape.size()) +
                                            " input values (" + describe(l.in_shape) + "), got " +
                                            std::to_string(x.data.size()));
    return *settings;
}

PeriphRegisters Peripherals::registers(int layer_index, const Tensor8& x) const {
    const PeripheralSettings& s = settings_for(layer_index, x);
    return periph_registers(s, weight_scale_[std::size_t(layer_index)],
                            dac_full_scale(s, x.data.data(), std::int64_t(x.data.size())));
}

Tensor8 Peripherals::input_codes(int layer_index, const Tensor8& x) const {
    const PeripheralSettings& s = settings_for(layer_index, x);
    if (s.inp_steps == 0) return x;
    const auto codes = dac_codes(s, dac_full_scale(s, x.data.data(), std::int64_t(x.data.size())));
    Tensor8 out{x.shape, std::vector<std::int8_t>(x.data.size())};
    for (std::size_t i = 0; i < x.data.size(); ++i) out.data[i] = codes[std::size_t(int(x.data[i]) + 128)];
    return out;
}

void Peripherals::apply_output(int layer_index, std::int64_t image, const Tensor8& x, std::int32_t* acc,
                               std::int64_t p, std::int64_t n) const {
    const PeriphRegisters r = registers(layer_index, x);   // checks the index, the settings and x
    const auto& bias = bias_term_[std::size_t(layer_index)];
    if (n != std::int64_t(bias.size()) || p < 0 || (p > 0 && acc == nullptr))
        throw FormatError(source_, "acc", "layer '" + layers_[std::size_t(layer_index)].name + "' takes [P, " +
                                              std::to_string(bias.size()) + "] accumulators, got [" +
                                              std::to_string(p) + ", " + std::to_string(n) + "]");
    std::array<RngState, kPeriphLanes> lanes{};
    if (r.sigma != 0)
        for (int k = 0; k < kPeriphLanes; ++k)
            lanes[std::size_t(k)] = periph_stream_state(seed_, chip_, std::uint64_t(layer_index), round_,
                                                        std::uint64_t(image), k);
    std::array<std::int32_t, kPeriphLanes> z{};
    for (std::int64_t pixel = 0; pixel < p; ++pixel) {
        std::int32_t* row = acc + pixel * n;
        for (std::int64_t chunk = 0; chunk < n; chunk += kPeriphLanes) {
            if (r.sigma != 0)   // every lane steps once per chunk, used or not (the hardware's rule)
                for (int k = 0; k < kPeriphLanes; ++k)
                    z[std::size_t(k)] = gaussian_chip(xoshiro_next(lanes[std::size_t(k)]) >> kChipLowBits);
            const std::int64_t end = std::min(n, chunk + kPeriphLanes);
            for (std::int64_t o = chunk; o < end; ++o) {
                const std::int32_t b = bias[std::size_t(o)];
                const std::int32_t analog = sat32(std::int64_t(row[o]) - b);   // the SA sums without the bias
                row[o] = sat32(std::int64_t(periph_datapath(r, analog, z[std::size_t(o - chunk)])) + b);
            }
        }
    }
}

}  // namespace aimcemu::niu
