"""`aimcemu sweep --check` lists the tasks (file and grid point; the first LISTED_TASKS, then a
count), as docs/sweeps.md says; it printed only their number.  docs/sweeps.md documents every
option and grid axis the code takes (`peripherals` and `peripherals.<setting>` were missing),
and a grid point with peripherals but no mapping or noise is an AIMC point, as aimcemu.run
takes it (the plan called it digital and refused t, chips...)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

import aimcemu
from aimcemu import cli, sweeps
from aimcemu.commands import sweep as sweep_command
from hostile import tiny_files

DOC = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def write_config(folder: Path, grid: dict, **changes) -> Path:
    model, data = tiny_files(folder)
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(folder / "sweep"), "model": str(model), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0], "grid": grid,
                                    **changes}, sort_keys=False))
    return path


def test_check_lists_each_task_with_its_file_and_grid_point(tmp_path, capsys):
    path = write_config(tmp_path, {"noise.prog_noise_scale": [0.5, 2.0], "mapping": {"all": "all", "none": None}})
    assert cli.main(["sweep", "-c", str(path), "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"4 tasks in {tmp_path / 'sweep'}; axes: noise.prog_noise_scale (2), mapping (2)"
    tasks = sweeps.plan(yaml.safe_load(path.read_text())).tasks
    assert lines[1:] == [f"  {task.file}  noise.prog_noise_scale={task.point['noise.prog_noise_scale']}, "
                         f"mapping={task.point['mapping']}" for task in tasks]
    assert not (tmp_path / "sweep").exists()


def test_check_lists_the_first_tasks_of_a_large_grid_and_counts_the_rest(tmp_path, capsys):
    scales = [0.5 + k / 100 for k in range(sweep_command.LISTED_TASKS + 7)]
    path = write_config(tmp_path, {"noise.prog_noise_scale": scales})
    assert cli.main(["sweep", "-c", str(path), "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + sweep_command.LISTED_TASKS + 1
    assert lines[-2].startswith("  tasks/00019-") and lines[-1] == "  ... and 7 more"


def test_the_docs_name_every_option_and_grid_axis(tmp_path):
    text = DOC.read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `([a-z_]+)`", text, re.M)} | {"model", "data", "chips", "rounds",
                                                                                  "seed"}
    assert set(sweeps.DEFAULTS) <= table, set(sweeps.DEFAULTS) - table
    axes = text[text.index("Grid axes:"):text.index("A `noise` axis")]
    for axis in (*sweeps.PLAIN_AXES, "noise.<parameter>", "peripherals.<setting>"):
        assert f"`{axis}`" in axes, axis


def test_peripherals_alone_make_an_aimc_point_not_a_digital_one(tmp_path):
    path = write_config(tmp_path, {"peripherals.out_noise": [0.0, 0.05]}, noise=None, mapping=None,
                        peripherals="ideal", chips=2)
    config = yaml.safe_load(path.read_text())
    for task in sweeps.plan(config).tasks:
        assert (task.run["chips"], task.run["t"]) == (2, [1.0])
    result = aimcemu.sweep(config, workers=1, progress=False)
    assert result.complete
    for summary in result.summaries.values():
        assert sorted(set(summary["chip"])) == [0, 1]


def test_a_noise_parameter_axis_takes_a_noise_given_by_its_name(tmp_path):
    """`noise: pcm_like` (a model name, as a run takes it) with a noise.<parameter> axis, and a
    noise axis of names with one: the plan said "a noise parameter axis needs a top-level 'noise'
    with a 'model'" although docs/sweeps.md says the two kinds of axis combine."""
    path = write_config(tmp_path, {"noise.prog_noise_scale": [0.5, 2.0]}, noise="pcm_like")
    tasks = sweeps.plan(yaml.safe_load(path.read_text())).tasks
    assert [t.run["noise"] for t in tasks] == [{"model": "pcm_like", "prog_noise_scale": 0.5},
                                                    {"model": "pcm_like", "prog_noise_scale": 2.0}]
    path = write_config(tmp_path, {"noise": {"a": "pcm_like", "b": "hermes"}, "noise.prog_noise_scale": [0.5]})
    tasks = sweeps.plan(yaml.safe_load(path.read_text())).tasks
    assert sorted(t.run["noise"]["model"] for t in tasks) == ["hermes", "pcm_like"]
    assert all(t.run["noise"]["prog_noise_scale"] == 0.5 for t in tasks)
