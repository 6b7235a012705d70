"""``aimcemu.analysis``: results files and whole sweeps as xarray objects, and the studies on them.

    from aimcemu import analysis
    run = analysis.open_run("results/run.h5")            # accuracy[round], snr_db[layer, round], ...
    sw = analysis.open_sweep("results/drift")             # accuracy[<grid axes>, chip, t, rep]
    acc = analysis.accuracy_vs_t(sw)                      # mean and 95 % CI over chips, per t
    hist = analysis.activation_histograms("results/run.h5", "stem")
    err = analysis.error_stats("results/run.h5")          # mean and std of noisy - reference
    ties = analysis.prediction_ties("results/run.h5")     # tied logits; accuracy under any tie-break
    table = analysis.layer_sensitivity(noise={"model": "pcm_like"}, t=[86400], chips=8, output="sens")

Opening files and sweep folders is aimcemu.results (open_run, open_sweep and round_coordinates
are also here); this module holds the statistics and studies on them.  Activations stay on disk
and are read one round at a time.  Definitions of the metrics: docs/hdf5_layout.md; this
module: docs/analysis.md.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np

from . import modelfile, validate
from ._optional import require
from .results import (METRICS, checked_layer_names, coordinates_of, open_checked, open_layer, open_run, open_sweep,
                      read_errors_named, round_coordinates, round_coords, round_slots, xarray_module)
from .sweeps import sweep

__all__ = ["open_run", "open_layer", "open_sweep", "round_coordinates", "error_stats", "activation_histograms",
           "prediction_ties", "accuracy_vs_t", "run_as_grid", "snr_over_t", "layer_sensitivity", "rank_layers", "format_table",
           "student_t_quantile", "interval_over_chips", "METRICS"]

# --- one run ------------------------------------------------------------------------------------
def error_stats(path, layers=None) -> "xarray.Dataset":
    """Mean and standard deviation of the activation error (noisy - reference, in int8 codes)
    per layer and round, over all images and elements; exact sums in int64.  Memory: the layer's
    int8 reference and one int8 round, plus fixed-size chunks for the arithmetic (never an int64
    copy of a whole round).  layers: names, or None for every layer with stored activations."""
    import h5py

    xr = xarray_module()
    info, file = open_checked(path)
    with file, h5py.File(file, "r") as f:
        names = checked_layer_names(info, layers, os.fspath(path), stored_only=True)
        rounds = len(info["chip"])
        mean = np.full((len(names), rounds), np.nan)
        std = np.full((len(names), rounds), np.nan)
        for i, name in enumerate(names):
            group = f["layers"][name]
            ref = _read(group, "reference", (), path).reshape(-1)
            n = ref.size
            for r in range(rounds):
                total, squares = _error_sums(_read(group, "activations", r, path).reshape(-1), ref)
                mean[i, r] = total / n if n else np.nan
                std[i, r] = math.sqrt(max(squares / n - (total / n) ** 2, 0.0)) if n else np.nan
    coords = {"layer": names, **round_coords(coordinates_of(info))}
    return xr.Dataset({"error_mean": (("layer", "round"), mean), "error_std": (("layer", "round"), std)},
                      coords=coords)


# Elements per step of error_stats' and activation_histograms' arithmetic: bounds their
# temporaries (int16 and int32 errors, bincount's index copy) at a few tens of MiB.
CHUNK_ELEMENTS = 1 << 22


def _chunks(flat: np.ndarray):
    """Consecutive slices (views) of a 1-D array, CHUNK_ELEMENTS long."""
    for start in range(0, flat.size, CHUNK_ELEMENTS):
        yield flat[start:start + CHUNK_ELEMENTS]


def _error_sums(noisy: np.ndarray, ref: np.ndarray) -> tuple[int, int]:
    """Exact sum and sum of squares of noisy - ref (flat int8 arrays of one size): the errors
    lie in -255..255 (int16) and their squares below 2^16 (int32); the sums are int64."""
    total = squares = 0
    for a, b in zip(_chunks(noisy), _chunks(ref)):
        err = a.astype(np.int16) - b
        total += int(err.sum(dtype=np.int64))
        wide = err.astype(np.int32)
        squares += int(np.multiply(wide, wide, out=wide).sum(dtype=np.int64))
    return total, squares


def _value_counts(values: np.ndarray) -> np.ndarray:
    """Counts of each int8 value -128..127 in a flat int8 array, in that order."""
    counts = np.zeros(256, np.int64)
    for chunk in _chunks(values):
        counts += np.bincount(chunk.view(np.uint8) ^ np.uint8(0x80), minlength=256)  # int8 v -> v + 128
    return counts


def activation_histograms(path, layers=None, rounds: Sequence[int] | None = None) -> "xarray.Dataset":
    """Counts of each int8 value (-128..127) of the reference and of the noisy activations
    (summed over the chosen rounds, default all) per layer: reference[layer, value],
    noisy[layer, value]; both sum to images x elements (x rounds for noisy)."""
    import h5py

    xr = xarray_module()
    info, file = open_checked(path)
    with file, h5py.File(file, "r") as f:
        names = checked_layer_names(info, layers, os.fspath(path), stored_only=True)
        chosen = _checked_rounds(rounds, len(info["chip"]), os.fspath(path))
        ref_counts = np.zeros((len(names), 256), np.int64)
        noisy_counts = np.zeros((len(names), 256), np.int64)
        for i, name in enumerate(names):
            group = f["layers"][name]
            ref_counts[i] = _value_counts(_read(group, "reference", (), path).reshape(-1))
            for r in chosen:
                noisy_counts[i] += _value_counts(_read(group, "activations", r, path).reshape(-1))
    return xr.Dataset({"reference": (("layer", "value"), ref_counts), "noisy": (("layer", "value"), noisy_counts)},
                      coords={"layer": names, "value": np.arange(-128, 128)}, attrs={"rounds": len(chosen)})


# What prediction_ties counts per round (and, prefixed reference_, of the reference).
TIE_FIELDS = ("tied", "accuracy_low", "accuracy_high", "accuracy_expected")


def prediction_ties(path) -> "xarray.Dataset":
    """How much of each accuracy is tie-breaking.  Accuracy is the argmax of the int8 output layer
    with the first maximum winning, and int8 logits tie often (most of all under noise, where
    they saturate at 127): then the class order decides.  Per round, over the images:

    tied               share whose largest logit is shared by 2+ classes
    accuracy_low       every tie broken against the label (the label is the only maximum)
    accuracy_high      the label wins whenever it is among the tied maxima
    accuracy_expected  a uniform random tie-break: sum of 1/k where the label is among k maxima
    accuracy           the stored accuracy (first maximum), within [low, high]

    and the same of the noise-free reference as scalars (reference_tied, ...,
    reference_accuracy, as open_run gives it); a digital run has no rounds (round has length 0).
    The logits are read one round at a time.  Stored predictions that are not the first maximum
    of their logits are a FormatError naming the file and the field (`predictions`,
    `reference_predictions`); the file's check refuses a file without logits."""
    import h5py

    xr = xarray_module()
    source = os.fspath(path)
    info, file = open_checked(path)
    labels = np.asarray(info["labels"], dtype=np.int64)
    rounds = len(info["chip"])
    per_round = {name: np.zeros(rounds) for name in TIE_FIELDS}
    per_round["accuracy"] = np.asarray(info["accuracy"], dtype=np.float64)
    with file, h5py.File(file, "r") as f:
        reference = _ties_of(_read_root(f, "reference_logits", (), source),
                             _read_root(f, "reference_predictions", (), source), labels, source,
                             "reference_predictions")
        reference["accuracy"] = float(info["reference_accuracy"])
        for r in range(rounds):
            counted = _ties_of(_read_root(f, "logits", r, source), _read_root(f, "predictions", r, source), labels,
                               source, "predictions", r)
            for name in TIE_FIELDS:
                per_round[name][r] = counted[name]
    data = {name: (("round",), values) for name, values in per_round.items()}
    data.update({f"reference_{name}": ((), value) for name, value in reference.items()})
    return xr.Dataset(data, coords=round_coords(coordinates_of(info)),
                      attrs={"path": source, "images": len(labels)})


