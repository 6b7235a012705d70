"""Device noise models for analog in-memory computing (the float64 statistical reference).

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

from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from . import _core

_noise = _core.noise
LayerState = _noise.LayerState

__all__ = [
    "LayerState",
    "ConductanceConverter", "SinglePairConductanceConverter", "NPairConductanceConverter",
    "DualPairConductanceConverter", "SingleDeviceConductanceConverter", "converter_from_dict",
    "NoiseModel", "PCMLikeNoiseModel", "HermesNoiseModel", "StateIndependentNoiseModel",
    "CustomDriftPCMLikeNoiseModel", "ReRamWan2022NoiseModel", "ReRamCMONoiseModel", "GenericNoiseModel",
    "noise_model_from_dict", "noise_model_names",
    "DriftCompensation", "GlobalDriftCompensation", "PerColumnDriftCompensation",
    "GlobalDriftCompensationWithExactReference", "drift_compensation_from_dict",
]


def _core_value(name: str, value: Any):
    """A parameter as the C++ core takes it: a float, a list of floats or a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise _core.FormatError(f"noise config: field '{name}': expected a number, got a boolean")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, (Sequence, np.ndarray)):
        return [float(v) for v in value]
    raise _core.FormatError(f"noise config: field '{name}': unsupported value {value!r}")


def _from_core(params: Mapping[str, Any]) -> dict:
    """Resolved parameters as plain Python values (whole numbers such as levels stay ints)."""
    out = {}
    for key, value in params.items():
        if isinstance(value, float) and key in ("num_devices", "levels"):
            value = int(value)
        out[key] = value
    return out


# --- conductance converters ---------------------------------------------------------------------
class ConductanceConverter:
    """Maps a layer's weights to device conductances (uS) and back; see docs/noise_models.md."""

    kind: ClassVar[str] = ""

    def __init__(self, **params: Any) -> None:
        self._params = {"converter": self.kind, **{k: _core_value(k, v) for k, v in params.items()}}
        self._params = dict(_noise.converter_params(self._params))  # validates, fills defaults

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


class SinglePairConductanceConverter(ConductanceConverter):
    """One differential pair (g+, g-): the layer's abs-max maps to g_max (aihwkit's single pair)."""

    kind = "single_pair"

    def __init__(self, g_max: float = 25.0, g_min: float = 0.0) -> None:
        super().__init__(g_max=g_max, g_min=g_min)


class NPairConductanceConverter(ConductanceConverter):
    """N pairs of significance f_k, the lowest-significance pair filled first (aihwkit's N pair)."""

    kind = "n_pair"

    def __init__(self, f_lst: Sequence[float] = (1.0, 3.0), g_max: float = 25.0, g_min: float = 0.0) -> None:
        super().__init__(pair_factors=list(f_lst), g_max=g_max, g_min=g_min)


def DualPairConductanceConverter(f_lst: Sequence[float] = (1.0, 3.0), g_max: float = 25.0,
                                 g_min: float = 0.0) -> NPairConductanceConverter:
    """Two pairs (aihwkit's DualPairConductanceConverter): an N-pair converter with two factors."""
    if len(f_lst) != 2:
        raise _core.FormatError("converter 'dual_pair': field 'f_lst': needs exactly two factors")
    return NPairConductanceConverter(f_lst, g_max, g_min)


class SingleDeviceConductanceConverter(ConductanceConverter):
    """One device per weight; [min W, max W] maps affinely onto [g_min, g_max] (ReRAM CMO)."""

    kind = "single_device"

    def __init__(self, g_max: float = 88.199997, g_min: float = 9.0) -> None:
        super().__init__(g_max=g_max, g_min=g_min)


_CONVERTERS = {c.kind: c for c in (SinglePairConductanceConverter, NPairConductanceConverter,
                                   SingleDeviceConductanceConverter)}
_CONVERTER_KEYS = ("converter", "g_max", "g_min", "pair_factors")


