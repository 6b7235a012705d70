// Per-layer PU timing: the SA cycle formula, the ADM/WRB/HBM bounds and the URAM layout.  The
// paper's figures are checked in test_timing_paper.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "common/errors.hpp"
#include "perf_model/system.hpp"
#include "perf_model/timing.hpp"
#include "perf_model/uram.hpp"
#include "pu_model/sa_cycle.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A conv layer of weights 1 and bias 0 over `cin` input channels.
Layer conv_layer(const std::string& name, const Window& window, int cin, int cout) {
    Layer l;
    l.name = name;
    l.kind = LayerKind::Conv;
    l.window = window;
    l.out_channels = cout;
    l.weights.assign(std::size_t(cout) * window.kernel_h * window.kernel_w * cin, 1);
    l.bias.assign(std::size_t(cout), 0);
    return l;
}

// A one-layer network: conv k x k with `cin` -> `cout` channels on an h x h image.
Network one_conv(int h, int cin, int cout, int k, int s, int p) {
    Network net;
    net.name = "one_conv";
    net.input_shape = {h, h, cin};
    Layer l = conv_layer("conv", Window::square(k, s, p), cin, cout);
    l.out_shift = 4;
    net.layers.push_back(l);
    net.resolve();
    return net;
}

// A one-layer network: an FC of `in` -> `out` features, every weight `weight`, bias 0.
Network one_fc(const std::string& name, int in, int out, std::int8_t weight) {
    Network net;
    net.name = name;
    net.input_shape = {1, 1, in};
    Layer l;
    l.name = "fc";
    l.kind = LayerKind::Linear;
    l.out_channels = out;
    l.weights.assign(std::size_t(out) * std::size_t(in), weight);
    l.bias.assign(std::size_t(out), 0);
    l.out_shift = 1;
    net.layers.push_back(l);
    net.resolve();
    return net;
}

}  // namespace

TEST(TimingModel, AlignedBeatsCountWholeAlignedWords) {
    const PuConfig pu = pu2x();
    EXPECT_EQ(aligned_beats(pu, 0, 32), 1);
    EXPECT_EQ(aligned_beats(pu, 0, 33), 2);
    EXPECT_EQ(aligned_beats(pu, 31, 2), 2);   // straddles a 32-byte boundary
    EXPECT_EQ(aligned_beats(pu, 30, 3), 2);
    EXPECT_EQ(aligned_beats(pu, 3, 3), 1);
    EXPECT_EQ(aligned_beats(pu, 64, 64), 2);
    EXPECT_EQ(aligned_beats(pu, 5, 0), 0);
}

// For every GEMM layer of ResNet-50 except the host-padded first one and the pools, the SA cycles
// are the paper's P * ceil(N/R_SA) * ceil(M/C_SA), computed here from the layer shapes alone.
TEST(TimingModel, SaCyclesFollowThePaperFormula) {
    const Network net = zoo::resnet50();
    for (const PuConfig& pu : {pu2x(), pu1x()}) {
        const NetworkTiming t = time_network(net, pu);
        for (const Layer& l : net.layers) {
            if (l.kind != LayerKind::Conv && l.kind != LayerKind::Linear) continue;
            const LayerTiming& lt = t.layers[std::size_t(net.find_layer(l.name))];
            const std::int64_t n = l.out_channels;
            const std::int64_t m = l.kind == LayerKind::Linear ? l.in_shape.size() : std::int64_t(l.window.kernel_h) * l.window.kernel_w * l.in_shape.c;
            const std::int64_t m_run = l.name == "conv1" ? 160 : m;  // host IM2COL pads 147 -> 160
            const std::int64_t p = std::int64_t(l.out_shape.h) * l.out_shape.w;
            EXPECT_EQ(lt.sa_cycles, p * ceil_div(n, pu.r_sa) * ceil_div(m_run, pu.c_sa)) << l.name << " " << pu.name;
            EXPECT_GE(lt.cycles, double(lt.sa_cycles)) << l.name;
            EXPECT_LE(lt.efficiency, 1.0) << l.name;
            EXPECT_DOUBLE_EQ(lt.macs, double(n) * double(m) * double(p));
        }
    }
}