def _ties_of(logits: np.ndarray, predictions: np.ndarray, labels: np.ndarray, source: str, field: str,
             round_index: int | None = None) -> dict[str, float]:
    """TIE_FIELDS of one round's logits [image, class] against the labels, after checking that
    the stored predictions are the first maximum of each image's logits."""
    _check_first_maximum(logits, predictions, source, field, round_index)
    images = len(labels)
    maxima = logits == logits.max(axis=1, keepdims=True)
    k = maxima.sum(axis=1)                                 # classes sharing each image's largest logit
    label_is_a_maximum = maxima[np.arange(images), labels]
    # The sum of 1/k over images whose label is among the maxima, exact from the counts per k,
    # so that the value is the correctly rounded share whatever the image order.
    with_label = np.bincount(k[label_is_a_maximum], minlength=logits.shape[1] + 1)
    expected = sum((Fraction(int(count), ties) for ties, count in enumerate(with_label) if count), Fraction(0))
    return {"tied": _share(int((k > 1).sum()), images),
            "accuracy_low": _share(int((label_is_a_maximum & (k == 1)).sum()), images),
            "accuracy_high": _share(int(label_is_a_maximum.sum()), images),
            "accuracy_expected": _share(expected, images)}


def _share(count, images: int) -> float:
    """count / images as the writer computes accuracy (0 when there are no images)."""
    return float(count / images) if images else 0.0


