"""A full disk during ``aimcemu run``, ``sweep`` and ``report``: a clean error and exit code 2,
never a crash (before the fix, every run that hit "No space left on device" segfaulted at exit),
and nothing left behind on the full file system: no partial output, no temporary file.

The full disk is a small tmpfs mounted for the test; where mounting is not allowed (not root, a
container without CAP_SYS_ADMIN) the tests are skipped, saying so.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import aimcemu
from aimcemu import _core, results
from hostile import temporaries, tiny_files


@pytest.fixture
def small_disk(tmp_path):
    """A factory: small_disk(kib) mounts a tmpfs of that size and returns its folder."""
    mounted = []

    def mount(kib: int) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", os.fspath(folder)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or 'mount failed'}); "
                        "the full-disk tests need root with CAP_SYS_ADMIN")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", os.fspath(folder)], check=False)


def aimcemu_cli(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aimcemu", *map(os.fspath, argv)], capture_output=True, text=True,
                          timeout=600)


def assert_clean_failure(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 2, f"exit {done.returncode} (139 = segfault)\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    # One worded error, not HDF5's own error stack: the library prints that per thread unless the
    # thread turned it off, and the results are written on a writer thread.
    assert "HDF5-DIAG" not in done.stderr, done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


def test_run_on_a_full_disk(tmp_path, small_disk):
    model, data = tiny_files(tmp_path / "study", images=400)
    disk = small_disk(128)
    out = disk / "run.h5"
    done = aimcemu_cli("run", model, "-o", out, "--mapping", "all", "--noise", "pcm_like", "--chips", "4",
                       "--layers", "all")
    assert_clean_failure(done, "No space left on device", f"{out}: field 'file'")
    assert list(disk.iterdir()) == [], "a partial or temporary file was left on the full disk"


def test_run_into_a_new_folder_on_a_full_disk_leaves_no_folder(tmp_path, small_disk):
    """The folder made for `-o sub/` goes again with the claimed name (it stayed, empty)."""
    model, _ = tiny_files(tmp_path / "study", images=400)
    disk = small_disk(128)
    done = aimcemu_cli("run", model, "-o", f"{disk}/sub/deeper/", "--mapping", "all", "--noise", "pcm_like",
                       "--chips", "4", "--layers", "all")
    assert_clean_failure(done, "No space left on device", f"{disk}/sub/deeper/tiny_", ": field 'file'")
    assert list(disk.iterdir()) == []


def test_a_new_sweep_folder_on_a_full_disk_is_removed(tmp_path, small_disk):
    """The sweep folder made on a disk that is already full: its lock file cannot be written."""
    model, _ = tiny_files(tmp_path / "study", images=40)
    disk = small_disk(64)
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError, match="No space left"):
        while True:
            f.write(b"\0" * 4096)
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"model": os.fspath(model), "noise": {"model": "pcm_like"}, "mapping": "all",
                                      "t": [0.0]}))
    done = aimcemu_cli("sweep", "--config", config, "-o", disk / "sweep", "--no-progress")
    assert_clean_failure(done, "No space left on device", f"{disk / 'sweep'}")
    assert [p.name for p in disk.iterdir()] == ["filler"]


def test_a_round_write_that_fills_the_disk_is_one_worded_error(small_disk):
    """The embedded default with 8 chips fills 2 MiB while a round's activations are written, on
    the results writer's thread: HDF5 printed its error stack there (39 lines) before the error."""
    disk = small_disk(2048)
    out = disk / "run.h5"
    done = aimcemu_cli("run", "-o", out, "--noise", "pcm_like", "--chips", "8")
    assert_clean_failure(done, "No space left on device", f"{out}: field 'layers/")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(disk.iterdir()) == []


def test_run_on_a_full_disk_keeps_the_previous_file(tmp_path, small_disk):
    model, _ = tiny_files(tmp_path / "study", images=400)
    disk = small_disk(200)
    out = disk / "run.h5"
    assert aimcemu_cli("run", model, "-o", out, "--layers", "none").returncode == 0
    before = out.read_bytes()
    done = aimcemu_cli("run", model, "-o", out, "--mapping", "all", "--noise", "pcm_like", "--chips", "8",
                       "--layers", "all")
    assert_clean_failure(done, "No space left on device")
    assert out.read_bytes() == before
    assert [p.name for p in disk.iterdir()] == ["run.h5"]


def test_sweep_on_a_full_disk(tmp_path, small_disk):
    model, _ = tiny_files(tmp_path / "study", images=300)
    disk = small_disk(256)
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"output": os.fspath(disk / "sweep"), "model": os.fspath(model),
                                      "noise": {"model": "pcm_like"}, "mapping": "all", "chips": 4, "layers": "all",
                                      "t": [0.0, 3600.0], "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0, 4.0]}}))
    done = aimcemu_cli("sweep", "--config", config, "--workers", "2", "--no-progress")
    assert_clean_failure(done, "No space left on device")
    assert temporaries(disk) == [], "temporary files were left on the full disk"
    if (disk / "sweep" / "index.json").is_file():  # the index lists only complete task files
        for task in results.read_index(disk / "sweep")["tasks"]:
            if task["done"]:
                _core.read_results(os.fspath(disk / "sweep" / task["file"]))
    for path in (disk / "sweep" / "tasks").glob("*.h5"):
        _core.read_results(os.fspath(path))  # every file there is complete


def test_report_on_a_full_disk(tmp_path, small_disk):
    model, _ = tiny_files(tmp_path / "study", images=40)
    results = tmp_path / "run.h5"
    aimcemu.run(model, output=results, mapping="all", noise={"model": "pcm_like"}, t=(0.0, 3600.0), chips=2)
    disk = small_disk(64)
    done = aimcemu_cli("report", results, "--no-niu", "-o", disk / "report.html")
    assert_clean_failure(done, "No space left on device")
    assert list(disk.iterdir()) == []
    done = aimcemu_cli("report", results, "--no-niu", "--png", disk / "figures", "-o", tmp_path / "report.html")
    assert_clean_failure(done, "No space left on device")
    assert temporaries(disk) == []