TEST(TimingModel, MaxPoolIsFusedAndAvgPoolIsBlockDiagonal) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu2x();
    const NetworkTiming t = time_network(net, pu);
    const LayerTiming& mp = t.layers[std::size_t(net.find_layer("maxpool"))];
    EXPECT_FALSE(mp.timed);
    EXPECT_EQ(mp.cycles, 0.0);
    const LayerTiming& ap = t.layers[std::size_t(net.find_layer("avgpool"))];
    EXPECT_EQ(ap.tiles, 2048 / 64);
    EXPECT_EQ(ap.m_eff, 7 * 7 * 64);
    EXPECT_EQ(ap.sa_cycles, 32 * ceil_div(7 * 7 * 64, 8));
    // The dense mapping needs 7*7*2048/8 = 12544 URAM entries per tile row: it cannot run at all on
    // ResNet-50, and on ResNet-18 (512 channels) it costs 8 tiles of 7*7*512/8 waves.
    TimingOptions dense;
    dense.avg_pool = AvgPoolMapping::Dense;
    EXPECT_THROW(time_layer(net, net.find_layer("avgpool"), pu, dense), FormatError);
    const Network r18 = zoo::resnet18();
    const LayerTiming apd = time_layer(r18, r18.find_layer("avgpool"), pu, dense);
    EXPECT_EQ(apd.sa_cycles, 8 * ceil_div(7 * 7 * 512, 8));
}

// First layer: host IM2COL streams 160-byte patches; in-FPGA IM2COL issues one ADM command per
// in-image kernel pixel (3 unaligned bytes), which is slower than the SA.
TEST(TimingModel, FirstLayerIm2colHostAndFpga) {
    const Network net = zoo::resnet18();
    const PuConfig pu = pu2x();
    const LayerTiming host = time_layer(net, 0, pu);
    EXPECT_EQ(host.m_eff, 160);
    EXPECT_EQ(host.bound, "SA");
    // 160 bytes on the I/O ADM's 16-byte stream side: 10 AXI cycles, 20 fast cycles = G, a tie.
    EXPECT_DOUBLE_EQ(host.in_cycles_per_column, 160.0 / 16 * 2);
    EXPECT_EQ(host.wave_cycles, 20);
    TimingOptions fpga;
    fpga.first_layer = FirstLayerIm2col::Fpga;
    const LayerTiming f = time_layer(net, 0, pu, fpga);
    EXPECT_EQ(f.m_eff, 147);
    EXPECT_EQ(f.bound, "ADM-in");
    // An interior pixel has 49 commands, each one or two whole 32-byte words (2 or 4 AXI cycles on
    // the stream side) plus the per-command overhead; border pixels have fewer.
    EXPECT_GT(f.in_cycles_per_column, 2.0 * 40 * (2 + pu.adm_command_overhead));
    EXPECT_LT(f.in_cycles_per_column, 2.0 * 49 * (4 + pu.adm_command_overhead));
    EXPECT_GT(f.time_s, 2.0 * host.time_s);
}

// IM2COL commands: when a pixel's channels fill whole 32-byte words, a kernel row's in-image
// pixels (contiguous in the HWC image) are one command; otherwise each pixel is one, moving the
// aligned words it spans.  Fast cycles = 2 x AXI cycles; the stream side moves 16 bytes per AXI cycle.
TEST(TimingModel, Im2colIssuesOneCommandPerAlignedKernelRow) {
    const PuConfig pu = pu2x();
    const double gap = pu.adm_command_overhead;
    TimingOptions fpga;  // one_conv's layer reads the network input: build its IM2COL in the FPGA
    fpga.first_layer = FirstLayerIm2col::Fpga;
    // 64 channels, 3x3 on a 3x3 image without padding: one column, three rows of 192 bytes.
    EXPECT_DOUBLE_EQ(time_layer(one_conv(3, 64, 64, 3, 1, 0), 0, pu, fpga).in_cycles_per_column,
                     2.0 * 3 * (3 * 64 / 16.0 + gap));
    // Padded 4x4 image: each output pixel fetches its in-image rows, each with its in-image pixels.
    double sum = 0;
    for (int oy = 0; oy < 4; ++oy)
        for (int ox = 0; ox < 4; ++ox) {
            const int rows = 3 - (oy == 0) - (oy == 3), pixels = 3 - (ox == 0) - (ox == 3);
            sum += 2.0 * rows * (pixels * 64 / 16.0 + gap);
        }
    EXPECT_NEAR(time_layer(one_conv(4, 64, 64, 3, 1, 1), 0, pu, fpga).in_cycles_per_column, sum / 16, 1e-9);
    // 48 channels are off the alignment: nine commands of the whole words each pixel spans.
    double per_pixel = 0;
    for (int iy = 0; iy < 3; ++iy)
        for (int ix = 0; ix < 3; ++ix) {
            const std::int64_t address = (iy * 3 + ix) * 48;
            const std::int64_t words = (address + 47) / 32 - address / 32 + 1;
            per_pixel += 2.0 * (words * 32 / 16.0 + gap);
        }
    EXPECT_NEAR(time_layer(one_conv(3, 48, 64, 3, 1, 0), 0, pu, fpga).in_cycles_per_column, per_pixel, 1e-9);
}

