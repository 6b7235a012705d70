"""Bad input to ``aimcemu sweep``, ``aimcemu report`` and ``aimcemu perf``.

As in test_bad_input_run.py: every case asserts exit code 2, the file or field named in the
message, and that nothing appeared, changed or was left behind.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import files, sweeps
from hostile import Snapshot, assert_refused, cli_run, sweep_in_process, temporaries, tiny_files

CORPUS = Path(__file__).resolve().parent.parent / "fuzz" / "corpus"


@pytest.fixture
def folder(tmp_path):
    study = tmp_path / "study"
    tiny_files(study)
    return study



def sweep_config(folder, **changes) -> Path:
    config = {"output": str(folder / "sweep"), "model": str(folder / "model.h5"), "noise": {"model": "pcm_like"},
              "mapping": "all", "t": [0.0, 3600.0], "chips": 2, **changes}
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# --- sweeps ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_grid_of_1e8_points_is_refused_from_its_axis_lengths(folder, capsys, check):
    grid = {"noise.prog_noise_scale": list(np.linspace(0.1, 2, 100)), "noise.drift_scale": list(np.linspace(0.1, 2, 100)),
            "noise.read_noise_scale": list(np.linspace(0.1, 2, 100)), "noise.t0": list(np.linspace(1, 2, 100))}
    config = sweep_config(folder, grid={k: [float(v) for v in vs] for k, vs in grid.items()})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    assert_refused(["sweep", "--config", config, *(["--check"] if check else [])], folder, capsys,
            "field 'grid': 100 x 100 x 100 x 100 = 100000000 grid points; at most 100000 tasks")
    assert time.perf_counter() - start < 20
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024 < 200  # MB


@pytest.mark.parametrize("changes, message", [
    ({"chips": 2**30}, "field 'chips': must be an integer >= 1 and <= 2^20"),
    ({"seed": 2**64}, "field 'seed'"),
    ({"t": [0.0, float("nan")]}, "field 't'"),
    ({"t": [[1.0]]}, "field 't': expected a number of seconds, got [1.0]"),
    ({"noise": None, "mapping": None}, "field 't': every task of this sweep is digital"),
    ({"grid": {"mapping": {"a": [1]}}}, "field 'grid.mapping[a]'"),
], ids=["chips", "seed", "t_nan", "t_nested", "digital", "mapping_list"])
def test_bad_sweep_options(folder, capsys, changes, message):
    config = sweep_config(folder, **changes)
    assert_refused(["sweep", "--config", config], folder, capsys, message)


def test_a_grid_point_the_niu_cannot_run_is_refused_by_the_plan(folder, capsys):
    """A grid value whose NIU table overflows its field (or a t beyond the drift field) is refused
    by `sweep --check` and before any task runs, naming the value's field."""
    config = sweep_config(folder, grid={"noise.prog_noise_scale": [1.0, 1.0e300]})
    for argv in (["sweep", "--config", config, "--check"], ["sweep", "--config", config]):
        assert_refused(argv, folder, capsys, "field 'grid.noise.prog_noise_scale[1]'", "the NIU cannot run pcm_like",
                       "field 'SP'")
    config = sweep_config(folder, t=[0.0, 1.0e15])
    assert_refused(["sweep", "--config", config, "--check"], folder, capsys, "field 't'", "log2(t/t0) beyond 32")


@pytest.mark.parametrize("workers", ["0", "-1", "100000"])
def test_worker_counts_are_checked(folder, capsys, workers):
    config = sweep_config(folder)
    assert_refused(["sweep", "--config", config, "--workers", workers], folder, capsys, "--workers: field 'workers'")


def test_an_output_that_is_a_file_is_refused(folder, capsys):
    config = sweep_config(folder, output=str(folder / "model.h5"))
    assert_refused(["sweep", "--config", config], folder, capsys, "field 'output'", "is not a folder")


