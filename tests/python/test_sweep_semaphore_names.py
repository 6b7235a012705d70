"""A local sweep's pool leaves no named semaphore in /dev/shm, however it ends.

With the spawn start method, the pool's queues hold named POSIX semaphores (/dev/shm/sem.NAME),
whose names multiprocessing's resource tracker process removes should the sweep die.  A SIGKILL
to the whole process group (a batch system ending a job, the out-of-memory killer) killed the
tracker too, and every killed sweep left five names in /dev/shm until the machine restarted.
Now the pool removes them once its workers have opened them, before any task starts, and a
kill while the workers are still starting leaves names that the next sweep on the folder
removes (docs/reliability.md, "Sweeps and hard kills").

test_no_task_starts_while_the_pools_semaphores_have_names pins what the first kill test relies
on: a task starts only after every worker has opened the semaphores and the names are gone.

The names a sweep made are read from its coordinator's memory map (/proc/PID/maps lists each
semaphore it has mapped, "(deleted)" once the name is gone), so the tests do not depend on how
the names are chosen; names other processes on the machine make meanwhile are not looked at.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from aimcemu import executors, results
from aimcemu.files import FolderLock
from hostile import live_processes_in_group, tiny_files

SEMAPHORE_FOLDER = Path("/dev/shm")
# What multiprocessing's resource tracker prints for names it had to remove, or could not.
TRACKER_COMPLAINTS = ("resource_tracker", "leaked semaphore", "KeyError", "Traceback")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="named semaphores in /dev/shm: Linux")


def sweep_config(tmp_path: Path, tasks: int = 4, study: tuple[Path, Path] | None = None) -> Path:
    """A sweep of `tasks` tasks of about a second each, on a tiny model (`study`: its model and
    data files, made anew when not given)."""
    model, data = study or tiny_files(tmp_path / "study", images=200)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0, 3600.0], "chips": 40,
                                    "grid": {"noise.prog_noise_scale": [0.25 * (k + 1) for k in range(tasks)]}}))
    return path


def sweep_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "aimcemu", "sweep", "--config", str(config), "--workers", "2", "--no-progress"]


def start_in_own_group(argv: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def semaphores_mapped_by(pid: int) -> set[int]:
    """The named semaphores process `pid` has mapped, as their inode numbers in /dev/shm (the
    map shows the temporary name glibc made each one under, not the name it then got)."""
    inodes = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(f"{SEMAPHORE_FOLDER}/sem."):
            inodes.add(int(fields[4]))
    return inodes


def names_of(semaphores: set[int]) -> set[str]:
    """The names in /dev/shm that the semaphores (inode numbers) have now."""
    names = set()
    for path in SEMAPHORE_FOLDER.glob("sem.*"):
        try:
            if path.stat().st_ino in semaphores:
                names.add(path.name)
        except FileNotFoundError:  # another process's, removed meanwhile
            pass
    return names


def names_recorded_in(folder: Path) -> set[Path]:
    """The names in /dev/shm with the prefix that the folder's lock file records for the pool
    of the last sweep there (other sweeps on the machine may be running: theirs are not looked at)."""
    prefix = json.loads((folder / FolderLock.NAME).read_text())[executors.SEMAPHORE_PREFIX_FIELD]
    return set(SEMAPHORE_FOLDER.glob(f"sem.{prefix}-*"))


def wait_until(condition, process: subprocess.Popen, timeout_s: float = 120.0):
    """Polls `condition` until it returns something true (returned); fails if `process` ends first."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # the states waited for last a second or more; leave the CPU to the sweep
    return found


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the whole process group of `process` (its own session), then waits until no
    process of the group is left (the coordinator, its workers, the resource tracker)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    deadline = time.monotonic() + 30.0
    while live_processes_in_group(process.pid):
        assert time.monotonic() < deadline, f"alive after kill -9: {live_processes_in_group(process.pid)}"
        time.sleep(0.01)


def a_task_is_running(folder: Path) -> bool:
    """A task's temporary results file exists (a worker is in the middle of that task)."""
    tasks = folder / "tasks"
    return tasks.is_dir() and any(tasks.glob(".*.tmp*"))


def assert_quiet(stderr: str) -> None:
    for complaint in TRACKER_COMPLAINTS:
        assert complaint not in stderr, stderr


# The aimcemu command run in a Python whose default start method is forkserver (Python 3.14 on
# Linux; fork before), where every multiprocessing lock made without a context of its own gets a
# name: tqdm's first progress bar makes one.
FORKSERVER_DEFAULT_COMMAND = ("import multiprocessing, sys; multiprocessing.set_start_method('forkserver'); "
                              "from aimcemu import cli; sys.exit(cli.main(sys.argv[1:]))")


