"""``aimcemu.sweep`` (module ``aimcemu.sweeps``): a grid of noisy runs, on a local process pool or a Dask cluster.

    from aimcemu import sweep
    result = sweep({
        "output": "results/drift",                 # the sweep folder
        "noise": {"model": "pcm_like"}, "mapping": "all",
        "t": [1.0, 3600.0, 86400.0], "chips": 8, "seed": 1,
        "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0],
                 "mapping": {"all": "all", "convs": {"default": "digital", "layers": {"block_*": "aimc"}}}},
    })
    result = sweep(config, executor="tcp://scheduler:8786")   # the same sweep on a Dask cluster

One *task* is one grid point (a value of every grid axis) covering all chips, all t and all
rounds: a single ``aimcemu.run`` call that writes its own results file ``tasks/<id>.h5``
(atomically: the file exists only when complete).  The task id is a hash of the task's run
arguments, so a file on disk *is* the proof that its task is done: a rerun of an interrupted
sweep skips those tasks and runs the rest, none twice, none lost.  ``index.json`` maps grid
points to files and is rewritten atomically after every completed task.

Common random numbers: every task uses the same master seed, and the noise draws are keyed by
(seed, chip, layer, weight index, round), never by the swept value, so chip k at scale 0.5 and
chip k at scale 2.0 share their random numbers and the curves come out smooth.

Executors: ``None``/"local" (a process pool of ``workers`` processes, default the number of
cores), a scheduler address ``"tcp://host:port"`` or a ``distributed.Client`` (also one built on
a dask-jobqueue SLURMCluster/PBSCluster), or any ``concurrent.futures.Executor``.  Tasks write
their files themselves; only small summaries travel back.  Each task's C++ threads are set to
cores / concurrent tasks on its host, so workers never oversubscribe.  Config format and
examples: docs/sweeps.md.
"""
from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import _core
from . import files
from . import validate

INDEX_FILE = "index.json"
TASK_FOLDER = "tasks"
FORMAT = "aimcemu-sweep"
FORMAT_VERSION = 1

# Top-level options of a sweep config and their defaults (run options are passed to aimcemu.run).
DEFAULTS: dict[str, Any] = {
    "output": None, "model": None, "data": None, "mapping": None, "noise": None, "t": [0.0],
    "chips": 1, "rounds": 1, "seed": 0, "drift_compensation": "none", "backend": "fast",
    "layers": "none", "grid": None,
}
# Grid axes besides "noise.<parameter>" (any parameter of the noise model).
PLAIN_AXES = ("model", "data", "mapping", "noise", "drift_compensation")


def _error(field_name: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"<sweep>: field '{field_name}': {what}")


# --- the plan: config -> validated tasks ----------------------------------------------------------
@dataclass
class Task:
    """One grid point: the arguments of one aimcemu.run call and where its file goes."""
    id: str
    point: dict            # axis -> label (what the grid point is called in the index and in xarray)
    run: dict              # aimcemu.run keyword arguments, output excluded
    file: str              # relative to the sweep folder

    def to_dict(self) -> dict:
        return {"id": self.id, "point": self.point, "run": self.run, "file": self.file}


@dataclass
class SweepPlan:
    folder: Path
    config: dict                       # resolved config (stored in index.json)
    axes: dict                         # axis -> list of labels, in grid order
    tasks: list[Task] = field(default_factory=list)


def load_config(path) -> dict:
    """A sweep config from a YAML file (a mapping of the options in DEFAULTS)."""
    from .runner import load_yaml_config

    return load_yaml_config(path, "sweep options")


