// The recycled buffers of buffer_pool.hpp: one best-fit list per element type behind a mutex
// (taken once per layer-sized buffer, never per block), oldest evicted first past the limit.
//
// fork(): a child has only the thread that forked, so a pool mutex that another thread held at
// that instant would stay locked there for ever (a sweep forks workers while the float64
// reference may run on other threads).  pthread_atfork handlers take both mutexes before the fork
// and release them after it in parent and child, so the child starts with the pools unlocked
// and their lists whole.  Nothing blocking runs under these mutexes (buffers are freed after
// they are released), so the handler waits at most one list operation.
#include "noise_models/buffer_pool.hpp"

#include "common/huge_pages.hpp"

#include <pthread.h>

#include <deque>
#include <mutex>

namespace aimcemu::noise {

namespace {

template <class T>
class Pool {
public:
    PooledVector<T> take(std::size_t n) {
        if (n * sizeof(T) < kPooledBytesMin) return PooledVector<T>(n);
        PooledVector<T> v = best_fit(n);
        if (v.capacity() < n) {
            v.reserve(n);
            advise_huge_pages(v.data(), n * sizeof(T));
        }
        v.resize(n);  // within the capacity: no allocation, and nothing is written
        return v;
    }

    void give(PooledVector<T>&& v) {
        const std::size_t bytes = v.capacity() * sizeof(T);
        if (bytes < kPooledBytesMin) return;
        std::deque<PooledVector<T>> evicted;  // freed after the lock is released
        {
            const std::lock_guard lock(mutex_);
            free_.push_back(std::move(v));
            bytes_ += bytes;
            while (bytes_ > kPooledBytesLimit) {
                bytes_ -= free_.front().capacity() * sizeof(T);
                evicted.push_back(std::move(free_.front()));
                free_.pop_front();
            }
        }
    }

    void release() {
        std::deque<PooledVector<T>> released;  // freed after the lock is released
        const std::lock_guard lock(mutex_);
        released.swap(free_);
        bytes_ = 0;
    }

    std::size_t bytes() {
        const std::lock_guard lock(mutex_);
        return bytes_;
    }

    // For the fork handlers only: the pool's mutex held across fork().
    void lock_for_fork() { mutex_.lock(); }
    void unlock_after_fork() { mutex_.unlock(); }

private:
    // The smallest pooled vector that holds n elements (an empty vector when none does).
    PooledVector<T> best_fit(std::size_t n) {
        const std::lock_guard lock(mutex_);
        auto best = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->capacity() >= n && (best == free_.end() || it->capacity() < best->capacity())) best = it;
        if (best == free_.end()) return {};
        PooledVector<T> v = std::move(*best);
        free_.erase(best);
        bytes_ -= v.capacity() * sizeof(T);
        return v;
    }

    std::mutex mutex_;
    std::deque<PooledVector<T>> free_;  // oldest first
    std::size_t bytes_ = 0;
};

struct Pools {
    Pool<double> doubles;
    Pool<std::uint8_t> bytes;
};

// Set once, before the fork handlers are registered; they use it (never pools(), whose static
// initialisation may be in progress on another thread when a fork happens).
Pools* g_pools = nullptr;

void lock_pools_for_fork() {   // always in this order: doubles, then bytes
    g_pools->doubles.lock_for_fork();
    g_pools->bytes.lock_for_fork();
}
// In the parent, and in the child, where the forking thread that locked them is the only thread.
void unlock_pools_after_fork() {
    g_pools->bytes.unlock_after_fork();
    g_pools->doubles.unlock_after_fork();
}

// Leaked on purpose: LayerStates held by Python may be destroyed during interpreter shutdown,
// after function-local statics are gone.  The fork handlers are registered with the pools, once.
Pools& pools() {
    static Pools* const instance = [] {
        g_pools = new Pools;
        pthread_atfork(lock_pools_for_fork, unlock_pools_after_fork, unlock_pools_after_fork);
        return g_pools;
    }();
    return *instance;
}
Pool<double>& double_pool() { return pools().doubles; }
Pool<std::uint8_t>& byte_pool() { return pools().bytes; }

}  // namespace

PooledVector<double> take_doubles(std::size_t n) { return double_pool().take(n); }
PooledVector<std::uint8_t> take_bytes(std::size_t n) { return byte_pool().take(n); }
void give_back(PooledVector<double>&& v) { double_pool().give(std::move(v)); }
void give_back(PooledVector<std::uint8_t>&& v) { byte_pool().give(std::move(v)); }
std::size_t pooled_bytes() { return double_pool().bytes() + byte_pool().bytes(); }
void release_pooled_buffers() {
    double_pool().release();
    byte_pool().release();
}

}  // namespace aimcemu::noise
