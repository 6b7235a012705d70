"""``aimcemu.run``: one inference study from model and data files to an HDF5 results file.

    summary = aimcemu.run()                        # the embedded default model and its test set
    summary = aimcemu.run("net.h5", "data.h5", output="out.h5", layers=["conv1", "fc"])
    print(summary.accuracy, summary.path)

The run loads and validates both files, runs the network bit-exactly on the PU functional model
(``_core.run_network``), and writes the results file (docs/hdf5_layout.md) atomically: on any
error no output file is left.  This is a digital run, so the file holds the noise-free reference
and zero noisy rounds; noisy rounds come from the NIU path.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _core
from . import modelfile

DEFAULTS = {"model": None, "data": None, "output": None, "backend": "fast", "threads": 0, "layers": "all"}


@dataclass
class LayerSummary:
    name: str
    kind: str
    shape: tuple[int, int, int]
    stored: bool


@dataclass
class RunSummary:
    """What one run produced; ``os.fspath(summary)`` is the results file."""
    path: str
    model: str
    images: int
    accuracy: float                 # top-1 of the noise-free reference
    round_accuracy: list[float]     # per noisy round (empty for a digital run)
    layers: list[LayerSummary] = field(default_factory=list)
    inference_s: float = 0.0
    write_s: float = 0.0

    def __fspath__(self) -> str:
        return self.path


def _run_network(net, images, backend: str, threads: int) -> list[np.ndarray]:
    """Per-layer int8 activations [N, H, W, C] from the PU functional model."""
    if not hasattr(_core, "run_network"):
        raise RuntimeError("this aimcemu._core has no run_network (the PU functional model is not built in)")
    return _core.run_network(net, images, backend, threads, None)


def _resolve_config(config: dict | None, explicit: dict) -> dict:
    """Defaults, then ``config``, then the explicit arguments that differ from their defaults."""
    resolved = dict(DEFAULTS)
    if config:
        unknown = sorted(set(config) - set(DEFAULTS))
        if unknown:
            raise _core.FormatError(f"<config>: field '{unknown[0]}': unknown option "
                                    f"(known: {', '.join(DEFAULTS)})")
        resolved.update(config)
    resolved.update({k: v for k, v in explicit.items() if v != DEFAULTS[k]})
    if not isinstance(resolved["backend"], str):
        raise _core.FormatError("<config>: field 'backend': must be a name (the PU model checks which)")
    if not isinstance(resolved["threads"], int) or resolved["threads"] < 0:
        raise _core.FormatError("<config>: field 'threads': must be an integer >= 0 (0 = all cores)")
    return resolved


def _layer_selection(layers) -> str | list[str]:
    """"all", "none", or a list of layer names (a comma-separated string is split)."""
    if isinstance(layers, str):
        if layers in ("all", "none"):
            return layers
        return [name.strip() for name in layers.split(",") if name.strip()]
    return [str(name) for name in layers]


def _default_output(model_name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name) or "model"
    return Path("results") / f"{safe}_{stamp}.h5"


def _locate_inputs(model, data) -> tuple[str, str]:
    """Model and data set paths; the embedded default when no model is given, and a
    test_set.h5 beside the model file when no data is given."""
    if model is None:
        model_path, default_data = modelfile.embedded_paths()
    else:
        model_path = Path(model)
        default_data = model_path.parent / modelfile.DATASET_FILE
    if data is None:
        if not default_data.is_file():
            raise FileNotFoundError(f"no data set given and none beside the model ({default_data})")
        data = default_data
    return os.fspath(model_path), os.fspath(data)


def run(model=None, data=None, output=None, backend: str = "fast", threads: int = 0, layers="all",
        config: dict | None = None) -> RunSummary:
    """Run a model file on a data set file and write a results file; returns a RunSummary.

    model:   model file path (docs/model_format.md); None = the embedded default model
    data:    data set file path; None = the test set shipped beside the model
    output:  results file path; None = results/<model>_<timestamp>.h5 (folder created)
    backend: the PU model's kernel ("fast"; the PU model lists the others); threads: 0 = all cores
    layers:  whose activations to store: "all", "none", or layer names (metrics are always kept)
    config:  the same options as a dict (e.g. from YAML); explicit arguments override it
    """
    cfg = _resolve_config(config, {"model": model, "data": data, "output": output, "backend": backend,
                                   "threads": threads, "layers": layers})
    model_path, data_path = _locate_inputs(cfg["model"], cfg["data"])
    net = modelfile.load_model(model_path)
    dataset = modelfile.load_dataset(data_path, net)
    images, labels = dataset["images"], dataset["labels"]

    out_path = Path(cfg["output"]) if cfg["output"] is not None else _default_output(net.name)
    if cfg["output"] is None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    resolved = {**cfg, "model": model_path, "data": data_path, "output": os.fspath(out_path),
                "model_name": net.name, "images": int(len(labels)), "rounds": 0, "noise": None,
                "aimcemu_version": _version(), "created": _dt.datetime.now(_dt.timezone.utc).isoformat()}

    start = time.perf_counter()
    activations = _run_network(net, images, cfg["backend"], cfg["threads"])
    inference_s = time.perf_counter() - start

    net_layers = net.layers  # the binding copies the list on every access
    _check_activations(net_layers, activations, len(labels))
    selection = _layer_selection(cfg["layers"])
    start = time.perf_counter()
    writer = _core.ResultsWriter(os.fspath(out_path), net, labels, [], json.dumps(resolved, sort_keys=True),
                                 selection, 1)
    for index, layer_acts in enumerate(activations):
        writer.set_reference(index, layer_acts)
    writer.commit()
    write_s = time.perf_counter() - start

    stored = {l.name for l in net_layers} if selection == "all" else set() if selection == "none" else set(selection)
    return RunSummary(
        path=os.fspath(out_path), model=net.name, images=int(len(labels)), accuracy=writer.reference_accuracy,
        round_accuracy=list(writer.round_accuracy),
        layers=[LayerSummary(l.name, str(l.kind.name), tuple(l.out_shape), l.name in stored) for l in net_layers],
        inference_s=inference_s, write_s=write_s)


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
