// NIU program compiler and word image (docs/niu_datapath.md sections 3 and 5).
#include "niu/program.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "niu/niu_rng.hpp"
#include "noise_models/pcm.hpp"
#include "common/errors.hpp"

namespace aimcemu::niu {
namespace {

using namespace gen;

constexpr double kOne16 = 65536.0;

// Rounds a non-negative physical quantity to a fixed-point table entry that must fit `bits`.
std::int32_t to_fixed(double value, int frac_bits, int bits, const std::string& field) {
    const double scaled = std::nearbyint(value * std::ldexp(1.0, frac_bits));
    if (!std::isfinite(scaled) || scaled < 0.0 || scaled >= std::ldexp(1.0, bits))
        throw FormatError("<niu compiler>", field,
                          "value " + std::to_string(value) + " does not fit the NIU's " + std::to_string(bits) +
                              "-bit table (see docs/niu_datapath.md)");
    return std::int32_t(scaled);
}

const noise::PcmFamilyModel& require_pcm_family(const noise::NoiseModel& model) {
    const auto* pcm = dynamic_cast<const noise::PcmFamilyModel*>(&model);
    if (!pcm)
        throw FormatError("<niu compiler>", "model",
                          "'" + model.name() + "' is not a PCM-family model; the NIU datapath supports pcm_like, "
                          "hermes, state_independent and custom_drift_pcm");
    const auto& conv = model.converter();
    if (conv.name() != "single_pair" || conv.g_min() != 0.0)
        throw FormatError("<niu compiler>", "converter",
                          "the NIU maps codes to one differential pair with g_min = 0, got '" + conv.name() +
                              "' with g_min " + std::to_string(conv.g_min()));
    return *pcm;
}

void check_options(const noise::PcmFamilyModel& model, const NiuCompileOptions& o) {
    if (!std::isfinite(o.t) || o.t < 0.0)
        throw FormatError("<niu compiler>", "t", "time since programming must be finite and >= 0, got " + std::to_string(o.t));
    model.check_time(o.t);
    if (o.out_bits < 2 || o.out_bits > 8)
        throw FormatError("<niu compiler>", "out_bits", "must be in 2..8, got " + std::to_string(o.out_bits));
}

void check_layer(const NiuLayerSpec& l, std::size_t index) {
    const std::string where = "layers[" + std::to_string(index) + "]";
    if (l.absmax < 1 || l.absmax > 127) throw FormatError("<niu compiler>", where + ".absmax", "must be in 1..127");
    if (!std::isfinite(l.alpha) || l.alpha <= 0.0)
        throw FormatError("<niu compiler>", where + ".alpha", "drift compensation must be finite and > 0");
    if (l.src_addr % 32 != 0 || l.dst_addr % 32 != 0)
        throw FormatError("<niu compiler>", where + ".addr", "weight regions must be 32-byte aligned");
}

// Per-code tables: index a -> target a/A, device physics at g_T = a/A * g_max.
// Sigmas enter only as sigma * z with z symmetric, and nu as |mu + sigma z|, so storing |sigma|
// and |mu| leaves every distribution unchanged; it matters where a fitted polynomial leaves its
// fit range (HERMES' Q_s turns negative above about 1.9 g_max).
void fill_code_tables(const noise::PcmFamilyModel& m, int absmax, NiuLayerProgram& p) {
    const double g_max = m.g_max();
    for (int a = 0; a < kCodeTable; ++a) {
        const double x = double(std::min(a, absmax)) / absmax;
        const double g_t = x * g_max;
        p.gt[a] = to_fixed(x, NIU_G_FRAC, NIU_G_BITS, "GT");
        p.sp[a] = to_fixed(m.prog_noise_scale() * std::abs(m.prog_sigma(g_t)) / g_max, NIU_G_FRAC, NIU_G_BITS, "SP");
        p.mu[a] = to_fixed(m.drift_scale() * std::abs(m.nu_mean(g_t)), NIU_NU_FRAC, NIU_NU_FRAC + 1, "MU");
        p.sn[a] = to_fixed(m.drift_scale() * std::abs(m.nu_std(g_t)), NIU_NU_FRAC, NIU_NU_FRAC + 1, "SN");
    }
}

// Drift factor over nu = k / 2^(NU_FRAC - DF_FRAC_BITS), linear in between.
void fill_drift_table(const noise::PcmFamilyModel& m, double t, NiuLayerProgram& p) {
    const double step = std::ldexp(1.0, NIU_DF_FRAC_BITS - NIU_NU_FRAC);
    for (int k = 0; k < NIU_DF_ENTRIES; ++k) p.df[k] = to_fixed(m.drift_factor(k * step, t), NIU_DF_ONE_BITS, 17, "DF");
}

// Relative read sigma at the log-spaced knots x = 2^-o (1 + s/16) (docs section 3).
void fill_read_table(const noise::PcmFamilyModel& m, double t, NiuLayerProgram& p) {
    const double factor = m.read_noise_scale() * m.read_time_factor(t);
    const int segs = 1 << NIU_RT_SEG_BITS;
    for (int j = 0; j < NIU_RT_ENTRIES; ++j) {
        const int octave = NIU_RT_OCTAVES - 1 - j / segs;  // -1 for the last knot (x = 2)
        const double x = std::ldexp(1.0 + double(j % segs) / segs, -octave);
        p.rt[j] = to_fixed(std::abs(m.read_q(x * m.g_max())) * factor, NIU_RT_ONE_BITS, 18, "RT");
    }
}

std::vector<std::uint64_t> first_states(const PcgStream& s, int count) {
    std::vector<std::uint64_t> out(static_cast<std::size_t>(count));
    std::uint64_t state = s.state0;
    for (auto& v : out) {
        v = state;
        state = state * kPcgMult + s.inc;
    }
    return out;
}

void fill_streams(const NiuLayerSpec& l, const NiuCompileOptions& o, NiuLayerProgram& p) {
    const PcgStream chip = keyed_stream(o.seed, o.chip, l.layer_id, std::uint64_t(NIU_PURPOSE_CHIP), 0);
    const PcgStream read = keyed_stream(o.seed, o.chip, l.layer_id, std::uint64_t(NIU_PURPOSE_READ), o.round);
    p.chip_inc = chip.inc;
    p.read_inc = read.inc;
    p.chip_jump_c = chip.inc * NIU_CHIP_JUMP_SUM;
    p.read_jump_c = read.inc * NIU_READ_JUMP_SUM;
    p.chip_states = first_states(chip, NIU_RNG_PIPE * NIU_CHIP_SLOTS);
    p.read_states = first_states(read, NIU_RNG_PIPE * NIU_READ_SLOTS);
}

// K = A * (2^(B-1)-1)/127 * alpha * 2^(K_SHIFT - G_FRAC).
std::uint32_t back_scale(int absmax, int out_bits, double alpha) {
    const double out_max = double((1 << (out_bits - 1)) - 1);
    return std::uint32_t(to_fixed(absmax * out_max / 127.0 * alpha, NIU_K_SHIFT - NIU_G_FRAC, NIU_K_BITS, "BACK_K (alpha too large)"));
}

// ---- word image ----------------------------------------------------------------------------

void put64(std::uint32_t* w, std::uint64_t v) {
    w[0] = std::uint32_t(v);
    w[1] = std::uint32_t(v >> 32);
}
std::uint64_t get64(const std::uint32_t* w) { return std::uint64_t(w[0]) | (std::uint64_t(w[1]) << 32); }

template <std::size_t N>
void put_table(std::uint32_t* w, const std::array<std::int32_t, N>& t) {
    for (std::size_t i = 0; i < N; ++i) w[i] = std::uint32_t(t[i]);
}
template <std::size_t N>
void get_table(const std::uint32_t* w, std::array<std::int32_t, N>& t) {
    for (std::size_t i = 0; i < N; ++i) t[i] = std::int32_t(w[i]);
}

void write_layer(const NiuLayerProgram& l, std::uint32_t* w) {
    put64(w + NIU_LAYER_SRC_ADDR, l.src_addr);
    put64(w + NIU_LAYER_DST_ADDR, l.dst_addr);
    w[NIU_LAYER_COUNT] = l.count;
    w[NIU_LAYER_OUT_BITS] = std::uint32_t(l.out_bits);
    w[NIU_LAYER_BACK_K] = l.back_k;
    w[NIU_LAYER_RESERVED] = 0;
    put64(w + NIU_LAYER_CHIP_INC, l.chip_inc);
    put64(w + NIU_LAYER_CHIP_JUMP_C, l.chip_jump_c);
    put64(w + NIU_LAYER_READ_INC, l.read_inc);
    put64(w + NIU_LAYER_READ_JUMP_C, l.read_jump_c);
    for (std::size_t k = 0; k < l.chip_states.size(); ++k) put64(w + NIU_LAYER_CHIP_STATES + 2 * k, l.chip_states[k]);
    for (std::size_t k = 0; k < l.read_states.size(); ++k) put64(w + NIU_LAYER_READ_STATES + 2 * k, l.read_states[k]);
    put_table(w + NIU_LAYER_GT, l.gt);
    put_table(w + NIU_LAYER_SP, l.sp);
    put_table(w + NIU_LAYER_MU, l.mu);
    put_table(w + NIU_LAYER_SN, l.sn);
    put_table(w + NIU_LAYER_DF, l.df);
    put_table(w + NIU_LAYER_RT, l.rt);
}

NiuLayerProgram read_layer(const std::uint32_t* w, const std::string& source, std::size_t index) {
    const std::string where = "layers[" + std::to_string(index) + "]";
    NiuLayerProgram l;
    l.src_addr = get64(w + NIU_LAYER_SRC_ADDR);
    l.dst_addr = get64(w + NIU_LAYER_DST_ADDR);
    l.count = w[NIU_LAYER_COUNT];
    l.out_bits = int(w[NIU_LAYER_OUT_BITS]);
    l.back_k = w[NIU_LAYER_BACK_K];
    if (l.out_bits < 2 || l.out_bits > 8) throw FormatError(source, where + ".OUT_BITS", "must be in 2..8");
    if (l.back_k >= (1u << NIU_K_BITS)) throw FormatError(source, where + ".BACK_K", "exceeds its 18-bit width");
    if (l.src_addr % 32 || l.dst_addr % 32) throw FormatError(source, where + ".ADDR", "must be 32-byte aligned");
    l.chip_inc = get64(w + NIU_LAYER_CHIP_INC);
    l.chip_jump_c = get64(w + NIU_LAYER_CHIP_JUMP_C);
    l.read_inc = get64(w + NIU_LAYER_READ_INC);
    l.read_jump_c = get64(w + NIU_LAYER_READ_JUMP_C);
    if (!(l.chip_inc & 1u) || !(l.read_inc & 1u)) throw FormatError(source, where + ".INC", "pcg increments are odd");
    l.chip_states.resize(std::size_t(NIU_RNG_PIPE) * NIU_CHIP_SLOTS);
    l.read_states.resize(std::size_t(NIU_RNG_PIPE) * NIU_READ_SLOTS);
    for (std::size_t k = 0; k < l.chip_states.size(); ++k) l.chip_states[k] = get64(w + NIU_LAYER_CHIP_STATES + 2 * k);
    for (std::size_t k = 0; k < l.read_states.size(); ++k) l.read_states[k] = get64(w + NIU_LAYER_READ_STATES + 2 * k);
    get_table(w + NIU_LAYER_GT, l.gt);
    get_table(w + NIU_LAYER_SP, l.sp);
    get_table(w + NIU_LAYER_MU, l.mu);
    get_table(w + NIU_LAYER_SN, l.sn);
    get_table(w + NIU_LAYER_DF, l.df);
    get_table(w + NIU_LAYER_RT, l.rt);
    return l;
}

}  // namespace

void check_model(const noise::NoiseModel& model) { require_pcm_family(model); }

double max_alpha(int absmax, int out_bits) {
    const double scale = double(absmax * ((1 << (out_bits - 1)) - 1)) / 127.0 * std::ldexp(1.0, NIU_K_SHIFT - NIU_G_FRAC);
    return double((std::uint32_t(1) << NIU_K_BITS) - 1) / scale;
}

int clean_absmax(std::span<const std::int8_t> clean, AbsMaxMode mode) {
    if (mode == AbsMaxMode::Fixed127) return 127;
    int m = 0;
    for (std::int8_t c : clean) m = std::max(m, std::abs(int(c)));
    return std::clamp(m, 1, 127);
}

NiuProgram compile_program(const noise::NoiseModel& model, const std::vector<NiuLayerSpec>& layers,
                           const NiuCompileOptions& options) {
    const noise::PcmFamilyModel& pcm = require_pcm_family(model);
    check_options(pcm, options);
    NiuProgram program;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const NiuLayerSpec& spec = layers[i];
        check_layer(spec, i);
        NiuLayerProgram p;
        p.src_addr = spec.src_addr;
        p.dst_addr = spec.dst_addr;
        p.count = spec.count;
        p.out_bits = options.out_bits;
        p.back_k = back_scale(spec.absmax, options.out_bits, spec.alpha);
        fill_streams(spec, options, p);
        fill_code_tables(pcm, spec.absmax, p);
        fill_drift_table(pcm, options.t, p);
        fill_read_table(pcm, options.t, p);
        program.layers.push_back(std::move(p));
    }
    return program;
}

