"""Hostile values in run options, YAML and on the command line: each is one clear FormatError
naming the source and the field (exit status 2 on the command line), never a traceback.

- integers a float cannot hold (>= 2^1024, about 1.8e308): float() raised OverflowError;
- aimcemu.run arguments of the wrong type (config=5, overwrite='no'): TypeErrors from deep inside;
- YAML syntax errors: PyYAML's several-line message naming '<unicode string>', now one line with
  the file (or flag), line and column;
- '--t -0' printed as -0, '--t 0,,1' read as [0, 1]; a key given twice under 'layers' was named
  'head' instead of 'layers.head';
- the --backend names appeared only in an error message, not in --help.
"""
from __future__ import annotations

import json
import math
import os
import re

import h5py
import numpy as np
import pytest

import aimcemu
import aimcemu.sweeps  # OTHER_CALL_SITES reaches it as an attribute
from aimcemu import FormatError, _core, cli
from aimcemu.commands.run import BACKENDS
from aimcemu.config import RunConfig, parse_times
from aimcemu.validate import as_float, number
from aimcemu.yamlfile import parse_yaml
from hostile import Snapshot, assert_refused, cli_run, tiny_files

HUGE = 10**309  # the first power of ten beyond the float range


def finite_float(value, source: str, field: str) -> float:
    """validate.number (a finite float) in as_float's argument order."""
    return number(value, field, source)


@pytest.fixture
def study(tmp_path, monkeypatch):
    model, _ = tiny_files(tmp_path / "study")
    monkeypatch.chdir(tmp_path)
    return model


# --- integers beyond the float range -----------------------------------------------------------------
@pytest.mark.parametrize("value", [HUGE, -HUGE, 10**400, 2**1024], ids=["1e309", "-1e309", "1e400", "2^1024"])
def test_floats_refuse_an_int_beyond_the_float_range(value):
    for convert in (as_float, finite_float):
        with pytest.raises(FormatError, match=r"^a\.yaml: field 'x': an integer of \d+ digits is beyond the range"):
            convert(value, "a.yaml", "x")


def test_floats_take_numbers_and_refuse_the_rest():
    assert finite_float(2**1023, "s", "f") == 2.0**1023 and as_float(np.int64(3), "s", "f") == 3.0
    assert math.isinf(as_float(float("inf"), "s", "f")) and math.isnan(as_float(float("nan"), "s", "f"))
    for bad in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(FormatError, match="field 'f': must be a finite number"):
            finite_float(bad, "s", "f")
    for bad in (True, np.bool_(False), "1", None, [1.0]):
        with pytest.raises(FormatError, match="field 'f': expected a number"):
            as_float(bad, "s", "f")


@pytest.mark.parametrize("options, field", [
    ({"t": [HUGE]}, "t"),
    ({"mapping": "all", "t": [0, 10**400]}, "t"),
    ({"peripherals": {"out_noise": HUGE}}, "peripherals.out_noise"),
    ({"peripherals": {"preset": "pcm", "out_bound": -HUGE}}, "peripherals.out_bound"),
    ({"peripherals": {"inp_res": HUGE}}, "peripherals.inp_res"),
])
def test_run_options_refuse_an_int_beyond_the_float_range(options, field):
    with pytest.raises(FormatError, match=rf"^<config>: field '{re.escape(field)}': an integer of"):
        RunConfig.resolve(options)


def test_a_yaml_config_with_a_huge_int_is_refused_on_the_command_line(study, tmp_path, capsys):
    config = tmp_path / "study.yaml"
    config.write_text(f"noise: pcm_like\nt: [0, {10**400}]\n")
    assert_refused(["run", study, "--config", config], tmp_path, capsys, f"{config}: field 't': an integer of 401 digits")
    config.write_text(f"peripherals: {{out_noise: {HUGE}}}\n")
    assert_refused(["run", study, "--config", config], tmp_path, capsys, "field 'peripherals.out_noise'")


def test_a_yaml_int_python_cannot_print_is_refused_with_its_line():
    for text in ("a: 1\nb: " + "7" * 5000, "a: 1\nb: 0b" + "1" * 5000):
        with pytest.raises(FormatError, match=r"^x\.yaml: field '<yaml>': an integer of \d+ characters \(line 2\)"):
            parse_yaml(text, "x.yaml")
    assert parse_yaml(f"a: {10**400}", "x.yaml") == {"a": 10**400}  # large, but printable: its field refuses it


# --- aimcemu.run argument types ----------------------------------------------------------------------
@pytest.mark.parametrize("arguments, message", [
    ({"config": 5}, "<arguments>: field 'config': expected a dict of run options or a YAML file path, got 5"),
    ({"config": [("chips", 2)]}, "<arguments>: field 'config': expected a dict"),
    ({"config": {1: 2}}, "<config>: field '1': option names are strings"),
    ({"overwrite": "no"}, "<arguments>: field 'overwrite': expected True or False, got 'no'"),
    ({"overwrite": None}, "<arguments>: field 'overwrite': expected True or False"),
    ({"progress": "yes"}, "<arguments>: field 'progress': expected True or False"),
])
def test_run_arguments_of_the_wrong_type_are_format_errors(study, tmp_path, arguments, message):
    snapshot = Snapshot(tmp_path)
    with pytest.raises(FormatError) as caught:
        aimcemu.run(study, output="out.h5", **arguments)
    assert str(caught.value).startswith(message)
    snapshot.assert_unchanged()


