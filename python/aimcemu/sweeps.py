"""``aimcemu.sweep`` (module ``aimcemu.sweeps``): a grid of noisy runs, on a local process pool or a Dask cluster.

    from aimcemu import sweep

    if __name__ == "__main__":   # in a script: the local pool's spawned workers import it again
        config = {
            "output": "results/drift",                 # the sweep folder
            "noise": {"model": "pcm_like"}, "mapping": "all",
            "t": [1.0, 3600.0, 86400.0], "chips": 8, "seed": 1,
            "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0],
                     "mapping": {"all": "all", "convs": {"default": "digital", "layers": {"block_*": "aimc"}}}},
        }
        result = sweep(config)
        result = sweep(config, executor="tcp://scheduler:8786")   # the same sweep on a Dask cluster

One *task* is one grid point (a value of every grid axis) covering all chips, all t and all
rounds: a single ``aimcemu.run`` call that writes its own results file
``tasks/<position>-<id>.h5`` (atomically: the file exists only when complete).  The task id is a
hash of the task's run arguments (grid points with equal arguments share it, and their results
are bit-identical); the file, unique per grid point, is what the bookkeeping goes by, so a file
on disk *is* the proof that its task is done: a rerun of an interrupted sweep skips those tasks
and runs the rest, none twice, none lost.  ``index.json`` maps grid
points to files and is rewritten atomically while tasks complete (at most every 2 s) and at the end.

Common random numbers: every task uses the same master seed, and the noise draws are keyed by
(seed, chip, layer, weight index, round), never by the swept value, so chip k at scale 0.5 and
chip k at scale 2.0 share their random numbers and the curves come out smooth.

Executors: ``None``/"local" (a process pool of ``workers`` processes, default the number of
cores), a scheduler address ``"tcp://host:port"`` or a ``distributed.Client`` (also one built on
a dask-jobqueue SLURMCluster/PBSCluster), or any ``concurrent.futures.Executor``.  Tasks write
their files themselves; only small summaries travel back.  Each task's C++ threads are set to
cores / concurrent tasks on its host, so workers never oversubscribe (aimcemu.executors).
Config format and examples: docs/sweeps.md.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import os
import re
import signal
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import _core, files, modelfile, peripherals, validate
from .config import NOISY_ONLY, SWEEP_DEFAULTS, RunConfig, load_yaml_config, parse_times
from .executors import (SEMAPHORE_PREFIX_FIELD, STOP_CHECK_S, STOP_SIGNALS, WORKER_STOPPED_AFTER_TASK,
                        ClusterLostError, WorkerDiedError, check_executor, is_local, lost_task_reason, make_executor,
                        new_semaphore_prefix, remove_leftover_semaphores, running_task, task_threads)
from .mapping import resolve_noise_model
from .results import (FORMAT, FORMAT_VERSION, INDEX_FILE, TASK_FOLDER, read_index, read_task_summaries,
                      read_task_summary)

# Top-level options of a sweep config and their defaults (aimcemu.config; run options are passed
# to aimcemu.run).
DEFAULTS = SWEEP_DEFAULTS
# Grid axes besides "noise.<parameter>" (any parameter of the noise model).
PLAIN_AXES = ("model", "data", "mapping", "noise", "peripherals", "drift_compensation")


def _error(field_name: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"<sweep>: field '{field_name}': {what}")


@contextlib.contextmanager
def errors_named_after(config_path):
    """Errors of a sweep config read from a file name that file instead of '<sweep>' (a bad
    value, or a file it names that does not exist)."""
    try:
        yield
    except (_core.FormatError, FileNotFoundError) as exc:
        message = str(exc)
        if config_path is None or not message.startswith("<sweep>: "):
            raise
        renamed = f"{os.fspath(config_path)}: {message[len('<sweep>: '):]}"
        raise (_core.FormatError(renamed) if isinstance(exc, _core.FormatError) else type(exc)(renamed)) from None


# --- the plan: config -> validated tasks ----------------------------------------------------------
@dataclass
class Task:
    """One grid point: the arguments of one aimcemu.run call and where its file goes."""
    id: str
    point: dict            # axis -> label (what the grid point is called in the index and in xarray)
    run: dict              # aimcemu.run keyword arguments, output excluded
    file: str              # relative to the sweep folder
    config: RunConfig | None = field(default=None, repr=False)   # `run` resolved (checked) by plan()

    def to_dict(self) -> dict:
        return {"id": self.id, "point": self.point, "run": self.run, "file": self.file}


@dataclass
class SweepPlan:
    folder: Path
    config: dict                       # resolved config (stored in index.json)
    axes: dict                         # axis -> list of labels, in grid order
    tasks: list[Task] = field(default_factory=list)
    # path -> {"bytes", "sha256"} of every file the tasks read, taken when the sweep starts (or
    # resumes) and kept in index.json: a resumed sweep refuses inputs that changed since.
    inputs: dict = field(default_factory=dict)


def load_config(path, source: str = "<arguments>") -> dict:
    """A sweep config from a YAML file (a mapping of the options in DEFAULTS); `source` names
    where the path came from when the file cannot be read (the CLI: --config)."""
    return load_yaml_config(path, "sweep options", source)


def _axis_values(name: str, values) -> list[tuple[str, Any]]:
    """(label, value) pairs of one grid axis; a dict gives labels explicitly.  Values are plain
    (_plain_value): NumPy scalars become their Python values."""
    if isinstance(values, Mapping):
        pairs = [(validate.text(_label_text(label), f"grid.{name}", "<sweep>"),
                  _plain_value(value, f"grid.{name}[{label}]")) for label, value in values.items()]
    elif isinstance(values, (list, tuple)):
        pairs = []
        for index, value in enumerate(values):
            value = _plain_value(value, f"grid.{name}[{index}]")
            pairs.append((_label(value, f"grid.{name}[{index}]"), value))
    else:
        raise _error(f"grid.{name}", f"expected a list of values or a mapping label -> value, got {values!r}")
    if not pairs:
        raise _error(f"grid.{name}", "empty grid axis: it needs at least one value")
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise _error(f"grid.{name}", f"two values share a label ({labels}); give a mapping label -> value")
    return pairs


def _plain_value(value, field_name: str):
    """A grid value as plain data (what JSON holds and a task's id hashes): None, bools, numbers,
    strings, and lists and mappings of them.  NumPy scalars (np.int64, np.float32, ...) become
    their Python values; anything else (a YAML date, !!binary or !!set, a complex number, an
    object) is an error naming the value's field, where json.dumps raised TypeError."""
    if isinstance(value, np.generic) and isinstance(value, (np.bool_, np.integer, np.floating, np.str_)):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_plain_value(v, f"{field_name}[{i}]") for i, v in enumerate(value))
    if isinstance(value, Mapping):
        plain = {}
        for key, v in value.items():
            key = _plain_value(key, field_name)
            if isinstance(key, (list, tuple)):
                raise _error(field_name, f"a mapping key is a list: {validate.short_repr(key)}")
            plain[key] = _plain_value(v, f"{field_name}.{key}")
        return plain
    raise _error(field_name, f"expected a number, a string, a list or a mapping, got {type(value).__name__} "
                             f"{validate.short_repr(value)}")