@pytest.mark.parametrize("default_start", ["fork", "forkserver"])
def test_a_group_sigkill_while_tasks_run_leaves_no_semaphore_name(tmp_path, default_start):
    # Each `kill -9 -PGID` of a running sweep left its pool's five /dev/shm/sem.mp-* names for good.
    config = sweep_config(tmp_path)
    command = sweep_command(config)
    if default_start == "forkserver":
        command[1:3] = ["-c", FORKSERVER_DEFAULT_COMMAND]  # in place of "-m aimcemu"
    sweep = start_in_own_group(command)
    try:
        wait_until(lambda: a_task_is_running(tmp_path / "sweep"), sweep)
        semaphores = semaphores_mapped_by(sweep.pid)
        kill_group(sweep)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert semaphores, "the coordinator had no named semaphore mapped: the test sees nothing"
    assert not names_of(semaphores), f"left in {SEMAPHORE_FOLDER}"
    assert not names_recorded_in(tmp_path / "sweep")


# A sweep whose workers stop while they start, before they open the pool's semaphores: a worker
# runs the script as __mp_main__ first thing (spawn's bootstrap), before it unpickles the pool's
# queues.  The pool has made its semaphores by then (it starts its workers after).
STARTING_WORKERS_SWEEP = textwrap.dedent("""\
    import os, sys, time
    from aimcemu import cli

    config, marker = sys.argv[1:3]
    if __name__ == "__mp_main__":  # a pool worker, starting
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(300)  # until the test kills the process group
    if __name__ == "__main__":
        sys.exit(cli.main(["sweep", "--config", config, "--workers", "2", "--no-progress"]))
""")


