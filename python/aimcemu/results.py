"""Results on disk: a run's HDF5 file and a sweep's folder, read as xarray objects.

The file formats are docs/hdf5_layout.md (a run) and docs/sweeps.md (a sweep folder:
index.json and tasks/<n>-<id>.h5).  aimcemu.sweeps writes sweep folders, aimcemu.analysis and
aimcemu.report read them through this module, so neither depends on the other.

A results file is user input: the HDF5 library can crash on a corrupt one, so every file is first
read by the checking process (formats/untrusted_file.hpp), and then this process reads the very
file that was checked, through the same descriptor, whatever the path names by then.  Metrics and
coordinates come from the core's reader (``_core.read_results``: everything but the activations);
the activations are read with h5py or xarray through a file object of the checked descriptor
(``open_checked``), and stay on disk until asked for.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import uuid
from functools import partial
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
# Task files read per call of the core's reader when a sweep folder is opened: what it returns of
# each (labels included) is held only for a batch at a time.
TASK_FILES_PER_READ = 128
# Task files per checking process when a lazy sweep's blocks are computed.  Computing any block of
# a group reads the whole group, and the group's dense arrays (about 3 x layers x rounds float64
# per file) stay in memory until every block taken from them is computed: 32 files keep that to a
# few MiB per group at 640 rounds and 7 layers, and the process start (~15 ms) small beside the
# reads of 32 files.
TASK_FILES_PER_LAZY_READ = 32


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


def round_coords(values: dict[str, np.ndarray]) -> dict:
    """Round coordinates (round_coordinates or coordinates_of) as xarray coordinate specs on the
    round dimension."""
    values = dict(values)
    return {"round": values.pop("round"), **{name: ("round", v) for name, v in values.items()}}


def coordinates_of(info: dict) -> dict[str, np.ndarray]:
    """round_coordinates from what _core.read_results read of a file (which checked that the
    file's round dataset holds the positions 0..R-1)."""
    rounds = len(info["chip"])
    return {"round": np.arange(rounds, dtype=np.int64), "chip": np.asarray(info["chip"], dtype=np.int64),
            "t": np.asarray(info["t"], dtype=np.float64), "niu_round": np.asarray(info["niu_round"], dtype=np.int64),
            "drift_compensation": np.array(list(info["drift_compensation"]), dtype=object)}


def check_results_file(path, check: bool = True) -> dict:
    """Validates a results file before anything reads it (the C++ reader, _core.read_results):
    not HDF5, truncated, another format or version, a missing or inconsistent field, a config
    that is not JSON: FormatError naming the file and the field.  Returns what it read (the
    file's config parsed, as "config_dict").  check=False skips the checking process."""
    return _with_config(_core.read_results(os.fspath(path), check), os.fspath(path))


def _check_results_files(paths: Sequence[str]) -> list[dict]:
    """check_results_file for many files at once: one checking process per batch of files, each
    file read through the descriptor that process read (_core.read_results_files); the first file
    that fails raises, naming the file and the field."""
    return [_with_config(info, path) for info, path in zip(_core.read_results_files(paths), paths)]


def open_checked(path) -> tuple[dict, io.BufferedReader]:
    """check_results_file(path), and a file object of the very file that was checked and read
    (h5py.File and xarray's h5netcdf engine take it), for reading the activations: a file renamed
    over the path since is not what is read.  The caller closes the file object."""
    source = os.fspath(path)
    descriptor, info = _core.files.open_checked_results(source)
    file = _CheckedFile(io.FileIO(descriptor, "rb"))
    try:
        return _with_config(info, source), file
    except BaseException:
        file.close()
        raise


class _CheckedFile(io.BufferedReader):
    """A checked results file's descriptor as a file object.  Closed quietly when it goes away:
    open_layer's Dataset reads through it lazily and has no hook to close it (xarray's close()
    closes the HDF5 file on it, not the file object), so only the garbage collector knows when
    nothing reads it any more."""

    def __del__(self):
        self.close()


def _with_config(info: dict, source: str) -> dict:
    """`info` (what the core's reader read of `source`) with its config parsed, as "config_dict":
    the one rule every reader of a results file applies, as the core's check does not parse it."""
    try:
        info["config_dict"] = json.loads(info["config"])
    except ValueError as exc:
        raise _core.FormatError(f"{source}: field 'config': not valid JSON ({exc})") from None
    except RecursionError:
        raise _core.FormatError(f"{source}: field 'config': JSON nested too deeply") from None
    if not isinstance(info["config_dict"], dict):
        raise _core.FormatError(f"{source}: field 'config': expected a JSON object")
    return info


def layers_of(info: dict) -> list[dict]:
    """The layers of a results file (what _core.read_results read of each) in network order."""
    return sorted(info["layers"], key=lambda layer: int(layer["index"]))


def open_run(path) -> "xarray.Dataset":
    """A results file as a Dataset: accuracy[round] (round = 0..R-1) with chip, t, niu_round and
    drift_compensation coordinates, the per-layer metrics [layer, round], reference_accuracy, and
    the file's config (attrs["config"], a dict)."""
    xr = xarray_module()
    info = check_results_file(path)
    layers = layers_of(info)
    rounds = len(info["chip"])
    data = {"accuracy": (("round",), np.asarray(info["accuracy"], dtype=np.float64)),
            "reference_accuracy": ((), float(info["reference_accuracy"]))}
    for metric in METRICS:
        data[metric] = (("layer", "round"), np.stack([np.asarray(l[metric], dtype=np.float64) for l in layers])
                        if layers else np.zeros((0, rounds)))
    coords = {**round_coords(coordinates_of(info)),
              "layer": [l["name"] for l in layers], "kind": ("layer", [l["kind"] for l in layers]),
              "activations_stored": ("layer", [bool(l["activations_stored"]) for l in layers])}
    attrs = {"model": info["model"], "path": os.fspath(path), "config": info["config_dict"]}
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["t"].attrs["units"] = "s"
    ds["snr_db"].attrs["units"] = "dB"
    return ds


@contextlib.contextmanager
def read_errors_named(source: str, field: str):
    """HDF5's read errors (OSError: a damaged compressed chunk, which the check does not read)
    as a FormatError naming the file and the dataset."""
    try:
        yield
    except OSError as exc:
        raise validate.fail(source, field, f"cannot be read ({exc})") from None


class _NamedReads:
    """An h5py dataset for dask.array.from_array whose read errors name the file and the dataset
    (read_errors_named): open_layer's blocks are read when computed, long after the open."""

    def __init__(self, dataset, source: str, field: str):
        self.dataset, self.source, self.field = dataset, source, field
        self.shape, self.dtype, self.ndim = dataset.shape, dataset.dtype, dataset.ndim

    def __getitem__(self, key):
        with read_errors_named(self.source, self.field):
            return self.dataset[key]


def open_layer(path, layer: str, chunks: dict | None = None) -> "xarray.Dataset":
    """One layer group (reference[image, y, x, channel], activations[round, ...], metrics) as a
    lazy dask-backed Dataset, one chunk per round (chunks: {dim: size}, -1 or absent for whole),
    read from the file that was checked (open_checked); the file stays open while the Dataset
    refers to it.  A block that cannot be read (a damaged chunk) raises a FormatError naming the
    file and the dataset when it is computed."""
    import h5py

    xr = xarray_module()
    da = require("dask.array", "open_layer")
    source = os.fspath(path)
    info, file = open_checked(path)
    try:
        checked_layer_names(info, layer, source)
        group_path = f"layers/{layer}"
        with read_errors_named(source, group_path):
            ds = xr.open_dataset(file, group=group_path, engine="h5netcdf", chunks=None)
            group = h5py.File(file, "r")[group_path]
        sizes = {"round": 1} if chunks is None else dict(chunks)
        for name, variable in ds.data_vars.items():
            field = f"{group_path}/{name}"
            blocks = tuple(n if sizes.get(dim, -1) in (-1, None) else sizes[dim]
                           for dim, n in zip(variable.dims, variable.shape))
            if group[name].dtype != variable.dtype:  # decoded by xarray (CF attributes): its own reads
                ds[name] = variable.chunk(dict(zip(variable.dims, blocks)))
                continue
            data = da.from_array(_NamedReads(group[name], source, field), chunks=blocks, name=False)
            ds[name] = variable.copy(data=data)
        return ds
    except BaseException:
        file.close()
        raise


def checked_layer_names(info: dict, layers, source: str, stored_only: bool = False) -> list[str]:
    """`layers` (a name or names; None: every layer with stored activations) checked against the
    layers of a results file (what _core.read_results read of it): KeyError naming the missing
    layer; with stored_only (or layers=None) ValueError for a layer without stored activations."""
    by_name = {l["name"]: l for l in layers_of(info)}
    if layers is None:
        return [name for name, l in by_name.items() if l["activations_stored"]]
    chosen = [layers] if isinstance(layers, str) else list(layers)
    missing = [name for name in chosen if name not in by_name]
    if missing:
        raise KeyError(f"{missing[0]!r} is not a layer of {source} (layers: {', '.join(by_name)})")
    unstored = [name for name in chosen if stored_only and not by_name[name]["activations_stored"]]
    if unstored:
        raise ValueError(f"{source}: layer '{unstored[0]}' has no stored activations (run with layers='all' or name it)")
    return chosen


def read_task_summary(path, check: bool = True) -> dict:
    """Accuracy per round with its chip, t, NIU round id and drift compensation, and the capped
    drift-compensation alphas, from a task's results file (small).  The file is validated as a
    whole (_core.read_results), so a broken task file is named in the error (a config that is not
    JSON too, as check_results_file refuses it); check=False when it already passed the checking
    process."""
    return task_summary_of(check_results_file(path, check), os.fspath(path))


def read_task_summaries(paths) -> list[dict]:
    """read_task_summary for many task files (a sweep's finished tasks when it resumes), checked as
    _check_results_files checks them: one checking process per batch of files."""
    paths = [os.fspath(p) for p in paths]
    return [task_summary_of(info, path) for info, path in zip(_check_results_files(paths), paths)]


def task_summary_of(info: dict, source: str) -> dict:
    """A task's summary from what _core.read_results read of its file `source`: what aimcemu.sweep
    returns and index.json stores per task (drift_alpha_capped: capped_alphas)."""
    return {"reference_accuracy": float(info["reference_accuracy"]),
            "accuracy": [float(v) for v in info["accuracy"]],
            "chip": [int(v) for v in info["chip"]], "t": [float(v) for v in info["t"]],
            "niu_round": [int(v) for v in info["niu_round"]],
            "drift_compensation": [str(v) for v in info["drift_compensation"]],
            "drift_alpha_capped": capped_alphas(info["config_dict"], source)}


# The fields of one capped alpha in a results file's config (RunSummary.drift_alpha_capped).
CAPPED_ALPHA_FIELDS = ("layer", "chip", "t", "alpha", "limit")


def capped_alphas(config: dict, source: str) -> list[dict]:
    """A results file's drift_alpha_capped (its config, parsed): the global-compensation alphas the
    NIU could not hold and ran at its limit instead, one {layer, chip, t, alpha, limit} each; []
    when the config has none (no alpha capped, or a file written before they were recorded).  The
    config is user input: a malformed entry is a FormatError naming `source` and the field."""
    entries = config.get("drift_alpha_capped", [])
    field = "config.drift_alpha_capped"
    if not isinstance(entries, list):
        raise validate.fail(source, field, f"expected a list, found {type(entries).__name__}")
    out = []
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict) or set(entry) != set(CAPPED_ALPHA_FIELDS):
            raise validate.fail(source, where, f"expected an object with {', '.join(CAPPED_ALPHA_FIELDS)}")
        if not isinstance(entry["layer"], str):
            raise validate.fail(source, f"{where}.layer", f"expected a layer name, found {entry['layer']!r}")
        if isinstance(entry["chip"], bool) or not isinstance(entry["chip"], int) or entry["chip"] < 0:
            raise validate.fail(source, f"{where}.chip", f"expected a chip number >= 0, found {entry['chip']!r}")
        for key in ("t", "alpha", "limit"):
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (key != "t" and value == 0):
                bound = ">= 0" if key == "t" else "> 0"
                raise validate.fail(source, f"{where}.{key}", f"expected a finite number {bound}, found {value!r}")
        if entry["alpha"] <= entry["limit"]:
            raise validate.fail(source, f"{where}.alpha", f"{entry['alpha']!r} is not above its limit "
                                                          f"{entry['limit']!r}: no capped alpha")
        out.append({"layer": entry["layer"], "chip": entry["chip"], "t": float(entry["t"]),
                    "alpha": float(entry["alpha"]), "limit": float(entry["limit"])})
    return out


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


