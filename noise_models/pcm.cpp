// PCM-family models: closed forms from aihwkit's pcm.py, hermes.py and custom.py (facts and
// constants only; see docs/noise_models.md), and the shared program/read physics.
#include "noise_models/pcm.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"
#include "noise_models/simd.hpp"

namespace aimcemu::noise {

namespace {

constexpr double kZeroClip = 1e-7;  // aihwkit's floor on g/g_max before a logarithm

double polynomial(const std::vector<double>& coeff, double x) {
    double value = 0.0;
    for (std::size_t k = coeff.size(); k-- > 0;) value = value * x + coeff[k];
    return value;
}

double relative(double g, double g_max) { return std::max(std::abs(g) / g_max, kZeroClip); }

void require_non_negative(const std::string& model, const std::string& field, double v) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw FormatError("noise model '" + model + "'", field, "must be finite and >= 0");
}
void require_positive(const std::string& model, const std::string& field, double v) {
    if (!(v > 0.0) || !std::isfinite(v)) throw FormatError("noise model '" + model + "'", field, "must be finite and > 0");
}

PcmCommon read_pcm_common(ParamReader& r, const std::string& model, PcmCommon defaults) {
    PcmCommon c;
    c.t0 = r.number("t0", defaults.t0);
    c.t_read = r.number("t_read", defaults.t_read);
    c.prog_noise_scale = r.number("prog_noise_scale", defaults.prog_noise_scale);
    c.read_noise_scale = r.number("read_noise_scale", defaults.read_noise_scale);
    c.drift_scale = r.number("drift_scale", defaults.drift_scale);
    require_positive(model, "t0", c.t0);
    require_positive(model, "t_read", c.t_read);
    require_non_negative(model, "prog_noise_scale", c.prog_noise_scale);
    require_non_negative(model, "read_noise_scale", c.read_noise_scale);
    require_non_negative(model, "drift_scale", c.drift_scale);
    return c;
}

void check_prog_coeff(const std::string& model, const std::vector<double>& coeff) {
    if (coeff.empty()) throw FormatError("noise model '" + model + "'", "prog_coeff", "needs at least one coefficient");
    for (double c : coeff)
        if (!std::isfinite(c)) throw FormatError("noise model '" + model + "'", "prog_coeff", "coefficients must be finite");
}

}  // namespace

double pcm_like_prog_sigma(const std::vector<double>& coeff, double g_max_reference, double g_max, double g_target) {
    return polynomial(coeff, g_target / g_max) * (g_max / g_max_reference);
}

double pcm_like_read_q(double g_max, double g_prog) {
    return std::min(0.0088 / std::max(std::pow(std::abs(g_prog) / g_max, 0.65), 1e-3), 0.2);
}

// --- shared physics -----------------------------------------------------------------------
PcmFamilyModel::PcmFamilyModel(std::unique_ptr<ConductanceConverter> converter, PcmCommon common)
    : NoiseModel(std::move(converter)), common_(common) {
    require_positive("pcm", "t0", common_.t0);
    require_positive("pcm", "t_read", common_.t_read);
    require_non_negative("pcm", "prog_noise_scale", common_.prog_noise_scale);
    require_non_negative("pcm", "read_noise_scale", common_.read_noise_scale);
    require_non_negative("pcm", "drift_scale", common_.drift_scale);
}

double PcmFamilyModel::read_time_factor(double t) const {
    const double t_total = t + common_.t0;
    return std::sqrt(std::log((t_total + common_.t_read) / (2.0 * common_.t_read)));
}

double PcmFamilyModel::drift_factor(double nu, double t) const {
    const double x = -nu * read_context(t).log_time;
    if (!simd::available()) return std::exp(x);
    double factor;   // the exponential the vectorised reads use, so that both agree bit for bit
    simd::exp(&x, &factor, 1);
    return factor;
}

ReadContext PcmFamilyModel::read_context(double t) const {
    ReadContext c{t};
    const double t_total = t + common_.t0;
    c.log_time = t_total > common_.t0 ? std::log(t_total / common_.t0) : 0.0;
    c.read_factor = read_time_factor(t);
    return c;
}

void PcmFamilyModel::nu_params(double g_target, double& mean, double& std) const {
    mean = nu_mean(g_target);
    std = nu_std(g_target);
}

NoiseParams PcmFamilyModel::params() const {
    NoiseParams p = NoiseModel::params();
    p["t0"] = common_.t0;
    p["t_read"] = common_.t_read;
    p["prog_noise_scale"] = common_.prog_noise_scale;
    p["read_noise_scale"] = common_.read_noise_scale;
    p["drift_scale"] = common_.drift_scale;
    return p;
}

