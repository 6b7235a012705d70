"""The NIU's drift reference: what a run stores is what ran.

The NIU drifts every device from its programmed conductance (docs/niu_datapath.md section 3,
"Physics reference"); aihwkit's "reconverted" reference, the float64 models' default, needs a max
over the whole programmed layer, which a streaming unit cannot take.  So a noise config built for
the NIU (a run's placements, niu.compile_program with a config dict) gets "programmed" when it
names no drift_reference, and one that asks for "reconverted" is refused before any work, naming
the file or flag and the field.  The float64 reference keeps aihwkit's default.

The last test guards the class of defect: every noise parameter a run accepts must change the
NIU's output whenever it changes the float64 reference's (programmed) output, or be refused."""
from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, cli, niu, noise
from aimcemu.mapping import resolve_noise, resolve_noise_model
from conftest import digits_subset

IMAGES = 16
PCM_FAMILY = ("pcm_like", "hermes", "state_independent", "custom_drift_pcm")
# custom_drift_pcm has no default drift table: a small one inside [g_min, g_max].
REQUIRED = {"custom_drift_pcm": {"g_lst": [0.0, 10.0, 25.0], "nu_mean_lst": [0.08, 0.06, 0.05],
                                 "nu_std_lst": [0.03, 0.02, 0.01]}}
RECONVERTED_WHY = "runs only 'programmed'"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


def stored_config(path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


def test_float64_models_keep_aihwkit_default():
    for name in PCM_FAMILY:
        assert noise.noise_model_from_dict({"model": name, **REQUIRED.get(name, {})}).params["drift_reference"] \
            == "reconverted", name


def test_run_with_default_pcm_like_stores_programmed(digits, tmp_path):
    model, data, *_ = digits
    out = tmp_path / "run.h5"
    aimcemu.run(model, data, out, mapping="all", t=(0.0, 86400.0), threads=1)
    config = stored_config(out)
    aimc = [p for p in config["placements"].values() if p["device"] == "aimc"]
    assert aimc and all(p["noise"]["drift_reference"] == "programmed" for p in aimc)
    assert config["noise"]["drift_reference"] == "programmed"


def test_a_mapping_rule_without_drift_reference_stores_programmed(digits, tmp_path):
    model, data, *_ = digits
    out = tmp_path / "rule.h5"
    aimcemu.run(model, data, out, mapping={"default": "digital", "layers": {"head": {"noise": {"model": "hermes"}}}},
                threads=1)
    assert stored_config(out)["placements"]["head"]["noise"]["drift_reference"] == "programmed"


def test_run_api_refuses_reconverted_before_any_work(digits, tmp_path):
    model, data, *_ = digits
    out = tmp_path / "refused.h5"
    with pytest.raises(aimcemu.FormatError, match=r"field 'noise\.drift_reference': .*" + RECONVERTED_WHY):
        aimcemu.run(model, data, out, noise={"model": "pcm_like", "drift_reference": "reconverted"})
    # A model object carries its own (aihwkit) default: refused too, not silently run as programmed.
    with pytest.raises(aimcemu.FormatError, match=r"field 'noise\.drift_reference'"):
        aimcemu.run(model, data, out, noise=noise.PCMLikeNoiseModel())
    assert not out.exists()
    aimcemu.run(model, data, out, noise=noise.PCMLikeNoiseModel(drift_reference="programmed"), threads=1)
    assert stored_config(out)["noise"]["drift_reference"] == "programmed"


def test_cli_noise_flag_refuses_reconverted(digits, tmp_path, capsys):
    model, data, *_ = digits
    out = tmp_path / "cli.h5"
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out),
                     "--noise", "{model: hermes, drift_reference: reconverted}"]) == 2
    err = capsys.readouterr().err
    assert "--noise: field 'noise.drift_reference'" in err and RECONVERTED_WHY in err and "Traceback" not in err
    assert not out.exists()


def test_mapping_file_refuses_reconverted(digits, tmp_path, capsys):
    model, data, *_ = digits
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("default: digital\nlayers:\n  head: {noise: {model: pcm_like, drift_reference: reconverted}}\n")
    out = tmp_path / "map.h5"
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out),
                     "--mapping", os.fspath(mapping)]) == 2
    err = capsys.readouterr().err
    assert f"{mapping}: field 'layers.head.noise.drift_reference'" in err and RECONVERTED_WHY in err
    assert not out.exists()


