"""Model and data set files (formats in docs/model_format.md), and where the embedded default lives.

The reading and writing is done by the C++ core (``_core.save_model`` / ``load_model`` /
``save_dataset`` / ``load_dataset``), so every path through aimcemu validates a file the same way
and bad input raises :class:`aimcemu.FormatError` naming the file and the field.
"""
from __future__ import annotations

import os
import threading
import time
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
            # No data option was given: named after where the model came from, which implied it.
            raise FileNotFoundError(f"{sources.get('model', '<arguments>')}: field 'data': no data set given and "
                                    f"none beside the model ({default_data})")
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


def load_model_and_check_dataset(path, dataset, header_only: bool = False):
    """``load_model``, with the data set file read in the same checking process (one process start
    instead of two); returns ``(network, check)``.  Pass ``check`` to ``load_dataset``, which
    raises what the checking process found in the data set only when the data set is read, so a
    run reports the problems it checks in between (the output path, the mapping) first.  With
    ``header_only``, that process reads the data set as ``load_dataset_header`` does (for
    ``load_dataset_header``; ``load_dataset`` with such a check checks the whole file first)."""
    return _core.load_model_and_check_dataset(os.fspath(path), os.fspath(dataset), header_only)


def load_dataset(path, net=None, check=None) -> dict:
    """Read a data set file as a dict: images int8 [N, H, W, C], labels int64 [N], source,
    description, input_frac_bits (None when not recorded).  With ``net``, also check that the
    images fit the network's input and the labels its outputs; with ``check``
    (``load_model_and_check_dataset``'s), no second checking process is started."""
    return _core.load_dataset(os.fspath(path), net, check)


def load_dataset_header(path, net=None, check=None) -> dict:
    """A data set file read and checked as ``load_dataset`` does, but for its images' values, which
    are left unread (their type, shape, storage and size are checked): a dict of image_shape
    (H, W, C), count, labels int64 [N], source, description, input_frac_bits.  With ``net``, also
    check that the images fit the network's input and the labels its outputs; with ``check``
    (``load_model_and_check_dataset``'s), no second checking process is started.  A sweep's plan
    reads data sets so: it holds no images (7.5 GB for an ImageNet-sized set), and a damaged image
    is found by the run that reads them."""
    return _core.load_dataset_header(os.fspath(path), net, check)


# ---- a sweep worker's model and data set, kept from one run to the next ----

KEPT_INPUTS_MAX_BYTES = 1 << 30
# A file's times are kept in clock ticks (a few ms; a second or two on some file systems), not in
# ns: a file written twice within one tick keeps its change time.  So a file that changed less
# than this long before its load ended is loaded again by the next run rather than kept.
SETTLED_NS = 2_000_000_000


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
    two files: a sweep worker then loads and checks them once, not once per task (for ResNet-50 the
    checked load is 40-50 ms of a one-second run).

    Used only when `enabled` (process_memory.keep_freed_memory sets it): without its malloc
    thresholds, the load a later run skips is what happened to keep glibc's mmap threshold high,
    and the run's temporaries were then faulted in afresh, costing more than the load
    (docs/performance.md section 3).  An entry is identified by each file's (device, inode, size,
    modification and change time in ns), taken by fstat on the descriptor the load itself reads
    (OpenedInputs), before and after the load: it is made only when neither changed and both
    files last changed SETTLED_NS or more before the load began, and a later run takes it only
    while the files at the paths still have those identities.  A file written in place with
    write() changes its change time (which no caller can set back); one renamed over the path is
    another inode.  Not seen: a file changed through a shared memory mapping (numpy.memmap, mmap),
    whose times the kernel updates only when a clean page is first written (never on tmpfs), and
    file systems that keep inode and times across a rewrite (some FUSE object stores).  Where
    input files change so, set AIMCEMU_KEEP_INPUTS=0 in the environment: nothing is kept then."""

    def __init__(self, max_bytes: int = KEPT_INPUTS_MAX_BYTES):
        self.max_bytes = int(max_bytes)
        self.enabled = False  # see also keeps_inputs(): AIMCEMU_KEEP_INPUTS=0 turns it off
        self.loads = 0  # loads made through load_inputs (for tests and benchmarks)
        self._lock = threading.Lock()
        self._kept: KeptInputs | None = None

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._kept.nbytes if self._kept is not None else 0

    def clear(self) -> None:
        with self._lock:
            self._kept = None

    def holds(self, entry: KeptInputs | None) -> bool:
        """Whether `entry` (a run's RunInputs.kept) is the one kept now."""
        with self._lock:
            return entry is not None and self._kept is entry

    def lookup(self, identities: tuple) -> KeptInputs | None:
        """The kept inputs when they were loaded from files with these identities."""
        with self._lock:
            kept = self._kept
        return kept if kept is not None and kept.identities == identities else None

    def keep(self, identities: tuple, net, images, labels) -> KeptInputs | None:
        """Keeps what a run loaded from files of these identities, when it fits max_bytes; returns
        the entry (None when not kept, and then nothing is kept)."""
        size = sum(l.gemm_n * l.gemm_m for l in net.layers if l.is_gemm) + images.nbytes + labels.nbytes
        if size > self.max_bytes:
            self.clear()
            return None
        images.flags.writeable = False
        labels.flags.writeable = False
        kept = KeptInputs(identities, net, images, labels, int(size))
        with self._lock:
            self._kept = kept
        return kept

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a fork while another thread held it would leave it held


_process_inputs = InputsCache()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_process_inputs._after_fork)