bool PcmFamilyModel::uses_purpose(Purpose p) const {
    return p == Purpose::Programming || p == Purpose::DriftExponent || p == Purpose::Read;
}

ProgrammedDevice PcmFamilyModel::program_device(double g_target, const DeviceDraws& draws) const {
    ProgrammedDevice d;
    d.g_prog = std::max(0.0, g_target + common_.prog_noise_scale * prog_sigma(g_target) * draws.prog);
    double mean, std;
    nu_params(g_target, mean, std);
    d.nu = common_.drift_scale * std::abs(mean + std * draws.nu);
    return d;
}

double PcmFamilyModel::read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const {
    const double g_drift = device.g_start * std::exp(-device.nu * read.log_time);
    const double sigma_rel = read_q(device.g_start) * read.read_factor;
    return std::max(0.0, g_drift + common_.read_noise_scale * std::abs(g_drift) * sigma_rel * draws.read);
}

// --- PCM-like -------------------------------------------------------------------------------
PcmLikeModel::PcmLikeModel(std::unique_ptr<ConductanceConverter> converter, PcmCommon common,
                           std::vector<double> prog_coeff, double prog_coeff_g_max_reference)
    : PcmFamilyModel(std::move(converter), common),
      prog_coeff_(std::move(prog_coeff)),
      prog_coeff_g_max_reference_(prog_coeff_g_max_reference) {
    check_prog_coeff(name(), prog_coeff_);
    require_positive(name(), "prog_coeff_g_max_reference", prog_coeff_g_max_reference_);
}

std::unique_ptr<PcmLikeModel> PcmLikeModel::from_params(const NoiseParams& params) {
    ParamReader r(params, "pcm_like");
    auto converter = make_converter(r, "single_pair", 25.0, 0.0);
    const PcmCommon common = read_pcm_common(r, "pcm_like", PcmCommon{});
    auto coeff = r.numbers("prog_coeff", {0.26348, 1.9650, -1.1731});
    const double ref = r.number("prog_coeff_g_max_reference", 25.0);
    auto model = std::make_unique<PcmLikeModel>(std::move(converter), common, std::move(coeff), ref);
    model->read_common(r);
    r.finish();
    return model;
}

NoiseParams PcmLikeModel::params() const {
    NoiseParams p = PcmFamilyModel::params();
    p["prog_coeff"] = prog_coeff_;
    p["prog_coeff_g_max_reference"] = prog_coeff_g_max_reference_;
    return p;
}

double PcmLikeModel::prog_sigma(double g) const {
    return pcm_like_prog_sigma(prog_coeff_, prog_coeff_g_max_reference_, g_max(), g);
}
double PcmLikeModel::nu_mean(double g) const {
    return std::clamp(-0.0155 * std::log(relative(g, g_max())) + 0.0244, 0.049, 0.1);
}
double PcmLikeModel::nu_std(double g) const {
    return std::clamp(-0.0125 * std::log(relative(g, g_max())) - 0.0059, 0.008, 0.045);
}
double PcmLikeModel::read_q(double g) const { return pcm_like_read_q(g_max(), g); }

void PcmLikeModel::nu_params(double g, double& mean, double& std) const {
    const double log_x = std::log(relative(g, g_max()));
    mean = std::clamp(-0.0155 * log_x + 0.0244, 0.049, 0.1);
    std = std::clamp(-0.0125 * log_x - 0.0059, 0.008, 0.045);
}

// The vectorised PCM-like path (simd.hpp).
namespace {
simd::PcmLikeBlock simd_constants(const PcmLikeModel& m, const std::vector<double>& coeff, double reference) {
    simd::PcmLikeBlock c;
    c.g_max = m.g_max();
    c.prog_coeff = coeff.data();
    c.prog_coeff_count = int(coeff.size());
    c.prog_sigma_scale = m.g_max() / reference;
    c.prog_noise_scale = m.prog_noise_scale();
    c.drift_scale = m.drift_scale();
    c.read_noise_scale = m.read_noise_scale();
    return c;
}
constexpr std::size_t kFusedBlockWeights = 256;
}  // namespace