def test_a_second_sweep_on_a_locked_folder_is_refused(folder, capsys):
    config = sweep_config(folder)
    (folder / "sweep").mkdir()
    with files.FolderLock(folder / "sweep"):
        assert_refused(["sweep", "--config", config], folder, capsys,
                "another sweep is running in this folder (PID", f"on {os.uname().nodename}")
        start = time.monotonic()
        assert_refused(["sweep", "--config", config, "--wait", "1"], folder, capsys, "waited 1 s")
        assert time.monotonic() - start >= 1.0


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo", "folder"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_untouched(folder, capsys, plant):
    """The lock file is truncated and written by its holder: a link planted in its place must not
    have its target overwritten (a model destroyed), and a FIFO or folder is refused, not waited on."""
    config = sweep_config(folder)
    sweep = folder / "sweep"
    sweep.mkdir()
    lock = sweep / files.FolderLock.NAME
    precious = folder / "model.h5"
    before = precious.read_bytes()
    if plant == "symlink":
        lock.symlink_to(precious)
        message = "is a symbolic link"
    elif plant == "hardlink":  # review rev_s12: O_NOFOLLOW does not see a hard link
        os.link(precious, lock)
        message = "has 2 names (a hard link)"
    elif plant == "fifo":
        os.mkfifo(lock)
        message = "is not a regular file"
    else:
        lock.mkdir()
        message = "cannot open the lock file"
    assert_refused(["sweep", "--config", config], folder, capsys, "sweep/.aimcemu.lock: field 'file'", message)
    assert precious.read_bytes() == before
    assert not (sweep / "index.json").exists()


def test_overlapping_axes_combine_in_a_documented_order():
    """`noise` and `noise.<param>` as axes: the parameter applies on top of each whole noise
    config, whichever comes first, so no two labels share a task."""
    for grid in ({"noise": {"pcm": {"model": "pcm_like"}, "pcm_quiet": {"model": "pcm_like", "read_noise_scale": 0.0}},
                  "noise.prog_noise_scale": [0.5, 2.0]},
                 {"noise.prog_noise_scale": [0.5, 2.0],
                  "noise": {"pcm": {"model": "pcm_like"}, "pcm_quiet": {"model": "pcm_like", "read_noise_scale": 0.0}}}):
        plan = sweeps.plan({"output": "unused", "noise": {"model": "pcm_like"}, "mapping": "all", "grid": grid})
        assert len({t.id for t in plan.tasks}) == 4
        for task in plan.tasks:
            assert task.run["noise"]["prog_noise_scale"] == task.point["noise.prog_noise_scale"]
            assert ("read_noise_scale" in task.run["noise"]) == (task.point["noise"] == "pcm_quiet")


def test_a_malformed_index_is_named(folder, capsys):
    config = sweep_config(folder)
    (folder / "sweep").mkdir()
    for content, message in (("{not json", "index.json: field '<json>': Expecting property name"),
                             ('{"format": "aimcemu-sweep", "format_version": 7}', "index.json: field 'format_version'"),
                             (b"\xff\xfe", "index.json: field '<encoding>'")):
        (folder / "sweep" / "index.json").write_bytes(content if isinstance(content, bytes) else content.encode())
        assert_refused(["sweep", "--config", config], folder, capsys, message)


# --- report ---------------------------------------------------------------------------------------
@pytest.fixture
def results(folder):
    out = folder / "run.h5"
    aimcemu.run(folder / "model.h5", output=out, mapping="all", noise={"model": "pcm_like"}, t=(0.0, 3600.0))
    return out


