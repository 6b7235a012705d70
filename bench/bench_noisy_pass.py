"""Where a noisy round's time goes against a digital pass, in one process (issue 10, item 3).

Runs `aimcemu.run` on ResNet-50 all-AIMC (pcm_like, 16 random images, `--threads`) and, inside the
run (its own emulator, results writer and metrics), times per step, alternating, `--repeats` times:

- nw     Emulator construction through NoisyWeights (HBM filled, clean abs-max taken)
- niu    NoisyWeights.write_round of a kept round (program compile + NIU model + publish)
- noisy  run_network on the published round with the writer's RoundMetrics (what run_rounds does)
- plain  the same published round without metrics (every layer returned)
- digital `_core.run_network(keep=[output])` with the clean network

Wall seconds and process CPU seconds (all threads) per step, median over the repeats, and the
ratio noisy / digital.  Load from other processes inflates wall time, not CPU time; `uptime` is
printed with the figures.

    python3 bench/bench_noisy_pass.py [--threads 2] [--repeats 7] [--images 16]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--images", type=int, default=16)
    args = ap.parse_args()

    import aimcemu
    from aimcemu import _core, modelfile, rounds, runner

    tmp = tempfile.mkdtemp(prefix="bench_noisy_pass_")
    net = _core.zoo.by_name("resnet50")
    images = np.random.default_rng(3).integers(-128, 128, size=(args.images, *net.input_shape), dtype=np.int8)
    modelfile.save_model(net, os.path.join(tmp, "model.h5"))
    modelfile.save_dataset(images, np.zeros(args.images, dtype=np.int64), os.path.join(tmp, "data.h5"), source="random")

    samples: dict[str, list[tuple[float, float]]] = {}
    real_noisy, real_run_rounds = rounds.NoisyWeights, runner.run_rounds

    def noisy_weights(*a, **k):
        obj, wall, cpu = timed(lambda: real_noisy(*a, **k))
        samples.setdefault("nw", []).append((wall, cpu))
        return obj

    def run_rounds(net_, images_, cfg, noisy, round_alpha, reference, writer, progress=False):
        emulator = noisy.emulator()
        out_index = net_.output_index()
        alpha = {i: 1.0 for i in noisy.clean}
        for rep in range(args.repeats):
            published, wall, cpu = timed(lambda: noisy.write_round(emulator, 0, 2 + rep, 1.0, alpha))
            if rep:  # the first round programs the chip
                samples.setdefault("niu", []).append((wall, cpu))
            _, wall, cpu = timed(lambda: _core.run_network(net_, images_, cfg.backend, cfg.threads, None, [out_index]))
            samples.setdefault("digital", []).append((wall, cpu))
            metrics = writer.round_metrics()
            _, wall, cpu = timed(lambda: rounds.run_network(net_, images_, cfg.backend, cfg.threads, published,
                                                            metrics=metrics))
            samples.setdefault("noisy", []).append((wall, cpu))
            _, wall, cpu = timed(lambda: rounds.run_network(net_, images_, cfg.backend, cfg.threads, published))
            samples.setdefault("plain", []).append((wall, cpu))
        return real_run_rounds(net_, images_, cfg, noisy, round_alpha, reference, writer, progress)

    runner.NoisyWeights, runner.run_rounds = noisy_weights, run_rounds
    for _ in range(2):
        aimcemu.run(os.path.join(tmp, "model.h5"), os.path.join(tmp, "data.h5"), os.path.join(tmp, "out.h5"),
                    layers="none", threads=args.threads, mapping="all", noise="pcm_like", rounds=4, overwrite=True)

    def med(key, k):
        return statistics.median(s[k] for s in samples[key])

    print(f"load: {os.getloadavg()}  threads {args.threads}  images {args.images}  repeats {args.repeats}")
    print(f"{'step':8s} {'wall s':>8s} {'cpu s':>8s}  (median)")
    for key in ("nw", "niu", "digital", "noisy", "plain"):
        print(f"{key:8s} {med(key, 0):8.4f} {med(key, 1):8.4f}")
    print(f"noisy/digital wall {med('noisy', 0) / med('digital', 0):.3f}  cpu {med('noisy', 1) / med('digital', 1):.3f}")
    print(f"peak RSS {__import__('resource').getrusage(0).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
