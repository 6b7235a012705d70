"""Results on disk: a run's HDF5 file and a sweep's folder, read as xarray objects.

The file formats are docs/hdf5_layout.md (a run) and docs/sweeps.md (a sweep folder:
index.json and tasks/<n>-<id>.h5).  aimcemu.sweeps writes sweep folders, aimcemu.analysis and
aimcemu.report read them through this module, so neither depends on the other.

Metrics and coordinates are read with h5py (one open per file, not one per group); activations
stay on disk.  ``open_sweep(lazy=True)`` builds dask arrays with one block per task file, so a
sweep larger than memory opens instantly and reductions stream through the files.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from . import _core, validate
from .config import parse_compensations
from ._optional import require

METRICS = ("snr_db", "cosine", "mismatch_rate")

# A sweep folder (docs/sweeps.md): index.json maps grid points to task files in tasks/.
INDEX_FILE = "index.json"
TASK_FOLDER = "tasks"
FORMAT = "aimcemu-sweep"
FORMAT_VERSION = 1


def xarray_module():
    """xarray, with its h5netcdf engine; a missing one names the extra to install."""
    require("h5netcdf", "aimcemu.analysis (xarray's h5netcdf engine)")
    return require("xarray", "aimcemu.analysis")


# --- one run ------------------------------------------------------------------------------------
def round_coordinates(f) -> dict[str, np.ndarray]:
    """The round coordinates of an open results file (h5py File or layer group): round
    (0..R-1), chip, t, niu_round and drift_compensation (str)."""
    return {"round": f["round"][()], "chip": f["chip"][()], "t": f["t"][()], "niu_round": f["niu_round"][()],
            "drift_compensation": np.array(f["drift_compensation"].asstr()[()], dtype=object)}


def round_coords(f) -> dict:
    """round_coordinates as xarray coordinate specs on the round dimension."""
    values = round_coordinates(f)
    return {"round": values.pop("round"), **{name: ("round", v) for name, v in values.items()}}


def check_results_file(path, check: bool = True) -> dict:
    """Validates a results file before anything reads it (the C++ reader, _core.read_results):
    not HDF5, truncated, another format or version, a missing or inconsistent field, a config
    that is not JSON: FormatError naming the file and the field.  Returns what it read.
    check=False: the file already passed the checking process (_core.check_results_files)."""
    source = os.fspath(path)
    info = _core.read_results(source, check)
    try:
        json.loads(info["config"])
    except ValueError as exc:
        raise _core.FormatError(f"{source}: field 'config': not valid JSON ({exc})") from None
    return info


def open_run(path) -> "xarray.Dataset":
    """A results file as a Dataset: accuracy[round] (round = 0..R-1) with chip, t, niu_round and
    drift_compensation coordinates, the per-layer metrics [layer, round], reference_accuracy, and
    the file's config (attrs["config"], a dict)."""
    import h5py

    xr = xarray_module()
    check_results_file(path)
    with h5py.File(path, "r") as f:
        layers = list(f["layers"].keys())
        layers.sort(key=lambda name: int(f["layers"][name].attrs["index"]))
        data = {"accuracy": (("round",), f["accuracy"][()]),
                "reference_accuracy": ((), float(f["reference_accuracy"][()]))}
        for metric in METRICS:
            data[metric] = (("layer", "round"),
                            np.stack([f["layers"][n][metric][()] for n in layers]) if layers
                            else np.zeros((0, len(f["round"]))))
        coords = {**round_coords(f), "layer": layers,
                  "kind": ("layer", [str(f["layers"][n].attrs["kind"]) for n in layers]),
                  "activations_stored": ("layer", [bool(f["layers"][n].attrs["activations_stored"]) for n in layers])}
        attrs = {"model": str(f.attrs["model"]), "path": os.fspath(path), "config": json.loads(f.attrs["config"])}
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["t"].attrs["units"] = "s"
    ds["snr_db"].attrs["units"] = "dB"
    return ds


def open_layer(path, layer: str, chunks: dict | None = None) -> "xarray.Dataset":
    """One layer group (reference[image, y, x, channel], activations[round, ...], metrics) as a
    lazy dask-backed Dataset, one chunk per round (the file's own chunking)."""
    return xarray_module().open_dataset(path, group=f"layers/{layer}", engine="h5netcdf",
                              chunks={"round": 1} if chunks is None else chunks)


def read_task_summary(path, check: bool = True) -> dict:
    """Accuracy per round with its chip, t, NIU round id and drift compensation, from a task's
    results file (small).  The file is validated as a whole (_core.read_results), so a broken
    task file is named in the error; check=False when it already passed the checking process."""
    return task_summary_of(_core.read_results(os.fspath(path), check))


def read_task_summaries(paths) -> list[dict]:
    """read_task_summary for many task files: one checking process per batch of files, each file
    read through the descriptor that process read (_core.read_results_files)."""
    return [task_summary_of(info) for info in _core.read_results_files([os.fspath(p) for p in paths])]


