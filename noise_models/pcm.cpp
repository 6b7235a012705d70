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

// aihwkit's PCM-like programming-noise fit: sigma polynomial (uS) in g/g_max at g_max = 25 uS.
const std::vector<double> kPcmLikeProgCoeff = {0.26348, 1.9650, -1.1731};
constexpr double kPcmLikeReference = 25.0;

// The rows every PCM-family table has, with the model's defaults for t0 and t_read.
ParamSpec t0_row(double fallback) {
    return number("t0").fallback(fallback).positive().unit("s").doc("drift reference time (t_total = t + t0)");
}
ParamSpec t0_row(std::function<ParamValue(const NoiseParams&)> derive, std::string text) {
    return number("t0").derive(std::move(derive), std::move(text)).positive().unit("s")
        .doc("drift reference time (t_total = t + t0)");
}
ParamSpec t_read_row(double fallback) {
    return number("t_read").fallback(fallback).positive().unit("s").doc("duration of one read (1/f read noise)");
}
ParamSpec prog_coeff_row(std::vector<double> fallback, const std::string& what) {
    return numbers("prog_coeff").fallback(std::move(fallback)).min_items(1).unit("uS").doc(what);
}
// aihwkit (PCMLikeNoiseModel): its own fit refers to 25 uS; a prog_coeff the caller gives is
// taken to be fitted at the model's g_max, unless the reference is given too.
ParamSpec prog_reference_row() {
    return number("prog_coeff_g_max_reference")
        .derive_from_given(
            [](const NoiseParams& resolved, const NoiseParams& given) {
                return given.count("prog_coeff") ? resolved.at("g_max") : ParamValue(kPcmLikeReference);
            },
            "25 (with prog_coeff given: g_max)")
        .positive()
        .unit("uS")
        .doc("g_max at which prog_coeff was fitted (sigma scales with g_max / this)");
}

PcmCommon read_common(const std::string& source, const NoiseParams& p) {
    PcmCommon c;
    c.t0 = get_number(p, "t0");
    c.t_read = get_number(p, "t_read");
    // The read-noise factor is sqrt(ln((t + t0 + t_read) / (2 t_read))): with t_read > t + t0 the
    // logarithm is negative and the factor NaN (a NaN or silently all-zero layer).  t_read <= t0
    // keeps it >= 0 for every t >= 0.
    if (!(c.t_read <= c.t0))
        throw FormatError(source, "t_read",
                          "must be <= t0 (" + format_value(c.t0) + " s), got " + format_value(c.t_read) +
                              " s: the read-noise factor sqrt(ln((t + t0 + t_read) / (2 t_read))) is NaN for "
                              "t + t0 < t_read (t_read is in seconds: a read lasts ns to us)");
    c.prog_noise_scale = get_number(p, "prog_noise_scale");
    c.read_noise_scale = get_number(p, "read_noise_scale");
    c.drift_scale = get_number(p, "drift_scale");
    return c;
}

}  // namespace

double pcm_like_prog_sigma(const std::vector<double>& coeff, double g_max_reference, double g_max, double g_target) {
    return polynomial(coeff, g_target / g_max) * (g_max / g_max_reference);
}

double pcm_like_read_q(double g_max, double g_prog) {
    return std::min(0.0088 / std::max(std::pow(std::abs(g_prog) / g_max, 0.65), 1e-3), 0.2);
}

// --- shared physics -----------------------------------------------------------------------
PcmFamilyModel::PcmFamilyModel(NoiseParams resolved, const std::string& source)
    : NoiseModel(std::move(resolved)), common_(read_common(source, params())) {}

namespace {
// ln(a / b) for a >= b > 0: the quotient as long as it is finite (the bits every read has had),
// else ln a - ln b (t = 1e308 or t0 = 1e-300 overflowed the quotient to inf: an inf read factor
// and, with nu = 0, a drift factor exp(0 * -inf) = NaN).
double log_ratio(double a, double b) {
    const double ratio = a / b;
    return std::isfinite(ratio) ? std::log(ratio) : std::log(a) - std::log(b);
}
}  // namespace

double PcmFamilyModel::read_time_factor(double t) const {
    const double t_total = t + common_.t0;
    return std::sqrt(log_ratio(t_total + common_.t_read, 2.0 * common_.t_read));
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
    c.log_time = t_total > common_.t0 ? log_ratio(t_total, common_.t0) : 0.0;
    c.read_factor = read_time_factor(t);
    return c;
}