def converter_from_dict(config: Mapping[str, Any]) -> ConductanceConverter:
    kind = config.get("converter", "single_pair")
    if kind not in _CONVERTERS:
        raise _core.FormatError(f"noise config: field 'converter': unknown converter {kind!r} "
                                f"(known: {', '.join(_CONVERTERS)})")
    params = {k: v for k, v in config.items() if k in _CONVERTER_KEYS and k != "converter"}
    if "pair_factors" in params:
        params["f_lst"] = params.pop("pair_factors")
    return _CONVERTERS[kind](**params)


# --- noise models ---------------------------------------------------------------------------------
class NoiseModel:
    """Base of every device noise model.  Subclasses document their parameters and defaults."""

    model: ClassVar[str] = ""
    _registry: ClassVar[dict[str, type["NoiseModel"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.model:
            NoiseModel._registry[cls.model] = cls

    def __init__(self, converter: ConductanceConverter | str | None = None, **params: Any) -> None:
        given = {k: _core_value(k, v) for k, v in params.items() if v is not None}
        if isinstance(converter, str):  # a config names the converter and gives its fields flat
            given["converter"] = converter
        elif converter is not None:
            if not isinstance(converter, ConductanceConverter):
                raise _core.FormatError(f"noise model '{self.model}': field 'converter': expected a converter object")
            for key, value in converter.to_dict().items():
                if key in given and given[key] != value:
                    raise _core.FormatError(f"noise model '{self.model}': field '{key}': "
                                            f"{given[key]} conflicts with the converter's {value}")
                given[key] = value
        self._core = _noise.make_noise_model(self.model, given)

    # configuration
    @property
    def params(self) -> dict:
        """Every parameter, defaults resolved."""
        return _from_core(self._core.params())

    def to_dict(self) -> dict:
        return {"model": self.model, **self.params}

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "NoiseModel":
        model = noise_model_from_dict(config)
        if cls is not NoiseModel and not isinstance(model, cls):
            raise _core.FormatError(f"noise config: field 'model': expected {cls.model!r}, got {config.get('model')!r}")
        return model

    @property
    def converter(self) -> ConductanceConverter:
        return converter_from_dict(self.params)

    @property
    def num_threads(self) -> int:
        """Worker threads for program/read (0 = all cores); results never depend on it."""
        return self._core.num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._core.num_threads = int(n)

    # program / read
    def program(self, weights: np.ndarray, seed: int = 0, chip: int = 0, layer: int = 0) -> LayerState:
        """Programs one layer on chip `chip` of study `seed`: draws programming noise and drift
        exponents once.  Returns the device state (g_target, g_prog, nu, fault, in uS)."""
        return self._core.program(np.asarray(weights, dtype=np.float64), int(seed), int(chip), int(layer))

    def read(self, state: LayerState, t: float, round: int = 0) -> np.ndarray:
        """Weights read `t` seconds after programming, with read noise keyed by `round`."""
        return self._core.read(state, float(t), int(round))

    def read_conductances(self, state: LayerState, t: float, round: int = 0) -> np.ndarray:
        """Conductances (uS, trailing device axis) of the same read as ``read``."""
        return self._core.read_conductances(state, float(t), int(round))

    def programmed_weights(self, state: LayerState) -> np.ndarray:
        """Weights right after programming: no drift, no read noise."""
        return self._core.programmed_weights(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoiseModel) and self.to_dict() == other.to_dict()


class _PCMFamily(NoiseModel):
    """Closed forms of the PCM family (vectorised over NumPy arrays of conductances in uS)."""

    def prog_sigma(self, g_target) -> np.ndarray:
        return self._core.prog_sigma(np.asarray(g_target, dtype=np.float64))

    def nu_mean(self, g_target) -> np.ndarray:
        return self._core.nu_mean(np.asarray(g_target, dtype=np.float64))

    def nu_std(self, g_target) -> np.ndarray:
        return self._core.nu_std(np.asarray(g_target, dtype=np.float64))

    def read_q(self, g_prog) -> np.ndarray:
        return self._core.read_q(np.asarray(g_prog, dtype=np.float64))

    def read_time_factor(self, t: float) -> float:
        return self._core.read_time_factor(float(t))

    def drift_factor(self, nu, t: float) -> np.ndarray:
        return self._core.drift_factor(np.asarray(nu, dtype=np.float64), float(t))


class PCMLikeNoiseModel(_PCMFamily):
    """PCM (Nandakumar et al. 2019, Joshi et al. 2020), as aihwkit's PCMLikeNoiseModel.

    sigma_prog = poly(prog_coeff, g/g_max) * g_max / prog_coeff_g_max_reference (uS);
    nu = drift_scale * |mu_nu(g) + sigma_nu(g) xi|; drift (t_total/t0)^-nu with t_total = t + t0;
    read sigma (relative) = Q_s(g_prog) * sqrt(ln((t_total + t_read)/(2 t_read))).

    Defaults: prog_coeff (0.26348, 1.9650, -1.1731) uS fitted at 25 uS, g_max 25 uS, t0 20 s,
    t_read 250 ns, all scales 1, drift_reference "reconverted" (aihwkit parity).
    """

    model = "pcm_like"

    def __init__(self, prog_coeff: Sequence[float] | None = None, converter: ConductanceConverter | None = None,
                 g_max: float | None = None, t_read: float | None = None, t0: float | None = None,
                 prog_noise_scale: float | None = None, read_noise_scale: float | None = None,
                 drift_scale: float | None = None, prog_coeff_g_max_reference: float | None = None,
                 drift_reference: str | None = None, **params: Any) -> None:
        super().__init__(converter, prog_coeff=prog_coeff, g_max=g_max, t_read=t_read, t0=t0,
                         prog_noise_scale=prog_noise_scale, read_noise_scale=read_noise_scale, drift_scale=drift_scale,
                         prog_coeff_g_max_reference=prog_coeff_g_max_reference, drift_reference=drift_reference,
                         **params)


class HermesNoiseModel(_PCMFamily):
    """PCM fits of the IBM HERMES chip (Le Gallo et al. 2023), as aihwkit's HermesNoiseModel.

    num_devices 2 (default): g_max 20.7 uS, t0 300 s; num_devices 1: g_max 10.35 uS, t0 200 s;
    t_read 512 ns; piecewise mu_nu, sigma_nu and Q_s fits (docs/noise_models.md).
    """

    model = "hermes"

    def __init__(self, num_devices: int = 2, converter: ConductanceConverter | None = None, g_max: float | None = None,
                 t_read: float | None = None, t0: float | None = None, prog_noise_scale: float | None = None,
                 read_noise_scale: float | None = None, drift_scale: float | None = None,
                 drift_reference: str | None = None, **params: Any) -> None:
        super().__init__(converter, num_devices=num_devices, g_max=g_max, t_read=t_read, t0=t0,
                         prog_noise_scale=prog_noise_scale, read_noise_scale=read_noise_scale, drift_scale=drift_scale,
                         drift_reference=drift_reference, **params)


class StateIndependentNoiseModel(_PCMFamily):
    """Conductance-independent PCM-like noise, as aihwkit's StateIndependentNoiseModel.

    sigma_prog = poly(prog_coeff, g/g_max) uS (default 0.2 uS), nu = drift_scale*|0.1 + 0.05 xi|,
    read sigma (uS) = read_noise_scale * read_q * |g_drift| * sqrt(ln(...)) with read_q = 1/g_max
    by default, i.e. aihwkit's |g_drift/g_max| * sqrt(ln(...)) in uS (kept for parity; pass
    read_q=0.0088 for a relative read noise like the PCM model's).
    """

    model = "state_independent"

    def __init__(self, prog_coeff: Sequence[float] | None = None, converter: ConductanceConverter | None = None,
                 g_max: float | None = None, t_read: float | None = None, t0: float | None = None,
                 drift_nu_mean: float | None = None, drift_nu_std: float | None = None,
                 drift_scale: float | None = None, prog_noise_scale: float | None = None,
                 read_noise_scale: float | None = None, read_q: float | None = None,
                 drift_reference: str | None = None, **params: Any) -> None:
        super().__init__(converter, prog_coeff=prog_coeff, g_max=g_max, t_read=t_read, t0=t0,
                         drift_nu_mean=drift_nu_mean, drift_nu_std=drift_nu_std, drift_scale=drift_scale,
                         prog_noise_scale=prog_noise_scale, read_noise_scale=read_noise_scale, read_q=read_q,
                         drift_reference=drift_reference, **params)


class CustomDriftPCMLikeNoiseModel(_PCMFamily):
    """PCM-like model whose nu mean/std come from tables over g (uS), as aihwkit's
    CustomDriftPCMLikeNoiseModel (N. Li et al. 2023).  ``custom_drift_model`` is
    {"g_lst": [...], "nu_mean_lst": [...], "nu_std_lst": [...]}, ascending g covering [g_min, g_max]."""

    model = "custom_drift_pcm"

    def __init__(self, custom_drift_model: Mapping[str, Sequence[float]] | None = None,
                 converter: ConductanceConverter | None = None, **params: Any) -> None:
        tables = dict(custom_drift_model or {})
        super().__init__(converter, **tables, **params)


class ReRamWan2022NoiseModel(NoiseModel):
    """ReRAM fit of Wan et al., Nature 2022, as aihwkit's ReRamWan2022NoiseModel.

    Programming: g_T + sigma_1s(g_T/g_max) xi, clipped at 0.  read(t) resamples around g_T with
    sigma_t; t must be 1, 86400 or 172800 s.  aihwkit has one noise_scale for both terms: here
    prog_noise_scale and read_noise_scale (both 1).  coeff_g_max_reference defaults to g_max (no
    rescale, as aihwkit in effect does; pass 40.0 for the reference the fit's comment states).
    """

    model = "reram_wan2022"

    def __init__(self, converter: ConductanceConverter | None = None, g_max: float | None = None,
                 prog_noise_scale: float | None = None, read_noise_scale: float | None = None,
                 coeff_g_max_reference: float | None = None, **params: Any) -> None:
        super().__init__(converter, g_max=g_max, prog_noise_scale=prog_noise_scale,
                         read_noise_scale=read_noise_scale, coeff_g_max_reference=coeff_g_max_reference, **params)


class ReRamCMONoiseModel(NoiseModel):
    """CMO/HfOx ReRAM (IBM Research Zurich), as aihwkit's ReRamCMONoiseModel.

    One device per weight (9 .. 88.199997 uS).  acceptance_range 0.2 (default) or 2 selects the
    programming fit (aihwkit's default 2e-2 is not a fit and silently falls back to 0.2).
    """

    model = "reram_cmo"

    def __init__(self, acceptance_range: float | None = None, converter: ConductanceConverter | None = None,
                 g_max: float | None = None, g_min: float | None = None, prog_noise_scale: float | None = None,
                 read_noise_scale: float | None = None, drift_scale: float | None = None,
                 drift_reference: str | None = None, **params: Any) -> None:
        super().__init__(converter, acceptance_range=acceptance_range, g_max=g_max, g_min=g_min,
                         prog_noise_scale=prog_noise_scale, read_noise_scale=read_noise_scale,
                         drift_scale=drift_scale, drift_reference=drift_reference, **params)


class GenericNoiseModel(NoiseModel):
    """Generic non-idealities per device: Gaussian programming and read noise (additive, relative
    to g_max, and multiplicative, relative to g), stuck-at-g_min/g_max faults with probabilities,
    and `levels` evenly spaced programmable conductances (0 = continuous).  All default to off."""

    model = "generic"

    def __init__(self, prog_additive: float = 0.0, prog_multiplicative: float = 0.0, read_additive: float = 0.0,
                 read_multiplicative: float = 0.0, stuck_low_prob: float = 0.0, stuck_high_prob: float = 0.0,
                 levels: int = 0, converter: ConductanceConverter | None = None, g_max: float | None = None,
                 **params: Any) -> None:
        super().__init__(converter, prog_additive=prog_additive, prog_multiplicative=prog_multiplicative,
                         read_additive=read_additive, read_multiplicative=read_multiplicative,
                         stuck_low_prob=stuck_low_prob, stuck_high_prob=stuck_high_prob, levels=levels,
                         g_max=g_max, **params)


def noise_model_names() -> list[str]:
    return list(_noise.noise_model_names())


def noise_model_from_dict(config: Mapping[str, Any]) -> NoiseModel:
    """Builds a model from {"model": name, **params}; unknown names or params raise FormatError."""
    if not isinstance(config, Mapping) or "model" not in config:
        raise _core.FormatError("noise config: field 'model': missing (a dict with a 'model' name is expected)")
    name = config["model"]
    for key in config:
        if not isinstance(key, str):
            raise _core.FormatError(f"noise config: field {key!r}: parameter names are strings")
    cls = NoiseModel._registry.get(name) if isinstance(name, str) else None
    if cls is None:
        raise _core.FormatError(f"noise config: field 'model': unknown noise model {name!r} "
                                f"(known: {', '.join(sorted(NoiseModel._registry))})")
    model = cls.__new__(cls)
    NoiseModel.__init__(model, **{k: v for k, v in config.items() if k != "model"})
    return model


# --- drift compensation ---------------------------------------------------------------------------
class DriftCompensation:
    """aihwkit-style drift compensation from a one-hot (identity) readout of the layer.

    baseline(model, state): readout of the programmed weights (or of the clean weights when
    exact_reference); alpha(baseline, w_read) = baseline / readout(w_read); apply scales the
    weights (equivalently the layer's outputs) by alpha.
    """

    kind: ClassVar[str] = ""

    def __init__(self, exact_reference: bool = False) -> None:
        self._core = _noise.DriftCompensation(self.kind, bool(exact_reference))

    @property
    def exact_reference(self) -> bool:
        return self._core.exact_reference

    def baseline(self, model: NoiseModel, state: LayerState) -> np.ndarray:
        return self._core.baseline(model._core, state)

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
    """One factor per layer: alpha = mean|W_baseline| / mean|W_read| (each floored at 1e-4)."""

    kind = "global"


class PerColumnDriftCompensation(DriftCompensation):
    """One factor per output channel (axis 0): alpha[n] = mean_m|W_baseline[n]| / mean_m|W_read[n]|."""

    kind = "per_column"


def GlobalDriftCompensationWithExactReference() -> GlobalDriftCompensation:
    """Global compensation whose baseline is the clean weights (aihwkit's class of that name)."""
    return GlobalDriftCompensation(exact_reference=True)


def drift_compensation_from_dict(config: Mapping[str, Any]) -> DriftCompensation:
    kinds = {c.kind: c for c in (GlobalDriftCompensation, PerColumnDriftCompensation)}
    kind = config.get("compensation")
    if kind not in kinds:
        raise _core.FormatError(f"drift compensation: field 'compensation': unknown kind {kind!r} "
                                f"(known: {', '.join(kinds)})")
    unknown = set(config) - {"compensation", "exact_reference"}
    if unknown:
        raise _core.FormatError(f"drift compensation: field '{sorted(unknown)[0]}': unknown parameter")
    return kinds[kind](exact_reference=bool(config.get("exact_reference", False)))
