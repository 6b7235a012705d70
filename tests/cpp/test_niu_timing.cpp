// NIU timing and cost: the rate comes from the RTL's measured weights per cycle, a lane count the
// RTL was not built for is refused, the program blocks appear in the round time, and the XCU50
// fit check adds PUs, NIUs and the shell as the paper's utilisation implies.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/errors.hpp"
#include "niu/niu_timing.hpp"
#include "niu_constants.hpp"

using namespace aimcemu;

TEST(NiuTiming, RateIsTheMeasuredWeightsPerCycle) {
    ASSERT_FALSE(niu_syntheses().empty());
    for (const NiuSynthesis& s : niu_syntheses()) {
        EXPECT_GT(s.weights_per_cycle, 0.95 * s.lanes) << s.lanes;  // one group per cycle, small overhead
        EXPECT_LE(s.weights_per_cycle, s.lanes) << s.lanes;
        const NiuConfig cfg = niu_config_for_lanes(s.lanes);
        EXPECT_DOUBLE_EQ(cfg.lanes_per_cycle, s.weights_per_cycle);
        const NiuThroughput t = niu_throughput(cfg);
        // Each weight is read and written on one U50 pseudo-channel: 316 GB/s / 32 (DS965) at the
        // sustained 425 / 460.8 that Shuhai measured, over 2 bytes per weight.
        const double channel_weights_per_s = 316e9 / 32 * (425.0 / 460.8) / 2;
        EXPECT_NEAR(t.weights_per_s, std::min(s.weights_per_cycle * 300e6, channel_weights_per_s), 1.0) << s.lanes;
    }
}

// The measured rate is the model's stream of the co-simulated layer (NiuCosimThroughput: 2000
// beats on an ideal bus, STREAM_CYCLES = its groups + the pipeline + 7 hand-off cycles), to the
// three decimals rtl/synth/*.json keep: the per-layer constants and the measurement agree.
TEST(NiuTiming, MeasuredRateIsTheModelsStreamOfTheCosimulatedLayer) {
    for (const NiuSynthesis& s : niu_syntheses()) {
        const double stream_cycles = 2000.0 * niu::gen::NIU_BEAT_LANES / s.lanes + niu::gen::NIU_PIPE_STAGES + 7;
        EXPECT_NEAR(s.weights_per_cycle, 2000.0 * niu::gen::NIU_BEAT_LANES / stream_cycles, 5e-4) << s.lanes;
    }
}

TEST(NiuTiming, ALaneCountTheRtlWasNotBuiltForIsRefused) {
    try {
        niu_config_for_lanes(3, "perf.yaml");
        ADD_FAILURE() << "3 lanes accepted";
    } catch (const FormatError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("perf.yaml"), std::string::npos) << what;
        EXPECT_NE(what.find("niu.lanes"), std::string::npos) << what;
    }
}

TEST(NiuTiming, ProgramBlocksAreLoadedOncePerLayerAndRound) {
    NiuConfig cfg;
    cfg.lanes_per_cycle = 8;
    const NiuRoundTime none = niu_round_time(cfg, 25'000'000);
    const NiuRoundTime with = niu_round_time(cfg, 25'000'000, 54);
    // rtl/niu.sv's controller: the header (its words + 3 cycles), per layer the block (its words
    // + 5) and the stream's fill and hand-offs (the pipeline + 7), less the cycle after the last B.
    const double program_cycles = (niu::gen::NIU_PROG_HEADER_WORDS + 3) +
                                  54.0 * (niu::gen::NIU_LAYER_WORDS + 5 + niu::gen::NIU_PIPE_STAGES + 7) - 1;
    EXPECT_DOUBLE_EQ(none.seconds, 25e6 / (8 * 300e6));
    EXPECT_DOUBLE_EQ(none.cycles, 25e6 / 8);
    EXPECT_NEAR(with.program_seconds, program_cycles / 300e6, 1e-15);
    EXPECT_NEAR(with.seconds - none.seconds, program_cycles / 300e6, 1e-12);
    EXPECT_DOUBLE_EQ(with.cycles - none.cycles, program_cycles);
    EXPECT_EQ(with.bytes_read - none.bytes_read, 54 * niu::gen::NIU_LAYER_WORDS * 4 + niu::gen::NIU_PROG_HEADER_WORDS * 4);
    EXPECT_EQ(with.bytes_written, none.bytes_written);
    EXPECT_THROW(niu_round_time(cfg, 10, -1), FormatError);
}

