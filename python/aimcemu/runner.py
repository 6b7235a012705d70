"""``aimcemu.run``: one inference study from model and data files to an HDF5 results file.

    summary = aimcemu.run()                        # the embedded default model, digital
    summary = aimcemu.run(mapping="all", noise={"model": "pcm_like"}, t=(0, 3600, 86400), chips=8,
                          drift_compensation=["none", "global"], output="pcm.h5")
    print(summary.format_accuracy_table())         # accuracy vs t per compensation: mean, std, min, max over chips

The run loads and validates both files, runs the noise-free reference bit-exactly on the PU
functional model (``_core.run_network``), then, when a mapping puts layers on AIMC, the noisy
rounds: for compensation in drift_compensation: for chip in range(chips): for t in t: for round
in range(rounds).  Each round goes through the emulation loop (``_core.niu.Emulator``,
emulator/emulator.hpp) as through the hardware's HBM: the bit-exact NIU model reads the AIMC layers'
clean region, writes their noisy INT8 weights for (seed, chip, round, t) into the back weight
buffers and publishes them; the PU model leases that round and runs the network from the leased
buffers; digital layers keep their clean weights.  Under several compensations the same (chip, t, round) gets the
same NIU draws; only the compensation factor alpha folded into the back-conversion differs.  Programming noise and drift exponents are keyed by (seed, chip, layer), read
noise by (seed, chip, layer, round) and not by t, so the same chip drifts from the same
programmed state and sweeps over t use common random numbers.  Everything (reference, rounds,
per-layer metrics, accuracy, the resolved configuration) goes into one results file
(docs/hdf5_layout.md), written atomically: on any error no output file is left.  Details and
the drift-compensation calibration are in docs/hybrid_runs.md.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import _core
from . import files
from . import modelfile
from . import validate
from .mapping import Mapping, Placement, resolve_noise

DEFAULTS = {"model": None, "data": None, "output": None, "backend": "fast", "threads": 0, "layers": "all",
            "mapping": None, "noise": None, "t": (0.0,), "chips": 1, "rounds": 1, "seed": 0,
            "drift_compensation": "none"}
DRIFT_COMPENSATIONS = ("none", "global")  # the results writer's codes (formats/results.hpp), in order

# NIU round id of the drift-compensation calibration readouts (reserved: noisy rounds use
# 0..rounds-1).  It fits the 32-bit round field of the NIU program.
CALIBRATION_ROUND = 2**32 - 1
# aimcemu.noise.GlobalDriftCompensation floors both readouts at this value.
READOUT_FLOOR = 1e-4

_TIME_UNITS = {"": 1.0, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "y": 365.0 * 86400.0}


@dataclass
class LayerSummary:
    name: str
    kind: str
    shape: tuple[int, int, int]
    stored: bool
    device: str = "digital"          # "digital" or "aimc"
    noise_model: str | None = None   # the AIMC layer's noise model name


@dataclass
class RunSummary:
    """What one run produced; ``os.fspath(summary)`` is the results file.

    Noisy rounds are listed in file order with their coordinates (round_chip, round_t,
    round_index = the NIU round id, round_compensation); ``drift_alpha[layer]`` is the [chip][t]
    global-compensation factor of each AIMC layer (all 1.0 when "global" is not among the
    compensations; rounds under "none" always use 1.0).  ``drift_compensation`` is the name, or
    the list of names when the run covers several."""
    path: str
    model: str
    images: int
    accuracy: float                 # top-1 of the noise-free reference
    round_accuracy: list[float]     # per noisy round (empty for a digital run)
    layers: list[LayerSummary] = field(default_factory=list)
    inference_s: float = 0.0
    write_s: float = 0.0
    round_chip: list[int] = field(default_factory=list)
    round_t: list[float] = field(default_factory=list)
    round_index: list[int] = field(default_factory=list)
    drift_alpha: dict[str, list[list[float]]] = field(default_factory=dict)
    drift_compensation: str | list[str] = "none"
    noise_s: float = 0.0
    round_compensation: list[str] = field(default_factory=list)

    def __fspath__(self) -> str:
        return self.path

    def compensations(self) -> list[str]:
        """The drift compensations of the run, in round order."""
        return [self.drift_compensation] if isinstance(self.drift_compensation, str) else list(self.drift_compensation)

    def accuracy_vs_t(self) -> list[dict]:
        """One row per (drift compensation, t), compensation-major: accuracy averaged over the
        rounds of each chip, then mean, std (sample std over chips, ddof=1; 0 for one chip), min
        and max over chips."""
        rows = []
        acc = np.asarray(self.round_accuracy, dtype=np.float64)
        chips = np.asarray(self.round_chip)
        times = np.asarray(self.round_t, dtype=np.float64)
        compensation = np.asarray(self.round_compensation or [self.compensations()[0]] * len(acc))
        for name in self.compensations():
            for t in sorted(set(self.round_t)):
                here = (times == t) & (compensation == name)
                per_chip = np.array([acc[here & (chips == c)].mean() for c in sorted(set(chips[here]))])
                rows.append({"drift_compensation": name, "t": float(t), "chips": int(per_chip.size),
                             "mean": float(per_chip.mean()),
                             "std": float(per_chip.std(ddof=1)) if per_chip.size > 1 else 0.0,
                             "min": float(per_chip.min()), "max": float(per_chip.max())})
        return rows

    def format_accuracy_table(self) -> str:
        """Accuracy vs t as a text table, one block per drift compensation (the reference
        accuracy in the heading)."""
        lines = [f"accuracy vs t (drift compensation: {', '.join(self.compensations())}; "
                 f"noise-free reference {self.accuracy:.4f})",
                 f"{'compensation':<12}  {'t':>6}  {'t [s]':>12}  {'chips':>5}  {'mean':>7}  {'std':>7}  "
                 f"{'min':>7}  {'max':>7}"]
        for row in self.accuracy_vs_t():
            lines.append(f"{row['drift_compensation']:<12}  {format_time(row['t']):>6}  {row['t']:>12.6g}  "
                         f"{row['chips']:>5}  {row['mean']:>7.4f}  {row['std']:>7.4f}  {row['min']:>7.4f}  "
                         f"{row['max']:>7.4f}")
        return "\n".join(lines)


# --- configuration --------------------------------------------------------------------------------
def format_time(seconds: float) -> str:
    """A readable time: 0, 1s, 1h, 1d, 1y (largest unit that divides it), else seconds."""
    for unit in ("y", "d", "h", "min"):
        scale = _TIME_UNITS[unit]
        if seconds >= scale and float(seconds / scale).is_integer():
            return f"{seconds / scale:g}{unit}"
    return f"{seconds:g}s" if seconds else "0"


def parse_times(value: Any, source: str = "<arguments>", field: str = "t") -> list[float]:
    """A list of times in seconds from numbers or a string like "0,3600" / "0,1h,1d,1y"
    (units s, min, h, d, y = 365 d).  Must be finite, >= 0 and strictly increasing."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    else:
        try:
            items = list(value)
        except TypeError:
            raise _core.FormatError(f"{source}: field '{field}': expected a list of times, got {value!r}") from None
    times = [_one_time(item, source, field) for item in items]
    if not times:
        raise _core.FormatError(f"{source}: field '{field}': needs at least one time")
    for earlier, later in zip(times, times[1:]):
        if not later > earlier:
            raise _core.FormatError(f"{source}: field '{field}': times must be strictly increasing "
                                    f"({earlier:g} s is followed by {later:g} s)")
    return times


