"""Device noise models for analog in-memory computing (the float64 statistical reference).

Organised as aihwkit's ``inference`` package: ``aimcemu.noise.models`` (the device models),
``aimcemu.noise.converters`` (weights to conductances), ``aimcemu.noise.compensation`` (drift
compensation) and ``aimcemu.noise.parameters`` (each model's parameter table, declared once in
the C++ core), ``aimcemu.noise.aihwkit_interop``
(conversion to and from aihwkit's objects).  Every public name is also here.

Each model is an object holding its parameters.  ``program`` maps a NumPy weight array to the
devices of one chip (programming noise and drift exponents are drawn once per chip);
``read`` returns the weights read back ``t`` seconds after programming, with fresh read noise
for every ``round``::

    from aimcemu.noise import PCMLikeNoiseModel, GlobalDriftCompensation
    model = PCMLikeNoiseModel()                       # aihwkit defaults, g_max = 25 uS
    state = model.program(weights, seed=1, chip=0, layer=3)
    w_1h = model.read(state, t=3600.0, round=0)       # same chip, any t, any round
    w_1d = model.read(state, t=86400.0, round=1)      # drifts from the same programmed state

    comp = GlobalDriftCompensation()
    baseline = comp.baseline(model, state)
    w_fixed = comp.apply(comp.alpha(baseline, w_1d), w_1d)

Every random draw is keyed by (seed, chip, layer, device index, round), so results are
bit-identical for any thread count.  Configs round-trip through ``to_dict`` / ``from_dict``::

    cfg = model.to_dict()            # {"model": "pcm_like", "g_max": 25.0, ...}
    same = noise_model_from_dict(cfg)

Weights: axis 0 is the output channel (the PU's N, or torch's out_features / out_channels);
per-column drift compensation computes one factor per output channel.  Formulas, defaults,
sources and every difference from IBM aihwkit are in docs/noise_models.md.
"""
from __future__ import annotations

from .compensation import (READOUT_FLOOR, DriftCompensation, GlobalDriftCompensation,
                           GlobalDriftCompensationWithExactReference, PerColumnDriftCompensation,
                           drift_compensation_from_dict)
from .converters import (ConductanceConverter, DualPairConductanceConverter, NPairConductanceConverter,
                         SingleDeviceConductanceConverter, SinglePairConductanceConverter, converter_from_dict)
from .models import (CustomDriftPCMLikeNoiseModel, GenericNoiseModel, HermesNoiseModel, LayerState, NoiseModel,
                     PCMFamilyNoiseModel, PCMLikeNoiseModel, ReRamCMONoiseModel, ReRamWan2022NoiseModel,
                     StateIndependentNoiseModel, noise_model_from_dict, noise_model_names)
from .aihwkit_interop import AihwkitConversionError, from_aihwkit, to_aihwkit

__all__ = [
    "LayerState",
    "ConductanceConverter", "SinglePairConductanceConverter", "NPairConductanceConverter",
    "DualPairConductanceConverter", "SingleDeviceConductanceConverter", "converter_from_dict",
    "NoiseModel", "PCMFamilyNoiseModel", "PCMLikeNoiseModel", "HermesNoiseModel", "StateIndependentNoiseModel",
    "CustomDriftPCMLikeNoiseModel", "ReRamWan2022NoiseModel", "ReRamCMONoiseModel", "GenericNoiseModel",
    "noise_model_from_dict", "noise_model_names",
    "DriftCompensation", "GlobalDriftCompensation", "PerColumnDriftCompensation",
    "GlobalDriftCompensationWithExactReference", "drift_compensation_from_dict", "READOUT_FLOOR",
    "from_aihwkit", "to_aihwkit", "AihwkitConversionError",
]
