"""Benchmark: how the float64 noise reference (pcm_like program + read of ResNet-50's 54 layers)
scales from 1 to 2 threads, measured so that load from other processes moves it less than it
moves wall time.

No torch in the process (bench_noise.py runs aihwkit beside it).  After one pass that fills the
engine's buffer pool, passes at 1 and at 2 threads alternate; for each, wall time and every
thread's CPU time (/proc/self/task/*/schedstat, nanoseconds).  On an idle machine a 2-thread
pass takes as long as its busiest thread's CPU time, so "1-thread CPU / busiest thread at 2"
estimates the scaling the engine reaches with two free cores.  It and the wall-time ratio are
taken within each alternating pair (a 1-thread pass and the 2-thread pass right after it), never
from two minima taken apart, and the median and range over the pairs are printed.  CPU time is not immune to
load (shared caches, memory bandwidth and the clock move with other jobs), so a pair above 2x
means load disturbed one of its passes, and the benchmark says so.  The gap between the two
threads' CPU times is the work only the calling thread does (serial passes, Python).  Run:
    python3 bench/bench_noise_threads.py [REPEATS]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")
"""
from __future__ import annotations

import os
import sys
import time

from aimcemu import noise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_noise import T_READ, resnet50_layers  # noqa: E402


def thread_cpu() -> dict[str, float]:
    """CPU seconds of every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0]) * 1e-9
        except OSError:
            pass   # the thread ended
    return out


def one_pass(model, layers, threads: int) -> tuple[float, float, float, float]:
    """Wall, total CPU, busiest thread's CPU and the next thread's CPU of one pass."""
    model.num_threads = threads
    before, start = thread_cpu(), time.perf_counter()
    for i, w in enumerate(layers):
        state = model.program(w, seed=1, chip=0, layer=i)
        model.read(state, T_READ, 0)
    wall, after = time.perf_counter() - start, thread_cpu()
    spent = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True) + [0.0]
    return wall, sum(spent), spent[0], spent[1]


def median(values: list[float]) -> float:
    """The median of a non-empty sorted list."""
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    layers = resnet50_layers(None)
    n = sum(w.size for w in layers)
    model = noise.PCMLikeNoiseModel()
    one_pass(model, layers, 2)   # fills the buffer pool, starts the worker
    results = {1: [], 2: []}
    for _ in range(repeats):
        for threads in (1, 2):
            results[threads].append(one_pass(model, layers, threads))
    print(f"ResNet-50 pcm_like program + read, {n / 1e6:.2f} M weights; {repeats} alternating pair(s); "
          f"load {os.getloadavg()[0]:.1f}; each row: the pass of least CPU time")
    for threads in (1, 2):
        wall, cpu, top, second = min(results[threads], key=lambda r: r[1])
        print(f"{threads} thread(s): wall {wall:.3f} s ({n / wall / 1e6:.1f} M/s), CPU {cpu:.3f} s "
              f"({n / cpu / 1e6:.1f} M/s per CPU-s), busiest thread {top:.3f} s, next {second:.3f} s")
    # Each pair is a 1-thread pass and the 2-thread pass right after it: the two saw the same load.
    pairs = list(zip(results[1], results[2]))
    by_cpu = sorted(one[1] / two[2] for one, two in pairs)
    by_wall = sorted(one[0] / two[0] for one, two in pairs)
    split = sorted(two[1] / two[2] for _, two in pairs)   # total CPU / busiest thread: at most 2
    print(f"2 threads / 1 thread by CPU time (1-thread CPU / busiest thread at 2, per alternating pair): "
          f"median {median(by_cpu):.2f}x, range {by_cpu[0]:.2f}-{by_cpu[-1]:.2f}x over {len(pairs)} pair(s)")
    print(f"  by wall time, per pair: median {median(by_wall):.2f}x, range {by_wall[0]:.2f}-{by_wall[-1]:.2f}x; "
          f"work split at 2 threads (total CPU / busiest thread, at most 2): median {median(split):.2f}x")
    if max(by_cpu[-1], by_wall[-1]) > 2.0:
        print("  a pair above 2x cannot be the engine's scaling: load disturbed its passes; rerun with more "
              "REPEATS or on an idle machine")


if __name__ == "__main__":
    main()
