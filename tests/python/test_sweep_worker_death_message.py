"""What the coordinator says when a worker ends: which PID, how, and which task (the message is
built from what the pool recorded; here from stand-ins for the pool and its processes).
Review rev_C: a worker sent SIGTERM on its own finishes its task and exits with
WORKER_STOPPED_AFTER_TASK, which the message did not count, so it said only "a worker process
ended abruptly ... (with fewer --workers if memory ran out)".  A worker killed between tasks (or
after renaming its task's file into place, before its summary came back) lost nothing: the
message said only "PID n was killed by SIGKILL", which test_sweep_signals read as a worker cut
short in a task; it now says "between tasks", and the index counts that file as done."""
from __future__ import annotations

import concurrent.futures as cf
import json
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from aimcemu import cli, executors, sweeps
from aimcemu.executors import WORKER_STOPPED_AFTER_TASK
from hostile import tiny_files


def message(*exit_codes, started=None):
    plan = sweeps.SweepPlan(folder=Path("sw"), config={}, axes={},
                            tasks=[sweeps.Task(id=f"t{i}", point={"x": i}, run={}, file=f"tasks/{i}.h5") for i in range(3)])
    processes = [SimpleNamespace(pid=100 + i, exitcode=code) for i, code in enumerate(exit_codes)]
    pool = SimpleNamespace(tasks_started_by=lambda pid: (started or {}).get(pid, []))
    return sweeps._worker_death_message(plan, plan.tasks, {"tasks/0.h5": {}}, pool, processes)


def test_a_worker_stopped_by_sigterm_after_its_task_is_named():
    text = message(0, WORKER_STOPPED_AFTER_TASK, started={101: [0]})
    assert "PID 101 was sent SIGTERM and stopped after its task" in text, text
    assert "ended abruptly" not in text and "memory" not in text, text


def test_a_killed_worker_names_its_signal_task_and_the_memory_hint():
    # The other worker stopped after its task as the wind-down asked: no cause of its own.
    text = message(-int(signal.SIGKILL), WORKER_STOPPED_AFTER_TASK, started={100: [1]})
    assert "PID 100 was killed by SIGKILL (e.g. by the out-of-memory killer, or kill -9) while running task " \
           "tasks/1.h5 (grid point {'x': 1})" in text, text
    assert "PID 101" not in text and "with fewer --workers if memory ran out" in text, text


def test_nothing_recorded_still_says_a_worker_ended():
    text = message(0, None)
    assert "a worker process ended abruptly" in text and "memory ran out" in text, text


def test_a_worker_killed_between_tasks_says_so_and_names_no_task():
    # Task 0, the only one it started, has its summary: it died after that task, before another.
    # The message said only "PID 100 was killed by SIGKILL (...)", as if it had been cut short.
    text = message(-int(signal.SIGKILL), WORKER_STOPPED_AFTER_TASK, started={100: [0]})
    assert "PID 100 was killed by SIGKILL (e.g. by the out-of-memory killer, or kill -9) between tasks (every " \
           "task it started had finished: its file is complete)." in text, text
    assert "while running task" not in text and "with fewer --workers if memory ran out" in text, text


class DyingWorkerPool(cf.Executor):
    """A local pool whose worker PID 4242 takes task 0 and is killed by SIGKILL: after it renamed
    the task's file into place but before its summary reached the coordinator (`file_complete`),
    or in the middle of the task.  The pool then fails every task it had not reported
    (BrokenProcessPool), as concurrent.futures' process pool does."""
    PID = 4242

    def __init__(self, file_complete: bool):
        self.file_complete = file_complete

    def submit(self, fn, *args):
        number = args[-1]
        if number == 0 and self.file_complete:
            fn(*args)  # the task's file is complete; its summary is lost with the worker
        future = cf.Future()
        future.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
        return future


class DyingLocalPool(executors.FuturesExecutor):
    def __init__(self, file_complete: bool):
        super().__init__(DyingWorkerPool(file_complete), threads=1)

    def worker_processes(self) -> list:
        return [SimpleNamespace(pid=DyingWorkerPool.PID, exitcode=-int(signal.SIGKILL))]

    def tasks_started_by(self, pid: int) -> list[int]:
        return [0] if pid == DyingWorkerPool.PID else []


