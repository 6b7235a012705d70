#!/usr/bin/env python3
"""Runs the README tour and compares its results between two versions of aimcemu.

    python3 scripts/tour_results.py run OUT        # the tour with the aimcemu that `import aimcemu` finds
    python3 scripts/tour_results.py compare A B    # exit status 1 if A and B differ

A restructuring that claims "no behaviour change" runs the tour before and after (each with its
own PYTHONPATH / AIMCEMU_CORE_DIR) and compares.  Compared: every dataset and attribute of every
HDF5 results file (the sweep's task files included), the sweep's index.json, the report's HTML
(with its embedded PNG figures) and the text every command prints.  Ignored: timestamps, the
absolute paths of the checkout and of OUT, the time measurements the run prints and the sweep
folder's lock file (it holds the holder's PID and start time, which differ between any two runs).

The tour (README.md, "A short tour", and the Python example): aimcemu models; aimcemu run
(digital); the PCM run over 8 chips and 4 times; aimcemu perf twice; the example sweep; the
report of that sweep; the Python run on HERMES and niu.apply on PCM.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

# What varies between two identical runs, and how it is written in place of the value.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(\+00:00| UTC)?")
_RESULTS_NAME = re.compile(r"_\d{8}-\d{6}\.h5")   # results/<model>_<timestamp>.h5
_TIMING_LINE = re.compile(r"^time .*$", re.MULTILINE)
# Files that say who ran, not what the run computed.
_NOT_COMPARED = {"tour.json", ".aimcemu.lock"}   # the tour's own record; aimcemu.files.FolderLock.NAME


def _tour_python(out: Path) -> str:
    """The README's Python example, with its results at fixed paths."""
    return f"""
import numpy as np, aimcemu
from aimcemu import noise, niu
s = aimcemu.run(mapping={{"default": "digital", "layers": {{"block_conv1": "aimc"}}}},
                noise={{"model": "hermes", "num_devices": 2}}, t=[0, 3600, 86400], chips=4,
                output={str(out / 'hermes.h5')!r})
print(s.format_accuracy_table())
pcm = noise.PCMLikeNoiseModel(drift_reference="programmed")
w_int8 = np.arange(-64, 64, dtype=np.int8).reshape(8, 16)
noisy = niu.apply(w_int8, pcm.to_dict(), seed=1, chip=0, round=3, t=3600.0)
np.save({str(out / 'niu_apply.npy')!r}, noisy)
print(pcm.to_dict())
"""


def _repo_of_aimcemu() -> Path:
    """The checkout whose aimcemu this environment imports (its examples are used)."""
    path = subprocess.run([sys.executable, "-c", "import aimcemu; print(aimcemu.__file__)"], check=True,
                          capture_output=True, text=True).stdout.strip()
    return Path(path).resolve().parents[2]


