// Analog tile peripherals of an AIMC layer: the settings, their rules, and the hook through which
// the PU functional model applies them around its exact GEMM (docs/peripherals.md).
//
// An AIMC tile computes a layer's matrix-vector products in analog: the inputs pass DACs of
// limited resolution and range, the summed currents pick up output noise, and ADCs clip and
// quantise them.  The settings follow aihwkit's IOParameters where they overlap (inp_res,
// inp_bound, out_noise, out_bound, out_res, noise management); the arithmetic is the PU's, in the
// INT8 accumulator's units and in fixed point, so that the RTL block (rtl/pu_periph.sv) can
// reproduce it bit for bit.  niu/peripherals.hpp holds the datapath and its random streams;
// this file only what the PU model needs to call it.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace aimcemu {

struct Network;
struct Tensor8;

// How the DAC's full scale follows the input (aihwkit's NoiseManagementType, the two we emulate).
enum class NoiseManagement {
    AbsMax,  // full scale = the largest |x| of the layer's input image (aihwkit: of each input vector)
    None,    // full scale = the INT8 full scale, 128
};
const char* to_string(NoiseManagement nm);

// The peripheral settings of one AIMC layer, in aihwkit's normalised units: inputs are x / s_x
// (s_x the DAC full scale above), weights w / s_w (s_w = the layer's largest |w|), so an output
// of 1 is s_x * s_w accumulator units.  A step count of 0 and an infinite bound mean "ideal".
struct PeripheralSettings {
    static constexpr double kUnbounded = std::numeric_limits<double>::infinity();

    int inp_steps = 0;            // DAC steps over [-inp_bound, inp_bound] (aihwkit 1/inp_res); 0: no DAC
    double inp_bound = 1.0;       // DAC range, normalised input units
    double out_noise = 0.0;       // std of the additive Gaussian output noise, normalised output units
    double out_bound = kUnbounded;// ADC range (clipping), normalised output units
    int out_steps = 0;            // ADC steps over [-out_bound, out_bound] (aihwkit 1/out_res); 0: no ADC
    NoiseManagement noise_management = NoiseManagement::AbsMax;

    // Every setting ideal: the layer's outputs equal the exact digital path.
    bool ideal() const { return inp_steps == 0 && out_noise == 0.0 && out_bound == kUnbounded && out_steps == 0; }

    // Throws FormatError(source, "<field_prefix>.<field>", ...) on a setting out of its range
    // (zero or negative levels, negative or NaN bounds and noise, an ADC without a bound, ...).
    void validate(const std::string& source, const std::string& field_prefix) const;
};

// Setting limits (docs/peripherals.md): DAC codes travel through the PU's INT8 GEMM, so a DAC has
// at most 254 steps (codes -127..127); the fixed-point registers hold the rest.
inline constexpr int kMaxInpSteps = 254;
inline constexpr int kMaxOutSteps = 1 << 20;
inline constexpr double kMaxInpBound = 64.0;
inline constexpr double kMaxOutBound = 256.0;
inline constexpr double kMaxOutNoise = 64.0;

// The hook the PU model calls for AIMC layers with peripherals (niu::Peripherals implements it).
// Both calls must be pure functions of their arguments, so results never depend on threads.
struct LayerPeripherals {
    virtual ~LayerPeripherals();
    // Whether layer `layer_index` (a conv or linear layer) runs through peripherals.
    virtual bool active(int layer_index) const = 0;
    // The DAC: the int8 codes the GEMM multiplies instead of the layer input x (same shape).
    virtual Tensor8 input_codes(int layer_index, const Tensor8& x) const = 0;
    // Output noise, bound and ADC on acc (P x N, the GEMM of the codes plus the digital bias term),
    // in place: afterwards acc holds the digitised outputs plus the bias term, in accumulator units
    // of x, ready for requantisation.  `image` is the image's index in the run.
    virtual void apply_output(int layer_index, std::int64_t image, const Tensor8& x, std::int32_t* acc,
                              std::int64_t p, std::int64_t n) const = 0;
    // FormatError naming the field unless these peripherals were made for a network of `net`'s
    // structure (the run calls it once per pass, before any layer runs): their tables are sized
    // and filled from the network they were made for, so another network would read past them.
    virtual void check_network(const Network& net) const = 0;
};

}  // namespace aimcemu
