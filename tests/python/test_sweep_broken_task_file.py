"""A truncated or empty task file stops the resume with an error that names the file and field
(it did) and now also says how to go on: delete the file and rerun, which runs its task again."""
from __future__ import annotations

import pytest
import yaml

from aimcemu import cli, sweeps
from hostile import tiny_files


@pytest.fixture
def finished_sweep(tmp_path):
    model, data = tiny_files(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
                                    "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}))
    assert cli.main(["sweep", "-c", str(path), "--no-progress", "--workers", "1"]) == 0
    return path


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_broken_task_file_stops_the_resume_saying_to_delete_it(finished_sweep, capsys, damage):
    task = sweeps.plan(yaml.safe_load(finished_sweep.read_text())).tasks[1]
    broken = finished_sweep.parent / "sweep" / task.file
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    capsys.readouterr()
    assert cli.main(["sweep", "-c", str(finished_sweep), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: field 'file'" in err and "Traceback" not in err, err
    assert "delete it and rerun the same command to run its task again" in err
    broken.unlink()  # as the message says
    assert cli.main(["sweep", "-c", str(finished_sweep), "--no-progress", "--workers", "1"]) == 0
    assert "sweep complete: 2 tasks (1 run now, 1 already done)" in capsys.readouterr().out
