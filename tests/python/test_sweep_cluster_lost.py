"""A sweep whose tasks the cluster loses (the Dask scheduler gone: FutureCancelledError
"scheduler-connection-lost"; KilledWorker; a cancelled future) ends in a worded error, exit
status 2, saying what happened and that a rerun resumes, with what finished in the index.  It
ended in a raw traceback, exit 1.  The executor here runs the first task and hands back the
cluster's error for the others, as distributed does when its scheduler goes away."""
from __future__ import annotations

import concurrent.futures as cf
import json

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
