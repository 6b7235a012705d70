"""An ``aimcemu sweep`` subprocess stopped midway by SIGINT or SIGTERM: it exits 130 after the
running task, and the same command then finishes the rest, no task twice and none lost, every
file readable."""
from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import pytest
import yaml

from aimcemu import modelfile

sweep_module = importlib.import_module("aimcemu.sweeps")

TASKS = 6


@pytest.fixture
def sweep_yaml(tmp_path):
    _, data = modelfile.embedded_paths()
    dataset = modelfile.load_dataset(data)
    small = tmp_path / "small.h5"
    modelfile.save_dataset(dataset["images"][:60], dataset["labels"][:60], small, input_frac_bits=dataset["input_frac_bits"])
    config = {"output": str(tmp_path / "sweep"), "data": str(small), "noise": {"model": "pcm_like"}, "mapping": "all",
              "t": [1.0, 3600.0, 86400.0], "chips": 2, "seed": 4,
              "grid": {"noise.prog_noise_scale": [0.25 * (k + 1) for k in range(TASKS)]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, config


def run_cli(path, **popen):
    return subprocess.Popen([sys.executable, "-m", "aimcemu", "sweep", "--config", str(path), "--workers", "1",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def wait_for_files(folder, count: int, process, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("*.h5"))) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the sweep wrote no task file in time"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM"])
def test_interrupted_sweep_resumes_without_loss_or_repeat(sweep_yaml, signum):
    path, config = sweep_yaml
    tasks_dir = path.parent / "sweep" / "tasks"
    first = run_cli(path)
    wait_for_files(tasks_dir, 1, first)
    first.send_signal(signum)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 130, (out, err)
    assert "interrupted" in err
    written = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in tasks_dir.glob("*.h5")}
    assert 1 <= len(written) < TASKS, "the signal came too late to interrupt anything"
    index = json.loads((path.parent / "sweep" / "index.json").read_text())
    assert sorted(os.path.basename(t["file"]) for t in index["tasks"] if t["done"]) == sorted(written)

    second = run_cli(path)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, (out, err)
    assert f"({TASKS - len(written)} run now, {len(written)} already done)" in out
    for name, stat in written.items():  # the first call's files were not run again
        now = (tasks_dir / name).stat()
        assert (now.st_ino, now.st_mtime_ns) == stat
    planned = sorted(os.path.basename(t.file) for t in sweep_module.plan(config).tasks)
    assert sorted(p.name for p in tasks_dir.iterdir()) == planned  # nothing lost, no temporary files
    for name in planned:
        with h5py.File(tasks_dir / name) as f:
            assert f["accuracy"].shape == (6,)
    index = json.loads((path.parent / "sweep" / "index.json").read_text())
    assert all(t["done"] for t in index["tasks"])
