"""A sweep folder that cannot be created is refused before any work, by `--check` too (which
creates nothing), naming where the path came from (`--output`, the config file, the `output`
argument) and the field 'output'.  Before, `-o /proc/x` ended in a bare "[Errno 2] No such
file or directory: '/proc/x'" and `--check` accepted it."""
from __future__ import annotations

import os

import pytest
import yaml

import aimcemu
from hostile import assert_refused, tiny_files


@pytest.fixture
def study(tmp_path):
    model, data = tiny_files(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
                                    "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}))
    return tmp_path


@pytest.mark.parametrize("check", [[], ["--check"]])
def test_an_output_flag_that_cannot_be_created_names_the_flag(study, capsys, check):
    config = study / "sweep.yaml"
    assert_refused(["sweep", "-c", config, "-o", "/proc/aimcemu-sweep", *check], study, capsys,
                   "--output: field 'output': cannot create folder /proc/aimcemu-sweep")
    assert_refused(["sweep", "-c", config, "-o", study / "model.h5" / "sweep", *check], study, capsys,
                   "--output: field 'output'", f"{study / 'model.h5'} is not a folder")
    assert not os.path.exists("/proc/aimcemu-sweep")


@pytest.mark.parametrize("check", [[], ["--check"]])
def test_a_config_output_that_cannot_be_created_names_the_config_file(study, capsys, check):
    config = study / "sweep.yaml"
    config.write_text(config.read_text().replace(str(study / "sweep"), "/proc/aimcemu-sweep"))
    assert_refused(["sweep", "-c", config, *check], study, capsys,
                   f"{config}: field 'output': cannot create folder /proc/aimcemu-sweep")


def test_check_creates_no_folder(study, capsys):
    from aimcemu import cli

    assert cli.main(["sweep", "-c", str(study / "sweep.yaml"), "-o", str(study / "new" / "sweep"), "--check"]) == 0
    assert not (study / "new").exists() and not list(study.glob(".aimcemu-probe-*"))


def test_the_output_argument_is_named_in_python(study):
    config = yaml.safe_load((study / "sweep.yaml").read_text())
    with pytest.raises(aimcemu.FormatError, match=r"^<arguments>: field 'output': cannot create folder /proc/aimcemu-sweep"):
        aimcemu.sweep(config, "/proc/aimcemu-sweep", progress=False)
