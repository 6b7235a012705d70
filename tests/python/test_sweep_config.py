"""Sweep configs: the plan (tasks, labels, ids) and clear errors on bad configs before any work.

No run happens here: every check is on ``sweep.plan`` or on a sweep call that must fail before
it creates its folder."""
from __future__ import annotations

import importlib

import pytest
import yaml

from aimcemu import FormatError, cli

sweep_module = importlib.import_module("aimcemu.sweeps")

BASE = {"noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0, 3600.0], "chips": 2, "seed": 5}


def config(tmp_path, **changes):
    return {**BASE, "output": str(tmp_path / "sweep"), **changes}


def test_plan_lists_every_grid_point_once_with_the_same_seed(tmp_path):
    cfg = config(tmp_path, grid={"noise.prog_noise_scale": [0.5, 1.0, 2.0],
                                 "mapping": {"all": "all", "stem": {"default": "digital", "layers": {"stem": "aimc"}}}})
    plan = sweep_module.plan(cfg)
    assert plan.axes == {"noise.prog_noise_scale": [0.5, 1.0, 2.0], "mapping": ["all", "stem"]}
    assert len(plan.tasks) == 6
    assert len({t.id for t in plan.tasks}) == 6 and len({t.file for t in plan.tasks}) == 6
    # row-major order, the point's values applied on top of the base noise config
    assert [t.point for t in plan.tasks[:2]] == [{"noise.prog_noise_scale": 0.5, "mapping": "all"},
                                                 {"noise.prog_noise_scale": 0.5, "mapping": "stem"}]
    assert plan.tasks[4].run["noise"] == {"model": "pcm_like", "prog_noise_scale": 2.0}
    # common random numbers: one master seed, all chips and all t in every task
    assert {t.run["seed"] for t in plan.tasks} == {5}
    assert all(t.run["chips"] == 2 and t.run["t"] == [1.0, 3600.0] for t in plan.tasks)
    # ids depend on the run arguments only: the same config plans the same ids
    assert [t.id for t in sweep_module.plan(cfg).tasks] == [t.id for t in plan.tasks]


def test_no_grid_is_a_single_task(tmp_path):
    plan = sweep_module.plan(config(tmp_path))
    assert plan.axes == {} and len(plan.tasks) == 1 and plan.tasks[0].point == {}


BAD = [
    ({"bogus": 1}, "field 'bogus': unknown option"),
    ({"grid": {"noise.bogus_scale": [1.0, 2.0]}}, "field 'bogus_scale': unknown parameter"),
    ({"grid": {"temperature": [1, 2]}}, "field 'grid.temperature': unknown grid axis"),
    ({"grid": {}}, "empty grid"),
    ({"grid": {"noise.prog_noise_scale": []}}, "empty grid axis"),
    ({"grid": {"t": [1, 2]}}, "t is not a task axis"),
    ({"mapping": {"default": "digital", "layers": {"conv9*": "aimc"}}}, "matches no layer"),
    ({"grid": {"mapping": {"a": "all", "b": {"layers": {"nothere": "aimc"}}}}}, "matches no layer"),
    ({"noise": {"model": "no_such_model"}}, "unknown noise model"),
    ({"t": [3600.0, 1.0]}, "strictly increasing"),
    ({"t": []}, "field 't': empty"),
    ({"chips": 0}, "field 'chips'"),
    ({"grid": {"noise.prog_noise_scale": {"a": 1.0, "b": 2.0}}, "noise": None}, "needs a top-level 'noise'"),
]


@pytest.mark.parametrize("changes, message", BAD, ids=[m for _, m in BAD])
def test_bad_configs_fail_before_any_work(tmp_path, changes, message):
    cfg = config(tmp_path, **changes)
    with pytest.raises(FormatError, match=message.replace("(", r"\(").replace("*", r"\*")):
        sweep_module.sweep(cfg, progress=False)
    assert not (tmp_path / "sweep").exists()


def test_cli_reports_a_bad_config_and_creates_nothing(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, grid={"noise.prog_noise_scale": []})))
    assert cli.main(["sweep", "--config", str(path)]) == 2
    assert "empty grid axis" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


