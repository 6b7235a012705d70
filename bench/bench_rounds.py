"""Benchmark: what noisy rounds cost beyond their work, and the peak memory of a run.

ResNet-50 v1 from the zoo (synthetic INT8 weights), --images random 224x224 images, each case
run by ``aimcemu.run`` in a fresh Python process so that its peak RSS (ru_maxrss) is its own:

  * digital:  aimcemu.run(layers="none"): the reference inference alone;
  * all-AIMC: aimcemu.run(mapping="all", noise="pcm_like", rounds=--rounds, layers="none"):
              the reference, then per round the NIU writes every layer's noisy weights and the
              PU runs on them, metrics per layer and round;
  * warm:     the same run twice in one process with reuse_reference=True, timing the second:
              what a sweep's later runs on the same model and data set pay (the reference comes
              from the process's cache: a SHA-256 of the weights and images instead of a pass).
              Its CPU s and peak RSS cover the whole child, both runs and the cached reference;
              a second run of a process also finds its allocations and caches warm, so warm
              against all-AIMC is not the reuse alone (docs/performance.md section 3 gives that);
  * digital warm: the digital run twice in one process (no reuse), timing the second: the PU
              pass the warm case's ratios divide by, so that both sides are a process's second run.
  Both warm cases start their process as a sweep's local pool worker does
  (process_memory.keep_freed_memory: glibc's malloc thresholds, and the kept model and data set),
  so the warm case measures what a sweep worker's later runs pay.

wall s is aimcemu.run's own time; start-up s, beside it, is what the process paid once before it
(import aimcemu, then resolving aimcemu.run, which imports the runner and NumPy): a sweep pays it
once per worker process, not per run, so it is not in the ratios.  CPU s is the child process's
CPU time (all its threads, the whole process: start-up, imports and file set-up included), which
other processes' load does not inflate.  From the run's own RunSummary: pu_s = PU inference time of one pass over the images (the digital
run's inference_s), niu_s = NIU time per round (the AIMC run's noise_s / rounds: each round's
whole rounds.NoisyWeights.write_round, the programs' compilation, the write and the publish, and
the first round's chip programming included, so it is the NIU's cost inside a run, not
bench_niu's NIU alone); write s = the time the run
waited for the results file (the rounds are written on a background thread while the next runs).  The issue's
figure of merit is  total / (rounds * pu_s + rounds * niu_s)  (target <= 1.2); since a first run
also computes the noise-free reference once, its line also gives total / ((rounds + 1) * pu_s
+ rounds * niu_s): what the run costs beyond the work it has to do (not for the warm case, whose
reference comes from the cache).  Cases alternate over
--repeats; the best wall time counts (a shared machine's load inflates the others).

    python3 bench/bench_rounds.py [--images 16] [--rounds 4] [--threads 2]
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, resource, sys, time
start = time.perf_counter()
import aimcemu
run = aimcemu.run  # the runner and NumPy, imported on first use: once per process, not per run
startup = time.perf_counter() - start
args = json.loads(sys.argv[1])
if args["worker"]:  # a sweep worker's start (executors.init_worker); absent before keep_freed_memory existed
    from aimcemu import process_memory
    getattr(process_memory, "keep_freed_memory", lambda: False)()
if args["prime"]:  # a sweep's first run (filling the process's reference cache when reused); the second is timed
    run(args["model"], args["data"], args["out"], layers="none", threads=args["threads"], reuse_reference=args["reuse"],
        **args["extra"])
faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
s = run(args["model"], args["data"], args["out"], layers="none", threads=args["threads"],
        reuse_reference=args["reuse"], **args["extra"])
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "startup_s": startup, "inference_s": s.inference_s, "noise_s": s.noise_s,
                  "write_s": s.write_s, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
                  "faults": usage.ru_minflt - faults_before}))
"""