void PcmLikeModel::program_block(const double* g_target, const BlockDraws& draws, std::size_t count, double* g_prog,
                                 double* nu, std::uint8_t* fault) const {
    if (!simd::available()) return NoiseModel::program_block(g_target, draws, count, g_prog, nu, fault);
    simd::pcm_like_program(simd_constants(*this, prog_coeff_, prog_coeff_g_max_reference_), g_target, draws.prog,
                           draws.nu, count, g_prog, nu);
    std::fill(fault, fault + count, std::uint8_t(Fault::Healthy));
}

void PcmLikeModel::read_block(const DeviceAtRead* devices, const ReadContext& read, const BlockDraws& draws,
                              std::size_t count, double* g) const {
    if (!simd::available()) return NoiseModel::read_block(devices, read, draws, count, g);
    std::vector<double> start(count), nu(count);
    for (std::size_t i = 0; i < count; ++i) {
        start[i] = devices[i].g_start;
        nu[i] = devices[i].nu;
    }
    simd::pcm_like_read(simd_constants(*this, prog_coeff_, prog_coeff_g_max_reference_), read.log_time,
                        read.read_factor, start.data(), nu.data(), draws.read, count, g);
}

// aihwkit's re-converted read of a single pair with g_min = 0, fused: the re-fit scale comes
// from max|g+ - g-| (division by the old scale is monotonic, so this is max|W_prog| exactly),
// then one pass computes only the device that carries each weight.
bool PcmLikeModel::read_fused(const LayerState& state, double t, std::uint64_t round, double* g_out,
                              double* w_out) const {
    const auto* pair = dynamic_cast<const SinglePairConverter*>(&converter());
    if (!simd::available() || drift_reference() != DriftReference::Reconverted || !pair || pair->g_min() != 0.0 ||
        state.devices_per_weight != 2 || state.g_prog.size() != 2 * state.num_weights() ||
        state.nu.size() != state.g_prog.size())
        return false;
    check_time(t);
    const ReadContext context = read_context(t);
    const std::size_t n = state.num_weights();
    double abs_max = 0.0;
    for (std::size_t i = 0; i < n; ++i) abs_max = std::max(abs_max, std::abs(state.g_prog[2 * i] - state.g_prog[2 * i + 1]));
    const double scale_prog = state.conversion.scale;
    const double scale_read = (pair->g_max() - pair->g_min()) / std::max(abs_max / scale_prog, 1e-7);
    const simd::PcmLikeBlock c = simd_constants(*this, prog_coeff_, prog_coeff_g_max_reference_);
    for_each_weight_chunk(n, num_threads(), [&](std::size_t begin, std::size_t end) {
        DeviceStream stream(state.key, Purpose::Read, round, 2 * begin);
        double z[2 * kFusedBlockWeights];
        for (std::size_t i = begin; i < end; i += kFusedBlockWeights) {
            const std::size_t count = std::min(kFusedBlockWeights, end - i);
            stream.gaussians(z, 2 * count);
            simd::pcm_like_read_reconverted(c, context.log_time, context.read_factor, scale_prog, scale_read,
                                            state.g_prog.data() + 2 * i, state.nu.data() + 2 * i, z, count,
                                            g_out ? g_out + 2 * i : nullptr, w_out ? w_out + i : nullptr);
        }
    });
    return true;
}

// --- HERMES ---------------------------------------------------------------------------------
namespace {
struct HermesFit {
    double g_max, t0;
    std::vector<double> prog_coeff;
};
HermesFit hermes_fit(int num_devices) {
    if (num_devices == 2) return {20.7, 300.0, {0.16603222, 4.71806468, -8.48101252, 4.68961419}};
    return {10.35, 200.0, {0.15781817, 2.32443916, -2.16310839, 0.68841818}};
}
void check_hermes_devices(int num_devices) {
    if (num_devices != 1 && num_devices != 2)
        throw FormatError("noise model 'hermes'", "num_devices", "must be 1 or 2, got " + std::to_string(num_devices));
}
}  // namespace

HermesModel::HermesModel(int num_devices, std::unique_ptr<ConductanceConverter> converter, PcmCommon common)
    : PcmFamilyModel(std::move(converter), common), num_devices_(num_devices) {
    check_hermes_devices(num_devices);
    g_max_reference_ = hermes_fit(num_devices).g_max;
}

