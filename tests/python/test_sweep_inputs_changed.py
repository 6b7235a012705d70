"""A resumed sweep refuses inputs that changed since its finished tasks ran.  Review rev_C: task
ids hash the run arguments, which hold the file paths, so a model whose weights were rewritten
(or a mapping file edited) between a killed sweep and its resume gave one sweep whose finished
tasks ran on the old files and whose new ones on the new, under one grid, without a word."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from aimcemu import _core, cli, modelfile, sweeps
from hostile import tiny_files


@pytest.fixture
def half_done_sweep(tmp_path):
    """A finished two-task sweep with one task file removed (as a kill would leave it)."""
    model, data = tiny_files(tmp_path)
    mapping = tmp_path / "map.yaml"
    mapping.write_text("default: aimc\n")
    config = {"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
              "noise": {"model": "pcm_like"}, "mapping": str(mapping), "t": [1.0],
              "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}
    sweeps.sweep(config, workers=1, progress=False)
    (tmp_path / "sweep" / sweeps.plan(config).tasks[1].file).unlink()
    return config, model, mapping


def test_the_index_records_every_input_file(half_done_sweep):
    config, model, mapping = half_done_sweep
    index = json.loads((model.parent / "sweep" / "index.json").read_text())
    assert sorted(index["inputs"]) == sorted([str(model), config["data"], str(mapping)])
    assert index["inputs"][str(model)]["bytes"] == model.stat().st_size


def test_a_model_rewritten_before_the_resume_is_refused_naming_it(half_done_sweep):
    config, model, _ = half_done_sweep
    net = modelfile.load_model(model)
    head = net.layers[-1]
    head.weights = (-np.asarray(head.weights, dtype=np.int16)).clip(-128, 127).astype(np.int8)
    net.layers = [*net.layers[:-1], head]
    net.resolve()
    size = model.stat().st_size
    modelfile.save_model(net, model)
    assert model.stat().st_size == size  # same size: only the contents tell them apart
    with pytest.raises(_core.FormatError, match=rf"^{model}: field 'file': changed since this sweep's finished tasks ran"):
        sweeps.sweep(config, workers=1, progress=False)
    assert not (model.parent / "sweep" / sweeps.plan(config).tasks[1].file).exists()  # nothing ran


def test_an_edited_mapping_file_is_refused_on_the_command_line(half_done_sweep, capsys):
    config, model, mapping = half_done_sweep
    mapping.write_text("default: digital\nlayers: {fc: aimc}\n")
    path = model.parent / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli.main(["sweep", "-c", str(path), "--no-progress", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{mapping}: field 'file': changed since" in err and "Traceback" not in err, err


def test_unchanged_inputs_resume_and_an_unfinished_sweep_takes_new_ones(half_done_sweep, tmp_path):
    config, model, _ = half_done_sweep
    assert sweeps.sweep(config, workers=1, progress=False).ran == 1
    # No task finished: nothing would mix, so the new file is taken and recorded.
    for task in sweeps.plan(config).tasks:
        (tmp_path / "sweep" / task.file).unlink()
    modelfile.save_model(modelfile.load_model(model), model)
    data = tmp_path / "test_set.h5"
    images = np.asarray(modelfile.load_dataset(data)["images"])
    modelfile.save_dataset(images[::-1].copy(), np.zeros(len(images), dtype=np.int64), data, source="test",
                           input_frac_bits=7)
    assert sweeps.sweep(config, workers=1, progress=False).ran == 2