def process_inputs() -> InputsCache:
    """This process's InputsCache (aimcemu.run(reuse_reference=True) and sweep tasks use it)."""
    return _process_inputs


def settled(identities: tuple, since_ns: int) -> bool:
    """Whether every file of these identities last changed SETTLED_NS or more before `since_ns`
    (time.time_ns() taken before the identities were): a write after that moment then falls in a
    later clock tick of the file system, and so changes the change time."""
    return all(since_ns - identity[4] >= SETTLED_NS for identity in identities)


def file_identity(st: os.stat_result) -> tuple:
    """(device, inode, size, modification time ns, change time ns) of a stat result."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class OpenedInputs:
    """The model and data set files opened once, read-only, for a check of their identity and
    the load that follows it: the loaders are handed /proc/self/fd/N, which opens the very file
    open on N (whatever the path names by then), so the identity checked is that of the file
    loaded.  Messages of a failed load would name /proc/self/fd/N, so a failure is loaded again
    by the user's paths (load_inputs), which then reports it as any run does."""

    def __init__(self, descriptors: list[int]):
        self.descriptors = descriptors

    @classmethod
    def open(cls, *paths) -> "OpenedInputs | None":
        """Opens each path as the loaders do (_core.files.open_input: only a regular file, and a
        device or FIFO renamed over the path is never opened); None when one cannot be opened so
        (the ordinary load then reports why) or when this system has no /proc/self/fd."""
        if not os.path.isdir("/proc/self/fd"):
            return None
        opened = cls([])
        try:
            for path in paths:
                opened.descriptors.append(_core.files.open_input(os.fspath(path)))
            return opened
        except (_core.FormatError, ValueError):
            opened.close()
            return None

    def identities(self) -> tuple:
        return tuple(file_identity(os.fstat(fd)) for fd in self.descriptors)

    def paths(self) -> list[str]:
        return [f"/proc/self/fd/{fd}" for fd in self.descriptors]

    def close(self) -> None:
        for fd in self.descriptors:
            os.close(fd)
        self.descriptors = []


class RunInputs:
    """A run's model and data set (load_inputs): the network first, the data set when the run has
    checked what it checks in between (`dataset()`), as load_model_and_check_dataset and
    load_dataset do; `kept` is the InputsCache entry they came from or went into (None: neither).
    close() gives up the opened files when the run stops before reading the data set."""

    def __init__(self, net, read_dataset, kept: KeptInputs | None = None, opened: OpenedInputs | None = None):
        self.net = net
        self.kept = kept
        self._read_dataset = read_dataset
        self._opened = opened

    def dataset(self):
        """(images, labels), read (and checked against the network) on the first call."""
        if self._read_dataset is not None:
            # Dropped before the call: the reader refers to this object, and the cycle would keep
            # the opened files and the network until a garbage collection if the read raised.
            read, self._read_dataset = self._read_dataset, None
            self._data = read()
        return self._data

    def close(self) -> None:
        self._read_dataset = None  # a run that stops before reading the data set (the cycle above)
        if self._opened is not None:
            self._opened.close()


def keeps_inputs(inputs: InputsCache | None) -> bool:
    """Whether load_inputs keeps and reuses inputs in `inputs`: enabled, and not turned off by
    AIMCEMU_KEEP_INPUTS=0 in the environment (read at each run)."""
    return inputs is not None and inputs.enabled and os.environ.get("AIMCEMU_KEEP_INPUTS", "1") != "0"


def load_inputs(model, data, inputs: InputsCache | None = None) -> RunInputs:
    """The model and data set of a run: this process's kept ones (`inputs`, when enabled) while
    the files at `model` and `data` are those they were loaded from, else loaded and checked as
    load_model_and_check_dataset and load_dataset do (and kept in `inputs` when neither file
    changed during the load)."""
    opened = OpenedInputs.open(model, data) if keeps_inputs(inputs) else None
    if opened is None:
        return _loaded_inputs(model, data)
    try:
        started_ns = time.time_ns()
        before = opened.identities()
        kept = inputs.lookup(before)
        if kept is None:
            inputs.clear()  # the last run's inputs, not to be held beside these while they load
            inputs.loads += 1
            model_fd, data_fd = opened.paths()
            net, check = load_model_and_check_dataset(model_fd, data_fd)
    except Exception:
        opened.close()
        return _loaded_inputs(model, data)  # reported by the user's paths
    except BaseException:
        opened.close()
        raise
    if kept is not None:
        opened.close()
        return RunInputs(kept.net, lambda: (kept.images, kept.labels), kept)
    result = RunInputs(net, None, opened=opened)

    def read_dataset():
        try:
            dataset = load_dataset(data_fd, net, check)
            unchanged = opened.identities() == before and settled(before, started_ns)
        except Exception:
            dataset, unchanged = load_dataset(data, net), False  # reported by the user's path
        finally:
            opened.close()
        images, labels = dataset["images"], dataset["labels"]
        if unchanged:
            result.kept = inputs.keep(before, net, images, labels)
        return images, labels

    result._read_dataset = read_dataset
    return result


def _loaded_inputs(model, data) -> RunInputs:
    """load_model_and_check_dataset, then load_dataset when the run asks for the data set."""
    net, check = load_model_and_check_dataset(model, data)

    def read_dataset():
        dataset = load_dataset(data, net, check)
        return dataset["images"], dataset["labels"]

    return RunInputs(net, read_dataset)
