"""Conversion between IBM aihwkit's inference noise objects and aimcemu's noise models.

    from aimcemu.noise import from_aihwkit, to_aihwkit
    model = from_aihwkit(rpu_config.noise_model)          # aihwkit -> aimcemu.noise.NoiseModel
    comp = from_aihwkit(rpu_config.drift_compensation)    # -> DriftCompensation
    back = to_aihwkit(model)                              # needs aihwkit importable

Supported (aihwkit 1.2 ``aihwkit.inference``): PCMLikeNoiseModel, CustomDriftPCMLikeNoiseModel,
HermesNoiseModel, StateIndependentNoiseModel, ReRamWan2022NoiseModel, ReRamCMONoiseModel; the
Single-pair, N-pair, Dual-pair and Single-device conductance converters; global, global with
exact reference and per-column drift compensation.  ``from_aihwkit`` reads the object's attributes
(it does not import aihwkit); a field that has no counterpart here, or a value that our model
cannot take, raises AihwkitConversionError naming every such field.  Our models' aihwkit-parity
semantics (``drift_reference="reconverted"``) are the ones aihwkit's program/drift path has, so a
converted model samples the same distributions (tests/python/test_noise_aihwkit.py runs aihwkit's
own sampling against ours).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from .. import _core
from .._optional import require
from .compensation import DriftCompensation, GlobalDriftCompensation, PerColumnDriftCompensation
from .converters import (ConductanceConverter, NPairConductanceConverter, SingleDeviceConductanceConverter,
                         SinglePairConductanceConverter)
from .models import (CustomDriftPCMLikeNoiseModel, HermesNoiseModel, NoiseModel, PCMLikeNoiseModel,
                     ReRamCMONoiseModel, ReRamWan2022NoiseModel, StateIndependentNoiseModel)

_MISSING = object()


class AihwkitConversionError(ValueError):
    """An aihwkit object (or one of ours) cannot be converted.  ``fields`` holds one
    (field, why) pair per problem."""

    def __init__(self, what: str, fields: list[tuple[str, str]]):
        self.fields = list(fields)
        lines = "\n".join(f"  {name}: {why}" for name, why in self.fields)
        super().__init__(f"cannot convert {what}, {len(self.fields)} unsupported field(s):\n{lines}")


class _Reader:
    """Reads an aihwkit object's attributes, collecting problems instead of stopping at the first.
    ``prefix`` names the object inside another one ("g_converter.")."""

    def __init__(self, obj: Any, prefix: str = ""):
        self.obj = obj
        self.name = type(obj).__name__
        self.prefix = prefix
        self.used: set[str] = set()
        self.problems: list[tuple[str, str]] = []

    def problem(self, attr: str, why: str) -> None:
        self.problems.append((self.prefix + attr, why))

    def get(self, attr: str):
        self.used.add(attr)
        value = getattr(self.obj, attr, _MISSING)
        if value is _MISSING:
            self.problem(attr, "not set on the object")
        return value

    def number(self, attr: str):
        """A real number (not a bool, None or a string), as float; _MISSING (a problem noted) else."""
        value = self.get(attr)
        if value is _MISSING:
            return value
        if not _is_real(value):
            self.problem(attr, f"{_show(value)} ({type(value).__name__}) is not a number")
            return _MISSING
        return float(value)

    def integer(self, attr: str, choices: tuple[int, ...]):
        """One of the integers ``choices`` (not a float, bool or string); _MISSING else."""
        value = self.get(attr)
        if value is _MISSING:
            return value
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) not in choices:
            self.problem(attr, f"{_show(value)} ({type(value).__name__}) is not one of the integers "
                               f"{', '.join(map(str, choices))}")
            return _MISSING
        return int(value)

    def floats(self, attr: str, value=_MISSING):
        """A list or tuple (or 1-D array) of real numbers, as floats; _MISSING (a problem noted) else.
        A string is refused: "13" would read as [1.0, 3.0]."""
        value = self.get(attr) if value is _MISSING else value
        if value is _MISSING:
            return value
        listed = value.tolist() if hasattr(value, "tolist") and getattr(value, "ndim", 1) == 1 else value
        if not isinstance(listed, (list, tuple)) or not all(_is_real(v) for v in listed):
            self.problem(attr, f"{_show(value)} ({type(value).__name__}) is not a list of numbers")
            return _MISSING
        return [float(v) for v in listed]

    def table(self, attr: str):
        """A dict of name -> list of numbers (CustomDriftPCMLikeNoiseModel's custom_drift_model)."""
        value = self.get(attr)
        if value is _MISSING:
            return value
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.problem(attr, f"{_show(value)} ({type(value).__name__}) is not a dict of name -> list of numbers")
            return _MISSING
        table = {k: self.floats(f"{attr}['{k}']", v) for k, v in value.items()}
        return _MISSING if any(v is _MISSING for v in table.values()) else table

    def expect(self, attr: str, default, why: str) -> None:
        """A field our model fixes: it must hold aihwkit's default value."""
        value = self.get(attr)
        if value is not _MISSING and not _same(value, default):
            self.problems.append((attr, f"{_show(value)} differs from aihwkit's default {_show(default)}: {why}"))

    def finish(self, ignore: tuple[str, ...] = ()) -> None:
        extra = sorted(set(vars(self.obj)) - self.used - set(ignore))
        for attr in extra:
            self.problem(attr, "an attribute aihwkit's class does not have; aimcemu cannot model it")
        if self.problems:
            raise AihwkitConversionError(f"aihwkit {self.name}", self.problems)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    except (TypeError, ValueError):
        return a == b


def _show(value) -> str:
    return repr(value) if not isinstance(value, float) else f"{value:g}"


# --- aihwkit -> aimcemu ---------------------------------------------------------------------------
def _converter_from(obj, prefix: str = ""):
    """Every field is read (and checked to be a number) before anything is built: a missing or
    None g_max must not become our converter's default."""
    r = _Reader(obj, prefix)
    kind = r.name
    if kind == "SinglePairConductanceConverter":
        build = SinglePairConductanceConverter
    elif kind in ("NPairConductanceConverter", "DualPairConductanceConverter"):
        f_lst = r.floats("f_lst")

        def build(**limits):
            return NPairConductanceConverter(f_lst=f_lst, **limits)
    elif kind == "SingleDeviceConductanceConverter":
        build = SingleDeviceConductanceConverter
    else:
        raise AihwkitConversionError(f"aihwkit {kind}", [(prefix + "class", f"{kind} has no aimcemu counterpart "
                                                          "(supported: single pair, N pair, dual pair, single device)")])
    limits = {"g_max": r.number("g_max"), "g_min": r.number("g_min")}
    r.finish(ignore=("scale_ratio",))  # scale_ratio is a cache of the last conversion
    return build(**limits)


def _builtin_fits() -> dict:
    """The fits aimcemu's models have built in, in the layout of aihwkit's attributes (its
    dictionaries and keys; polynomials lowest order first in both): what an aihwkit object must
    hold to convert exactly.  Read from the C++ models (_core.noise.builtin_fits), not typed here
    a second time."""
    fits = _core.noise.builtin_fits()
    cmo = fits["reram_cmo"]
    return {
        "hermes": {devices: (list(f["prog_coeff"]), f["g_max"]) for devices, f in fits["hermes"].items()},
        "wan_coeff_dic": {t: list(c) for t, c in fits["reram_wan2022"]["coefficients"].items()},
        "cmo": {"coeff_dict": {r: list(c) for r, c in cmo["prog_coeff"].items()},
                "decay_dict": {"mean": [cmo["decay_mean"]], "std": list(cmo["decay_std"])},
                "read_dict": {"K": cmo["read_k"], "t_read": cmo["read_time"]}},
    }


_FIXED = "aimcemu's model has this fit built in"


def _pcm_fields(r: _Reader) -> dict:
    return {"t_read": r.number("t_read"), "t0": r.number("t_0"), "prog_noise_scale": r.number("prog_noise_scale"),
            "read_noise_scale": r.number("read_noise_scale"), "drift_scale": r.number("drift_scale")}


def _check_g_max(r: _Reader, converter) -> None:
    g_max = r.get("g_max")
    if g_max is not _MISSING and not _same(g_max, converter.g_max):
        r.problems.append(("g_max", f"{g_max} differs from the converter's g_max {converter.g_max}"))


def _pcm_like_from(r: _Reader, converter, cls_name: str):

    _check_g_max(r, converter)
    fields = {**_pcm_fields(r), "prog_coeff": r.floats("prog_coeff"),
              "prog_coeff_g_max_reference": r.number("prog_coeff_g_max_reference")}
    if cls_name == "CustomDriftPCMLikeNoiseModel":
        table = r.table("custom_drift_model")
        return lambda: CustomDriftPCMLikeNoiseModel(table, converter=converter, **fields)
    return lambda: PCMLikeNoiseModel(converter=converter, **fields)


def _hermes_from(r: _Reader, converter, cls_name: str):

    _check_g_max(r, converter)
    hermes = _builtin_fits()["hermes"]
    devices = r.integer("num_devices", tuple(sorted(hermes)))
    coeff, reference = hermes.get(devices, hermes[2])
    # aihwkit checks only its g_max argument against the fit's range, not a converter's g_max.
    if converter.g_max > reference:
        r.problems.append(("g_max", f"{converter.g_max:g} uS (the converter's) is above {reference:g} uS, where "
                                    f"the HERMES fits for {devices} device(s) end; aimcemu refuses it"))
    r.expect("prog_coeff", coeff, _FIXED)
    r.expect("prog_coeff_g_max_reference", reference, _FIXED)
    fields = _pcm_fields(r)
    return lambda: HermesNoiseModel(num_devices=int(devices), converter=converter, **fields)


def _state_independent_from(r: _Reader, converter, cls_name: str):

    _check_g_max(r, converter)
    fields = {**_pcm_fields(r), "prog_coeff": r.floats("prog_coeff"), "drift_nu_mean": r.number("drift_nu_mean"),
              "drift_nu_std": r.number("drift_nu_std")}
    # aihwkit's read sigma is |g_drift / g_max| * sqrt(...) in uS: read_q = 1/g_max here.
    return lambda: StateIndependentNoiseModel(converter=converter, read_q=1.0 / converter.g_max, **fields)


def _wan_from(r: _Reader, converter, cls_name: str):

    _check_g_max(r, converter)
    r.expect("coeff_dic", _builtin_fits()["wan_coeff_dic"], _FIXED)
    r.get("prog_coeff_g_max_reference")   # aihwkit stores 40 there and never uses it
    scale = r.number("noise_scale")
    reference = r.number("coeff_g_max_reference")
    return lambda: ReRamWan2022NoiseModel(converter=converter, prog_noise_scale=scale, read_noise_scale=scale,
                                                coeff_g_max_reference=reference)


def _cmo_from(r: _Reader, converter, cls_name: str):

    for attr, default in _builtin_fits()["cmo"].items():
        r.expect(attr, default, _FIXED)
    for attr in ("g_max", "g_min"):
        value = r.get(attr)
        if value is not _MISSING and not _same(value, getattr(converter, attr)):
            r.problems.append((attr, f"{value} differs from the converter's {getattr(converter, attr)}"))
    r.expect("coeff_g_max_reference", converter.g_max, "aihwkit sets it to g_max")
    fields = {"acceptance_range": r.number("acceptance_range"), "prog_noise_scale": r.number("prog_noise_scale"),
              "read_noise_scale": r.number("read_noise_scale"), "drift_scale": r.number("drift_scale")}
    return lambda: ReRamCMONoiseModel(converter=converter, **fields)


_NOISE_MODELS: dict[str, Callable] = {
    "PCMLikeNoiseModel": _pcm_like_from,
    "CustomDriftPCMLikeNoiseModel": _pcm_like_from,
    "HermesNoiseModel": _hermes_from,
    "StateIndependentNoiseModel": _state_independent_from,
    "ReRamWan2022NoiseModel": _wan_from,
    "ReRamCMONoiseModel": _cmo_from,
}
_CONVERTERS = ("SinglePairConductanceConverter", "NPairConductanceConverter", "DualPairConductanceConverter",
               "SingleDeviceConductanceConverter", "CustomPairConductanceConverter", "FusionConductanceConverter")
_COMPENSATIONS = ("GlobalDriftCompensation", "GlobalDriftCompensationWithExactReference", "PerColumnDriftCompensation")


def _noise_model_from(obj):
    r = _Reader(obj)
    converter_obj = r.get("g_converter")
    if converter_obj is _MISSING:
        raise AihwkitConversionError(f"aihwkit {r.name}", r.problems)
    # Refused at top level, a subclass must be refused here too: a user's class named like
    # aihwkit's (overriding convert_to_conductances) would otherwise pass as aihwkit's own.
    if not _is_aihwkit(converter_obj):
        kind = type(converter_obj)
        raise AihwkitConversionError(f"aihwkit {r.name}", [("g_converter", f"{kind.__module__}.{kind.__name__} is not "
                                                                           "aihwkit's own converter class (a subclass's "
                                                                           "methods cannot be converted)")])
    converter = _converter_from(converter_obj, "g_converter.")
    build = _NOISE_MODELS[r.name](r, converter, r.name)
    r.finish()
    return build()


def _compensation_from(obj):

    r = _Reader(obj)
    r.finish()
    if r.name == "PerColumnDriftCompensation":
        return PerColumnDriftCompensation()
    return GlobalDriftCompensation(exact_reference=r.name == "GlobalDriftCompensationWithExactReference")


def _is_aihwkit(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "aihwkit"


def from_aihwkit(obj):
    """An aimcemu noise model, converter or drift compensation equal to the aihwkit object ``obj``.

    Subclasses of aihwkit's classes are refused (their overridden methods cannot be converted);
    AihwkitConversionError names every field that cannot be represented."""
    name = type(obj).__name__
    if not _is_aihwkit(obj) or name not in (*_NOISE_MODELS, *_CONVERTERS, *_COMPENSATIONS):
        bases = [c.__name__ for c in type(obj).__mro__[1:] if _is_aihwkit_class(c)]
        why = (f"a subclass of aihwkit's {bases[0]} (its own methods cannot be converted)" if bases
               else "not an aihwkit inference noise model, converter or drift compensation")
        raise AihwkitConversionError(f"{type(obj).__module__}.{name}", [("class", why)])
    if name in _NOISE_MODELS:
        return _noise_model_from(obj)
    if name in _CONVERTERS:
        return _converter_from(obj)
    return _compensation_from(obj)


def _is_aihwkit_class(cls) -> bool:
    return cls.__module__.split(".")[0] == "aihwkit" and cls.__name__ in (*_NOISE_MODELS, *_CONVERTERS, *_COMPENSATIONS)


# --- aimcemu -> aihwkit ---------------------------------------------------------------------------
def _aihwkit():
    return require("aihwkit.inference", "to_aihwkit")


def _converter_to(conv):
    ai = _aihwkit()
    cfg = conv.to_dict()
    if cfg["converter"] == "single_pair":
        return ai.SinglePairConductanceConverter(g_max=cfg["g_max"], g_min=cfg["g_min"])
    if cfg["converter"] == "n_pair":
        return ai.NPairConductanceConverter(f_lst=list(cfg["pair_factors"]), g_max=cfg["g_max"], g_min=cfg["g_min"])
    return ai.SingleDeviceConductanceConverter(g_max=cfg["g_max"], g_min=cfg["g_min"])


def _model_to(model):
    ai = _aihwkit()
    p = model.params
    problems = []
    if p.get("drift_reference", "reconverted") != "reconverted":
        problems.append(("drift_reference", f"{p['drift_reference']!r}: aihwkit always re-converts the programmed "
                                            "weights before drift ('reconverted')"))
    name = model.model
    conv = _converter_to(model.converter)
    pcm = dict(t_read=p.get("t_read"), t_0=p.get("t0"), prog_noise_scale=p.get("prog_noise_scale"),
               read_noise_scale=p.get("read_noise_scale"), drift_scale=p.get("drift_scale"))
    build = None
    if name in ("pcm_like", "custom_drift_pcm"):
        def build():
            if name == "pcm_like":
                obj = ai.PCMLikeNoiseModel(prog_coeff=list(p["prog_coeff"]), g_converter=conv, **pcm)
            else:
                table = {k: list(p[k]) for k in ("g_lst", "nu_mean_lst", "nu_std_lst")}
                obj = ai.CustomDriftPCMLikeNoiseModel(table, prog_coeff=list(p["prog_coeff"]), g_converter=conv, **pcm)
            # Set after construction: aihwkit leaves it unset when given together with prog_coeff.
            obj.prog_coeff_g_max_reference = p["prog_coeff_g_max_reference"]
            return obj
    elif name == "hermes":
        limit = _builtin_fits()["hermes"][int(p["num_devices"])][1]
        if p["g_max"] > limit:   # aimcemu refuses it too; aihwkit would fail on a bare assert
            problems.append(("g_max", f"{p['g_max']:g} uS: aihwkit's HermesNoiseModel takes at most {limit:g} uS "
                                      f"with {int(p['num_devices'])} device(s)"))

        def build():
            return ai.HermesNoiseModel(num_devices=int(p["num_devices"]), g_converter=conv, g_max=p["g_max"], **pcm)
    elif name == "state_independent":
        if not _same(p["read_q"], 1.0 / p["g_max"]):
            problems.append(("read_q", f"{p['read_q']:g}: aihwkit's read noise is fixed at 1/g_max = {1.0 / p['g_max']:g}"))

        def build():
            return ai.StateIndependentNoiseModel(g_converter=conv, prog_coeff=list(p["prog_coeff"]),
                                                 drift_nu_mean=p["drift_nu_mean"], drift_nu_std=p["drift_nu_std"], **pcm)
    elif name == "reram_wan2022":
        if p["prog_noise_scale"] != p["read_noise_scale"]:
            problems.append(("read_noise_scale", f"{p['read_noise_scale']:g} differs from prog_noise_scale "
                                                 f"{p['prog_noise_scale']:g}: aihwkit has one noise_scale"))
        if not _same(p["coeff_g_max_reference"], p["g_max"]):
            problems.append(("coeff_g_max_reference", f"{p['coeff_g_max_reference']:g}: aihwkit ignores it "
                                                      "(uses g_max)"))

        def build():
            return ai.ReRamWan2022NoiseModel(g_converter=conv, noise_scale=p["prog_noise_scale"])
    elif name == "reram_cmo":
        if p["converter"] != "single_device":
            problems.append(("converter", f"{p['converter']!r}: aihwkit's ReRamCMONoiseModel always programs one "
                                          "device per weight ('single_device')"))

        def build():
            return ai.ReRamCMONoiseModel(g_max=p["g_max"], g_min=p["g_min"], prog_noise_scale=p["prog_noise_scale"],
                                         read_noise_scale=p["read_noise_scale"], drift_scale=p["drift_scale"],
                                         acceptance_range=p["acceptance_range"])
    else:
        problems.append(("model", f"{name!r} has no aihwkit counterpart"))
    if problems:
        raise AihwkitConversionError(f"aimcemu noise model {name!r}", problems)
    return build()


def to_aihwkit(obj):
    """The aihwkit object equal to an aimcemu noise model, converter or drift compensation.
    Needs ``aihwkit.inference`` importable; AihwkitConversionError names what aihwkit cannot express."""

    if isinstance(obj, NoiseModel):
        return _model_to(obj)
    if isinstance(obj, ConductanceConverter):
        return _converter_to(obj)
    if isinstance(obj, DriftCompensation):
        ai = _aihwkit()
        drift = require("aihwkit.inference.compensation.drift", "to_aihwkit")
        if obj.kind == "per_column":
            if obj.exact_reference:
                raise AihwkitConversionError("per-column drift compensation",
                                             [("exact_reference", "aihwkit has it for global compensation only")])
            return drift.PerColumnDriftCompensation()
        return drift.GlobalDriftCompensationWithExactReference() if obj.exact_reference else ai.GlobalDriftCompensation()
    raise AihwkitConversionError(type(obj).__name__, [("class", "not an aimcemu noise model, converter or drift "
                                                                "compensation")])