def parse_compensations(value: Any, source: str = "<arguments>", field: str = "drift_compensation") -> list[str]:
    """Drift compensation names from "none", "global", "none,global" or a list of names:
    known, distinct, at least one."""
    items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
        raise _core.FormatError(f"{source}: field '{field}': expected a name or a list of names "
                                f"({', '.join(DRIFT_COMPENSATIONS)}), got {value!r}")
    names = list(items)
    if not names:
        raise _core.FormatError(f"{source}: field '{field}': needs at least one of {', '.join(DRIFT_COMPENSATIONS)}")
    for name in names:
        if name not in DRIFT_COMPENSATIONS:
            raise _core.FormatError(f"{source}: field '{field}': expected one of "
                                    f"{', '.join(DRIFT_COMPENSATIONS)}, got {name!r}")
    if len(set(names)) != len(names):
        raise _core.FormatError(f"{source}: field '{field}': {value!r} names a compensation twice")
    return names


def _one_time(item: Any, source: str, field: str) -> float:
    if isinstance(item, str):
        match = re.fullmatch(r"([-+0-9.eE]+)\s*(s|min|h|d|y)?", item)
        try:
            seconds = float(match.group(1)) * _TIME_UNITS[match.group(2) or ""] if match else math.nan
        except ValueError:
            seconds = math.nan
        if match is None or math.isnan(seconds):
            raise _core.FormatError(f"{source}: field '{field}': cannot read {item!r} as a time "
                                    "(a number of seconds or with a unit s, min, h, d, y)")
    elif isinstance(item, (int, float, np.integer, np.floating)) and not isinstance(item, bool):
        seconds = float(item)
    else:
        raise _core.FormatError(f"{source}: field '{field}': expected a number of seconds, got {item!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise _core.FormatError(f"{source}: field '{field}': times must be finite and >= 0, got {item!r}")
    return seconds


def load_yaml_config(path, what: str = "options") -> dict:
    """A YAML config file that must hold a mapping; FormatError naming the file otherwise (the
    file is read with the limits of aimcemu.validate.load_yaml_file)."""
    config = validate.load_yaml_file(path, "config")
    source = os.fspath(path)
    if not isinstance(config, dict):
        raise _core.FormatError(f"{source}: field '<root>': expected a mapping of {what}")
    for key in config:
        if not isinstance(key, str):
            raise _core.FormatError(f"{source}: field '{key!r}': option names are strings")
    return config


def _same(a: Any, b: Any) -> bool:
    """Equality that treats lists, tuples and arrays of times alike."""
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        try:
            return isinstance(a, (list, tuple, np.ndarray)) and isinstance(b, (list, tuple, np.ndarray)) \
                and len(a) == len(b) and all(x == y for x, y in zip(a, b))
        except (TypeError, ValueError):
            return False
    return a is b or (type(a) is type(b) and a == b)


def _resolve_config(config: dict | str | os.PathLike | None, explicit: dict) -> tuple[dict, dict]:
    """Defaults, then ``config`` (a dict or a YAML file), then the explicit arguments that differ
    from their defaults.  Returns (options, source of each option) and validates the scalars."""
    resolved = dict(DEFAULTS)
    sources = {key: "<arguments>" for key in DEFAULTS}
    if isinstance(config, (str, os.PathLike)):
        config_source = os.fspath(config)
        config = load_yaml_config(config)
    else:
        config_source = "<config>"
    if config:
        unknown = sorted(set(config) - set(DEFAULTS))
        if unknown:
            raise _core.FormatError(f"{config_source}: field '{unknown[0]}': unknown option "
                                    f"(known: {', '.join(DEFAULTS)})")
        resolved.update(config)
        sources.update({key: config_source for key in config})
    for key, value in explicit.items():
        if not _same(value, DEFAULTS[key]):
            resolved[key], sources[key] = value, "<arguments>"

    if not isinstance(resolved["backend"], str):
        raise _core.FormatError(f"{sources['backend']}: field 'backend': must be a name (the PU model checks which)")
    validate.text(resolved["backend"], "backend", sources["backend"])
    for key in ("model", "data", "output"):
        if resolved[key] is not None:
            if not isinstance(resolved[key], (str, os.PathLike)):
                raise _core.FormatError(f"{sources[key]}: field '{key}': expected a path, got {resolved[key]!r}")
            resolved[key] = validate.text(os.fspath(resolved[key]), key, sources[key])
    resolved["threads"] = validate.threads(resolved["threads"], "threads", sources["threads"])
    resolved["chips"] = validate.chips(resolved["chips"], "chips", sources["chips"])
    resolved["rounds"] = validate.rounds(resolved["rounds"], "rounds", sources["rounds"])
    resolved["seed"] = validate.seed(resolved["seed"], "seed", sources["seed"])
    names = parse_compensations(resolved["drift_compensation"], sources["drift_compensation"])
    resolved["drift_compensation"] = names[0] if len(names) == 1 else names
    resolved["t"] = parse_times(resolved["t"], sources["t"], "t")
    _layer_selection(resolved["layers"], sources["layers"])  # checked now; stored as given
    return resolved, sources


# Options that only noisy rounds use, with the values that mean "not given".
NOISY_ONLY = {"t": [0.0], "chips": 1, "rounds": 1, "seed": 0, "drift_compensation": "none"}


def _refuse_ignored_options(cfg: dict, sources: dict) -> None:
    """A digital run (no mapping, no noise) has no noisy rounds: an option that only noisy
    rounds use would be ignored without a word, so it is an error instead."""
    for key, unused in NOISY_ONLY.items():
        if cfg[key] != unused:
            raise _core.FormatError(
                f"{sources[key]}: field '{key}': this run is digital (no mapping and no noise), so it has no noisy "
                f"rounds and {key} would be ignored; give a mapping or a noise model, or leave {key} out")


def _layer_selection(layers, source: str = "<arguments>") -> str | list[str]:
    """"all", "none", or a list of layer names (a comma-separated string is split); a
    selection that names no layer (",", an empty list) is an error, not "store nothing"."""
    if isinstance(layers, str):
        layers = validate.text(layers, "layers", source)
        if layers in ("all", "none"):
            return layers
        names = [name.strip() for name in layers.split(",") if name.strip()]
    elif isinstance(layers, (list, tuple)):
        names = [validate.text(name, "layers", source) for name in layers]
    else:
        raise _core.FormatError(f"{source}: field 'layers': expected 'all', 'none' or layer names, got {layers!r}")
    if not names:
        raise _core.FormatError(f"{source}: field 'layers': {layers!r} names no layer "
                                "(use 'none' to store no activations, 'all' for every layer)")
    return names


def _default_name(model_name: str) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name) or "model"
    return f"{safe}_{stamp}.h5"