std::unique_ptr<HermesModel> HermesModel::from_params(const NoiseParams& params) {
    ParamReader r(params, "hermes");
    const double devices = r.number("num_devices", 2.0);
    if (devices != std::floor(devices)) throw FormatError("noise model 'hermes'", "num_devices", "must be 1 or 2");
    check_hermes_devices(int(devices));
    const HermesFit fit = hermes_fit(int(devices));
    auto converter = make_converter(r, "single_pair", fit.g_max, 0.0);
    PcmCommon defaults;
    defaults.t0 = fit.t0;
    defaults.t_read = 512e-9;
    const PcmCommon common = read_pcm_common(r, "hermes", defaults);
    auto model = std::make_unique<HermesModel>(int(devices), std::move(converter), common);
    model->read_common(r);
    r.finish();
    return model;
}

NoiseParams HermesModel::params() const {
    NoiseParams p = PcmFamilyModel::params();
    p["num_devices"] = double(num_devices_);
    return p;
}

double HermesModel::prog_sigma(double g) const {
    return polynomial(hermes_fit(num_devices_).prog_coeff, g / g_max()) * (g_max() / g_max_reference_);
}

double HermesModel::nu_mean(double g) const {
    const double x = relative(g, g_max());
    if (x < 0.0945) return std::clamp(-0.0387 * std::log(x) - 0.0182, 0.072, 0.13);
    return -0.0436 * x * x - 0.0126 * x + 0.0736;
}

double HermesModel::nu_std(double g) const {
    const double x = relative(g, g_max());
    if (num_devices_ == 2) {
        if (x < 0.3055) return std::clamp(-0.0117 * std::log(x) - 0.0057, 0.0091, 0.04);
        return -0.0118 * x * x + 0.0093 * x + 0.0073;
    }
    if (x < 0.3039) return std::clamp(-0.0120 * std::log(x) - 0.0023, 0.0124, 0.04);
    return -0.0165 * x * x + 0.0116 * x + 0.0104;
}

double HermesModel::read_q(double g) const {
    const double x = relative(g, g_max());
    if (num_devices_ == 2) {
        if (x < 0.16) return std::clamp(-0.0117 * std::log(x) - 0.0069, 0.015, 0.04);
        return ((0.0069 * x - 0.0280) * x + 0.0211) * x + 0.0123;
    }
    if (x < 0.1591) return std::clamp(-0.0078 * std::log(x) + 0.0038, 0.0179, 0.04);
    return ((0.0664 * x - 0.1352) * x + 0.0768) * x + 0.0088;
}

// --- state independent ------------------------------------------------------------------------
StateIndependentModel::StateIndependentModel(std::unique_ptr<ConductanceConverter> converter, PcmCommon common,
                                             std::vector<double> prog_coeff, double drift_nu_mean, double drift_nu_std,
                                             double read_q)
    : PcmFamilyModel(std::move(converter), common),
      prog_coeff_(std::move(prog_coeff)),
      drift_nu_mean_(drift_nu_mean),
      drift_nu_std_(drift_nu_std),
      read_q_(read_q < 0.0 ? 1.0 / g_max() : read_q) {
    check_prog_coeff(name(), prog_coeff_);
    if (!std::isfinite(drift_nu_mean_)) throw FormatError("noise model 'state_independent'", "drift_nu_mean", "must be finite");
    require_non_negative(name(), "drift_nu_std", drift_nu_std_);
}

std::unique_ptr<StateIndependentModel> StateIndependentModel::from_params(const NoiseParams& params) {
    ParamReader r(params, "state_independent");
    auto converter = make_converter(r, "single_pair", 25.0, 0.0);
    const PcmCommon common = read_pcm_common(r, "state_independent", PcmCommon{});
    auto coeff = r.numbers("prog_coeff", {0.2, 0.0, 0.0});
    const double mean = r.number("drift_nu_mean", 0.1);
    const double std_ = r.number("drift_nu_std", 0.05);
    const double q = r.number("read_q", -1.0);
    if (r.has("read_q")) require_non_negative("state_independent", "read_q", q);
    auto model = std::make_unique<StateIndependentModel>(std::move(converter), common, std::move(coeff), mean, std_, q);
    model->read_common(r);
    r.finish();
    return model;
}

NoiseParams StateIndependentModel::params() const {
    NoiseParams p = PcmFamilyModel::params();
    p["prog_coeff"] = prog_coeff_;
    p["drift_nu_mean"] = drift_nu_mean_;
    p["drift_nu_std"] = drift_nu_std_;
    p["read_q"] = read_q_;
    return p;
}

double StateIndependentModel::prog_sigma(double g) const { return polynomial(prog_coeff_, g / g_max()); }

