// A process-wide pool of persistent worker threads for parallel_for.
//
// Why: the fast GEMM splits every layer into chunks; spawning threads per call cost more than
// the work on small layers (and each new thread pays the kernel's lazy AMX-state allocation on
// its first tile instruction), so two threads ran slower than one.  Workers here live for the
// process and sleep between jobs.
//
// Rules: one job at a time (concurrent callers queue); a parallel_for issued from inside a job
// runs serially on the calling worker (no nested fan-out, no deadlock); after fork() the child
// builds a fresh pool on first use (the parent's threads do not exist there).
#pragma once
#include <cstdint>
#include <functional>

namespace aimcemu {

// The CPUs this thread may run on (its affinity mask: what taskset, cgroups' cpusets and batch
// schedulers such as SLURM allow), at least 1; the online CPUs where the mask cannot be read.
// What a thread count of 0 ("all cores") means everywhere: std::thread::hardware_concurrency
// counts every online CPU, so a run limited to 4 CPUs of a 128-CPU node started 128 threads.
int usable_cpus();

// Runs fn(i) for i in [0, count) on `workers` threads including the caller; items come from a
// shared counter.  Rethrows the first exception once every worker has stopped.
void run_on_worker_pool(std::int64_t count, int workers, const std::function<void(std::int64_t)>& fn);

}  // namespace aimcemu