void PcmFamilyModel::nu_params(double g_target, double& mean, double& std) const {
    mean = nu_mean(g_target);
    std = nu_std(g_target);
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
const ParamTable& PcmLikeModel::table() {
    static const ParamTable table(
        "noise model 'pcm_like'",
        {prog_coeff_row(kPcmLikeProgCoeff, "programming-noise sigma polynomial c0 + c1 x + c2 x^2 in x = g/g_max"),
         converter_row("single_pair"), g_max_row(kDefaultGMax), t_read_row(250e-9), t0_row(20.0),
         scale_row("prog_noise_scale", "programming noise"), scale_row("read_noise_scale", "read noise"),
         scale_row("drift_scale", "drift exponent nu"), prog_reference_row(), drift_reference_row("reconverted"),
         g_min_row(0.0), pair_factors_row()});
    return table;
}

PcmLikeModel::PcmLikeModel(const NoiseParams& params)
    : PcmFamilyModel(table().resolve(params), table().source()),
      prog_coeff_(param_list("prog_coeff")),
      prog_coeff_g_max_reference_(param_value("prog_coeff_g_max_reference")) {}

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
    // Gathered in stack pieces, not per-call vectors: the engine calls this once per block.
    const simd::PcmLikeBlock c = simd_constants(*this, prog_coeff_, prog_coeff_g_max_reference_);
    constexpr std::size_t kPiece = 512;
    double start[kPiece], nu[kPiece];
    for (std::size_t first = 0; first < count; first += kPiece) {
        const std::size_t n = std::min(kPiece, count - first);
        for (std::size_t i = 0; i < n; ++i) {
            start[i] = devices[first + i].g_start;
            nu[i] = devices[first + i].nu;
        }
        simd::pcm_like_read(c, read.log_time, read.read_factor, start, nu, draws.read + first, n, g + first);
    }
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
    const int threads = num_threads();  // once per read (Python may change it meanwhile)
    // Found while programming (from L1, right after each block); else a pass over g_prog, per chunk
    // on the workers (a maximum is exact in any order).
    double abs_max = state.max_pair_difference;
    if (abs_max < 0.0) {
        std::vector<double> chunk_max((n + kChunkWeights - 1) / kChunkWeights, 0.0);
        for_each_weight_chunk(n, threads, [&](std::size_t begin, std::size_t end) {
            chunk_max[begin / kChunkWeights] = max_pair_difference(state.g_prog.data() + 2 * begin, end - begin);
        });
        abs_max = *std::max_element(chunk_max.begin(), chunk_max.end());
    }
    const double scale_prog = state.conversion.scale;
    const double scale_read = (pair->g_max() - pair->g_min()) / std::max(abs_max / scale_prog, 1e-7);
    const simd::PcmLikeBlock c = simd_constants(*this, prog_coeff_, prog_coeff_g_max_reference_);
    for_each_weight_chunk(n, threads, [&](std::size_t begin, std::size_t end) {
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
HermesFit HermesModel::fit(int num_devices) {
    if (num_devices == 2) return {20.7, 300.0, {0.16603222, 4.71806468, -8.48101252, 4.68961419}};
    return {10.35, 200.0, {0.15781817, 2.32443916, -2.16310839, 0.68841818}};
}

namespace {
HermesFit hermes_fit(const NoiseParams& p) { return HermesModel::fit(int(get_number(p, "num_devices"))); }
}  // namespace

const ParamTable& HermesModel::table() {
    static const ParamTable table(
        "noise model 'hermes'",
        {whole("num_devices").fallback(2.0).one_of({1.0, 2.0}).doc("devices per weight of the fit: 2 (a pair) or 1"),
         converter_row("single_pair"),
         // The fits were measured up to the chip's g_max; beyond it they extrapolate a device nobody
         // measured (aihwkit asserts the same bound).
         g_max_row([](const NoiseParams& p) { return ParamValue(hermes_fit(p).g_max); }, "20.7 (num_devices 1: 10.35)")
             .at_most([](const NoiseParams& p) { return hermes_fit(p).g_max; },
                      "the fit's range end, 20.7 (num_devices 1: 10.35)"),
         t_read_row(512e-9),
         t0_row([](const NoiseParams& p) { return ParamValue(hermes_fit(p).t0); }, "300 (num_devices 1: 200)"),
         scale_row("prog_noise_scale", "programming noise"), scale_row("read_noise_scale", "read noise"),
         scale_row("drift_scale", "drift exponent nu"), drift_reference_row("reconverted"), g_min_row(0.0),
         pair_factors_row()});
    return table;
}

HermesModel::HermesModel(const NoiseParams& params)
    : PcmFamilyModel(table().resolve(params), table().source()),
      num_devices_(int(param_value("num_devices"))),
      fit_(fit(num_devices_)) {}  // g_max is at most the fit's: the table checks it

double HermesModel::prog_sigma(double g) const {
    return polynomial(fit_.prog_coeff, g / g_max()) * (g_max() / fit_.g_max);
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
const ParamTable& StateIndependentModel::table() {
    static const ParamTable table(
        "noise model 'state_independent'",
        {prog_coeff_row({0.2, 0.0, 0.0}, "programming-noise sigma polynomial c0 + c1 x + c2 x^2 in x = g/g_max (no rescale)"),
         converter_row("single_pair"), g_max_row(kDefaultGMax), t_read_row(250e-9), t0_row(20.0),
         number("drift_nu_mean").fallback(0.1).doc("mean of the Gaussian folded into nu"),
         number("drift_nu_std").fallback(0.05).non_negative().doc("standard deviation of the Gaussian folded into nu"),
         scale_row("drift_scale", "drift exponent nu"), scale_row("prog_noise_scale", "programming noise"),
         scale_row("read_noise_scale", "read noise"),
         number("read_q")
             .derive([](const NoiseParams& p) { return ParamValue(1.0 / get_number(p, "g_max")); }, "1/g_max")
             .non_negative()
             .doc("read-noise coefficient Q_s (1/g_max: aihwkit's read sigma in uS; 0.0088: relative)"),
         drift_reference_row("reconverted"), g_min_row(0.0), pair_factors_row()});
    return table;
}

StateIndependentModel::StateIndependentModel(const NoiseParams& params)
    : PcmFamilyModel(table().resolve(params), table().source()),
      prog_coeff_(param_list("prog_coeff")),
      drift_nu_mean_(param_value("drift_nu_mean")),
      drift_nu_std_(param_value("drift_nu_std")),
      read_q_(param_value("read_q")) {}

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

const ParamTable& CustomDriftPcmModel::table() {
    static const ParamTable table(
        "noise model 'custom_drift_pcm'",
        {numbers("g_lst").min_items(2).unit("uS").doc("conductances of the drift table, strictly ascending, covering [g_min, g_max]"),
         numbers("nu_mean_lst").doc("mean of the Gaussian folded into nu at each g_lst point"),
         numbers("nu_std_lst").non_negative().doc("its standard deviation at each g_lst point"),
         converter_row("single_pair"), g_max_row(kDefaultGMax), t_read_row(250e-9), t0_row(20.0),
         scale_row("prog_noise_scale", "programming noise"), scale_row("read_noise_scale", "read noise"),
         scale_row("drift_scale", "drift exponent nu"),
         prog_coeff_row(kPcmLikeProgCoeff, "programming-noise sigma polynomial, as pcm_like"), prog_reference_row(),
         drift_reference_row("reconverted"), g_min_row(0.0), pair_factors_row()});
    return table;
}

CustomDriftPcmModel::CustomDriftPcmModel(const NoiseParams& params)
    : PcmFamilyModel(table().resolve(params), table().source()),
      prog_coeff_(param_list("prog_coeff")),
      prog_coeff_g_max_reference_(param_value("prog_coeff_g_max_reference")),
      g_lst_(param_list("g_lst")),
      nu_mean_lst_(param_list("nu_mean_lst")),
      nu_std_lst_(param_list("nu_std_lst")) {
    check_drift_table(g_lst_, nu_mean_lst_, nu_std_lst_, converter().g_min(), g_max());
}

double CustomDriftPcmModel::prog_sigma(double g) const {
    return pcm_like_prog_sigma(prog_coeff_, prog_coeff_g_max_reference_, g_max(), g);
}
double CustomDriftPcmModel::nu_mean(double g) const { return interpolate(g_lst_, nu_mean_lst_, g); }
double CustomDriftPcmModel::nu_std(double g) const { return interpolate(g_lst_, nu_std_lst_, g); }
double CustomDriftPcmModel::read_q(double g) const { return pcm_like_read_q(g_max(), g); }

}  // namespace aimcemu::noise