class _SweepLayout:
    """What every task file of a sweep becomes: per-task array shapes (accuracy[chip, t, rep],
    metrics[layer, chip, t, rep], with a leading drift_compensation axis after layer when the
    tasks run several), the sweep's layer list and the round slots' axes."""

    def __init__(self, index: dict, layers: list[str]):
        self.chips, self.times, self.reps, self.compensations = _task_layout(index)
        self.layers = layers
        comp = (len(self.compensations),) if self.compensations else ()
        rounds = (*comp, self.chips, len(self.times), self.reps)
        self.shapes = {"accuracy": rounds, "reference_accuracy": ()}
        self.shapes.update({m: (len(layers), *rounds) for m in METRICS})
        self.shapes["activations_stored"] = (len(layers),)
        self.shapes["alpha_capped"] = (len(layers), self.chips, len(self.times))

    def dtype(self, name: str):
        return np.bool_ if name == "activations_stored" else np.float64

    def missing(self) -> dict:
        """A task without a file: NaN everywhere, no activations stored."""
        return {name: np.zeros(shape, bool) if name == "activations_stored" else np.full(shape, np.nan)
                for name, shape in self.shapes.items()}

    def arrays(self, info: dict, source: str) -> dict:
        """One task file (what _core.read_results read of `source`) as dense arrays (NaN where the
        file has no such layer or round; a layer the sweep's list lacks is left out).  A round
        outside the sweep's grid (a chip beyond its chips, a t not among its times, an unknown
        drift compensation, too many rounds at one chip and t) is a FormatError naming the file
        and the field: the core's check knows nothing of the sweep."""
        out = self.missing()
        out["reference_accuracy"] = np.array(float(info["reference_accuracy"]))
        out["alpha_capped"] = self.alpha_capped(info, source)
        coords = coordinates_of(info)
        slots = round_slots(coords["chip"], coords["t"], self.times, self.reps, coords["drift_compensation"],
                            self.compensations, chip_count=self.chips, source=source)
        at = tuple(np.array(slots, dtype=np.intp).reshape(len(slots), len(self.shapes["accuracy"])).T)
        out["accuracy"][at] = info["accuracy"]
        position = {name: i for i, name in enumerate(self.layers)}
        for layer in info["layers"]:
            li = position.get(layer["name"])
            if li is None:
                continue
            for metric in METRICS:
                out[metric][li][at] = layer[metric]
            out["activations_stored"][li] = bool(layer["activations_stored"]) and len(slots) > 0
        return out


    def alpha_capped(self, info: dict, source: str) -> np.ndarray:
        """[layer, chip, t]: alpha / limit of each global-compensation alpha the NIU capped
        (capped_alphas; > 1), 0 where the alpha it asked for ran (or the layer has none).  An
        entry at a chip or t outside the sweep's is a FormatError naming the file and the field."""
        ratio = np.zeros(self.shapes["alpha_capped"])
        position = {name: i for i, name in enumerate(self.layers)}
        t_index = {t: k for k, t in enumerate(self.times)}
        for i, entry in enumerate(capped_alphas(info["config_dict"], source)):
            where = f"config.drift_alpha_capped[{i}]"
            if entry["chip"] >= self.chips:
                raise validate.fail(source, f"{where}.chip", f"chip {entry['chip']} outside 0..{self.chips - 1} "
                                                             f"(the sweep runs {self.chips} chips)")
            if entry["t"] not in t_index:
                raise validate.fail(source, f"{where}.t", f"t = {entry['t']:g} s is not among the sweep's times "
                                                          f"({', '.join(f'{x:g}' for x in self.times)})")
            layer = position.get(entry["layer"])
            if layer is not None:  # a layer the sweep's list lacks is left out, as its metrics are
                ratio[layer, entry["chip"], t_index[entry["t"]]] = entry["alpha"] / entry["limit"]
        return ratio