def task_summary_of(info: dict) -> dict:
    """A task's summary from what _core.read_results read of its file."""
    return {"reference_accuracy": float(info["reference_accuracy"]),
            "accuracy": [float(v) for v in info["accuracy"]],
            "chip": [int(v) for v in info["chip"]], "t": [float(v) for v in info["t"]],
            "niu_round": [int(v) for v in info["niu_round"]],
            "drift_compensation": [str(v) for v in info["drift_compensation"]]}


# --- a sweep ------------------------------------------------------------------------------------
def read_index(folder) -> dict:
    """The index.json of a sweep folder, checked: valid UTF-8 JSON of this format and version,
    with a config, axes and a list of tasks that each name a file in tasks/.  FormatError names
    the file and the field."""
    path = Path(folder) / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a sweep folder (no {INDEX_FILE})")
    source = os.fspath(path)
    try:
        index = json.loads(validate.decode(path.read_bytes(), source))
    except json.JSONDecodeError as exc:
        raise validate.fail(source, "<json>", f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise validate.fail(source, "<json>", "nested too deeply") from None
    if not isinstance(index, dict):
        raise validate.fail(source, "<root>", "expected a JSON object")
    if index.get("format") != FORMAT:
        raise validate.fail(source, "format", f"expected '{FORMAT}', found {index.get('format')!r}")
    if index.get("format_version") != FORMAT_VERSION:
        raise validate.fail(source, "format_version", f"this build reads version {FORMAT_VERSION}, "
                                                      f"found {index.get('format_version')!r}")
    for key, kind in (("config", dict), ("axes", dict), ("tasks", list)):
        if not isinstance(index.get(key), kind):
            raise validate.fail(source, key, f"expected a JSON {'object' if kind is dict else 'array'}")
    for name, labels in index["axes"].items():
        if not isinstance(labels, list) or not labels:
            raise validate.fail(source, f"axes.{name}", "expected a non-empty list of labels")
    expected = math.prod(len(labels) for labels in index["axes"].values())
    if len(index["tasks"]) != expected:
        raise validate.fail(source, "tasks", f"{len(index['tasks'])} tasks for a grid of {expected} points")
    for i, task in enumerate(index["tasks"]):
        where = f"tasks[{i}]"
        if not isinstance(task, dict) or not all(isinstance(task.get(k), str) for k in ("id", "file")) \
                or not all(isinstance(task.get(k), dict) for k in ("point", "run")):
            raise validate.fail(source, where, "expected an object with id, file, point and run")
        parts = Path(task["file"]).parts
        if len(parts) != 2 or parts[0] != TASK_FOLDER or parts[1] in ("..", ".") or not parts[1].endswith(".h5"):
            raise validate.fail(source, f"{where}.file", f"expected {TASK_FOLDER}/<name>.h5, found {task['file']!r}")
    return index


def _task_layout(index: dict) -> tuple[int, list[float], int, list[str] | None]:
    """chips, times, rounds and, when every task runs several drift compensations (a list in
    the sweep's base config, not a grid axis), their names (else None: no such dimension)."""
    cfg = index["config"]
    names = None
    if "drift_compensation" not in index["axes"]:
        names = parse_compensations(cfg.get("drift_compensation", "none"), "index.json", "config.drift_compensation")
    return int(cfg["chips"]), [float(t) for t in cfg["t"]], int(cfg["rounds"]), names if names and len(names) > 1 else None


def _task_arrays(path: str, layers: list[str], chips: int, times: list[float], reps: int,
                 compensations: list[str] | None = None) -> dict:
    """One task file as dense arrays: accuracy[chip, t, rep], metrics[layer, chip, t, rep]
    (with a leading drift_compensation axis after layer when `compensations` is given; NaN
    where the file has no such layer or round)."""
    import h5py

    shape = (*((len(compensations),) if compensations else ()), chips, len(times), reps)
    out = {"accuracy": np.full(shape, np.nan), "reference_accuracy": np.array(np.nan)}
    out.update({m: np.full((len(layers), *shape), np.nan) for m in METRICS})
    check_results_file(path, check=False)  # open_sweep ran the checking process on every task file
    with h5py.File(path, "r") as f:
        out["reference_accuracy"] = np.array(float(f["reference_accuracy"][()]))
        coords = round_coordinates(f)
        slots = round_slots(coords["chip"], coords["t"], times, reps, coords["drift_compensation"], compensations)
        acc = f["accuracy"][()]
        for r, slot in enumerate(slots):
            out["accuracy"][slot] = acc[r]
        for li, name in enumerate(layers):
            if name not in f["layers"]:
                continue
            for metric in METRICS:
                values = f["layers"][name][metric][()]
                for r, slot in enumerate(slots):
                    out[metric][(li, *slot)] = values[r]
    return out


def round_slots(chips: np.ndarray, ts: np.ndarray, times: list[float], reps: int,
                 round_compensation: Sequence[str] | None = None,
                 compensations: Sequence[str] | None = None) -> list[tuple[int, ...]]:
    """(chip, t index, repetition) of every round in file order; with `compensations`,
    (compensation index, chip, t index, repetition)."""
    seen: dict[tuple, int] = {}
    slots = []
    t_index = {float(t): i for i, t in enumerate(times)}
    position = {name: i for i, name in enumerate(compensations or ())}
    if round_compensation is None:
        round_compensation = [None] * len(chips)
    for chip, t, name in zip(chips.tolist(), ts.tolist(), round_compensation):
        ti = t_index[float(t)]
        key = ((position[name],) if compensations else ()) + (int(chip), ti)
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k >= reps:
            where = f" under drift compensation {name}" if compensations else ""
            raise ValueError(f"more than {reps} rounds for chip {chip} at t={t}{where}")
        slots.append(key + (k,))
    return slots


def _sweep_layers(folder: Path, index: dict) -> list[str]:
    """Layer names in network order; the union over models when the model is a grid axis."""
    import h5py

    names: list[str] = []
    seen_models = set()
    for task in index["tasks"]:
        model = task["run"].get("model")
        path = folder / task["file"]
        if model in seen_models or not path.is_file():
            continue
        seen_models.add(model)
        check_results_file(path, check=False)
        with h5py.File(path, "r") as f:
            order = sorted(f["layers"].keys(), key=lambda n: int(f["layers"][n].attrs["index"]))
        names += [n for n in order if n not in names]
    return names


def open_sweep(folder, lazy: bool | None = None) -> "xarray.Dataset":
    """A sweep folder as one Dataset with dims (<grid axes>..., chip, t, rep) for accuracy and
    (<grid axes>..., layer, chip, t, rep) for the metrics; ``done`` says which grid points have a
    file (the others are NaN, so a running sweep can be looked at).  lazy: dask arrays with one
    block per task file (default: lazy when the sweep has more than 64 tasks)."""
    xr = xarray_module()
    folder = Path(folder)
    index = read_index(folder)
    # Every task file through the checking process at once (one process start, not one per file).
    _core.check_results_files([os.fspath(folder / t["file"]) for t in index["tasks"] if (folder / t["file"]).is_file()])
    axes = index["axes"]
    chips, times, reps, compensations = _task_layout(index)
    layers = _sweep_layers(folder, index)
    tasks = index["tasks"]
    lazy = len(tasks) > 64 if lazy is None else lazy
    grid_shape = tuple(len(v) for v in axes.values())
    grid_dims = tuple(axes)
    comp_shape, comp_dims = ((len(compensations),), ("drift_compensation",)) if compensations else ((), ())
    per_task = {"accuracy": (*comp_shape, chips, len(times), reps), "reference_accuracy": ()}
    per_task.update({m: (len(layers), *comp_shape, chips, len(times), reps) for m in METRICS})
    done = np.array([(folder / t["file"]).is_file() for t in tasks])

    columns = _task_columns(folder, tasks, done, layers, chips, times, reps, compensations, per_task, lazy)
    data = {}
    for name, shape in per_task.items():
        stacked = _stack(columns[name], lazy).reshape(grid_shape + shape)
        dims = grid_dims + (("layer",) if name in METRICS else ()) + (() if name == "reference_accuracy"
                                                                           else comp_dims + ("chip", "t", "rep"))
        data[name] = (dims, stacked)
    data["done"] = (grid_dims, done.reshape(grid_shape))
    coords = {name: labels for name, labels in axes.items()}
    coords.update({"layer": layers, "chip": np.arange(chips), "t": np.array(times), "rep": np.arange(reps)})
    if compensations:
        coords["drift_compensation"] = list(compensations)
    ds = xr.Dataset(data, coords=coords, attrs={"folder": os.fspath(folder), "config": index["config"]})
    ds["t"].attrs["units"] = "s"
    ds["file"] = (grid_dims, np.array([t["file"] for t in tasks], dtype=object).reshape(grid_shape))
    return ds


def _task_columns(folder, tasks, done, layers, chips, times, reps, compensations, per_task, lazy) -> dict:
    columns: dict[str, list] = {name: [] for name in per_task}
    for task, exists in zip(tasks, done):
        if not exists:
            for name, shape in per_task.items():
                columns[name].append(np.full(shape, np.nan))
            continue
        path = os.fspath(folder / task["file"])
        if lazy:
            dask = require("dask", "open_sweep(lazy=True)")
            da = require("dask.array", "open_sweep(lazy=True)")

            arrays = dask.delayed(_task_arrays, pure=True)(path, layers, chips, times, reps, compensations)
            for name, shape in per_task.items():
                columns[name].append(da.from_delayed(arrays[name], shape, dtype=np.float64))
        else:
            arrays = _task_arrays(path, layers, chips, times, reps, compensations)
            for name in per_task:
                columns[name].append(arrays[name])
    return columns


def _stack(blocks: list, lazy: bool):
    if lazy:
        da = require("dask.array", "lazy arrays")

        return da.stack([da.asarray(b) for b in blocks])
    return np.stack(blocks)
