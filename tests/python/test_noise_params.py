"""Parameters declared once per noise model: the core's table drives the config round trip, the
Python constructors and docstrings, the checks on bad values, and docs/noise_models.md.

The tables are read from the core; what each test checks against them is independent of how
the Python side uses them (the signature, the docstring text, the document's text, the errors
the core raises)."""
from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import pytest

import aimcemu
from aimcemu import noise
from aimcemu.noise import parameters

DOC = Path(__file__).resolve().parents[2] / "docs" / "noise_models.md"
CUSTOM_DRIFT = {"g_lst": [0.0, 10.0, 25.0], "nu_mean_lst": [0.1, 0.06, 0.05], "nu_std_lst": [0.04, 0.02, 0.01]}
CLASSES = {cls.model: cls for cls in (noise.PCMLikeNoiseModel, noise.HermesNoiseModel, noise.StateIndependentNoiseModel,
                                      noise.CustomDriftPCMLikeNoiseModel, noise.ReRamWan2022NoiseModel,
                                      noise.ReRamCMONoiseModel, noise.GenericNoiseModel)}


def minimal_config(name: str) -> dict:
    """The smallest valid config of a model (custom_drift_pcm needs its table)."""
    return {"model": name, **(CUSTOM_DRIFT if name == "custom_drift_pcm" else {})}


def test_every_core_model_has_a_class():
    assert sorted(CLASSES) == sorted(noise.noise_model_names())


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_to_dict_holds_exactly_the_applicable_table_parameters_with_their_defaults(name):
    rows = parameters.table(name)
    config = noise.noise_model_from_dict(minimal_config(name)).to_dict()
    applicable = {row["name"] for row in rows if not row["applies"]}  # pair_factors needs the n_pair converter
    assert set(config) - {"model"} == applicable
    for row in rows:
        if row["default"] is not None and row["name"] in config:
            expected = row["default"]
            assert config[row["name"]] == (int(expected) if row["type"] == "whole" else expected), row["name"]


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_constructor_signature_and_docstring_follow_the_table(name):
    cls, rows = CLASSES[name], parameters.table(name)
    shown = list(inspect.signature(cls).parameters)
    if name == "custom_drift_pcm":  # its tables come packed in one aihwkit-style argument
        assert shown[:2] == ["custom_drift_model", "converter"]
    else:
        assert shown == [row["name"] for row in rows]
    for row in rows:
        assert re.search(rf"^\s+{row['name']}( \[\w+\])?: ", cls.__doc__, re.MULTILINE), row["name"]


def test_positional_arguments_keep_their_order():
    # aihwkit's order: prog_coeff, g_converter, g_max, t_read, t_0, ...
    model = noise.PCMLikeNoiseModel([0.2, 1.0, -1.0], None, 30.0, 1e-6, 10.0)
    assert (model.params["prog_coeff"], model.params["g_max"], model.params["t_read"], model.params["t0"]) == \
        ([0.2, 1.0, -1.0], 30.0, 1e-6, 10.0)
    assert noise.HermesNoiseModel(1).params["num_devices"] == 1
    assert noise.GenericNoiseModel(0.01, 0.02).params["prog_multiplicative"] == 0.02
    with pytest.raises(TypeError):
        noise.HermesNoiseModel(1, num_devices=2)


def test_positional_arguments_that_would_bind_to_another_field_than_in_aihwkit_are_refused():
    # HermesNoiseModel(None, None, 1) gave 2 devices at g_max 1 uS (aihwkit: 1 device, 10.35 uS);
    # ReRamWan2022NoiseModel(None, None, 30.0) gave prog_noise_scale 30 (aihwkit: g_max 30).
    table = {"g_lst": [0.0, 25.0], "nu_mean_lst": [0.1, 0.05], "nu_std_lst": [0.03, 0.01]}
    for call in (lambda: noise.HermesNoiseModel(None, None, 1), lambda: noise.HermesNoiseModel(2, None),
                 lambda: noise.ReRamWan2022NoiseModel(None, None, 30.0), lambda: noise.StateIndependentNoiseModel(None),
                 lambda: noise.ReRamCMONoiseModel(None, 30.0), lambda: noise.CustomDriftPCMLikeNoiseModel(table, [0.1])):
        with pytest.raises(TypeError, match="positional"):
            call()
    assert noise.CustomDriftPCMLikeNoiseModel(table).params["g_lst"] == table["g_lst"]
    kinds = {name: [p.kind for p in inspect.signature(cls).parameters.values()] for name, cls in CLASSES.items()}
    assert kinds["hermes"][0] == inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert set(kinds["hermes"][1:]) == {inspect.Parameter.KEYWORD_ONLY}
    for name in ("state_independent", "reram_wan2022", "reram_cmo"):
        assert set(kinds[name]) == {inspect.Parameter.KEYWORD_ONLY}, name
    assert set(kinds["generic"]) == {inspect.Parameter.POSITIONAL_OR_KEYWORD}   # no aihwkit twin
    assert set(kinds["pcm_like"][:9]) == {inspect.Parameter.POSITIONAL_OR_KEYWORD}   # aihwkit's nine
    assert set(kinds["pcm_like"][9:]) == {inspect.Parameter.KEYWORD_ONLY}