def round_slots(chips: np.ndarray, ts: np.ndarray, times: list[float], reps: int,
                 round_compensation: Sequence[str] | None = None,
                 compensations: Sequence[str] | None = None, *, chip_count: int | None = None,
                 source: str = "<rounds>") -> list[tuple[int, ...]]:
    """(chip, t index, repetition) of every round in file order; with `compensations`,
    (compensation index, chip, t index, repetition).  Every round must fit: chip below
    `chip_count` (when given), t among `times`, its compensation among `compensations` (when
    given), at most `reps` rounds per slot; else FormatError naming `source` and the field."""
    seen: dict[tuple, int] = {}
    slots = []
    t_index = {float(t): i for i, t in enumerate(times)}
    position = {name: i for i, name in enumerate(compensations or ())}
    if round_compensation is None:
        round_compensation = [None] * len(chips)
    for r, (chip, t, name) in enumerate(zip(chips.tolist(), ts.tolist(), round_compensation)):
        if chip_count is not None and not 0 <= chip < chip_count:
            raise validate.fail(source, "chip", f"round {r}: chip {chip} outside 0..{chip_count - 1} "
                                                f"(the sweep runs {chip_count} chips)")
        if float(t) not in t_index:
            raise validate.fail(source, "t", f"round {r}: t = {t:g} s is not among the sweep's times "
                                             f"({', '.join(f'{x:g}' for x in times)})")
        if compensations and name not in position:
            raise validate.fail(source, "drift_compensation", f"round {r}: {name!r} is not among the sweep's "
                                                              f"drift compensations ({', '.join(compensations)})")
        key = ((position[name],) if compensations else ()) + (int(chip), t_index[float(t)])
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k >= reps:
            where = f" under drift compensation {name}" if compensations else ""
            raise validate.fail(source, "round", f"round {r}: more than {reps} rounds for chip {chip} "
                                                 f"at t = {t:g} s{where}")
        slots.append(key + (k,))
    return slots


