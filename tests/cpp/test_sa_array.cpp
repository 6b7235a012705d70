// The PE-level systolic-array model (pu_model/sa_cycle.hpp): a broken datapath must not pass.
//
// Each deliberate defect -- an input skew one register short, two chunks with swapped tags, a
// chunk lost before the WRB -- must give a wrong result or a FormatError naming the wave, and
// never hang.  The sound datapath must reorder out-of-order arrivals exactly.
#include <gtest/gtest.h>

#include <tuple>

#include <pcg_random.hpp>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/sa_cycle.hpp"

using namespace aimcemu;

namespace {

struct Gemm {
    std::int64_t n, m, p;
    std::vector<std::int8_t> w, x, bias;
    std::vector<std::int32_t> expect;
};

Gemm random_gemm(std::int64_t n, std::int64_t m, std::int64_t p, std::uint64_t seed) {
    pcg32 rng(seed);
    Gemm g{n, m, p, {}, {}, {}, {}};
    auto fill = [&](std::vector<std::int8_t>& v, std::int64_t count) {
        v.resize(std::size_t(count));
        for (auto& e : v) e = std::int8_t(int(rng(256)) - 128);
    };
    fill(g.w, n * m);
    fill(g.x, p * m);
    fill(g.bias, n);
    g.expect.resize(std::size_t(n * p));
    gemm_reference(g.w.data(), g.x.data(), m, g.bias.data(), 3, n, m, p, g.expect.data());
    return g;
}

std::vector<std::int32_t> run(const Gemm& g, const SaConfig& cfg, SaCycleStats* stats = nullptr) {
    std::vector<std::int32_t> acc(std::size_t(g.n * g.p), 0);
    const SaCycleStats s = sa_cycle_gemm(g.w.data(), g.x.data(), g.m, g.bias.data(), 3, g.n, g.m, g.p, cfg, acc.data());
    if (stats) *stats = s;
    return acc;
}

// The message of the FormatError `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const FormatError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

// Two 64-row sections, 4 pixels, G = 9 >= R/R_g = 8: the paper's operating regime.
TEST(SaArray, SoundDatapathIsExactOnBothPuShapes) {
    const Gemm g = random_gemm(128, 72, 4, 1);
    for (int cols : {8, 4}) {
        SaConfig cfg;
        cfg.cols = cols;
        SaCycleStats s;
        EXPECT_EQ(run(g, cfg, &s), g.expect) << cols;
        EXPECT_EQ(s.sa_stall_cycles, 0);
        EXPECT_LT(s.cycles, s.cycle_limit / 2) << "the guard must sit far above a sound run";
    }
}

// A shallow datapath (one FIFO credit, or a one-wave WRB) serializes the waves; with N > rows it
// used to run into the default cycle limit although it finishes exactly.
TEST(SaArray, ShallowConfigsFinishExactlyWithinTheDefaultLimit) {
    const Gemm g = random_gemm(17, 33, 9, 8);
    for (const auto [rows, fifo, wrb] : {std::tuple{8, 1, 64}, std::tuple{8, 16, 1}, std::tuple{16, 1, 1}, std::tuple{1, 1, 1}}) {
        SaConfig cfg;
        cfg.rows = rows;
        cfg.rg = std::min(rows, 8);
        cfg.fifo_depth = fifo;
        cfg.wrb_waves = wrb;
        SaCycleStats s;
        EXPECT_EQ(run(g, cfg, &s), g.expect) << rows << " " << fifo << " " << wrb;
        EXPECT_LE(s.cycles, s.cycle_limit);
    }
}

TEST(SaArray, OutOfOrderArrivalsAreReorderedExactly) {
    // G = 1: later waves' low row-blocks overtake earlier waves' high ones on the way to the WRB.
    const Gemm g = random_gemm(64, 8, 40, 2);
    SaCycleStats s;
    EXPECT_EQ(run(g, SaConfig{}, &s), g.expect);
    EXPECT_GT(s.out_of_order_writes, 0);
}

TEST(SaArray, EveryWrongInputSkewGivesAWrongResult) {
    const Gemm g = random_gemm(64, 72, 3, 3);
    for (int column = 0; column < 8; ++column) {
        SaConfig cfg;
        cfg.fault = {SaFault::InputSkew, column, 0, 0};
        EXPECT_NE(run(g, cfg), g.expect) << "column " << column;
    }
}

TEST(SaArray, SwappedChunkTagsGiveAWrongResultWhereTheSwapHappened) {
    const Gemm g = random_gemm(64, 72, 3, 4);
    SaConfig cfg;
    cfg.fault = {SaFault::SwapChunkTags, 1, 1, 2};  // wave 1 (pixel 1): row-blocks 2 and 3
    const auto acc = run(g, cfg);
    for (std::int64_t pixel = 0; pixel < g.p; ++pixel)
        for (std::int64_t row = 0; row < g.n; ++row) {
            const std::size_t at = std::size_t(pixel * g.n + row);
            const bool swapped = pixel == 1 && row >= 16 && row < 32;
            if (!swapped) {
                EXPECT_EQ(acc[at], g.expect[at]) << pixel << " " << row;
                continue;
            }
            const std::int64_t partner = row < 24 ? row + 8 : row - 8;  // the other block's row
            EXPECT_EQ(acc[at], g.expect[std::size_t(pixel * g.n + partner)]) << pixel << " " << row;
        }
    EXPECT_NE(acc, g.expect);
}

TEST(SaArray, ADroppedChunkIsAnErrorNamingItsWave) {
    // Mid-run (the WRB fills behind the missing chunk and blocks the array) and at the last wave
    // (nothing is left to start): both must stop with the wave's name, long before the guard.
    const Gemm g = random_gemm(64, 72, 6, 5);
    for (std::int64_t wave : {std::int64_t(2), std::int64_t(5)}) {
        SaConfig cfg;
        cfg.wrb_waves = 2;
        cfg.fault = {SaFault::DropChunk, 1, wave, 4};
        const std::string what = error_of([&] { run(g, cfg); });
        EXPECT_NE(what.find("wave " + std::to_string(wave) + " (pixel " + std::to_string(wave) + ", section 0) row-block 4"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("never reached the WRB"), std::string::npos) << what;
    }
}

TEST(SaArray, TheCycleLimitStopsARunAndNamesWhatTheReadSideWaitsFor) {
    const Gemm g = random_gemm(64, 72, 6, 6);
    SaConfig cfg;
    // The first chunk is read at cycle 36: row 7 finishes at (G-1) + (C-1) + 7 + 4 = 26, merge 1,
    // seven slots up the aggregator chain, then the WRB write and read.
    cfg.cycle_limit = 30;
    const std::string what = error_of([&] { run(g, cfg); });
    EXPECT_NE(what.find("exceeded 30 cycles"), std::string::npos) << what;
    EXPECT_NE(what.find("wave 0 (pixel 0, section 0) row-block 0"), std::string::npos) << what;
}

TEST(SaArray, RejectsFaultsOutsideTheArray) {
    const Gemm g = random_gemm(8, 8, 1, 7);
    SaConfig cfg;
    cfg.fault = {SaFault::InputSkew, 8, 0, 0};
    EXPECT_NE(error_of([&] { run(g, cfg); }).find("fault.column"), std::string::npos);
    cfg.fault = {SaFault::SwapChunkTags, 1, 0, 7};
    EXPECT_NE(error_of([&] { run(g, cfg); }).find("fault.block"), std::string::npos);
    cfg.fault = {SaFault::DropChunk, 1, -1, 0};
    EXPECT_NE(error_of([&] { run(g, cfg); }).find("fault.wave"), std::string::npos);
    cfg.fault = {};
    cfg.cycle_limit = -1;
    EXPECT_NE(error_of([&] { run(g, cfg); }).find("cycle_limit"), std::string::npos);
    cfg.cycle_limit = 0;
    cfg.rows = 1 << 30;  // was a bad_alloc of the URAM image
    cfg.rg = 1;
    EXPECT_NE(error_of([&] { run(g, cfg); }).find("rows"), std::string::npos);
}
