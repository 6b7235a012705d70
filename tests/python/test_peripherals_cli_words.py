"""The CLI form of peripherals ("pcm,noise_management=none"): "none" is a value of the word-valued
settings (noise_management, bound_management), and "no value" (ideal) only for numeric ones."""
from __future__ import annotations

import json
import os

import h5py
import pytest

import aimcemu
from aimcemu import cli, peripherals as periph
from conftest import digits_subset


def test_word_settings_keep_none_as_their_value():
    assert periph.parse_cli("pcm,noise_management=none") == {"preset": "pcm", "noise_management": "none"}
    assert periph.parse_cli("bound_management=none") == {"bound_management": "none"}
    resolved = periph.resolve("pcm,noise_management=none,bound_management=none")
    assert resolved["noise_management"] == "none" and resolved["bound_management"] == "none"
    assert resolved["out_bound"] == 10.0  # the preset's other settings stay


def test_numeric_settings_still_read_none_as_ideal():
    assert periph.parse_cli("pcm,out_res=none,out_bound=null") == {"preset": "pcm", "out_res": None, "out_bound": None}
    resolved = periph.resolve("pcm,out_res=none")
    assert resolved["out_res"] is None and periph.core_settings(resolved)["out_steps"] == 0


def test_a_word_setting_without_a_valid_word_is_named():
    with pytest.raises(aimcemu.FormatError, match=r"--peripherals: field 'peripherals.noise_management': "
                                                  r"expected one of abs_max, none, got ''"):
        periph.resolve(periph.parse_cli("noise_management=", "--peripherals", "peripherals"), "--peripherals")


def test_cli_run_takes_noise_management_none(tmp_path_factory, tmp_path):
    model, data, *_ = digits_subset(tmp_path_factory, 8)
    out = tmp_path / "nm.h5"
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out), "--peripherals",
                     "pcm,noise_management=none,bound_management=none", "--threads", "1"]) == 0
    with h5py.File(out) as f:
        stored = json.loads(f.attrs["config"])["peripherals"]
    assert stored["noise_management"] == "none" and stored["bound_management"] == "none"