def _first_files_of_models(folder: Path, tasks: list[dict], existing: set[str]) -> dict[str, dict]:
    """Each model's first task file (a grid over models has several), checked and read at once, by
    file name: the sweep's layer list comes from them, and their blocks from the same read."""
    firsts: dict = {}
    for task in tasks:
        model = task["run"].get("model")
        if model not in firsts and task["file"] in existing:
            firsts[model] = task["file"]
    files = list(dict.fromkeys(firsts.values()))
    outcomes = _read_each_checked([os.fspath(folder / f) for f in files])
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome  # the first broken file in task order, as one check at a time raised it
    return dict(zip(files, outcomes))


def _sweep_layers(first_files: dict[str, dict]) -> list[str]:
    """Layer names in network order; the union over models when the model is a grid axis."""
    names: list[str] = []
    for info in first_files.values():
        names += [l["name"] for l in layers_of(info) if l["name"] not in names]
    return names


def _read_each_checked(paths: list[str]) -> list:
    """What check_results_file gives for each path, or the exception it raises, in order.  The
    files go through the checking process together, each on its own account
    (_core.read_results_files with per_file): a file that fails gets the error (its name and field)
    that its own check gives, a sound file beside it still reads, and no file is read twice (a file
    that hangs the checking process costs its time limit once).  Only when that call fails as a
    whole (no checking process could be started, no descriptor left) is each file read on its own,
    for each to be named in its error."""
    try:
        outcomes = _core.read_results_files(paths, per_file=True)
    except Exception:
        return [_outcome(check_results_file, path) for path in paths]
    return [outcome if isinstance(outcome, BaseException) else _outcome(_with_config, outcome, path)
            for outcome, path in zip(outcomes, paths)]


