"""Where a sweep's tasks run: a local process pool, a Dask cluster, or any concurrent.futures
executor, each seen through the same small interface (submit, as_completed, cancel, close).

Each task's C++ threads are chosen so that workers never oversubscribe a host: cores / workers
on the local pool, cores / task slots per host on Dask, 1 on a generic executor unless told.
aimcemu.sweeps decides what to run; this module only decides where.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import signal
from typing import Any, Callable, Mapping

from . import _core
from ._optional import require


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def init_worker(threads: int, parent: int) -> None:
    """A local pool worker: OpenMP-using libraries get the same thread budget as the C++ core,
    Ctrl-C is left to the coordinating process, which stops the pool cleanly, and the worker
    dies with the coordinator however it dies (kill -9 included), so no orphan keeps writing.
    The worker is aimcemu's own process, so it also keeps freed memory for its next task
    (process_memory.keep_freed_memory: glibc's malloc thresholds, and the kept model and data set)."""
    from . import process_memory

    process_memory.keep_freed_memory()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


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

    def as_completed(self, futures):
        return cf.as_completed(futures)

    def cancel(self, futures) -> None:
        for fut in futures:
            fut.cancel()

    def close(self) -> None:
        if self.owned:  # waits for running tasks, drops pending ones
            self.pool.shutdown(wait=True, cancel_futures=True)


def local_pool(workers: int | None, task_count: int, threads: int) -> FuturesExecutor:
    """A pool of spawned processes (no forked C++ thread pools); each task gets cores / workers
    C++ threads unless `threads` says otherwise."""
    import multiprocessing

    available = cores()
    workers = max(1, min(workers or available, task_count or 1))
    threads = threads if threads > 0 else max(1, available // workers)
    pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=init_worker, initargs=(threads, os.getpid()))
    return FuturesExecutor(pool, threads, owned=True)


class DaskClient:
    """Tasks as Dask futures; the client's worker threads decide concurrency."""

    def __init__(self, client_or_address):
        Client = require("distributed", "sweeps on a Dask cluster").Client

        self.own = isinstance(client_or_address, str)
        self.client = Client(client_or_address) if self.own else client_or_address
        self.threads = self._threads_per_worker()

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

    def as_completed(self, futures):
        as_completed = require("distributed", "sweeps on a Dask cluster").as_completed

        return as_completed(futures)

    def cancel(self, futures) -> None:
        self.client.cancel(list(futures))

    def close(self) -> None:
        if self.own:
            self.client.close()


def make_executor(executor, workers: int | None, task_count: int, threads: int):
    """None/"local" (a process pool), a scheduler address or a distributed.Client, or any
    concurrent.futures.Executor."""
    if executor is None or executor == "local":
        return local_pool(workers, task_count, threads)
    if isinstance(executor, str):
        return DaskClient(executor)
    if type(executor).__name__ == "Client" and hasattr(executor, "scheduler_info"):
        return DaskClient(executor)
    if isinstance(executor, cf.Executor):
        return FuturesExecutor(executor, threads or 1)
    raise _core.FormatError(f"<sweep>: field 'executor': expected None, 'local', a scheduler address, a "
                            f"distributed.Client or an Executor, got {executor!r}")
