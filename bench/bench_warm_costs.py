"""Benchmark: what a sweep's later runs pay besides the PU and the NIU, cost by cost, in one process.

ResNet-50 v1 from the zoo (synthetic INT8 weights), --images random images, all-AIMC (pcm_like),
--rounds rounds, --threads threads, `aimcemu.run(..., reuse_reference=True)` --runs times in one
process started as a sweep's local pool worker is (process_memory.keep_freed_memory, unless
--no-worker-start): what a sweep worker does.  Each cost is timed by wrapping the call the runner makes
(wall and the process's CPU time, all threads, around the call):

  load      modelfile.load_model_and_check_dataset (the kept checking process; none in a run
            that takes the model and data set its process kept)
  key       aimcemu.reference.content_digest (the reference cache's content key: SHA-256 of the
            weights and images), on its own thread since the runner overlaps it with the emulator's
            and the writer's creation: wall and that thread's CPU time (a version without that
            thread: reference_key on the run's thread, process CPU)
  key wait  the runner's wait for that thread (ContentDigest.result)
  emulator  _core.niu.Emulator(...) (NoisyWeights: the HBM filled from the network)
  w.create  _core.ResultsWriter(...)        w.commit  its commit()
  niu 1st   the run's first NIU round (the chips' programming)    niu rest  the other rounds
  pass      each noisy PU pass (rounds.run_network on a published round), mean

Run 1 fills the caches (reference, checking process, kept memory); the table shows every run and
the median of runs 2..N, with each run's minor page faults, and a line of page faults per cost.  Load from other processes inflates wall times: read the CPU columns,
and compare builds by alternating them (AIMCEMU_CORE_DIR / PYTHONPATH) in one session.

    python3 bench/bench_warm_costs.py [--runs 6] [--images 16] [--rounds 4]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_rounds import write_zoo_inputs  # this folder is on sys.path when the script runs


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Costs:
    """Wall and CPU seconds per cost name within the current run."""

    def __init__(self):
        self.run: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.faults: dict[str, int] = defaultdict(int)   # minor page faults per cost, this run

    def timed(self, name, fn, *args, cpu=cpu_s, **kwargs):
        wall, cpu_start, faults = time.perf_counter(), cpu(), minor_faults()
        try:
            return fn(*args, **kwargs)
        finally:
            self.run[name].append((time.perf_counter() - wall, cpu() - cpu_start))
            self.faults[name] += minor_faults() - faults


def instrument(costs: Costs) -> None:
    """Wraps the calls the runner makes (module attributes it looks up at call time)."""
    from aimcemu import _core, modelfile, reference, rounds

    load = modelfile.load_model_and_check_dataset
    modelfile.load_model_and_check_dataset = lambda *a, **k: costs.timed("load", load, *a, **k)
    if hasattr(reference, "ContentDigest"):
        digest = reference.content_digest   # on the key's own thread: that thread's CPU time
        reference.content_digest = lambda *a, **k: costs.timed("key", digest, *a, cpu=time.thread_time, **k)
        result = reference.ContentDigest.result
        reference.ContentDigest.result = lambda self: costs.timed("key wait", result, self)
    else:  # a version that hashes on the run's own thread
        key = reference.reference_key
        reference.reference_key = lambda *a, **k: costs.timed("key", key, *a, **k)
    emulator = _core.niu.Emulator
    _core.niu.Emulator = lambda *a, **k: costs.timed("emulator", emulator, *a, **k)
    writer_class = _core.ResultsWriter

    class TimedWriter:
        def __init__(self, *a, **k):
            self._writer = costs.timed("w.create", writer_class, *a, **k)

        def commit(self):
            return costs.timed("w.commit", self._writer.commit)

        def __getattr__(self, name):
            return getattr(self._writer, name)

    _core.ResultsWriter = TimedWriter
    write_round = rounds.NoisyWeights.write_round

    def timed_write_round(self, *a, **k):
        return costs.timed("niu 1st" if "niu 1st" not in costs.run else "niu rest", write_round, self, *a, **k)

    rounds.NoisyWeights.write_round = timed_write_round
    run_network = rounds.run_network
    rounds.run_network = lambda *a, **k: costs.timed("pass", run_network, *a, **k)


COLUMNS = ["load", "key", "key wait", "emulator", "w.create", "w.commit", "niu 1st", "niu rest", "pass"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--net", default="resnet50")
    parser.add_argument("--no-worker-start", action="store_true",
                        help="leave out the worker's start (glibc's default malloc thresholds, no kept model)")
    parser.add_argument("--trim-mib", type=int, default=None,
                        help="the worker start's M_TRIM_THRESHOLD in MiB (default: keep_freed_memory's)")
    args = parser.parse_args()

    import aimcemu
    from aimcemu import modelfile, process_memory

    # A sweep worker's start (executors.init_worker); a version without it has nothing to call.
    keep = getattr(process_memory, "keep_freed_memory", lambda **_: False)
    trim = {} if args.trim_mib is None else {"trim_threshold": args.trim_mib << 20}
    worker_start = not args.no_worker_start and keep(**trim)

    costs = Costs()
    instrument(costs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model, data = write_zoo_inputs(folder, args.net, args.images)
        # A sweep's files exist before it starts; a file changed within the last SETTLED_NS is
        # loaded again rather than kept (modelfile), so the runs start once these have settled.
        time.sleep(getattr(modelfile, "SETTLED_NS", 0) / 1e9)
        for _ in range(args.runs):
            costs.run.clear()
            costs.faults.clear()
            wall, cpu, faults = time.perf_counter(), cpu_s(), minor_faults()
            aimcemu.run(model, data, folder / "out.h5", mapping="all", noise="pcm_like", rounds=args.rounds,
                        layers="none", threads=args.threads, reuse_reference=True)
            row = {"wall": (time.perf_counter() - wall, cpu_s() - cpu),
                   "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}
            for name in COLUMNS:
                calls = costs.run.get(name, [])
                per = (len(calls) if name == "pass" else 1) or 1
                row[name] = (sum(c[0] for c in calls) / per, sum(c[1] for c in calls) / per)
            row["faults by cost"] = {name: costs.faults.get(name, 0) for name in COLUMNS}
            rows.append(row)

    print(f"{args.net}, {args.images} images, {args.rounds} rounds, {args.threads} threads, reuse_reference=True, "
          f"worker start {'yes' if worker_start else 'no'}, load {os.getloadavg()[0]:.2f}; "
          "each cell: wall ms / process CPU ms")
    print(f"{'run':<7}" + "".join(f"{c:>14}" for c in ["total"] + COLUMNS) + f"{'faults':>9}")

    def line(label, row):
        cells = [row["wall"]] + [row[c] for c in COLUMNS]
        return f"{label:<7}" + "".join(f"{w * 1e3:>8.0f}/{c * 1e3:<5.0f}" for w, c in cells) + f"{row['faults']:>9}"

    for k, row in enumerate(rows, 1):
        print(line(str(k), row))
    later = rows[1:]
    if later:
        median = {name: (statistics.median(r[name][0] for r in later), statistics.median(r[name][1] for r in later))
                  for name in ["wall"] + COLUMNS}
        median["faults"] = int(statistics.median(r["faults"] for r in later))
        print(line("med 2+", median))
        print("page faults per cost, median of runs 2..N (pass: all passes of a run): " +
              ", ".join(f"{name} {int(statistics.median(r['faults by cost'][name] for r in later))}" for name in COLUMNS))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