def _default_output(model_name: str) -> Path:
    return Path("results") / _default_name(model_name)


def _locate_inputs(model, data, sources: dict | None = None) -> tuple[str, str]:
    """Model and data set paths; the embedded default when no model is given, and a
    test_set.h5 beside the model file when no data is given.  Each must be a regular file
    (FileNotFoundError or FormatError naming the option otherwise, the model checked first)."""
    sources = sources or {}
    if model is None:
        model_path, default_data = modelfile.embedded_paths()
    else:
        model_path = Path(validate.input_file(model, "model", sources.get("model", "<arguments>"), "model file"))
        default_data = model_path.parent / modelfile.DATASET_FILE
    if data is None:
        if not default_data.is_file():
            raise FileNotFoundError(f"no data set given and none beside the model ({default_data})")
        data = default_data
    data = validate.input_file(data, "data", sources.get("data", "<arguments>"), "data set file")
    return os.fspath(model_path), os.fspath(data)


def _output_path(cfg: dict, sources: dict, model_name: str, config, model_path: str, data_path: str) -> Path:
    """The results file: the option, or results/<model>_<timestamp>.h5; checked before any work
    (aimcemu.files.output_file: never an input of the run, a folder, a device or a FIFO; a
    trailing '/' is a folder that receives the default name)."""
    if cfg["output"] is None:
        return _default_output(model_name)
    inputs = [("model", model_path), ("data", data_path)]
    if isinstance(config, (str, os.PathLike)):
        inputs.append(("config", os.fspath(config)))
    if isinstance(cfg["mapping"], (str, os.PathLike)) and cfg["mapping"] != "all":
        inputs.append(("mapping", os.fspath(cfg["mapping"])))
    return files.output_file(cfg["output"], "output", sources["output"], inputs=inputs,
                             default_name=lambda: _default_name(model_name))


