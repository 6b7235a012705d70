"""open_sweep on a generated sweep folder: open time, compute time, peak RSS and the number of
calls of the core's checked reader (one checking process each), lazy and eager.

    python3 bench/bench_open_sweep.py make FOLDER [--tasks 3000] [--chips 160] [--images 20]
    python3 bench/bench_open_sweep.py measure FOLDER [--json OUT]

`make` runs the embedded model once (t = 1 s, 1 min, 1 h, 1 day, `--chips` chips: 640 noisy rounds
at the default, 7 layers) and copies its results file into a sweep folder of `--tasks` grid points
(one axis, `p`).  `measure` opens that folder in a fresh process per case, so each peak RSS is the
case's own:

- eager: open_sweep(lazy=False) (the reading is the open; compute is nothing);
- lazy mean: open_sweep(lazy=True), then the mean of every numeric variable (a reduction that
  streams through every block);
- lazy load: open_sweep(lazy=True).load() (every block computed and kept);
- lazy one: open_sweep(lazy=True), then the accuracy of the middle grid point (one block).

It measures whatever `aimcemu` the environment imports (PYTHONPATH / AIMCEMU_CORE_DIR), so the same
folder can be measured under two checkouts."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = ("eager", "lazy_mean", "lazy_load", "lazy_one")

# Runs in the child process: argv[1] folder, argv[2] case; prints one JSON line.
CHILD = r"""
import json, resource, sys, threading, time
from aimcemu import _core, results

calls = {"read_results": 0, "read_results_files": 0}
lock = threading.Lock()

def counted(name):
    original = getattr(_core, name)
    def call(*args, **kwargs):
        with lock:
            calls[name] += 1
        return original(*args, **kwargs)
    setattr(_core, name, call)

for name in calls:
    counted(name)
folder, case = sys.argv[1], sys.argv[2]
start = time.perf_counter()
ds = results.open_sweep(folder, lazy=case != "eager")
opened = time.perf_counter()
numeric = ds[["accuracy", "reference_accuracy", "snr_db", "cosine", "mismatch_rate"]]
if case == "lazy_mean":
    value = float(numeric.mean().compute()["accuracy"])
elif case == "lazy_load":
    value = float(numeric.load()["accuracy"].mean())
elif case == "lazy_one":
    value = float(numeric["accuracy"].isel(p=numeric.sizes["p"] // 2).mean())
else:
    value = float(numeric["accuracy"].mean())
done = time.perf_counter()
print(json.dumps({"case": case, "open_s": opened - start, "compute_s": done - opened,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "mean_accuracy": value, "calls": calls}))
"""


def make(folder: Path, tasks: int, chips: int, images: int) -> None:
    import h5py

    import aimcemu
    from aimcemu import modelfile, results

    if folder.exists():
        raise SystemExit(f"{folder} exists; give a new folder")
    (folder / results.TASK_FOLDER).mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        model, data = modelfile.embedded_paths()
        dataset = modelfile.load_dataset(data)
        subset = Path(tmp) / "data.h5"
        modelfile.save_dataset(dataset["images"][:images], dataset["labels"][:images], subset,
                               input_frac_bits=dataset["input_frac_bits"])
        run = Path(tmp) / "run.h5"
        aimcemu.run(model=model, data=subset, output=run, mapping="all", noise="pcm_like",
                    t=[1.0, 60.0, 3600.0, 86400.0], chips=chips, layers="none", seed=1)
        with h5py.File(run) as f:
            config = json.loads(f.attrs["config"])
        entries = []
        for i in range(tasks):
            name = f"{results.TASK_FOLDER}/{i}-p{i}.h5"
            shutil.copyfile(run, folder / name)
            entries.append({"id": f"p{i}", "file": name, "point": {"p": i}, "run": {}})
    index = {"format": results.FORMAT, "format_version": results.FORMAT_VERSION, "config": config,
             "axes": {"p": list(range(tasks))}, "tasks": entries}
    (folder / results.INDEX_FILE).write_text(json.dumps(index))


def measure(folder: Path, cases: list[str]) -> list[dict]:
    figures = []
    for case in cases:
        out = subprocess.run([sys.executable, "-c", CHILD, os.fspath(folder), case], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{case} failed (exit status {out.returncode}):\n{out.stderr[-4000:]}")
        figures.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(figures[-1]), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="open_sweep: open and compute time, peak RSS")
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("make", help="generate a sweep folder")
    made.add_argument("folder", type=Path)
    made.add_argument("--tasks", type=int, default=3000)
    made.add_argument("--chips", type=int, default=160, help="chips per run (x 4 times = rounds)")
    made.add_argument("--images", type=int, default=20)
    measured = sub.add_parser("measure", help="measure open_sweep on a folder")
    measured.add_argument("folder", type=Path)
    measured.add_argument("--json", default=None, help="also write the figures to this JSON file")
    measured.add_argument("--cases", default=",".join(CASES), help=f"a comma-separated subset of {', '.join(CASES)}")
    args = parser.parse_args()
    if args.command == "make":
        make(args.folder, args.tasks, args.chips, args.images)
    else:
        figures = measure(args.folder, args.cases.split(","))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
