#include "common/worker_pool.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>
#include <unistd.h>

namespace aimcemu {

int usable_cpus() {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
        const int allowed = CPU_COUNT(&mask);
        if (allowed > 0) return allowed;
    }
    // No mask (or more CPUs than a cpu_set_t holds: EINVAL): every online CPU.
    const unsigned online = std::thread::hardware_concurrency();
    return online == 0 ? 1 : int(online);
}

namespace {

thread_local bool t_inside_job = false;

class WorkerPool {
public:
    explicit WorkerPool(pid_t owner) : owner_(owner) {}
    pid_t owner() const { return owner_; }

    void run(std::int64_t count, int workers, const std::function<void(std::int64_t)>& fn) {
        std::lock_guard one_job_at_a_time(job_mutex_);
        grow_to(workers - 1);
        {
            std::lock_guard lock(mutex_);
            job_ = &fn;
            count_ = count;
            next_ = 0;
            error_ = nullptr;
            helpers_wanted_ = workers - 1;
            helpers_running_ = workers - 1;
            ++generation_;
        }
        wake_.notify_all();
        work();  // the caller takes items too
        std::unique_lock lock(mutex_);
        done_.wait(lock, [&] { return helpers_running_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void grow_to(int helpers) {
        while (int(threads_.size()) < helpers) {
            const int index = int(threads_.size());
            threads_.emplace_back([this, index] { helper_loop(index); });
            threads_.back().detach();  // the pool lives until the process ends
        }
    }

    void helper_loop(int index) {
        std::uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
                if (index >= helpers_wanted_) continue;  // not needed for this job
            }
            work();
            std::lock_guard lock(mutex_);
            if (--helpers_running_ == 0) done_.notify_one();
        }
    }

    void work() {
        t_inside_job = true;
        for (std::int64_t i = next_++; i < count_; i = next_++) {
            try {
                (*job_)(i);
            } catch (...) {
                std::lock_guard lock(mutex_);
                if (!error_) error_ = std::current_exception();
                next_ = count_;  // stop handing out items
            }
        }
        t_inside_job = false;
    }

    const pid_t owner_;  // the process whose threads serve this pool
    std::mutex job_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> threads_;
    const std::function<void(std::int64_t)>* job_ = nullptr;
    std::int64_t count_ = 0;
    std::atomic<std::int64_t> next_{0};
    std::exception_ptr error_;
    int helpers_wanted_ = 0;
    int helpers_running_ = 0;
    std::uint64_t generation_ = 0;
};

// No lock here: a fork() while another thread held one would leave the child's copy locked
// forever.  Each pool records the process that made it; a forked child finds its parent's pool
// (whose threads do not exist in the child), makes its own and installs it with one
// compare-and-swap.  The parent's pool is left to leak in the child: its mutexes may be held.
WorkerPool& pool_of_this_process() {
    static std::atomic<WorkerPool*> current{nullptr};  // never destroyed: parked workers outlive exit
    const pid_t self = getpid();
    WorkerPool* pool = current.load(std::memory_order_acquire);
    while (!pool || pool->owner() != self) {
        auto* fresh = new WorkerPool(self);  // threads start only when a job first needs them
        if (current.compare_exchange_strong(pool, fresh, std::memory_order_acq_rel)) return *fresh;
        delete fresh;  // another thread installed one first: `pool` now holds it
    }
    return *pool;
}

}  // namespace

void run_on_worker_pool(std::int64_t count, int workers, const std::function<void(std::int64_t)>& fn) {
    if (workers <= 1 || count <= 1 || t_inside_job) {
        for (std::int64_t i = 0; i < count; ++i) fn(i);
        return;
    }
    pool_of_this_process().run(count, workers, fn);
}

}  // namespace aimcemu
