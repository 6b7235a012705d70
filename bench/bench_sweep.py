"""Sweep scaling: the same sweep with 1 and with 2 local workers, and the parallel efficiency.

    python3 bench/bench_sweep.py [--tasks 8] [--chips 16] [--images 450]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")

All runs happen in this process, one after the other, into fresh folders, so they see the same
machine.  Two comparisons:

- process scaling: 1 worker x 1 C++ thread against 2 workers x 1 thread;
  efficiency = T(1) / (2 x T(2)), 1.0 is perfect;
- the default (threads per task = cores / workers): 1 worker x all cores against 2 workers x
  cores / 2, i.e. whether splitting the sweep across processes beats the core's own threading.

Per-task times and the pool start-up overhead (wall time minus the summed task times of the
1-worker run) are reported too.  The four configurations alternate over --repeats (default 2), so
that load from other processes hits all of them alike; the best wall time of each counts.

Each worker process computes the noise-free reference pass once and keeps it for its later tasks
(reuse_reference), so 2 workers compute it twice where 1 worker computes it once: that pass is
part of what splitting a sweep over processes costs, and `reference_passes_*` print how many each
configuration computed, so the efficiency can be read with it."""
from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path

from aimcemu import executors, modelfile

sweep_module = importlib.import_module("aimcemu.sweeps")


def make_config(folder: Path, data: str, tasks: int, chips: int) -> dict:
    return {"output": str(folder), "data": data, "noise": {"model": "pcm_like"}, "mapping": "all",
            "t": [1.0, 3600.0, 86400.0], "chips": chips, "seed": 1,
            "grid": {"noise.prog_noise_scale": [0.25 * (k + 1) for k in range(tasks)]}}


def timed_sweep(config: dict, workers: int, threads: int) -> tuple[float, float, int]:
    """Wall time, summed task times and the reference passes the workers computed."""
    start = time.perf_counter()
    result = sweep_module.sweep(config, workers=workers, threads=threads, progress=False)
    wall = time.perf_counter() - start
    assert result.complete and result.ran == result.total
    passes_per_worker: dict[int, int] = {}
    for summary in result.summaries.values():   # each worker's count only grows: its last is its total
        pid = summary.get("pid", 0)
        passes_per_worker[pid] = max(passes_per_worker.get(pid, 0), summary.get("worker_references_computed", 0))
    return wall, sum(s["seconds"] for s in result.summaries.values()), sum(passes_per_worker.values())


def main() -> None:
    parser = argparse.ArgumentParser(description="sweep scaling, 1 vs 2 workers")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--chips", type=int, default=16)
    parser.add_argument("--images", type=int, default=450, help="images of the embedded test set per run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds of the four configurations")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _, data = modelfile.embedded_paths()
        dataset = modelfile.load_dataset(data)
        subset = tmp / "data.h5"
        modelfile.save_dataset(dataset["images"][:args.images], dataset["labels"][:args.images], subset,
                               input_frac_bits=dataset["input_frac_bits"])
        configurations = {"w1t1": (1, 1), "w2t1": (2, 1), "w1auto": (1, 0), "w2auto": (2, 0)}
        best: dict[str, tuple[float, float, int]] = {}
        for repeat in range(args.repeats):
            for name, (workers, threads) in configurations.items():
                config = make_config(tmp / f"{name}_{repeat}", str(subset), args.tasks, args.chips)
                measured = timed_sweep(config, workers, threads)
                if name not in best or measured[0] < best[name][0]:
                    best[name] = measured
    (one, one_tasks, one_passes), (two, two_tasks, two_passes) = best["w1t1"], best["w2t1"]
    one_all, two_auto = best["w1auto"][0], best["w2auto"][0]
    figures = {"cores": executors.cores(), "tasks": args.tasks, "rounds_per_task": 3 * args.chips,
               "images": args.images, "repeats": args.repeats,
               "reference_passes_1_worker": one_passes, "reference_passes_2_workers": two_passes,
               "wall_1_worker_1_thread_s": one, "wall_2_workers_1_thread_s": two,
               "process_speedup": one / two, "process_efficiency": one / (2 * two),
               "task_s_1_worker": one_tasks / args.tasks, "task_s_2_workers": two_tasks / args.tasks,
               "overhead_1_worker_s": one - one_tasks,
               "wall_1_worker_all_cores_s": one_all, "wall_2_workers_auto_s": two_auto,
               "default_split_speedup": one_all / two_auto}
    for key, value in figures.items():
        print(f"{key:<28} {value:.3f}" if isinstance(value, float) else f"{key:<28} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