def test_cli_check_lists_the_tasks(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, grid={"noise.prog_noise_scale": [0.5, 1.0, 2.0]})))
    assert cli.main(["sweep", "--config", str(path), "--check"]) == 0
    assert "3 tasks" in capsys.readouterr().out
    assert not (tmp_path / "sweep").exists()


def test_a_folder_holding_another_sweep_is_refused(tmp_path):
    first = config(tmp_path, grid={"noise.prog_noise_scale": [0.5]})
    plan = sweep_module.plan(first)
    sweep_module._prepare_folder(plan)
    sweep_module._write_json_atomic(plan.folder / sweep_module.INDEX_FILE, sweep_module._index(plan, {}))
    with pytest.raises(FormatError, match="holds a different sweep"):
        sweep_module.sweep(config(tmp_path, grid={"noise.prog_noise_scale": [2.0]}), progress=False)


def test_the_function_and_the_module_are_both_callable(tmp_path):
    import aimcemu

    with pytest.raises(FormatError, match="empty grid axis"):
        aimcemu.sweep(config(tmp_path, grid={"noise.prog_noise_scale": []}))


NOT_PATHS = [({"model": 5}, "model"), ({"data": 5}, "data"), ({"model": ["a"]}, "model"),
             ({"grid": {"model": [5]}}, "grid.model[0]"), ({"grid": {"data": [{"a": 1}]}}, "grid.data[0]"),
             ({"grid": {"model": [True]}}, "grid.model[0]")]


@pytest.mark.parametrize("changes, field", NOT_PATHS, ids=[str(c) for c, _ in NOT_PATHS])
def test_a_model_or_data_that_is_not_a_path_names_the_config_file_and_field(tmp_path, capsys, changes, field):
    # Was a TypeError traceback from os.fspath, even with --check.
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, **changes)))
    for extra in (["--check"], ["--no-progress"]):
        assert cli.main(["sweep", "--config", str(path), *extra]) == 2
        assert f"{path}: field '{field}': expected a file path" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


def test_errors_of_a_config_file_name_the_file(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, chips=0)))
    with pytest.raises(FormatError, match=f"^{path}: field 'chips'"):
        sweep_module.sweep(path, progress=False)


def test_a_drift_compensation_axis_of_lists_is_refused_at_planning(tmp_path, capsys):
    # Was accepted and run; then summary, open_sweep and report failed ("more than 1 rounds").
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, grid={"drift_compensation": [["none"], ["none", "global"]]})))
    assert cli.main(["sweep", "--config", str(path), "--check"]) == 2
    assert f"{path}: field 'grid.drift_compensation': each value is one compensation" in capsys.readouterr().err
    with pytest.raises(FormatError, match="grid.drift_compensation"):
        sweep_module.plan(config(tmp_path, grid={"drift_compensation": {"one": ["none"], "both": ["none", "global"]}}))
    assert len(sweep_module.plan(config(tmp_path, grid={"drift_compensation": ["none", "global"]})).tasks) == 2


@pytest.mark.parametrize("wait", ["nan", "inf", "-5"])
def test_a_wait_that_is_not_a_finite_time_is_refused(tmp_path, capsys, wait):
    # --wait nan waited forever on a busy folder; -5 was taken silently.
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path)))
    assert cli.main(["sweep", "--config", str(path), "--wait", wait]) == 2
    assert "--wait: field 'wait': expected a finite number of seconds >= 0" in capsys.readouterr().err
    with pytest.raises(FormatError, match="field 'wait_s'"):
        sweep_module.sweep(config(tmp_path), wait_s=float(wait), progress=False)
    assert not (tmp_path / "sweep").exists()
