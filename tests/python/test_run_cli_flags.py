"""`aimcemu run`: an error in a value given on the command line names its flag, not '<arguments>'.

Was: `aimcemu run --noise '{model: pcm_like, bogus: 1}'` said "<arguments>: field 'noise': ...".
A value from --config still names the config file, and a flag that overrides it names the flag.
Nothing runs here: every case is refused before any work."""
from __future__ import annotations

import pytest

from aimcemu import cli
from hostile import tiny_files


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "study"
    model, _ = tiny_files(folder)
    return folder, model


def error_of(capsys, argv) -> str:
    assert cli.main(["run", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert "<arguments>" not in err
    return err


FLAG_ERRORS = [
    (["--noise", "{model: pcm_like, bogus_scale: 1}"], "--noise: field 'noise': "),
    (["--noise", "no_such_model"], "--noise: field 'noise': "),
    (["--mapping", "all", "--chips", "0"], "--chips: field 'chips': must be an integer"),
    (["--mapping", "all", "--t", "1x"], "--t: field 't': cannot read '1x'"),
    (["--mapping", "all", "--drift-compensation", "globl"], "--drift-compensation: field 'drift_compensation': "),
    (["--mapping", "no_such_mapping.yaml"], "--mapping: field 'mapping': mapping file not found"),
    (["--peripherals", "out_noise=lots"], "--peripherals: field 'peripherals.out_noise': expected a number"),
    (["--peripherals", "out_res=1/64"], "--peripherals: field 'peripherals.out_res': an ADC needs a finite out_bound"),
    (["--layers", "nope"], "--layers: field 'layers': no layer named 'nope'"),
    (["--data", "no_such_data.h5"], "--data: field 'data': data set file not found"),
    (["--backend", "turbo"], "--backend: field 'backend': unknown backend"),
]


@pytest.mark.parametrize("argv, message", FLAG_ERRORS, ids=[m.split(":")[0] + " " + a[-1][:12] for a, m in FLAG_ERRORS])
def test_a_bad_value_on_the_command_line_names_its_flag(study, capsys, argv, message):
    folder, model = study
    err = error_of(capsys, [model, "-o", folder / "out.h5", *argv])
    assert f"aimcemu run: error: {message}" in err


def test_a_value_from_the_config_file_names_the_file_and_an_override_the_flag(study, capsys):
    folder, model = study
    config = folder / "study.yaml"
    config.write_text("mapping: all\nchips: 0\nt: [0, 1h]\n")
    err = error_of(capsys, [model, "-o", folder / "out.h5", "--config", config])
    assert f"{config}: field 'chips'" in err
    err = error_of(capsys, [model, "-o", folder / "out.h5", "--config", config, "--chips", "-2"])
    assert "--chips: field 'chips'" in err


def test_too_many_times_name_where_the_times_came_from(study, capsys):
    # Was named after the chips' source: a config file's t blamed on --chips (or the reverse).
    folder, model = study
    config = folder / "study.yaml"
    config.write_text("mapping: all\nt: [" + ", ".join(str(k) for k in range(5000)) + "]\n")
    err = error_of(capsys, [model, "-o", folder / "out.h5", "--config", config, "--chips", "2"])
    assert f"{config}: field 't': 5000 times; at most" in err


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_missing_config_file_names_the_config_flag(tmp_path, capsys, command):
    missing = tmp_path / "nope.yaml"
    assert cli.main([command, "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"aimcemu {command}: error: --config: field 'config': YAML file not found: {missing}" in err