def _outcome(function, *args):
    """function(*args), or the exception it raised (kept to be raised where that file is used)."""
    try:
        return function(*args)
    except Exception as exc:
        return exc


def open_sweep(folder, lazy: bool | None = None) -> "xarray.Dataset":
    """A sweep folder as one Dataset with dims (<grid axes>..., chip, t, rep) for accuracy and
    (<grid axes>..., layer, chip, t, rep) for the metrics; ``done`` says which grid points have a
    file (the others are NaN, so a running sweep can be looked at); ``activations_stored``
    (<grid axes>..., layer) which task files hold a layer's activations; ``alpha_capped``
    (<grid axes>..., layer, chip, t) alpha / limit where the NIU capped a global-compensation
    alpha (> 1; 0 where none was, NaN without a file).  Every task file is
    checked (the checking process) and read through the descriptor that was checked, once: each
    model's first file at the open (for the layer list and its own block).  lazy: dask arrays with
    one block per task file, the files read in groups of TASK_FILES_PER_LAZY_READ consecutive
    files, one checking process per group, when a block of the group is computed; a broken file
    fails its own block only, with the error of its own check (default: lazy when the sweep has more
    than 64 tasks); otherwise every file now, a batch of TASK_FILES_PER_READ files per checking
    process."""
    xr = xarray_module()
    folder = Path(folder)
    index = read_index(folder)
    tasks = index["tasks"]
    existing = {t["file"] for t in tasks if _is_task_file(folder / t["file"])}
    first_files = _first_files_of_models(folder, tasks, existing)
    layout = _SweepLayout(index, _sweep_layers(first_files))
    lazy = len(tasks) > 64 if lazy is None else lazy
    axes = index["axes"]
    grid_shape = tuple(len(v) for v in axes.values())
    grid_dims = tuple(axes)
    by_task = (_lazy_columns if lazy else _read_columns)(folder, tasks, existing, layout, first_files)
    comp_dims = ("drift_compensation",) if layout.compensations else ()
    data = {}
    for name, shape in layout.shapes.items():
        stacked = by_task[name].reshape(grid_shape + shape)
        if name == "activations_stored":
            dims = grid_dims + ("layer",)
        elif name == "alpha_capped":  # an alpha is per (layer, chip, t), whatever the compensation
            dims = grid_dims + ("layer", "chip", "t")
        else:
            dims = grid_dims + (("layer",) if name in METRICS else ()) + (
                () if name == "reference_accuracy" else comp_dims + ("chip", "t", "rep"))
        data[name] = (dims, stacked)
    data["done"] = (grid_dims, np.array([t["file"] in existing for t in tasks]).reshape(grid_shape))
    coords = {name: labels for name, labels in axes.items()}
    coords.update({"layer": layout.layers, "chip": np.arange(layout.chips), "t": np.array(layout.times),
                   "rep": np.arange(layout.reps)})
    if layout.compensations:
        coords["drift_compensation"] = list(layout.compensations)
    ds = xr.Dataset(data, coords=coords, attrs={"folder": os.fspath(folder), "config": index["config"]})
    ds["t"].attrs["units"] = "s"
    if "snr_db" in ds:   # as open_run and the task files say
        ds["snr_db"].attrs["units"] = "dB"
    ds["file"] = (grid_dims, np.array([t["file"] for t in tasks], dtype=object).reshape(grid_shape))
    return ds


