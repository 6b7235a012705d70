"""Where a sweep's tasks run: a local process pool, a Dask cluster, or any concurrent.futures
executor, each seen through the same small interface (submit, completions, cancel, close).

Each task's C++ threads are chosen so that workers never oversubscribe a host: cores / workers
on the local pool, cores / task slots per host on Dask, 1 on a generic executor unless told.
aimcemu.sweeps decides what to run; this module only decides where.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import warnings
from typing import Any, Callable, Mapping

from . import _core, validate
from ._optional import require


class WorkerDiedError(RuntimeError):
    """A worker process of the local pool died while tasks were running (killed by the
    out-of-memory killer or kill -9, or crashed); the message names its task.  The finished
    tasks are in the index and a rerun runs the rest (raised by aimcemu.sweeps)."""


class ClusterLostError(RuntimeError):
    """A sweep's tasks were lost without a result: the connection to the Dask scheduler was
    lost, a task was cancelled outside the sweep, or Dask gave up on a task whose workers kept
    dying (KilledWorker).  The finished tasks are in the index and a rerun runs the rest
    (raised by aimcemu.sweeps)."""


def lost_task_reason(exc: BaseException) -> str | None:
    """What a task's exception says about the cluster, when it says the task was lost rather than
    failed on its own (None then): distributed's errors are told apart only when distributed is
    already loaded (a sweep on Dask has loaded it; this never imports it)."""
    import sys

    distributed = sys.modules.get("distributed")
    killed_worker = getattr(distributed, "KilledWorker", ())
    comm_closed = getattr(getattr(distributed, "comm", None), "CommClosedError", ())
    if killed_worker and isinstance(exc, killed_worker):
        return ("Dask gave up on a task because the workers that ran it died (KilledWorker: out of "
                "memory, a crash, or workers stopped)")
    if (comm_closed and isinstance(exc, comm_closed)) or getattr(exc, "reason", None) == "scheduler-connection-lost":
        return "the connection to the Dask scheduler was lost (it stopped, crashed or cannot be reached)"
    if isinstance(exc, cf.CancelledError):
        return ("a task was cancelled outside the sweep (on Dask: the scheduler went away or restarted, "
                "or someone cancelled it)")
    return None


def cores() -> int:
    """The cores this process may run on (its affinity mask), as the core counts them for 0 threads."""
    return int(_core.resolve_threads(0))


# SIGINT and SIGTERM: the coordinator handles both (it stops handing out tasks and waits for the
# running ones), so a signal to the whole process group (a terminal's Ctrl-C; timeout, systemd,
# docker stop, scancel send SIGTERM) must not kill a worker in the middle of a task.  A worker
# ignores SIGINT; on SIGTERM it finishes its running task (the file is then complete) and exits,
# or exits at once when idle.  Its exit status then says so, for the coordinator's message.
WORKER_STOPPED_AFTER_TASK = 128 + int(signal.SIGTERM)
# The start of the RuntimeWarning a run raises for capped drift-compensation alphas (a regex).
CAPPED_ALPHA_WARNING = r"drift compensation: \d+ alpha\(s\) exceed what the NIU's back-conversion holds"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_busy = False                  # a task is running in this worker
_stop_requested = False        # SIGTERM came while it ran
_task_starts = None            # shared array: task number -> PID of the worker that started it (local pool)


def _on_terminate(signum, frame) -> None:
    global _stop_requested
    if _busy:
        _stop_requested = True
    else:
        os._exit(WORKER_STOPPED_AFTER_TASK)


class running_task:
    """`with running_task(number):` around a task in a worker: records which worker started the
    task (local pool) and defers a SIGTERM to the task's end, where the worker exits without
    taking another (its result is its file, which the coordinator reads)."""

    def __init__(self, number: int | None):
        self.number = number

    def __enter__(self) -> None:
        global _busy
        _busy = True
        if _task_starts is not None and self.number is not None:
            _task_starts[self.number] = os.getpid()

    def __exit__(self, *exc) -> None:
        global _busy
        _busy = False
        if _stop_requested:
            os._exit(WORKER_STOPPED_AFTER_TASK)


def init_worker(threads: int, parent: int, task_starts=None, started=None, names_removed=None) -> None:
    """A local pool worker: OpenMP-using libraries get the same thread budget as the C++ core,
    SIGINT and SIGTERM are left to the coordinating process (above), and the worker dies with the
    coordinator however it dies (kill -9 included), so no orphan keeps writing.  The worker
    starts with both signals blocked (the coordinator blocks them while it spawns workers), so
    a signal that comes while it is still importing waits for these handlers: no traceback.
    The worker is aimcemu's own process, so it also keeps freed memory for its next task
    (process_memory.keep_freed_memory: glibc's malloc thresholds, and the kept model and data set).
    `started` and `names_removed` (LocalPool's pipes): the worker says it has opened the pool's
    semaphores, first thing, and takes no task until the coordinator has removed their names
    (_SemaphoreNames)."""
    global _task_starts
    if started is not None:
        _report_started(started)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_terminate)
    _task_starts = task_starts
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    from . import process_memory

    process_memory.keep_freed_memory()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # A run's capped-alpha warning (aimcemu.calibration) would print here with no line of the
    # user's to point at, once per task: the coordinator warns once for all the sweep's tasks,
    # from what their files record (sweeps._warn_capped_alphas).
    warnings.filterwarnings("ignore", message=CAPPED_ALPHA_WARNING, category=RuntimeWarning)
    die_with_parent(parent)
    if names_removed is not None:
        _wait_for_eof(names_removed)


def _report_started(started) -> None:
    """Tells the coordinator that this worker has opened the pool's semaphores: the spawn
    bootstrap opened them by name when it unpickled the pool's queues, before the initializer."""
    with contextlib.suppress(OSError):  # the coordinator is gone: die_with_parent ends this worker
        started.send(os.getpid())
    started.close()


def _wait_for_eof(connection) -> None:
    """Waits until the other end of a pipe is closed (by the coordinator, or as it dies)."""
    with contextlib.suppress(EOFError, OSError):
        while True:
            connection.recv_bytes()
    connection.close()


def die_with_parent(parent: int) -> None:
    """Asks Linux to SIGKILL this process when its parent exits (prctl PR_SET_PDEATHSIG), then
    checks that the parent has not already gone in between.  Elsewhere a watchdog thread polls
    the parent instead."""
    import ctypes
    import threading
    import time

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


def task_threads(threads: int | Mapping[str, int]) -> int:
    """The C++ threads a task may use: a number, or per-worker numbers on a Dask cluster."""
    if isinstance(threads, Mapping):
        get_worker = require("distributed", "sweeps on a Dask cluster").get_worker

        return int(threads.get(get_worker().address, 1))
    return int(threads)


class FuturesExecutor:
    """Tasks on a concurrent.futures executor (submitit, Client.get_executor(), a thread pool...)
    with a fixed number of C++ threads per task."""

    def __init__(self, executor: cf.Executor, threads: int, owned: bool = False):
        self.pool, self.threads, self.owned = executor, max(1, threads), owned

    def worker_folder(self, folder) -> str:
        return os.fspath(folder)

    def submit(self, fn: Callable, key: str, *args: Any):
        del key  # concurrent.futures has no task names
        return self.pool.submit(fn, *args)

    def completions(self, futures) -> "FutureCompletions":
        return FutureCompletions(futures)

    def cancel(self, futures) -> None:
        for fut in futures:
            fut.cancel()

    def close(self) -> None:
        if self.owned:  # waits for running tasks, drops pending ones
            self.pool.shutdown(wait=True, cancel_futures=True)

    def worker_processes(self) -> list:
        return []

    def tasks_started_by(self, pid: int) -> list[int]:
        del pid
        return []


class LocalPool(FuturesExecutor):
    """A pool of spawned aimcemu worker processes (init_worker), spawned with SIGINT and SIGTERM
    blocked, so they inherit the block and a signal cannot reach them before their handlers
    exist.  It can tell which task a dead worker had started.  It starts all its workers at once
    and removes the names of its semaphores before any task starts (_SemaphoreNames), so that a
    SIGKILL to the whole process group leaves none behind: `names_removed_early`.  Outside Linux,
    and on a Python whose multiprocessing differs from the private parts that uses
    (_has_what_early_removal_uses, and what only a pool can show), it is False and the pool works
    as before that removal: workers spawned on demand by submit(), the names left to
    multiprocessing and its resource tracker (`why_names_not_removed_early` says which)."""

    def __init__(self, workers: int, threads: int, task_count: int, semaphore_prefix: str | None = None):
        import multiprocessing

        self._context = multiprocessing.get_context("spawn")
        self.task_starts = self._context.RawArray("q", max(1, task_count))  # lock-free: one writer per entry
        self.semaphore_prefix = semaphore_prefix or new_semaphore_prefix()
        self._processes: list = []
        self._names: _SemaphoreNames | None = None
        initargs = (threads, os.getpid(), self.task_starts)
        self.why_names_not_removed_early = ("" if _has_what_early_removal_uses() else
                                            "not Linux, or a private part of multiprocessing is missing")
        pool = None if self.why_names_not_removed_early else self._pool_removing_names_early(workers, initargs)
        self.names_removed_early = pool is not None
        if pool is None:
            pool = cf.ProcessPoolExecutor(workers, mp_context=self._context, initializer=init_worker, initargs=initargs)
        super().__init__(pool, threads, owned=True)

    def _pool_removing_names_early(self, workers: int, initargs: tuple) -> cf.ProcessPoolExecutor | None:
        """A pool with every worker started, whose semaphore names go once all have opened them
        (ProcessPoolExecutor would start them one per submit(), and fewer when one is idle by then).
        None, with nothing of it left running, when multiprocessing turns out to differ from what
        this uses (_InternalsDiffer); any other failure is raised, likewise with nothing left."""
        started_reader, started = self._context.Pipe(duplex=False)
        names_removed_reader, names_removed = self._context.Pipe(duplex=False)
        pool = names = None
        try:
            with _semaphores_named(self.semaphore_prefix):
                pool = cf.ProcessPoolExecutor(workers, mp_context=self._context, initializer=init_worker,
                                              initargs=(*initargs, started, names_removed_reader))
            names = _SemaphoreNames(self.semaphore_prefix)
            processes = _start_every_worker(pool)
            names.remove_once_opened(started_reader, names_removed, processes)
        except BaseException as exc:
            started_reader.close()
            names_removed.close()  # first: a worker left waiting on it could not be stopped
            if pool is not None:
                pool.shutdown(wait=True)  # its own finalizers remove the names it made, when it is freed
            if isinstance(exc, _INTERNALS_DIFFER):
                self.why_names_not_removed_early = f"{type(exc).__name__}: {exc}"
                return None
            if names is not None:
                names.remove()
            raise
        finally:
            started.close()  # the workers hold their own ends
            names_removed_reader.close()
        self._names = names
        return pool

    def submit(self, fn: Callable, key: str, *args: Any):
        with _stop_signals_held():  # without the early removal, workers are spawned on demand, here
            future = super().submit(fn, key, *args)
            self._processes = list((self.pool._processes or {}).values())  # private: the only handle on them
        return future

    def worker_processes(self) -> list:
        """The worker processes (multiprocessing.Process: pid, exitcode once ended)."""
        return list(self._processes)

    def tasks_started_by(self, pid: int) -> list[int]:
        """The numbers of the tasks that worker `pid` started."""
        return [number for number, starter in enumerate(self.task_starts) if starter == pid]

    def close(self) -> None:
        super().close()  # every worker has exited when it returns
        if self._names is not None:
            self._names.close()


def _start_every_worker(pool: cf.ProcessPoolExecutor) -> list:
    """Starts all of `pool`'s workers now, through private ProcessPoolExecutor methods (as it does
    itself with the fork start method), and returns them (multiprocessing.Process); on failure
    none is left running."""
    try:
        with _stop_signals_held():
            cf.ProcessPoolExecutor._launch_processes(pool)
        cf.ProcessPoolExecutor._start_executor_manager_thread(pool)  # it stops the workers at shutdown
        return list(pool._processes.values())
    except BaseException:
        processes = getattr(pool, "_processes", None)
        for process in processes.values() if isinstance(processes, dict) else ():
            process.kill()
            process.join()
        raise


# --- The local pool's semaphore names ---------------------------------------------------------------
# With the spawn start method, multiprocessing makes each lock and semaphore of the pool's queues a
# named POSIX semaphore (/dev/shm/sem.NAME on Linux; five per ProcessPoolExecutor), which each worker
# opens by name as it starts.  It removes the names when the pool is freed, or, should the process
# die first, leaves that to its resource tracker process; a SIGKILL to the whole process group (a
# batch system ending a job, the out-of-memory killer) kills the tracker too, and the names stayed
# until the machine restarted.  Two things close that:
# - the pool removes the names itself once every worker has opened them, before any task starts
#   (_SemaphoreNames): a kill after that leaves nothing;
# - each pool's names start with a prefix of its own, which a sweep writes into its folder's lock
#   file before the pool exists; the next sweep on that folder, once it holds the lock, removes any
#   names with that prefix (remove_leftover_semaphores): a kill while the workers were starting.
# Both use private parts of multiprocessing.  A Python where they are missing or differ gets the
# pool as it was before (LocalPool.names_removed_early False), never a broken sweep.
SEMAPHORE_PREFIX_FIELD = "semaphore_prefix"  # the lock file's field (aimcemu.files.FolderLock's note)
_SEMAPHORE_PREFIX = re.compile(r"mp-aimcemu-[0-9a-f]{16}")
_SEMAPHORE_FOLDER = "/dev/shm"  # where glibc keeps the semaphore named "/NAME", as "sem.NAME"
_make_name_lock = threading.Lock()


class _InternalsDiffer(RuntimeError):
    """What the pool found of multiprocessing's private parts is not what the early removal expects."""


# What a use of a private part that is missing or reshaped raises.
_INTERNALS_DIFFER = (AttributeError, TypeError, KeyError, IndexError, _InternalsDiffer)


@functools.lru_cache(maxsize=None)
def _has_what_early_removal_uses() -> bool:
    """Whether this Python has, of the shape expected, the private parts of multiprocessing that
    the early removal of a pool's semaphore names uses.  Checked once; what only a pool can show
    (that the names are the ones _make_name gives, and the finalizers find exactly them) LocalPool checks."""
    try:
        import _multiprocessing
        from multiprocessing import synchronize, util

        # Linux only: the names' length (macOS allows 31 characters) and /dev/shm's listing.
        return (sys.platform.startswith("linux")
                and "_make_name" in synchronize.SemLock.__dict__
                and isinstance(util._finalizer_registry, dict)
                and callable(synchronize.SemLock._cleanup)
                and callable(_multiprocessing.sem_unlink)
                and callable(cf.ProcessPoolExecutor._launch_processes)
                and callable(cf.ProcessPoolExecutor._start_executor_manager_thread))
    except (ImportError, AttributeError):
        return False


def new_semaphore_prefix() -> str:
    """A prefix for one pool's semaphore names, unique to it (64 random bits)."""
    import secrets

    return f"mp-aimcemu-{secrets.token_hex(8)}"


@contextlib.contextmanager
def _semaphores_named(prefix: str):
    """The semaphores multiprocessing creates meanwhile are named "/PREFIX-<random>".  It asks
    synchronize.SemLock._make_name for each name ("<semprefix>-<random>" by default); that
    static method is replaced for the while and put back afterwards, whatever it was: a library
    may have put its own there (joblib's loky, imported by scikit-learn, names every semaphore of
    the process "/loky-<pid>-<random>"), so the process's semprefix setting alone would not do.
    One pool at a time: the method is the process's."""
    import secrets
    from multiprocessing import synchronize

    def pool_name() -> str:
        return f"/{prefix}-{secrets.token_hex(4)}"  # SemLock draws again should a name exist

    with _make_name_lock:
        previous = synchronize.SemLock.__dict__["_make_name"]
        try:
            synchronize.SemLock._make_name = staticmethod(pool_name)
            yield
        finally:
            synchronize.SemLock._make_name = previous


def _names_with_prefix(prefix: str) -> set[str] | None:
    """The semaphore names ("/NAME") that start with "PREFIX-" now; None where no folder lists them."""
    try:
        entries = os.listdir(_SEMAPHORE_FOLDER)
    except OSError:  # not Linux
        return None
    return {"/" + entry[len("sem."):] for entry in entries if entry.startswith(f"sem.{prefix}-")}


class _SemaphoreNames:
    """The names of one pool's semaphores, removed as soon as every worker has opened them.

    Each worker says so from its initializer (init_worker: the spawn bootstrap has opened them
    by then); a worker that died before it said so needs them no more.  A watcher thread waits for
    that, removes the names the way multiprocessing itself does when the pool is freed (its
    finalizer for each: sem_unlink and the resource tracker told, so it warns of no leak), then
    closes the pipe the workers wait on before their first task (`names_removed`).  The
    semaphores live on in the processes that opened them; only a process that would open one by
    name could not, and the pool starts no worker after its first ones."""

    def __init__(self, prefix: str):
        """Finds the finalizers of the semaphores named with `prefix`; _InternalsDiffer unless
        there are some and their names are exactly those /dev/shm lists with it (where it does)."""
        from multiprocessing import synchronize, util

        finalizers = {}  # name: its finalizer (util.Finalize; getattr: a private attribute of multiprocessing's)
        for finalizer in list(util._finalizer_registry.values()):
            if getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup:
                name = getattr(finalizer, "_args")[0]
                if isinstance(name, str) and name.startswith(f"/{prefix}-"):
                    finalizers[name] = finalizer
        self._finalizers = list(finalizers.values())
        self._watcher: threading.Thread | None = None
        names, listed = set(finalizers), _names_with_prefix(prefix)
        if not names or (listed is not None and names != listed):
            raise _InternalsDiffer(f"the finalizers name {sorted(names)}, {_SEMAPHORE_FOLDER} lists {listed}")

    def remove_once_opened(self, started, names_removed, processes: list) -> None:
        self._watcher = threading.Thread(target=self._watch, args=(started, names_removed, processes),
                                         name="aimcemu-semaphore-names", daemon=True)
        self._watcher.start()

    def _watch(self, started, names_removed, processes: list) -> None:
        from multiprocessing.connection import wait

        try:
            not_opened = {process.pid: process.sentinel for process in processes}
            with started:
                while not_opened:
                    ready = wait([started, *not_opened.values()])
                    if started in ready:
                        try:
                            not_opened.pop(started.recv(), None)
                        except EOFError:  # every worker has reported in or died
                            break
                    for pid, sentinel in list(not_opened.items()):
                        if sentinel in ready:  # died before it opened them
                            del not_opened[pid]
            self.remove()
        finally:
            names_removed.close()  # whatever happened: the workers must not wait for ever

    def remove(self) -> None:
        """Removes the names now (once: a finalizer runs only once, whichever thread calls it).
        A finalizer that fails for want of what it expects leaves its name to the resource
        tracker, as without the early removal."""
        for finalizer in self._finalizers:
            with contextlib.suppress(OSError, *_INTERNALS_DIFFER):  # the name gone already, or the tracker's pipe
                finalizer()

    def close(self) -> None:
        """After the workers have exited: the watcher has seen them go; the names go now if it
        has not removed them."""
        if self._watcher is not None:
            self._watcher.join()
        self.remove()


def remove_leftover_semaphores(holder: Mapping) -> list[str]:
    """Removes the semaphore names a sweep's local pool left behind when it was killed with its
    whole process group: those starting with the prefix recorded in `holder` (the fields of a
    folder's lock file written by its last holder, which no longer holds it), on the host that
    recorded it.  Returns the names removed.  Any other name, and a prefix not of the form
    new_semaphore_prefix() makes, is left alone: the lock file is only a file."""
    try:
        from _multiprocessing import sem_unlink
    except ImportError:  # a Python without it: the names stay, as before aimcemu removed them
        return []

    prefix = holder.get(SEMAPHORE_PREFIX_FIELD)
    if not isinstance(prefix, str) or not _SEMAPHORE_PREFIX.fullmatch(prefix):
        return []
    if holder.get("host") != socket.gethostname():  # /dev/shm is the host's own
        return []
    removed = []
    for name in sorted(_names_with_prefix(prefix) or ()):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            sem_unlink(name)
            removed.append("sem." + name[1:])
    return removed


@contextlib.contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM wait until the block ends, then reach the caller's handlers: a worker
    spawned meanwhile inherits the blocked mask (so it starts with them blocked), and the
    coordinator is never interrupted between starting a worker and sending it its start-up data
    (which would leave the worker to die with an EOFError traceback).  The mask alone does not
    hold a signal back: another thread of the process may take it and Python would still run
    the handler in the main thread, so the handlers are held too (main thread only)."""
    held: list[int] = []
    in_main = threading.current_thread() is threading.main_thread()
    previous_handlers = {}
    if in_main:
        previous_handlers = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in STOP_SIGNALS}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)


class FutureCompletions:
    """concurrent.futures futures as they complete, waited for a slice at a time (wait): between
    slices the sweep's coordinator looks for a stop signal (sweeps._StopSignals), which its
    handler only records.  Each future's done callback puts it in a SimpleQueue (C code, safe
    from any thread), so a slice costs nothing per pending future, where cf.wait and
    cf.as_completed take every pending future's lock each time."""

    def __init__(self, futures):
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        for fut in futures:
            fut.add_done_callback(self._done.put)  # called at once for a future already done

    def wait(self, timeout: float) -> list:
        """The futures completed since the last call; waits up to `timeout` seconds for one."""
        try:
            batch = [self._done.get(timeout=timeout)]
        except queue.Empty:
            return []
        with contextlib.suppress(queue.Empty):
            while True:
                batch.append(self._done.get_nowait())
        return batch


class DaskCompletions:
    """Dask futures as they complete (distributed.as_completed, which tracks them on the client's
    event loop), waited for a slice at a time as FutureCompletions are; a slice is a sleep, as
    distributed's own blocking iteration polls every 0.1 s."""

    def __init__(self, futures):
        self._completed = require("distributed", "sweeps on a Dask cluster").as_completed(futures)

    def wait(self, timeout: float) -> list:
        """The futures completed since the last call; waits up to `timeout` seconds for one."""
        if not self._completed.has_ready():
            time.sleep(timeout)
        return self._completed.next_batch(block=False)


def local_pool(workers: int | None, task_count: int, threads: int, semaphore_prefix: str | None = None) -> LocalPool:
    """A pool of spawned processes (no forked C++ thread pools); each task gets cores / workers
    C++ threads unless `threads` says otherwise.  semaphore_prefix: see LocalPool."""
    available = cores()
    workers = max(1, min(workers or available, task_count or 1))
    threads = threads if threads > 0 else max(1, available // workers)
    return LocalPool(workers, threads, task_count, semaphore_prefix)


class DaskClient:
    """Tasks as Dask futures; the client's worker threads decide concurrency."""

    def __init__(self, client_or_address, check_stop: Callable[[], None] | None = None):
        """check_stop: called every STOP_CHECK_S while connecting to a scheduler by address; what
        it raises (a user's stop) ends the wait."""
        Client = require("distributed", "sweeps on a Dask cluster").Client

        self.own = isinstance(client_or_address, str)
        try:
            if not self.own:
                self.client = client_or_address
            elif check_stop is None:
                self.client = Client(client_or_address)
            else:
                self.client = _connect_checking(functools.partial(Client, client_or_address), check_stop)
        except (ValueError, TypeError) as exc:  # "bogus": "missing port number", from Dask's parser
            raise _core.FormatError(f"<sweep>: field 'executor': not a scheduler address "
                                    f"(tcp://host:port): {client_or_address!r} ({exc})") from None
        try:
            self.threads = self._threads_per_worker()
        except BaseException:
            if self.own:  # a client this made: nobody else would close it
                with contextlib.suppress(Exception):
                    self.client.close()
            raise

    def _threads_per_worker(self) -> dict:
        """cores of each worker's host / task slots on that host (at least 1)."""
        workers = self.client.scheduler_info()["workers"]
        available = self.client.run(cores)
        slots_per_host: dict[str, int] = {}
        for info in workers.values():
            slots_per_host[info["host"]] = slots_per_host.get(info["host"], 0) + info["nthreads"]
        return {addr: max(1, available.get(addr, 1) // slots_per_host[info["host"]])
                for addr, info in workers.items()}

    def worker_folder(self, folder) -> str:
        return os.path.abspath(folder)  # workers may start elsewhere

    def submit(self, fn: Callable, key: str, *args: Any):
        return self.client.submit(fn, *args, key=key, pure=False)

    def completions(self, futures) -> "DaskCompletions":
        return DaskCompletions(futures)

    def cancel(self, futures) -> None:
        self.client.cancel(list(futures))

    def close(self) -> None:
        if self.own:
            # A client that lost its scheduler logs its cancelled reconnection as an ERROR with a
            # traceback while it closes; the sweep reports the loss itself (ClusterLostError).
            lost = self.client.status != "running"
            with _logger_silenced("distributed.client") if lost else contextlib.nullcontext():
                self.client.close()

    def worker_processes(self) -> list:
        return []

    def tasks_started_by(self, pid: int) -> list[int]:
        del pid
        return []


# How often the coordinator looks for a user's stop while it waits for a scheduler to answer.
STOP_CHECK_S = 0.1


def _connect_checking(connect: Callable[[], Any], check_stop: Callable[[], None]):
    """connect() (a distributed.Client made for an address) run in a thread of its own, while
    this thread calls check_stop() every STOP_CHECK_S: a scheduler that does not answer keeps
    Dask waiting for its connect timeout (30 s by default, longer when the host accepts the
    connection and says nothing), and the coordinator handles signals only at its own points.
    What check_stop raises ends the wait; the connection, should it still come, is closed."""
    outcome: dict[str, Any] = {}
    lock = threading.Lock()

    def run() -> None:
        try:
            client, error = connect(), None
        except BaseException as exc:  # handed to the waiting thread
            client, error = None, exc
        with lock:
            if outcome.get("abandoned") and client is not None:
                with contextlib.suppress(Exception):  # nobody is left to tell
                    client.close()
            outcome.update(client=client, error=error)

    thread = threading.Thread(target=run, name="aimcemu-dask-connect", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(STOP_CHECK_S)
            check_stop()
    except BaseException:
        with lock:
            outcome["abandoned"] = True
            late = outcome.get("client")
        if late is not None:
            with contextlib.suppress(Exception):  # the user's stop is what to report
                late.close()
        raise
    if outcome["error"] is not None:
        raise outcome["error"]
    return outcome["client"]


@contextlib.contextmanager
def _logger_silenced(name: str):
    import logging

    logger = logging.getLogger(name)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


# Dask's address schemes, and the host:port every one but inproc needs.
_SCHEDULER_SCHEMES = ("", "tcp", "tls", "ws", "wss", "ucx", "inproc")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):\d{1,5}")


def _is_dask_client(executor) -> bool:
    """A distributed.Client, told without importing distributed (an optional extra)."""
    return type(executor).__name__ == "Client" and hasattr(executor, "scheduler_info")


def check_executor(executor, source: str = "<arguments>", field: str = "executor") -> None:
    """Refuses, before a sweep creates anything, an executor that make_executor would refuse, and
    a string that is neither "local" nor a scheduler address ([scheme://]host:port), of which
    Dask's own parser said only "missing port number"."""
    if executor is None or executor == "local" or _is_dask_client(executor) or isinstance(executor, cf.Executor):
        return
    if not isinstance(executor, str):
        raise _core.FormatError(f"{source}: field '{field}': expected None, 'local', a scheduler address, a "
                                f"distributed.Client or an Executor, got {validate.short_repr(executor)}")
    scheme, _, rest = executor.rpartition("://")
    if scheme not in _SCHEDULER_SCHEMES or (scheme != "inproc" and not _HOST_PORT.fullmatch(rest)):
        raise _core.FormatError(f"{source}: field '{field}': expected 'local' or a scheduler address "
                                f"such as tcp://host:8786, got {validate.short_repr(executor)}")


def is_local(executor) -> bool:
    """Whether `executor` (make_executor's) means the local process pool."""
    return executor is None or (isinstance(executor, str) and executor == "local")


def make_executor(executor, workers: int | None, task_count: int, threads: int, semaphore_prefix: str | None = None,
                  check_stop: Callable[[], None] | None = None):
    """None/"local" (a process pool, its semaphores named with `semaphore_prefix`), a scheduler
    address (connected to while check_stop is called: DaskClient) or a distributed.Client, or any
    concurrent.futures.Executor."""
    if is_local(executor):
        return local_pool(workers, task_count, threads, semaphore_prefix)
    if isinstance(executor, str):
        return DaskClient(executor, check_stop)
    if _is_dask_client(executor):
        return DaskClient(executor)
    if isinstance(executor, cf.Executor):
        return FuturesExecutor(executor, threads or 1)
    raise _core.FormatError(f"<sweep>: field 'executor': expected None, 'local', a scheduler address, a "
                            f"distributed.Client or an Executor, got {executor!r}")
