"""Sweep configs that the run would refuse late are refused while planning, with one source.

Everything a task's run resolves against the network (mapping patterns, the `layers` to store)
is checked by `sweep --check` and before the sweep folder is created, and an error inside a grid
value names the config file once and the grid point's value: 'grid.<axis>[<label or index>]'.
No task runs here."""
from __future__ import annotations

import pytest
import yaml

from aimcemu import cli

BASE = {"noise": {"model": "pcm_like"}, "t": [0.0, 3600.0]}


def write_config(tmp_path, **changes):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**BASE, "output": str(tmp_path / "tsw"), **changes}))
    return path


def refused(capsys, argv) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_a_misspelled_layers_entry_is_refused_while_planning_and_writes_nothing(tmp_path, capsys):
    # Was: --check said "1 tasks", the run wrote tsw/index.json and tsw/tasks/, then failed with
    # "<arguments>: field 'layers'", and after fixing the name the folder was refused as another sweep.
    path = write_config(tmp_path, layers="stm", grid={"noise.prog_noise_scale": [1.0]})
    for extra in (["--check"], ["--no-progress"]):
        err = refused(capsys, ["sweep", "-c", str(path), *extra])
        assert f"{path}: field 'layers': no layer named 'stm'" in err
        assert "<arguments>" not in err
        assert not (tmp_path / "tsw").exists()
    path = write_config(tmp_path, layers="stem", grid={"noise.prog_noise_scale": [1.0]})
    assert cli.main(["sweep", "-c", str(path), "--check"]) == 0
    assert "1 tasks" in capsys.readouterr().out


GRID_ERRORS = [
    ({"model": [None]}, "field 'grid.model[0]': model file not found: "),
    ({"mapping": {"all": "all", "late": {"defualt": "digital", "layers": {"head": "aimc"}}}},
     "field 'grid.mapping[late].defualt': unknown key"),
    ({"mapping": {"all": "all", "late": {"default": "digital", "layers": {"haed": "aimc"}}}},
     "field 'grid.mapping[late].layers.haed': matches no layer"),
    ({"mapping": ["all", {"default": "digital", "layers": {"haed": "aimc"}}]},
     "field 'grid.mapping[1].layers.haed': matches no layer"),
    ({"mapping": {"x": {"default": "digital", "layers": {"stem": {"noise": {"model": "hermes", "num_devices": "two"}}}}}},
     "field 'grid.mapping[x].layers.stem.noise': noise model 'hermes': field 'num_devices'"),
    ({"noise": [{"model": "pcm_like"}, {"model": "hermes", "num_devices": "two"}]},
     "field 'grid.noise[1]': noise model 'hermes': field 'num_devices'"),
    ({"noise.prog_noise_scale": [1.0, "two"]},
     "field 'grid.noise.prog_noise_scale[1]': noise model 'pcm_like': field 'prog_noise_scale'"),
]


@pytest.mark.parametrize("grid, message", GRID_ERRORS, ids=[m.split("'")[1] for _, m in GRID_ERRORS])
def test_an_error_inside_a_grid_value_names_the_file_and_the_grid_point_once(tmp_path, capsys, grid, message):
    if "model" in grid:
        grid = {"model": [str(tmp_path / "nonexist.h5")]}
    path = write_config(tmp_path, grid=grid)
    for extra in (["--check"], ["--no-progress"]):
        err = refused(capsys, ["sweep", "-c", str(path), *extra])
        assert f"aimcemu sweep: error: {path}: {message}" in err
        assert err.count(str(path)) == 1 and "<arguments>" not in err and "<sweep>" not in err
        assert not (tmp_path / "tsw").exists()


def test_a_top_level_mapping_error_names_the_file_once(tmp_path, capsys):
    # Was "sweep.yaml: field 'mapping': <arguments>: mapping: field 'layers.haed': ..." (two sources).
    path = write_config(tmp_path, mapping={"default": "digital", "layers": {"haed": "aimc"}})
    err = refused(capsys, ["sweep", "-c", str(path), "--check"])
    assert f"{path}: field 'mapping.layers.haed': matches no layer" in err
    assert "<arguments>" not in err


def test_a_data_set_that_does_not_fit_the_model_is_refused_while_planning(tmp_path, capsys):
    # Was: --check listed the task, and the run wrote the folder before its worker read the data set.
    from hostile import tiny_files

    _, other_networks_data = tiny_files(tmp_path / "tiny")   # 6x6 images; the embedded model takes 8x8
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not HDF5\n")
    for data, message in ((other_networks_data, "field 'images': image shape"),
                          (garbage, "field 'file': not a readable HDF5 file")):
        path = write_config(tmp_path, data=str(data))
        for extra in (["--check"], ["--no-progress"]):
            err = refused(capsys, ["sweep", "-c", str(path), *extra])
            assert f"{data}: {message}" in err
            assert not (tmp_path / "tsw").exists()


def test_a_bad_peripherals_string_under_a_setting_axis_names_the_file(tmp_path, capsys):
    # Was "--peripherals: field 'out_noise'": the sweep's string was parsed as if it were the run flag.
    path = write_config(tmp_path, peripherals="pcm,out_noise=lots", grid={"peripherals.out_res": ["1/16"]})
    err = refused(capsys, ["sweep", "-c", str(path), "--check"])
    assert f"{path}: field 'peripherals.out_noise': expected a number, got 'lots'" in err
    assert "--peripherals" not in err


def test_a_model_without_a_data_set_beside_it_names_the_config_file(tmp_path, capsys):
    """A model file alone in its folder (no test_set.h5, no data option): the FileNotFoundError
    named neither the config file nor the field ('no data set given and none beside the model')."""
    import shutil

    from aimcemu import modelfile

    alone = tmp_path / "alone" / "model.h5"
    alone.parent.mkdir()
    shutil.copy(modelfile.embedded_paths()[0], alone)
    path = write_config(tmp_path, grid={"model": [str(alone)]})
    err = refused(capsys, ["sweep", "-c", str(path), "--check"])
    assert f"{path}: field 'data': no data set given and none beside the model ({alone.parent / 'test_set.h5'})" in err
    run_config = tmp_path / "run.yaml"
    run_config.write_text(f"model: {alone}\n")
    assert cli.main(["run", "--config", str(run_config)]) == 2
    assert f"{run_config}: field 'data': no data set given and none beside the model" in capsys.readouterr().err
    assert not (tmp_path / "tsw").exists()
