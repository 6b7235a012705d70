"""``kill -9`` at random moments during ``aimcemu run`` and ``aimcemu sweep``.

After every kill: no partial output and the previous output unharmed (run); no process of the
killed command alive 5 s later, an index that lists only complete task files, and no task file
ever replaced (sweep).  After the final, uninterrupted call: no temporary file anywhere, and a
sweep whose files are bit-identical to those of a sweep that was never interrupted.

The default variant kills each command 10 times (20 kills in all, about two minutes); the slow
one 30 times each.  The moments are drawn from a seeded generator, spread over the command's
whole duration (start-up, planning, running, writing, finishing).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import _core, results
from hostile import live_processes_in_group, temporaries, tiny_files


def command(*argv) -> list[str]:
    return [sys.executable, "-m", "aimcemu", *map(os.fspath, argv)]


def kill_at(argv, delay_s: float, env=None) -> int:
    """Starts `argv` in its own process group, SIGKILLs its main process after `delay_s` (unless
    it finished), and returns its exit status; fails if any process of the group outlives the
    kill by 5 s."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env)
    try:
        process.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
    status = process.wait()
    deadline = time.monotonic() + 5.0
    while live_processes_in_group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = live_processes_in_group(process.pid)
    if orphans:
        os.killpg(process.pid, signal.SIGKILL)
    assert not orphans, f"alive 5 s after kill -9 of {process.pid}: {orphans}"
    return status


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def timed(argv) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    return time.monotonic() - start


# --- aimcemu run ------------------------------------------------------------------------------------
def kill_runs(tmp_path, kills: int) -> None:
    model, data = tiny_files(tmp_path / "study", images=400)
    out = tmp_path / "out" / "run.h5"
    out.parent.mkdir()
    argv = command("run", model, "-o", out, "--mapping", "all", "--noise", "pcm_like", "--chips", "6",
                   "--t", "0,1h,1d", "--layers", "all")
    full = timed(argv)  # also leaves a complete previous file
    previous = digest(out)
    rng = random.Random(20261201)
    created = json.loads(_core.read_results(os.fspath(out))["config"])["created"]
    for _ in range(kills):
        status = kill_at(argv, rng.uniform(0.0, 1.2 * full))
        info = _core.read_results(os.fspath(out))  # never partial: a complete results file is there
        if digest(out) != previous:
            # Only a run that got as far as its final rename may change the file, and then the file
            # is its complete output (a kill after the rename, during the summary, is such a case).
            now = json.loads(info["config"])["created"]
            assert now > created, "the results file changed but is not a newer complete run"
            previous, created = digest(out), now
        else:
            assert status != 0, "a run that finished did not write its file"
    assert [p.name for p in out.parent.iterdir() if not p.name.startswith(".")] == ["run.h5"]
    subprocess.run(argv, check=True, capture_output=True)  # the next run into the same folder
    assert temporaries(out.parent) == [], "temporary files of killed runs were left behind"
    _core.read_results(os.fspath(out))


def test_kill_9_during_run(tmp_path):
    kill_runs(tmp_path, kills=10)


@pytest.mark.slow
def test_kill_9_during_run_many_times(tmp_path):
    kill_runs(tmp_path, kills=30)


# --- aimcemu sweep ----------------------------------------------------------------------------------
def sweep_config(folder: Path, output: Path, model: Path) -> Path:
    config = {"output": os.fspath(output), "model": os.fspath(model), "noise": {"model": "pcm_like"}, "mapping": "all",
              "t": [0.0, 3600.0], "chips": 3, "seed": 11, "layers": "all",
              "grid": {"noise.prog_noise_scale": [0.25, 0.5, 1.0, 1.5, 2.0, 3.0]}}
    path = folder / f"{output.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def file_content(path: Path) -> dict:
    """Every dataset and attribute of a results file, the config without its run-specific keys."""
    out = {}

    def visit(name, obj):
        for key, value in obj.attrs.items():
            if key == "config":
                # Run-specific keys.  threads (and threads_used) too: a resumed sweep sizes each task's C++ threads by the
                # tasks left (the last task gets every core), and results are bit-identical for any
                # thread count, which the datasets compared below check.
                run_specific = ("created", "output", "threads", "threads_used")
                value = {k: v for k, v in json.loads(value).items() if k not in run_specific}
            elif key in ("DIMENSION_LIST", "REFERENCE_LIST"):
                continue  # object references: addresses within the file
            out[f"{name}@{key}"] = value
        if isinstance(obj, h5py.Dataset) and obj.dtype.kind != "O":
            out[name] = obj[()]
        elif isinstance(obj, h5py.Dataset):
            out[name] = [str(v) for v in obj.asstr()[()]]

    with h5py.File(path, "r") as f:
        visit("/", f)
        f.visititems(visit)
    return out


def assert_index_consistent(folder: Path) -> None:
    """The index lists a task as done only when its file is complete, with the file's summary."""
    if not (folder / "index.json").is_file():
        return
    index = results.read_index(folder)
    for task in index["tasks"]:
        if task["done"]:
            summary = results.read_task_summary(folder / task["file"])
            for key, value in task["summary"].items():
                assert summary[key] == value, (task["file"], key)


def kill_sweeps(tmp_path, kills: int) -> None:
    model, _ = tiny_files(tmp_path / "study", images=200)
    reference = tmp_path / "reference"
    aimcemu.sweep(sweep_config(tmp_path, reference, model), workers=2, progress=False)
    folder = tmp_path / "killed"
    argv = command("sweep", "--config", sweep_config(tmp_path, folder, model), "--workers", "2", "--no-progress")
    full = timed(command("sweep", "--config", sweep_config(tmp_path, tmp_path / "timing", model), "--workers", "2",
                         "--no-progress"))
    rng = random.Random(20261202)
    first_seen: dict[str, tuple[int, int]] = {}
    for _ in range(kills):
        kill_at(argv, rng.uniform(0.0, full))
        assert_index_consistent(folder)
        for path in (folder / "tasks").glob("*.h5") if (folder / "tasks").is_dir() else []:
            st = path.stat()
            assert first_seen.setdefault(path.name, (st.st_ino, st.st_mtime_ns)) == (st.st_ino, st.st_mtime_ns), \
                f"{path.name} was written twice"
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert temporaries(folder) == [], "temporary files were left behind"
    index = results.read_index(folder)
    assert all(task["done"] for task in index["tasks"])
    names = sorted(p.name for p in (folder / "tasks").iterdir())
    assert names == sorted(Path(t["file"]).name for t in index["tasks"])  # nothing lost, nothing extra
    for name, (ino, mtime) in first_seen.items():
        st = (folder / "tasks" / name).stat()
        assert (st.st_ino, st.st_mtime_ns) == (ino, mtime), f"{name} was replaced by a later call"
    for name in names:
        expected, got = file_content(reference / "tasks" / name), file_content(folder / "tasks" / name)
        assert expected.keys() == got.keys(), name
        for key in expected:
            if isinstance(expected[key], (dict, list, str, bytes)):
                assert got[key] == expected[key], f"{name}: {key}"
            else:
                np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{name}: {key}")


def test_kill_9_during_sweep(tmp_path):
    kill_sweeps(tmp_path, kills=10)


@pytest.mark.slow
def test_kill_9_during_sweep_many_times(tmp_path):
    kill_sweeps(tmp_path, kills=30)