def run_case(model: Path, data: Path, out: Path, threads: int, extra: dict, prime: bool, reuse: bool) -> dict:
    """One case in a fresh process; `prime`: run it once before the timed run, in a process started
    as a sweep's local pool worker is (process_memory.keep_freed_memory); `reuse`: reuse_reference."""
    args = json.dumps({"model": str(model), "data": str(data), "out": str(out), "threads": threads, "extra": extra,
                       "prime": prime, "reuse": reuse, "worker": prime})
    done = subprocess.run([sys.executable, "-c", CHILD, args], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_zoo_inputs(folder: Path, net_name: str, images: int) -> tuple[Path, Path]:
    """A zoo network's model file and a data set of `images` random images (seed 3) in `folder`:
    the inputs of this benchmark and of bench_warm_costs.py."""
    from aimcemu import _core, modelfile

    net = _core.zoo.by_name(net_name)
    pixels = np.random.default_rng(3).integers(-128, 128, size=(images, *net.input_shape), dtype=np.int8)
    model, data = folder / "model.h5", folder / "data.h5"
    modelfile.save_model(net, model)
    modelfile.save_dataset(pixels, np.zeros(images, dtype=np.int64), data, source="random")
    return model, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--net", default="resnet50")
    args = parser.parse_args()

    from aimcemu import _core

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model, data = write_zoo_inputs(folder, args.net, args.images)
        noisy_run = {"mapping": "all", "noise": "pcm_like", "rounds": args.rounds}
        cases = {"digital": ({}, False, False), "all-AIMC": (noisy_run, False, False),
                 "dig. warm": ({}, True, False), "warm": (noisy_run, True, True)}
        best: dict[str, dict] = {}
        for _ in range(args.repeats):
            for name, (extra, prime, reuse) in cases.items():
                r = run_case(model, data, folder / "out.h5", args.threads, extra, prime, reuse)
                if name not in best or r["wall_s"] < best[name]["wall_s"]:
                    best[name] = r

    digital, noisy = best["digital"], best["all-AIMC"]
    pu_s, niu_s, rounds = digital["inference_s"], noisy["noise_s"] / args.rounds, args.rounds
    print(f"{args.net}, {args.images} images, {rounds} rounds, {args.threads} threads "
          f"(fast kernel {_core.fast_kernels()[0]})")
    print(f"{'case':<10}{'wall s':>9}{'start-up s':>12}{'CPU s':>9}{'PU s':>9}{'NIU s':>9}{'write s':>9}"
          f"{'peak RSS MiB':>14}{'faults':>9}")
    for name, r in best.items():
        print(f"{name:<10}{r['wall_s']:9.2f}{r['startup_s']:12.3f}{r['cpu_s']:9.2f}{r['inference_s']:9.2f}"
              f"{r['noise_s']:9.2f}{r['write_s']:9.2f}{r['rss_mib']:14.0f}{r['faults']:9d}")
    print("start-up s: process start-up, once per process (import aimcemu + the runner and NumPy), "
          "not in wall s; faults: minor page faults of the timed run")
    warm_pu_s = best["dig. warm"]["inference_s"]
    print(f"PU per pass {pu_s:.3f} s ({warm_pu_s:.3f} s in a process's second run), NIU per round {niu_s:.3f} s")
    for name, pass_s in (("all-AIMC", pu_s), ("warm", warm_pu_s)):
        r = best[name]
        niu = r["noise_s"] / rounds
        print(f"{name:<9} total / (rounds*PU + rounds*NIU)     = {r['wall_s'] / (rounds * pass_s + rounds * niu):.2f}"
              "   (issue 10 item 3: <= 1.2)")
        # Only a run that computes its own reference does that pass: the warm run takes it from
        # the process's cache, so counting it there would credit work that never ran.
        if not cases[name][2]:
            print(f"{name:<9} total / ((rounds+1)*PU + rounds*NIU) = "
                  f"{r['wall_s'] / ((rounds + 1) * pass_s + rounds * niu):.2f}   (the reference pass counted as work)")
    print("NIU: the run's own noise_s / rounds (its whole write_round, round 1's chip programming included),\n"
          "     not the NIU alone, which build/bench/bench_niu times (docs/performance.md section 3)")
    print("warm: the second run in a process with reuse_reference=True (a sweep's later runs): no reference pass;\n"
          "      its PU is the digital run's second pass in a process (dig. warm), like the warm run's own passes")


if __name__ == "__main__":
    main()
