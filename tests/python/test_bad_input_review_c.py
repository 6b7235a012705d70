"""Bad input found by reliability review C (docs/reliability.md), each pinned where it was a
traceback, a TypeError or an error that did not name its file or field:

1. a lone surrogate ("\\ud800") as a noise model name, parameter name or string value;
2. grid values YAML or NumPy give that are not plain numbers, strings, lists or dicts;
3. a huge base-60 integer in a YAML file (PyYAML built it in quadratic time before it was refused);
4. full-disk errors that did not name the file (and the empty lock file they left);
5. a task file that is a symbolic link to another task's file;
6. a sweep folder whose `tasks` is not a folder.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import mapping, sweeps
from aimcemu.noise import PCMLikeNoiseModel, noise_model_from_dict
from hostile import assert_refused, tiny_files


@pytest.fixture
def folder(tmp_path):
    study = tmp_path / "study"
    tiny_files(study)
    return study


# --- 1. lone surrogates in noise configs --------------------------------------------------------
# (config, the field the error names); YAML's "\ud800" escape and a command-line byte that is not
# UTF-8 (os.fsdecode gives "\udcff") both arrive as lone surrogates.
SURROGATES = [
    ({"model": "\ud800"}, "field 'model': not valid UTF-8 (character U+D800"),
    ({"model": "pcm_like", "\udc00": 1.0}, "field '\\udc00': not valid UTF-8 (character U+DC00"),
    ({"model": "pcm_like", "drift_reference": "\ud800"}, "field 'drift_reference': not valid UTF-8"),
    ({"model": "pcm_like", "converter": "\udcff"}, "field 'converter': not valid UTF-8 (byte 0xff"),
]
IDS = ["model", "key", "drift_reference", "converter"]


@pytest.mark.parametrize("config, message", SURROGATES, ids=IDS)
def test_a_lone_surrogate_in_a_noise_config_is_named_from_python(config, message):
    with pytest.raises(aimcemu.FormatError, match="^noise config: " + _re(message)):
        noise_model_from_dict(config)
    with pytest.raises(aimcemu.FormatError, match="^<config>: field 'noise': noise config: " + _re(message)):
        mapping.resolve_noise_model(config)
    with pytest.raises(aimcemu.FormatError, match="field 'model': not valid UTF-8"):
        mapping.resolve_noise_model("\ud800")
    with pytest.raises(aimcemu.FormatError, match="field 'drift_reference': not valid UTF-8"):
        PCMLikeNoiseModel(drift_reference="\ud800")


def _re(text: str) -> str:
    import re
    return re.escape(text)


@pytest.mark.parametrize("config, message", SURROGATES, ids=IDS)
def test_a_lone_surrogate_in_a_noise_config_is_named_from_the_command_line(folder, capsys, config, message):
    noise = yaml.safe_dump(config, allow_unicode=False, default_flow_style=True).strip()
    assert_refused(["run", folder / "model.h5", "--noise", noise, "-o", folder / "out.h5"], folder, capsys,
                   "--noise: field 'noise': noise config: " + message)
    (folder / "run.yaml").write_text(yaml.safe_dump({"noise": config}, allow_unicode=False))
    assert_refused(["run", folder / "model.h5", "--config", folder / "run.yaml", "-o", folder / "out.h5"], folder,
                   capsys, "run.yaml", "noise config: " + message)
    # a mapping file's noise, and a sweep's noise and grid
    (folder / "map.yaml").write_text(yaml.safe_dump({"default": "aimc", "layers": {"conv": {"device": "aimc", "noise": config}}},
                                                  allow_unicode=False))
    assert_refused(["run", folder / "model.h5", "--mapping", folder / "map.yaml", "-o", folder / "out.h5"], folder,
                   capsys, "map.yaml", "noise config: " + message)
    sweep = {"output": str(folder / "sw"), "model": str(folder / "model.h5"), "mapping": "all", "t": [0.0]}
    (folder / "sweep.yaml").write_text(yaml.safe_dump({**sweep, "noise": config}, allow_unicode=False))
    assert_refused(["sweep", "--config", folder / "sweep.yaml", "--check"], folder, capsys, "noise config: " + message)
    (folder / "sweep.yaml").write_text(yaml.safe_dump({**sweep, "noise": "pcm_like", "grid": {"noise": [config]}},
                                                      allow_unicode=False))
    assert_refused(["sweep", "--config", folder / "sweep.yaml", "--check"], folder, capsys, "field 'grid.noise[0]",
                   "noise config: " + message)


def test_a_lone_surrogate_as_a_grid_parameter_is_named(tmp_path):
    config = {"output": str(tmp_path / "sw"), "noise": {"model": "pcm_like"}, "mapping": "all", "t": [0.0]}
    for grid, message in [({"noise.\udc00": [1.0]}, "field '\\udc00': not valid UTF-8"),
                          ({"noise.drift_reference": ["\ud800"]}, "field 'drift_reference': not valid UTF-8")]:
        with pytest.raises(aimcemu.FormatError, match=_re(message)):
            sweeps.plan({**config, "grid": grid})
