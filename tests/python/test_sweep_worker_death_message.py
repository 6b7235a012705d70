"""What the coordinator says when a worker ends: which PID, how, and which task (the message is
built from what the pool recorded; here from stand-ins for the pool and its processes).
Review rev_C: a worker sent SIGTERM on its own finishes its task and exits with
WORKER_STOPPED_AFTER_TASK, which the message did not count, so it said only "a worker process
ended abruptly ... (with fewer --workers if memory ran out)"."""
from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

from aimcemu import sweeps
from aimcemu.executors import WORKER_STOPPED_AFTER_TASK


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
