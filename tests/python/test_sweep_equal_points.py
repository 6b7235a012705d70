"""Grid points with equal run arguments (two labels for one value; digital points that differ only
in options a digital run ignores) share a task id but not a file.  Every one of them runs, on a
resume and on Dask, and the command never says "sweep complete" while a task file is missing.
Before, the bookkeeping was keyed by id: a lost file of such a point was never run again (the
index said done), and Dask ran one task for both keys; the command said complete, exit 0."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import cli, sweeps
from hostile import tiny_files

LOOPBACK_CLUSTER = dict(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None)


@pytest.fixture
def study(tmp_path):
    tiny_files(tmp_path)
    return tmp_path


def equal_points_config(study, output="sweep") -> dict:
    """Three grid points, the first two with the same scale under different labels."""
    return {"output": str(study / output), "model": str(study / "model.h5"), "data": str(study / "test_set.h5"),
            "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0], "chips": 2, "seed": 1,
            "grid": {"noise.prog_noise_scale": {"a": 1.0, "b": 1.0, "c": 2.0}}}


def done_files(folder) -> list[str]:
    index = json.loads((folder / "index.json").read_text())
    return [task["file"] for task in index["tasks"] if task["done"]]


def test_equal_points_share_an_id_but_not_a_file(study):
    tasks = sweeps.plan(equal_points_config(study)).tasks
    assert tasks[0].id == tasks[1].id != tasks[2].id  # the id is the run arguments' hash
    assert len({task.file for task in tasks}) == 3


def test_resume_runs_a_lost_task_whose_settings_equal_another_points(study):
    config = equal_points_config(study)
    first = aimcemu.sweep(config, workers=1, progress=False)
    assert first.complete and first.ran == 3 and len(first.summaries) == 3
    tasks = sweeps.plan(config).tasks
    lost = study / "sweep" / tasks[1].file
    os.remove(lost)
    again = aimcemu.sweep(config, workers=1, progress=False)
    assert (again.ran, again.skipped, again.complete) == (1, 2, True)
    assert lost.is_file()
    assert done_files(study / "sweep") == [task.file for task in tasks]
    # equal settings, equal numbers (common random numbers): the rerun point equals its twin
    assert again.summaries[tasks[1].file]["accuracy"] == again.summaries[tasks[0].file]["accuracy"]


def test_digital_points_that_differ_only_in_ignored_options_each_get_their_file(study):
    config = {**equal_points_config(study), "t": [1.0, 3600.0],
              "grid": {"noise": {"off": None, "pcm": {"model": "pcm_like"}}, "mapping": {"digital": None, "all": "all"},
                       "drift_compensation": ["none", "global"]}}
    del config["noise"], config["mapping"]
    plan = sweeps.plan(config)
    digital = [task for task in plan.tasks if task.run["noise"] is None and task.run["mapping"] is None]
    assert len(digital) == 2 and digital[0].id == digital[1].id
    result = aimcemu.sweep(config, workers=1, progress=False)
    assert result.complete and result.ran == len(plan.tasks) == 8
    assert all((study / "sweep" / task.file).is_file() for task in plan.tasks)


def test_dask_runs_every_point_when_two_have_equal_settings(study):
    distributed = pytest.importorskip("distributed")
    config = equal_points_config(study)
    with distributed.LocalCluster(**LOOPBACK_CLUSTER) as cluster, distributed.Client(cluster) as client:
        result = aimcemu.sweep(config, executor=client, progress=False)
    tasks = sweeps.plan(config).tasks
    assert (result.ran, result.complete) == (3, True)
    assert sorted(os.listdir(study / "sweep" / "tasks")) == sorted(os.path.basename(t.file) for t in tasks)
    assert done_files(study / "sweep") == [task.file for task in tasks]


def test_the_dask_key_is_unique_per_grid_point_and_folder(study):
    tasks = sweeps.plan(equal_points_config(study)).tasks
    keys = {sweeps._task_key(folder, task) for folder in ("/a/sweep", "/b/sweep") for task in tasks}
    assert len(keys) == 2 * len(tasks)


def test_the_command_does_not_say_complete_while_a_task_file_is_missing(study, capsys, monkeypatch):
    """A sweep call that returns without error or signal but short of files (as Dask's shared
    key made it) exits 2 with the count, never "sweep complete" and 0."""
    config = equal_points_config(study)
    aimcemu.sweep(config, workers=1, progress=False)
    tasks = sweeps.plan(config).tasks
    os.remove(study / "sweep" / tasks[2].file)
    short = sweeps.SweepResult(folder=str(study / "sweep"), total=3, ran=0, skipped=2, interrupted=False,
                               summaries={task.file: {} for task in tasks[:2]})
    monkeypatch.setattr(sweeps, "sweep", lambda *args, **kwargs: short)
    path = study / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    code = cli.main(["sweep", "-c", str(path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "2 of 3 tasks done" in err and "rerun the same command" in err
    assert "sweep complete" not in out


def test_equal_points_are_bit_identical(study):
    config = equal_points_config(study)
    aimcemu.sweep(config, workers=2, progress=False)
    ds = aimcemu.analysis.open_sweep(study / "sweep")
    accuracy = ds["accuracy"]
    assert bool(ds["done"].all())
    np.testing.assert_array_equal(accuracy.sel({"noise.prog_noise_scale": "a"}).values,
                                  accuracy.sel({"noise.prog_noise_scale": "b"}).values)