def _is_task_file(path: Path) -> bool:
    """Whether a task's file is there: a regular file (a missing one is a task not done yet).  A
    symbolic link is refused: it could lead to another task's file, whose numbers would show under
    this grid point (resuming the sweep removes such a link and runs its task again)."""
    if path.is_symlink():
        raise validate.fail(os.fspath(path), "file", "is a symbolic link; a task's file is never read through one "
                                                     "(it could be another task's): delete it, or rerun the sweep, "
                                                     "which removes it and runs the task again")
    return path.is_file()


def _read_columns(folder: Path, tasks: list[dict], existing: set[str], layout: _SweepLayout,
                  already_read: dict[str, dict]) -> dict[str, np.ndarray]:
    """Every task's arrays, read now, stacked [task, ...]: the files a batch at a time
    (_core.read_results_files: one checking process per batch, each file read through the
    descriptor that was checked, so a file renamed over a task file meanwhile is never read); what
    the reader returns of a file is dropped once its arrays are made.  The files in `already_read`
    (each model's first) are not read again."""
    files = [f for f in dict.fromkeys(t["file"] for t in tasks) if f in existing]
    arrays = {}
    for start in range(0, len(files), TASK_FILES_PER_READ):
        batch = files[start:start + TASK_FILES_PER_READ]
        unread = [f for f in batch if f not in already_read]
        # the configs parsed as every reader of a results file parses them (a file whose config is
        # not JSON is refused, naming it, as open_run, a lazy read and a resume refuse it)
        infos = dict(zip(unread, _check_results_files([os.fspath(folder / f) for f in unread])))
        for name in batch:
            info = already_read.get(name) or infos.pop(name)
            arrays[name] = layout.arrays(info, os.fspath(folder / name))
    missing = layout.missing()
    return {name: np.stack([arrays.get(task["file"], missing)[name] for task in tasks]) for name in layout.shapes}


