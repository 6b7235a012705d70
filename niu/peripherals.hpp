// The analog tile peripherals' datapath, bit-exact with rtl/pu_periph.sv (docs/peripherals.md).
//
// Per AIMC layer and image, a driver (here: periph_registers) turns the layer's settings
// (pu_model/peripherals.hpp) and the image's scales into integer registers; the datapath then
// digitises each accumulator with integers only:
//
//   v    = rshr(acc * SCALE, SCALE_SHIFT)             DAC step: codes back to accumulator units
//        + rshr(SIGMA * z, 8 + 12)                    output noise, z ~ N(0, 1) in Q3.12
//   v    = clamp(v, -BOUND, BOUND)                    if CLIP (out_bound)
//   code = clamp(rshr(v * RECIP, RECIP_SHIFT), -CODE_MAX, CODE_MAX)                 if ADC
//   y    = sat32(rshr(code * STEP, STEP_SHIFT))                                    if ADC
// (SCALE = DAC step * 2^SCALE_SHIFT in [2^30, 2^31), RECIP = 2^RECIP_SHIFT / step in
// (2^30, 2^31] and STEP = step * 2^STEP_SHIFT in [2^30, 2^31) are normalised mantissas: the DAC
// step, the ADC's thresholds and its levels keep 31 significant bits at every step size)
//   y    = sat32(v) otherwise
//
// z comes from the NIU's generator design: one xoshiro128++ stream per lane (R_g lanes), keyed
// by (seed, chip, layer, round, image, lane), a 24-bit uniform (the output's top bits) through
// the NIU's Gaussian ROM.  Output o = p * N + n of an image uses lane n mod R_g, at step
// p * ceil(N / R_g) + n / R_g: every lane steps once per R_g-result chunk, as the hardware does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "niu/niu_rng.hpp"
#include "pu_model/inference.hpp"
#include "pu_model/peripherals.hpp"

namespace aimcemu::niu {

inline constexpr int kPeriphLanes = gen::NIU_PERIPH_LANES;

// The block's registers for one (layer, image).
struct PeriphRegisters {
    // DAC step = scale / 2^scale_shift (ideal: 1 = 2^30 / 2^30)
    std::uint64_t scale = std::uint64_t(1) << (gen::NIU_PERIPH_MANT_BITS - 1);
    int scale_shift = gen::NIU_PERIPH_MANT_BITS - 1;
    std::uint64_t sigma = 0;      // output-noise std, Q24.8
    bool clip = false;
    std::int64_t bound = 0;       // clipping bound (accumulator units)
    bool adc = false;
    std::uint64_t recip = 0;      // 1 / ADC step = recip / 2^recip_shift
    int recip_shift = 0;
    std::uint64_t step = 0;       // ADC step = step / 2^step_shift
    int step_shift = 0;
    std::int64_t code_max = 0;
};

// One result through the datapath: the bit-exact definition the RTL is co-simulated against.
std::int32_t periph_datapath(const PeriphRegisters& r, std::int32_t acc, std::int32_t z);

// Registers of `settings` for an image whose DAC full scale is s_x (int8 units) on a layer whose
// largest |w| is s_w.  Doubles appear only here, in a fixed order (IEEE-754, the same on every
// machine), as a driver would compute them; the datapath above is integer.
PeriphRegisters periph_registers(const PeripheralSettings& settings, int s_w, int s_x);

// The DAC full scale of an input image (pu_model/peripherals.hpp, NoiseManagement).
int dac_full_scale(const PeripheralSettings& settings, const std::int8_t* x, std::int64_t count);

// DAC code of every int8 value -128..127 (index value + 128) for full scale s_x.
std::vector<std::int8_t> dac_codes(const PeripheralSettings& settings, int s_x);

// Start state of lane `lane` of the output-noise streams of (seed, chip, layer, round, image).
RngState periph_stream_state(std::uint64_t seed, std::uint64_t chip, std::uint64_t layer, std::uint64_t round,
                             std::uint64_t image, int lane);

// The layers' settings and the round's key: the hook the PU model calls (RunOptions::peripherals).
// Every call checks its arguments once (not per element) and throws FormatError naming the
// source and the field: a layer index out of range or without settings ("layer",
// "peripherals.NAME"), a layer input or accumulator of another size than the layer's ("x", "acc"),
// and, in check_network, a network other than the one the tables were made from.
class Peripherals final : public LayerPeripherals {
public:
    // settings[i]: layer i's settings (nullopt: none).  Layers with settings must be conv or
    // linear (FormatError naming the layer otherwise); every setting is validated.
    Peripherals(const Network& net, std::vector<std::optional<PeripheralSettings>> settings, std::uint64_t seed,
                std::uint64_t chip, std::uint64_t round, const std::string& source = "<memory>");

    bool active(int layer_index) const override;
    // x: the layer's input image (in_shape.size() values).
    Tensor8 input_codes(int layer_index, const Tensor8& x) const override;
    // acc: p x n with n the layer's gemm_n (any p >= 0: rows are independent).
    void apply_output(int layer_index, std::int64_t image, const Tensor8& x, std::int32_t* acc, std::int64_t p,
                      std::int64_t n) const override;
    // The network must have the structure of the one these peripherals were made for: the same
    // layers (kind, input, shapes, gemm_n) and, where a layer has settings, the same bias term.
    // Its weights are not compared: s_w comes from the weights given at construction (a run's
    // weights are the noisy ones anyway, and an emulator keeps none of the clean ones).
    void check_network(const Network& net) const override;

    // The registers layer `layer_index` uses for input x.
    PeriphRegisters registers(int layer_index, const Tensor8& x) const;

private:
    // What the tables of a layer depend on besides its weights (check_network compares them).
    struct LayerShape {
        std::string name;
        LayerKind kind = LayerKind::Conv;
        int input = -1;
        Shape3 in_shape, out_shape;
        std::int64_t gemm_n = 0;   // conv and linear layers only
        bool operator==(const LayerShape&) const = default;
    };
    static LayerShape shape_of(const Layer& l);
    // Layer `layer_index`'s settings after checking the index and that the layer has some, and
    // that x is one input image of it.
    const PeripheralSettings& settings_for(int layer_index, const Tensor8& x) const;

    std::string source_;
    std::vector<LayerShape> layers_;
    std::vector<std::optional<PeripheralSettings>> settings_;
    std::vector<int> weight_scale_;                    // s_w per layer (largest |w| of the clean weights, >= 1)
    std::vector<std::vector<std::int32_t>> bias_term_; // bias << bias_shift per layer with settings
    std::uint64_t seed_, chip_, round_;
};

}  // namespace aimcemu::niu