// A non-square conv's IM2COL counts its kh x kw window per axis.  A 3x5 window, stride (1, 2),
// pads top/bottom/left/right (0, 1, 2, 1) on a 6x9x32 map: output 5x4.  In-image rows per output
// row (oy = 0..4): 3, 3, 3, 3, 2 (row 6 is padding) = 14; in-image pixels per output column
// (ox = 0..3, ix = 2*ox - 2 + kx): 3, 5, 5, 5 = 18.  32 channels fill one aligned 32-byte word, so
// each in-image kernel row is one command of its pixels' words (32/16 AXI cycles per pixel on the
// I/O stream side) plus the command overhead.  The window is separable: over the 20 columns,
// 14 rows x (2 x 18 AXI cycles of data + 4 commands' overhead), times 2 fast cycles per AXI cycle.
TEST(TimingModel, NonSquareIm2colCountsInImageTapsPerAxis) {
    Network net;
    net.name = "nonsquare";
    net.input_shape = {6, 9, 32};
    const Layer pw = conv_layer("pw", Window::square(1, 1, 0), 32, 32);
    Layer conv = conv_layer("conv", Window{3, 5, 1, 2, 0, 1, 2, 1}, 32, 16);
    conv.input = 0;
    net.layers = {pw, conv};
    net.resolve();
    const PuConfig pu = pu2x();
    const LayerTiming t = time_layer(net, 1, pu);
    EXPECT_EQ(t.p, 5 * 4);
    EXPECT_EQ(t.m, 3 * 5 * 32);
    EXPECT_EQ(t.m_eff, 3 * 5 * 32);
    EXPECT_EQ(t.sa_cycles, 20 * ceil_div(16, pu.r_sa) * ceil_div(3 * 5 * 32, pu.c_sa));
    EXPECT_DOUBLE_EQ(t.macs, 16.0 * (3 * 5 * 32) * 20);
    EXPECT_NEAR(t.in_cycles_per_column, 2.0 * 14 * (18 * 32.0 / 16 + 4 * pu.adm_command_overhead) / 20, 1e-9);
}

// The I/O ADM moves whole words at 16 bytes per AXI cycle; the residual, on the weights port, at
// 32.  On the PU2x a 64-byte output segment of a multi-tile layer (4 + overhead AXI cycles) is
// longer than a G = 8 wave, so ResNet-50's layer1 1x1 convs with 256 outputs are ADM-out bound.
TEST(TimingModel, IoStreamSideAndResidualPort) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu2x();
    const LayerTiming t = time_layer(net, net.find_layer("layer1.0.conv3"), pu);
    EXPECT_EQ(t.wave_cycles, 8);
    EXPECT_NEAR(t.out_cycles_per_column, 2.0 * (64.0 / 16 + pu.adm_command_overhead), 1e-9);  // a mean over waves
    EXPECT_NEAR(t.residual_cycles_per_column, 2.0 * (64.0 / 32 + pu.adm_command_overhead), 1e-9);
    EXPECT_EQ(t.bound, "ADM-out");
    EXPECT_NEAR(t.stream_cycles, double(t.tiles * t.columns) * t.out_cycles_per_column, 1e-6 * t.stream_cycles);
    EXPECT_NEAR(t.adm_bound_cycles, t.stream_cycles - double(t.sa_cycles), 1e-6);
    // The PU1x's waves are twice as long: the same layer is SA-bound there.
    EXPECT_EQ(time_layer(net, net.find_layer("layer1.0.conv3"), pu1x()).bound, "SA");
}

