// The persistent worker pool behind parallel_for: every item runs exactly once, nested calls
// run serially instead of deadlocking, exceptions come back to the caller, and concurrent
// callers from different threads each get their own complete job, and a forked child gets a
// pool of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/worker_pool.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/postproc.hpp"

using namespace aimcemu;

TEST(WorkerPool, EveryItemRunsExactlyOnce) {
    for (int threads : {1, 2, 3, 8})
        for (std::int64_t count : {0, 1, 2, 7, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
            parallel_for(count, threads, [&](std::int64_t i) { ++hits[std::size_t(i)]; });
            for (std::int64_t i = 0; i < count; ++i) EXPECT_EQ(hits[std::size_t(i)].load(), 1) << threads << " " << i;
        }
}

TEST(WorkerPool, NestedCallsRunSeriallyWithoutDeadlock) {
    std::vector<std::atomic<int>> hits(64);
    parallel_for(8, 4, [&](std::int64_t outer) {
        parallel_for(8, 4, [&](std::int64_t inner) { ++hits[std::size_t(outer * 8 + inner)]; });
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(WorkerPool, RethrowsTheFirstExceptionAndStaysUsable) {
    EXPECT_THROW(parallel_for(100, 3,
                              [](std::int64_t i) {
                                  if (i == 17) throw std::runtime_error("item 17");
                              }),
                 std::runtime_error);
    std::atomic<int> sum{0};
    parallel_for(10, 3, [&](std::int64_t i) { sum += int(i); });
    EXPECT_EQ(sum.load(), 45);
}

TEST(WorkerPool, ConcurrentCallersEachCompleteTheirJob) {
    std::vector<std::thread> callers;
    std::vector<std::atomic<long>> sums(4);
    for (int c = 0; c < 4; ++c)
        callers.emplace_back([&, c] {
            for (int rep = 0; rep < 20; ++rep) parallel_for(50, 2, [&](std::int64_t i) { sums[std::size_t(c)] += i; });
        });
    for (auto& t : callers) t.join();
    for (auto& s : sums) EXPECT_EQ(s.load(), 20L * (49 * 50 / 2));
}

TEST(WorkerPool, ThreadedIm2colAndRequantizeWriteTheSameBytes) {
    // Large enough that both split over the pool (operand > 256 KiB, > 64 Ki accumulators).
    const WindowGeometry g{Shape3{56, 56, 64}, 3, 1, 1};
    std::vector<std::int8_t> x(std::size_t(g.in.size()));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::int8_t((i * 2654435761u) >> 24);
    const std::int64_t stride = g.m() + 16;
    std::vector<std::uint8_t> one(std::size_t(g.p() * stride)), many(one.size(), 0x55);
    im2col_into(x.data(), g, 0x80, stride, one.data(), 1);
    for (int threads : {2, 3, 8}) {
        im2col_into(x.data(), g, 0x80, stride, many.data(), threads);
        EXPECT_EQ(one, many) << threads << " threads";
    }
    std::vector<std::int32_t> acc(300000);
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = std::int32_t(i * 2654435761u) >> 9;
    std::vector<std::int8_t> y1(acc.size()), yn(acc.size());
    requantize(acc.data(), std::int64_t(acc.size()), 7, true, y1.data(), 1);
    for (int threads : {2, 3, 8}) {
        requantize(acc.data(), std::int64_t(acc.size()), 7, true, yn.data(), threads);
        EXPECT_EQ(y1, yn) << threads << " threads";
    }
}

// A sweep forks its workers while other threads of the parent may be running pool jobs.  The
// child has none of the parent's threads, and the parent's pool may be mid-job (its job lock
// held) at the fork: the child must build its own pool, not wait on the parent's.  Another thread
// keeps the pool busy; every child runs a 2-worker job and checks every item ran once.  A child
// that blocks is killed by its alarm.
TEST(WorkerPool, ForkedChildRunsJobsWhileTheParentsPoolIsBusy) {
    std::atomic<bool> stop{false};
    std::atomic<long> jobs{0};
    std::thread busy([&] {
        std::vector<std::atomic<int>> hits(256);
        while (!stop.load(std::memory_order_relaxed)) {
            parallel_for(256, 2, [&](std::int64_t i) { ++hits[std::size_t(i)]; });
            jobs.fetch_add(1, std::memory_order_relaxed);
        }
    });
    while (jobs.load() < 10) std::this_thread::yield();
    constexpr int kForks = 30;
    int children_ok = 0;
    for (int f = 0; f < kForks; ++f) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0) << "fork failed";
        if (pid == 0) {
            alarm(5);
            std::vector<std::atomic<int>> hits(1000);
            parallel_for(1000, 2, [&](std::int64_t i) { ++hits[std::size_t(i)]; });
            bool once = true;
            for (const auto& h : hits) once = once && h.load() == 1;
            _exit(once ? 0 : 1);
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        EXPECT_TRUE(ok) << "child " << f << (WIFSIGNALED(status) ? " was killed by its alarm or a signal" : " exited nonzero");
        if (!ok) break;
        ++children_ok;
    }
    stop = true;
    busy.join();
    EXPECT_EQ(children_ok, kForks);
}

// 0 threads ("all cores") is the CPUs this thread may run on: a job limited by taskset, a cpuset
// or a batch scheduler to some CPUs of a large node ran one thread per online CPU of the node.
// Checked on a thread of its own, restricted to its first allowed CPU (the mask is per thread).
TEST(WorkerPool, AllCoresMeansTheCpusThisThreadMayRunOn) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    EXPECT_EQ(usable_cpus(), CPU_COUNT(&allowed));
    EXPECT_EQ(resolve_threads(0), std::min(CPU_COUNT(&allowed), kMaxThreads));
    if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "needs 2 CPUs to restrict a thread to one";
    int first = 0;
    while (!CPU_ISSET(first, &allowed)) ++first;
    int seen_usable = 0, seen_resolved = 0;
    std::thread restricted([&] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
        seen_usable = usable_cpus();
        seen_resolved = resolve_threads(0);
    });
    restricted.join();
    EXPECT_EQ(seen_usable, 1);
    EXPECT_EQ(seen_resolved, 1);
    EXPECT_EQ(resolve_threads(3), 3);   // an explicit count is never cut to the mask
}