def _label_text(label) -> str:
    """A mapping's label as text, spelled as _label spells a list value: YAML reads `off`, `no`
    and `yes` as booleans and `null` as None, which str() would make 'False', 'True', 'None'."""
    if label is None or isinstance(label, bool):
        return _label(label)
    return str(label)


def _label(value, field_name: str = "grid"):
    """Numbers label themselves (so xarray coordinates stay numeric); other values by their text."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return value
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:  # keys of several types cannot be sorted
        raise _error(field_name, f"cannot label this value ({exc}); give the axis as a mapping label -> value") from None


def _copied(value, field_name: str):
    """A deep copy of one option's value (the plan must not share objects with the caller's
    config); a value that cannot be copied (a generator, an open file) is an error naming the
    option, or the grid axis, instead of "cannot pickle 'generator'"."""
    if field_name == "grid" and isinstance(value, Mapping):
        return {axis: _copied(values, f"grid.{axis}") for axis, values in value.items()}
    try:
        return copy.deepcopy(value)
    except TypeError as exc:
        raise _error(field_name, f"expected plain values (lists, mappings, numbers, strings), got "
                                 f"{type(value).__name__} ({exc})") from None


def _check_top_level(config: Mapping) -> dict:
    if not isinstance(config, Mapping):
        raise _error("<root>", "expected a mapping of sweep options")
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise _error(unknown[0], f"unknown option (known: {', '.join(DEFAULTS)})")
    cfg = {**copy.deepcopy(DEFAULTS), **{key: _copied(value, key) for key, value in config.items()}}
    if cfg["output"] is None:
        raise _error("output", "the sweep folder is required")
    cfg["t"] = parse_times(cfg["t"], "<sweep>", "t")
    cfg["chips"] = validate.chips(cfg["chips"], "chips", "<sweep>")
    cfg["rounds"] = validate.rounds(cfg["rounds"], "rounds", "<sweep>")
    cfg["seed"] = validate.seed(cfg["seed"], "seed", "<sweep>")
    if not isinstance(cfg["output"], (str, os.PathLike)):
        raise _error("output", f"expected a folder path, got {cfg['output']!r}")
    cfg["output"] = validate.text(os.fspath(cfg["output"]), "output", "<sweep>")
    grid = cfg["grid"]
    if grid is None:
        grid = {}
    if not isinstance(grid, Mapping):
        raise _error("grid", "expected a mapping axis -> values")
    if "grid" in config and not grid:
        raise _error("grid", "empty grid: give at least one axis, or leave 'grid' out for a single point")
    cfg["grid"] = dict(grid)
    return cfg


def _grid_points(cfg: dict) -> tuple[dict, list[tuple[dict, dict, dict]]]:
    """The axes (name -> labels) and every point as (labels, values, keys) in row-major order;
    a point's key on an axis is how errors name its value: the label of an axis given as a
    mapping, else the value's index in the list.  The number of points is checked against
    validate.MAX_TASKS from the axis lengths, before the grid is expanded."""
    axes, keys = {}, {}
    for name, values in cfg["grid"].items():
        if not isinstance(name, str):
            raise _error(f"grid.{name!r}", "axis names are strings")
        if name == "t":
            raise _error("grid.t", "t is not a task axis: list the times in the top-level 't' "
                                   "(every task covers all of them)")
        if name not in PLAIN_AXES and not name.startswith(("noise.", "peripherals.")):
            raise _error(f"grid.{name}", f"unknown grid axis (known: {', '.join(PLAIN_AXES)}, noise.<parameter>, "
                                         "peripherals.<setting>)")
        axes[name] = _axis_values(name, values)
        keys[name] = [label for label, _ in axes[name]] if isinstance(values, Mapping) else range(len(axes[name]))
        if name == "drift_compensation":
            _check_single_compensations(axes[name])
    count = math.prod(len(pairs) for pairs in axes.values())
    if count > validate.MAX_TASKS:
        raise _error("grid", f"{' x '.join(str(len(p)) for p in axes.values())} = {count} grid points; at most "
                             f"{validate.MAX_TASKS} tasks per sweep")
    points = []
    positions = itertools.product(*(range(len(pairs)) for pairs in axes.values())) if axes else [()]
    for combo in positions:
        labels = {name: axes[name][k][0] for name, k in zip(axes, combo)}
        values = {name: axes[name][k][1] for name, k in zip(axes, combo)}
        point_keys = {name: keys[name][k] for name, k in zip(axes, combo)}
        points.append((labels, values, point_keys))
    return {name: [label for label, _ in pairs] for name, pairs in axes.items()}, points


def _check_single_compensations(pairs: list) -> None:
    """A drift_compensation axis value is one compensation: a list would give its tasks different
    numbers of compensations, which no dataset of the sweep can hold (both on every task is the
    top-level list)."""
    for _, value in pairs:
        if not isinstance(value, str):
            raise _error("grid.drift_compensation",
                         f"each value is one compensation (none or global), got {value!r}; to run several "
                         "on every task, list them in the top-level drift_compensation instead")


def _point_run_args(cfg: dict, values: dict, keys: dict) -> dict:
    """aimcemu.run arguments of one grid point (the top-level options with the point's values;
    `keys` names the point's values in errors, see _grid_field)."""
    args = {key: copy.deepcopy(cfg[key]) for key in
            ("model", "data", "mapping", "noise", "peripherals", "t", "chips", "rounds", "seed",
             "drift_compensation", "backend", "layers")}
    # Whole values first, then parameters on top: a `noise` (or `peripherals`) axis and a
    # `noise.<parameter>` (`peripherals.<setting>`) axis combine whatever their order in the grid.
    for name, value in sorted(values.items(), key=lambda item: item[0].startswith(("noise.", "peripherals."))):
        if name.startswith("noise."):
            if isinstance(args["noise"], str):  # a model name, as `noise: pcm_like` gives to a run
                args["noise"] = {"model": args["noise"]}
            if not isinstance(args["noise"], Mapping):
                raise _error(f"grid.{name}", "a noise parameter axis needs a top-level 'noise' with a 'model'")
            args["noise"] = {**args["noise"], name[len("noise."):]: value}
        elif name.startswith("peripherals."):
            base = args["peripherals"]
            if isinstance(base, str):  # "pcm,out_noise=0.02": the sweep config's, not a --peripherals flag's
                base = peripherals.parse_cli(base, "<sweep>", "peripherals")
            base = {} if base is None else dict(base)
            args["peripherals"] = {**base, name[len("peripherals."):]: value}
        else:
            args[name] = copy.deepcopy(value)
    for key in ("model", "data"):
        if args[key] is not None:
            field_name = _grid_field(key, keys)
            if not isinstance(args[key], (str, os.PathLike)):  # before os.fspath, which would raise TypeError
                raise _error(field_name, f"expected a file path, got {args[key]!r}")
            args[key] = os.path.abspath(validate.text(os.fspath(args[key]), field_name, "<sweep>"))
    args["t"] = [float(v) for v in args["t"]]
    return args


def _task_config(args: dict, keys: dict, networks: dict) -> RunConfig:
    """One task's run arguments resolved and checked exactly as aimcemu.run resolves them, and
    against the model as the run will use it (the data set's images and labels, mapping patterns
    and devices, the `layers` to store): a bad noise config, a data set of another network, a
    pattern that matches no layer, an unknown device or layer name is an error naming the option,
    the grid point's value or the file, before any work."""
    from .runner import stored_layer_names

    try:
        noise = None if args["noise"] is None else resolve_noise_model(args["noise"], "<arguments>", "noise")
        # As the task's aimcemu.run call takes them (so the results file records the same sources).
        config = RunConfig.resolve(explicit={**args, "noise": noise})
        inputs = (config.model, config.data)
        if inputs not in networks:  # each model and data set pair is read and checked once per plan
            # Images that fit the network and labels that fit its outputs, from the data set's header
            # and labels: the images themselves are read (and checked) by the runs that use them.
            net, check = modelfile.load_model_and_check_dataset(*inputs, header_only=True)
            modelfile.load_dataset_header(config.data, net, check)
            networks[inputs] = net
        net = networks[inputs]
        config.placements(net)
        stored_layer_names(config, net.layers)
    except (_core.FormatError, FileNotFoundError) as exc:
        raise _in_sweep_terms(exc, keys) from None
    return config


# A task's run options are all '<arguments>' to RunConfig; a mapping dict's own fields are
# '<arguments>: mapping' (aimcemu.mapping), and the core names a noise parameter inside its message.
_RUN_OPTION_ERROR = re.compile(r"<arguments>: (?:(mapping): )?field '([^']*)': (.*)", re.S)
_NOISE_PARAMETER = re.compile(r"noise model '[^']*': field '([^']*)': ")


def _in_sweep_terms(exc: Exception, keys: dict) -> Exception:
    """An error of a task's run options named as the sweep config names them, with one source:
    '<sweep>' (the config file, once errors_named_after renames it), and the grid point's value
    ('grid.mapping[late].layers.haed') when a grid axis gave the option."""
    match = _RUN_OPTION_ERROR.fullmatch(str(exc))
    if match is None:
        return exc
    mapping, field_name, what = match.groups()
    if mapping:
        field_name = "mapping" if field_name == "<root>" else f"mapping.{field_name}"
    elif field_name == "noise" and (parameter := _NOISE_PARAMETER.match(what)) \
            and f"noise.{parameter.group(1)}" in keys:
        field_name = f"noise.{parameter.group(1)}"  # the parameter's own axis gave the bad value
    field_name = _grid_field(field_name, keys)
    # A whole option that parameter axes changed (the noise config the NIU cannot run): the one
    # axis that changed it, or the grid point when several did.
    parameter_axes = [f"{axis}[{key}]" for axis, key in keys.items() if axis.startswith(field_name + ".")]
    if len(parameter_axes) == 1:
        field_name = f"grid.{parameter_axes[0]}"
    elif parameter_axes:
        what += f" (grid point {', '.join(parameter_axes)})"
    renamed = f"<sweep>: field '{field_name}': {what}"
    return _core.FormatError(renamed) if isinstance(exc, _core.FormatError) else type(exc)(renamed)


def _grid_field(field_name: str, keys: dict) -> str:
    """A run option's field ('mapping.layers.haed', 'peripherals.out_res', 'model') as the sweep
    config names it: under the grid axis that gave it, with the point's key
    ('grid.mapping[late].layers.haed', 'grid.model[0]'), else as the top-level option.  The
    longest axis wins: 'peripherals.out_res' over 'peripherals', whose value it overrides."""
    axes = [axis for axis in keys if field_name == axis or field_name.startswith(axis + ".")]
    if not axes:
        return field_name
    axis = max(axes, key=len)
    return f"grid.{axis}[{keys[axis]}]{field_name[len(axis):]}"


def task_id(run_args: dict) -> str:
    """A stable name for a task: 16 hex digits of the SHA-256 of its run arguments."""
    blob = json.dumps(run_args, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan(config: Mapping, output=None) -> SweepPlan:
    """Validate a sweep config completely (grid, noise parameters, mapping patterns against the
    model's layers) and list its tasks.  Bad configs raise FormatError before any work."""
    if not isinstance(config, Mapping):  # before the merge below, which would raise TypeError
        raise _core.FormatError(f"<arguments>: field 'config': expected a dict of sweep options or a YAML file "
                                f"path, got {validate.short_repr(config)}")
    if output is not None and not isinstance(output, (str, os.PathLike)):
        raise _core.FormatError(f"<arguments>: field 'output': expected a folder path, got {validate.short_repr(output)}")
    cfg = _check_top_level({**config, **({"output": os.fspath(output)} if output is not None else {})})
    axes, points = _grid_points(cfg)
    networks: dict = {}
    tasks = []
    digital_points = 0
    for number, (labels, values, keys) in enumerate(points):
        args = _point_run_args(cfg, values, keys)
        if args["mapping"] is None and args["noise"] is None and args["peripherals"] is None:
            # A digital point runs only the noise-free reference: the options of noisy rounds
            # do not apply to it (and aimcemu.run refuses them), whatever the other points use.
            # Peripherals alone are not digital: as in aimcemu.run, they mean mapping "all".
            args.update(copy.deepcopy(NOISY_ONLY))
            digital_points += 1
        run_config = _task_config(args, keys, networks)
        ident = task_id(args)
        tasks.append(Task(id=ident, point=labels, run=args, file=f"{TASK_FOLDER}/{number:05d}-{ident}.h5",
                          config=run_config))
    if digital_points == len(points):
        for key, unused in NOISY_ONLY.items():
            if cfg[key] != unused:
                raise _error(key, f"every task of this sweep is digital (no mapping, noise or peripherals), so {key} "
                                  "would be ignored; give a mapping or a noise model, or leave it out")
    resolved = {**cfg, "grid": {name: [list(p) for p in _axis_values(name, v)] for name, v in cfg["grid"].items()}}
    return SweepPlan(folder=Path(cfg["output"]), config=resolved, axes=axes, tasks=tasks)


# --- executing one task (runs in a worker process) -----------------------------------------------
def execute_task(task: dict, folder: str, threads, config: RunConfig | None = None, number: int | None = None) -> dict:
    """Run one task and return its small summary.  Idempotent: a task whose file exists is not
    run again (its summary is read from the file).  `config` is the task's run configuration as
    plan() resolved it (then nothing is checked again); without it `task["run"]` is resolved here.

    The noise-free reference is reused across the tasks a worker process runs
    (aimcemu.reference.process_cache(): one entry, kept between tasks): a sweep's tasks share the
    model and data set, so a worker computes it once, not once per task.  The summary's
    worker_references_computed is how many that worker process has computed so far.  `number`
    (the task's place in the submission) lets a local pool tell which task a dead worker ran."""
    with running_task(number):  # a local pool worker asked to stop (SIGTERM) finishes this first
        return _execute_task(task, folder, threads, config)


def _execute_task(task: dict, folder: str, threads, config: RunConfig | None) -> dict:
    from . import runner
    from .reference import process_cache

    path = Path(folder) / task["file"]
    ran = False
    start = time.perf_counter()
    if not path.is_file():
        if config is None:
            config = RunConfig.resolve(explicit={**task["run"], "t": tuple(task["run"]["t"])})
        try:  # written once: an existing file is never replaced (another attempt finished first)
            runner.execute(config.with_options(output=os.fspath(path), threads=task_threads(threads)),
                           overwrite=False, reuse_reference=True)
            ran = True
        except FileExistsError:
            pass
    return {**read_task_summary(path), "id": task["id"], "file": task["file"], "ran": ran,
            "seconds": time.perf_counter() - start, "pid": os.getpid(),
            "worker_references_computed": process_cache().computed}


# --- the coordinator ----------------------------------------------------------------------------
@dataclass
class SweepResult:
    folder: str
    total: int
    ran: int                      # tasks executed by this call
    skipped: int                  # tasks already done before this call
    interrupted: bool
    summaries: dict               # task file (unique per grid point) -> summary
    done: int | None = None       # finished task files (their summaries may be unread when a signal
                                  # stopped the call before the pool started); default len(summaries)

    def __post_init__(self) -> None:
        if self.done is None:
            self.done = len(self.summaries)

    @property
    def complete(self) -> bool:
        return self.done == self.total

    def open(self, **kwargs):
        """The sweep as an xarray Dataset (aimcemu.results.open_sweep)."""
        from .results import open_sweep

        return open_sweep(self.folder, **kwargs)


class _Interrupted(BaseException):
    """SIGINT or SIGTERM in the coordinator.  A BaseException, like KeyboardInterrupt, so that no
    `except Exception` on the way (tqdm's monitor thread start is one) swallows it."""


# From aimcemu.executors: STOP_SIGNALS, the signals that stop a sweep, and STOP_CHECK_S, how long
# the coordinator waits for a task to complete, or for a Dask scheduler to answer, before it looks
# for one again (the longest a signal waits to be acted on while tasks run).


class _StopSignals:
    """SIGINT and SIGTERM in the coordinator, from the moment the sweep touches its folder until
    it returns, so that a signal at any point ends in "interrupted", never in a traceback or a
    silent death.  How a signal is taken depends on where the coordinator is:

    - before the pool exists (the folder, its lock, reading a resumed folder, the first index
      write) the handler raises _Interrupted at once: the coordinator runs only its own code,
      file I/O and a checking subprocess there, and no other thread waits on it;
    - while the pool runs (defer()) the handler only records the signal, and check() raises it
      at the coordinator's own points: before each submission and between waits of at most
      STOP_CHECK_S for a completion.  An exception raised by a handler lands at whatever bytecode
      the main thread is at, which there is often concurrent.futures', threading's or the pool's
      own code: raised inside _AcquireFutures (cf.as_completed) it left a future's lock taken,
      and the pool's manager thread, setting that future's result, blocked for ever, and with it
      the wind-down that waits for it (rounds.DeferredInterrupts fixed the same hazard in the
      round loop);
    - during the wind-down (ignore()) a signal is dropped: the running tasks finish and the files
      stay whole.

    Only the main thread can install handlers; elsewhere the caller's handling stays, and
    check() never raises."""

    def __init__(self) -> None:
        self._mode = "raise"
        self._pending: list[int] = []
        self._previous: dict = {}

    def __enter__(self) -> "_StopSignals":
        if _in_main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            if handler is not None:  # None: a handler installed outside Python, which we cannot restore
                signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self._mode == "raise":
            raise _Interrupted(signal.Signals(signum).name)
        if self._mode == "defer":
            self._pending.append(signum)

    def defer(self) -> None:
        """From now on a signal is recorded, and raised by check()."""
        self._mode = "defer"

    def check(self) -> None:
        """Raises _Interrupted when a signal came since defer()."""
        if self._pending and self._mode == "defer":
            raise _Interrupted(signal.Signals(self._pending[0]).name)

    def pending(self) -> bool:
        """Whether a signal came since defer() (also after ignore(): a wind-down asks why)."""
        return bool(self._pending)

    def ignore(self) -> None:
        """From now on a signal is dropped (the wind-down, and what follows the tasks)."""
        self._mode = "ignore"


def _write_json_atomic(path: Path, data) -> None:
    files.atomic_write_json(path, data)


def _prepare_folder(p: SweepPlan) -> dict:
    """Create the folder, refuse one that holds a different sweep, remove temporary files left by
    killed tasks (and only theirs: aimcemu.files), and return the summaries of tasks already
    done.  The caller holds the folder's lock."""
    folder = p.folder
    if folder.exists() and not folder.is_dir():
        raise _error("output", f"{folder} exists and is not a folder")
    _check_existing_index(p)
    _make_task_folder(folder / TASK_FOLDER)
    _check_task_names(p)
    files.remove_stale_temporaries(folder)
    files.remove_stale_temporaries(folder / TASK_FOLDER)
    done = {}
    finished = [task for task in p.tasks if _is_finished(folder, task)]
    try:
        summaries = read_task_summaries([folder / task.file for task in finished])  # one checking process
    except _core.FormatError as exc:  # the message names the file and field; say how to go on
        raise _core.FormatError(f"{exc}; a task file that cannot be read is no finished task: delete it and rerun "
                                "the same command to run its task again") from None
    for task, summary in zip(finished, summaries):
        done[task.file] = {**summary, "id": task.id, "file": task.file, "ran": False}
    p.inputs = _input_fingerprints(p)
    if done:
        _check_inputs_unchanged(p)
    return done


def _input_fingerprints(p: SweepPlan) -> dict:
    """path -> {"bytes", "sha256"} of every file the plan's tasks read (RunConfig.input_files:
    models, data sets, mapping files), each read once.  Whole SHA-256 digests: a file rewritten
    with the same size and time stamp is still told apart (an ImageNet-sized data set costs a
    few seconds, once per sweep call)."""
    paths = sorted({os.path.abspath(path) for task in p.tasks if task.config is not None
                    for _, path in task.config.input_files()})
    return {path: _fingerprint(path) for path in paths}


def _fingerprint(path: str) -> dict:
    digest, size = hashlib.sha256(), 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO put there since: no wait
    except OSError as exc:
        raise _core.FormatError(f"{path}: field 'file': cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _core.FormatError(f"{path}: field 'file': not a regular file")
        while chunk := f.read(1 << 22):
            digest.update(chunk)
            size += len(chunk)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _check_inputs_unchanged(p: SweepPlan) -> None:
    """A resumed sweep's inputs must be the files its finished tasks read: a model, data set or
    mapping file changed in between would put runs of two different inputs in one sweep, under
    the same grid, without a word (an index written before the inputs were recorded is taken
    as it is)."""
    index_path = p.folder / INDEX_FILE
    if not index_path.is_file():
        return
    recorded = read_index(p.folder).get("inputs")
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise _core.FormatError(f"{index_path}: field 'inputs': expected a JSON object")
    for path, now in p.inputs.items():
        then = recorded.get(path)
        if then is not None and then != now:
            raise _core.FormatError(
                f"{path}: field 'file': changed since this sweep's finished tasks ran (SHA-256 "
                f"{str(then.get('sha256') if isinstance(then, dict) else then)[:16]}... then, {now['sha256'][:16]}... now); "
                f"their results would mix with runs on the new file under one grid: restore the file, or "
                f"give the sweep a new output folder")


def _make_task_folder(path: Path) -> None:
    """The sweep's tasks/ folder, created if absent; a file, FIFO or dangling link of that name is
    an error naming it (mkdir said only "[Errno 17] File exists")."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        kind = "a dangling symbolic link" if path.is_symlink() and not path.exists() else \
            "not a folder (a file, FIFO or device)"
        raise _core.FormatError(f"{path}: field 'file': exists and is {kind}; the sweep keeps its task files in a "
                                "folder of that name: remove it") from None


def _check_task_names(p: SweepPlan) -> None:
    """No task's file name is taken by a folder, FIFO, device or socket: the task's results file
    is never written over one, and its run found it only after other tasks had run (and named
    field 'output' of '<arguments>', the run's).  A symbolic link is no error (_is_finished
    removes it and the task runs again)."""
    for task in p.tasks:
        path = p.folder / task.file
        try:
            mode = os.lstat(path).st_mode
        except OSError:  # absent (or unreadable: the task's run says why)
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            continue
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "a device")
        raise _core.FormatError(f"{path}: field 'file': is {kind}, not the results file of its task (grid point "
                                f"{task.point}); a task's results file is never written over one: remove it")


def _is_finished(folder: Path, task: Task) -> bool:
    """A task is done when its file is a regular file of its own.  A symbolic link is not taken
    (it could lead to another task's file, whose numbers would show under this grid point): it
    is removed, and the task runs again."""
    path = folder / task.file
    if path.is_symlink():
        path.unlink()
        return False
    return path.is_file()


def _finished_count(p: SweepPlan) -> int:
    return sum((p.folder / task.file).is_file() and not (p.folder / task.file).is_symlink() for task in p.tasks)


def _check_existing_index(p: SweepPlan) -> None:
    """A folder that already has an index must hold this sweep (a readable index, same tasks)."""
    path = p.folder / INDEX_FILE
    if path.exists() and not path.is_file():
        raise _core.FormatError(f"{path}: field 'file': not a regular file (a folder, FIFO or device); "
                                "the sweep's index is never written over one: remove it")
    if path.is_file():
        try:
            index = read_index(p.folder)
        except _core.FormatError:
            raise
        except ValueError as exc:  # what json itself refuses, e.g. an integer of more than 4300 digits
            raise _core.FormatError(f"{path}: field 'file': not valid JSON ({exc})") from None
        if [t["id"] for t in index["tasks"]] != [t.id for t in p.tasks]:
            raise _error("output", f"{p.folder} holds a different sweep (its tasks differ); "
                                   "use a new folder or remove it")


# What index.json keeps of each finished task's summary (results.task_summary_of).
INDEX_SUMMARY_FIELDS = ("reference_accuracy", "accuracy", "chip", "t", "niu_round", "drift_compensation",
                        "drift_alpha_capped")


def _index(p: SweepPlan, summaries: dict) -> dict:
    """The index of `summaries` (task file -> summary).  Keyed by file, not by id: grid points
    with equal run arguments share an id (equal labels under two names, or digital points that
    differ only in options a digital run ignores), but each has its own file."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "config": p.config, "axes": p.axes,
            "inputs": p.inputs, "tasks": [{**t.to_dict(), "done": t.file in summaries,
                       "summary": {k: summaries[t.file][k] for k in INDEX_SUMMARY_FIELDS}
                       if t.file in summaries else None} for t in p.tasks]}


def sweep(config, output=None, *, executor=None, workers: int | None = None, threads: int = 0,
          progress: bool = True, wait_s: float = 0.0) -> SweepResult:
    """Run (or resume) a sweep; returns a SweepResult.

    config:   a dict of sweep options (docs/sweeps.md) or a YAML file path (errors then name it)
    output:   the sweep folder (overrides config["output"])
    executor: None/"local" (process pool), "tcp://host:port" or a distributed.Client, or any
              concurrent.futures.Executor
    workers:  local pool size (default: all cores, at most one per task)
    threads:  C++ threads per task; 0 = cores / concurrent tasks (local pool, Dask), 1 for a
              generic Executor
    progress: show a progress bar (tqdm, on stderr)
    wait_s:   one folder runs one sweep at a time (a lock, aimcemu.files.FolderLock): how long
              to wait for another sweep in the same folder to finish (0: refuse at once; a
              finite number of seconds >= 0)

    Kill-safe: the pool's workers die with this process however it dies, every task file is
    written once (atomically, never replaced), and the index never lists a task whose file is
    not complete; a rerun picks up every finished file and runs the rest.  SIGINT or SIGTERM
    (in the main thread) stops it cleanly and returns interrupted; a worker that dies raises
    WorkerDiedError after the other running tasks have finished, and tasks lost with a Dask cluster
    (its scheduler gone, KilledWorker) raise ClusterLostError.
    """
    config_path = config if isinstance(config, (str, os.PathLike)) else None
    with errors_named_after(config_path):
        if config_path is not None:
            config = load_config(config_path)
        if workers is not None:
            workers = validate.workers(workers, "workers")
        threads = validate.threads(threads, "threads")
        wait_s = validate_wait(wait_s, "wait_s", "<arguments>")
        check_executor(executor)
        if not isinstance(progress, bool):
            raise _core.FormatError(f"<arguments>: field 'progress': expected True or False, got {validate.short_repr(progress)}")
        p = plan(config, output)
        check_output_folder(p.folder, "<arguments>" if output is not None else "<sweep>")
        _check_existing_index(p)  # before anything is created in the folder (checked again under the lock)
        _check_task_names(p)
    result = _run_sweep(p, executor, workers, threads, progress, wait_s)
    _warn_capped_alphas(p, result.summaries, stacklevel=2)  # as sweep() would warn: the line that called it
    return result


# Grid points a capped-alpha warning names before it counts the rest.
CAPPED_TASKS_NAMED = 5


def _warn_capped_alphas(p: SweepPlan, summaries: dict, stacklevel: int) -> None:
    """One RuntimeWarning for every task of `summaries` (task file -> summary, those this call ran
    and those a resume found done alike) whose file lists capped drift-compensation alphas: the
    run's own warning is raised where the task ran (a worker process, a Dask worker) and never
    reaches the caller, and a finished task is not run again.  Local pool workers leave theirs
    out (executors.init_worker), so each capping is told once, here.  `stacklevel` is warnings.warn's
    as the caller would give it."""
    capped = [t for t in p.tasks if summaries.get(t.file, {}).get("drift_alpha_capped")]
    if not capped:
        return
    import warnings

    worst = max((c for t in capped for c in summaries[t.file]["drift_alpha_capped"]),
                key=lambda c: c["alpha"] / c["limit"])
    named = "; ".join(f"{t.file} ({', '.join(f'{k}={v}' for k, v in t.point.items()) or 'the single point'}: "
                      f"{len(summaries[t.file]['drift_alpha_capped'])} capped)" for t in capped[:CAPPED_TASKS_NAMED])
    more = f"; and {len(capped) - CAPPED_TASKS_NAMED} more" if len(capped) > CAPPED_TASKS_NAMED else ""
    warnings.warn(f"drift compensation: {len(capped)} of {len(summaries)} finished tasks in {p.folder} ran with "
                  f"alpha(s) capped to what the NIU's back-conversion holds, so their 'global' rows are not fully "
                  f"compensated (largest: layer {worst['layer']}, chip {worst['chip']}, t={worst['t']:g} s, "
                  f"alpha {worst['alpha']:.4g} > {worst['limit']:.4g}): {named}{more}; listed per task in "
                  f"index.json (drift_alpha_capped), open_sweep's alpha_capped, and flagged by aimcemu report",
                  RuntimeWarning, stacklevel=stacklevel + 1)


def check_output_folder(folder, source: str) -> None:
    """The sweep folder is a folder, or one can be created where it goes; else a FormatError
    naming `source` (where the path came from: '--output', the config file) and field 'output'.
    It writes nothing (so `--check` leaves every folder as it was): files.check_folder_creatable.
    What only creating the folder tells (an immutable folder, a full disk) is named when the
    sweep creates it (_make_folder)."""
    if "\0" in os.fspath(folder):  # what os.stat would refuse with a ValueError naming nothing
        raise _core.FormatError(f"{source}: field 'output': {os.fspath(folder)!r} contains a NUL character")
    folder = Path(os.path.abspath(folder))
    if folder.exists() and not folder.is_dir():
        raise _core.FormatError(f"{source}: field 'output': {folder} exists and is not a folder")
    files.check_folder_creatable(folder, "output", source)


def validate_wait(value, field_name: str, source: str) -> float:
    """A wait time: a finite number of seconds >= 0 (NaN would wait forever, a negative one is a mistake)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _core.FormatError(f"{source}: field '{field_name}': expected a finite number of seconds >= 0, "
                                f"got {validate.short_repr(value)}")
    seconds = validate.as_float(value, source, field_name)  # an int beyond the float range is named as such
    if not math.isfinite(seconds) or seconds < 0:
        raise _core.FormatError(f"{source}: field '{field_name}': expected a finite number of seconds >= 0, "
                                f"got {value!r}")
    return seconds


def _run_sweep(p: SweepPlan, executor, workers, threads, progress, wait_s) -> SweepResult:
    summaries: dict = {}
    skipped = 0
    with _StopSignals() as stops:
        new_folders: list[Path] = []
        try:
            new_folders = _make_folder(p.folder)
            semaphore_prefix = new_semaphore_prefix() if is_local(executor) else None
            with files.FolderLock(p.folder, "sweep", wait_s, note=_lock_note(semaphore_prefix),
                                  clean_up_after=remove_leftover_semaphores) as lock:
                try:
                    summaries.update(_prepare_folder(p))
                    skipped = len(summaries)
                    _write_json_atomic(p.folder / INDEX_FILE, _index(p, summaries))
                    todo = [t for t in p.tasks if t.file not in summaries]
                    interrupted, ran = False, 0
                    if todo:
                        interrupted, ran = _run_tasks(p, todo, summaries, executor, workers, threads, progress, stops,
                                                      semaphore_prefix)
                    stops.ignore()  # the tasks are over: what is left is quick and leaves the folder tidy
                    files.remove_stale_temporaries(p.folder / TASK_FOLDER)  # of workers killed in this call
                except Exception:
                    if new_folders:
                        _empty_new_folder(p.folder, lock)
                    raise
        except (_Interrupted, KeyboardInterrupt):
            # Before the pool started (its own wind-down returns interrupted): nothing ran, the
            # folder holds whole files only (the next call removes a temporary of an index
            # write cut short); say how many tasks are done from the files.
            stops.ignore()
            return SweepResult(folder=os.fspath(p.folder), total=len(p.tasks), ran=0, skipped=skipped,
                               interrupted=True, summaries=summaries, done=_finished_count(p))
        except Exception:
            files.remove_new_folders(new_folders)  # those this call made, while empty (a first write failed)
            raise
    return SweepResult(folder=os.fspath(p.folder), total=len(p.tasks), ran=ran, skipped=skipped,
                       interrupted=interrupted, summaries=summaries)


def _lock_note(semaphore_prefix: str | None) -> dict:
    """What the lock file records for the next sweep on the folder to clean up should this one be
    killed with its process group: the prefix of the local pool's semaphore names (executors:
    "The local pool's semaphore names")."""
    return {SEMAPHORE_PREFIX_FIELD: semaphore_prefix} if semaphore_prefix else {}


def _make_folder(folder: Path) -> list[Path]:
    """The sweep folder, created (check_output_folder has found that it can be; this names the
    folder if that changed since); returns the folders this call created (files.create_folders),
    which a call that fails before it wrote anything there removes again."""
    try:
        return files.create_folders(folder)
    except OSError as exc:
        raise _core.FormatError(f"{folder}: field 'output': cannot create the sweep folder ({exc.strerror})") from None


def _empty_new_folder(folder: Path, lock: files.FolderLock) -> None:
    """After a failure in a sweep folder this call created: when the folder holds nothing but
    what this call put there before any index or task file (its lock file, an empty tasks/),
    those go, so that the folder itself can (a full disk at the first write).  Anything else
    there, and it all stays."""
    try:
        entries = set(os.listdir(folder))
    except OSError:
        return
    if not entries <= {files.FolderLock.NAME, TASK_FOLDER}:
        return
    if TASK_FOLDER in entries:
        try:
            (folder / TASK_FOLDER).rmdir()  # only while empty
        except OSError:
            return
    lock.discard()


# The sweep's progress bars' lock (_progress_bar).
_PROGRESS_BAR_LOCK = threading.RLock()


def _progress_bar(**kwargs):
    """tqdm's bar with a thread lock of its own.  tqdm's default lock (made by its first bar,
    drawn or not) holds a multiprocessing RLock, which on a Python whose default start method is
    not fork (3.14's forkserver) is a named semaphore outside the pool's prefix: a group SIGKILL
    left its name in /dev/shm.  Only the coordinator draws the sweep's bar, so a thread lock is all
    it needs, and the process's other tqdm bars keep tqdm's own lock.  tqdm.tqdm is looked up at
    each call (a caller may have replaced it)."""
    import tqdm

    class SweepProgressBar(tqdm.tqdm):
        _lock = _PROGRESS_BAR_LOCK  # tqdm's get_lock() makes none when the class has one

    return SweepProgressBar(**kwargs)


def _run_tasks(p: SweepPlan, todo: list[Task], summaries: dict, executor, workers, threads, progress,
               stops: _StopSignals | None = None, semaphore_prefix: str | None = None):
    """Submit every task, record each completion in the index; on SIGINT/SIGTERM (`stops`, which
    defers them to this function's own points) cancel what has not started, let running tasks
    finish (their files are complete), and return interrupted.  semaphore_prefix: what the
    folder's lock file records for the local pool's semaphore names (_lock_note)."""
    stops = stops if stops is not None else _StopSignals()  # one that handles nothing: a caller without signals
    stops.defer()
    from concurrent.futures.process import BrokenProcessPool

    pool, futures = None, []
    bar = _progress_bar(total=len(p.tasks), initial=len(summaries), unit="task", desc="sweep",
                        disable=not progress, file=sys.stderr, dynamic_ncols=True)
    try:
        try:
            stops.check()
            try:
                pool = make_executor(executor, workers, len(todo), threads, semaphore_prefix, stops.check)
            except BaseException:  # Dask's asyncio.CancelledError is not an Exception
                stops.check()  # a signal came while it connected to a Dask scheduler: the user's stop comes first
                raise
            folder = pool.worker_folder(p.folder)
            for number, task in enumerate(todo):
                stops.check()
                futures.append(pool.submit(execute_task, _task_key(folder, task), task.to_dict(), folder,
                                           pool.threads, task.config, number))
            _collect(p, pool, futures, summaries, bar, stops)
            pool.close()
            stops.check()  # a signal while the pool shut down is an interruption like any other
        except (_Interrupted, KeyboardInterrupt):
            stops.ignore()
            _wind_down(p, todo, summaries, pool, futures)
            return True, _ran_count(todo, summaries)
        except BrokenProcessPool:
            # A worker died (SIGKILL from the OOM killer, a crash): the pool fails every task
            # it had not finished and stops the other workers, which finish their running task
            # first (executors.init_worker).  Keep what finished, then say whose worker died.
            stops.ignore()
            if stops.pending():
                # The signal came to the coordinator too (SIGTERM to the whole process group): its
                # workers stopped after their tasks because of it, before the coordinator's next
                # check.  The user's stop, not a death.
                _wind_down(p, todo, summaries, pool, futures)
                return True, _ran_count(todo, summaries)
            processes = pool.worker_processes()
            # The death is the news: a wind-down that cannot write the index (a full disk) must
            # not replace it with its own error.
            shortfall = _wind_down_after_failure(p, todo, summaries, pool, futures)
            raise WorkerDiedError(_worker_death_message(p, todo, summaries, pool, processes)
                                  + _index_shortfall(shortfall)) from None
        except BaseException as exc:
            # A task failed (a full disk, a bad file found late) or was lost with the cluster (the
            # scheduler gone, KilledWorker): stop the others the same way, record what finished,
            # then report the error (that one, even if the index cannot be written either: the
            # next run rebuilds it from the files).
            stops.ignore()
            shortfall = _wind_down_after_failure(p, todo, summaries, pool, futures)
            reason = lost_task_reason(exc)
            if reason is not None:
                raise ClusterLostError(f"{p.folder}: the sweep lost its tasks: {reason} ({_exception_text(exc)}). "
                                       f"The {len(summaries)} of {len(p.tasks)} tasks that finished are kept; "
                                       "rerun the same command to run the rest" + _index_shortfall(shortfall)) from None
            raise
    finally:
        stops.ignore()
        bar.close()
    return False, _ran_count(todo, summaries)


def _collect(p: SweepPlan, pool, futures: list, summaries: dict, bar, stops: _StopSignals) -> None:
    """Records each task's summary in `summaries` as it completes and writes the index when due
    (_IndexWriter) and at the end.  It waits for completions STOP_CHECK_S at a time and looks
    for a stop signal in between (stops.check() raises it)."""
    index = _IndexWriter(p)
    completions = pool.completions(futures)
    left = len(futures)
    while left:
        stops.check()
        for fut in completions.wait(STOP_CHECK_S):
            summary = fut.result()
            summaries[summary["file"]] = summary
            left -= 1
            index.write_when_due(summaries)
            bar.update(1)
    index.write(summaries)


def _ran_count(todo: list[Task], summaries: dict) -> int:
    """How many of `todo` this call ran: those whose summary says so (an attempt that found its
    file written by another does not count) and those the wind-down found finished."""
    return sum(bool(summaries[t.file]["ran"]) for t in todo if t.file in summaries)


# The index is rewritten whole (and fsynced) on each write: after every completion that is
# quadratic in the task count (10 000 tasks: 0.8 s a write, hours in all).  It is written at most
# this often while tasks complete, and never taking more than a tenth of the coordinator's time;
# the resume goes by the files, so an index that lags them loses nothing.
INDEX_WRITE_INTERVAL_S = 2.0
INDEX_WRITE_SHARE = 0.1


class _IndexWriter:
    """index.json during the collect loop: written when due (time-throttled) and at the end; the
    wind-down of an interruption or a failure writes it too (_wind_down)."""

    def __init__(self, p: SweepPlan, clock=time.monotonic):
        self.p, self.clock = p, clock
        self.last = clock()  # _run_sweep has just written it
        self.wait_s = INDEX_WRITE_INTERVAL_S

    def write(self, summaries: dict) -> None:
        start = self.clock()
        _write_json_atomic(self.p.folder / INDEX_FILE, _index(self.p, summaries))
        self.last = self.clock()
        self.wait_s = max(INDEX_WRITE_INTERVAL_S, (self.last - start) / INDEX_WRITE_SHARE)

    def write_when_due(self, summaries: dict) -> None:
        if self.clock() - self.last >= self.wait_s:
            self.write(summaries)


def _exception_text(exc: BaseException) -> str:
    """'Type: message' of an exception from a cluster on one line (distributed's span several),
    whose str() may itself fail."""
    try:
        text = " ".join(str(exc).split())
    except Exception:
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _task_key(folder: str, task: Task) -> str:
    """The task's name on a Dask scheduler, unique per grid point and sweep folder: Dask runs one
    task per key, so two grid points with equal run arguments (one id) must not share one, nor
    the same task of two sweeps in different folders on one cluster."""
    where = hashlib.sha256(os.fsencode(folder)).hexdigest()[:8]
    return f"aimcemu-sweep-{where}-{Path(task.file).stem}"


def _worker_death_message(p: SweepPlan, todo: list[Task], summaries: dict, pool, processes) -> str:
    """Which worker died, how, and when: while running a task (what the pool recorded), between
    tasks, or before it started any.  `summaries` holds every finished task, those whose file the
    wind-down found complete included (_record_finished): a worker killed after its task's file
    was renamed into place, before its summary reached the coordinator, lost nothing, and is said
    to have died between tasks.  A worker that died before it started any task failed to start:
    most often a script that calls sweep() without a main guard, which each spawned worker
    imports and so runs again."""
    dead = [proc for proc in processes if proc.exitcode not in (None, 0, WORKER_STOPPED_AFTER_TASK)]
    lost = []
    causes = []
    for proc in dead:
        started = [todo[number] for number in pool.tasks_started_by(proc.pid)]
        its_lost = [task for task in started if task.file not in summaries]
        lost += its_lost
        causes.append(_how_it_ended(proc) + _when_it_died(started, its_lost))
    # A worker sent SIGTERM on its own stops after its task; when another worker died, the others
    # stop that way too (the wind-down), and are no cause.
    for proc in processes if not dead else []:
        if proc.exitcode == WORKER_STOPPED_AFTER_TASK:
            causes.append(f"PID {proc.pid} was sent {_signal_name(int(signal.SIGTERM))} and stopped after its task "
                          "(its file is complete; to stop a sweep, signal its own process or its process group)")
    how = "; ".join(causes) or "a worker process ended abruptly"
    hints = []
    if any(proc.exitcode > 0 and not pool.tasks_started_by(proc.pid) for proc in dead):
        hints.append("a script that calls sweep() must call it under `if __name__ == \"__main__\":`, since "
                     "each worker process imports the script first")
    if lost or any(proc.exitcode == -signal.SIGKILL for proc in dead) or not causes:
        hints.append("with fewer --workers if memory ran out")
    return (f"{p.folder}: a sweep worker process died: {how}. The {len(summaries)} of {len(p.tasks)} "
            f"tasks that finished are kept; rerun the same command to run the rest"
            + (f" ({'; '.join(hints)})" if hints else ""))


def _how_it_ended(proc) -> str:
    """'PID n was killed by SIGNAL' or 'PID n exited with status k'."""
    if proc.exitcode < 0:
        likely = " (e.g. by the out-of-memory killer, or kill -9)" if proc.exitcode == -signal.SIGKILL else ""
        return f"PID {proc.pid} was killed by {_signal_name(-proc.exitcode)}{likely}"
    return f"PID {proc.pid} exited with status {proc.exitcode}"


def _when_it_died(started: list[Task], lost: list[Task]) -> str:
    """What a dead worker was doing: the tasks it had started whose files are not complete, or
    nothing (between tasks: its last task's file was complete and it had not started another),
    or it had started no task at all."""
    if lost:
        return f" while running task {', '.join(f'{t.file} (grid point {t.point})' for t in lost)}"
    if started:
        return " between tasks (every task it started had finished: its file is complete)"
    return " before it started any task (a start-up failure; its error is printed above)"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wind_down(p: SweepPlan, todo: list[Task], summaries: dict, pool, futures) -> None:
    """Cancels the tasks not started, waits for the running ones (their files are complete or
    absent), adds every finished file to `summaries` and the index."""
    if pool is not None:
        pool.cancel([f for f in futures if not f.done()])
        pool.close()
    _record_finished(p, todo, summaries)


def _wind_down_after_failure(p: SweepPlan, todo: list[Task], summaries: dict, pool, futures) -> str | None:
    """_wind_down on the way to reporting another error, which must not be hidden by this one:
    when the pool cannot be stopped (its scheduler is gone) the finished files are still
    recorded; when the index cannot be written the next call rebuilds it from the files.
    Returns why the index could not be written (for the other error's message), or None when it
    was: a pool that could not be stopped changes nothing the user has to know."""
    try:
        _wind_down(p, todo, summaries, pool, futures)
        return None
    except Exception:
        try:
            _record_finished(p, todo, summaries)
            return None
        except Exception as exc:
            return _exception_text(exc)


def _index_shortfall(problem: str | None) -> str:
    """The sentence a failure's message gains when its wind-down could not write the index."""
    if problem is None:
        return ""
    return (f". {INDEX_FILE} could not be updated ({problem}): it may not list every finished task; "
            "the next run finds them from their files")


def _record_finished(p: SweepPlan, todo: list[Task], summaries: dict) -> None:
    """Adds the tasks whose files are complete to `summaries` and writes the index."""
    for task in todo:
        if task.file not in summaries and _is_finished(p.folder, task):
            summaries[task.file] = {**read_task_summary(p.folder / task.file), "id": task.id, "file": task.file,
                                  "ran": True}
    _write_json_atomic(p.folder / INDEX_FILE, _index(p, summaries))


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
