// The noise engine's buffer pool (noise_models/buffer_pool.hpp): recycled memory is handed out
// again, the pool stays under its limit, and a layer programmed and read into recycled memory
// full of garbage gives bit for bit what it gives in fresh memory (every array is written whole),
// and a child forked while another thread works the pool can use the pool.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "noise_models/buffer_pool.hpp"
#include "noise_models/noise_model.hpp"

using namespace aimcemu::noise;

namespace {

// Pooled sizes: 2^18 doubles = 2 MiB.
constexpr std::size_t kBig = std::size_t(1) << 18;

// A layer whose arrays are all pooled (532480 weights: even the fault codes, 2 bytes per weight, take >= 1 MiB).
constexpr std::int64_t kRows = 1024, kCols = 520;

std::vector<double> ramp_weights(std::size_t n) {
    std::vector<double> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = std::sin(0.37 * double(i) + 0.1) * 0.8;
    return w;
}

struct Outcome {
    PooledVector<double> g_target, g_prog, nu;
    std::vector<double> read, conductances;
    PooledVector<std::uint8_t> fault;
};

Outcome program_and_read(const NoiseModel& m, const std::vector<double>& w) {
    const LayerState s = m.program(w, {kRows, kCols}, {11, 2, 3});
    return {s.g_target, s.g_prog, s.nu, m.read(s, 86400.0, 4), m.read_conductances(s, 86400.0, 4), s.fault};
}

// Fills the pool with `copies` buffers of every size a layer of n weights takes, each full of
// values the engine never writes (NaN conductances, fault code 0xFF).
void poison_pool(std::size_t n, int copies) {
    for (int k = 0; k < copies; ++k) {
        give_back(PooledVector<double>(n, std::numeric_limits<double>::quiet_NaN()));
        give_back(PooledVector<double>(2 * n, std::numeric_limits<double>::quiet_NaN()));
        give_back(PooledVector<std::uint8_t>(2 * n, 0xFF));
    }
}

}  // namespace

TEST(BufferPool, GivenMemoryIsTakenAgain) {
    release_pooled_buffers();
    PooledVector<double> v = take_doubles(kBig);
    ASSERT_EQ(v.size(), kBig);
    const double* memory = v.data();
    give_back(std::move(v));
    EXPECT_EQ(pooled_bytes(), kBig * sizeof(double));
    const PooledVector<double> smaller = take_doubles(kBig / 2);  // best fit: the same buffer
    EXPECT_EQ(smaller.data(), memory);
    EXPECT_EQ(smaller.size(), kBig / 2);
    EXPECT_EQ(pooled_bytes(), 0u);
    // Under kPooledBytesMin: not pooled.
    give_back(PooledVector<double>(16));
    EXPECT_EQ(pooled_bytes(), 0u);
}

TEST(BufferPool, StaysUnderItsLimitOldestEvictedFirst) {
    release_pooled_buffers();
    const std::size_t each = kPooledBytesLimit / 4;  // reserved, never touched: no memory is used
    std::vector<const double*> given;
    for (int k = 0; k < 6; ++k) {
        PooledVector<double> v;
        v.reserve(each / sizeof(double));
        given.push_back(v.data());
        give_back(std::move(v));
        EXPECT_LE(pooled_bytes(), kPooledBytesLimit);
    }
    EXPECT_EQ(pooled_bytes(), 4 * each);
    std::set<const double*> kept;
    std::vector<PooledVector<double>> taken;
    for (int k = 0; k < 4; ++k) {
        taken.push_back(take_doubles(each / sizeof(double)));
        kept.insert(taken.back().data());
    }
    EXPECT_EQ(kept, std::set<const double*>(given.begin() + 2, given.end()));  // the two oldest were evicted
    EXPECT_EQ(pooled_bytes(), 0u);
    taken.clear();
    release_pooled_buffers();
}

TEST(BufferPool, RecycledGarbageDoesNotChangeAnyResult) {
    const std::vector<double> w = ramp_weights(std::size_t(kRows * kCols));
    NoiseParams generic = {{"prog_additive", 0.01}, {"read_additive", 0.01}, {"stuck_low_prob", 0.01},
                           {"stuck_high_prob", 0.01}};
    for (const auto& [name, params] : std::vector<std::pair<std::string, NoiseParams>>{
             {"pcm_like", {}}, {"pcm_like", {{"drift_reference", std::string("programmed")}}},
             {"generic", generic}, {"reram_wan2022", {}}}) {
        const auto m = make_noise_model(name, params);
        release_pooled_buffers();
        const Outcome fresh = program_and_read(*m, w);
        release_pooled_buffers();
        poison_pool(w.size(), 3);
        const Outcome recycled = program_and_read(*m, w);
        EXPECT_EQ(recycled.g_target, fresh.g_target) << name;
        EXPECT_EQ(recycled.g_prog, fresh.g_prog) << name;
        EXPECT_EQ(recycled.nu, fresh.nu) << name;
        EXPECT_EQ(recycled.fault, fresh.fault) << name;
        EXPECT_EQ(recycled.read, fresh.read) << name;
        EXPECT_EQ(recycled.conductances, fresh.conductances) << name;
    }
    release_pooled_buffers();
}

// A sweep forks its workers while other threads may be inside the pool; a child must not inherit
// its mutex locked.  Another thread takes and gives back buffers without pause, each take scanning
// a list of 64 pooled buffers under the mutex, so most forks land while that thread holds it;
// every child then takes and gives back a buffer and exits 0.  A child that blocks on the mutex
// is killed by its alarm (without the pool's fork handlers nearly every child was).
TEST(BufferPool, ForkedChildCanUseThePoolWhileAnotherThreadWorksIt) {
    release_pooled_buffers();
    constexpr std::size_t kEach = kPooledBytesMin / sizeof(double);   // the smallest pooled size
    for (int k = 0; k < 64; ++k) give_back(PooledVector<double>(kEach, 1.0));
    std::atomic<bool> stop{false};
    std::atomic<long> cycles{0};
    std::thread worker([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            PooledVector<double> v = take_doubles(kEach);
            give_back(std::move(v));
            cycles.fetch_add(1, std::memory_order_relaxed);
        }
    });
    while (cycles.load() < 100) std::this_thread::yield();   // the worker is in its loop
    constexpr int kForks = 40;
    int children_ok = 0;
    for (int f = 0; f < kForks; ++f) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0) << "fork failed";
        if (pid == 0) {   // the child: only async-signal-safe exits from here
            alarm(5);
            PooledVector<double> v = take_doubles(2 * kEach);   // no pooled buffer fits: a fresh one
            v[0] = 2.0;
            const bool ok = v.size() == 2 * kEach;
            give_back(std::move(v));
            PooledVector<double> again = take_doubles(2 * kEach);   // the one just given back
            const bool reused = again.size() == 2 * kEach && again[0] == 2.0;
            _exit(ok && reused ? 0 : 1);
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        EXPECT_TRUE(ok) << "child " << f
                        << (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                                : " exited " + std::to_string(WEXITSTATUS(status)));
        if (!ok) break;   // one stuck child says it; do not wait out the alarm of every other
        ++children_ok;
    }
    stop = true;
    worker.join();
    EXPECT_EQ(children_ok, kForks);
    release_pooled_buffers();
}