@pytest.mark.parametrize("seed, message", [
    ("fuzz_results_file/bad-format_version_99.h5", "field 'format_version': this build reads version 2, the file is version 99"),
    ("fuzz_results_file/bad-truncated_half.h5", "field 'file': not a readable HDF5 file"),
    ("fuzz_results_file/bad-not_hdf5.h5", "field 'file': not a readable HDF5 file"),
    ("fuzz_model_file/tiny.h5", "field 'format': expected 'aimcemu-results', found 'aimcemu-model'"),
    ("fuzz_results_file/bad-accuracy_short.h5", "field 'accuracy': expected shape [8], found [3]"),
    ("fuzz_results_file/bad-missing_layer.h5", "field 'layers'"),
], ids=lambda v: Path(v).stem if "/" in str(v) else "")
def test_report_names_a_bad_results_file(folder, capsys, seed, message):
    bad = folder / "bad.h5"
    shutil.copy(CORPUS / seed, bad)
    assert_refused(["report", bad], folder, capsys, f"{bad}: ", message)


def test_report_refuses_outputs_that_are_inputs_or_not_files(folder, capsys, results):
    assert_refused(["report", results, "-o", results], folder, capsys, "field 'output'", "is the results file")
    assert_refused(["report", results, "-o", "/dev/null"], folder, capsys, "field 'output'", "not a regular file")
    assert_refused(["report", results, "-o", folder], folder, capsys, "field 'output'", "is a folder")
    os.mkfifo(folder / "fifo.h5")
    assert_refused(["report", folder / "fifo.h5"], folder, capsys, "field 'results'", "not a regular file")


def small_sweep(folder) -> Path:
    """A finished 2-task sweep, run in this process (no pool) to keep the test fast."""
    return sweep_in_process(yaml.safe_load(sweep_config(folder, grid={"noise.prog_noise_scale": [0.5, 1.0]}).read_text()))