def _placements(cfg: dict, sources: dict, net) -> tuple[Mapping | None, list[Placement] | None]:
    """The mapping and its resolution on `net` (both None for a digital run).  A noise without
    a mapping means every GEMM layer on AIMC."""
    mapping, noise = cfg["mapping"], cfg["noise"]
    if mapping is None and noise is None:
        return None, None
    default_noise = None if noise is None else resolve_noise(noise, sources["noise"], "noise")
    mapping = Mapping.coerce("all" if mapping is None else mapping, sources["mapping"])
    return mapping, mapping.resolve(net, default_noise)


# --- inference and the NIU ------------------------------------------------------------------------
def _run_network(net, images, backend: str, threads: int, weights: dict | None = None) -> list[np.ndarray]:
    """Per-layer int8 activations [N, H, W, C] from the PU functional model.  `weights`
    ({layer index: int8 array}) replaces the weights the PU reads; a _PublishedRound instead
    runs the PU on that round's lease of the emulator's HBM (the dict is what the lease holds)."""
    if isinstance(weights, _PublishedRound):
        _, activations = weights.emulator.run_published(images, backend, threads, weights.round)
        return activations
    if not hasattr(_core, "run_network"):
        raise RuntimeError("this aimcemu._core has no run_network (the PU functional model is not built in)")
    return _core.run_network(net, images, backend, threads, weights)


class _PublishedRound(dict):
    """{layer index: noisy int8 weights} of one round, read back from the emulator's HBM after
    the NIU published it; `round` is the emulator's round id, which the PU's lease must hold."""

    def __init__(self, emulator, round_id: int, weights: dict[int, np.ndarray]):
        super().__init__(weights)
        self.emulator, self.round = emulator, round_id