def test_a_group_sigkill_while_workers_start_leaves_names_the_next_sweep_removes(tmp_path):
    # The earliest kill that can leave a name: the pool exists, no worker has opened its
    # semaphores, so their names must stay until one has.  They stayed for good.
    config = sweep_config(tmp_path)
    script, marker = tmp_path / "starting_workers.py", tmp_path / "worker_started"
    script.write_text(STARTING_WORKERS_SWEEP)
    sweep = start_in_own_group([sys.executable, str(script), str(config), str(marker)], cwd=tmp_path)
    try:
        wait_until(lambda: marker.exists() and marker.read_text().endswith("\n"), sweep)
        semaphores = semaphores_mapped_by(sweep.pid)
        names = names_of(semaphores)
        kill_group(sweep)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert names, "the coordinator's semaphores had no name: the test sees nothing"
    # Nothing could remove them: this is the window the next sweep closes.
    assert names_of(semaphores) == names
    again = subprocess.run(sweep_command(config), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert_quiet(again.stderr)
    assert not names_of(semaphores), f"left in {SEMAPHORE_FOLDER} after the next sweep"
    assert not names_recorded_in(tmp_path / "sweep")


@pytest.mark.parametrize("stop", ["none", "SIGINT"])
def test_a_sweep_that_ends_or_is_interrupted_leaves_no_name_and_no_tracker_warning(tmp_path, stop):
    # The pool removes its names itself, early: the resource tracker must neither find them left
    # at exit ("leaked semaphore objects") nor be told twice (a KeyError in the tracker).
    config = sweep_config(tmp_path)
    sweep = start_in_own_group(sweep_command(config))
    try:
        wait_until(lambda: a_task_is_running(tmp_path / "sweep"), sweep)
        semaphores = semaphores_mapped_by(sweep.pid)
        if stop == "SIGINT":
            os.killpg(sweep.pid, signal.SIGINT)  # a terminal's Ctrl-C
        out, err = sweep.communicate(timeout=300)  # the tracker's stderr is this one: it has exited too
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == (130 if stop == "SIGINT" else 0), err
    assert_quiet(err)
    assert semaphores
    assert not names_of(semaphores)
    assert not names_recorded_in(tmp_path / "sweep")


def second_worker_starts_late(folder: Path, *init_args) -> None:
    """A pool worker's initializer: the second worker to get here gives a task 2 s to start
    before it goes on (to executors.init_worker, which says it has opened the semaphores).  A
    task that started meanwhile would have run while the names still existed."""
    try:
        os.close(os.open(folder / "first_worker", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        deadline = time.monotonic() + 2.0
        while not any(folder.glob("task-*")) and time.monotonic() < deadline:
            time.sleep(0.01)
    executors.init_worker(*init_args)


def names_at_task_start(folder: Path, prefix: str, number: int) -> list[str]:
    """A task: the names with the pool's prefix when it starts."""
    (folder / f"task-{number}").touch()
    return sorted(path.name for path in SEMAPHORE_FOLDER.glob(f"sem.{prefix}-*"))


def test_no_task_starts_while_the_pools_semaphores_have_names(tmp_path, monkeypatch):
    # What makes a kill at any moment after the first task start leave nothing: the first
    # worker would take a task as soon as it had started, while the second was still starting.
    monkeypatch.setattr(executors, "init_worker", functools.partial(second_worker_starts_late, tmp_path))
    assert_no_task_sees_the_names(tmp_path, tasks=4)


def assert_no_task_sees_the_names(tmp_path: Path, tasks: int) -> None:
    """Runs `tasks` tasks on a two-worker local pool: none finds the pool's names at its start,
    the pool took the early removal, and no name is left once it is closed."""
    pool = executors.local_pool(2, tasks, 1)
    try:
        futures = [pool.submit(names_at_task_start, "-", tmp_path, pool.semaphore_prefix, n) for n in range(tasks)]
        assert [future.result(timeout=120) for future in futures] == [[]] * tasks
    finally:
        pool.close()
    assert pool.names_removed_early, pool.why_names_not_removed_early  # on this Python: a newer one may need executors updated
    assert not list(SEMAPHORE_FOLDER.glob(f"sem.{pool.semaphore_prefix}-*"))


def test_a_library_naming_the_processs_semaphores_its_own_way_does_not_stop_the_early_removal(tmp_path, monkeypatch):
    # joblib's loky (imported with scikit-learn) replaces SemLock._make_name for the whole process
    # ("/loky-<pid>-<random>").  Pools once chose their names through the process's semprefix
    # setting, which that ignores: in the full test suite, after a test had imported scikit-learn,
    # every pool took the fallback and a killed sweep left its names again.
    from multiprocessing import get_context, synchronize

    lokys_way = staticmethod(lambda: f"/loky-{os.getpid()}-{next(synchronize.SemLock._rand)}")
    monkeypatch.setattr(synchronize.SemLock, "_make_name", lokys_way)
    assert_no_task_sees_the_names(tmp_path, tasks=2)
    assert synchronize.SemLock.__dict__["_make_name"] is lokys_way  # the library's again, for what it makes next
    assert get_context("spawn").Lock()._semlock.name.startswith(f"/loky-{os.getpid()}-")


def named_semaphore(name: str):
    """A named POSIX semaphore left in /dev/shm as a killed pool leaves its own (it is not
    removed when the object goes)."""
    import _multiprocessing

    return _multiprocessing.SemLock(1, 1, 1, name, False)


def test_the_next_sweep_removes_only_the_names_its_folder_recorded(tmp_path):
    # The lock file is only a file: what it names is removed only when it is a prefix aimcemu
    # makes, recorded on this host, and only names with that prefix go.  (Every refused prefix
    # starts with this test's own, so a check that let one through removes only this test's names.)
    prefix = executors.new_semaphore_prefix()
    other = executors.new_semaphore_prefix()
    kept = [named_semaphore(f"/{other}-kept"), named_semaphore(f"/{prefix}x-kept")]
    left = [named_semaphore(f"/{prefix}-a"), named_semaphore(f"/{prefix}-b")]
    here = socket.gethostname()
    try:
        for fields in ({"host": "elsewhere", executors.SEMAPHORE_PREFIX_FIELD: prefix},
                       {"host": here, executors.SEMAPHORE_PREFIX_FIELD: f"{prefix}x"},
                       {"host": here, executors.SEMAPHORE_PREFIX_FIELD: f"{prefix}-a/../../x"},
                       {"host": here, executors.SEMAPHORE_PREFIX_FIELD: [prefix]},
                       {"host": here}):
            assert executors.remove_leftover_semaphores(fields) == [], fields
        assert all((SEMAPHORE_FOLDER / f"sem.{sem.name[1:]}").exists() for sem in kept + left)
        lock_folder = tmp_path / "sweep"
        lock_folder.mkdir()
        (lock_folder / FolderLock.NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": 1,
                                                               executors.SEMAPHORE_PREFIX_FIELD: prefix}))
        removed = []
        with FolderLock(lock_folder, clean_up_after=lambda fields: removed.extend(
                executors.remove_leftover_semaphores(fields))):
            pass
        assert sorted(removed) == sorted(f"sem.{sem.name[1:]}" for sem in left)
        assert not any((SEMAPHORE_FOLDER / f"sem.{sem.name[1:]}").exists() for sem in left)
        assert all((SEMAPHORE_FOLDER / f"sem.{sem.name[1:]}").exists() for sem in kept)
    finally:
        import _multiprocessing

        for sem in kept + left:
            try:
                _multiprocessing.sem_unlink(sem.name)
            except FileNotFoundError:
                pass


# --- A Python whose multiprocessing differs -------------------------------------------------------
# The early removal uses private parts of multiprocessing; a Python that renames or reshapes one must
# get the pool as it was before (workers spawned on demand, names left to the resource tracker), not
# a broken sweep.  Each sweep below runs in a process of its own with one of them broken first
# (pytest's MonkeyPatch, in that process: the resource tracker's complaints come at its exit).
# Removing util._finalizer_registry outright is not among them: multiprocessing's own Finalize needs
# it, so no pool could start; "finalizers reshaped" stands for a registry the pool cannot read.
BROKEN_INTERNAL_SWEEP = textwrap.dedent("""\
    import json, sys
    import _multiprocessing
    import concurrent.futures as cf
    from multiprocessing import synchronize, util

    import pytest
    from aimcemu import cli, executors


    def call(callback, *args):
        return callback(*args)


    class FinalizeKeepingItsCallbackElsewhere(util.Finalize):
        def __init__(self, obj, callback, args=(), kwargs=None, exitpriority=None):
            super().__init__(obj, call, (callback, *args), kwargs, exitpriority)


    def break_internal(patch, broken):
        if broken == "names not from _make_name":
            make_semlock = _multiprocessing.SemLock

            def semlock_naming_itself(kind, value, maxvalue, name, unlink):
                return make_semlock(kind, value, maxvalue, f"/mp-{next(synchronize.SemLock._rand)}", unlink)

            patch.setattr(_multiprocessing, "SemLock", semlock_naming_itself)
        elif broken == "finalizers reshaped":
            patch.setattr(util, "Finalize", FinalizeKeepingItsCallbackElsewhere)
        elif broken == "launch method missing":
            patch.delattr(cf.ProcessPoolExecutor, "_launch_processes")
        elif broken == "launch method fails after starting the workers":
            launch = cf.ProcessPoolExecutor._launch_processes

            def launch_then_fail(pool):
                launch(pool)
                raise TypeError("a reshaped _launch_processes")

            patch.setattr(cf.ProcessPoolExecutor, "_launch_processes", launch_then_fail)
        elif broken == "sem_unlink missing":
            patch.delattr(_multiprocessing, "sem_unlink")
        else:
            raise ValueError(broken)


    def recording(local_pool, record):
        def made(*args, **kwargs):
            pool = local_pool(*args, **kwargs)
            with open(record, "a") as f:
                f.write(json.dumps(pool.names_removed_early) + "\\n")
            return pool
        return made


    if __name__ == "__main__":
        config, broken, record = sys.argv[1:4]
        patch = pytest.MonkeyPatch()
        if broken != "nothing":
            break_internal(patch, broken)
        patch.setattr(executors, "local_pool", recording(executors.local_pool, record))
        try:
            status = cli.main(["sweep", "--config", config, "--workers", "2", "--no-progress"])
        finally:  # multiprocessing's own clean-up at exit writes the config
            patch.undo()
        sys.exit(status)
""")
BROKEN_INTERNALS = ["names not from _make_name", "finalizers reshaped", "launch method missing",
                    "launch method fails after starting the workers", "sem_unlink missing"]


def sweep_with(tmp_path: Path, study: tuple[Path, Path], broken: str) -> tuple[Path, list, str]:
    """A two-task sweep of `study` run with `broken` broken first: its folder, what each LocalPool
    said of names_removed_early, and its stderr (the resource tracker's too)."""
    config = sweep_config(tmp_path, tasks=2, study=study)
    script, record = tmp_path / "broken_internal_sweep.py", tmp_path / "pools"
    script.write_text(BROKEN_INTERNAL_SWEEP)
    done = subprocess.run([sys.executable, str(script), str(config), broken, str(record)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return tmp_path / "sweep", [json.loads(line) for line in record.read_text().splitlines()], done.stderr


def task_summaries(folder: Path) -> dict:
    index = results.read_index(folder)
    assert all(task["done"] for task in index["tasks"])
    return {task["file"]: task["summary"] for task in index["tasks"]}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[Path, Path]:
    return tiny_files(tmp_path_factory.mktemp("study"), images=200)


@pytest.fixture(scope="module")
def summaries_of_an_unbroken_sweep(tmp_path_factory, study) -> dict:
    folder, pools, stderr = sweep_with(tmp_path_factory.mktemp("unbroken"), study, "nothing")
    assert pools == [True]
    assert stderr == ""
    return task_summaries(folder)


@pytest.mark.parametrize("broken", BROKEN_INTERNALS)
def test_a_python_whose_multiprocessing_differs_gets_the_pool_as_before(tmp_path, study, broken,
                                                                        summaries_of_an_unbroken_sweep):
    # Each of these broke every local sweep (an exception, or a traceback of the resource tracker).
    folder, pools, stderr = sweep_with(tmp_path, study, broken)
    assert pools == [False], "the pool did not take the fallback"
    assert stderr == ""  # no warning, no traceback, nothing from the resource tracker
    assert task_summaries(folder) == summaries_of_an_unbroken_sweep
    assert not names_recorded_in(folder)