def test_report_names_the_broken_task_of_a_sweep(folder, capsys):
    sweep_folder = small_sweep(folder)
    task = sorted((sweep_folder / "tasks").iterdir())[1]
    task.write_bytes(task.read_bytes()[: task.stat().st_size // 2])
    assert_refused(["report", sweep_folder], folder, capsys, f"{task}: field 'file'")
    (sweep_folder / "index.json").write_text("[1, 2")
    assert_refused(["report", sweep_folder], folder, capsys, "index.json: field '<json>'")


def test_resume_refuses_a_task_file_whose_config_is_not_json(folder, capsys):
    """Resuming reads the finished task files (results.read_task_summaries); a config that is not
    JSON is refused there as open_run and open_sweep refuse it (field 'config'), where resume took
    the task as done and wrote it into the index."""
    sweep_folder = small_sweep(folder)
    task = sorted((sweep_folder / "tasks").iterdir())[1]
    with h5py.File(task, "r+") as f:
        f.attrs["config"] = "{not json"
    snapshot = Snapshot(folder)
    code, err = cli_run(["sweep", "--config", folder / "sweep.yaml"], capsys)
    assert code == 2 and f"{task}: field 'config': not valid JSON" in err and "Traceback" not in err, err
    # the folder's lock file is all that appears (every sweep leaves it); the index is not rewritten
    assert snapshot.changes() == [f"appeared: {sweep_folder / files.FolderLock.NAME}"]


def test_report_output_folder_with_a_trailing_slash(folder, capsys, results):
    code, err = cli_run(["report", results, "--no-niu", "-o", f"{folder / 'pages'}/"], capsys)
    assert code == 0, err
    assert [p.name for p in (folder / "pages").iterdir()] == ["run.html"]
    assert temporaries(folder) == []


# --- perf -----------------------------------------------------------------------------------------
def test_perf_output_must_be_csv_or_json_and_never_the_model(folder, capsys):
    model = folder / "model.h5"
    assert_refused(["perf", "--model", model, "--output", folder / "x.txt"], folder, capsys,
            "--output: field 'output'", "must end in .csv (per-layer table) or .json")
    assert_refused(["perf", "--model", model, "--output", model], folder, capsys, "--output: field 'output'", "is the model of this run")
    assert_refused(["perf", "--model", model, "--output", "/dev/null"], folder, capsys, "--output: field 'output'", "not a regular file")
    assert_refused(["perf", "--model", model, "--niu", "-1"], folder, capsys, "--niu: field 'niu'")
    code, err = cli_run(["perf", "--model", model, "--output", f"{folder / 'timing'}/"], capsys)
    assert code == 0, err
    assert json.loads((folder / "timing" / "model_perf.json").read_text())["summary"]["fps"] > 0


def test_import_never_writes_over_its_inputs_or_non_files(folder, capsys):
    """aimcemu import: the ONNX file and the calibration images are inputs (refused as --output
    by inode, before the ONNX file is read), and devices and folders are never replaced."""
    onnx = folder / "net.onnx"
    onnx.write_bytes(b"not read: the output is refused first")
    images = folder / "calibration.npy"
    images.write_bytes(b"neither")
    link = folder / "other-name.h5"
    os.link(onnx, link)
    for output in (onnx, link, images):
        assert_refused(["import", onnx, "--calibration", images, "-o", output], folder, capsys,
                       "--output: field 'output'", "of this run")
    assert_refused(["import", onnx, "-o", "/dev/null"], folder, capsys, "--output: field 'output'", "not a regular file")
    assert_refused(["import", onnx, "-o", folder], folder, capsys, "--output: field 'output'", "is a folder")
    assert_refused(["import", folder / "missing.onnx", "-o", folder / "out.h5"], folder, capsys,
                   "field 'model'", "ONNX file not found")


def test_a_task_file_is_written_once(folder):
    """A second attempt at a finished task (a Dask retry, a duplicate grid point) leaves the first
    file untouched and counts the task as done."""
    plan = sweeps.plan(yaml.safe_load(sweep_config(folder).read_text()))
    plan.folder.mkdir()
    sweeps._prepare_folder(plan)
    task = plan.tasks[0].to_dict()
    first = sweeps.execute_task(task, os.fspath(plan.folder), 1)
    path = plan.folder / task["file"]
    before = path.stat()
    with pytest.raises(FileExistsError):  # an attempt that started before the file existed
        aimcemu.run(output=path, overwrite=False, threads=1, **task["run"])
    again = sweeps.execute_task(task, os.fspath(plan.folder), 1)
    assert first["ran"]
    assert not again["ran"] and (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert temporaries(plan.folder) == []


def _one_point_sweep(tmp_path):
    return {"output": str(tmp_path / "sw"), "noise": {"model": "pcm_like"}, "mapping": "all", "t": [0.0],
            "grid": {"noise.prog_noise_scale": [1.0]}}


def test_an_index_or_lock_that_is_not_a_regular_file_is_named(tmp_path):
    # Were bare "[Errno 21] Is a directory", "[Errno 22] Invalid argument" and "Exceeds the limit
    # (4300 digits)" with no file named.
    folder = tmp_path / "sw"
    (folder / "index.json").mkdir(parents=True)
    with pytest.raises(aimcemu.FormatError, match=r"sw/index\.json: field 'file': not a regular file"):
        sweeps.sweep(_one_point_sweep(tmp_path), progress=False)
    (folder / "index.json").rmdir()
    (folder / "index.json").write_text('{"format": "aimcemu-sweep", "version": 1' + "0" * 5000 + "}")
    with pytest.raises(aimcemu.FormatError, match=r"sw/index\.json: field 'file': not valid JSON"):
        sweeps.sweep(_one_point_sweep(tmp_path), progress=False)
    (folder / "index.json").unlink()
    os.mkfifo(folder / ".aimcemu.lock")
    with pytest.raises(aimcemu.FormatError, match=r"sw/\.aimcemu\.lock: field 'file': exists and is not a regular file"):
        sweeps.sweep(_one_point_sweep(tmp_path), progress=False)


def test_a_bad_noise_parameter_on_the_grid_is_named_once(tmp_path):
    config = {**_one_point_sweep(tmp_path), "grid": {"noise.prog_noise_scale": ["x"]}}
    with pytest.raises(aimcemu.FormatError) as info:
        sweeps.plan(config)
    assert str(info.value).count("<sweep>") == 1 and "field 'grid.noise.prog_noise_scale[0]': noise model 'pcm_like'" in str(info.value)