// Memory latency: R once for the header and 2R + W per layer, on top of the zero-latency time;
// nothing without a program.  The default (0, 0) is the zero-latency memory.
TEST(NiuTiming, MemoryLatencyIsChargedOnceForTheHeaderAndPerLayer) {
    NiuConfig cfg;
    cfg.lanes_per_cycle = 4;
    EXPECT_EQ(cfg.read_latency_cycles, 0.0);
    EXPECT_EQ(cfg.write_latency_cycles, 0.0);
    const NiuRoundTime ideal = niu_round_time(cfg, 1'000'000, 54);
    cfg.read_latency_cycles = 45;
    cfg.write_latency_cycles = 30;
    const NiuRoundTime slow = niu_round_time(cfg, 1'000'000, 54);
    EXPECT_DOUBLE_EQ(slow.cycles - ideal.cycles, 45 + 54 * (2 * 45 + 30));
    EXPECT_NEAR(slow.program_seconds - ideal.program_seconds, (45 + 54 * (2 * 45 + 30)) / 300e6, 1e-15);
    EXPECT_EQ(slow.bytes_read, ideal.bytes_read);
    EXPECT_DOUBLE_EQ(niu_round_time(cfg, 1'000'000).cycles, 1e6 / 4);  // no layers, no program
}

// Per layer, a partial last beat streams as a whole one; the sum's rounding is not the layers'.
TEST(NiuTiming, ProgramTimeStreamsWholeBeatsPerLayer) {
    NiuConfig cfg;
    cfg.lanes_per_cycle = 1;
    const NiuRoundTime program = niu_program_time(cfg, {33, 33});
    const NiuRoundTime total = niu_round_time(cfg, 66, 2);
    EXPECT_DOUBLE_EQ(program.cycles - total.cycles, 4 * 32 - 66);  // two layers of two beats each
    EXPECT_EQ(program.weights, 66);
    EXPECT_EQ(program.bytes_written, 4 * 32);
    EXPECT_EQ(program.bytes_read - total.bytes_read, 4 * 32 - 3 * 32);
    EXPECT_DOUBLE_EQ(niu_program_time(cfg, {}).cycles, 0.0);
    EXPECT_THROW(niu_program_time(cfg, {10, -1}), FormatError);
}

// A latency that is negative, NaN or infinite is refused, naming the field.
TEST(NiuTiming, BadMemoryLatencyNamesTheField) {
    for (const char* field : {"niu.read_latency_cycles", "niu.write_latency_cycles"})
        for (const double bad : {-1.0, std::nan(""), HUGE_VAL}) {
            NiuConfig cfg;
            (std::string(field) == "niu.read_latency_cycles" ? cfg.read_latency_cycles : cfg.write_latency_cycles) = bad;
            try {
                cfg.validate("perf.yaml");
                ADD_FAILURE() << field << " = " << bad << " accepted";
            } catch (const FormatError& e) {
                const std::string what = e.what();
                EXPECT_NE(what.find("perf.yaml"), std::string::npos) << what;
                EXPECT_NE(what.find(field), std::string::npos) << what;
            }
            EXPECT_THROW(niu_round_time(cfg, 10, 1), FormatError);
        }
}

TEST(NiuTiming, FitOnTheXcu50) {
    // The paper's build: ten PUs take all 640 URAMs; with the shell it is exactly the reported
    // utilisation, and it fits.
    const FitReport paper = fit_on_xcu50(5, 5, 0, 8);
    EXPECT_TRUE(paper.fits);
    EXPECT_EQ(paper.limiting, "URAM");
    EXPECT_DOUBLE_EQ(paper.total.uram, 640);
    EXPECT_NEAR(paper.total.lut / xcu50().lut, 0.234, 1e-12);
    EXPECT_NEAR(paper.total.bram36 / xcu50().bram36, 0.256, 1e-12);
    // An NIU in a PU1x slot: the totals are the sum of the rows and the shell.
    const NiuSynthesis n8 = niu_synthesis(8);
    const FitReport one = fit_on_xcu50(5, 4, 1, 8);
    EXPECT_NEAR(one.total.lut, one.shell.lut + 5 * 16.5e3 + 4 * 15.5e3 + n8.resources.lut, 1e-6);
    EXPECT_NEAR(one.total.dsp, one.shell.dsp + 5 * 514 + 4 * 258 + n8.resources.dsp, 1e-9);
    EXPECT_NEAR(one.total.uram, 9 * 64 + n8.resources.uram, 1e-9);
    EXPECT_TRUE(one.fits);
    // Ten PUs and an NIU on top: no URAM left for it.
    const FitReport over = fit_on_xcu50(5, 5, 1, 8);
    EXPECT_FALSE(over.fits);
    EXPECT_EQ(over.limiting, "URAM");
    EXPECT_GT(over.limiting_fraction, 1.0);
    EXPECT_THROW(fit_on_xcu50(5, 4, 1, 3), FormatError);
    EXPECT_THROW(pu_resources("PU4x"), FormatError);
}
