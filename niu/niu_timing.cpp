// NIU time, bytes and resources per round (see niu_timing.hpp).
#include "niu/niu_timing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "common/errors.hpp"
#include "niu_constants.hpp"

namespace aimcemu {

void NiuConfig::validate(const std::string& source) const {
    if (!(lanes_per_cycle > 0)) throw FormatError(source, "niu.lanes_per_cycle", "must be positive");
    if (lanes_per_cycle > beat_bytes)
        throw FormatError(source, "niu.lanes_per_cycle", "cannot exceed the lanes of one beat (" + std::to_string(beat_bytes) + ")");
    if (!(clock_hz > 0)) throw FormatError(source, "niu.clock_hz", "must be positive");
    if (beat_bytes <= 0) throw FormatError(source, "niu.beat_bytes", "must be positive");
    if (!(channel_bytes_per_s > 0)) throw FormatError(source, "niu.channel_bytes_per_s", "must be positive");
    if (!(channel_efficiency > 0 && channel_efficiency <= 1))
        throw FormatError(source, "niu.channel_efficiency", "must be in (0, 1]");
    // !(x >= 0) also refuses NaN; the bound refuses infinity.
    if (!(read_latency_cycles >= 0 && read_latency_cycles < 1e12))
        throw FormatError(source, "niu.read_latency_cycles", "must be a finite number of cycles >= 0");
    if (!(write_latency_cycles >= 0 && write_latency_cycles < 1e12))
        throw FormatError(source, "niu.write_latency_cycles", "must be a finite number of cycles >= 0");
}

namespace {

// The RTL controller's cycles beside the streaming (rtl/niu.sv; docs/niu_rtl.md, "Memory latency
// and the timing model"), on a memory that answers in the cycle after each handshake:
// the header: its AR, its beat into the word unpacker, one cycle per word, the check after the last word;
constexpr double kHeaderCycles = niu::gen::NIU_PROG_HEADER_WORDS + 3;
// a layer block: the phase's start, its AR, its first beat into the unpacker, one cycle per word,
// the check after the last word, the field check (StCheck);
constexpr double kBlockCycles = niu::gen::NIU_LAYER_WORDS + 5;
// a layer's stream beside its groups: the phase's start, its AR, the first beat into the splitter,
// the pipeline, the join's beat register, the skid buffer (W), the last B, the done check;
constexpr double kStreamCycles = niu::gen::NIU_PIPE_STAGES + 7;
// the last stream's done check follows the last B, where the NIU's bus time ends.
constexpr double kAfterLastB = 1;

// A program's cycles beside streaming its weights, per layer: the block, the stream's fill and
// hand-offs, and the latency it waits for in turn (the block's first beat, the weights' first beat,
// the last B): 2R + W.  Every other burst is pipelined behind them.
double layer_cycles(const NiuConfig& cfg) {
    return kBlockCycles + kStreamCycles + 2 * cfg.read_latency_cycles + cfg.write_latency_cycles;
}

// ... and once per program: the header and its first beat's latency R, less the done check after
// the last B (the NIU's bus time ends at that B).
double program_cycles_once(const NiuConfig& cfg) { return kHeaderCycles - kAfterLastB + cfg.read_latency_cycles; }

}  // namespace

NiuThroughput niu_throughput(const NiuConfig& cfg) {
    cfg.validate();
    const double datapath = cfg.lanes_per_cycle * cfg.clock_hz;
    const double port = double(cfg.beat_bytes) * cfg.clock_hz;  // bytes per direction = weights/s
    const double channel = cfg.channel_bytes_per_s * cfg.channel_efficiency / 2.0;
    NiuThroughput t;
    t.layer_seconds = layer_cycles(cfg) / cfg.clock_hz;
    t.program_seconds = program_cycles_once(cfg) / cfg.clock_hz;
    t.channel_bytes_per_weight = 2.0;
    t.weights_per_s = std::min({datapath, port, channel});
    t.bound = t.weights_per_s == datapath ? "datapath" : (t.weights_per_s == channel ? "hbm-channel" : "axi-port");
    return t;
}

namespace {

void check_counts(std::int64_t weights, std::int64_t layers) {
    if (weights < 0) throw FormatError("<niu>", "weights", "must be >= 0");
    if (layers < 0) throw FormatError("<niu>", "layers", "must be >= 0");
}

std::int64_t whole_beat_bytes(const NiuConfig& cfg, std::int64_t weights) {
    return (weights + cfg.beat_bytes - 1) / cfg.beat_bytes * cfg.beat_bytes;
}

// `streamed` weights pass the datapath, `bus_bytes` move each way on the bus (whole beats); the
// program costs its controller cycles and the memory latency (program_cycles_once, layer_cycles).
NiuRoundTime round_time(const NiuConfig& cfg, std::int64_t weights, double streamed, std::int64_t bus_bytes,
                        std::int64_t layers) {
    const NiuThroughput t = niu_throughput(cfg);
    NiuRoundTime r;
    r.weights = weights;
    r.weights_per_s = t.weights_per_s;
    r.bound = t.bound;
    const double program_cycles = layers > 0 ? program_cycles_once(cfg) + double(layers) * layer_cycles(cfg) : 0.0;
    r.program_seconds = program_cycles / cfg.clock_hz;
    r.seconds = streamed / t.weights_per_s + r.program_seconds;
    r.cycles = streamed / (t.weights_per_s / cfg.clock_hz) + program_cycles;  // exact for whole rates
    constexpr std::int64_t word_bytes = niu::gen::NIU_WORD_BITS / 8;
    r.bytes_read = bus_bytes + layers * niu::gen::NIU_LAYER_WORDS * word_bytes +
                   (layers > 0 ? niu::gen::NIU_PROG_HEADER_WORDS * word_bytes : 0);
    r.bytes_written = bus_bytes;
    return r;
}

}  // namespace

NiuRoundTime niu_round_time(const NiuConfig& cfg, std::int64_t weights, int layers) {
    check_counts(weights, layers);
    // Whole beats move on the bus: a partial last beat still costs a full one.
    return round_time(cfg, weights, double(weights), whole_beat_bytes(cfg, weights), layers);
}

NiuRoundTime niu_program_time(const NiuConfig& cfg, const std::vector<std::int64_t>& layer_weights) {
    cfg.validate();
    std::int64_t weights = 0, bus_bytes = 0;
    for (const std::int64_t w : layer_weights) {
        check_counts(w, 0);
        weights += w;
        bus_bytes += whole_beat_bytes(cfg, w);  // each layer streams whole beats through the datapath
    }
    return round_time(cfg, weights, double(bus_bytes), bus_bytes, std::int64_t(layer_weights.size()));
}

std::vector<NiuSynthesis> niu_syntheses() {
    std::vector<NiuSynthesis> out;
    for (const auto& s : niu::gen::NIU_SYNTHESIS)
        out.push_back({s.lanes, {"NIU (" + std::to_string(s.lanes) + " lanes)", s.lut, s.ff, s.dsp, s.bram36, s.uram},
                       s.weights_per_cycle});
    return out;
}

NiuSynthesis niu_synthesis(int lanes, const std::string& source, const std::string& field) {
    std::string built;
    for (const NiuSynthesis& s : niu_syntheses()) {
        if (s.lanes == lanes) return s;
        built += (built.empty() ? "" : ", ") + std::to_string(s.lanes);
    }
    throw FormatError(source, field, "the NIU RTL was not built for " + std::to_string(lanes) + " lanes (synthesized: " +
                                         built + "; rtl/synth/, scripts/synth_niu.sh)");
}

NiuConfig niu_config_for_lanes(int lanes, const std::string& source) {
    NiuConfig cfg;
    cfg.lanes_per_cycle = niu_synthesis(lanes, source).weights_per_cycle;
    return cfg;
}

namespace {
constexpr double kNoFigure = std::numeric_limits<double>::quiet_NaN();
}

FpgaResources pu_resources(const std::string& pu_name, const std::string& source) {
    if (pu_name == "PU1x") return {"PU1x", 15.5e3, kNoFigure, 258, 20, 64};
    if (pu_name == "PU2x") return {"PU2x", 16.5e3, kNoFigure, 514, 20, 64};
    throw FormatError(source, "pus", "no resource figures for a PU named '" + pu_name + "' (PU1x, PU2x)");
}

FpgaResources xcu50() { return {"XCU50", 871680, 1743360, 5952, 1344, 640}; }

FpgaResources u50_shell() {
    const FpgaResources dev = xcu50(), pu1 = pu_resources("PU1x"), pu2 = pu_resources("PU2x");
    auto rest = [](double fraction, double device, double pus) { return std::max(0.0, fraction * device - pus); };
    return {"shell (PCIe, HBM, AXI)", rest(0.234, dev.lut, 5 * (pu1.lut + pu2.lut)), kNoFigure,
            rest(0.648, dev.dsp, 5 * (pu1.dsp + pu2.dsp)), rest(0.256, dev.bram36, 5 * (pu1.bram36 + pu2.bram36)),
            rest(1.0, dev.uram, 5 * (pu1.uram + pu2.uram))};
}

FitReport fit_on_xcu50(int pu2x, int pu1x, int nius, int niu_lanes, const std::string& source) {
    if (pu2x < 0 || pu1x < 0 || nius < 0) throw FormatError(source, "pus", "counts must be >= 0");
    FitReport r;
    r.device = xcu50();
    r.shell = u50_shell();
    if (pu2x) r.rows.push_back(pu_resources("PU2x")), r.counts.push_back(pu2x);
    if (pu1x) r.rows.push_back(pu_resources("PU1x")), r.counts.push_back(pu1x);
    if (nius) r.rows.push_back(niu_synthesis(niu_lanes, source).resources), r.counts.push_back(nius);
    r.total = r.shell;
    r.total.name = "total";
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
        const double n = r.counts[i];
        r.total.lut += n * r.rows[i].lut;
        r.total.dsp += n * r.rows[i].dsp;
        r.total.bram36 += n * r.rows[i].bram36;
        r.total.uram += n * r.rows[i].uram;
    }
    r.fits = true;
    r.limiting_fraction = -1;
    for (auto [name, used, have] : {std::tuple{"LUT", r.total.lut, r.device.lut}, std::tuple{"DSP", r.total.dsp, r.device.dsp},
                                    std::tuple{"BRAM36", r.total.bram36, r.device.bram36},
                                    std::tuple{"URAM", r.total.uram, r.device.uram}}) {
        const double fraction = used / have;
        if (fraction > 1.0 + 1e-12) r.fits = false;
        if (fraction > r.limiting_fraction) r.limiting_fraction = fraction, r.limiting = name;
    }
    return r;
}

}  // namespace aimcemu