def three_task_sweep(folder: Path) -> tuple[dict, Path]:
    """A sweep of three tasks of the tiny model (its config, and the YAML file that holds it)."""
    model, data = tiny_files(folder)
    config = {"output": str(folder / "sweep"), "model": str(model), "data": str(data),
              "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
              "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}}
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return config, path


@pytest.mark.parametrize("file_complete", [True, False], ids=["after-its-file-was-complete", "during-its-task"])
def test_a_worker_killed_before_its_summary_came_back_is_judged_by_its_file(tmp_path, capsys, monkeypatch,
                                                                           file_complete):
    # A worker killed after the rename of its task's file, before its summary came back: the task
    # is done (its file is complete, and the index says so), and the message names no task.
    config, path = three_task_sweep(tmp_path)
    monkeypatch.setattr(sweeps, "make_executor", lambda *args: DyingLocalPool(file_complete))
    code = cli.main(["sweep", "-c", str(path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err, err
    first = sweeps.plan(config).tasks[0]
    on_disk = {f"tasks/{p.name}" for p in (tmp_path / "sweep" / "tasks").glob("*.h5")}
    index = json.loads((tmp_path / "sweep" / "index.json").read_text())
    assert {t["file"] for t in index["tasks"] if t["done"]} == on_disk == ({first.file} if file_complete else set())
    killed = "PID 4242 was killed by SIGKILL (e.g. by the out-of-memory killer, or kill -9)"
    if file_complete:
        assert f"{killed} between tasks (every task it started had finished: its file is complete). " \
               "The 1 of 3 tasks that finished are kept" in err, err
        assert "while running task" not in err, err
    else:
        assert f"{killed} while running task {first.file} (grid point {first.point}). " \
               "The 0 of 3 tasks that finished are kept" in err, err


def test_a_worker_death_is_reported_even_when_the_index_cannot_be_written(tmp_path, capsys, monkeypatch):
    # The wind-down of a worker death wrote the index unguarded: on a full disk its OSError
    # replaced the death message (which worker, which task, what is kept).  Now the death is
    # reported and says the index may lag; a rerun finds the finished task from its file.
    config, path = three_task_sweep(tmp_path)
    monkeypatch.setattr(sweeps, "make_executor", lambda *args: DyingLocalPool(file_complete=True))
    write_index = sweeps._write_json_atomic
    writes = []

    def full_disk_after_the_first_write(target, data):
        writes.append(target)
        if len(writes) > 1:  # the first is the sweep's initial index, before any task
            raise OSError(28, "No space left on device", str(target))
        write_index(target, data)

    monkeypatch.setattr(sweeps, "_write_json_atomic", full_disk_after_the_first_write)
    code = cli.main(["sweep", "-c", str(path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "PID 4242 was killed by SIGKILL (e.g. by the out-of-memory killer, or kill -9) between tasks" in err, err
    assert "The 1 of 3 tasks that finished are kept" in err, err
    assert "index.json could not be updated (OSError: [Errno 28] No space left on device" in err, err
    assert "it may not list every finished task; the next run finds them from their files" in err, err
    # The index on disk still says nothing is done; the rerun (space back, a pool that works)
    # counts the finished file and runs only the other two tasks.
    index = json.loads((tmp_path / "sweep" / "index.json").read_text())
    assert not any(t["done"] for t in index["tasks"]), index
    monkeypatch.undo()
    assert cli.main(["sweep", "-c", str(path), "--no-progress", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    index = json.loads((tmp_path / "sweep" / "index.json").read_text())
    assert all(t["done"] for t in index["tasks"]), index
    assert "sweep complete: 3 tasks (2 run now, 1 already done)" in out, out


class LostClusterPool(cf.Executor):
    """A cluster whose scheduler went away after task 0 finished: every other task comes back
    cancelled, as distributed's client cancels them."""

    def submit(self, fn, *args):
        if args[-1] == 0:
            fn(*args)  # task 0 finished: its file is complete
        future = cf.Future()
        future.set_exception(cf.CancelledError())
        return future


class UnstoppablePool(executors.FuturesExecutor):
    def __init__(self):
        super().__init__(LostClusterPool(), threads=1)

    def cancel(self, futures):
        raise OSError("scheduler connection closed")  # a client without its scheduler


def test_a_pool_that_cannot_be_stopped_still_gets_its_index_and_no_false_warning(tmp_path, capsys, monkeypatch):
    # The wind-down's fallback wrote index.json, yet the message said the index "may not list
    # every finished task" (review of 2026-12-04): that sentence is for an index left unwritten.
    config, path = three_task_sweep(tmp_path)
    monkeypatch.setattr(sweeps, "make_executor", lambda *args: UnstoppablePool())
    code = cli.main(["sweep", "-c", str(path), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "the sweep lost its tasks" in err and "The 1 of 3 tasks that finished are kept" in err, err
    assert "could not be updated" not in err and "may not list" not in err, err
    index = json.loads((tmp_path / "sweep" / "index.json").read_text())
    assert [t["file"] for t in index["tasks"] if t["done"]] == [sweeps.plan(config).tasks[0].file], index
