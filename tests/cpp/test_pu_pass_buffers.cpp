// The PU passes' recycled buffers (pu_model/pass_buffers.hpp): memory given back is handed out
// again best fit, a pass frees what the previous pass left idle, and passes run in recycled
// memory full of garbage (poisoned) give the bytes of passes in fresh memory, on 1-3 threads,
// with the pool kept between passes and shared by two passes at once; a pass holds its live
// buffers, not every layer's output.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <pcg_random.hpp>

#include "formats/zoo.hpp"
#include "pu_model/inference.hpp"
#include "pu_model/pass_buffers.hpp"

using namespace aimcemu;

namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

Tensor8 random_image(const Shape3& shape, std::uint64_t seed) {
    pcg32 rng(seed);
    Tensor8 t{shape, std::vector<std::int8_t>(static_cast<std::size_t>(shape.size()))};
    for (auto& v : t.data) v = std::int8_t(int(rng(256)) - 128);
    return t;
}

// Every GEMM layer's weights through a WeightView (the layer's own bytes), so that each pass packs
// them itself, into the pass's buffers, as the emulator's AIMC layers are.
struct OwnWeightsViewed : WeightView {
    const Network* net;
    const std::int8_t* weights(int i) const override {
        const Layer& l = net->layers[std::size_t(i)];
        return l.is_gemm() ? l.weights.data() : nullptr;
    }
};

// A small ResNet-18, `count` random images (seeds from `first_seed` on), its weights viewed so
// that every pass packs them itself, and what one thread with the call's own fresh buffers gives.
struct SmallNetworkCase {
    Network net = zoo::resnet18(4, 32, 10);
    std::vector<Tensor8> images;
    OwnWeightsViewed view;
    std::vector<std::vector<Tensor8>> want;
    SmallNetworkCase(int count, std::uint64_t first_seed) {
        for (int i = 0; i < count; ++i) images.push_back(random_image(net.input_shape, first_seed + std::uint64_t(i)));
        view.net = &net;
        RunOptions fresh;  // the call's own buffers, the network's weights packed per call
        fresh.threads = 1;
        want = run_network_batch(net, images, fresh);
    }
    SmallNetworkCase(const SmallNetworkCase&) = delete;  // view points into net
};

void expect_same(const std::vector<std::vector<Tensor8>>& got, const std::vector<std::vector<Tensor8>>& want,
                 const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want[i].size()) << what;
        for (std::size_t l = 0; l < got[i].size(); ++l) {
            EXPECT_EQ(got[i][l].shape, want[i][l].shape) << what << ", image " << i << ", layer " << l;
            EXPECT_EQ(got[i][l].data, want[i][l].data) << what << ", image " << i << ", layer " << l;
        }
    }
}

}  // namespace

TEST(PassBuffers, GivenBackMemoryIsHandedOutAgainBestFit) {
    PassBuffers pool(1);
    pool.begin_pass();
    auto big = pool.take(3 * kMiB), small = pool.take(kMiB);
    void* const big_at = big.data<void>();
    void* const small_at = small.data<void>();
    ASSERT_NE(big_at, small_at);
    big.reset();
    small.reset();
    EXPECT_EQ(pool.stats().idle_bytes, 4 * kMiB);
    const auto a = pool.take(900 << 10);   // the smallest idle buffer that holds it
    EXPECT_EQ(a.data<void>(), small_at);
    EXPECT_EQ(a.size(), std::size_t(900 << 10));
    const auto b = pool.take(2 * kMiB);    // only the large one is left: it serves smaller requests
    EXPECT_EQ(b.data<void>(), big_at);
    const auto c = pool.take(kMiB);        // nothing idle: new memory
    EXPECT_NE(c.data<void>(), big_at);
    EXPECT_NE(c.data<void>(), small_at);
    const PassBuffers::Stats s = pool.stats();
    EXPECT_EQ(s.fresh, 3);
    EXPECT_EQ(s.reused, 2);
    EXPECT_EQ(s.held_bytes, 5 * kMiB);
    EXPECT_EQ(s.idle_bytes, 0u);
}

TEST(PassBuffers, APassFreesWhatThePreviousPassLeftIdle) {
    PassBuffers pool(1);
    pool.begin_pass();   // pass 1 uses 1 MiB and 2 MiB
    pool.take(kMiB);
    pool.take(2 * kMiB);
    pool.begin_pass();   // pass 2 keeps both (pass 1 used them) and uses only the 1 MiB one
    EXPECT_EQ(pool.stats().held_bytes, 3 * kMiB);
    pool.take(kMiB);
    EXPECT_EQ(pool.stats().reused, 1);
    pool.begin_pass();   // the 2 MiB buffer lay idle through pass 2: freed
    EXPECT_EQ(pool.stats().held_bytes, kMiB);
    EXPECT_EQ(pool.stats().idle_bytes, kMiB);
}

TEST(PassBuffers, SmallRequestsAreOrdinaryAllocations) {
    PassBuffers pool;   // default threshold
    auto b = pool.take(PassBuffers::kDefaultMinPooled - 1);
    std::memset(b.data(), 1, b.size());
    b.reset();
    EXPECT_EQ(pool.stats().held_bytes, 0u);
    EXPECT_EQ(pool.stats().fresh + pool.stats().reused, 0);
    const auto pooled = pool.take(PassBuffers::kDefaultMinPooled);
    EXPECT_EQ(pool.stats().fresh, 1);
}

