"""The coordinator rewrites index.json (whole, fsynced) at most every INDEX_WRITE_INTERVAL_S while
tasks complete, and once at the end.  It was rewritten after every completed task: quadratic in
the task count (10 000 tasks: 0.8 s a write, about two hours of writes).  The tasks here are a
stub that returns a summary at once, so only the coordinator's bookkeeping is exercised."""
from __future__ import annotations

import concurrent.futures as cf
import json

import pytest

from aimcemu import sweeps
from hostile import tiny_files

# What a task returns (results.task_summary_of), all of which the index keeps.
SUMMARY = {"reference_accuracy": 0.5, "accuracy": [0.25], "chip": [0], "t": [1.0], "niu_round": [0],
           "drift_compensation": ["none"], "drift_alpha_capped": []}


def instant_task(task, folder, threads, config=None, number=None):
    return {**SUMMARY, "id": task["id"], "file": task["file"], "ran": True}


@pytest.fixture
def many_tasks(tmp_path):
    """A planned 120-task sweep of a tiny model, its folder created."""
    model, data = tiny_files(tmp_path)
    plan = sweeps.plan({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                        "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
                        "grid": {"noise.prog_noise_scale": [0.5 + k / 100 for k in range(120)]}})
    (plan.folder / "tasks").mkdir(parents=True)
    return plan


@pytest.fixture
def counted_writes(monkeypatch):
    """The index writes of the coordinator, counted (each still written)."""
    writes = []
    real_write = sweeps._write_json_atomic

    def write(path, data):
        writes.append(sum(task["done"] for task in data["tasks"]))
        real_write(path, data)

    monkeypatch.setattr(sweeps, "_write_json_atomic", write)
    monkeypatch.setattr(sweeps, "execute_task", instant_task)
    return writes


def collect(plan) -> tuple[bool, int]:
    with cf.ThreadPoolExecutor(1) as pool:
        return sweeps._run_tasks(plan, plan.tasks, {}, pool, None, 1, False)


def test_the_index_is_written_once_at_the_end_of_a_quick_collect_loop(many_tasks, counted_writes):
    assert collect(many_tasks) == (False, 120)
    assert counted_writes == [120]  # tasks that all finish within the interval: one write, complete
    index = json.loads((many_tasks.folder / "index.json").read_text())
    assert all(task["done"] and task["summary"]["accuracy"] == [0.25] for task in index["tasks"])


def test_the_index_is_written_while_tasks_complete_once_the_interval_has_passed(many_tasks, counted_writes,
                                                                                 monkeypatch):
    monkeypatch.setattr(sweeps, "INDEX_WRITE_INTERVAL_S", 0.0)
    monkeypatch.setattr(sweeps, "INDEX_WRITE_SHARE", 1e9)  # the write's own duration sets no wait
    collect(many_tasks)
    assert counted_writes == [*range(1, 121), 120]  # due at every completion, then the final one


def test_the_wait_grows_with_a_slow_write(many_tasks):
    """A write that takes w seconds is followed by at least w / INDEX_WRITE_SHARE of collecting."""
    times = iter([100.0, 100.0, 103.0, 110.0, 133.0])  # created; a write from 100 to 103 s; then two checks
    writer = sweeps._IndexWriter(many_tasks, clock=lambda: next(times))
    writer.write({})
    assert writer.wait_s == pytest.approx(3.0 / sweeps.INDEX_WRITE_SHARE)
    writes = []
    writer.write = writes.append
    writer.write_when_due({})      # 7 s after the write: not yet
    writer.write_when_due({})      # 30 s after it: due
    assert len(writes) == 1
