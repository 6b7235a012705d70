"""A sweep whose tasks the cluster loses (the Dask scheduler gone: FutureCancelledError
"scheduler-connection-lost"; KilledWorker; a cancelled future) ends in a worded error, exit
status 2, saying what happened and that a rerun resumes, with what finished in the index.  It
ended in a raw traceback, exit 1.  The executor here runs the first task and hands back the
cluster's error for the others, as distributed does when its scheduler goes away."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import re

import pytest
import yaml

import aimcemu
from aimcemu import cli, executors, sweeps
from hostile import tiny_files


class LosingExecutor(cf.Executor):
    """Runs the first task submitted; every later one fails with `error`."""

    def __init__(self, error: BaseException):
        self.error, self.submitted = error, 0

    def submit(self, fn, *args, **kwargs):
        future = cf.Future()
        self.submitted += 1
        if self.submitted == 1:
            future.set_result(fn(*args, **kwargs))
        else:
            future.set_exception(self.error)
        return future


def scheduler_gone() -> BaseException:
    distributed = pytest.importorskip("distributed")
    return distributed.client.FutureCancelledError("aimcemu-sweep-x", reason="scheduler-connection-lost")


def killed_worker() -> BaseException:
    distributed = pytest.importorskip("distributed")
    class Worker:  # the scheduler's WorkerState, as far as the error's text reads it
        address = "tcp://127.0.0.1:40000"

    return distributed.KilledWorker("aimcemu-sweep-x", Worker(), 3)


def cancelled() -> BaseException:
    return cf.CancelledError()


@pytest.fixture
def config(tmp_path) -> dict:
    model, data = tiny_files(tmp_path)
    return {"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data), "noise": {"model": "pcm_like"},
            "mapping": "all", "t": [1.0], "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}}


def done_count(folder) -> int:
    return sum(task["done"] for task in json.loads((folder / "index.json").read_text())["tasks"])


@pytest.mark.parametrize("error, says", [(scheduler_gone, "scheduler-connection-lost"),
                                         (killed_worker, "KilledWorker"),
                                         (cancelled, "cancelled outside the sweep")])
def test_the_command_words_a_lost_cluster_and_exits_2(config, tmp_path, capsys, monkeypatch, error, says):
    losing = executors.FuturesExecutor(LosingExecutor(error()), threads=1)
    monkeypatch.setattr(sweeps, "make_executor", lambda *args: losing)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    code = cli.main(["sweep", "-c", str(path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err and "sweep complete" not in out
    assert err.startswith("aimcemu sweep: error: ") and err.count("\n") == 1
    assert says in err and "1 of 3 tasks that finished are kept" in err and "rerun the same command" in err
    assert done_count(tmp_path / "sweep") == 1
    monkeypatch.undo()
    rerun = aimcemu.sweep(config, workers=1, progress=False)  # and a rerun resumes
    assert (rerun.ran, rerun.skipped, rerun.complete) == (2, 1, True)


def test_sweep_raises_cluster_lost_error(config, tmp_path):
    with pytest.raises(executors.ClusterLostError, match="scheduler-connection-lost"):
        aimcemu.sweep(config, executor=LosingExecutor(scheduler_gone()), progress=False)
    assert done_count(tmp_path / "sweep") == 1


def test_a_task_that_fails_on_its_own_keeps_its_error(config):
    """Not every task error is a lost cluster: a task's own error (here a bad value) stays itself."""
    with pytest.raises(ValueError, match="a task's own error"):
        aimcemu.sweep(config, executor=LosingExecutor(ValueError("a task's own error")), progress=False)


def stop_group(process, grace_s: float = 20.0) -> None:
    """Ends `process` and its process group: SIGTERM (a Dask worker's nanny then stops its worker,
    and multiprocessing's resource tracker, which ignores the signal, removes what they leave),
    then SIGKILL whatever is left after `grace_s`."""
    import os
    import signal
    import time

    from hostile import live_processes_in_group

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 60.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait_s
        while live_processes_in_group(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not live_processes_in_group(process.pid):
            break
    process.wait()


@pytest.mark.slow
def test_a_dask_scheduler_killed_mid_sweep_gives_a_worded_error_and_the_rerun_resumes(tmp_path, tmp_path_factory):
    """The real thing: `aimcemu sweep --scheduler` while the scheduler process is killed (-9)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("distributed")
    from conftest import digits_subset

    _, data, *_ = digits_subset(tmp_path_factory, 60)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0, 3600.0],
                                    "chips": 8, "rounds": 2, "seed": 3,
                                    "grid": {"noise.prog_noise_scale": [0.5 + k / 4 for k in range(8)]}}))
    address_file = tmp_path / "scheduler.json"
    started = []

    def start(*argv):
        started.append(subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True))
        return started[-1]

    try:
        scheduler = start("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                          "--no-dashboard", "--scheduler-file", str(address_file))
        while not address_file.is_file():
            time.sleep(0.2)
        address = json.loads(address_file.read_text())["address"]
        start("distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard")
        command = [sys.executable, "-m", "aimcemu.cli", "sweep", "-c", str(path), "--scheduler", address,
                   "--no-progress"]
        client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tasks = tmp_path / "sweep" / "tasks"
        deadline = time.monotonic() + 120
        while not (tasks.is_dir() and list(tasks.glob("*.h5"))) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(scheduler.pid, signal.SIGKILL)
        out, err = client.communicate(timeout=120)
    finally:
        for process in started:  # SIGTERM first: a SIGKILL to the worker's group, its resource
            stop_group(process)  # tracker included, left its six semaphore names in /dev/shm
    finished = len(list(tasks.glob("*.h5")))
    assert client.returncode == 2, out + err
    assert "Traceback" not in err and "sweep complete" not in out
    assert "the connection to the Dask scheduler was lost" in err and "rerun the same command" in err
    # A task running on the worker when the scheduler went may finish after the client has
    # stopped: its file counts on the next run.
    kept = int(re.search(r"The (\d+) of 8 tasks that finished are kept", err).group(1))
    assert done_count(tmp_path / "sweep") == kept <= finished < 8
    rerun = subprocess.run([*command[:6], "--workers", "2", "--no-progress"], capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"sweep complete: 8 tasks ({8 - finished} run now, {finished} already done)" in rerun.stdout
