"""Sweeps that run: local pool and Dask LocalCluster give bit-identical files, a task's file equals
a direct aimcemu.run, common random numbers across grid points, and resuming runs only what is
missing.  A 60-image subset of the embedded test set keeps the default tests short; the full
3 t x 3 scales x 2 mappings x 8 chips sweep on the whole test set is marked slow."""
from __future__ import annotations

import importlib
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

import aimcemu
from conftest import digits_subset

sweep_module = importlib.import_module("aimcemu.sweeps")

LOOPBACK_CLUSTER = dict(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The first 60 images of the embedded test set, as a data set file."""
    return str(digits_subset(tmp_path_factory, 60)[1])


def small_sweep(folder, data, **changes):
    return {"output": str(folder), "data": data, "noise": {"model": "pcm_like"}, "mapping": "all",
            "t": [1.0, 86400.0], "chips": 2, "seed": 11,
            "grid": {"noise.prog_noise_scale": [0.5, 2.0]}, **changes}


def file_arrays(path) -> dict:
    """Every dataset of a results file (config aside: it names the output path and the time)."""
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


def assert_same_files(folder_a, folder_b, tasks):
    for task in tasks:
        a, b = file_arrays(os.path.join(folder_a, task.file)), file_arrays(os.path.join(folder_b, task.file))
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{task.file}:{name}")


def test_local_sweep_writes_one_file_per_task_and_an_index(tmp_path, small_data):
    cfg = small_sweep(tmp_path / "s", small_data)
    result = aimcemu.sweep(cfg, workers=2, progress=False)
    assert (result.total, result.ran, result.skipped, result.interrupted) == (2, 2, 0, False)
    index = json.loads((tmp_path / "s" / "index.json").read_text())
    assert index["axes"] == {"noise.prog_noise_scale": [0.5, 2.0]}
    for task in index["tasks"]:
        assert task["done"]
        with h5py.File(tmp_path / "s" / task["file"]) as f:
            assert json.loads(f.attrs["config"])["noise"]["prog_noise_scale"] == task["point"]["noise.prog_noise_scale"]
            np.testing.assert_array_equal(f["accuracy"][()], task["summary"]["accuracy"])
            np.testing.assert_array_equal(f["chip"][()], task["summary"]["chip"])
            assert sorted(set(f["t"][()])) == [1.0, 86400.0] and sorted(set(f["chip"][()])) == [0, 1]


def test_a_task_file_equals_a_direct_run(tmp_path, small_data):
    cfg = small_sweep(tmp_path / "s", small_data, grid={"noise.prog_noise_scale": [2.0]})
    aimcemu.sweep(cfg, workers=1, progress=False)
    task = sweep_module.plan(cfg).tasks[0]
    direct = aimcemu.run(data=small_data, output=str(tmp_path / "direct.h5"), mapping="all",
                         noise={"model": "pcm_like", "prog_noise_scale": 2.0}, t=(1.0, 86400.0), chips=2, seed=11,
                         layers="none")
    a, b = file_arrays(tmp_path / "s" / task.file), file_arrays(direct.path)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_common_random_numbers_across_grid_points(tmp_path, small_data):
    """Two grid points with the same values under different labels are bit-identical (draws are
    keyed by chip, not by the grid point), while the two chips of one point differ."""
    cfg = small_sweep(tmp_path / "s", small_data, t=[86400.0],
                      grid={"noise.drift_scale": {"first": 1.0, "second": 1.0}})
    aimcemu.sweep(cfg, workers=2, progress=False)
    first, second = (file_arrays(tmp_path / "s" / t.file) for t in sweep_module.plan(cfg).tasks)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    snr = first["layers/stem/snr_db"]
    assert snr[0] != snr[1]  # chip 0 and chip 1 draw different noise


def test_resume_runs_only_the_missing_tasks(tmp_path, small_data):
    cfg = small_sweep(tmp_path / "s", small_data)
    aimcemu.sweep(cfg, workers=2, progress=False)
    tasks = sweep_module.plan(cfg).tasks
    kept, removed = tmp_path / "s" / tasks[0].file, tmp_path / "s" / tasks[1].file
    before = os.stat(kept)
    os.remove(removed)
    gone = subprocess.Popen(["true"])  # a PID that is certainly dead, as a killed task's would be
    gone.wait()
    (removed.parent / f".{removed.name}.tmp-{gone.pid}-0").write_bytes(b"left by a killed task")
    result = aimcemu.sweep(cfg, workers=2, progress=False)
    assert (result.ran, result.skipped, result.complete) == (1, 1, True)
    after = os.stat(kept)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert removed.is_file() and not list(removed.parent.glob(".*"))
    assert aimcemu.sweep(cfg, workers=2, progress=False).ran == 0


def test_dask_local_cluster_gives_bit_identical_files(tmp_path, small_data):
    distributed = pytest.importorskip("distributed")
    local = small_sweep(tmp_path / "local", small_data)
    on_dask = small_sweep(tmp_path / "dask", small_data)
    aimcemu.sweep(local, workers=2, progress=False)
    with distributed.LocalCluster(**LOOPBACK_CLUSTER) as cluster, distributed.Client(cluster) as client:
        # by address, as `aimcemu sweep --scheduler tcp://...` does
        result = aimcemu.sweep(on_dask, executor=cluster.scheduler_address, progress=False)
        assert result.ran == 2
        # the tasks ran in the workers' processes, not in this one
        assert {s["pid"] for s in result.summaries.values()} <= set(client.run(os.getpid).values())
    assert_same_files(tmp_path / "local", tmp_path / "dask", sweep_module.plan(local).tasks)


@pytest.mark.slow
def test_full_sweep_on_the_embedded_model_local_and_dask_agree(tmp_path):
    """3 t x 3 noise scales x 2 mappings x 8 chips on the whole embedded test set."""
    distributed = pytest.importorskip("distributed")
    grid = {"noise.prog_noise_scale": [0.5, 1.0, 2.0],
            "mapping": {"all": "all", "late": {"default": "digital", "layers": {"head": "aimc", "classifier": "aimc"}}}}
    base = {"noise": {"model": "pcm_like"}, "t": [1.0, 3600.0, 86400.0], "chips": 8, "seed": 2, "grid": grid}
    result = aimcemu.sweep({**base, "output": str(tmp_path / "local")}, progress=False)
    assert result.complete and result.total == 6
    with distributed.LocalCluster(**LOOPBACK_CLUSTER) as cluster, distributed.Client(cluster) as client:
        assert aimcemu.sweep({**base, "output": str(tmp_path / "dask")}, executor=client, progress=False).complete
    assert_same_files(tmp_path / "local", tmp_path / "dask", sweep_module.plan({**base, "output": "x"}).tasks)
    ds = aimcemu.analysis.open_sweep(tmp_path / "local")
    assert dict(ds["accuracy"].sizes) == {"noise.prog_noise_scale": 3, "mapping": 2, "chip": 8, "t": 3, "rep": 1}
    assert not np.isnan(ds["accuracy"].values).any()


def test_drift_compensation_as_grid_axis_or_as_a_list_gives_the_same_accuracies(tmp_path, small_data):
    """A grid axis over the compensations and a base list (every task runs both) give the same
    numbers: the NIU draws of a (chip, t, round) do not depend on the compensation."""
    from aimcemu import analysis

    axis = aimcemu.sweep(small_sweep(tmp_path / "axis", small_data, grid={"drift_compensation": ["none", "global"]}),
                         workers=1, progress=False)
    single_point = small_sweep(tmp_path / "list", small_data, drift_compensation="none,global")  # the CLI's form
    del single_point["grid"]
    listed = aimcemu.sweep(single_point, workers=1, progress=False)
    assert (axis.total, listed.total) == (2, 1)
    by_axis, by_list = analysis.open_sweep(tmp_path / "axis"), analysis.open_sweep(tmp_path / "list")
    assert by_axis["accuracy"].dims == ("drift_compensation", "chip", "t", "rep")
    assert by_list["accuracy"].dims == ("drift_compensation", "chip", "t", "rep")
    assert by_list["snr_db"].dims == ("layer", "drift_compensation", "chip", "t", "rep")
    np.testing.assert_array_equal(by_axis["accuracy"].values, by_list["accuracy"].values)
    np.testing.assert_array_equal(by_axis["snr_db"].transpose(*by_list["snr_db"].dims).values, by_list["snr_db"].values)
    acc = analysis.accuracy_vs_t(by_list)
    assert acc["mean"].dims == ("drift_compensation", "t")
    index = json.loads((tmp_path / "list" / "index.json").read_text())
    assert index["tasks"][0]["summary"]["drift_compensation"] == ["none"] * 2 * 2 + ["global"] * 2 * 2


def test_resume_does_not_take_a_symlink_to_another_tasks_file(tmp_path, small_data):
    # A task file that was a symbolic link to another task's file was taken as that task's
    # result: one grid point silently showed another's numbers.  It now runs again.
    config = small_sweep(tmp_path / "s", small_data, layers="none")
    first = aimcemu.sweep(config, workers=1, progress=False)
    tasks = sweep_module.plan(config).tasks
    linked, target = (tmp_path / "s" / t.file for t in tasks)
    genuine = file_arrays(linked)
    linked.unlink()
    linked.symlink_to(target.name)
    again = aimcemu.sweep(config, workers=1, progress=False)
    assert again.complete and (again.ran, again.skipped) == (1, 1)
    assert linked.is_file() and not linked.is_symlink()
    assert again.summaries[tasks[0].file]["accuracy"] == first.summaries[tasks[0].file]["accuracy"]
    rerun = file_arrays(linked)
    for name in genuine:
        np.testing.assert_array_equal(rerun[name], genuine[name], err_msg=name)