def run_tour(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    repo = _repo_of_aimcemu()
    commands = {
        "models": ["models"],
        "run_digital": ["run"],
        "run_pcm": ["run", "--mapping", "all", "--noise", "pcm_like", "--t", "0,1h,1d,1y", "--chips", "8",
                    "--drift-compensation", "global", "-o", "pcm.h5"],
        "perf": ["perf", "--model", "resnet50"],
        "perf_niu": ["perf", "--model", "resnet50", "--aimc-layers", "all", "--niu", "2"],
        "perf_niu_json": ["perf", "--model", "resnet50", "--aimc-layers", "all", "--niu", "2", "--format", "json"],
        "sweep": ["sweep", "--config", str(repo / "examples" / "sweep.yaml"), "--no-progress"],
        "report": ["report", "results/drift_sweep"],
    }
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for name, args in commands.items():
        done = subprocess.run([sys.executable, "-m", "aimcemu", *args], cwd=out, env=env, capture_output=True, text=True)
        (out / f"{name}.txt").write_text(done.stdout)
        if done.returncode != 0:
            raise SystemExit(f"aimcemu {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        print(f"ran aimcemu {' '.join(args)}", file=sys.stderr)
    done = subprocess.run([sys.executable, "-c", _tour_python(out)], cwd=out, env=env, capture_output=True, text=True)
    (out / "python.txt").write_text(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"the Python example failed:\n{done.stderr}")
    (out / "tour.json").write_text(json.dumps({"repo": str(repo), "out": str(out.resolve())}))


# --- comparison -----------------------------------------------------------------------------
def _roots(a: Path, b: Path) -> list[tuple[str, str]]:
    """(absolute path, placeholder) of both sides' checkout and output folder, longest first
    (an output folder may lie inside a checkout)."""
    pairs = set()
    for side in (a, b):
        meta = json.loads((side / "tour.json").read_text())
        pairs |= {(meta["out"], "<out>"), (meta["repo"], "<repo>")}
    return sorted(pairs, key=lambda p: -len(p[0]))


def _normalise_text(text: str, roots: list) -> str:
    for root, placeholder in roots:
        text = text.replace(root, placeholder)
    text = _TIMESTAMP.sub("<time>", text)
    text = _RESULTS_NAME.sub("_<time>.h5", text)
    return _TIMING_LINE.sub("time <measured>", text)


def _normalise(value, roots: list):
    """Strings with paths and times replaced; JSON text parsed, so that key order does not matter."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if value.strip()[:1] in ("{", "["):
            try:
                return _normalise(json.loads(value), roots)
            except ValueError:
                pass
        return _normalise_text(value, roots)
    if isinstance(value, dict):
        return {k: _normalise(v, roots) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v, roots) for v in value]
    return value


def _exact(value, roots: list, names=None):
    """Numeric arrays as (dtype, shape, bytes): compared bit for bit; HDF5 object references
    (dimension scales) as the names of the objects they point to; anything else normalised."""
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OSUV":
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return _normalise(_dereference(value, names), roots)


def _dereference(value, names):
    import h5py

    if isinstance(value, h5py.Reference):
        return f"<ref {names(value)}>"
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_dereference(v, names) for v in value]
    return value


def _h5_contents(path: Path, roots: list) -> dict:
    """Every attribute ("group@name") and dataset of a file, ready to compare."""
    import h5py

    contents = {}

    with h5py.File(path, "r") as f:
        def names(ref):
            return f[ref].name

        def visit(name, obj):
            for key, value in obj.attrs.items():
                contents[f"{name}@{key}"] = _exact(value, roots, names)
            if isinstance(obj, h5py.Dataset):
                contents[name] = _exact(obj[()], roots, names)

        visit("/", f)
        f.visititems(visit)
    return contents


def _files(out: Path) -> dict[str, Path]:
    """Relative name -> file, with the timestamped results name made stable."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name not in _NOT_COMPARED:
            found[_RESULTS_NAME.sub("_<time>.h5", os.fspath(path.relative_to(out)))] = path
    return found


def compare(a: Path, b: Path) -> list[str]:
    """The differences between two tour folders, one line each (empty: identical)."""
    roots = _roots(a, b)
    differences = []
    files_a, files_b = _files(a), _files(b)
    if set(files_a) != set(files_b):
        differences.append(f"different files: only in A {sorted(set(files_a) - set(files_b))}, "
                           f"only in B {sorted(set(files_b) - set(files_a))}")
    for name in sorted(set(files_a) & set(files_b)):
        pa, pb = files_a[name], files_b[name]
        if pa.suffix == ".h5":
            ca, cb = _h5_contents(pa, roots), _h5_contents(pb, roots)
            differences += [f"{name}: {key} differs" for key in sorted(set(ca) | set(cb)) if ca.get(key) != cb.get(key)]
        elif pa.suffix == ".npy":
            if _exact(np.load(pa), roots) != _exact(np.load(pb), roots):
                differences.append(f"{name}: arrays differ")
        elif _normalise(pa.read_text(errors="replace"), roots) != _normalise(pb.read_text(errors="replace"), roots):
            differences.append(f"{name}: text differs")
    return differences


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        run_tour(Path(argv[1]).resolve())
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        differences = compare(Path(argv[1]), Path(argv[2]))
        files = len(_files(Path(argv[1])))
        for line in differences:
            print(line)
        print(f"{files} files compared: " + ("identical apart from timestamps and paths" if not differences
                                             else f"{len(differences)} difference(s)"))
        return 1 if differences else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