TEST(PassBuffers, ABufferMayOutliveItsPool) {
    auto pool = std::make_unique<PassBuffers>(1);
    auto kept = pool->take(kMiB);
    pool->take(2 * kMiB);   // idle when the pool goes: freed with it
    pool.reset();
    std::memset(kept.data(), 7, kept.size());   // still ours
    kept.reset();                               // freed, not given back to a pool that is gone
    EXPECT_EQ(kept.data<void>(), nullptr);
}

TEST(PassBuffers, PoisonFillsEveryBufferHandedOut) {
    PassBuffers pool(1, true);
    for (int round = 0; round < 2; ++round) {
        auto b = pool.take(5000);
        const auto* bytes = b.data();
        for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(bytes[i], 0xA5) << "round " << round << ", byte " << i;
        std::memset(b.data(), 0, b.size());
    }
    EXPECT_EQ(pool.stats().reused, 1);
}

TEST(PassBuffers, ConcurrentTakersNeverShareABuffer) {
    PassBuffers pool(1);
    std::vector<std::thread> threads;
    std::vector<int> errors(4, 0);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            pcg32 rng(std::uint64_t(t) + 1);
            for (int k = 0; k < 300; ++k) {
                auto b = pool.take(std::size_t(rng(64 << 10)) + 1);
                std::memset(b.data(), t, b.size());
                std::this_thread::yield();
                for (std::size_t i = 0; i < b.size(); ++i) errors[std::size_t(t)] += b.data()[i] != std::uint8_t(t);
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(errors[std::size_t(t)], 0) << "thread " << t;
    EXPECT_EQ(pool.stats().idle_bytes, pool.stats().held_bytes);   // everything given back
}

TEST(PassBuffers, PassesInRecycledPoisonedMemoryGiveTheBytesOfFreshMemory) {
    const SmallNetworkCase setup(5, 500);
    for (int threads : {1, 2, 3}) {
        PassBuffers kept(1, true);   // everything pooled, every buffer handed out full of 0xA5
        RunOptions opt;
        opt.threads = threads;
        opt.weights = &setup.view;
        opt.buffers = &kept;
        std::int64_t fresh_after_first = 0;
        for (int pass = 0; pass < 3; ++pass) {
            expect_same(run_network_batch(setup.net, setup.images, opt), setup.want,
                        std::to_string(threads) + " threads, pass " + std::to_string(pass));
            const PassBuffers::Stats s = kept.stats();
            EXPECT_EQ(s.idle_bytes, s.held_bytes) << "a pass gives back all it took";
            if (pass == 0) fresh_after_first = s.fresh;
            if (threads == 1 && pass > 0)   // one thread takes the same sizes in the same order
                EXPECT_EQ(s.fresh, fresh_after_first) << "pass " << pass << " allocated new memory";
        }
        EXPECT_GT(kept.stats().reused, 2 * fresh_after_first) << threads << " threads";
    }
}

TEST(PassBuffers, TwoPassesSharingOnePoolRunAtOnce) {
    const SmallNetworkCase setup(4, 700);
    PassBuffers shared(1, true);
    std::vector<std::vector<std::vector<Tensor8>>> got(2 * 3);
    std::vector<std::thread> callers;
    for (int c = 0; c < 2; ++c)
        callers.emplace_back([&, c] {
            RunOptions opt;
            opt.threads = 2;
            opt.weights = &setup.view;
            opt.buffers = &shared;
            for (int pass = 0; pass < 3; ++pass) got[std::size_t(c * 3 + pass)] = run_network_batch(setup.net, setup.images, opt);
        });
    for (auto& t : callers) t.join();
    for (std::size_t k = 0; k < got.size(); ++k) expect_same(got[k], setup.want, "caller " + std::to_string(k / 3));
}

TEST(PassBuffers, APassHoldsItsLiveBuffersNotEveryLayer) {
    // ResNet-50 at 224x224, 2 images, weights packed beforehand (so the pool holds activations
    // and IM2COL operands only): a layer's output goes back to the pool after its last reader and
    // serves later layers, so the pool ends a pass holding far less than every layer's output.
    const Network net = zoo::by_name("resnet50");
    const PackedNetwork packed(net);
    std::vector<Tensor8> images;
    for (int i = 0; i < 2; ++i) images.push_back(random_image(net.input_shape, 900 + i));
    RunOptions opt;
    opt.threads = 1;
    opt.packed = &packed;
    opt.keep.assign(net.layers.size(), false);
    PassBuffers kept;
    opt.buffers = &kept;
    run_network_batch(net, images, opt);
    std::size_t every_layer = 0;
    for (const Layer& l : net.layers) every_layer += std::size_t(l.out_shape.size()) * images.size();
    const std::size_t held = kept.stats().held_bytes;
    std::printf("ResNet-50, 2 images: the pool holds %.1f MB after a pass; every layer's output is %.1f MB\n",
                double(held) / 1e6, double(every_layer) / 1e6);
    EXPECT_LT(held, every_layer / 2);
    EXPECT_GT(held, 0u);
}
