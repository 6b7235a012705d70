"""Tests added by the mutation check of the noise models (docs/testing_noise.md): each kills a
plausible mistake that no earlier test caught, asserting against aihwkit 1.2.0's own code.

The statistical comparison with aihwkit (test_noise_aihwkit.py) builds our model from aihwkit's
object (from_aihwkit), which passes every parameter explicitly: a wrong default in a C++
parameter table never reaches it.  A config that names only the model ({"model":
"state_independent"}) runs on those defaults, so they are compared with the defaults of
aihwkit's own classes here (exact: both are the same decimal constants).
"""
from __future__ import annotations

import pytest

from aimcemu import noise
from test_noise_aihwkit import ATTRS, CUSTOM_DRIFT, aihwkit  # noqa: F401  (aihwkit is a fixture)


def default_pairs(ai):
    """(our model name, our default object, aihwkit's default object) for every model aihwkit has."""
    return [
        ("pcm_like", noise.PCMLikeNoiseModel(), ai.PCMLikeNoiseModel()),
        ("custom_drift_pcm", noise.CustomDriftPCMLikeNoiseModel(CUSTOM_DRIFT), ai.CustomDriftPCMLikeNoiseModel(CUSTOM_DRIFT)),
        ("hermes", noise.HermesNoiseModel(), ai.HermesNoiseModel()),
        ("hermes", noise.HermesNoiseModel(num_devices=1), ai.HermesNoiseModel(num_devices=1)),
        ("state_independent", noise.StateIndependentNoiseModel(), ai.StateIndependentNoiseModel()),
        ("reram_wan2022", noise.ReRamWan2022NoiseModel(), ai.ReRamWan2022NoiseModel()),
        ("reram_cmo", noise.ReRamCMONoiseModel(), ai.ReRamCMONoiseModel()),
    ]


def test_default_parameters_are_aihwkits_defaults(aihwkit):  # noqa: F811
    ai, _ = aihwkit
    for name, ours, theirs in default_pairs(ai):
        params = ours.params
        for mine, their_attr in ATTRS[name].items():
            assert params[mine] == pytest.approx(getattr(theirs, their_attr), rel=1e-12), (name, mine)
        assert params["g_max"] == theirs.g_converter.g_max and params["g_min"] == theirs.g_converter.g_min, name