class _NoisyWeights:
    """The NIU side of a run: compiles one NIU program per noise model for a (chip, round, t)
    and runs it on the AIMC layers' clean weights, in the emulator's HBM for noisy rounds
    (write_round) or directly for calibration readouts (weights).  Each layer's RNG key is its
    index in the network, so its draws do not depend on which other layers are mapped to AIMC."""

    def __init__(self, net, placements: list[Placement], seed: int, threads: int):
        from . import niu

        self._niu = niu
        self.seed, self.threads = seed, threads
        layers = net.layers
        self.clean = {p.index: np.ascontiguousarray(layers[p.index].weights) for p in placements if p.is_aimc}
        self.names = {i: layers[i].name for i in self.clean}
        self._readouts: dict[tuple[int, float], dict[int, float]] = {}
        self.groups: dict[str, tuple[dict, list[int]]] = {}  # noise JSON -> (noise, layer indices)
        for p in placements:
            if p.is_aimc:
                key = json.dumps(p.noise, sort_keys=True)
                self.groups.setdefault(key, (p.noise, []))[1].append(p.index)

    def programs(self, chip: int, round_id: int, t: float, alpha: dict[int, float] | None = None) -> list:
        """One NIU program per noise model for (chip, round, t, alpha), in self.groups order: their
        layers, concatenated, are the AIMC layers in the order of self.aimc_order()."""
        return [self._niu.compile_program(noise, [self.clean[i] for i in indices], seed=self.seed, chip=chip,
                                          round=round_id, t=t, alpha=[1.0 if alpha is None else alpha[i] for i in indices],
                                          layer_ids=indices)
                for noise, indices in self.groups.values()]

    def aimc_order(self) -> list[int]:
        """The AIMC layer indices in the order of the concatenated programs' layers."""
        return [i for _, indices in self.groups.values() for i in indices]

    def weights(self, chip: int, round_id: int, t: float, alpha: dict[int, float] | None = None) -> dict[int, np.ndarray]:
        """{layer index: noisy int8 weights} of every AIMC layer, as the NIU writes them (the
        calibration readouts use this; noisy rounds go through the emulator's HBM)."""
        out = {}
        for program, (_, indices) in zip(self.programs(chip, round_id, t, alpha), self.groups.values()):
            for position, i in enumerate(indices):
                out[i] = program.apply(position, self.clean[i], self.threads)
        return out

    def emulator(self, net):
        """The emulation loop holding `net` in the modelled HBM with this run's AIMC layers."""
        return _core.niu.Emulator(net, self.aimc_order())

    def write_round(self, emulator, chip: int, round_id: int, t: float, alpha: dict[int, float]) -> _PublishedRound:
        """The NIU writes every AIMC layer's noisy weights for (chip, round, t, alpha) into the
        emulator's back buffers and publishes them; returns the published weights, read back."""
        programs = self.programs(chip, round_id, t, alpha)
        published = emulator.write_round([p._program for p in programs], self.threads)
        return _PublishedRound(emulator, published, {i: emulator.weights(i) for i in self.aimc_order()})

    def readout(self, chip: int, t: float) -> dict[int, float]:
        """Calibration readout of every AIMC layer at time t: mean |W| of the uncompensated NIU
        weights in the reserved calibration round (a one-hot input per row reads W itself).
        Computed once per (chip, t) and kept, as t = 0 serves both as baseline and as a time."""
        key = (chip, float(t))
        if key not in self._readouts:
            noisy = self.weights(chip, CALIBRATION_ROUND, t)
            self._readouts[key] = {i: float(np.mean(np.abs(w.astype(np.float64)))) if w.size else 0.0
                                   for i, w in noisy.items()}
        return self._readouts[key]

    def alpha_limit(self, layer: int) -> float:
        """The largest alpha the NIU's back-conversion scale holds for `layer` (8-bit output)."""
        return niu_alpha_limit(self._niu.constants(), int(_core.niu.clean_absmax(self.clean[layer], "layer")))


def niu_alpha_limit(constants: dict, absmax: int, out_bits: int = 8) -> float:
    """The largest drift-compensation alpha whose back-conversion scale fits the NIU
    (docs/niu_datapath.md section 3): K = round(A (2^(B-1)-1)/127 alpha 2^(K_SHIFT - G_FRAC))
    must stay below 2^K_BITS; taking K <= 2^K_BITS - 1 before rounding keeps it inside."""
    k_bits = int(constants["NIU_K_BITS"])
    scale = absmax * (2 ** (out_bits - 1) - 1) / 127.0 * 2.0 ** (constants["NIU_K_SHIFT"] - constants["NIU_G_FRAC"])
    return (2 ** k_bits - 1) / scale


def _drift_alpha(niu: _NoisyWeights, chip: int, t: float, baseline: dict[int, float]) -> dict[int, float]:
    """Global drift compensation (aihwkit's GlobalDriftCompensation): alpha = baseline / readout(t),
    both floored at READOUT_FLOOR (not yet clamped to what the NIU holds: see _cap_alphas)."""
    readout = niu.readout(chip, t)
    return {i: max(baseline[i], READOUT_FLOOR) / max(readout[i], READOUT_FLOOR) for i in readout}