std::vector<std::uint32_t> NiuProgram::to_words() const {
    std::vector<std::uint32_t> w(std::size_t(NIU_PROG_HEADER_WORDS) + layers.size() * NIU_LAYER_WORDS, 0u);
    w[NIU_PROG_MAGIC] = std::uint32_t(NIU_PROG_MAGIC_VALUE);
    w[NIU_PROG_VERSION] = std::uint32_t(NIU_PROG_VERSION_VALUE);
    w[NIU_PROG_NUM_LAYERS] = std::uint32_t(layers.size());
    w[NIU_PROG_LAYER_WORDS] = std::uint32_t(NIU_LAYER_WORDS);
    for (std::size_t i = 0; i < layers.size(); ++i)
        write_layer(layers[i], w.data() + NIU_PROG_HEADER_WORDS + i * NIU_LAYER_WORDS);
    return w;
}

NiuProgram NiuProgram::from_words(std::span<const std::uint32_t> w, const std::string& source) {
    if (w.size() < std::size_t(NIU_PROG_HEADER_WORDS)) throw FormatError(source, "header", "program shorter than its header");
    if (w[NIU_PROG_MAGIC] != std::uint32_t(NIU_PROG_MAGIC_VALUE)) throw FormatError(source, "MAGIC", "not an NIU program");
    if (w[NIU_PROG_VERSION] != std::uint32_t(NIU_PROG_VERSION_VALUE))
        throw FormatError(source, "VERSION", "unsupported version " + std::to_string(w[NIU_PROG_VERSION]));
    if (w[NIU_PROG_LAYER_WORDS] != std::uint32_t(NIU_LAYER_WORDS))
        throw FormatError(source, "LAYER_WORDS", "built for another NIU configuration (layer block size differs)");
    const std::size_t n = w[NIU_PROG_NUM_LAYERS];
    if (w.size() != std::size_t(NIU_PROG_HEADER_WORDS) + n * NIU_LAYER_WORDS)
        throw FormatError(source, "NUM_LAYERS", "program size does not match its layer count");
    NiuProgram p;
    for (std::size_t i = 0; i < n; ++i) p.layers.push_back(read_layer(w.data() + NIU_PROG_HEADER_WORDS + i * NIU_LAYER_WORDS, source, i));
    return p;
}

}  // namespace aimcemu::niu
