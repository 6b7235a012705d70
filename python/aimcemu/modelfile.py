"""Model and data set files (formats in docs/model_format.md), and where the embedded default lives.

The reading and writing is done by the C++ core (``_core.save_model`` / ``load_model`` /
``save_dataset`` / ``load_dataset``), so every path through aimcemu validates a file the same way
and bad input raises :class:`aimcemu.FormatError` naming the file and the field.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
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


# ---- a sweep worker's model and data set, kept from one run to the next ----

KEPT_INPUTS_MAX_BYTES = 1 << 30


def file_identity(path) -> tuple | None:
    """(device, inode, size, modification and change time in ns) of the file at `path` now; None
    when it cannot be stat()ed (the loader then reports why).  A file written in place changes its
    change time (which no caller can set back) and one renamed over the path is another inode."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class KeptInputs:
    """A run's loaded and checked model and data set, kept for the next run on the same files.
    The arrays are read-only and the network goes only to the runner, which never changes it."""
    identities: tuple
    net: object
    images: object
    labels: object
    nbytes: int
    content: bytes | None = None  # reference.content_digest(net, images), once a run computed it


class InputsCache:
    """The model and data set of this process's last run (one entry), for its next run on the same
    two files: a sweep worker then loads and checks them once, not once per task (for ResNet-50
    the checked load is 40-50 ms of a one-second run).  Goes with reuse_reference (the same opt-in
    as the reference cache; docs/hybrid_runs.md).  An entry is made only when both files kept their
    identity (file_identity) across the load, so it holds what the files held; a later run takes
    it only while both still have that identity, and otherwise loads the files as any run does."""

    def __init__(self, max_bytes: int = KEPT_INPUTS_MAX_BYTES):
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._kept: KeptInputs | None = None

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._kept.nbytes if self._kept is not None else 0

    def clear(self) -> None:
        with self._lock:
            self._kept = None

    def lookup(self, model, data) -> KeptInputs | None:
        """The kept inputs when `model` and `data` name the files they were loaded from, unchanged."""
        with self._lock:
            kept = self._kept
        if kept is None or (file_identity(model), file_identity(data)) != kept.identities:
            return None
        return kept

    def keep(self, identities: tuple, model, data, net, images, labels) -> KeptInputs | None:
        """Keeps what a run loaded when the files' `identities` (taken before the load) still hold
        after it, and it fits max_bytes; returns the entry (None when not kept)."""
        if None in identities or (file_identity(model), file_identity(data)) != identities:
            return None
        size = sum(l.gemm_n * l.gemm_m for l in net.layers if l.is_gemm) + images.nbytes + labels.nbytes
        if size > self.max_bytes:
            return None
        images.flags.writeable = False
        labels.flags.writeable = False
        kept = KeptInputs(identities, net, images, labels, int(size))
        with self._lock:
            self._kept = kept
        return kept


_process_inputs = InputsCache()


def process_inputs() -> InputsCache:
    """This process's InputsCache (what aimcemu.run(reuse_reference=True) and sweep workers use)."""
    return _process_inputs