# --- the run --------------------------------------------------------------------------------------
def run(model=None, data=None, output=None, *, mapping=None, noise=None, t=(0.0,), chips: int = 1, rounds: int = 1,
        seed: int = 0, drift_compensation: str | list[str] = "none", backend: str = "fast", threads: int = 0, layers="all",
        config: dict | str | os.PathLike | None = None, progress: bool = False, overwrite: bool = True) -> RunSummary:
    """Run a model file on a data set file and write a results file; returns a RunSummary.

    model:   model file path (docs/model_format.md); None = the embedded default model
    data:    data set file path; None = the test set shipped beside the model
    output:  results file path; None = results/<model>_<timestamp>.h5 (folder created)
    mapping: None (all digital, no noisy rounds) | "all" (every GEMM layer on AIMC) | a Mapping |
             a dict {"default": ..., "layers": {pattern: "aimc" | "digital" | {"device", "noise"}}} |
             a YAML mapping file (aimcemu.mapping)
    noise:   default noise of AIMC layers: {"model": name, **params}, a model name, or a noise
             model object (aimcemu.noise); default pcm_like.  A noise without a mapping = "all".
    t:       times since programming in seconds (strictly increasing, >= 0), or "0,1h,1d,1y"
    chips, rounds, seed: noisy rounds are compensation-major, then chip-major:
             for compensation, for chip, for t, for round
    drift_compensation: "none" | "global" | a list of both, e.g. ["none", "global"] or "none,global":
             each (chip, t, round) then runs under every one with the same NIU draws (docs/hybrid_runs.md)
    backend: the PU model's kernel ("fast"; the PU model lists the others); threads: 0 = all cores
    layers:  whose activations to store: "all", "none", or layer names (metrics are always kept)
    config:  the same options as a dict or a YAML file; explicit arguments override it
    progress: show a progress bar over the noisy rounds (tqdm, on stderr, only on a terminal)
    overwrite: replace an existing output file (default); False raises FileExistsError instead,
             at the very end, without touching the file that is there (sweep tasks use it)
    """
    cfg, sources = _resolve_config(config, {
        "model": model, "data": data, "output": output, "mapping": mapping, "noise": noise, "t": t, "chips": chips,
        "rounds": rounds, "seed": seed, "drift_compensation": drift_compensation, "backend": backend,
        "threads": threads, "layers": layers})
    model_path, data_path = _locate_inputs(cfg["model"], cfg["data"], sources)
    net = modelfile.load_model(model_path)
    out_path = _output_path(cfg, sources, net.name, config, model_path, data_path)
    mapping_used, placements = _placements(cfg, sources, net)
    if placements is None:
        _refuse_ignored_options(cfg, sources)
    noisy_count = 0 if placements is None else validate.noisy_rounds(
        cfg["chips"], len(cfg["t"]), cfg["rounds"], len(_compensations(cfg)), sources["chips"])
    dataset = modelfile.load_dataset(data_path, net)
    images, labels = dataset["images"], dataset["labels"]
    net_layers = net.layers  # the binding copies the list on every access
    validate.check_run_memory(len(labels), sum(int(l.out_shape.h) * int(l.out_shape.w) * int(l.out_shape.c)
                                               for l in net_layers),
                              int(np.prod(tuple(net_layers[net.output_index()].out_shape))), noisy_count,
                              data_path, sources["chips"])
    coordinates = _round_coordinates(cfg) if placements is not None else []
    if cfg["output"] is None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    resolved = _resolved_json(cfg, net, model_path, data_path, out_path, len(labels), mapping_used, placements,
                              len(coordinates))

    start = time.perf_counter()
    reference = _run_network(net, images, cfg["backend"], cfg["threads"])
    inference_s = time.perf_counter() - start
    _check_activations(net_layers, reference, len(labels))

    noisy = _NoisyWeights(net, placements, cfg["seed"], cfg["threads"]) if placements is not None else None
    start = time.perf_counter()
    alphas, capped = _calibrate(noisy, cfg) if noisy is not None else ({}, [])
    calibration_s = time.perf_counter() - start
    resolved["drift_alpha"] = {net_layers[i].name: per_chip for i, per_chip in alphas.items()}
    resolved["drift_alpha_capped"] = capped

    selection = _layer_selection(cfg["layers"], sources["layers"])
    write_s = 0.0
    start = time.perf_counter()
    writer = _core.ResultsWriter(os.fspath(out_path), net, labels, coordinates, json.dumps(resolved, sort_keys=True),
                                 selection, 1, overwrite)
    for index, layer_acts in enumerate(reference):
        writer.set_reference(index, layer_acts)
    _write_placements(writer, placements, alphas, coordinates, cfg["t"])
    write_s += time.perf_counter() - start
    timing = (_noisy_rounds(net, images, cfg, noisy, alphas, coordinates, reference, writer, progress)
              if noisy is not None else {})
    start = time.perf_counter()
    try:
        writer.commit()
    except _core.FormatError:
        if not overwrite and out_path.exists():
            raise FileExistsError(f"{out_path}: exists; not replaced (overwrite=False)") from None
        raise
    write_s += time.perf_counter() - start + timing.get("write_s", 0.0)
    inference_s += timing.get("inference_s", 0.0)

    stored = {l.name for l in net_layers} if selection == "all" else set() if selection == "none" else set(selection)
    device = {p.index: p for p in placements} if placements else {}
    return RunSummary(
        path=os.fspath(out_path), model=net.name, images=int(len(labels)), accuracy=writer.reference_accuracy,
        round_accuracy=list(writer.round_accuracy),
        layers=[LayerSummary(l.name, str(l.kind.name), tuple(l.out_shape), l.name in stored,
                             device[i].device if i in device else "digital",
                             device[i].noise["model"] if i in device and device[i].is_aimc else None)
                for i, l in enumerate(net_layers)],
        inference_s=inference_s, write_s=write_s, noise_s=calibration_s + timing.get("noise_s", 0.0),
        round_chip=[c[1] for c in coordinates], round_t=[c[2] for c in coordinates],
        round_index=[c[0] for c in coordinates], drift_alpha=resolved["drift_alpha"],
        drift_compensation=cfg["drift_compensation"], round_compensation=[c[3] for c in coordinates])