def test_niu_compile_program_defaults_to_programmed_and_refuses_reconverted():
    weights = np.tile(np.arange(-127, 128, dtype=np.int8), 8)
    given = niu.apply(weights, {"model": "pcm_like"}, seed=2, t=86400.0)
    named = niu.apply(weights, {"model": "pcm_like", "drift_reference": "programmed"}, seed=2, t=86400.0)
    np.testing.assert_array_equal(given, named)
    with pytest.raises(aimcemu.FormatError, match=r"field 'drift_reference': .*" + RECONVERTED_WHY):
        niu.compile_program({"model": "pcm_like", "drift_reference": "reconverted"}, [weights])
    for model in (noise.PCMLikeNoiseModel(), noise.PCMLikeNoiseModel(drift_reference="reconverted")):
        with pytest.raises(aimcemu.FormatError, match=r"field 'drift_reference'"):
            niu.compile_program(model, [weights])
    # The core's own check (what the C++ compiler refuses, whatever the Python front end does).
    with pytest.raises(aimcemu.FormatError, match=r"<niu compiler>: field 'drift_reference'"):
        _core.niu.check_model(noise.PCMLikeNoiseModel().core_model)


# --- every accepted parameter is one the NIU follows ----------------------------------------------

def _other_values(row: dict, value):
    """Values of one parameter different from `value`: the other choices of a text field, else a
    moderate change (x 0.8) that stays inside the ranges the tables state."""
    if row["type"] == "text":
        choices = [c.strip(" '") for c in row["range"].removeprefix("one of ").split(",")]
        return [c for c in choices if c != value]
    if row["type"] == "whole":
        choices = [float(c) for c in row["range"].removeprefix("one of ").split(",")]
        return [c for c in choices if c != value]
    if row["type"] == "numbers":
        return [[v * 0.8 + 0.01 for v in value]]
    return [value * 0.8 if value else 0.02]


def _float64_read(config: dict, weights: np.ndarray, t: float) -> np.ndarray:
    model = noise.noise_model_from_dict(config)
    state = model.program(weights.astype(np.float64), seed=1, chip=0, layer=0)
    return np.asarray(model.read(state, t, round=0))


@pytest.mark.parametrize("name", PCM_FAMILY)
def test_every_accepted_noise_parameter_changes_the_niu_output(name):
    """A parameter that a run accepts and the NIU then ignores is the defect this guards against
    (drift_reference was one): changed one at a time, each must be refused or change the NIU's
    noisy weights whenever it changes the float64 reference's (parameters that only rescale
    conductances, such as g_max with a given prog_coeff_g_max_reference, change neither)."""
    weights = np.tile(np.arange(-127, 128, dtype=np.int8), 16)
    t = 86400.0
    base = resolve_noise({"model": name, **REQUIRED.get(name, {})})
    niu_base = niu.apply(weights, base, seed=1, t=t, threads=1)
    ref_base = _float64_read(base, weights, t)
    checked = 0
    for row in _core.noise.param_table(name):
        current = base.get(row["name"], row["default"])
        if current is None:
            continue
        for value in _other_values(row, current):
            changed = {**base, row["name"]: value}
            try:
                model = resolve_noise_model(changed)
            except aimcemu.FormatError:
                continue  # refused: the run cannot store a value that did not run
            niu_out = niu.apply(weights, model, seed=1, t=t, threads=1)
            ref_out = _float64_read(model.to_dict(), weights, t)
            reference_moved = not np.allclose(ref_out, ref_base, rtol=1e-9, atol=1e-9)
            niu_moved = not np.array_equal(niu_out, niu_base)
            assert niu_moved == reference_moved, f"{name}.{row['name']} = {value!r}: float64 reference " \
                f"{'changes' if reference_moved else 'unchanged'}, NIU {'changes' if niu_moved else 'unchanged'}"
            checked += 1
    assert checked >= 6  # the test exercised the model's noise parameters, not only refusals
