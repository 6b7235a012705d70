// HBM regions of the PU model: alignment, sizes, no overlaps, and the round fence: a reader never
// sees a mix of two rounds however the writer and readers interleave.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/errors.hpp"
#include "pu_model/hbm.hpp"

using namespace aimcemu;

namespace {

// input 8x8x4 -> conv3x3 (8 out) -> relu -> linear (10 out).
Network tiny_network() {
    Network net;
    net.name = "tiny";
    net.input_shape = {8, 8, 4};
    Layer conv;
    conv.name = "conv";
    conv.kind = LayerKind::Conv;
    conv.window = Window::square(3, 1, 1);
    conv.out_channels = 8;
    conv.weights.assign(8 * 3 * 3 * 4, 1);
    conv.bias.assign(8, 0);
    conv.out_shift = 4;
    conv.relu = true;
    Layer fc;
    fc.name = "fc";
    fc.kind = LayerKind::Linear;
    fc.input = 0;
    fc.out_channels = 10;
    fc.weights.assign(10 * 8 * 8 * 8 + 0, 1);
    fc.bias.assign(10, 0);
    fc.out_shift = 6;
    net.layers = {conv, fc};
    net.resolve();
    return net;
}

}  // namespace

// try_acquire gives no lease before the first publish (the emulator's run_published refuses then,
// where acquire() would wait for a writer that may never come), and the latest round after.
TEST(WeightRoundFence, TryAcquireGivesNoLeaseBeforeTheFirstPublish) {
    const Network net = tiny_network();
    const HbmLayout layout = HbmLayout::for_network(net, {1});
    WeightRoundFence fence(layout, {1});
    EXPECT_FALSE(fence.try_acquire().has_value());
    auto ticket = fence.begin_write();
    EXPECT_FALSE(fence.try_acquire().has_value());  // a write under way publishes nothing yet
    fence.publish(ticket);
    const auto lease = fence.try_acquire();
    ASSERT_TRUE(lease.has_value());
    EXPECT_EQ(lease->round(), 1u);
}

TEST(HbmLayout, NetworkRegionsAreAlignedSizedAndDisjoint) {
    const Network net = tiny_network();
    const HbmLayout layout = HbmLayout::for_network(net, {1});
    std::uint64_t previous_end = 0;
    for (const HbmRegion& r : layout.regions()) {
        EXPECT_EQ(r.base % kHbmAlign, 0u) << r.name;
        EXPECT_GE(r.base, previous_end) << r.name;  // appended in order, never overlapping
        previous_end = r.base + r.bytes;
    }
    EXPECT_LE(previous_end, layout.size());
    EXPECT_EQ(layout.at(HbmRegionKind::Activations, kNetworkInput).bytes, 8u * 8 * 4);
    EXPECT_EQ(layout.at(HbmRegionKind::Activations, 0).bytes, 8u * 8 * 8);
    EXPECT_EQ(layout.at(HbmRegionKind::Weights, 0).bytes, 288u);            // N x M row-major
    EXPECT_EQ(layout.at(HbmRegionKind::Weights, 1, 1).bytes, 5120u);        // AIMC: second buffer
    EXPECT_EQ(layout.at(HbmRegionKind::CleanWeights, 1).bytes, 5120u);
    EXPECT_EQ(layout.find(HbmRegionKind::Weights, 0, 1), nullptr);         // digital layer: one buffer
    EXPECT_EQ(layout.find(HbmRegionKind::CleanWeights, 0), nullptr);
    EXPECT_THROW(layout.at(HbmRegionKind::CleanWeights, 0), FormatError);
}

TEST(HbmLayout, RejectsBadMappingAndOutOfRangeAccess) {
    const Network net = tiny_network();
    EXPECT_THROW(HbmLayout::for_network(net, {2}), FormatError);
    EXPECT_THROW(HbmLayout::for_network(net, {-1}), FormatError);
    HbmLayout l;
    l.add("a", HbmRegionKind::Weights, 0, 10);
    EXPECT_THROW(l.add("b", HbmRegionKind::Weights, 0, 10), FormatError);
    EXPECT_EQ(l.add("c", HbmRegionKind::Weights, 1, 10).base, 32u);
    Hbm hbm(l);
    std::vector<std::uint8_t> buf(16);
    EXPECT_NO_THROW(hbm.read(48, buf));
    EXPECT_THROW(hbm.read(49, buf), FormatError);
    EXPECT_THROW(hbm.bytes(~std::uint64_t(0), 2), FormatError);
}

TEST(WeightRoundFence, SwapsBuffersOnPublish) {
    const HbmLayout layout = HbmLayout::for_network(tiny_network(), {0, 1});
    WeightRoundFence fence(layout, {0, 1});
    EXPECT_EQ(fence.published_round(), 0u);
    auto w1 = fence.begin_write();
    EXPECT_EQ(w1.round, 1u);
    fence.publish(w1);
    auto lease = fence.acquire();
    EXPECT_EQ(lease.round(), 1u);
    EXPECT_EQ(lease.weights(1).base, w1.weights(1).base);
    auto w2 = fence.begin_write();  // the other buffer: free although round 1 is leased
    EXPECT_NE(w2.weights(1).base, lease.weights(1).base);
    EXPECT_THROW(fence.publish(w1), FormatError);  // stale ticket
    fence.publish(w2);
    EXPECT_THROW(lease.weights(5), FormatError);
}

TEST(WeightRoundFence, ReadersNeverSeeAMixedRound) {
    // The writer fills every byte of every AIMC layer with the round's tag one small piece at a
    // time (yielding in between); two readers check that all bytes they see carry the tag of
    // their lease's round.
    const Network net = tiny_network();
    Hbm hbm(HbmLayout::for_network(net, {0, 1}));
    WeightRoundFence fence(hbm.layout(), {0, 1});
    const int rounds = 60;
    auto tag = [](std::uint64_t round) { return std::int8_t(round % 251); };
    std::atomic<bool> done{false};
    std::atomic<long> mixed{0}, reads{0};

    std::thread writer([&] {
        long reads_at_last_publish = 0;
        for (int r = 1; r <= rounds; ++r) {
            auto ticket = fence.begin_write();
            for (int layer : fence.aimc_layers()) {
                auto bytes = hbm.region(ticket.weights(layer));
                for (std::size_t i = 0; i < bytes.size(); ++i) {
                    bytes[i] = tag(ticket.round);
                    if (i % 1024 == 0) std::this_thread::yield();
                }
            }
            // Once a round is published, hold the next publish until a reader has completed a
            // read, so reads really overlap writes even on a loaded machine (the scheduler may
            // otherwise run the whole writer before any reader starts).
            if (r > 1)
                while (reads.load() == reads_at_last_publish) std::this_thread::yield();
            fence.publish(ticket);
            reads_at_last_publish = reads.load();
        }
        done = true;
    });
    std::vector<std::thread> readers;
    for (int k = 0; k < 2; ++k)
        readers.emplace_back([&] {
            while (!done) {
                auto lease = fence.acquire();
                for (int layer : fence.aimc_layers())
                    for (std::int8_t b : std::as_const(hbm).region(lease.weights(layer))) mixed += b != tag(lease.round());
                ++reads;
            }
        });
    writer.join();
    for (auto& t : readers) t.join();
    EXPECT_EQ(mixed.load(), 0);
    EXPECT_GT(reads.load(), 0);
    EXPECT_EQ(fence.published_round(), std::uint64_t(rounds));
}