def _axis_values(name: str, values) -> list[tuple[str, Any]]:
    """(label, value) pairs of one grid axis; a dict gives labels explicitly."""
    if isinstance(values, Mapping):
        pairs = [(validate.text(str(label), f"grid.{name}", "<sweep>"), value) for label, value in values.items()]
    elif isinstance(values, (list, tuple)):
        pairs = [(_label(value), value) for value in values]
    else:
        raise _error(f"grid.{name}", f"expected a list of values or a mapping label -> value, got {values!r}")
    if not pairs:
        raise _error(f"grid.{name}", "empty grid axis: it needs at least one value")
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise _error(f"grid.{name}", f"two values share a label ({labels}); give a mapping label -> value")
    return pairs


def _label(value):
    """Numbers label themselves (so xarray coordinates stay numeric); other values by their text."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return value
    return json.dumps(value, sort_keys=True)


def _check_top_level(config: Mapping) -> dict:
    if not isinstance(config, Mapping):
        raise _error("<root>", "expected a mapping of sweep options")
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise _error(unknown[0], f"unknown option (known: {', '.join(DEFAULTS)})")
    cfg = {**copy.deepcopy(DEFAULTS), **copy.deepcopy(dict(config))}
    if cfg["output"] is None:
        raise _error("output", "the sweep folder is required")
    t = cfg["t"] if isinstance(cfg["t"], (list, tuple)) else [cfg["t"]]
    if not t:
        raise _error("t", "empty: give at least one time (s)")
    try:
        cfg["t"] = [float(v) for v in t]
    except (TypeError, ValueError):
        raise _error("t", f"times must be numbers (s), got {t!r}") from None
    if any(v < 0 for v in cfg["t"]) or any(b <= a for a, b in zip(cfg["t"], cfg["t"][1:])):
        raise _error("t", f"times must be >= 0 s and strictly increasing, got {cfg['t']}")
    if not all(math.isfinite(v) for v in cfg["t"]):
        raise _error("t", f"times must be finite, got {cfg['t']}")
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


def _grid_points(cfg: dict) -> tuple[dict, list[tuple[dict, dict]]]:
    """The axes (name -> labels) and every point as (labels, values) in row-major order.  The
    number of points is checked against validate.MAX_TASKS from the axis lengths, before the
    grid is expanded."""
    axes = {}
    for name, values in cfg["grid"].items():
        if not isinstance(name, str):
            raise _error(f"grid.{name!r}", "axis names are strings")
        if name == "t":
            raise _error("grid.t", "t is not a task axis: list the times in the top-level 't' "
                                   "(every task covers all of them)")
        if name not in PLAIN_AXES and not name.startswith("noise."):
            raise _error(f"grid.{name}", f"unknown grid axis (known: {', '.join(PLAIN_AXES)}, noise.<parameter>)")
        axes[name] = _axis_values(name, values)
    count = math.prod(len(pairs) for pairs in axes.values())
    if count > validate.MAX_TASKS:
        raise _error("grid", f"{' x '.join(str(len(p)) for p in axes.values())} = {count} grid points; at most "
                             f"{validate.MAX_TASKS} tasks per sweep")
    points = []
    for combo in itertools.product(*axes.values()) if axes else [()]:
        labels = {name: label for name, (label, _) in zip(axes, combo)}
        values = {name: value for name, (_, value) in zip(axes, combo)}
        points.append((labels, values))
    return {name: [label for label, _ in pairs] for name, pairs in axes.items()}, points


def _point_run_args(cfg: dict, values: dict) -> dict:
    """aimcemu.run arguments of one grid point (the top-level options with the point's values)."""
    args = {key: copy.deepcopy(cfg[key]) for key in
            ("model", "data", "mapping", "noise", "t", "chips", "rounds", "seed", "drift_compensation",
             "backend", "layers")}
    # Whole values first, then noise parameters on top: a `noise` axis and a `noise.<parameter>`
    # axis combine (the parameter applies to each noise config) whatever their order in the grid.
    for name, value in sorted(values.items(), key=lambda item: item[0].startswith("noise.")):
        if name.startswith("noise."):
            if not isinstance(args["noise"], Mapping):
                raise _error(f"grid.{name}", "a noise parameter axis needs a top-level 'noise' with a 'model'")
            args["noise"] = {**args["noise"], name[len("noise."):]: value}
        else:
            args[name] = copy.deepcopy(value)
    for key in ("model", "data"):
        if args[key] is not None:
            args[key] = os.path.abspath(os.fspath(args[key]))
    args["t"] = [float(v) for v in args["t"]]
    return args


def _check_noise(noise, where: str) -> None:
    if noise is None:
        return
    from .noise import noise_model_from_dict

    try:
        noise_model_from_dict(noise)
    except _core.FormatError as exc:
        raise _error(where, str(exc)) from None


def _network(model, data, cache: dict):
    """The network of a model file (the embedded model when None), loaded once per plan."""
    from . import modelfile, runner

    key = (model, data)
    if key not in cache:
        model_path, _ = runner._locate_inputs(model, data)
        cache[key] = modelfile.load_model(model_path)
    return cache[key]


def _check_mapping(mapping, noise, net, where: str) -> None:
    """Resolve the mapping against the network exactly as aimcemu.run will: a pattern that
    matches no layer, an unknown device or a bad per-layer noise config is an error."""
    from .mapping import Mapping as LayerMapping

    try:
        resolved = LayerMapping.coerce(mapping, source="<sweep>")
        if resolved is not None:
            resolved.resolve(net, default_noise=noise)
    except _core.FormatError as exc:
        raise _error(where, str(exc)) from None


def task_id(run_args: dict) -> str:
    """A stable name for a task: 16 hex digits of the SHA-256 of its run arguments."""
    blob = json.dumps(run_args, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan(config: Mapping, output=None) -> SweepPlan:
    """Validate a sweep config completely (grid, noise parameters, mapping patterns against the
    model's layers) and list its tasks.  Bad configs raise FormatError before any work."""
    cfg = _check_top_level({**config, **({"output": os.fspath(output)} if output is not None else {})})
    axes, points = _grid_points(cfg)
    net_cache: dict = {}
    tasks = []
    from .runner import NOISY_ONLY

    digital_points = 0
    for number, (labels, values) in enumerate(points):
        args = _point_run_args(cfg, values)
        if args["mapping"] is None and args["noise"] is None:
            # A digital point runs only the noise-free reference: the options of noisy rounds
            # do not apply to it (and aimcemu.run refuses them), whatever the other points use.
            args.update(copy.deepcopy(NOISY_ONLY))
            digital_points += 1
        _check_noise(args["noise"], "grid.noise" if labels else "noise")
        net = _network(args["model"], args["data"], net_cache)
        _check_mapping(args["mapping"], args["noise"], net, "grid.mapping" if "mapping" in labels else "mapping")
        ident = task_id(args)
        tasks.append(Task(id=ident, point=labels, run=args, file=f"{TASK_FOLDER}/{number:05d}-{ident}.h5"))
    if digital_points == len(points):
        for key, unused in NOISY_ONLY.items():
            if cfg[key] != unused:
                raise _error(key, f"every task of this sweep is digital (no mapping and no noise), so {key} would "
                                  "be ignored; give a mapping or a noise model, or leave it out")
    resolved = {**cfg, "grid": {name: [list(p) for p in _axis_values(name, v)] for name, v in cfg["grid"].items()}}
    return SweepPlan(folder=Path(cfg["output"]), config=resolved, axes=axes, tasks=tasks)


# --- executing one task (runs in a worker process) -----------------------------------------------
def _task_threads(threads) -> int:
    """The C++ threads this task may use: a number, or per-worker numbers on a Dask cluster."""
    if isinstance(threads, Mapping):
        from distributed import get_worker

        return int(threads.get(get_worker().address, 1))
    return int(threads)


def execute_task(task: dict, folder: str, threads) -> dict:
    """Run one task and return its small summary.  Idempotent: a task whose file exists is not
    run again (its summary is read from the file)."""
    from . import runner

    path = Path(folder) / task["file"]
    ran = False
    start = time.perf_counter()
    if not path.is_file():
        kwargs = {**task["run"], "t": tuple(task["run"]["t"])}
        try:  # written once: an existing file is never replaced (another attempt finished first)
            runner.run(output=os.fspath(path), threads=_task_threads(threads), overwrite=False, **kwargs)
            ran = True
        except FileExistsError:
            pass
    return {**read_task_summary(path), "id": task["id"], "file": task["file"], "ran": ran,
            "seconds": time.perf_counter() - start, "pid": os.getpid()}


def read_task_summary(path, check: bool = True) -> dict:
    """Accuracy per round with its chip, t, NIU round id and drift compensation, from a task's
    results file (small).  The file is validated as a whole (_core.read_results), so a broken
    task file is named in the error; check=False when it already passed the checking process."""
    info = _core.read_results(os.fspath(path), check)
    return {"reference_accuracy": float(info["reference_accuracy"]),
            "accuracy": [float(v) for v in info["accuracy"]],
            "chip": [int(v) for v in info["chip"]], "t": [float(v) for v in info["t"]],
            "niu_round": [int(v) for v in info["niu_round"]],
            "drift_compensation": [str(v) for v in info["drift_compensation"]]}


def _init_worker(threads: int, parent: int) -> None:
    """A local pool worker: OpenMP-using libraries get the same thread budget as the C++ core,
    Ctrl-C is left to the coordinating process, which stops the pool cleanly, and the worker
    dies with the coordinator however it dies (kill -9 included), so no orphan keeps writing."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """Asks Linux to SIGKILL this process when its parent exits (prctl PR_SET_PDEATHSIG), then
    checks that the parent has not already gone in between.  Elsewhere a watchdog thread polls
    the parent instead."""
    import ctypes
    import threading

    pr_set_pdeathsig = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="aimcemu-parent-watch", daemon=True).start()


# --- the coordinator ----------------------------------------------------------------------------
@dataclass
class SweepResult:
    folder: str
    total: int
    ran: int                      # tasks executed by this call
    skipped: int                  # tasks already done before this call
    interrupted: bool
    summaries: dict               # task id -> summary

    @property
    def complete(self) -> bool:
        return len(self.summaries) == self.total

    def open(self, **kwargs):
        """The sweep as an xarray Dataset (aimcemu.analysis.open_sweep)."""
        from .analysis import open_sweep

        return open_sweep(self.folder, **kwargs)


class _Interrupted(Exception):
    pass


def _raise_interrupt(signum, frame):
    raise _Interrupted(signal.Signals(signum).name)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
    (folder / TASK_FOLDER).mkdir(parents=True, exist_ok=True)
    files.remove_stale_temporaries(folder)
    files.remove_stale_temporaries(folder / TASK_FOLDER)
    done = {}
    finished = [task for task in p.tasks if (folder / task.file).is_file()]
    _core.check_results_files([os.fspath(folder / task.file) for task in finished])  # one checking process
    for task in finished:
        done[task.id] = {**read_task_summary(folder / task.file, check=False), "id": task.id, "file": task.file,
                         "ran": False}
    return done


def _check_existing_index(p: SweepPlan) -> None:
    """A folder that already has an index must hold this sweep (a readable index, same tasks)."""
    if (p.folder / INDEX_FILE).is_file():
        if [t["id"] for t in read_index(p.folder)["tasks"]] != [t.id for t in p.tasks]:
            raise _error("output", f"{p.folder} holds a different sweep (its tasks differ); "
                                   "use a new folder or remove it")


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


def _index(p: SweepPlan, summaries: dict) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "config": p.config, "axes": p.axes,
            "tasks": [{**t.to_dict(), "done": t.id in summaries,
                       "summary": {k: summaries[t.id][k] for k in ("reference_accuracy", "accuracy", "chip", "t", "niu_round",
                                                                    "drift_compensation")}
                       if t.id in summaries else None} for t in p.tasks]}


class _FuturesExecutor:
    """Tasks on a concurrent.futures executor (submitit, Client.get_executor(), a thread pool...)
    with a fixed number of C++ threads per task."""

    def __init__(self, executor: cf.Executor, threads: int, owned: bool = False):
        self.pool, self.threads, self.owned = executor, max(1, threads), owned

    def submit(self, task: Task, folder: str):
        return self.pool.submit(execute_task, task.to_dict(), folder, self.threads)

    def as_completed(self, futures):
        return cf.as_completed(futures)

    def cancel(self, futures) -> None:
        for fut in futures:
            fut.cancel()

    def close(self) -> None:
        if self.owned:  # waits for running tasks, drops pending ones
            self.pool.shutdown(wait=True, cancel_futures=True)


def _local_pool(workers: int | None, task_count: int, threads: int) -> _FuturesExecutor:
    """A pool of spawned processes (no forked C++ thread pools); each task gets cores / workers
    C++ threads unless `threads` says otherwise."""
    import multiprocessing

    cores = _cores()
    workers = max(1, min(workers or cores, task_count or 1))
    threads = threads if threads > 0 else max(1, cores // workers)
    pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_init_worker, initargs=(threads, os.getpid()))
    return _FuturesExecutor(pool, threads, owned=True)


class _DaskClient:
    """Tasks as Dask futures; the client's worker threads decide concurrency."""

    def __init__(self, client_or_address):
        from distributed import Client

        self.own = isinstance(client_or_address, str)
        self.client = Client(client_or_address) if self.own else client_or_address
        self.threads = self._threads_per_worker()

    def _threads_per_worker(self) -> dict:
        """cores of each worker's host / task slots on that host (at least 1)."""
        workers = self.client.scheduler_info()["workers"]
        cores = self.client.run(_cores)
        slots_per_host: dict[str, int] = {}
        for info in workers.values():
            slots_per_host[info["host"]] = slots_per_host.get(info["host"], 0) + info["nthreads"]
        return {addr: max(1, cores.get(addr, 1) // slots_per_host[info["host"]]) for addr, info in workers.items()}

    def submit(self, task: Task, folder: str):
        return self.client.submit(execute_task, task.to_dict(), os.path.abspath(folder), self.threads,
                                  key=f"aimcemu-sweep-{task.id}", pure=False)

    def as_completed(self, futures):
        from distributed import as_completed

        return as_completed(futures)

    def cancel(self, futures) -> None:
        self.client.cancel(list(futures))

    def close(self) -> None:
        if self.own:
            self.client.close()


def _make_executor(executor, workers, task_count, threads):
    if executor is None or executor == "local":
        return _local_pool(workers, task_count, threads)
    if isinstance(executor, str):
        return _DaskClient(executor)
    if type(executor).__name__ == "Client" and hasattr(executor, "scheduler_info"):
        return _DaskClient(executor)
    if isinstance(executor, cf.Executor):
        return _FuturesExecutor(executor, threads or 1)
    raise _error("executor", f"expected None, 'local', a scheduler address, a distributed.Client or an Executor, "
                             f"got {executor!r}")


def sweep(config, output=None, *, executor=None, workers: int | None = None, threads: int = 0,
          progress: bool = True, wait_s: float = 0.0) -> SweepResult:
    """Run (or resume) a sweep; returns a SweepResult.

    config:   a dict of sweep options (docs/sweeps.md) or a YAML file path
    output:   the sweep folder (overrides config["output"])
    executor: None/"local" (process pool), "tcp://host:port" or a distributed.Client, or any
              concurrent.futures.Executor
    workers:  local pool size (default: all cores, at most one per task)
    threads:  C++ threads per task; 0 = cores / concurrent tasks (local pool, Dask), 1 for a
              generic Executor
    progress: show a progress bar (tqdm, on stderr)
    wait_s:   one folder runs one sweep at a time (a lock, aimcemu.files.FolderLock): how long
              to wait for another sweep in the same folder to finish (0: refuse at once)

    Kill-safe: the pool's workers die with this process however it dies, every task file is
    written once (atomically, never replaced), and the index never lists a task whose file is
    not complete; a rerun picks up every finished file and runs the rest.
    """
    if isinstance(config, (str, os.PathLike)):
        config = load_config(config)
    if workers is not None:
        workers = validate.workers(workers, "workers")
    threads = validate.threads(threads, "threads")
    p = plan(config, output)
    if p.folder.exists() and not p.folder.is_dir():
        raise _error("output", f"{p.folder} exists and is not a folder")
    _check_existing_index(p)  # before anything is created in the folder (checked again under the lock)
    p.folder.mkdir(parents=True, exist_ok=True)
    with files.FolderLock(p.folder, "sweep", wait_s):
        summaries = _prepare_folder(p)
        skipped = len(summaries)
        _write_json_atomic(p.folder / INDEX_FILE, _index(p, summaries))
        todo = [t for t in p.tasks if t.id not in summaries]
        interrupted, ran = False, 0
        if todo:
            interrupted, ran = _run_tasks(p, todo, summaries, executor, workers, threads, progress)
        files.remove_stale_temporaries(p.folder / TASK_FOLDER)  # of workers killed in this call
    return SweepResult(folder=os.fspath(p.folder), total=len(p.tasks), ran=ran, skipped=skipped,
                       interrupted=interrupted, summaries=summaries)


def _run_tasks(p: SweepPlan, todo: list[Task], summaries: dict, executor, workers, threads, progress):
    """Submit every task, record each completion in the index; on SIGINT/SIGTERM cancel what has
    not started, let running tasks finish (their files are complete), and return interrupted."""
    from tqdm import tqdm

    runner = _make_executor(executor, workers, len(todo), threads)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    in_main = _in_main_thread()
    if in_main:
        for sig in previous:
            signal.signal(sig, _raise_interrupt)
    bar = tqdm(total=len(p.tasks), initial=len(summaries), unit="task", desc="sweep",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)
    futures, ran, interrupted = [], 0, False
    try:
        try:
            futures = [runner.submit(task, os.fspath(p.folder)) for task in todo]
            for fut in runner.as_completed(futures):
                summary = fut.result()
                summaries[summary["id"]] = summary
                ran += summary["ran"]
                _write_json_atomic(p.folder / INDEX_FILE, _index(p, summaries))
                bar.update(1)
        except (_Interrupted, KeyboardInterrupt):
            interrupted = True
            if in_main:  # a second signal during the wind-down is ignored: the files stay whole
                for sig in previous:
                    signal.signal(sig, signal.SIG_IGN)
            ran += _wind_down(p, todo, summaries, runner, futures)
        except BaseException:
            # A task failed (a full disk, a bad file found late): stop the others the same way,
            # record what finished, then report the error (that one, even if the index cannot be
            # written either: the next run rebuilds it from the files).
            try:
                _wind_down(p, todo, summaries, runner, futures)
            except Exception:
                pass
            raise
        else:
            runner.close()
    finally:
        bar.close()
        if in_main:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return interrupted, ran


def _wind_down(p: SweepPlan, todo: list[Task], summaries: dict, runner, futures) -> int:
    """Cancels the tasks not started, waits for the running ones (their files are complete or
    absent), adds every finished file to the index; returns how many it added."""
    runner.cancel([f for f in futures if not f.done()])
    runner.close()
    added = 0
    for task in todo:
        if task.id not in summaries and (p.folder / task.file).is_file():
            summaries[task.id] = {**read_task_summary(p.folder / task.file), "id": task.id, "file": task.file,
                                  "ran": True}
            added += 1
    _write_json_atomic(p.folder / INDEX_FILE, _index(p, summaries))
    return added


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
