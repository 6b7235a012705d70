"""Ctrl-C or SIGTERM while the sweep's coordinator waits for its tasks is acted on at the
coordinator's own points, never inside concurrent.futures' or the pool's code.  Found by review:
the handler raised wherever the main thread was, and raised inside cf.as_completed's
_AcquireFutures it left a future's lock taken; the pool's manager thread then blocked for ever on
that future, and so did the wind-down that waits for the running tasks (the sweep hung after
Ctrl-C).  The same hazard hung `aimcemu run` in its round loop (test_run_interrupt_rounds).  Here
the signal comes exactly there: sent from inside a future's lock taken by the coordinator."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import aimcemu
from aimcemu import executors, sweeps
from hostile import tiny_files

TASKS = 4

# Run as a script: the coordinator's futures get a lock that, the first time the coordinator's
# (main) thread takes one, sends this process SIGINT and lets the handler run right there, with
# the lock taken.  A second SIGINT comes when the wind-down starts (it must be ignored).
COORDINATOR = r'''
import concurrent.futures._base as futures_base
import json, os, signal, sys, threading, time

import aimcemu
from aimcemu import executors

times = {}


class SignallingLock:
    """A future's RLock; the main thread's first take of one sends SIGINT inside it."""

    def __init__(self):
        self._lock = threading.RLock()

    def acquire(self, *args, **kwargs):
        taken = self._lock.acquire(*args, **kwargs)
        if taken and "signal" not in times and threading.current_thread() is threading.main_thread():
            times["signal"] = time.monotonic()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, with the future's lock taken
        return taken

    __enter__ = acquire

    def release(self):
        self._lock.release()

    def __exit__(self, *exc):
        self._lock.release()

    def _is_owned(self):
        return self._lock._is_owned()

    def _release_save(self):
        return self._lock._release_save()

    def _acquire_restore(self, state):
        self._lock._acquire_restore(state)


original_init = futures_base.Future.__init__


def init(self):
    original_init(self)
    self._condition = threading.Condition(SignallingLock())


original_cancel = executors.FuturesExecutor.cancel


def cancel(self, futures):
    times.setdefault("wind_down", time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C during the wind-down
    time.sleep(0.05)
    return original_cancel(self, futures)


if __name__ == "__main__":
    futures_base.Future.__init__ = init
    executors.FuturesExecutor.cancel = cancel
    config = json.loads(sys.argv[1])
    result = aimcemu.sweep(config, workers=1, progress=False)
    print(json.dumps({"interrupted": result.interrupted, "ran": result.ran, "done": result.done,
                      "latency_s": times["wind_down"] - times["signal"],
                      "handler_restored": signal.getsignal(signal.SIGINT) is signal.default_int_handler}))
'''


@pytest.fixture
def tiny_sweep(tmp_path) -> dict:
    model, data = tiny_files(tmp_path / "inputs")
    return {"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data), "noise": {"model": "pcm_like"},
            "mapping": "all", "t": [1.0], "grid": {"noise.prog_noise_scale": [0.5 + k / 4 for k in range(TASKS)]}}


def test_a_signal_inside_a_futures_lock_winds_the_sweep_down(tmp_path, tiny_sweep):
    script = tmp_path / "coordinator.py"
    script.write_text(COORDINATOR)
    try:
        child = subprocess.run([sys.executable, str(script), json.dumps(tiny_sweep)], capture_output=True, text=True,
                               timeout=120)
    except subprocess.TimeoutExpired as exc:  # the pool's manager thread blocked on a future's lock
        pytest.fail(f"the sweep hung after a SIGINT inside concurrent.futures' code ({exc})")
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout.splitlines()[-1])
    assert result["interrupted"]
    assert result["latency_s"] < 0.5
    assert result["handler_restored"]
    # The tasks not started were cancelled; the running one finished (the second signal did not
    # stop the wind-down), its file complete and in the index.
    tasks = tmp_path / "sweep" / "tasks"
    finished = sorted(p.name for p in tasks.iterdir())
    assert 1 <= result["ran"] == result["done"] == len(finished) < TASKS, (result, finished)
    index = json.loads((tmp_path / "sweep" / "index.json").read_text())
    assert sorted(os.path.basename(t["file"]) for t in index["tasks"] if t["done"]) == finished


# --- how soon a signal is acted on while a task runs ------------------------------------------------
TASK_S = 3.0
SIGNAL_AFTER_S = 0.5
SUMMARY = {"reference_accuracy": 0.5, "accuracy": [0.25], "chip": [0], "t": [1.0], "niu_round": [0],
           "drift_compensation": ["none"], "drift_alpha_capped": []}
signal_sent: list[float] = []


def signalling_task(task, folder, threads, config=None, number=None):
    """A task that sends its coordinator SIGINT SIGNAL_AFTER_S after it starts (the coordinator
    has submitted every task by then and waits for them), then runs until TASK_S (it writes no
    file).  It runs in a thread of the test's process (a thread pool, an in-process Dask worker)."""
    if not signal_sent:
        time.sleep(SIGNAL_AFTER_S)
        signal_sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    time.sleep(TASK_S - SIGNAL_AFTER_S)
    return {**SUMMARY, "id": task["id"], "file": task["file"], "ran": True}


@pytest.fixture
def thread_pool():
    with cf.ThreadPoolExecutor(1) as pool:
        yield pool


@pytest.fixture
def in_process_dask():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.mark.parametrize("executor_fixture", ["thread_pool", "in_process_dask"])
def test_a_signal_while_a_task_runs_starts_the_wind_down_at_once(tiny_sweep, monkeypatch, request, executor_fixture):
    executor = request.getfixturevalue(executor_fixture)
    signal_sent.clear()
    wind_down = []
    for kind in (executors.FuturesExecutor, executors.DaskClient):
        original = kind.cancel
        monkeypatch.setattr(kind, "cancel", lambda self, futures, original=original:
                            (wind_down.append(time.monotonic()), original(self, futures))[1])
    monkeypatch.setattr(sweeps, "execute_task", signalling_task)
    result = aimcemu.sweep(tiny_sweep, executor=executor, progress=False)
    assert len(signal_sent) == 1 and len(wind_down) == 1
    assert wind_down[0] - signal_sent[0] < 0.5  # not when the task ends, TASK_S later
    assert result.interrupted and result.ran == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