// --- custom drift -------------------------------------------------------------------------------
namespace {
// numpy.interp with the abscissa clipped to the table range.
double interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
    x = std::clamp(x, xs.front(), xs.back());
    const auto it = std::upper_bound(xs.begin(), xs.end(), x);
    if (it == xs.end()) return ys.back();
    const std::size_t hi = std::size_t(it - xs.begin());
    if (hi == 0) return ys.front();
    const std::size_t lo = hi - 1;
    const double f = (x - xs[lo]) / (xs[hi] - xs[lo]);
    return ys[lo] + f * (ys[hi] - ys[lo]);
}

void check_drift_table(const std::vector<double>& g, const std::vector<double>& mean, const std::vector<double>& sd,
                       double g_min, double g_max) {
    const std::string src = "noise model 'custom_drift_pcm'";
    if (g.size() < 2) throw FormatError(src, "g_lst", "needs at least 2 points");
    if (mean.size() != g.size()) throw FormatError(src, "nu_mean_lst", "must have as many points as g_lst");
    if (sd.size() != g.size()) throw FormatError(src, "nu_std_lst", "must have as many points as g_lst");
    for (std::size_t i = 1; i < g.size(); ++i)
        if (!(g[i] > g[i - 1])) throw FormatError(src, "g_lst", "must be strictly ascending");
    for (double s : sd)
        if (!(s >= 0.0)) throw FormatError(src, "nu_std_lst", "standard deviations must be >= 0");
    if (g.front() > g_min || g.back() < g_max)
        throw FormatError(src, "g_lst", "must cover the converter's range [g_min, g_max]");
}
}  // namespace

CustomDriftPcmModel::CustomDriftPcmModel(std::unique_ptr<ConductanceConverter> converter, PcmCommon common,
                                         std::vector<double> g_lst, std::vector<double> nu_mean_lst,
                                         std::vector<double> nu_std_lst, std::vector<double> prog_coeff,
                                         double prog_coeff_g_max_reference)
    : PcmFamilyModel(std::move(converter), common),
      prog_coeff_(std::move(prog_coeff)),
      prog_coeff_g_max_reference_(prog_coeff_g_max_reference),
      g_lst_(std::move(g_lst)),
      nu_mean_lst_(std::move(nu_mean_lst)),
      nu_std_lst_(std::move(nu_std_lst)) {
    check_prog_coeff(name(), prog_coeff_);
    require_positive(name(), "prog_coeff_g_max_reference", prog_coeff_g_max_reference_);
    check_drift_table(g_lst_, nu_mean_lst_, nu_std_lst_, this->converter().g_min(), g_max());
}

std::unique_ptr<CustomDriftPcmModel> CustomDriftPcmModel::from_params(const NoiseParams& params) {
    ParamReader r(params, "custom_drift_pcm");
    auto converter = make_converter(r, "single_pair", 25.0, 0.0);
    const PcmCommon common = read_pcm_common(r, "custom_drift_pcm", PcmCommon{});
    if (!r.has("g_lst")) throw FormatError("noise model 'custom_drift_pcm'", "g_lst", "is required");
    auto g = r.numbers("g_lst", {});
    auto mean = r.numbers("nu_mean_lst", {});
    auto sd = r.numbers("nu_std_lst", {});
    auto coeff = r.numbers("prog_coeff", {0.26348, 1.9650, -1.1731});
    const double ref = r.number("prog_coeff_g_max_reference", 25.0);
    auto model = std::make_unique<CustomDriftPcmModel>(std::move(converter), common, std::move(g), std::move(mean),
                                                       std::move(sd), std::move(coeff), ref);
    model->read_common(r);
    r.finish();
    return model;
}

NoiseParams CustomDriftPcmModel::params() const {
    NoiseParams p = PcmFamilyModel::params();
    p["g_lst"] = g_lst_;
    p["nu_mean_lst"] = nu_mean_lst_;
    p["nu_std_lst"] = nu_std_lst_;
    p["prog_coeff"] = prog_coeff_;
    p["prog_coeff_g_max_reference"] = prog_coeff_g_max_reference_;
    return p;
}

double CustomDriftPcmModel::prog_sigma(double g) const {
    return pcm_like_prog_sigma(prog_coeff_, prog_coeff_g_max_reference_, g_max(), g);
}
double CustomDriftPcmModel::nu_mean(double g) const { return interpolate(g_lst_, nu_mean_lst_, g); }
double CustomDriftPcmModel::nu_std(double g) const { return interpolate(g_lst_, nu_std_lst_, g); }
double CustomDriftPcmModel::read_q(double g) const { return pcm_like_read_q(g_max(), g); }

}  // namespace aimcemu::noise