def _violations(row: dict) -> list:
    """Values the row's declared range or type rejects (a bound given in words, one derived from
    other parameters, is tested by its own test)."""
    bad = []
    lower = row["range"].split(" and ")[0]  # "> 0 and <= <a derived bound>"
    if row["type"] in ("number", "whole"):
        bad += ["text", math.inf]
        if lower.startswith(">= "):
            bad.append(float(lower[3:]) - 0.5)
        if lower.startswith("> "):
            bad.append(float(lower[2:]))
        if row["range"].startswith("[") and row["range"].endswith("]"):
            low, high = (float(v) for v in row["range"][1:-1].split(","))
            bad += [low - 0.5, high + 0.5]
        if row["range"].startswith("one of "):
            bad.append(max(float(v) for v in row["range"][7:].split(",")) + 7.0)
        if row["type"] == "whole":
            bad.append(2.5)
    elif row["type"] == "numbers":
        bad += [1.0, "text"]
        if row["range"].startswith(">"):
            bad.append([-1.0])
    else:
        bad += [1.0, "no_such_value"] if row["range"].startswith("one of") else [1.0]
    return bad


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_the_core_rejects_every_value_outside_the_declared_range_naming_the_field(name):
    checked = 0
    for row in parameters.table(name):
        for value in _violations(row):
            config = {**minimal_config(name), row["name"]: value}
            if row["applies"]:
                config["converter"] = "n_pair"
            with pytest.raises(aimcemu.FormatError, match=f"field '{row['name']}'"):
                noise.noise_model_from_dict(config)
            checked += 1
    assert checked >= 2 * len(parameters.table(name))


def test_a_parameter_given_where_it_does_not_apply_is_an_error():
    with pytest.raises(aimcemu.FormatError, match="field 'pair_factors': applies only with converter 'n_pair'"):
        noise.noise_model_from_dict({"model": "pcm_like", "pair_factors": [1.0, 2.0]})


@pytest.mark.parametrize("kind", ["single_pair", "single_device"])
def test_a_converter_config_refuses_pair_factors_without_n_pair(kind):
    """pair_factors means something only to an N-pair converter; a one-pair or one-device config
    that carries them is refused by the converter table, naming the source and the field (it
    was a TypeError from the constructor, naming neither)."""
    with pytest.raises(aimcemu.FormatError,
                       match=r"^converter: field 'pair_factors': applies only with converter 'n_pair'"):
        noise.converter_from_dict({"converter": kind, "pair_factors": [1.0, 3.0]})
    # the same fields with n_pair are taken
    assert noise.converter_from_dict({"converter": "n_pair", "pair_factors": [1.0, 3.0]}).to_dict()["pair_factors"] == [1.0, 3.0]


def test_a_converter_config_refuses_a_field_no_converter_has():
    """A misspelt field was ignored (g_max stayed 25 for {"g_maxx": 30}); a noise model's flat
    config, which carries its own fields beside the converter's, still gives its converter."""
    with pytest.raises(aimcemu.FormatError, match=r"^converter: field 'g_maxx': not a converter field"):
        noise.converter_from_dict({"converter": "single_pair", "g_maxx": 30.0})
    with pytest.raises(aimcemu.FormatError, match=r"field 'prog_noise_scale'"):
        noise.ConductanceConverter.from_dict({"g_max": 30.0, "prog_noise_scale": 2.0})
    model = noise.noise_model_from_dict({"model": "pcm_like", "g_max": 30.0, "prog_noise_scale": 2.0})
    assert model.converter.g_max == 30.0


def test_derived_defaults_follow_the_parameters_they_depend_on():
    assert noise.HermesNoiseModel(num_devices=1).params["g_max"] == 10.35
    assert noise.HermesNoiseModel(num_devices=1).params["t0"] == 200.0
    assert noise.StateIndependentNoiseModel(g_max=40.0).params["read_q"] == 1.0 / 40.0
    assert noise.ReRamWan2022NoiseModel(g_max=30.0).params["coeff_g_max_reference"] == 30.0
    assert noise.SingleDeviceConductanceConverter().to_dict() == {"converter": "single_device", "g_max": 88.199997,
                                                                  "g_min": 9.0}


def test_a_bound_that_follows_earlier_parameters_is_declared_in_the_table():
    """hermes' g_max is at most its fit's (20.7 uS; with one device 10.35): a bound that depends on
    num_devices, which the model alone checked, so that neither docs/noise_models.md nor the
    docstring showed it.  The table declares it now (a derived bound), and enforces it, naming
    the field and the bound that applies."""
    row = next(r for r in parameters.table("hermes") if r["name"] == "g_max")
    assert row["range"] == "> 0 and <= the fit's range end, 20.7 (num_devices 1: 10.35)"
    assert f"g_max [uS]: largest programmable conductance (default 20.7 (num_devices 1: 10.35); {row['range']})" \
        in noise.HermesNoiseModel.__doc__
    for devices, limit in ((2, 20.7), (1, 10.35)):
        assert noise.HermesNoiseModel(num_devices=devices, g_max=limit).params["g_max"] == limit
        with pytest.raises(aimcemu.FormatError, match=rf"field 'g_max': must be finite and \(0, {limit}\] \(<= the fit's"):
            noise.HermesNoiseModel(num_devices=devices, g_max=math.nextafter(limit, 100.0))


def test_the_document_holds_the_generated_parameter_tables():
    text = DOC.read_text()
    begin, end = text.find(parameters.DOC_BEGIN), text.find(parameters.DOC_END)
    assert begin >= 0 and end > begin, f"{DOC.name} lacks the generated section's markers"
    assert text[begin:end + len(parameters.DOC_END)] == parameters.documentation(), (
        f"{DOC.name}'s parameter tables differ from the core's: regenerate them with scripts/gen_noise_docs.py")
