"""aimcemu.sweep with arguments of the wrong type or out of range: a FormatError naming the argument
or option, never a raw TypeError, OverflowError or Dask's own parse error."""
from __future__ import annotations

import pytest

import aimcemu


def good(tmp_path) -> dict:
    return {"output": str(tmp_path / "s"), "noise": "pcm_like", "mapping": "all", "t": [1.0],
            "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}


@pytest.mark.parametrize("config, message", [
    (5, r"<arguments>: field 'config': expected a dict of sweep options or a YAML file path, got 5"),
    ([1], r"field 'config': expected a dict"),
    (b"x", r"field 'config': expected a dict"),
])
def test_a_config_that_is_not_a_mapping_is_named(config, message):
    with pytest.raises(aimcemu.FormatError, match=message):
        aimcemu.sweep(config)


def test_an_output_that_is_not_a_path_is_named(tmp_path):
    with pytest.raises(aimcemu.FormatError, match=r"<arguments>: field 'output': expected a folder path, got 5"):
        aimcemu.sweep(good(tmp_path), output=5)


def test_a_grid_axis_that_cannot_be_copied_is_named(tmp_path):
    config = good(tmp_path)
    config["grid"] = {"noise.prog_noise_scale": (v for v in (0.5, 1.0))}
    with pytest.raises(aimcemu.FormatError, match=r"field 'grid\.noise\.prog_noise_scale': expected plain values"):
        aimcemu.sweep(config)


def test_a_wait_too_large_for_a_float_is_named(tmp_path):
    with pytest.raises(aimcemu.FormatError, match=r"field 'wait_s': an integer of 401 digits is beyond the range of a float"):
        aimcemu.sweep(good(tmp_path), wait_s=10**400)


def test_an_executor_string_that_is_no_address_is_named(tmp_path):
    pytest.importorskip("distributed")
    with pytest.raises(aimcemu.FormatError, match=r"field 'executor': expected .local. or a scheduler address"):
        aimcemu.sweep(good(tmp_path), executor="bogus", progress=False)
    assert not (tmp_path / "s").exists()


def test_the_cli_names_its_scheduler_flag(tmp_path, capsys):
    from aimcemu import cli
    config = tmp_path / "s.yaml"
    config.write_text(f"output: {tmp_path / 's'}\nnoise: pcm_like\nmapping: all\nt: [1.0]\n")
    assert cli.main(["sweep", "-c", str(config), "--scheduler", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler: field 'scheduler': expected 'local' or a scheduler address" in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"executor": 5}, r"<arguments>: field 'executor': expected None, 'local', a scheduler address"),
    ({"progress": "no"}, r"<arguments>: field 'progress': expected True or False, got 'no'"),
])
def test_other_arguments_of_the_wrong_type_are_named_before_the_folder_is_made(tmp_path, kwargs, message):
    with pytest.raises(aimcemu.FormatError, match=message):
        aimcemu.sweep(good(tmp_path), **kwargs)
    assert not (tmp_path / "s").exists()
