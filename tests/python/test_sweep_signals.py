"""``aimcemu sweep`` under signals and kills at the awkward moments: before its pool exists, while
its workers are still starting, SIGTERM to the whole process group (timeout, systemd, docker
stop, scancel), and a worker killed by SIGKILL (the out-of-memory killer) in a task or between
tasks.  Each ends with a message and an exit status (130 interrupted, 2 a dead worker), never a
traceback, the running tasks finished and a folder that the same command then completes."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from aimcemu.files import FolderLock
from hostile import tiny_files

TASKS = 6


@pytest.fixture
def sweep_yaml(tmp_path):
    # Tasks of a few seconds each (the embedded test set, 12 chips x 3 t x 2 rounds), so that
    # signals and kills land while tasks run.
    config = {"output": str(tmp_path / "sweep"), "noise": {"model": "pcm_like"}, "mapping": "all",
              "t": [1.0, 3600.0, 86400.0], "chips": 12, "rounds": 2, "seed": 5, "layers": "none",
              "grid": {"noise.prog_noise_scale": [0.25 * (k + 1) for k in range(TASKS)]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start(path, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aimcemu", "sweep", "--config", str(path), "--workers", "2",
                             "--no-progress", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def workers_of(pid: int) -> list[int]:
    """The pool workers (spawned children running spawn_main) of process `pid`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == pid and b"spawn_main" in cmdline \
                and b"resource_tracker" not in cmdline:
            found.append(int(proc.name))
    return found


def wait_until(condition, process, timeout_s: float = 120.0, step_s: float = 0.01):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step_s)
    return found


def temporaries(tasks: Path) -> list[Path]:
    return sorted(tasks.glob(".*.tmp*"))


def finished(tasks: Path) -> set[str]:
    return {p.name for p in tasks.glob("*.h5")}