// The WRB drains R_SA bytes per wave at R_g bytes/cycle: with ceil(M/C_SA) < R_SA/R_g the layer
// is WRB-bound (the paper's condition R_g >= R_SA / ceil(M/C_SA) fails).  The stream is then the
// cycle-level model's count for the tile (the independent value: sa_cycle_gemm on the same shape)
// less the SA's drain, which the fill charges: 723 - 77 = 646 cycles, more than the 64 x 8 reads
// alone (the FIFO credits and the aggregator chain's arbitration cost waves), which it was before.
TEST(TimingModel, WrbConditionBindsForShortWaves) {
    const Network net = one_conv(8, 32, 64, 1, 1, 0);  // M = 32: G = 4 cycles < 64/8 = 8
    const PuConfig pu = pu2x();
    const LayerTiming t = time_layer(net, 0, pu);
    EXPECT_FALSE(t.wrb_condition);
    EXPECT_EQ(t.bound, "WRB");
    SaConfig sa;
    std::vector<std::int8_t> w(64 * 32, 1), x(64 * 32, 1), b(64, 0);
    std::vector<std::int32_t> acc(64 * 64);
    const std::int64_t whole = sa_cycle_gemm(w.data(), x.data(), 32, b.data(), 0, 64, 32, 64, sa, acc.data()).cycles;
    const std::int64_t one_wave = sa_cycle_gemm(w.data(), x.data(), 32, b.data(), 0, 64, 32, 1, sa, acc.data()).cycles;
    EXPECT_DOUBLE_EQ(t.stream_cycles, double(whole - (one_wave - 4)));
    EXPECT_GT(t.stream_cycles, 64.0 * 8);
    const Network ok = one_conv(8, 64, 64, 1, 1, 0);     // M = 64: G = 8
    EXPECT_TRUE(time_layer(ok, 0, pu2x()).wrb_condition);
}

TEST(TimingModel, ResidualFetchCountsOnTheWeightsPort) {
    const Network net = zoo::resnet18();
    const NetworkTiming t = time_network(net, pu2x());
    const int with_res = net.find_layer("layer1.0.conv2");
    const int without = net.find_layer("layer1.0.conv1");
    EXPECT_EQ(t.layers[std::size_t(with_res)].residual_bytes, 56 * 56 * 64);
    EXPECT_EQ(t.layers[std::size_t(without)].residual_bytes, 0);
    double side = 0;
    for (const TileTiming& tt : t.tiles)
        if (tt.layer == with_res) side += tt.side_port_s;
    EXPECT_GT(side, 0.0);
}

TEST(TimingModel, RejectsATileLargerThanTheUram) {
    const Network net = one_fc("wide_fc", 40000, 2, 0);
    EXPECT_THROW(time_network(net, pu2x()), FormatError);
    PuConfig bad = pu2x();
    bad.c_sa = 5;
    EXPECT_THROW(bad.validate(), FormatError);
    EXPECT_THROW(pu_by_name("pu3x"), FormatError);
}

TEST(Uram, LayoutIsABijectionInsideTheStore) {
    for (const PuConfig& pu : {pu2x(), pu1x()}) {
        EXPECT_EQ(uram_capacity_bytes(pu), 2 * 1024 * 1024) << pu.name;
        const std::int64_t m = 37;
        const std::int64_t base = uram_capacity_entries(pu) - uram_tile_entries(pu, m);  // the last slot
        std::set<std::tuple<int, int, int>> seen;
        for (int row = 0; row < pu.r_sa; ++row)
            for (std::int64_t k = 0; k < m; ++k) {
                const UramLocation loc = uram_weight_location(pu, base, row, k, m);
                EXPECT_EQ(loc.uram, row);
                EXPECT_GE(loc.entry, 0);
                EXPECT_LT(loc.entry, pu.uram_entries);
                EXPECT_LT(loc.bit_offset, 64);
                EXPECT_TRUE(seen.emplace(loc.uram, loc.entry, loc.bit_offset).second);
            }
        EXPECT_EQ(uram_bias_location(pu, base, 3).bit_offset, 64);  // the spare byte
        EXPECT_THROW(uram_weight_location(pu, base + 1, 0, 0, m), FormatError);
    }
    // PU1x: odd logical entries land in the upper 32-bit sub-region of the word their even
    // neighbour starts, so consecutive entries of a tile fill one word (one write, pu_config.hpp).
    const UramLocation hi = uram_weight_location(pu1x(), 4096, 0, 5, 8);
    EXPECT_EQ(hi.entry, 2048);
    EXPECT_EQ(hi.bit_offset, 32 + 8);
    const UramLocation lo = uram_weight_location(pu1x(), 4096, 0, 1, 8);
    EXPECT_EQ(lo.entry, 2048);
    EXPECT_EQ(lo.bit_offset, 8);
    EXPECT_EQ(uram_weight_location(pu1x(), 8191, 0, 0, 4).entry, 4095);
}