# --- YAML syntax errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, where", [
    ("noise: pcm_like\nt: [0, 1\nchips: 2\n", "(line 3, column 6; while parsing a flow sequence that starts at line 2, column 4)"),
    ("noise:\n  model: pcm_like\n bad: 1\n", "(line 3, column 2; while parsing a block mapping that starts at line 1, column 1)"),
    ("noise: 'pcm_like\n", "(line 2, column 1; while scanning a quoted scalar that starts at line 1, column 8)"),
    ("a: b: c\n", "(line 1, column 5)"),
])
def test_a_yaml_syntax_error_is_one_line_naming_the_file_line_and_column(study, tmp_path, capsys, text, where):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    code, err = cli_run(["run", study, "--config", config], capsys)
    assert code == 2
    line = err.strip()
    assert "\n" not in line and "unicode string" not in line and "Traceback" not in line
    assert f"{config}: field '<yaml>': " in line and line.endswith(where), line


def test_a_noise_snippet_syntax_error_names_the_flag(study, tmp_path, capsys):
    err = assert_refused(["run", study, "--noise", "{model: [pcm_like}"], tmp_path, capsys,
                         "--noise: field '<yaml>': ", "(line 1, column 18; while parsing a flow sequence")
    assert err.count("\n") == 1 and "unicode string" not in err


def test_a_control_character_is_named_by_its_position():
    with pytest.raises(FormatError, match=r"^x\.yaml: field '<yaml>': unacceptable character #x001f at character 4: "
                                          r"special characters are not allowed$"):
        parse_yaml("a: \x1f", "x.yaml")


# --- the command line's lists and names --------------------------------------------------------------
def test_minus_zero_is_zero(study, capsys):
    times = parse_times("-0")
    assert times == [0.0] and math.copysign(1.0, times[0]) == 1.0
    assert math.copysign(1.0, parse_times([-0.0])[0]) == 1.0
    assert math.copysign(1.0, RunConfig.resolve({"mapping": "all", "t": "-0,1h"}).options["t"][0]) == 1.0
    code = cli.main(["run", os.fspath(study), "--noise", "pcm_like", "--t", "-0", "-o", "run.h5"])
    out = capsys.readouterr().out
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.startswith("none "))
    assert row[1:3] == ["0", "0"], out  # the table's t and t [s] (printed "-0" before)
    with h5py.File("run.h5", "r") as f:
        assert [math.copysign(1.0, t) for t in json.loads(f.attrs["config"])["t"]] == [1.0]
        assert [math.copysign(1.0, t) for t in f["t"][()]] == [1.0]


@pytest.mark.parametrize("value", ["0,,1", "0,1,", ",0", "0, ,1"])
def test_an_empty_item_in_a_time_list_is_refused(study, tmp_path, capsys, value):
    assert_refused(["run", study, "--noise", "pcm_like", "--t", value, "-o", "run.h5"], tmp_path, capsys,
                   f"--t: field 't': {value!r} has an empty item")


@pytest.mark.parametrize("value", ["conv,,fc", "conv,"])
def test_an_empty_item_in_a_layer_list_is_refused(study, tmp_path, capsys, value):
    assert_refused(["run", study, "--layers", value, "-o", "run.h5"], tmp_path, capsys,
                   f"--layers: field 'layers': {value!r} has an empty item")


def test_a_key_twice_under_layers_is_named_by_its_path(study, tmp_path, capsys):
    mapping = tmp_path / "map.yaml"
    mapping.write_text("default: digital\nlayers:\n  head: aimc\n  head: digital\n")
    assert_refused(["run", study, "--mapping", mapping], tmp_path, capsys,
                   f"{mapping}: field 'layers.head': given twice in one mapping (lines 3 and 4)")
    with pytest.raises(FormatError, match=r"field 'grid\[1\]\.noise\.t0': given twice"):
        parse_yaml("grid:\n- {a: 1}\n- noise: {t0: 1, t0: 2}\n", "x.yaml")


def test_run_help_lists_the_backends(capsys):
    with pytest.raises(SystemExit):
        cli_run(["run", "--help"], capsys)
    help_text = " ".join(capsys.readouterr().out.split())
    assert "PU model kernel: fast, reference, cycle_sa" in help_text


def test_the_listed_backends_are_the_pu_models():
    """The list in the help is the PU model's: each name is taken, and the core's refusal lists
    exactly these names."""
    for name in BACKENDS:
        _core.check_backend(name, "<test>", "backend")
    with pytest.raises(FormatError) as caught:
        _core.check_backend("no_such_kernel", "<test>", "backend")
    listed = str(caught.value).rsplit("(expected ", 1)[1].rstrip(")")
    assert tuple(name.strip() for name in listed.split(",")) == BACKENDS


# Call sites that turned a user's number into a float with float(): each raised OverflowError
# (a traceback) before it adopted aimcemu.validate.as_float.
OTHER_CALL_SITES = {
    "noise/parameters.py core_value": lambda: aimcemu.mapping.resolve_noise({"model": "pcm_like", "t0": HUGE}),
    "noise/parameters.py _list_element": lambda: aimcemu.mapping.resolve_noise(
        {"model": "pcm_like", "prog_noise_scale": [HUGE]}),
    "sweeps.py validate_wait": lambda: aimcemu.sweeps.validate_wait(HUGE, "wait", "<sweep>"),
    "validate.py number": lambda: aimcemu.validate.number(HUGE, "percentile", "<arguments>"),
}


@pytest.mark.parametrize("site", sorted(OTHER_CALL_SITES))
def test_other_call_sites_refuse_an_int_beyond_the_float_range(site):
    with pytest.raises(FormatError, match="beyond the range of a float"):
        OTHER_CALL_SITES[site]()