def _compensations(cfg: dict) -> list[str]:
    value = cfg["drift_compensation"]
    return [value] if isinstance(value, str) else list(value)


def _round_coordinates(cfg: dict) -> list[tuple[int, int, float, str]]:
    """(NIU round id, chip, t, drift compensation) of every noisy round, compensation-major:
    for compensation, for chip, for t, for round.  The file's round index is the position."""
    return [(r, chip, t, name) for name in _compensations(cfg) for chip in range(cfg["chips"]) for t in cfg["t"]
            for r in range(cfg["rounds"])]


def _round_alpha(alphas: dict[int, list[list[float]]], layer: int, chip: int, t_index: int, compensation: str) -> float:
    """The factor folded into a round's NIU program: 1 under "none", the calibrated one under "global"."""
    return alphas[layer][chip][t_index] if compensation == "global" else 1.0


def _calibrate(noisy: _NoisyWeights, cfg: dict) -> tuple[dict[int, list[list[float]]], list[dict]]:
    """({layer index: alpha[chip][t index]} of every AIMC layer under global compensation (all
    1.0 when the run has none), the capped alphas).  The readouts are taken once per (chip, t)
    whatever the number of compensations.  An alpha above what the NIU's back-conversion holds
    is capped there, with a warning and an entry in the list (stored in the config)."""
    layers = sorted(noisy.clean)
    if "global" not in _compensations(cfg):
        return {i: [[1.0] * len(cfg["t"]) for _ in range(cfg["chips"])] for i in layers}, []
    alphas: dict[int, list[list[float]]] = {i: [] for i in layers}
    for chip in range(cfg["chips"]):
        baseline = noisy.readout(chip, 0.0)
        per_t = [_drift_alpha(noisy, chip, t, baseline) for t in cfg["t"]]
        for i in layers:
            alphas[i].append([a[i] for a in per_t])
    return alphas, _cap_alphas(noisy, alphas, cfg["t"])


def _cap_alphas(noisy: _NoisyWeights, alphas: dict[int, list[list[float]]], times: list[float]) -> list[dict]:
    """Clamps every alpha (in place) to its layer's NIU limit; returns what was capped."""
    capped = []
    for i, per_chip in alphas.items():
        limit = noisy.alpha_limit(i)
        for chip, per_t in enumerate(per_chip):
            for k, alpha in enumerate(per_t):
                if alpha > limit:
                    capped.append({"layer": noisy.names[i], "chip": chip, "t": times[k], "alpha": alpha,
                                   "limit": limit})
                    per_t[k] = limit
    if capped:
        worst = max(capped, key=lambda c: c["alpha"] / c["limit"])
        warnings.warn(f"drift compensation: {len(capped)} alpha(s) exceed what the NIU's back-conversion holds and "
                      f"were capped (largest: layer {worst['layer']}, chip {worst['chip']}, t={worst['t']:g} s, "
                      f"alpha {worst['alpha']:.4g} > {worst['limit']:.4g}); listed in the config's drift_alpha_capped",
                      RuntimeWarning, stacklevel=3)
    return capped


