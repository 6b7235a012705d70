"""Model and data set files (formats in docs/model_format.md), and where the embedded default lives.

The reading and writing is done by the C++ core (``_core.save_model`` / ``load_model`` /
``save_dataset`` / ``load_dataset``), so every path through aimcemu validates a file the same way
and bad input raises :class:`aimcemu.FormatError` naming the file and the field.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import _core

EMBEDDED_MODEL = "digits"
MODEL_FILE = "model.h5"
DATASET_FILE = "test_set.h5"


def models_dir() -> Path | None:
    """The folder holding the shipped models: $AIMCEMU_MODELS_DIR, else ``aimcemu/models`` inside
    the installed package, else ``models/`` of the source checkout; None if none exists."""
    candidates = []
    if os.environ.get("AIMCEMU_MODELS_DIR"):
        candidates.append(Path(os.environ["AIMCEMU_MODELS_DIR"]))
    here = Path(__file__).resolve().parent
    candidates += [here / "models", here.parent.parent / "models"]
    for folder in candidates:
        if folder.is_dir():
            return folder
    return None


def embedded_paths(name: str = EMBEDDED_MODEL) -> tuple[Path, Path]:
    """(model file, data set file) of a shipped model; FileNotFoundError if it is not shipped."""
    folder = models_dir()
    if folder is None or not (folder / name / MODEL_FILE).is_file():
        raise FileNotFoundError(
            f"the embedded model '{name}' is not shipped in this installation "
            f"(looked for models/{name}/{MODEL_FILE}; set AIMCEMU_MODELS_DIR or pass a model file)")
    return folder / name / MODEL_FILE, folder / name / DATASET_FILE


def locate_inputs(model=None, data=None, sources: dict | None = None) -> tuple[str, str]:
    """(model file, data set file): the embedded default when no model is given, and the
    test_set.h5 beside the model file when no data is given.  Each must be a regular file: a
    missing one raises FileNotFoundError, a folder, FIFO or device FormatError, naming the option
    (the model is checked first, so a missing model is never reported as a missing data set);
    `sources` says where each option came from (default "<arguments>")."""
    from . import validate

    sources = sources or {}
    if model is None:
        model_path, default_data = embedded_paths()
    else:
        model_path = Path(validate.input_file(model, "model", sources.get("model", "<arguments>"), "model file"))
        default_data = model_path.parent / DATASET_FILE
    if data is None:
        if not default_data.is_file():
            raise FileNotFoundError(f"no data set given and none beside the model ({default_data})")
        data = default_data
    data = validate.input_file(data, "data", sources.get("data", "<arguments>"), "data set file")
    return os.fspath(model_path), os.fspath(data)


def save_model(net, path) -> None:
    """Validate ``net`` and write it atomically to ``path``."""
    _core.save_model(net, os.fspath(path))


def load_model(path):
    """Read, validate and resolve a model file; returns an ``aimcemu._core.Network``."""
    return _core.load_model(os.fspath(path))


def save_dataset(images, labels, path, source: str = "", description: str = "", input_frac_bits: int | None = None):
    """Write int8 images [N, H, W, C] (already quantized) and integer labels [N] atomically."""
    _core.save_dataset(images, labels, os.fspath(path), source, description, input_frac_bits)


def load_model_and_check_dataset(path, dataset):
    """``load_model``, with the data set file read in the same checking process (one process start
    instead of two); returns ``(network, check)``.  Pass ``check`` to ``load_dataset``, which
    raises what the checking process found in the data set only when the data set is read, so a
    run reports the problems it checks in between (the output path, the mapping) first."""
    return _core.load_model_and_check_dataset(os.fspath(path), os.fspath(dataset))


def load_dataset(path, net=None, check=None) -> dict:
    """Read a data set file as a dict: images int8 [N, H, W, C], labels int64 [N], source,
    description, input_frac_bits (None when not recorded).  With ``net``, also check that the
    images fit the network's input and the labels its outputs; with ``check``
    (``load_model_and_check_dataset``'s), no second checking process is started."""
    return _core.load_dataset(os.fspath(path), net, check)
