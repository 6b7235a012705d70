"""Conductance converters: how a layer's weights map to device conductances (uS) and back.

As aihwkit's ``inference.converter.conductance``.  Defaults and ranges come from the core's
converter table (``parameters.converter_table()``); formulas are in docs/noise_models.md.
"""
from __future__ import annotations

import inspect
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from .. import _core
from . import parameters

_noise = _core.noise

__all__ = ["ConductanceConverter", "SinglePairConductanceConverter", "NPairConductanceConverter",
           "DualPairConductanceConverter", "SingleDeviceConductanceConverter", "converter_from_dict"]


class ConductanceConverter:
    """Maps a layer's weights to device conductances (uS) and back; see docs/noise_models.md."""

    kind: ClassVar[str] = ""
    aliases: ClassVar[dict[str, str]] = {}   # constructor argument -> table name (aihwkit's names)

    def __init__(self, **params: Any) -> None:
        given = {k: parameters.core_value(k, v) for k, v in params.items() if v is not None}
        self._params = dict(_noise.converter_params({"converter": self.kind, **given}))  # validates, fills defaults

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            _describe(cls, cls.kind, cls.aliases)

    @property
    def g_max(self) -> float:
        return self._params["g_max"]

    @property
    def g_min(self) -> float:
        return self._params["g_min"]

    def to_dict(self) -> dict:
        return dict(self._params)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "ConductanceConverter":
        return converter_from_dict(config)

    def convert_to_conductances(self, weights: np.ndarray) -> tuple[np.ndarray, dict]:
        """Conductances with a trailing device axis, and the fit needed to convert back."""
        return _noise.convert_to_conductances(self._params, np.asarray(weights, dtype=np.float64))

    def convert_back_to_weights(self, conductances: np.ndarray, fit: Mapping[str, float]) -> np.ndarray:
        return _noise.convert_back_to_weights(self._params, np.asarray(conductances, dtype=np.float64), dict(fit))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._params})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConductanceConverter) and self._params == other._params


def _describe(target, kind: str, aliases: Mapping[str, str]) -> None:
    """The constructor's shown signature and the docstring's parameter section, from the
    converter table with this kind's defaults; aliased arguments (aihwkit's f_lst) come first."""
    defaults = dict(_noise.converter_params({"converter": kind}))
    python_name = {table_name: name for name, table_name in aliases.items()}
    rows = [{**row, "name": python_name.get(row["name"], row["name"]), "default": defaults[row["name"]],
             "default_text": parameters.format_value(defaults[row["name"]]), "applies": ""}
            for row in parameters.converter_table() if row["name"] != "converter" and row["name"] in defaults]
    rows.sort(key=lambda row: row["name"] not in aliases)
    shown = parameters.signature(rows)
    if isinstance(target, type):
        target.__init__.__signature__ = shown
    else:  # a factory function: no self
        target.__signature__ = shown.replace(parameters=list(shown.parameters.values())[1:])
    target.__doc__ = f"{inspect.cleandoc(target.__doc__ or '')}\n\n{parameters.docstring_section(rows)}"


class SinglePairConductanceConverter(ConductanceConverter):
    """One differential pair (g+, g-): the layer's abs-max maps to g_max (aihwkit's single pair)."""

    kind = "single_pair"

    def __init__(self, g_max: float | None = None, g_min: float | None = None) -> None:
        super().__init__(g_max=g_max, g_min=g_min)


class NPairConductanceConverter(ConductanceConverter):
    """N pairs of significance f_k, the lowest-significance pair filled first (aihwkit's N pair)."""

    kind = "n_pair"
    aliases = {"f_lst": "pair_factors"}

    def __init__(self, f_lst: Sequence[float] | None = None, g_max: float | None = None,
                 g_min: float | None = None) -> None:
        super().__init__(pair_factors=None if f_lst is None else list(f_lst), g_max=g_max, g_min=g_min)


class SingleDeviceConductanceConverter(ConductanceConverter):
    """One device per weight; [min W, max W] maps affinely onto [g_min, g_max] (ReRAM CMO)."""

    kind = "single_device"

    def __init__(self, g_max: float | None = None, g_min: float | None = None) -> None:
        super().__init__(g_max=g_max, g_min=g_min)


def DualPairConductanceConverter(f_lst: Sequence[float] | None = None, g_max: float | None = None,
                                 g_min: float | None = None) -> NPairConductanceConverter:
    """Two pairs (aihwkit's DualPairConductanceConverter): an N-pair converter with two factors."""
    if f_lst is not None and len(f_lst) != 2:
        raise _core.FormatError("converter 'dual_pair': field 'f_lst': needs exactly two factors")
    return NPairConductanceConverter(f_lst, g_max, g_min)


_describe(DualPairConductanceConverter, "n_pair", NPairConductanceConverter.aliases)

_CONVERTERS = {c.kind: c for c in (SinglePairConductanceConverter, NPairConductanceConverter,
                                   SingleDeviceConductanceConverter)}


def converter_from_dict(config: Mapping[str, Any], *, other_keys_allowed: bool = False) -> ConductanceConverter:
    """A converter from {"converter": kind, "g_max", "g_min", "pair_factors"}.  Any other key is a
    FormatError naming it (a misspelt "g_maxx" would otherwise leave g_max at its default),
    unless `other_keys_allowed`: a noise model's flat config carries the converter's fields
    beside its own, and takes its converter from there."""
    kind = config.get("converter", "single_pair")
    if kind not in _CONVERTERS:
        raise _core.FormatError(f"noise config: field 'converter': unknown converter {kind!r} "
                                f"(known: {', '.join(_CONVERTERS)})")
    names = {row["name"] for row in parameters.converter_table()} - {"converter"}
    if not other_keys_allowed:
        for key in config:
            if key != "converter" and key not in names:
                raise _core.FormatError(f"converter: field {key!r}: not a converter field "
                                        f"(known: converter, {', '.join(sorted(names))})")
    params = {k: v for k, v in config.items() if k in names}
    # Fields by their table names, checked by the core's converter table, the one place that
    # knows which field applies to which kind: `pair_factors` with a single pair or a single
    # device is a FormatError naming it, not a Python TypeError from the kind's constructor.
    cls = _CONVERTERS[kind]
    converter = cls.__new__(cls)
    ConductanceConverter.__init__(converter, **params)
    return converter
