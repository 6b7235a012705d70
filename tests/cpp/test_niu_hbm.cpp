// The NIU in the PU model's HBM: one round per program, written to the back weight buffers and
// published through the round fence; bytes after a layer in its last beat stay untouched.
#include <gtest/gtest.h>

#include <vector>

#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "noise_models/noise_model.hpp"
#include "niu_test_model.hpp"
#include "common/errors.hpp"
#include "pu_model/hbm.hpp"

using namespace aimcemu;
using namespace aimcemu::niu;
using niu_test::niu_noise_model;

TEST(NiuHbm, RoundsArePublishedThroughTheFence) {
    // Two AIMC regions of 100 and 70 weights (neither a multiple of 32) in a hand-made layout.
    HbmLayout layout;
    const std::vector<std::uint32_t> counts = {100, 70};
    for (int l = 0; l < 2; ++l) {
        layout.add("clean", HbmRegionKind::CleanWeights, l, counts[std::size_t(l)]);
        layout.add("w0", HbmRegionKind::Weights, l, counts[std::size_t(l)], 0);
        layout.add("w1", HbmRegionKind::Weights, l, counts[std::size_t(l)], 1);
    }
    Hbm hbm(layout);
    std::vector<std::vector<std::int8_t>> clean(2);
    for (int l = 0; l < 2; ++l) {
        for (std::uint32_t i = 0; i < counts[std::size_t(l)]; ++i) clean[std::size_t(l)].push_back(std::int8_t(int(i * 37 % 255) - 127));
        auto region = hbm.region(layout.at(HbmRegionKind::CleanWeights, l));
        std::copy(clean[std::size_t(l)].begin(), clean[std::size_t(l)].end(), region.begin());
        for (int b = 0; b < 2; ++b) {  // sentinel in the tail of each weight buffer's last beat
            const HbmRegion& w = layout.at(HbmRegionKind::Weights, l, b);
            auto tail = hbm.bytes(w.base + w.bytes, 32 - w.bytes % 32);
            std::fill(tail.begin(), tail.end(), std::int8_t(0x5a));
        }
    }
    auto model = niu_noise_model("pcm_like", {});
    WeightRoundFence fence(layout, {0, 1});
    for (std::uint64_t round = 1; round <= 3; ++round) {
        auto ticket = fence.begin_write();
        std::vector<NiuLayerSpec> specs;
        for (int l = 0; l < 2; ++l)
            specs.push_back({.layer_id = std::uint64_t(l), .count = counts[std::size_t(l)],
                             .absmax = clean_absmax(clean[std::size_t(l)], AbsMaxMode::Layer),
                             .src_addr = layout.at(HbmRegionKind::CleanWeights, l).base,
                             .dst_addr = ticket.weights(l).base});
        const NiuProgram program = compile_program(*model, specs, {.seed = 9, .chip = 1, .round = round, .t = 3600.0});
        apply_program(NiuProgram::from_words(program.to_words()), hbm, 2);  // through the word image
        fence.publish(ticket);

        auto lease = fence.acquire();
        EXPECT_EQ(lease.round(), round);
        for (int l = 0; l < 2; ++l) {
            const auto expected = apply_layer(program.layers[std::size_t(l)], clean[std::size_t(l)], 1);
            const auto got = std::as_const(hbm).region(lease.weights(l));
            EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end())) << "layer " << l;
            const HbmRegion& w = lease.weights(l);
            for (std::int8_t b : std::as_const(hbm).bytes(w.base + w.bytes, 32 - w.bytes % 32)) EXPECT_EQ(b, 0x5a);
        }
    }
}

TEST(NiuHbm, RejectsLayersOutsideMemoryOrOverlapping) {
    HbmLayout layout;
    layout.add("clean", HbmRegionKind::CleanWeights, 0, 64);
    layout.add("weights", HbmRegionKind::Weights, 0, 64);  // 128 bytes in all
    Hbm hbm(layout);
    auto model = niu_noise_model("pcm_like", {});
    const auto error_names = [&](const NiuProgram& p, const std::string& field) {
        try {
            apply_program(p, hbm);
            ADD_FAILURE() << "no error for " << field;
        } catch (const FormatError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    NiuProgram p = compile_program(*model, {{.layer_id = 0, .count = 64, .src_addr = 0, .dst_addr = 4096}}, {});
    error_names(p, "layers[0].COUNT");  // outside the memory
    p = compile_program(*model, {{.layer_id = 0, .count = 100, .src_addr = 0, .dst_addr = 64}}, {});
    error_names(p, "layers[0].COUNT");  // a layer too large for its region runs past the memory's end
    p = compile_program(*model, {{.layer_id = 0, .count = 64, .src_addr = 0, .dst_addr = 32}}, {});
    error_names(p, "layers[0].DST_ADDR");  // overlaps its own clean weights
    p = compile_program(*model, {{.layer_id = 0, .count = 64, .src_addr = 0, .dst_addr = 64}}, {});
    EXPECT_NO_THROW(apply_program(p, hbm));
}