def _check_first_maximum(logits: np.ndarray, predictions: np.ndarray, source: str, field: str,
                         round_index: int | None) -> None:
    """The writer stores argmax with the first maximum winning; predictions that differ from it
    (an edited or foreign file) would make every tie count here wrong.  The file's check reads
    no logits, so this is the first comparison of the two."""
    first = logits.argmax(axis=1)
    wrong = np.flatnonzero(first != predictions)
    if wrong.size:
        i = int(wrong[0])
        at = f"[{round_index}, {i}]" if round_index is not None else f"[{i}]"
        logits_field = "logits" if round_index is not None else "reference_logits"
        raise validate.fail(source, field, f"{field}{at} is class {int(predictions[i])}, but the first maximum of "
                                           f"{logits_field}{at} is class {int(first[i])} "
                                           f"({wrong.size} image(s) disagree)")


def _read_root(f, dataset: str, where, source: str) -> np.ndarray:
    """f[dataset][where] of a results file's root; a damaged chunk (the check reads no logits)
    is a FormatError naming the file and the dataset."""
    with read_errors_named(source, dataset):
        return f[dataset][where]


def _read(group, dataset: str, where, path) -> np.ndarray:
    """group[dataset][where] read with h5py; a damaged chunk (the check reads no activations)
    becomes a FormatError naming the file and the dataset instead of h5py's bare OSError."""
    with read_errors_named(os.fspath(path), f"{group.name.lstrip('/')}/{dataset}"):
        return group[dataset][where]


def _checked_rounds(rounds, count: int, source: str) -> list[int]:
    """activation_histograms' rounds: None (every round) or distinct round positions 0..count-1;
    a negative one is refused rather than counted from the end, a repeated one rather than
    counted twice."""
    if rounds is None:
        return list(range(count))
    chosen = [rounds] if isinstance(rounds, (int, np.integer)) else list(rounds)
    for r in chosen:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < count:
            raise ValueError(f"activation_histograms: round {r!r} is not a round of {source} (rounds 0..{count - 1})"
                             if count else f"activation_histograms: {source} has no noisy rounds (a digital run)")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"activation_histograms: rounds {chosen} name a round twice")
    return [int(r) for r in chosen]


# --- studies ------------------------------------------------------------------------------------
def student_t_quantile(probability: float, dof: int) -> float:
    stats = require("scipy.stats", "confidence intervals")

    return float(stats.t.ppf(probability, dof))


def _student_t_quantiles(probability: float, dofs: np.ndarray) -> np.ndarray:
    """student_t_quantile for an array of degrees of freedom (any shape, empty included)."""
    stats = require("scipy.stats", "confidence intervals")

    return np.asarray(stats.t.ppf(probability, np.asarray(dofs, dtype=np.float64)), dtype=np.float64)


def _check_confidence(confidence) -> None:
    """A confidence level is a probability: 95 (a percentage by mistake) would give NaN bounds."""
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)) \
            or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be a probability in (0, 1), e.g. 0.95; got {confidence!r}")


def interval_over_chips(per_chip: np.ndarray, confidence: float = 0.95) -> dict:
    """mean, std, n, ci_low and ci_high of per-chip accuracies (NaN left out) with
    accuracy_vs_t's convention (one implementation: _over_chips)."""
    xr = xarray_module()
    out = _over_chips(xr.DataArray(np.asarray(per_chip, dtype=np.float64), dims="chip"), confidence)
    return {name: (int(out[name]) if name == "n" else float(out[name])) for name in ("mean", "std", "n", "ci_low", "ci_high")}


def _over_chips(per_chip, confidence: float) -> "xarray.Dataset":
    """The convention of every accuracy interval: over the `chip` dimension of per-chip accuracies
    (NaN chips left out) mean, sample std (ddof=1), n and the Student-t interval
    mean +- t_{(1+c)/2, n-1} * std / sqrt(n), clipped to [0, 1] (an accuracy is a proportion);
    with one chip std and the interval are NaN (no spread between chips to estimate)."""
    xr = xarray_module()
    _check_confidence(confidence)
    n = per_chip.notnull().sum("chip")
    mean = per_chip.mean("chip")
    std = per_chip.std("chip", ddof=1).where(n > 1)
    quantile = xr.DataArray(_student_t_quantiles((1 + confidence) / 2, np.maximum(np.asarray(n) - 1, 1)),
                            dims=n.dims, coords=n.coords)
    half = quantile * std / np.sqrt(n)
    return xr.Dataset({"mean": mean, "std": std, "n": n,
                       "ci_low": (mean - half).clip(0.0, 1.0), "ci_high": (mean + half).clip(0.0, 1.0)})


