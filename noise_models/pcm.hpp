// The PCM family: models where a device is programmed with Gaussian noise of sigma(g_target),
// gets a drift exponent nu = drift_scale*|nu_mean(g) + nu_std(g)*xi|, drifts as (t/t0)^-nu and
// accumulates 1/f read noise of relative sigma Q_s(g_prog)*sqrt(ln((t_total+t_read)/(2 t_read))).
//
//   PcmLikeModel            aihwkit PCMLikeNoiseModel (Nandakumar 2019, Joshi 2020)
//   HermesModel             aihwkit HermesNoiseModel, 1 or 2 devices (Le Gallo 2023)
//   StateIndependentModel   aihwkit StateIndependentNoiseModel
//   CustomDriftPcmModel     aihwkit CustomDriftPCMLikeNoiseModel (nu tables, N. Li 2023)
//
// The closed forms below are public because the NIU compiler builds its fixed-point tables
// from them and the statistical tests compare samples against them.  All in uS and seconds.
#pragma once
#include <vector>

#include "noise_models/noise_model.hpp"

namespace aimcemu::noise {

// The parameters every member shares (read from the model's table).
struct PcmCommon {
    double t0 = 0.0;               // s, drift reference time
    double t_read = 0.0;           // s, read duration
    double prog_noise_scale = 0.0;
    double read_noise_scale = 0.0;
    double drift_scale = 0.0;
};

// The PCM-like closed forms (aihwkit pcm.py), shared by PcmLikeModel and CustomDriftPcmModel.
double pcm_like_prog_sigma(const std::vector<double>& coeff, double g_max_reference, double g_max, double g_target);
double pcm_like_read_q(double g_max, double g_prog);

class PcmFamilyModel : public NoiseModel {
public:
    // sigma of programming noise at g_target (before prog_noise_scale).
    virtual double prog_sigma(double g_target) const = 0;
    // Mean and standard deviation of the Gaussian that is folded into nu (before drift_scale).
    virtual double nu_mean(double g_target) const = 0;
    virtual double nu_std(double g_target) const = 0;
    // Relative read-noise coefficient Q_s at the programmed conductance.
    virtual double read_q(double g_prog) const = 0;

    // sqrt(ln((t_total + t_read) / (2 t_read))), t_total = t + t0.
    double read_time_factor(double t) const;
    // (t_total / t0)^-nu for t_total > t0, else 1; evaluated as exp(-nu * ln(t_total / t0)).
    double drift_factor(double nu, double t) const;
    // Both nu parameters at once (models override it to share work, e.g. one logarithm).
    virtual void nu_params(double g_target, double& mean, double& std) const;

    double g_max() const { return converter().g_max(); }
    double t0() const { return common_.t0; }
    double t_read() const { return common_.t_read; }
    double prog_noise_scale() const { return common_.prog_noise_scale; }
    double read_noise_scale() const { return common_.read_noise_scale; }
    double drift_scale() const { return common_.drift_scale; }

    ProgrammedDevice program_device(double g_target, const DeviceDraws& draws) const override;
    double read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const override;
    bool uses_purpose(Purpose p) const override;
    ReadContext read_context(double t) const override;

protected:
    // `source` names the model in errors ("noise model 'pcm_like'").
    PcmFamilyModel(NoiseParams resolved, const std::string& source);

private:
    PcmCommon common_;
};

// Each model's constructor takes a config ({name: value}, any subset of its table) and
// resolves it against table(): make_noise_model(name, params) is the same as the constructor.
class PcmLikeModel final : public PcmFamilyModel {
public:
    explicit PcmLikeModel(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "pcm_like"; }
    double prog_sigma(double g_target) const override;
    double nu_mean(double g_target) const override;
    double nu_std(double g_target) const override;
    double read_q(double g_prog) const override;
    void nu_params(double g_target, double& mean, double& std) const override;

    // Vectorised physics (simd.hpp) where the CPU has AVX2 (or AVX-512); the scalar closed forms above stay
    // the definition they are tested against.
    void program_block(const double* g_target, const BlockDraws& draws, std::size_t count, double* g_prog,
                       double* nu, std::uint8_t* fault) const override;
    void read_block(const DeviceAtRead* devices, const ReadContext& read, const BlockDraws& draws, std::size_t count,
                    double* g) const override;
    bool read_fused(const LayerState& state, double t, std::uint64_t round, double* g_out,
                    double* w_out) const override;

private:
    std::vector<double> prog_coeff_;  // sigma polynomial in x = g/g_max (uS) ...
    double prog_coeff_g_max_reference_;  // ... fitted at this g_max
};

// The HERMES fit aihwkit ships for one device count: the programming-noise cubic in g/g_max
// (lowest order first), the g_max it was fitted at (also the largest g_max it covers) and t0.
struct HermesFit {
    double g_max, t0;
    std::vector<double> prog_coeff;
};

class HermesModel final : public PcmFamilyModel {
public:
    // The fit for num_devices 1 or 2 (the one source: the parameter table, the model, the aihwkit
    // interop and its bound on g_max read it here).
    static HermesFit fit(int num_devices);
    // num_devices 1 or 2 selects the fit; g_max defaults 20.7 (2) or 10.35 (1) uS.
    explicit HermesModel(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "hermes"; }
    int num_devices() const { return num_devices_; }
    double prog_sigma(double g_target) const override;
    double nu_mean(double g_target) const override;
    double nu_std(double g_target) const override;
    double read_q(double g_prog) const override;

private:
    int num_devices_;
    HermesFit fit_;  // fit(num_devices_), kept: prog_sigma runs per device
};

class StateIndependentModel final : public PcmFamilyModel {
public:
    // read_q defaults to 1/g_max: aihwkit's read sigma |g_drift/g_max|*factor (uS), see docs.
    explicit StateIndependentModel(const NoiseParams& params = {});
    static const ParamTable& table();
    std::string name() const override { return "state_independent"; }
    double prog_sigma(double g_target) const override;
    double nu_mean(double) const override { return drift_nu_mean_; }
    double nu_std(double) const override { return drift_nu_std_; }
    double read_q(double) const override { return read_q_; }

private:
    std::vector<double> prog_coeff_;
    double drift_nu_mean_, drift_nu_std_, read_q_;
};

class CustomDriftPcmModel final : public PcmFamilyModel {
public:
    // nu_mean/nu_std are linear interpolations over g_lst (uS, ascending), clipped at the ends.
    explicit CustomDriftPcmModel(const NoiseParams& params);
    static const ParamTable& table();
    std::string name() const override { return "custom_drift_pcm"; }
    double prog_sigma(double g_target) const override;
    double nu_mean(double g_target) const override;
    double nu_std(double g_target) const override;
    double read_q(double g_prog) const override;

private:
    std::vector<double> prog_coeff_;  // programming sigma and Q_s are the PCM-like ones
    double prog_coeff_g_max_reference_;
    std::vector<double> g_lst_, nu_mean_lst_, nu_std_lst_;
};

}  // namespace aimcemu::noise