TEST(Uram, ResNetsDoNotFitStatically) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu2x();
    const NetworkTiming t = time_network(net, pu);
    std::vector<std::string> names;
    std::vector<std::int64_t> m, tiles;
    std::int64_t expected = 0;
    for (const LayerTiming& lt : t.layers) {
        names.push_back(lt.name);
        const bool gemm = lt.timed && lt.kind != LayerKind::AvgPool && lt.tiles > 0;
        m.push_back(lt.m_eff);
        tiles.push_back(gemm ? lt.tiles : 0);
        if (gemm) expected += lt.tiles * ceil_div(lt.m_eff, 8);
    }
    const StaticFitReport r = uram_static_fit(pu, names, m, tiles);
    EXPECT_EQ(r.total_entries, expected);
    EXPECT_FALSE(r.all_fit());
    EXPECT_LE(r.static_entries, r.capacity_entries);
    EXPECT_GT(r.total_entries, 10 * r.capacity_entries);  // ~25.5 MB of weights vs 2 MiB
}

namespace {

// The cycle-level model's count for an all-ones GEMM on the default array (R_SA 64, R_g 8) with
// `cols` columns: the independent value for fill and drain checks.
std::int64_t cycle_level(int cols, std::int64_t n, std::int64_t m, std::int64_t p) {
    SaConfig sa;
    sa.cols = cols;
    std::vector<std::int8_t> w(std::size_t(n * m), 1), x(std::size_t(p * m), 1), b(std::size_t(n), 0);
    std::vector<std::int32_t> acc(std::size_t(p * n));
    return sa_cycle_gemm(w.data(), x.data(), m, b.data(), 0, n, m, p, sa, acc.data()).cycles;
}

double hbm_sustained_bytes_per_s() { return 316e9 / 32 * (425.0 / 460.8); }  // DS965 peak x Shuhai's efficiency

}  // namespace

// Fill and drain, exactly: ResNet-50 layer1.0.conv1 on the PU2x (N = 64, M = 64, one tile) fills in
// ceil(first column + two HBM latencies) + the SA's drain + the post-processing depth
// = ceil(64 B / 16 B per AXI cycle x 2 + 2 x 107 ns x 600 MHz) + (85 - 8) + 16 = 230 cycles, 85
// being the cycle-level model's count for one wave of (64, 64) (its drain after the wave's 8
// cycles).  The figures are the paper's and the data sheets', the drain the cycle-level model's.
TEST(TimingModel, FillAndDrainAreExact) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu2x();
    const LayerTiming t = time_layer(net, net.find_layer("layer1.0.conv1"), pu);
    const double first_column = 64.0 / 16 * 2;
    const double latencies = 2 * 107e-9 * 600e6;
    const std::int64_t drain = cycle_level(8, 64, 64, 1) - 8;
    EXPECT_EQ(drain, 85 - 8);
    EXPECT_EQ(t.fill_cycles, std::int64_t(std::ceil(first_column + latencies)) + drain + 16);
    EXPECT_EQ(t.fill_cycles, 230);
    EXPECT_DOUBLE_EQ(t.cycles, t.stream_cycles + 230);
}

// The fill is charged once per layer, on its first tile: every later tile executes its waves
// alone.  ResNet-50 layer3.0.conv3 on the PU1x (N = 1024: 16 tiles, M = 256: G = 64, P = 196,
// SA-bound) has tiles of exactly P x G cycles, the first P x G + fill, and the tiles add up to
// the layer.
TEST(TimingModel, FillIsChargedOncePerLayer) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu1x();
    const int layer = net.find_layer("layer3.0.conv3");
    const NetworkTiming nt = time_network(net, pu);
    const LayerTiming& t = nt.layers[std::size_t(layer)];
    ASSERT_EQ(t.bound, "SA");
    const double waves_cycles = 196.0 * (256 / 4);
    EXPECT_EQ(t.fill_cycles, std::int64_t(std::ceil(256.0 / 16 * 2 + 2 * 107e-9 * 600e6)) +
                                 (cycle_level(4, 64, 256, 1) - 64) + 16);
    int tiles = 0;
    double sum = 0;
    for (const TileTiming& tt : nt.tiles) {
        if (tt.layer != layer) continue;
        const double expected = waves_cycles + (tt.tile == 0 ? double(t.fill_cycles) : 0.0);
        EXPECT_NEAR(tt.exec_s * pu.fast_hz, expected, 1e-6) << "tile " << tt.tile;
        sum += tt.exec_s * pu.fast_hz;
        ++tiles;
    }
    EXPECT_EQ(tiles, 1024 / 64);
    EXPECT_NEAR(sum, t.cycles, 1e-6);
}

