// Analytic per-layer PU timing (see timing.hpp for the model).
#include "perf_model/timing.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "common/errors.hpp"
#include "perf_model/uram.hpp"
#include "pu_model/sa_cycle.hpp"
#include "pu_model/sa_pipeline.hpp"

namespace aimcemu {

const char* to_string(FirstLayerIm2col v) { return v == FirstLayerIm2col::Host ? "host" : "fpga"; }
const char* to_string(AvgPoolMapping v) { return v == AvgPoolMapping::BlockDiagonal ? "block-diagonal" : "dense"; }
const char* to_string(TimingModel v) { return v == TimingModel::Full ? "full" : "roofline"; }

std::int64_t aligned_beats(const PuConfig& pu, std::int64_t address, std::int64_t bytes) {
    if (bytes <= 0) return 0;
    const std::int64_t a = pu.align_bytes;
    const std::int64_t first = address / a, last = (address + bytes - 1) / a;
    return (last - first + 1) * a / pu.axi_bytes;
}

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

std::int64_t sa_pipeline_cycles(const PuConfig& pu, std::int64_t n, std::int64_t m, std::int64_t p) {
    if (n <= 0 || m <= 0 || p <= 0) throw FormatError("<timing>", "gemm", "N, M and P must be positive");
    if (pu.r_sa % pu.r_g != 0) throw FormatError("<timing>", "r_g", "R_g must divide R_SA");
    const std::int64_t g = ceil_div(m, pu.c_sa);
    const std::int64_t sections = ceil_div(n, pu.r_sa);
    const std::int64_t waves = p * sections;
    const std::int64_t blocks = pu.r_sa / pu.r_g;
    const std::int64_t rows_last = n - (sections - 1) * pu.r_sa;
    const int top = int(ceil_div(rows_last, pu.r_g) - 1);
    // The SA issues a wave every G cycles at best; the last wave's top chunk then reaches its FIFO
    // head, climbs the aggregator chain to the top slot, is written to the WRB and read the cycle after.
    const std::int64_t sa_bound = (waves - 1) * g + sa_pipeline::chunk_ready_cycle(g, pu.c_sa, pu.r_g, top) +
                                  (blocks - 1 - top) + sa_pipeline::kWrbWriteAndRead + 1;
    // The read side reads one chunk per cycle (only the valid row-blocks: rows past N make no
    // chunk), the first no sooner than wave 0's bottom chunk can arrive.
    const std::int64_t chunks = p * ((sections - 1) * blocks + top + 1);
    const std::int64_t read_bound =
        sa_pipeline::chunk_ready_cycle(g, pu.c_sa, pu.r_g, 0) + (blocks - 1) + sa_pipeline::kWrbWriteAndRead + chunks;
    return std::max(sa_bound, read_bound);
}

bool sa_pipeline_exact(const PuConfig& pu, std::int64_t n, std::int64_t m) {
    return pu.r_g * ceil_div(m, pu.c_sa) >= pu.r_sa && (n <= pu.r_sa || n % pu.r_sa == 0);
}

namespace {

// Where the WRB condition fails (R_g * G < R_SA) the array outruns the read side, and how many
// waves per cycle get through then depends on the FIFO credits and the aggregator chain's
// arbitration (lower row-blocks take the empty slots first), also across a tile boundary, which
// no closed form here captures: the cycle-level model (sa_cycle.hpp, default FIFO and WRB depths)
// runs the layer's GEMM instead, tile-major as the layer model orders it.  A single tile's count
// grows by the same number of cycles per 64-wave window (the WRB's) from 128 columns on, so a
// longer tile is the count at the measured column count in the same phase of the window plus
// whole windows (tested equal to the full run).  A layer of several tiles and more than
// kMeasuredWaves waves (none in the zoo) is taken tile by tile, each from an empty pipeline: an
// approximation (docs/timing.md).
constexpr std::int64_t kMeasuredColumns = 256;
constexpr std::int64_t kMeasuredWaves = 8192;

// For a tile-major run of the all-ones GEMM (n, groups x C_SA, columns) (the timing depends on
// the shape only): the cycle each tile's first wave starts, then the run's whole count.
std::vector<std::int64_t> cycle_level_marks(const PuConfig& pu, std::int64_t n, std::int64_t groups,
                                            std::int64_t columns) {
    using Key = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t>;
    static std::mutex mutex;
    static std::map<Key, std::vector<std::int64_t>> cache;
    const Key key{pu.r_sa, pu.c_sa, pu.r_g, n, groups, columns};
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (const auto it = cache.find(key); it != cache.end()) return it->second;
    }
    SaConfig sa;
    sa.rows = pu.r_sa;
    sa.cols = pu.c_sa;
    sa.rg = pu.r_g;
    sa.tile_major = true;
    const std::int64_t m = groups * pu.c_sa;
    std::vector<std::int8_t> w(std::size_t(n * m), 1), x(std::size_t(columns * m), 1), bias(std::size_t(n), 0);
    std::vector<std::int32_t> acc(std::size_t(n * columns));
    const SaCycleStats stats = sa_cycle_gemm(w.data(), x.data(), m, bias.data(), 0, n, m, columns, sa, acc.data());
    std::vector<std::int64_t> marks = stats.section_start_cycles;
    marks.push_back(stats.cycles);
    std::lock_guard<std::mutex> lock(mutex);
    cache.emplace(key, marks);
    return marks;
}

// One tile of `rows` rows run alone: first input to last read.  Past kMeasuredColumns, the count
// of the measured column count in the same phase of the 64-wave window plus whole windows.
double cycle_level_tile_cycles(const PuConfig& pu, std::int64_t rows, std::int64_t groups, std::int64_t columns) {
    if (columns <= kMeasuredColumns) return double(cycle_level_marks(pu, rows, groups, columns).back());
    const std::int64_t window = SaConfig{}.wrb_waves;
    const std::int64_t same_phase = kMeasuredColumns - window + 1 + (columns - kMeasuredColumns - 1) % window;
    const std::int64_t per_window = cycle_level_marks(pu, rows, groups, kMeasuredColumns).back() -
                                    cycle_level_marks(pu, rows, groups, kMeasuredColumns - window).back();
    return double(cycle_level_marks(pu, rows, groups, same_phase).back() + (columns - same_phase) / window * per_window);
}

// The SA's drain after a wave of `rows` rows (the fill charges it once, for the layer's last wave).
double sa_drain_cycles(const PuConfig& pu, std::int64_t rows, std::int64_t groups) {
    return double(sa_pipeline_cycles(pu, rows, groups * pu.c_sa, 1) - groups);
}

// Per tile of a layer (weights n x M, G = groups, `columns` waves per tile): the SA and WRB read
// side's cycles per wave.  With the WRB condition the SA's G (the read side needs ceil(rows/R_g)
// <= R_SA/R_g <= G); without it, the cycle-level count: tile t's share runs from its first wave's
// start to the next tile's (the last tile's to the last read, less the layer's drain, which the
// fill charges), so no share is below the SA's G per wave.
std::vector<double> sa_wrb_wave_cycles(const PuConfig& pu, std::int64_t n, std::int64_t groups, std::int64_t columns) {
    const std::int64_t tiles = ceil_div(n, pu.r_sa);
    if (pu.r_g * groups >= pu.r_sa) return std::vector<double>(static_cast<std::size_t>(tiles), double(groups));
    const auto rows = [&](std::int64_t tile) { return std::min<std::int64_t>(pu.r_sa, n - tile * pu.r_sa); };
    std::vector<double> shares;
    if (tiles == 1) {
        shares.push_back(cycle_level_tile_cycles(pu, n, groups, columns) - sa_drain_cycles(pu, n, groups));
    } else if (tiles * columns <= kMeasuredWaves) {
        const std::vector<std::int64_t> marks = cycle_level_marks(pu, n, groups, columns);
        for (std::int64_t t = 0; t < tiles; ++t) shares.push_back(double(marks[std::size_t(t + 1)] - marks[std::size_t(t)]));
        shares.back() -= sa_drain_cycles(pu, rows(tiles - 1), groups);
    } else {  // each tile from an empty pipeline, drained before the next starts
        for (std::int64_t t = 0; t < tiles; ++t)
            shares.push_back(cycle_level_tile_cycles(pu, rows(t), groups, columns) - sa_drain_cycles(pu, rows(t), groups));
    }
    for (double& share : shares) share /= double(columns);
    return shares;
}

// How a layer's input columns reach the ping-pong buffer.
enum class InputMode { Linear, Strided, Im2col };

// The GEMM a layer actually runs on the PU, and how its operands move.
struct GemmPlan {
    std::int64_t n = 0, m = 0, m_eff = 0, p = 0;
    std::int64_t tiles = 0, columns = 0;
    InputMode input = InputMode::Linear;
    int in_channels = 0;        // bytes per IM2COL command (one kernel pixel), or per strided column
    int channel_offset_step = 0;  // avg-pool block-diagonal: tile t reads channels [t*R_SA, ...)
    bool shared_tile = false;   // every tile has the same weights (block-diagonal avg pool)
    double macs = 0;
};

GemmPlan plan_gemm(const Network& net, const Layer& l, const PuConfig& pu, const TimingOptions& opt) {
    GemmPlan g;
    const Shape3& in = net.shape_of(l.input);
    g.n = l.gemm_n();
    g.m = l.gemm_m();
    g.p = l.gemm_p();
    g.m_eff = g.m;
    g.columns = g.p;
    g.tiles = ceil_div(g.n, pu.r_sa);
    g.in_channels = in.c;
    if (l.kind == LayerKind::Linear) {
        g.input = InputMode::Linear;
    } else if (l.kind == LayerKind::AvgPool) {
        g.input = InputMode::Im2col;
        if (opt.avg_pool == AvgPoolMapping::BlockDiagonal) {
            g.m_eff = l.window.taps() * std::min<std::int64_t>(pu.r_sa, in.c);
            g.in_channels = std::min(pu.r_sa, in.c);
            g.channel_offset_step = pu.r_sa;
            g.columns = 1;
            g.shared_tile = true;
        }
        return g;  // pools do no useful MACs
    } else if (l.input == kNetworkInput && opt.first_layer == FirstLayerIm2col::Host) {
        g.input = InputMode::Linear;  // host-built IM2COL matrix, patches padded to the alignment
        g.m_eff = ceil_div(g.m, pu.align_bytes) * pu.align_bytes;
    } else if (l.window.is_pointwise()) {
        g.input = InputMode::Linear;
    } else if (l.window == Window::square(1, 2, 0)) {
        g.input = InputMode::Strided;
    } else {
        g.input = InputMode::Im2col;
    }
    g.macs = double(g.n) * double(g.m) * double(g.p);
    return g;
}

// What moving one column, or one output or residual segment, costs: AXI cycles on the port (the
// aligned 32-byte words it spans at the ADM stream side's width, plus the ADM's per-command
// overhead) and the bytes the HBM channel delivers.
struct Transfer {
    double axi_cycles = 0;
    double hbm_bytes = 0;
    Transfer& operator+=(const Transfer& o) {
        axi_cycles += o.axi_cycles;
        hbm_bytes += o.hbm_bytes;
        return *this;
    }
};

// One ADM command of `bytes` at `address` through a stream side of `stream_bytes` per AXI cycle:
// the aligned words it spans, moved whole, plus the command overhead.
Transfer command(const PuConfig& pu, std::int64_t address, std::int64_t bytes, int stream_bytes) {
    const double moved = double(aligned_beats(pu, address, bytes) * pu.axi_bytes);
    return {moved / stream_bytes + pu.adm_command_overhead, moved};
}

// Part of one long linear transfer: no per-command cost.
Transfer streamed(double bytes, int stream_bytes) { return {bytes / stream_bytes, bytes}; }

// Whether the IM2COL unit fetches the in-image pixels of one kernel row with a single ADM command.
// An HWC image stores a patch row's pixels back to back (paper Sec. II-B), and when the column takes
// every channel of a pixel and those channels fill whole 32-byte words, the row is one aligned
// transfer.  Otherwise (the 3-channel first layer, the block-diagonal pool's 64-channel slices of a
// wider pixel, channel counts off the alignment) each pixel is its own command.
bool im2col_row_per_command(const PuConfig& pu, const GemmPlan& g, const Shape3& in) {
    return g.in_channels == in.c && std::int64_t(in.c) % pu.align_bytes == 0;
}

// Input transfer of each column (for IM2COL they differ at the image border).
std::vector<Transfer> input_transfers(const Network& net, const Layer& l, const GemmPlan& g, const PuConfig& pu,
                                      std::int64_t tile) {
    std::vector<Transfer> columns(std::size_t(g.columns));
    if (g.input == InputMode::Linear) {
        std::fill(columns.begin(), columns.end(), streamed(double(g.m_eff), pu.adm_io_stream_bytes));
        return columns;
    }
    if (g.input == InputMode::Strided) {  // one stride-patterned burst per column: no per-command cost
        const double moved = double(aligned_beats(pu, 0, g.in_channels) * pu.axi_bytes);
        std::fill(columns.begin(), columns.end(), streamed(moved, pu.adm_io_stream_bytes));
        return columns;
    }
    const Shape3& in = net.shape_of(l.input);
    const int ow = l.out_shape.w;
    const bool aligned = (std::int64_t(in.c) % pu.align_bytes == 0) &&
                         (std::int64_t(g.channel_offset_step) * tile % pu.align_bytes == 0);
    const Transfer aligned_command = command(pu, 0, g.in_channels, pu.adm_io_stream_bytes);
    const bool per_row = im2col_row_per_command(pu, g, in);
    for (std::int64_t col = 0; col < g.columns; ++col) {
        const int oy = int(col / ow), ox = int(col % ow);
        Transfer sum;
        for (int ky = 0; ky < l.window.kernel_h; ++ky) {
            const int iy = oy * l.window.stride_h - l.window.pad_top + ky;
            if (iy < 0 || iy >= in.h) continue;  // padding rows are zeros written by the buffer, no transfer
            const int ix_first = ox * l.window.stride_w - l.window.pad_left;  // may lie in the padding
            if (per_row) {  // the row's in-image pixels, [ix0, ix1), in one aligned command
                const int ix0 = std::max(0, ix_first), ix1 = std::min(in.w, ix_first + l.window.kernel_w);
                const std::int64_t addr = (std::int64_t(iy) * in.w + ix0) * in.c;
                if (ix1 > ix0) sum += command(pu, addr, std::int64_t(ix1 - ix0) * in.c, pu.adm_io_stream_bytes);
                continue;
            }
            for (int kx = 0; kx < l.window.kernel_w; ++kx) {
                const int ix = ix_first + kx;
                if (ix < 0 || ix >= in.w) continue;
                if (aligned) {
                    sum += aligned_command;
                } else {
                    const std::int64_t addr = (std::int64_t(iy) * in.w + ix) * in.c + g.channel_offset_step * tile;
                    sum += command(pu, addr, g.in_channels, pu.adm_io_stream_bytes);
                }
            }
        }
        columns[std::size_t(col)] = sum;
    }
    return columns;
}

// A tile's `rows` bytes of pixel `col` of an N-channel HWC tensor, through a stream side of
// `stream_bytes` per AXI cycle.
Transfer row_segment(const PuConfig& pu, std::int64_t n, std::int64_t tiles, int rows, std::int64_t tile,
                     std::int64_t col, int stream_bytes) {
    if (tiles == 1 && rows == n) return streamed(double(rows), stream_bytes);  // contiguous across columns: one stream
    return command(pu, col * n + tile * pu.r_sa, rows, stream_bytes);
}

enum Stage { kSa, kWrb, kIn, kOut, kResidual, kHbm, kPeriph, kStages };
constexpr std::array<const char*, kStages> kStageNames = {"SA", "WRB", "ADM-in", "ADM-out", "residual", "HBM",
                                                          "peripherals"};

LayerTiming time_gemm(const Network& net, int index, const PuConfig& pu, const TimingOptions& opt,
                      std::vector<TileTiming>* tiles_out) {
    const Layer& l = net.layers[std::size_t(index)];
    const GemmPlan g = plan_gemm(net, l, pu, opt);
    LayerTiming t;
    t.layer = index;
    t.name = l.name;
    t.kind = l.kind;
    t.timed = true;
    t.n = g.n;
    t.m = g.m;
    t.m_eff = g.m_eff;
    t.p = g.p;
    t.tiles = g.tiles;
    t.columns = g.columns;
    t.macs = g.macs;
    t.wave_cycles = ceil_div(g.m_eff, pu.c_sa);
    t.wrb_cycles = ceil_div(pu.r_sa, pu.r_g);
    t.wrb_condition = pu.r_g * t.wave_cycles >= pu.r_sa;
    t.sa_cycles = g.tiles * g.columns * t.wave_cycles;
    t.peripherals = std::size_t(index) < opt.peripherals.size() && opt.peripherals[std::size_t(index)];
    if (t.peripherals) {
        if (opt.periph_lanes < 0 || opt.periph_latency < 0)
            throw FormatError("<timing>", "peripherals", "periph_lanes and periph_latency must be >= 0");
        t.periph_cycles = ceil_div(pu.r_sa, opt.periph_lanes == 0 ? pu.r_g : opt.periph_lanes);
    }
    const std::int64_t entries = uram_tile_entries(pu, g.m_eff);
    if (entries > uram_capacity_entries(pu))
        throw FormatError("<timing:" + net.name + ">", "layers/" + l.name,
                          "one weight tile needs " + std::to_string(entries) + " URAM entries, more than the " +
                              std::to_string(uram_capacity_entries(pu)) + " a " + pu.name + " has");

    const bool roofline = opt.model == TimingModel::Roofline;
    const double f = pu.fast_per_axi();
    const double hbm_cycles_per_byte = pu.fast_hz / pu.hbm_channel_bytes_per_s();
    const bool residual = l.residual_input >= 0;
    std::array<double, kStages> stage_time{};
    std::vector<Transfer> in;
    double in_sum = 0, out_sum = 0, res_sum = 0, hbm_sum = 0, in_bytes = 0;
    const std::vector<double> sa_wrb_per_wave =
        roofline ? std::vector<double>() : sa_wrb_wave_cycles(pu, g.n, t.wave_cycles, g.columns);
    for (std::int64_t tile = 0; tile < g.tiles; ++tile) {
        if (tile == 0 || g.channel_offset_step != 0) in = input_transfers(net, l, g, pu, tile);
        const int rows = int(std::min<std::int64_t>(pu.r_sa, g.n - tile * pu.r_sa));
        const double sa_wrb = roofline ? 0.0 : sa_wrb_per_wave[std::size_t(tile)];
        double tile_cycles = 0, tile_side = 0;
        for (std::int64_t col = 0; col < g.columns; ++col) {
            // The tile's output (and residual) segment sits at pixel `col`; block-diagonal avg pool has one pixel.
            const Transfer& column_in = in[std::size_t(col)];
            // Output through the I/O port; the residual segment through the weights port, whose stream
            // side (256 bit at 300 MHz to 128 bit at 600 MHz) moves a whole word per AXI cycle.
            const Transfer out = row_segment(pu, g.n, g.tiles, rows, tile, col, pu.adm_io_stream_bytes);
            const Transfer res = row_segment(pu, g.n, g.tiles, rows, tile, col, pu.axi_bytes);
            std::array<double, kStages> c{};
            c[kSa] = double(t.wave_cycles);
            c[kWrb] = sa_wrb;
            c[kIn] = column_in.axi_cycles * f;
            c[kOut] = out.axi_cycles * f;
            c[kResidual] = residual ? res.axi_cycles * f : 0.0;
            c[kHbm] = (column_in.hbm_bytes + out.hbm_bytes) * hbm_cycles_per_byte;
            c[kPeriph] = double(t.periph_cycles);
            if (!roofline)
                t.periph_stall_cycles += std::max(0.0, c[kPeriph] - *std::max_element(c.begin(), c.begin() + kPeriph));
            const std::size_t slowest =
                roofline ? std::size_t(kSa) : std::size_t(std::max_element(c.begin(), c.end()) - c.begin());
            stage_time[slowest] += c[slowest];
            tile_cycles += c[slowest];
            tile_side += c[kResidual];
            in_sum += c[kIn];
            out_sum += c[kOut];
            res_sum += c[kResidual];
            hbm_sum += c[kHbm];
            in_bytes += column_in.hbm_bytes;
        }
        t.stream_cycles += tile_cycles;
        if (tiles_out) {
            TileTiming tt;
            tt.layer = index;
            tt.tile = int(tile);
            tt.rows = rows;
            tt.entries = entries;
            tt.load_bytes = std::int64_t(rows) * g.m_eff + rows;  // weights + the bias byte per row
            tt.exec_s = tile_cycles / pu.fast_hz;
            tt.side_port_s = roofline ? 0.0 : tile_side / pu.fast_hz;
            tt.shared_static = g.shared_tile;
            tiles_out->push_back(tt);
        }
        t.weight_bytes += (g.shared_tile && tile > 0) ? 0 : std::int64_t(rows) * g.m_eff + rows;
        t.output_bytes += std::int64_t(rows) * g.columns;
        if (residual) t.residual_bytes += std::int64_t(rows) * g.columns;
    }
    const double waves = double(g.tiles * g.columns);
    t.in_cycles_per_column = in_sum / waves;
    t.out_cycles_per_column = out_sum / waves;
    t.residual_cycles_per_column = res_sum / waves;
    t.hbm_cycles_per_column = hbm_sum / waves;
    t.input_bytes = std::int64_t(std::llround(in_bytes));
    t.adm_bound_cycles = t.stream_cycles - double(t.sa_cycles);
    t.bound = kStageNames[std::size_t(std::max_element(stage_time.begin(), stage_time.end()) - stage_time.begin())];

    // Fill and drain: the first column's load, one HBM read and one write latency, the SA pipeline's
    // drain after the last wave (as the PE-level model counts it), and the post-processing chain
    // (with the analog peripherals' pipeline where the layer has them).
    if (!roofline) {
        const double first_load = in.empty() ? 0.0 : in.front().axi_cycles * f;
        // Tiles run in order, so the layer's last wave is its last tile's (fewer rows when N is not a
        // multiple of R_SA: its top chunk finishes sooner).
        const std::int64_t rows_last = g.n - (g.tiles - 1) * pu.r_sa;
        const std::int64_t sa_drain = sa_pipeline_cycles(pu, rows_last, g.m_eff, 1) - t.wave_cycles;
        t.fill_cycles = std::int64_t(std::ceil(first_load + 2.0 * pu.hbm_latency_s * pu.fast_hz)) + sa_drain +
                        pu.postproc_pipeline + (t.peripherals ? opt.periph_latency : 0);
    }
    if (tiles_out && !tiles_out->empty()) {
        auto& first = (*tiles_out)[tiles_out->size() - std::size_t(g.tiles)];
        first.exec_s += double(t.fill_cycles) / pu.fast_hz;
    }
    t.cycles = t.stream_cycles + double(t.fill_cycles);
    t.time_s = t.cycles / pu.fast_hz;
    t.efficiency = t.macs / (t.cycles * pu.macs_per_cycle());
    return t;
}

// Element-wise add (not used by the zoo, whose residuals are fused): both operands stream in on
// the two ports while the sum streams out; the port or the activation channel (which carries the
// input and the sum) sets the time.  The roofline gives it no time: the SA does no work.
LayerTiming time_add(const Network& net, int index, const PuConfig& pu, const TimingOptions& opt) {
    const Layer& l = net.layers[std::size_t(index)];
    LayerTiming t;
    t.layer = index;
    t.name = l.name;
    t.kind = l.kind;
    t.timed = true;
    t.p = std::int64_t(l.out_shape.h) * l.out_shape.w;
    const std::int64_t bytes = l.out_shape.size();
    t.input_bytes = bytes;
    t.residual_bytes = bytes;
    t.output_bytes = bytes;
    const double port = double(bytes) / pu.adm_io_stream_bytes * pu.fast_per_axi();
    const double channel = 2.0 * double(bytes) / pu.hbm_channel_bytes_per_s() * pu.fast_hz;
    t.bound = port >= channel ? "ADM-in" : "HBM";
    if (opt.model == TimingModel::Roofline) return t;
    t.stream_cycles = std::max(port, channel);
    t.adm_bound_cycles = t.stream_cycles;
    t.fill_cycles = std::int64_t(std::ceil(2.0 * pu.hbm_latency_s * pu.fast_hz)) + pu.postproc_pipeline;
    t.cycles = t.stream_cycles + double(t.fill_cycles);
    t.time_s = t.cycles / pu.fast_hz;
    return t;
}

LayerTiming time_one(const Network& net, int index, const PuConfig& pu, const TimingOptions& opt,
                     std::vector<TileTiming>* tiles_out) {
    const Layer& l = net.layers.at(std::size_t(index));
    switch (l.kind) {
        case LayerKind::Conv:
        case LayerKind::Linear:
        case LayerKind::AvgPool: return time_gemm(net, index, pu, opt, tiles_out);
        case LayerKind::Add: return time_add(net, index, pu, opt);
        case LayerKind::MaxPool: break;
    }
    // Max-pool is fused into the producing layer's post-processing (paper Sec. V): no PU time.
    LayerTiming t;
    t.layer = index;
    t.name = l.name;
    t.kind = l.kind;
    t.bound = "fused";
    return t;
}

}  // namespace

LayerTiming time_layer(const Network& net, int layer, const PuConfig& pu, const TimingOptions& options) {
    pu.validate();
    if (layer < 0 || layer >= int(net.layers.size()))
        throw FormatError("<timing:" + net.name + ">", "layer", "index " + std::to_string(layer) + " out of range");
    return time_one(net, layer, pu, options, nullptr);
}

NetworkTiming time_network(const Network& net, const PuConfig& pu, const TimingOptions& options) {
    pu.validate();
    NetworkTiming nt;
    nt.pu = pu;
    nt.options = options;
    for (int i = 0; i < int(net.layers.size()); ++i) {
        nt.layers.push_back(time_one(net, i, pu, options, &nt.tiles));
        nt.compute_s += nt.layers.back().time_s;
        nt.macs += nt.layers.back().macs;
        nt.weight_bytes += nt.layers.back().weight_bytes;
    }
    return nt;
}

}  // namespace aimcemu
