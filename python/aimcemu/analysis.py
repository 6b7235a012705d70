"""``aimcemu.analysis``: results files and whole sweeps as xarray objects, and the studies on them.

    from aimcemu import analysis
    run = analysis.open_run("results/run.h5")            # accuracy[round], snr_db[layer, round], ...
    sw = analysis.open_sweep("results/drift")             # accuracy[<grid axes>, chip, t, rep]
    acc = analysis.accuracy_vs_t(sw)                      # mean and 95 % CI over chips, per t
    hist = analysis.activation_histograms("results/run.h5", "stem")
    err = analysis.error_stats("results/run.h5")          # mean and std of noisy - reference
    table = analysis.layer_sensitivity(noise={"model": "pcm_like"}, t=[86400], chips=8, output="sens")

Metrics and coordinates are read with h5py (one open per file, not one per group); activations
stay on disk and are read one round at a time.  ``open_sweep(lazy=True)`` builds dask arrays
with one block per task file, so a sweep larger than memory opens instantly and reductions
stream through the files.  Definitions of the metrics: docs/hdf5_layout.md; this module:
docs/analysis.md.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

METRICS = ("snr_db", "cosine", "mismatch_rate")


def _xr():
    import xarray

    return xarray


# --- one run ------------------------------------------------------------------------------------
def round_coordinates(f) -> dict[str, np.ndarray]:
    """The round coordinates of an open results file (h5py File or layer group): round
    (0..R-1), chip, t, niu_round and drift_compensation (str)."""
    return {"round": f["round"][()], "chip": f["chip"][()], "t": f["t"][()], "niu_round": f["niu_round"][()],
            "drift_compensation": np.array(f["drift_compensation"].asstr()[()], dtype=object)}


def check_results_file(path, check: bool = True) -> dict:
    """Validates a results file before anything reads it (the C++ reader, _core.read_results):
    not HDF5, truncated, another format or version, a missing or inconsistent field, a config
    that is not JSON: FormatError naming the file and the field.  Returns what it read.
    check=False: the file already passed the checking process (_core.check_results_files)."""
    from . import _core

    source = os.fspath(path)
    info = _core.read_results(source, check)
    try:
        json.loads(info["config"])
    except ValueError as exc:
        raise _core.FormatError(f"{source}: field 'config': not valid JSON ({exc})") from None
    return info


def _round_coords(f) -> dict:
    """round_coordinates as xarray coordinate specs on the round dimension."""
    values = round_coordinates(f)
    return {"round": values.pop("round"), **{name: ("round", v) for name, v in values.items()}}


def open_run(path) -> "xarray.Dataset":
    """A results file as a Dataset: accuracy[round] (round = 0..R-1) with chip, t, niu_round and
    drift_compensation coordinates, the per-layer metrics [layer, round], reference_accuracy, and
    the file's config (attrs["config"], a dict)."""
    import h5py

    xr = _xr()
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
        coords = {**_round_coords(f), "layer": layers,
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
    return _xr().open_dataset(path, group=f"layers/{layer}", engine="h5netcdf",
                              chunks={"round": 1} if chunks is None else chunks)


def _layer_names(f, layers) -> list[str]:
    names = sorted(f["layers"].keys(), key=lambda n: int(f["layers"][n].attrs["index"]))
    if layers is None:
        return [n for n in names if bool(f["layers"][n].attrs["activations_stored"])]
    missing = [n for n in ([layers] if isinstance(layers, str) else layers) if n not in names]
    if missing:
        raise KeyError(f"{missing[0]!r} is not a layer of this results file (layers: {', '.join(names)})")
    return [layers] if isinstance(layers, str) else list(layers)


def _stored(group, name: str, path) -> None:
    if not bool(group.attrs["activations_stored"]):
        raise ValueError(f"{path}: layer '{name}' has no stored activations (run with layers='all' or name it)")


def error_stats(path, layers=None) -> "xarray.Dataset":
    """Mean and standard deviation of the activation error (noisy - reference, in int8 codes)
    per layer and round, over all images and elements; exact sums in int64, one round in memory
    at a time.  layers: names, or None for every layer with stored activations."""
    import h5py

    xr = _xr()
    with h5py.File(path, "r") as f:
        names = _layer_names(f, layers)
        rounds = len(f["round"])
        mean = np.full((len(names), rounds), np.nan)
        std = np.full((len(names), rounds), np.nan)
        for i, name in enumerate(names):
            group = f["layers"][name]
            _stored(group, name, path)
            ref = group["reference"][()].astype(np.int64)
            for r in range(rounds):
                err = group["activations"][r].astype(np.int64) - ref
                n = err.size
                total, squares = int(err.sum()), int((err * err).sum())
                mean[i, r] = total / n if n else np.nan
                std[i, r] = math.sqrt(max(squares / n - (total / n) ** 2, 0.0)) if n else np.nan
        coords = {"layer": names, **_round_coords(f)}
    return xr.Dataset({"error_mean": (("layer", "round"), mean), "error_std": (("layer", "round"), std)},
                      coords=coords)


def activation_histograms(path, layers=None, rounds: Sequence[int] | None = None) -> "xarray.Dataset":
    """Counts of each int8 value (-128..127) of the reference and of the noisy activations
    (summed over the chosen rounds, default all) per layer: reference[layer, value],
    noisy[layer, value]; both sum to images x elements (x rounds for noisy)."""
    import h5py

    xr = _xr()
    with h5py.File(path, "r") as f:
        names = _layer_names(f, layers)
        chosen = range(len(f["round"])) if rounds is None else list(rounds)
        ref_counts = np.zeros((len(names), 256), np.int64)
        noisy_counts = np.zeros((len(names), 256), np.int64)
        for i, name in enumerate(names):
            group = f["layers"][name]
            _stored(group, name, path)
            ref_counts[i] = np.bincount(group["reference"][()].ravel().astype(np.int64) + 128, minlength=256)
            for r in chosen:
                noisy_counts[i] += np.bincount(group["activations"][r].ravel().astype(np.int64) + 128, minlength=256)
    return xr.Dataset({"reference": (("layer", "value"), ref_counts), "noisy": (("layer", "value"), noisy_counts)},
                      coords={"layer": names, "value": np.arange(-128, 128)}, attrs={"rounds": len(chosen)})


# --- a sweep ------------------------------------------------------------------------------------
def _read_index(folder) -> dict:
    from .sweeps import read_index

    return read_index(folder)


def _task_layout(index: dict) -> tuple[int, list[float], int, list[str] | None]:
    """chips, times, rounds and, when every task runs several drift compensations (a list in
    the sweep's base config, not a grid axis), their names (else None: no such dimension)."""
    from .runner import parse_compensations

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
        slots = _round_slots(coords["chip"], coords["t"], times, reps, coords["drift_compensation"], compensations)
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


def _round_slots(chips: np.ndarray, ts: np.ndarray, times: list[float], reps: int,
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
    from . import _core

    xr = _xr()
    folder = Path(folder)
    index = _read_index(folder)
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
            import dask
            import dask.array as da

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
        import dask.array as da

        return da.stack([da.asarray(b) for b in blocks])
    return np.stack(blocks)


# --- studies ------------------------------------------------------------------------------------
def student_t_quantile(probability: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(probability, dof))


def accuracy_vs_t(ds, confidence: float = 0.95) -> "xarray.Dataset":
    """Accuracy per t with a confidence interval over chips: each chip's accuracy is first
    averaged over its repeated rounds; then mean, sample std (ddof=1), n and the Student-t
    interval mean +- t_{(1+c)/2, n-1} * std / sqrt(n) over chips (NaN chips, e.g. of unfinished
    tasks, are left out).  Works on open_run and open_sweep Datasets."""
    xr = _xr()
    if "rep" not in ds.dims:  # a single run: regroup rounds by (chip, t)
        ds = _run_as_grid(ds)
    per_chip = ds["accuracy"].mean("rep")
    n = per_chip.notnull().sum("chip")
    mean = per_chip.mean("chip")
    std = per_chip.std("chip", ddof=1)
    dof = np.maximum(np.asarray(n) - 1, 1)
    quantile = xr.DataArray(np.vectorize(lambda d: student_t_quantile((1 + confidence) / 2, int(d)))(dof),
                            dims=n.dims, coords=n.coords)
    half = quantile * std / np.sqrt(n)
    out = xr.Dataset({"mean": mean, "std": std, "n": n, "ci_low": mean - half, "ci_high": mean + half})
    out.attrs["confidence"] = confidence
    if "reference_accuracy" in ds:
        out["reference_accuracy"] = ds["reference_accuracy"]
    return out


def _run_as_grid(run) -> "xarray.Dataset":
    """A run's rounds rearranged to [chip, t, rep] (the layout open_sweep gives); a run over
    several drift compensations gets [drift_compensation, chip, t, rep], in the run's order."""
    xr = _xr()
    chips = sorted(set(run["chip"].values.tolist()))
    times = sorted(set(run["t"].values.tolist()))
    names = list(dict.fromkeys(run["drift_compensation"].values.tolist()))
    compensations = names if len(names) > 1 else None
    counts: dict = {}
    for key in zip(run["drift_compensation"].values.tolist(), run["chip"].values.tolist(), run["t"].values.tolist()):
        counts[key] = counts.get(key, 0) + 1
    reps = max(counts.values(), default=0)
    slots = _round_slots(run["chip"].values, run["t"].values, times, reps, run["drift_compensation"].values,
                         compensations)
    comp_shape, comp_dims = ((len(names),), ("drift_compensation",)) if compensations else ((), ())
    acc = np.full((*comp_shape, len(chips), len(times), reps), np.nan)
    metrics = {m: np.full((run.sizes["layer"], *acc.shape), np.nan) for m in METRICS}
    chip_pos = {c: i for i, c in enumerate(chips)}
    for r, slot in enumerate(slots):
        where = (*slot[:-3], chip_pos[slot[-3]], *slot[-2:])
        acc[where] = run["accuracy"].values[r]
        for m in METRICS:
            metrics[m][(slice(None), *where)] = run[m].values[:, r]
    dims = comp_dims + ("chip", "t", "rep")
    data = {"accuracy": (dims, acc), "reference_accuracy": run["reference_accuracy"]}
    data.update({m: (("layer",) + dims, v) for m, v in metrics.items()})
    coords = {"chip": chips, "t": times, "rep": np.arange(reps), "layer": run["layer"].values}
    if compensations:
        coords["drift_compensation"] = names
    return xr.Dataset(data, coords=coords)


def snr_over_t(ds) -> "xarray.DataArray":
    """Per-layer SNR (dB) per t, averaged over chips and repetitions (infinite values, i.e.
    rounds equal to the reference, are left out of the mean)."""
    if "rep" not in ds.dims:
        ds = _run_as_grid(ds)
    snr = ds["snr_db"].where(np.isfinite(ds["snr_db"]))
    return snr.mean(("chip", "rep"))


def layer_sensitivity(model=None, data=None, *, noise=None, t=(86400.0,), chips: int = 8, rounds: int = 1,
                      seed: int = 0, drift_compensation: str = "global", output=None, layers=None,
                      executor=None, workers: int | None = None, progress: bool = True):
    """Put each conv/linear layer alone on AIMC (every other layer digital), run it over `chips`
    chips at the times `t`, and rank the layers by the accuracy they cost.

    Returns a pandas DataFrame, most sensitive layer first, with per layer: accuracy mean and
    95 % CI over chips (averaged over t), accuracy_drop (reference - mean), and the SNR of the
    layer's own output and of the network's output (dB, means over chips and t).  The runs go
    through aimcemu.sweep into `output` (a sweep folder; resumable)."""
    import pandas as pd

    from . import modelfile, runner
    from .sweeps import sweep

    model_path, _ = runner._locate_inputs(model, data)
    net = modelfile.load_model(model_path)
    gemm = [l.name for l in net.layers if l.is_gemm]
    chosen = gemm if layers is None else list(layers)
    unknown = [n for n in chosen if n not in gemm]
    if unknown:
        raise ValueError(f"layer_sensitivity: '{unknown[0]}' is not a conv or linear layer (those: {', '.join(gemm)})")
    if output is None:
        raise ValueError("layer_sensitivity: output (a sweep folder) is required")
    config = {"output": os.fspath(output), "model": model, "data": data,
              "noise": noise or {"model": "pcm_like"}, "t": list(t), "chips": chips, "rounds": rounds,
              "seed": seed, "drift_compensation": drift_compensation, "layers": "none",
              "grid": {"mapping": {name: {"default": "digital", "layers": {_exact_pattern(name): "aimc"}}
                                   for name in chosen}}}
    result = sweep(config, executor=executor, workers=workers, progress=progress)
    ds = open_sweep(result.folder, lazy=False)
    rows = []
    output_layer = ds["layer"].values[-1]
    snr = snr_over_t(ds)
    for name in chosen:
        per_chip = ds["accuracy"].sel(mapping=name).mean(("t", "rep"))
        n = int(per_chip.notnull().sum())
        mean, std = float(per_chip.mean()), float(per_chip.std(ddof=1)) if n > 1 else 0.0
        half = student_t_quantile(0.975, max(n - 1, 1)) * std / math.sqrt(max(n, 1))
        reference = float(ds["reference_accuracy"].sel(mapping=name))
        rows.append({"layer": name, "accuracy": mean, "ci_low": mean - half, "ci_high": mean + half,
                     "accuracy_drop": reference - mean, "reference_accuracy": reference,
                     "own_snr_db": float(snr.sel(mapping=name, layer=name).mean()),
                     "output_snr_db": float(snr.sel(mapping=name, layer=output_layer).mean())})
    table = pd.DataFrame(rows).sort_values("accuracy_drop", ascending=False, kind="stable").reset_index(drop=True)
    table.attrs["folder"] = result.folder
    return table


def _exact_pattern(name: str) -> str:
    """A glob pattern (the mapping's syntax) that matches exactly this layer name."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def rank_layers(table) -> list[str]:
    """Layer names of a layer_sensitivity table, most sensitive first."""
    return list(table["layer"])


def format_table(rows: Iterable[dict], columns: Sequence[str]) -> str:
    """A plain-text table of dict rows (used by the CLI and the examples)."""
    rows = list(rows)
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
