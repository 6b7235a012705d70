"""Drift compensation, as aihwkit's ``inference.compensation.drift``.

A one-hot (identity) readout of a layer gives its mean |W| (per layer or per output channel);
alpha = baseline / readout(t) rescales the drifted layer.  Readouts are floored at
READOUT_FLOOR, the core's value (noise_models/compensation.hpp); aimcemu.run's global
compensation uses the same floor.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np

from .. import _core
from .models import LayerState, NoiseModel

_noise = _core.noise

__all__ = ["DriftCompensation", "GlobalDriftCompensation", "PerColumnDriftCompensation",
           "GlobalDriftCompensationWithExactReference", "drift_compensation_from_dict", "READOUT_FLOOR"]

READOUT_FLOOR: float = _noise.READOUT_FLOOR


class DriftCompensation:
    """aihwkit-style drift compensation from a one-hot (identity) readout of the layer.

    baseline(model, state): readout of the programmed weights (or of the clean weights when
    exact_reference); alpha(baseline, w_read) = baseline / readout(w_read); apply scales the
    weights (equivalently the layer's outputs) by alpha.
    """

    kind: ClassVar[str] = ""

    def __init__(self, exact_reference: bool = False) -> None:
        # bool("false") is True: only a real boolean says what was meant.
        if not isinstance(exact_reference, (bool, np.bool_)):
            raise _core.FormatError(f"drift compensation: field 'exact_reference': expected a boolean (true/false), "
                                    f"got {exact_reference!r}")
        self._core = _noise.DriftCompensation(self.kind, bool(exact_reference))

    @property
    def exact_reference(self) -> bool:
        return self._core.exact_reference

    def baseline(self, model: NoiseModel, state: LayerState) -> np.ndarray:
        return self._core.baseline(model.core_model, state)

    def alpha(self, baseline: np.ndarray, read_weights: np.ndarray) -> np.ndarray:
        return self._core.alpha(np.asarray(baseline, dtype=np.float64), np.asarray(read_weights, dtype=np.float64))

    def apply(self, alpha: np.ndarray, read_weights: np.ndarray) -> np.ndarray:
        return self._core.apply(np.asarray(alpha, dtype=np.float64), np.asarray(read_weights, dtype=np.float64))

    def to_dict(self) -> dict:
        return {"compensation": self.kind, "exact_reference": self.exact_reference}

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "DriftCompensation":
        return drift_compensation_from_dict(config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exact_reference={self.exact_reference})"


class GlobalDriftCompensation(DriftCompensation):
    """One factor per layer: alpha = mean|W_baseline| / mean|W_read| (each floored at READOUT_FLOOR)."""

    kind = "global"


class PerColumnDriftCompensation(DriftCompensation):
    """One factor per output channel (axis 0): alpha[n] = mean_m|W_baseline[n]| / mean_m|W_read[n]|."""

    kind = "per_column"


def GlobalDriftCompensationWithExactReference() -> GlobalDriftCompensation:
    """Global compensation whose baseline is the clean weights (aihwkit's class of that name)."""
    return GlobalDriftCompensation(exact_reference=True)


def drift_compensation_from_dict(config: Mapping[str, Any]) -> DriftCompensation:
    kinds = {c.kind: c for c in (GlobalDriftCompensation, PerColumnDriftCompensation)}
    if not isinstance(config, Mapping):
        raise _core.FormatError(f"drift compensation: field 'compensation': expected a dict "
                                f"{{'compensation': kind, 'exact_reference': bool}}, got {type(config).__name__}")
    kind = config.get("compensation")
    if not isinstance(kind, str) or kind not in kinds:
        raise _core.FormatError(f"drift compensation: field 'compensation': unknown kind {kind!r} "
                                f"(known: {', '.join(kinds)})")
    unknown = set(config) - {"compensation", "exact_reference"}
    if unknown:
        raise _core.FormatError(f"drift compensation: field '{sorted(unknown)[0]}': unknown parameter")
    return kinds[kind](exact_reference=config.get("exact_reference", False))