def _lazy_columns(folder: Path, tasks: list[dict], existing: set[str], layout: _SweepLayout,
                  already_read: dict[str, dict]) -> dict:
    """Every task's arrays as one dask array per variable, [task, ...], one block per task.  The
    files are read in groups of TASK_FILES_PER_LAZY_READ consecutive files (in task order), a group
    when one of its blocks is computed: one checking process per group (_task_group_arrays).  The
    files in `already_read` (each model's first, read at the open) are not read again.

    The arrays are built on one hand-written graph whose read tasks all of them share: stacking a
    dask array per task file (da.from_delayed, da.stack) made dask's graph optimisation of a
    reduction over 3,000 task files take longer than reading the files."""
    da = require("dask.array", "open_sweep(lazy=True)")

    token = uuid.uuid4().hex  # each open its own keys: its reads are of the files as they are now
    read_tasks: dict = {}
    source: dict[str, tuple] = {}  # task file -> (key of the task that reads it, position in its result)
    unread = [f for f in dict.fromkeys(t["file"] for t in tasks) if f in existing and f not in already_read]
    for number, start in enumerate(range(0, len(unread), TASK_FILES_PER_LAZY_READ)):
        group = unread[start:start + TASK_FILES_PER_LAZY_READ]
        key = (f"aimcemu-sweep-read-{token}", number)
        read_tasks[key] = (_task_group_arrays, [os.fspath(folder / f) for f in group], layout)
        source.update({name: (key, position) for position, name in enumerate(group)})
    for number, (name, info) in enumerate(already_read.items()):
        key = (f"aimcemu-sweep-first-{token}", number)
        read_tasks[key] = (partial(_already_read, [_outcome(layout.arrays, info, os.fspath(folder / name))]),)
        source[name] = (key, 0)
    missing = layout.missing()
    arrays = {}
    for variable, shape in layout.shapes.items():
        name = f"aimcemu-sweep-{variable}-{token}"
        graph = dict(read_tasks)
        for i, task in enumerate(tasks):
            block = (name, i) + (0,) * len(shape)
            read = source.get(task["file"])
            graph[block] = missing[variable][None] if read is None else (_block_of, read[0], read[1], variable)
        chunks = ((1,) * len(tasks),) + tuple((n,) for n in shape)
        arrays[variable] = da.Array(graph, name, chunks=chunks, dtype=layout.dtype(variable))
    return arrays


def _task_group_arrays(paths: list[str], layout: _SweepLayout) -> list:
    """A group of task files checked and read (_read_each_checked): each file's arrays, or the
    exception its check or its layout raised (raised by its own blocks only)."""
    return [outcome if isinstance(outcome, BaseException) else _outcome(layout.arrays, outcome, path)
            for outcome, path in zip(_read_each_checked(paths), paths)]


def _already_read(outcomes: list) -> list:
    return outcomes


def _block_of(outcomes: list, position: int, variable: str) -> np.ndarray:
    """One task's block of one variable ([1, ...]) from its group's read; a file that failed raises
    its own error here."""
    outcome = outcomes[position]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome[variable][None]