// A wave takes ceil(M / C_SA) cycles: an FC of M = 100 on the PU2x takes 13 (12.5 rounded up).
TEST(TimingModel, WaveCyclesRoundUp) {
    const Network net = one_fc("fc100", 100, 70, 1);
    const LayerTiming t = time_layer(net, 0, pu2x());
    EXPECT_EQ(t.wave_cycles, 13);
    EXPECT_EQ(t.tiles, 2);
    EXPECT_EQ(t.sa_cycles, 13 * t.tiles * t.p);
}

// A layer whose N is not a multiple of R_SA: ResNet-50's FC (N = 1000, M = 2048) has ceil(1000/64)
// = 16 tiles, the last one the 1000 - 15 x 64 = 40 remaining rows, which load their weights and
// one bias byte each (not a whole 64-row tile).
TEST(TimingModel, ShortLastTileLoadsItsRowsOnly) {
    const Network net = zoo::resnet50();
    const int fc = net.find_layer("fc");
    const NetworkTiming nt = time_network(net, pu2x());
    std::vector<TileTiming> tiles;
    for (const TileTiming& tt : nt.tiles)
        if (tt.layer == fc) tiles.push_back(tt);
    ASSERT_EQ(tiles.size(), std::size_t((1000 + 63) / 64));
    const int rows = 1000 - 64 * (int(tiles.size()) - 1);
    EXPECT_EQ(tiles.back().rows, rows);
    EXPECT_EQ(tiles.back().load_bytes, std::int64_t(rows) * 2048 + rows);
    EXPECT_EQ(tiles.front().rows, 64);
    EXPECT_EQ(tiles.front().load_bytes, 64 * 2048 + 64);
    EXPECT_EQ(nt.layers[std::size_t(fc)].weight_bytes, 1000 * 2048 + 1000);
}

// Bound flags and stage costs against values worked from the paper and the data sheets:
// layer1.0.conv1 on the PU2x (64 bytes in and 64 out per 8-cycle wave) is HBM-bound, 128 bytes
// at the channel's sustained rate; its single-tile output streams linearly (64 B / 16 B per AXI
// cycle, no command overhead); layer2.0.conv1 (1x1, stride 2, 256 channels) reads ceil(256/32)
// whole words per column, 16 AXI cycles = 32 fast cycles, as long as its wave (256/8): a tie,
// which goes to the SA.
TEST(TimingModel, BoundFlagsAndStageCosts) {
    const Network net = zoo::resnet50();
    const PuConfig pu = pu2x();
    const LayerTiming c1 = time_layer(net, net.find_layer("layer1.0.conv1"), pu);
    EXPECT_EQ(c1.bound, "HBM");
    EXPECT_NEAR(c1.hbm_cycles_per_column, 128 * 600e6 / hbm_sustained_bytes_per_s(), 1e-9);
    EXPECT_NEAR(c1.stream_cycles, double(c1.columns) * 128 * 600e6 / hbm_sustained_bytes_per_s(), 1e-6);
    EXPECT_DOUBLE_EQ(c1.out_cycles_per_column, 64.0 / 16 * 2);
    const LayerTiming s2 = time_layer(net, net.find_layer("layer2.0.conv1"), pu);
    EXPECT_DOUBLE_EQ(s2.in_cycles_per_column, 32.0);
    EXPECT_EQ(s2.wave_cycles, 32);
    EXPECT_EQ(s2.bound, "SA");
    // Only layer1.0.conv1 is HBM-bound (docs/timing.md, section 6).
    const NetworkTiming nt = time_network(net, pu);
    int hbm = 0;
    for (const LayerTiming& t : nt.layers) hbm += t.bound == "HBM";
    EXPECT_EQ(hbm, 1);
}
