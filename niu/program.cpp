// NIU program compiler and word image (docs/niu_datapath.md sections 3 and 5).
#include "niu/program.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/errors.hpp"
#include "noise_models/pcm.hpp"

namespace aimcemu::niu {
namespace {

using namespace gen;

// A number for a message: %g (std::to_string would print 1e300 with 300 digits).
std::string shown(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", value);
    return text;
}

// Rounds a non-negative physical quantity to a fixed-point table entry that must fit `bits`.
std::int32_t to_fixed(double value, int frac_bits, int bits, const std::string& field) {
    const double scaled = std::nearbyint(value * std::ldexp(1.0, frac_bits));
    if (!std::isfinite(scaled) || scaled < 0.0 || scaled >= std::ldexp(1.0, bits))
        throw FormatError("<niu compiler>", field,
                          "value " + shown(value) + " does not fit the NIU's " + std::to_string(bits) + "-bit field " +
                              "(below " + shown(std::ldexp(1.0, bits - frac_bits)) + "; see docs/niu_datapath.md)");
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
    // The NIU drifts each device from its programmed conductance (docs/niu_datapath.md section 3,
    // "Physics reference").  A model asking for aihwkit's re-conversion would run as 'programmed'
    // while its config said otherwise, so it is refused; this is the one place that refuses it
    // (the Python front end re-sources the error to the config field that asked for it).
    if (model.drift_reference() != noise::DriftReference::Programmed)
        throw FormatError("<niu compiler>", "drift_reference",
                          "the NIU drifts each device from its programmed conductance, so it runs only "
                          "'programmed'; 'reconverted' (aihwkit's re-conversion, the float64 models' default) "
                          "needs a max over the whole programmed layer, which a streaming unit cannot take "
                          "(docs/niu_datapath.md section 3): leave drift_reference out or give 'programmed'");
    return *pcm;
}

void check_options(const noise::PcmFamilyModel& model, const NiuCompileOptions& o) {
    if (!std::isfinite(o.t) || o.t < 0.0)
        throw FormatError("<niu compiler>", "t", "time since programming must be finite and >= 0, got " + std::to_string(o.t));
    model.check_time(o.t);
    if (o.out_bits < NIU_OUT_BITS_MIN || o.out_bits > NIU_OUT_BITS_MAX)
        throw FormatError("<niu compiler>", "out_bits", "must be in 2..8, got " + std::to_string(o.out_bits));
}

// A region of `count` bytes at `addr`: its start and its end (exclusive) below 2^AXI_ADDR_BITS,
// the rule the RTL applies too (ERR_ADDR_RANGE).  Start first, so the sum cannot wrap.
bool region_in_address_space(std::uint64_t addr, std::uint32_t count) {
    return (addr >> NIU_AXI_ADDR_BITS) == 0 && ((addr + count) >> NIU_AXI_ADDR_BITS) == 0;
}

// LAYERS_DONE counts in NIU_LAYER_COUNT_BITS, so the RTL refuses longer programs (ERR_BAD_HEADER).
constexpr std::uint64_t kMaxLayers = (std::uint64_t{1} << NIU_LAYER_COUNT_BITS) - 1;
constexpr std::int32_t kReadSigmaMax = (1 << NIU_RT_VALUE_BITS) - 1;
// The largest abs-max A of INT8 codes (|c| of -128 maps to full scale like 127).
constexpr int kMaxAbsmax = std::numeric_limits<std::int8_t>::max();

void check_layer_count(std::size_t n, const std::string& source, const std::string& field) {
    if (n > kMaxLayers)
        throw FormatError(source, field, std::to_string(n) + " layers; the NIU runs at most " + std::to_string(kMaxLayers) +
                                             " (its LAYERS_DONE counter has " + std::to_string(NIU_LAYER_COUNT_BITS) + " bits)");
}

void check_layer(const NiuLayerSpec& l, std::size_t index) {
    const std::string where = "layers[" + std::to_string(index) + "]";
    if (l.absmax < 1 || l.absmax > kMaxAbsmax)
        throw FormatError("<niu compiler>", where + ".absmax", "must be in 1.." + std::to_string(kMaxAbsmax));
    if (!std::isfinite(l.alpha) || l.alpha <= 0.0)
        throw FormatError("<niu compiler>", where + ".alpha", "drift compensation must be finite and > 0");
    if (l.src_addr % NIU_AXI_BEAT_BYTES != 0 || l.dst_addr % NIU_AXI_BEAT_BYTES != 0)
        throw FormatError("<niu compiler>", where + ".addr", "weight regions must be 32-byte aligned");
    if (!region_in_address_space(l.src_addr, l.count) || !region_in_address_space(l.dst_addr, l.count))
        throw FormatError("<niu compiler>", where + ".addr", "beyond the NIU's " + std::to_string(NIU_AXI_ADDR_BITS) + "-bit address space");
}

// Per-code tables: index a -> target a/A, device physics at g_T = a/A * g_max.  Sigmas enter
// only as sigma * z with z symmetric, and nu as |mu + sigma z|, so storing |sigma| and |mu|
// leaves every distribution unchanged.
void fill_code_table(const noise::PcmFamilyModel& m, int absmax, NiuLayerProgram& p) {
    const double g_max = m.g_max();
    for (int a = 0; a < kCodeTable; ++a) {
        const double x = double(std::min(a, absmax)) / absmax;
        const double g_t = x * g_max;
        CodeEntry& e = p.code[std::size_t(a)];
        e.gt = to_fixed(x, NIU_G_FRAC, NIU_G_BITS, "GT");
        e.sp = to_fixed(m.prog_noise_scale() * std::abs(m.prog_sigma(g_t)) / g_max, NIU_G_FRAC, NIU_SP_BITS, "SP");
        e.mu = to_fixed(m.drift_scale() * std::abs(m.nu_mean(g_t)), NIU_NU_FRAC, NIU_NU_BITS, "MU");
        e.sn = to_fixed(m.drift_scale() * std::abs(m.nu_std(g_t)), NIU_NU_FRAC, NIU_NU_BITS, "SN");
    }
}

// (t_total / t0)^-nu = 2^-(nu * LT): the drift table is one number per layer and time.
std::uint32_t drift_lt(const noise::PcmFamilyModel& m, double t) {
    const double t_total = t + m.t0();
    const double lt = t_total > m.t0() ? std::log2(t_total / m.t0()) : 0.0;
    return std::uint32_t(to_fixed(lt, NIU_LT_FRAC, NIU_LT_BITS, "t (log2(t/t0) beyond 32)"));
}

// Relative read sigma at the log-spaced knots x = 2^(o-14) (1 + s/8), j = 8o + s (section 3).
void fill_read_table(const noise::PcmFamilyModel& m, double t, NiuLayerProgram& p) {
    const double factor = m.read_noise_scale() * m.read_time_factor(t);
    const int segs = 1 << NIU_RT_SEG_BITS;
    std::array<std::int32_t, kReadSegments + 1> knot{};
    for (int j = 0; j <= kReadSegments; ++j) {
        const double x = std::ldexp(1.0 + double(j % segs) / segs, j / segs - NIU_G_FRAC);
        knot[std::size_t(j)] = to_fixed(std::abs(m.read_q(x * m.g_max())) * factor, NIU_RT_ONE_BITS, NIU_RT_VALUE_BITS, "RT");
    }
    for (int j = 0; j < kReadSegments; ++j) {
        p.rt[std::size_t(j)] = knot[std::size_t(j)];
        p.rd[std::size_t(j)] = knot[std::size_t(j + 1)] - knot[std::size_t(j)];
        if (std::abs(p.rd[std::size_t(j)]) >= (1 << (NIU_RT_SLOPE_BITS - 1)))
            throw FormatError("<niu compiler>", "RT", "read sigma changes too fast between knots for the 16-bit slope");
    }
}

void fill_streams(const NiuLayerSpec& l, const NiuCompileOptions& o, NiuLayerProgram& p) {
    for (int g = 0; g < kGens; ++g)
        for (int k = 0; k < kStreams; ++k)
            p.rng[std::size_t(g * kStreams + k)] = stream_state(o.seed, o.chip, l.layer_id, o.round, g, k);
}

// K = A * (2^(B-1)-1)/127 * alpha * 2^(K_SHIFT - G_FRAC).
std::uint32_t back_scale(int absmax, int out_bits, double alpha) {
    const double out_max = double((1 << (out_bits - 1)) - 1);
    return std::uint32_t(to_fixed(absmax * out_max / 127.0 * alpha, NIU_K_SHIFT - NIU_G_FRAC, NIU_K_BITS, "BACK_K (alpha too large)"));
}

// ---- word image ----------------------------------------------------------------------------

// A 64-bit address is two program words, low word first (rtl/niu_loader.sv reads them so).
static_assert(2 * NIU_WORD_BITS == 64, "an address is two program words");
void put64(std::uint32_t* w, std::uint64_t v) {
    w[0] = std::uint32_t(v);
    w[1] = std::uint32_t(v >> NIU_WORD_BITS);
}
std::uint64_t get64(const std::uint32_t* w) { return std::uint64_t(w[0]) | (std::uint64_t(w[1]) << NIU_WORD_BITS); }

// Table words hold two fields of NIU_TABLE_FIELD_BITS, low | high << NIU_TABLE_FIELD_BITS.
constexpr int kField = NIU_TABLE_FIELD_BITS;
constexpr std::uint32_t kFieldMask = (1u << kField) - 1;
static_assert(2 * kField == NIU_WORD_BITS && kField == 16, "a table word is two 16-bit fields (the signed slope is an int16)");
std::uint32_t pack(std::int32_t lo, std::int32_t hi) { return (std::uint32_t(lo) & kFieldMask) | (std::uint32_t(hi) << kField); }
std::int32_t low_half(std::uint32_t w) { return std::int32_t(w & kFieldMask); }
std::int32_t high_half(std::uint32_t w) { return std::int32_t(w >> kField); }
std::int32_t high_half_signed(std::uint32_t w) { return std::int32_t(std::int16_t(std::uint16_t(w >> kField))); }

void write_layer(const NiuLayerProgram& l, std::uint32_t* w) {
    put64(w + NIU_LAYER_SRC_ADDR, l.src_addr);
    put64(w + NIU_LAYER_DST_ADDR, l.dst_addr);
    w[NIU_LAYER_COUNT] = l.count;
    w[NIU_LAYER_OUT_BITS] = std::uint32_t(l.out_bits);
    w[NIU_LAYER_BACK_K] = l.back_k;
    w[NIU_LAYER_DRIFT_LT] = l.drift_lt;
    for (int a = 0; a < kCodeTable; ++a) {
        const CodeEntry& e = l.code[std::size_t(a)];
        w[NIU_LAYER_CODE_TABLE + 2 * a] = pack(e.gt, e.sp);
        w[NIU_LAYER_CODE_TABLE + 2 * a + 1] = pack(e.mu, e.sn);
    }
    for (int j = 0; j < kReadSegments; ++j) w[NIU_LAYER_READ_TABLE + j] = pack(l.rt[std::size_t(j)], l.rd[std::size_t(j)]);
    for (std::size_t k = 0; k < l.rng.size(); ++k)
        for (int i = 0; i < 4; ++i) w[NIU_LAYER_RNG_STATES + 4 * k + std::size_t(i)] = l.rng[k][std::size_t(i)];
}

// A table field must fit its width (the RTL keeps only those bits).
std::int32_t field(std::int32_t v, int bits, const std::string& source, const std::string& name) {
    if (v >= (1 << bits)) throw FormatError(source, name, "exceeds its " + std::to_string(bits) + "-bit width");
    return v;
}

NiuLayerProgram read_layer(const std::uint32_t* w, const std::string& source, std::size_t index) {
    const std::string where = "layers[" + std::to_string(index) + "]";
    NiuLayerProgram l;
    l.src_addr = get64(w + NIU_LAYER_SRC_ADDR);
    l.dst_addr = get64(w + NIU_LAYER_DST_ADDR);
    l.count = w[NIU_LAYER_COUNT];
    l.out_bits = int(w[NIU_LAYER_OUT_BITS]);
    l.back_k = w[NIU_LAYER_BACK_K];
    l.drift_lt = w[NIU_LAYER_DRIFT_LT];
    if (l.out_bits < NIU_OUT_BITS_MIN || l.out_bits > NIU_OUT_BITS_MAX) throw FormatError(source, where + ".OUT_BITS", "must be in 2..8");
    field(std::int32_t(std::min<std::uint32_t>(l.back_k, 1u << 30)), NIU_K_BITS, source, where + ".BACK_K");
    field(std::int32_t(std::min<std::uint32_t>(l.drift_lt, 1u << 30)), NIU_LT_BITS, source, where + ".DRIFT_LT");
    if (l.src_addr % NIU_AXI_BEAT_BYTES || l.dst_addr % NIU_AXI_BEAT_BYTES) throw FormatError(source, where + ".ADDR", "must be 32-byte aligned");
    // Start and end, as compile_program checks them: the RTL refuses a layer that runs past the
    // address space (ERR_ADDR_RANGE) rather than let its bursts wrap to address 0.
    if (!region_in_address_space(l.src_addr, l.count))
        throw FormatError(source, where + ".SRC_ADDR", "the layer's source runs beyond the NIU's " + std::to_string(NIU_AXI_ADDR_BITS) + "-bit address space");
    if (!region_in_address_space(l.dst_addr, l.count))
        throw FormatError(source, where + ".DST_ADDR", "the layer's destination runs beyond the NIU's " + std::to_string(NIU_AXI_ADDR_BITS) + "-bit address space");
    for (int a = 0; a < kCodeTable; ++a) {
        const std::uint32_t w0 = w[NIU_LAYER_CODE_TABLE + 2 * a], w1 = w[NIU_LAYER_CODE_TABLE + 2 * a + 1];
        const std::string entry = where + ".CODE_TABLE[" + std::to_string(a) + "]";
        CodeEntry& e = l.code[std::size_t(a)];
        e.gt = field(low_half(w0), NIU_G_BITS, source, entry + ".GT");
        e.sp = field(high_half(w0), NIU_SP_BITS, source, entry + ".SP");
        e.mu = field(low_half(w1), NIU_NU_BITS, source, entry + ".MU");
        e.sn = field(high_half(w1), NIU_NU_BITS, source, entry + ".SN");
    }
    for (int j = 0; j < kReadSegments; ++j) {
        const std::uint32_t v = w[NIU_LAYER_READ_TABLE + j];
        l.rt[std::size_t(j)] = low_half(v);
        l.rd[std::size_t(j)] = high_half_signed(v);
        // The RTL interpolates in RT's unsigned width and refuses a segment that leaves it
        // (ERR_BAD_LAYER), so the model never sees a read sigma the hardware would wrap.
        const std::int32_t segment_end = l.rt[std::size_t(j)] + l.rd[std::size_t(j)];
        if (segment_end < 0)
            throw FormatError(source, where + ".READ_TABLE[" + std::to_string(j) + "]", "segment ends below zero");
        if (segment_end > kReadSigmaMax)
            throw FormatError(source, where + ".READ_TABLE[" + std::to_string(j) + "]",
                              "segment ends at " + std::to_string(segment_end) + ", above the " + std::to_string(NIU_RT_VALUE_BITS) +
                                  "-bit read sigma's " + std::to_string(kReadSigmaMax));
    }
    for (std::size_t k = 0; k < l.rng.size(); ++k) {
        for (int i = 0; i < 4; ++i) l.rng[k][std::size_t(i)] = w[NIU_LAYER_RNG_STATES + 4 * k + std::size_t(i)];
        if ((l.rng[k][0] | l.rng[k][1] | l.rng[k][2] | l.rng[k][3]) == 0)
            throw FormatError(source, where + ".RNG_STATES[" + std::to_string(k) + "]", "an all-zero xoshiro state never changes");
    }
    return l;
}

}  // namespace

void check_model(const noise::NoiseModel& model) { require_pcm_family(model); }

void check_code_tables(const noise::NoiseModel& model) {
    const noise::PcmFamilyModel& pcm = require_pcm_family(model);
    NiuLayerProgram tables;
    // Each abs-max A gives its own targets k/A (127 is prime: no A's set holds another's), so a
    // table entry may overflow at one A and not at another; 127 tables of 128 entries are cheap.
    for (int absmax = 1; absmax <= kMaxAbsmax; ++absmax) fill_code_table(pcm, absmax, tables);
}

void check_tables_at(const noise::NoiseModel& model, double t) {
    const noise::PcmFamilyModel& pcm = require_pcm_family(model);
    check_options(pcm, {0, 0, 0, t, NIU_OUT_BITS_MAX});
    NiuLayerProgram tables;
    tables.drift_lt = drift_lt(pcm, t);
    fill_read_table(pcm, t, tables);
}

void check_runs_at(const noise::NoiseModel& model, double t) {
    check_code_tables(model);
    check_tables_at(model, t);
}

int clean_absmax(std::span<const std::int8_t> clean, AbsMaxMode mode) {
    if (mode == AbsMaxMode::Fixed127) return 127;
    int m = 0;
    for (std::int8_t c : clean) m = std::max(m, std::abs(int(c)));
    return std::clamp(m, 1, 127);
}

int code_table_absmax(const NiuLayerProgram& layer) {
    const std::int32_t full_scale = layer.code[kCodeTable - 1].gt;
    for (int a = 1; a < kCodeTable - 1; ++a)
        if (layer.code[std::size_t(a)].gt == full_scale) return a;
    return kCodeTable - 1;
}

double max_alpha(int absmax, int out_bits) {
    const double out_max = double((1 << (out_bits - 1)) - 1);
    return (std::ldexp(1.0, NIU_K_BITS) - 1.0) / std::ldexp(absmax * out_max / 127.0, NIU_K_SHIFT - NIU_G_FRAC);
}

NiuProgram compile_program(const noise::NoiseModel& model, const std::vector<NiuLayerSpec>& layers,
                           const NiuCompileOptions& options) {
    const noise::PcmFamilyModel& pcm = require_pcm_family(model);
    check_options(pcm, options);
    check_layer_count(layers.size(), "<niu compiler>", "layers");
    NiuProgram program;
    const std::uint32_t lt = drift_lt(pcm, options.t);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const NiuLayerSpec& spec = layers[i];
        check_layer(spec, i);
        NiuLayerProgram p;
        p.src_addr = spec.src_addr;
        p.dst_addr = spec.dst_addr;
        p.count = spec.count;
        p.out_bits = options.out_bits;
        p.back_k = back_scale(spec.absmax, options.out_bits, spec.alpha);
        p.drift_lt = lt;
        fill_streams(spec, options, p);
        fill_code_table(pcm, spec.absmax, p);
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
    if (w[NIU_PROG_MAGIC] != std::uint32_t(NIU_PROG_MAGIC_VALUE)) throw FormatError(source, "MAGIC", "not an NIU v2 program");
    if (w[NIU_PROG_VERSION] != std::uint32_t(NIU_PROG_VERSION_VALUE))
        throw FormatError(source, "VERSION", "unsupported version " + std::to_string(w[NIU_PROG_VERSION]));
    if (w[NIU_PROG_LAYER_WORDS] != std::uint32_t(NIU_LAYER_WORDS))
        throw FormatError(source, "LAYER_WORDS", "built for another NIU configuration (layer block size differs)");
    const std::size_t n = w[NIU_PROG_NUM_LAYERS];
    check_layer_count(n, source, "NUM_LAYERS");
    if (w.size() != std::size_t(NIU_PROG_HEADER_WORDS) + n * NIU_LAYER_WORDS)
        throw FormatError(source, "NUM_LAYERS", "program size does not match its layer count");
    NiuProgram p;
    for (std::size_t i = 0; i < n; ++i) p.layers.push_back(read_layer(w.data() + NIU_PROG_HEADER_WORDS + i * NIU_LAYER_WORDS, source, i));
    return p;
}

}  // namespace aimcemu::niu
