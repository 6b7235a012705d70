"""Device noise models: the float64 statistical reference, as aihwkit's ``inference.noise``.

Each class wraps one C++ model (``_core.noise``).  Its constructor arguments, their order, the
defaults its signature shows and the "Parameters" section of its docstring all come from the
model's parameter table in the core (``parameters.table(name)``); the class itself only adds
what the table cannot say (the model's description and formulas).  Formulas, sources and every
difference from aihwkit: docs/noise_models.md.
"""
from __future__ import annotations

import inspect
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from .. import _core, validate
from . import parameters
from .converters import ConductanceConverter, converter_from_dict

_noise = _core.noise
LayerState = _noise.LayerState

__all__ = ["LayerState", "NoiseModel", "PCMFamilyNoiseModel", "PCMLikeNoiseModel", "HermesNoiseModel",
           "StateIndependentNoiseModel", "CustomDriftPCMLikeNoiseModel", "ReRamWan2022NoiseModel",
           "ReRamCMONoiseModel", "GenericNoiseModel", "noise_model_from_dict", "noise_model_names"]


def _table_constructor(cls_name: str, names: Sequence[str], positional: int):
    """__init__ taking the table's parameters by name, the first `positional` of them also by
    position (in table order); only the ones given reach the core (which fills in the defaults)."""
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > positional:
            raise TypeError(f"{cls_name}() takes at most {positional} positional argument(s) "
                            f"({', '.join(names[:positional]) or 'none'}); give the others by name "
                            "(their order is not aihwkit's: docs/noise_models.md)")
        given = dict(zip(names, args))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise TypeError(f"{cls_name}() got multiple values for argument {twice[0]!r}")
        NoiseModel.__init__(self, **given, **kwargs)
    return __init__


