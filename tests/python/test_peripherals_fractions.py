"""Resolutions written as fractions ("1/64") are taken in YAML and dicts as on the command line,
and the examples of docs/peripherals.md resolve on the embedded model as written there.

Was: `--peripherals out_res=1/64` parsed the fraction, but `out_res: 1/64` in YAML (where it is a
string) and the sweep grid `[1/16, 1/64, 1/256]` were refused with "expected a number", and the
docs' example named layers (fc1, conv1) that the embedded model lacks."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

import aimcemu
from aimcemu import peripherals as periph

DOCS = Path(__file__).resolve().parents[2] / "docs" / "peripherals.md"
sweeps = importlib.import_module("aimcemu.sweeps")


def docs_yaml_block() -> dict:
    """The run config example of docs/peripherals.md (the first ```yaml block)."""
    block = re.search(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    assert block, "docs/peripherals.md has no yaml example"
    return yaml.safe_load(block.group(1))


def embedded_net():
    from aimcemu import modelfile

    try:
        model, _ = modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    return modelfile.load_model(model)


@pytest.mark.parametrize("key, text, steps", [("out_res", "1/64", 64), ("inp_res", "1/126", 126),
                                              ("out_res", "510", 510), ("inp_res", " 1 / 254 ", 254)])
def test_a_fraction_in_a_dict_is_the_same_as_on_the_command_line(key, text, steps):
    from_dict = periph.resolve({key: text, "out_bound": 10})
    from_cli = periph.resolve(f"{key}={text.strip()},out_bound=10")
    assert from_dict == from_cli
    assert periph.core_settings(from_dict)[key.replace("_res", "_steps")] == steps


@pytest.mark.parametrize("text", ["1/0", "one/64", "1/", "/64", "1/64/2"])
def test_a_fraction_that_is_not_a_number_names_the_source_and_the_field(text):
    with pytest.raises(aimcemu.FormatError, match=r"^study\.yaml: field 'peripherals\.out_res': expected a number"):
        periph.resolve({"out_res": text, "out_bound": 10}, "study.yaml")


def test_other_settings_still_take_numbers_only():
    with pytest.raises(aimcemu.FormatError, match=r"field 'peripherals\.out_bound': expected a number, got '10'"):
        periph.resolve({"out_bound": "10"}, "study.yaml")


def test_the_docs_run_config_resolves_on_the_embedded_model():
    net = embedded_net()
    config = aimcemu.config.RunConfig.resolve(docs_yaml_block(), source="peripherals.md")
    placements = {p.name: p for p in config.placements(net)}
    assert placements["classifier"].peripherals["out_res"] == 1 / 64
    assert placements["classifier"].peripherals["out_noise"] == periph.AIHWKIT_DEFAULT["out_noise"]
    assert placements["stem"].is_aimc and placements["stem"].peripherals is None
    assert placements["head"].peripherals["out_noise"] == 0.02   # the default: pcm with out_noise 0.02


def test_the_docs_sweep_grid_of_fractions_plans(tmp_path):
    grid = re.search(r"`grid: (\{peripherals\.out_res: \[[^`]*\]\})`", DOCS.read_text())
    assert grid, "docs/peripherals.md has no peripherals.out_res grid example"
    config = {"output": str(tmp_path / "psw"), "mapping": "all", "peripherals": {"out_bound": 10},
              "grid": yaml.safe_load(grid.group(1))}
    plan = sweeps.plan(config)
    steps = [periph.core_settings(t.config.peripherals)["out_steps"] for t in plan.tasks]
    assert steps == [16, 64, 256]
    assert plan.axes == {"peripherals.out_res": ["1/16", "1/64", "1/256"]}
