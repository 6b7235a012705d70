// ReRAM models from aihwkit's reram.py.
//
//   ReRamWan2022Model  Wan et al., Nature 2022: sigma(g/g_max) is a 4th-order polynomial per
//                      time key (1 s, 1 day, 2 days); programming uses the 1 s fit, a read at
//                      time t resamples around g_target with the fit for t (t must be a key).
//   ReRamCmoModel      IBM Zurich CMO/HfOx: linear programming sigma per acceptance range,
//                      log-time relaxation of mean and spread, log10(g) read noise; one device
//                      per weight (SingleDeviceConverter, 9..88.2 uS).
#pragma once
#include <array>
#include <map>
#include <vector>

#include "noise_models/noise_model.hpp"

namespace aimcemu::noise {

class ReRamWan2022Model final : public NoiseModel {
public:
    // coeff_g_max_reference defaults to g_max (aihwkit: the 40 uS reference is never applied).
    explicit ReRamWan2022Model(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "reram_wan2022"; }

    // sigma (uS) of the fit for time key t at g_target (before the noise scales).
    double sigma(double g_target, double t_key) const;
    static const std::map<double, std::vector<double>>& coefficients();

    ProgrammedDevice program_device(double g_target, const DeviceDraws& draws) const override;
    double read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const override;
    bool uses_purpose(Purpose p) const override { return p == Purpose::Programming || p == Purpose::Read; }
    void check_time(double t) const override;

private:
    double prog_noise_scale_, read_noise_scale_, coeff_g_max_reference_;
};

// The CMO/HfOx fits aihwkit ships: programming sigma c0 + c1 g per acceptance range (percent),
// relaxation mean shift decay_mean ln t and sigma decay_std[0] ln t + decay_std[1], read noise
// read_k log10(g) sqrt(ln((t + read_time) / (2 read_time))).
struct CmoFit {
    std::map<double, std::vector<double>> prog_coeff;
    double decay_mean;
    std::array<double, 2> decay_std;
    double read_k, read_time;
};

class ReRamCmoModel final : public NoiseModel {
public:
    static const CmoFit& fit();  // the one source: the model and the aihwkit interop read it
    explicit ReRamCmoModel(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "reram_cmo"; }

    double prog_sigma(double g_target) const;    // uS, c0 + c1*g
    double relaxation_mean_shift(double t) const; // uS, -0.08900206 ln t (before drift_scale)
    double relaxation_sigma(double t) const;      // uS, 0.04201137 ln t + 0.41183342
    double read_sigma(double g_drift, double t) const;  // uS, K log10(g) sqrt(ln((t+t_r)/(2 t_r)))

    ProgrammedDevice program_device(double g_target, const DeviceDraws& draws) const override;
    double read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const override;
    ReadContext read_context(double t) const override;
    bool uses_purpose(Purpose p) const override {
        return p == Purpose::Programming || p == Purpose::Read || p == Purpose::Relaxation;
    }

private:
    double acceptance_range_, prog_noise_scale_, read_noise_scale_, drift_scale_;
    std::vector<double> prog_coeff_;
};

}  // namespace aimcemu::noise
