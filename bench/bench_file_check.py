"""What reading user files through the checking process costs (docs/reliability.md).

    python3 bench/bench_file_check.py
(the aimcemu Python imports; AIMCEMU_CORE_DIR for a build of your own, docs/performance.md "Reproduce")

load_model, load_dataset and read_results first read a file in aimcemu-check-file, a separate
process, so that a file that crashes libhdf5 cannot crash the caller.  This measures the same
loads with and without that process, interleaved in the same run (the machine is shared: only
the ratio and the added milliseconds mean something), on the embedded model, its test set and a
results file of a small hybrid run.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import aimcemu
from aimcemu import _core, modelfile


def timed(call, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    helper = _core.files.check_helper()
    if not helper:
        print("no checking process in this build (aimcemu-check-file not beside _core)", file=sys.stderr)
        return 1
    model, data = modelfile.embedded_paths()
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "run.h5"
        aimcemu.run(model, data, output=results, mapping="all", noise={"model": "pcm_like"}, t=(0.0, 3600.0), chips=2,
                    layers="none")
        loads = {"model (43 KB)": lambda: _core.load_model(str(model)),
                 "data set (26 KB)": lambda: _core.load_dataset(str(data), None),
                 f"results ({results.stat().st_size // 1024} KB)": lambda: _core.read_results(str(results))}
        print(f"{'file':<20} {'in-process ms':>14} {'checked ms':>11} {'added ms':>9} {'ratio':>6}")
        for name, load in loads.items():
            plain, checked = [], []
            for _ in range(10):  # interleaved rounds, so load changes affect both sides alike
                _core.files.set_check_helper("")
                plain += timed(load, 3)
                _core.files.set_check_helper(helper)
                checked += timed(load, 3)
            p, c = statistics.median(plain) * 1e3, statistics.median(checked) * 1e3
            print(f"{name:<20} {p:>14.2f} {c:>11.2f} {c - p:>9.2f} {c / p:>6.1f}")
        # A sweep's task files go through one checking process per 128 files.
        many = [str(results)] * 100
        one_by_one, batched = [], []
        for _ in range(3):
            one_by_one += timed(lambda: [_core.read_results(p) for p in many], 1)
            batched += timed(lambda: _core.read_results_files(many), 1)
        o, b = statistics.median(one_by_one), statistics.median(batched)
        print(f"100 results files: one checking process each {o:.2f} s, one for all {b:.2f} s ({o / b:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