def resume_completes(path) -> None:
    again = subprocess.run([sys.executable, "-m", "aimcemu", "sweep", "--config", str(path), "--no-progress"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"sweep complete: {TASKS} tasks" in again.stdout
    assert not temporaries(path.parent / "sweep" / "tasks")


def writer_pid(temporary: Path) -> int:
    return int(re.search(r"\.tmp-.*-(\d+)-\d+$", temporary.name).group(1))


def final_name(temporary: Path) -> str:
    return temporary.name.split(".tmp")[0].lstrip(".")


def process_state(pid: int) -> str:
    """The state letter in /proc/PID/stat (R running, S sleeping, T stopped, Z zombie...)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2]


def both_workers_stopped_while_writing(tasks: Path, sweep) -> dict[int, Path]:
    """Stops (SIGSTOP) both pool workers at a moment when each holds the temporary file of a task,
    so each is certainly in the middle of that task (a temporary exists until its rename) and stays
    there until it is killed or continued: PID -> temporary.  Polling alone could not tell: a worker
    seen writing may have renamed its file and be between tasks when the signal lands."""
    while True:
        def two_writers():
            writing = {writer_pid(t): t for t in temporaries(tasks)}
            return writing if len(writing) == 2 else None

        writing = wait_until(two_writers, sweep, step_s=0.002)
        for pid in writing:
            os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: all(process_state(pid) == "T" for pid in writing), sweep, timeout_s=30)
        if all(t.exists() for t in writing.values()):
            return writing
        for pid in writing:  # one had finished its task meanwhile: try again
            os.kill(pid, signal.SIGCONT)


def test_a_worker_killed_by_sigkill_is_a_clear_error_and_the_other_running_task_finishes(sweep_yaml):
    # Was a BrokenProcessPool traceback, exit status 1, and the other worker's task killed too.
    # The killed worker and the other one are both stopped in the middle of a task first: killed
    # at a moment a poll had found it writing, the worker was at times already past its rename,
    # between tasks (the message then rightly names no task; test_a_worker_killed_between_tasks).
    tasks = sweep_yaml.parent / "sweep" / "tasks"
    sweep = start(sweep_yaml)
    try:
        writing = both_workers_stopped_while_writing(tasks, sweep)
        killed, other = sorted(writing, key=lambda pid: writing[pid].name)
        os.kill(killed, signal.SIGKILL)
        os.kill(other, signal.SIGCONT)
        out, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:  # failed on the way: no sweep (nor stopped worker) left behind
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 2, err
    assert "Traceback" not in err
    message = re.search(r"aimcemu sweep: error: .*: a sweep worker process died: PID (\d+) was killed by SIGKILL "
                        r"\(e\.g\. by the out-of-memory killer, or kill -9\) while running task tasks/(\S+\.h5)", err)
    assert message and int(message.group(1)) == killed, err
    assert message.group(2) == final_name(writing[killed]), err
    done = finished(tasks)
    assert final_name(writing[other]) in done  # the other worker's running task finished
    assert message.group(2) not in done
    index = json.loads((tasks.parent / "index.json").read_text())
    assert {os.path.basename(t["file"]) for t in index["tasks"] if t["done"]} == done
    resume_completes(sweep_yaml)


# A sweep run by a script that pauses one worker (the first to get there) in a chosen window until
# the test kills it: each spawned worker imports the script, so the pause is in the workers too.
PAUSING_SWEEP = textwrap.dedent("""\
    import functools, multiprocessing, os, sys, time
    from aimcemu import cli, sweeps

    window, marker, config = sys.argv[1:4]

    def pause_once(what):
        if multiprocessing.parent_process() is None:  # the coordinator reads summaries too
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:  # another worker paused already
            return
        os.write(fd, f"{os.getpid()} {what}\\n".encode())
        os.close(fd)
        time.sleep(300)  # until the test kills this worker

    if window == "after_rename":  # its task's file is complete; its summary is not sent yet
        read_task_summary = sweeps.read_task_summary

        def paused_read(path, *args, **kwargs):
            pause_once(os.path.basename(path))
            return read_task_summary(path, *args, **kwargs)

        sweeps.read_task_summary = paused_read
    else:  # "next_task": its first task's summary is sent; its next task has not started
        execute_task, calls = sweeps.execute_task, []

        @functools.wraps(execute_task)
        def paused_execute(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                pause_once("-")
            return execute_task(*args, **kwargs)

        sweeps.execute_task = paused_execute

    if __name__ == "__main__":
        sys.exit(cli.main(["sweep", "--config", config, "--workers", "2", "--no-progress"]))
""")


@pytest.mark.parametrize("window", ["after_rename", "next_task"])
def test_a_worker_killed_between_tasks_is_a_clear_error_naming_no_task(tmp_path, window):
    # The windows where test_a_worker_killed_by_sigkill... once killed its worker under load:
    # after the rename of its task's file, before its summary came back, and after the summary,
    # before its next task.  The message said only "PID n was killed by SIGKILL (...)"; the
    # task whose file is complete must count as done in the index.
    model, data = tiny_files(tmp_path)
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                                      "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
                                      "grid": {"noise.prog_noise_scale": [0.25 * (k + 1) for k in range(TASKS)]}}))
    script, marker = tmp_path / "pausing_sweep.py", tmp_path / "paused"
    script.write_text(PAUSING_SWEEP)
    sweep = subprocess.Popen([sys.executable, str(script), window, str(marker), str(config)], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        paused = wait_until(lambda: marker.exists() and marker.read_text().endswith("\n") and marker.read_text(), sweep)
        pid, renamed = paused.split()
        os.kill(int(pid), signal.SIGKILL)
        out, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 2, err
    assert "Traceback" not in err
    tasks = tmp_path / "sweep" / "tasks"
    done = finished(tasks)
    assert f"PID {pid} was killed by SIGKILL (e.g. by the out-of-memory killer, or kill -9) between tasks (every " \
           f"task it started had finished: its file is complete). The {len(done)} of {TASKS} tasks that finished " \
           "are kept" in err, err
    assert "while running task" not in err, err
    if window == "after_rename":
        assert renamed in done
    index = json.loads((tasks.parent / "index.json").read_text())
    assert {os.path.basename(t["file"]) for t in index["tasks"] if t["done"]} == done
    assert not temporaries(tasks)


def test_sigterm_to_the_whole_group_lets_the_running_tasks_finish(sweep_yaml):
    # Workers did not ignore SIGTERM: the running tasks died with them.
    tasks = sweep_yaml.parent / "sweep" / "tasks"
    sweep = start(sweep_yaml)
    writing = wait_until(lambda: temporaries(tasks), sweep)[0]  # a task is being written
    os.killpg(sweep.pid, signal.SIGTERM)
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, err
    assert "Traceback" not in err
    done = finished(tasks)
    assert final_name(writing) in done, err  # the running task finished
    assert len(done) < TASKS, err
    assert f"interrupted: {len(done)} of {TASKS} tasks done" in err
    assert not temporaries(tasks)
    resume_completes(sweep_yaml)


def open_descriptors(pid: int) -> list[str]:
    try:
        return [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_before_the_pool_exists_is_an_interruption(sweep_yaml, signum):
    # Was a KeyboardInterrupt traceback (SIGINT) or a silent death (SIGTERM): the handlers came
    # only with the pool.  Here the sweep waits for the folder's lock, held by this test.
    folder = sweep_yaml.parent / "sweep"
    folder.mkdir()
    with FolderLock(folder, "test"):
        sweep = start(sweep_yaml, "--wait", "300")
        wait_until(lambda: any(p.endswith(FolderLock.NAME) for p in open_descriptors(sweep.pid)), sweep)
        time.sleep(0.3)  # inside the waiting loop
        sweep.send_signal(signum)
        out, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, err
    assert "Traceback" not in err
    assert f"interrupted: 0 of {TASKS} tasks done (0 in this call)" in err


def test_ctrl_c_of_the_group_while_workers_start_prints_no_worker_traceback(sweep_yaml):
    # Workers ignored SIGINT only from their initializer: a Ctrl-C while they were still
    # importing printed their KeyboardInterrupt tracebacks.
    sweep = start(sweep_yaml)
    wait_until(lambda: workers_of(sweep.pid), sweep, step_s=0.002)
    time.sleep(0.1)  # the worker is importing (Python's own SIGINT handler is in place)
    os.killpg(sweep.pid, signal.SIGINT)
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted:" in err


def test_an_interruption_after_every_task_finished_says_so():
    # Was "interrupted: 10 of 10 tasks done ...; rerun the same command to finish".
    from aimcemu.commands.sweep import interrupted_message
    from aimcemu.sweeps import SweepResult

    result = SweepResult(folder="out", total=10, ran=3, skipped=7, interrupted=True,
                         summaries={str(k): {} for k in range(10)})
    assert interrupted_message(result).startswith("interrupted after every task had finished: all 10 tasks are done")
    assert "rerun" not in interrupted_message(result)
    early = SweepResult(folder="out", total=10, ran=0, skipped=0, interrupted=True, summaries={}, done=4)
    assert interrupted_message(early).startswith("interrupted: 4 of 10 tasks done (0 in this call)")


def test_a_signal_is_not_swallowed_by_a_library_catching_exception(tmp_path, monkeypatch):
    # tqdm starts its monitor thread inside `try: ... except Exception: warn(...)`: a SIGINT that
    # landed there was swallowed (the interruption was an Exception) and the sweep ran on.
    import tqdm

    import aimcemu

    class SwallowingBar(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            try:
                signal.raise_signal(signal.SIGINT)
            except Exception:
                pass
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", SwallowingBar)
    result = aimcemu.sweep({"output": str(tmp_path / "s"), "noise": {"model": "pcm_like"}, "mapping": "all",
                            "t": [1.0], "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}, workers=1, progress=False)
    assert result.interrupted and result.ran == 0
    assert not list((tmp_path / "s" / "tasks").glob("*.h5"))