def _index(name: str, value: Any) -> int:
    """A seed, chip, layer or round: a whole number in [0, 2^64) (a float would be truncated)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < 2**64:
        raise _core.FormatError(f"noise model: field '{name}': expected a whole number in [0, 2^64), got {value!r}")
    return int(value)


class NoiseModel:
    """Base of every device noise model; ``NoiseModel.from_dict`` builds any of them."""

    model: ClassVar[str] = ""
    # How many of the table's leading parameters the constructor takes by position (None: all).
    # Only where position means what it means in aihwkit's constructor of the same name, or the
    # model has no aihwkit twin: elsewhere a positional call would bind silently to another field.
    positional: ClassVar[int | None] = None
    _registry: ClassVar[dict[str, type["NoiseModel"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.model:
            return
        NoiseModel._registry[cls.model] = cls
        rows = parameters.table(cls.model)
        if "__init__" not in cls.__dict__:
            names = [row["name"] for row in rows]
            positional = len(names) if cls.positional is None else cls.positional
            cls.__init__ = _table_constructor(cls.__name__, names, positional)
            cls.__init__.__signature__ = parameters.signature(rows, positional=positional)
        cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\n{parameters.docstring_section(rows)}"

    def __init__(self, converter: ConductanceConverter | str | None = None, **params: Any) -> None:
        for key in params:
            _parameter_name(key)
        given = {k: parameters.core_value(k, v) for k, v in params.items() if v is not None}
        if isinstance(converter, str):  # a config names the converter and gives its fields flat
            given["converter"] = validate.text(converter, "converter", "noise config")
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
        return parameters.from_core(parameters.table(self.model), self._core.params())

    def to_dict(self) -> dict:
        return {"model": self.model, **self.params}

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "NoiseModel":
        model = noise_model_from_dict(config)
        if cls is not NoiseModel and not isinstance(model, cls):
            raise _core.FormatError(f"noise config: field 'model': expected {cls.model!r}, got {config.get('model')!r}")
        return model

    def __reduce__(self):
        """Pickles as its config (sweeps send models to worker processes)."""
        return noise_model_from_dict, (self.to_dict(),)

    @property
    def core_model(self):
        """The C++ model this object wraps (``_core.noise.NoiseModel``): what the NIU compiler
        and drift compensation take, built once per object."""
        return self._core

    @property
    def converter(self) -> ConductanceConverter:
        return converter_from_dict(self.params, other_keys_allowed=True)

    @property
    def num_threads(self) -> int:
        """Worker threads for program/read (0 = all cores); results never depend on it."""
        return self._core.num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._core.num_threads = validate.threads(n, "num_threads", f"<{type(self).__name__}>")

    # program / read
    def program(self, weights: np.ndarray, seed: int = 0, chip: int = 0, layer: int = 0) -> LayerState:
        """Programs one layer on chip `chip` of study `seed`: draws programming noise and drift
        exponents once.  Returns the device state (g_target, g_prog, nu, fault, in uS)."""
        return self._core.program(np.asarray(weights, dtype=np.float64), _index("seed", seed), _index("chip", chip),
                                  _index("layer", layer))

    def read(self, state: LayerState, t: float, round: int = 0) -> np.ndarray:
        """Weights read `t` seconds after programming, with read noise keyed by `round`."""
        return self._core.read(state, float(t), _index("round", round))

    def read_conductances(self, state: LayerState, t: float, round: int = 0) -> np.ndarray:
        """Conductances (uS, trailing device axis) of the same read as ``read``."""
        return self._core.read_conductances(state, float(t), _index("round", round))

    def programmed_weights(self, state: LayerState) -> np.ndarray:
        """Weights right after programming: no drift, no read noise."""
        return self._core.programmed_weights(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoiseModel) and self.to_dict() == other.to_dict()


class PCMFamilyNoiseModel(NoiseModel):
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


class PCMLikeNoiseModel(PCMFamilyNoiseModel):
    """PCM (Nandakumar et al. 2019, Joshi et al. 2020), as aihwkit's PCMLikeNoiseModel.

    sigma_prog = poly(prog_coeff, g/g_max) * g_max / prog_coeff_g_max_reference (uS);
    nu = drift_scale * |mu_nu(g) + sigma_nu(g) xi|; drift (t_total/t0)^-nu with t_total = t + t0;
    read sigma (relative) = Q_s(g_prog) * sqrt(ln((t_total + t_read)/(2 t_read))).
    The defaults are aihwkit's.
    """

    model = "pcm_like"
    positional = 9   # aihwkit's nine, prog_coeff .. prog_coeff_g_max_reference; the rest are aimcemu's own


class HermesNoiseModel(PCMFamilyNoiseModel):
    """PCM fits of the IBM HERMES chip (Le Gallo et al. 2023), as aihwkit's HermesNoiseModel:
    piecewise mu_nu, sigma_nu and Q_s fits for one or two devices (docs/noise_models.md)."""

    model = "hermes"
    positional = 1   # num_devices; aihwkit's HermesNoiseModel starts (prog_coeff, g_converter, num_devices)


class StateIndependentNoiseModel(PCMFamilyNoiseModel):
    """Conductance-independent PCM-like noise, as aihwkit's StateIndependentNoiseModel.

    sigma_prog = poly(prog_coeff, g/g_max) uS, nu = drift_scale*|drift_nu_mean + drift_nu_std xi|,
    read sigma (uS) = read_noise_scale * read_q * |g_drift| * sqrt(ln(...)); read_q = 1/g_max
    is aihwkit's |g_drift/g_max| * sqrt(ln(...)) in uS (kept for parity; pass read_q=0.0088 for a
    relative read noise like the PCM model's).
    """

    model = "state_independent"
    positional = 0   # aihwkit's order is (g_converter, g_max, prog_coeff, ...)


class CustomDriftPCMLikeNoiseModel(PCMFamilyNoiseModel):
    """PCM-like model whose nu mean/std come from tables over g (uS), as aihwkit's
    CustomDriftPCMLikeNoiseModel (N. Li et al. 2023).  ``custom_drift_model`` is
    {"g_lst": [...], "nu_mean_lst": [...], "nu_std_lst": [...]}, ascending g covering [g_min, g_max];
    the other parameters are given by name."""

    model = "custom_drift_pcm"

    # aihwkit's order is (custom_drift_model, prog_coeff, g_converter, ...): only the first is positional.
    def __init__(self, custom_drift_model: Mapping[str, Sequence[float]] | None = None, *,
                 converter: ConductanceConverter | str | None = None, **params: Any) -> None:
        if custom_drift_model is not None and not isinstance(custom_drift_model, Mapping):
            raise _core.FormatError(f"noise model '{self.model}': field 'custom_drift_model': expected a dict "
                                    f"{{'g_lst': [...], 'nu_mean_lst': [...], 'nu_std_lst': [...]}}, "
                                    f"got {type(custom_drift_model).__name__}")
        tables = dict(custom_drift_model or {})
        super().__init__(converter, **tables, **params)


class ReRamWan2022NoiseModel(NoiseModel):
    """ReRAM fit of Wan et al., Nature 2022, as aihwkit's ReRamWan2022NoiseModel.

    Programming: g_T + sigma_1s(g_T/g_max) xi, clipped at 0.  read(t) resamples around g_T with
    sigma_t; t must be 1, 86400 or 172800 s.
    """

    model = "reram_wan2022"
    positional = 0   # aihwkit's order is (coeff_dic, g_converter, g_max, noise_scale, ...)


class ReRamCMONoiseModel(NoiseModel):
    """CMO/HfOx ReRAM (IBM Research Zurich), as aihwkit's ReRamCMONoiseModel: one device per
    weight; acceptance_range selects the programming fit (aihwkit's default 2e-2 is not a fit
    and silently falls back to 0.2; here it is an error)."""

    model = "reram_cmo"
    positional = 0   # aihwkit's order is (coeff_dict, g_max, g_min, ...)


class GenericNoiseModel(NoiseModel):
    """Generic non-idealities per device: Gaussian programming and read noise (additive, relative
    to g_max, and multiplicative, relative to g), stuck-at-g_min/g_max faults with probabilities,
    and `levels` evenly spaced programmable conductances.  All default to off."""

    model = "generic"


def noise_model_names() -> list[str]:
    return list(_noise.noise_model_names())


def _missing_space_hint(config: Any) -> str:
    """'{model:pcm_like}' is YAML for the key 'model:pcm_like' with no value (a YAML mapping needs a
    space after the colon); what a key written so looks like, pointed out."""
    if isinstance(config, Mapping) and any(isinstance(k, str) and ":" in k and v is None for k, v in config.items()):
        return "; YAML needs a space after ':' ({model: pcm_like}, not {model:pcm_like})"
    return ""


def _parameter_name(key: Any) -> str:
    """A parameter name of a noise config: a str that is valid Unicode (a lone surrogate, as YAML's
    "\\ud800" or a command-line byte that is not UTF-8 gives, would fail inside the core's binding);
    the error shows the name with its bad character escaped."""
    if not isinstance(key, str):
        raise _core.FormatError(f"noise config: field {key!r}: parameter names are strings")
    # Only what UTF-8 cannot hold (a lone surrogate) is escaped: "é" stays "é" ("\x80" is valid too).
    return validate.text(key, key.encode("utf-8", "backslashreplace").decode("utf-8"), "noise config")


def noise_model_from_dict(config: Mapping[str, Any]) -> NoiseModel:
    """Builds a model from {"model": name, **params}; unknown names or params raise FormatError."""
    if not isinstance(config, Mapping) or "model" not in config:
        raise _core.FormatError("noise config: field 'model': missing (a dict with a 'model' name is expected)"
                                + _missing_space_hint(config))
    name = config["model"]
    for key, value in config.items():
        _parameter_name(key)
        # A YAML key left empty (or ~) is None, which the constructors read as "the default":
        # in a config it is more likely a value that was lost, so it is refused.
        if value is None:
            raise _core.FormatError(f"noise config: field {key!r}: no value (an empty YAML key or ~); "
                                    "leave the key out for its default" + _missing_space_hint(config))
    if isinstance(name, str):
        validate.text(name, "model", "noise config")
    cls = NoiseModel._registry.get(name) if isinstance(name, str) else None
    if cls is None:
        raise _core.FormatError(f"noise config: field 'model': unknown noise model {name!r} "
                                f"(known: {', '.join(sorted(NoiseModel._registry))})")
    model = cls.__new__(cls)
    NoiseModel.__init__(model, **{k: v for k, v in config.items() if k != "model"})
    return model