def _noisy_rounds(net, images, cfg: dict, noisy: _NoisyWeights, alphas: dict[int, list[list[float]]],
                  coordinates: list[tuple[int, int, float, str]], reference: list[np.ndarray], writer,
                  progress: bool = False) -> dict:
    """Runs and writes every noisy round; returns the time spent in each part."""
    from tqdm import tqdm

    times = {"noise_s": 0.0, "inference_s": 0.0, "write_s": 0.0}
    t_index = {t: k for k, t in enumerate(cfg["t"])}
    net_layers = net.layers
    emulator = noisy.emulator(net) if noisy.clean else None
    bar = tqdm(coordinates, desc="noisy rounds", unit="round", disable=None if progress else True, leave=False)
    for position, (round_id, chip, t, compensation) in enumerate(bar):
        start = time.perf_counter()
        weights = noisy.write_round(emulator, chip, round_id, t, {
            i: _round_alpha(alphas, i, chip, t_index[t], compensation) for i in alphas}) if emulator is not None else {}
        times["noise_s"] += time.perf_counter() - start
        start = time.perf_counter()
        # With no AIMC layer every round is the reference, bit for bit: no need to run it again.
        activations = _run_network(net, images, cfg["backend"], cfg["threads"], weights) if weights else reference
        _check_activations(net_layers, activations, len(images))
        times["inference_s"] += time.perf_counter() - start
        start = time.perf_counter()
        for index, layer_acts in enumerate(activations):
            writer.set_round(position, index, layer_acts)
        times["write_s"] += time.perf_counter() - start
    return times


def _write_placements(writer, placements: list[Placement] | None, alphas: dict[int, list[list[float]]],
                      coordinates: list[tuple[int, int, float, str]], times: list[float]) -> None:
    """Per layer: the attribute device ("digital"/"aimc") and, for AIMC layers, noise_model and
    the dataset drift_alpha [round] (the factor folded into that round's NIU program)."""
    if placements is None:
        return
    t_index = {t: k for k, t in enumerate(times)}
    for p in placements:
        writer.set_layer_attribute(p.index, "device", p.device)
        if p.is_aimc:
            writer.set_layer_attribute(p.index, "noise_model", p.noise["model"])
            per_round = [_round_alpha(alphas, p.index, chip, t_index[t], name) for _, chip, t, name in coordinates]
            writer.set_layer_series(p.index, "drift_alpha", np.asarray(per_round, dtype=np.float64))


def _resolved_json(cfg: dict, net, model_path: str, data_path: str, out_path: Path, images: int,
                   mapping: Mapping | None, placements: list[Placement] | None, noisy_rounds: int) -> dict:
    """The full resolved configuration stored in the results file: every option with defaults
    filled, the mapping resolved to one entry per layer, and the noisy-round count."""
    aimc = [p for p in placements or [] if p.is_aimc]
    noise = cfg["noise"]
    if noise is not None:
        noise = resolve_noise(noise)
    elif aimc:
        noise = aimc[0].noise if all(p.noise == aimc[0].noise for p in aimc) else None
    return {
        **{k: v for k, v in cfg.items() if k not in ("mapping", "noise")},
        "model": model_path, "data": data_path, "output": os.fspath(out_path), "model_name": net.name,
        "images": int(images), "mapping": None if mapping is None else mapping.to_dict(),
        "mapping_source": None if mapping is None else mapping.source, "noise": noise, "noisy_rounds": noisy_rounds,
        "placements": None if placements is None else
        {p.name: {"device": p.device, **({"noise": p.noise} if p.is_aimc else {})} for p in placements},
        "calibration_round": CALIBRATION_ROUND if "global" in _compensations(cfg) else None,
        "aimcemu_version": _version(), "created": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }


def _check_activations(layers, activations, images: int) -> None:
    if len(activations) != len(layers):
        raise RuntimeError(f"run_network returned {len(activations)} layers, the model has {len(layers)}")
    for layer, acts in zip(layers, activations):
        expected = (images, *tuple(layer.out_shape))
        if tuple(np.shape(acts)) != expected:
            raise RuntimeError(f"run_network: layer {layer.name} gave shape {np.shape(acts)}, expected {expected}")


def _version() -> str:
    from . import __version__
    return __version__