def accuracy_vs_t(ds, confidence: float = 0.95) -> "xarray.Dataset":
    """Accuracy per t with a confidence interval over chips: each chip's accuracy is first
    averaged over its repeated rounds; then mean, sample std (ddof=1), n and the Student-t
    interval mean +- t_{(1+c)/2, n-1} * std / sqrt(n) over chips, clipped to [0, 1] (an accuracy
    is a proportion).  NaN chips (e.g. of unfinished tasks) are left out; with one chip std and
    the interval are NaN (no spread between chips to estimate).  Works on open_run and open_sweep
    Datasets; a run without noisy rounds (digital) or a confidence outside (0, 1) is a ValueError."""
    _check_confidence(confidence)
    source = ds.attrs.get("path") or ds.attrs.get("folder") or "this run"
    if "rep" not in ds.dims:  # a single run: regroup rounds by (chip, t)
        ds = run_as_grid(ds)
    if ds.sizes["rep"] == 0:
        raise ValueError(f"accuracy_vs_t: {source} has no noisy rounds (a digital run): no accuracy over t")
    out = _over_chips(ds["accuracy"].mean("rep"), confidence)
    out.attrs["confidence"] = confidence
    if "reference_accuracy" in ds:
        out["reference_accuracy"] = ds["reference_accuracy"]
    return out


def run_as_grid(run) -> "xarray.Dataset":
    """A run's rounds rearranged to [chip, t, rep] (the layout open_sweep gives); a run over
    several drift compensations gets [drift_compensation, chip, t, rep], in the run's order."""
    xr = xarray_module()
    chips = sorted(set(run["chip"].values.tolist()))
    times = sorted(set(run["t"].values.tolist()))
    names = list(dict.fromkeys(run["drift_compensation"].values.tolist()))
    compensations = names if len(names) > 1 else None
    counts: dict = {}
    for key in zip(run["drift_compensation"].values.tolist(), run["chip"].values.tolist(), run["t"].values.tolist()):
        counts[key] = counts.get(key, 0) + 1
    reps = max(counts.values(), default=0)
    slots = round_slots(run["chip"].values, run["t"].values, times, reps, run["drift_compensation"].values,
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
    """Per-layer SNR (dB) per t: the mean in dB over chips and repetitions of the finite rounds.
    The edge cases of a round's SNR (docs/hdf5_layout.md) decide when there is no such mean:
    -inf (the reference all zero, the output not: the layer's signal lost) makes the result -inf
    whatever the other rounds give; +inf (a round equal to the reference) is left out of the
    mean, and only when every round is exact is the result +inf.  NaN: no round (a grid point
    whose task has not run)."""
    xr = xarray_module()
    if "rep" not in ds.dims:
        ds = run_as_grid(ds)
    snr = ds["snr_db"]
    over = ("chip", "rep")
    finite_mean = snr.where(np.isfinite(snr)).mean(over)
    lost = (snr == -np.inf).any(over)
    exact = (snr == np.inf).any(over)
    return xr.where(lost, -np.inf, xr.where(finite_mean.notnull(), finite_mean, xr.where(exact, np.inf, np.nan)))


def layer_sensitivity(model=None, data=None, *, noise=None, t=(86400.0,), chips: int = 8, rounds: int = 1,
                      seed: int = 0, drift_compensation: str = "global", output=None, layers=None,
                      executor=None, workers: int | None = None, progress: bool = True):
    """Put each conv/linear layer alone on AIMC (every other layer digital), run it over `chips`
    chips at the times `t`, and rank the layers by the accuracy they cost.

    Returns a pandas DataFrame, most sensitive layer first, with per layer: accuracy mean and
    95 % CI over chips (averaged over t), accuracy_drop (reference - mean), and the SNR of the
    layer's own output and of the network's output (dB, means over chips and t).  The runs go
    through aimcemu.sweep into `output` (a sweep folder; resumable)."""
    pd = require("pandas", "layer_sensitivity")

    model_path, _ = modelfile.locate_inputs(model, data)
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
        interval = interval_over_chips(ds["accuracy"].sel(mapping=name).mean(("t", "rep")).values)
        mean = interval["mean"]
        reference = float(ds["reference_accuracy"].sel(mapping=name))
        rows.append({"layer": name, "accuracy": mean, "ci_low": interval["ci_low"], "ci_high": interval["ci_high"],
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
