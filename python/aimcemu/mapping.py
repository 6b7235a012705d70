"""Hybrid layer mappings: which layers run digitally on the PU and which on AIMC tiles.

A mapping puts every layer with weights (conv, linear) either on the PU's digital INT8 datapath
or on AIMC, where an NIU rewrites its weights with one noise instance per inference round.  Each
AIMC layer names its noise model; layers without one use the run's default noise
(``aimcemu.run(noise=...)``).  Layers without weights (max and average pools, add) are always
digital: a rule asking for AIMC on them alone is refused.

The NIU drifts every device from its programmed conductance, so a noise config that does not
name ``drift_reference`` gets "programmed" (the float64 models' default is aihwkit's
"reconverted"), and one that names "reconverted" is refused.

In Python::

    m = Mapping(default="digital", layers={"conv1": "aimc",
                                           "block1.*": {"device": "aimc", "noise": {"model": "hermes"}}})
    m = Mapping.from_yaml("examples/hybrid_mapping.yaml")
    placements = m.resolve(net, default_noise={"model": "pcm_like"})

In YAML (the same keys)::

    default: digital            # digital | aimc: where layers not named below go
    layers:                     # glob patterns over layer names, applied in order, the last match wins
      conv1: aimc
      "block1.*": {device: aimc, noise: {model: hermes}}
      "fc": {device: aimc, peripherals: {preset: pcm, out_noise: 0.02}}   # aimcemu.peripherals

AIMC layers whose rule gives no ``peripherals`` take the run's default (``aimcemu.run(
peripherals=...)``); ``peripherals: null`` in a rule turns them off for its layers.

Rules (each violation raises aimcemu.FormatError naming the source and the field): a pattern
that matches no layer, or only layers without weights while asking for AIMC, is an error; the
device is "digital" or "aimc"; a noise config must name a known model with known parameters and
one the NIU supports.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping as MappingABC

from . import _core, niu, peripherals as _peripherals
from .noise import NoiseModel, noise_model_from_dict
from .yamlfile import load_yaml

DEVICES = ("digital", "aimc")
DEFAULT_NOISE = {"model": "pcm_like"}


def _fail(source: str, field: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"{source}: field '{field}': {what}")


# The NIU compiler names itself as the source of what it refuses: "<niu compiler>: field 'X': why".
_NIU_COMPILER_ERROR = re.compile(r"<niu compiler>: field '([^']*)': (.*)", re.DOTALL)


def _resourced(exc: _core.FormatError, source: str, field: str) -> _core.FormatError:
    """The NIU compiler's error about a noise model, re-sourced to the config that asked for the
    model: "<niu compiler>: field 'drift_reference': ..." becomes "<source>: field
    '<field>.drift_reference': ...".  Errors from building the model already name the config's
    own field and keep it under `field`."""
    text = str(exc)
    match = _NIU_COMPILER_ERROR.fullmatch(text)
    if match:
        return _fail(source, f"{field}.{match.group(1)}", match.group(2))
    return _fail(source, field, text)


def resolve_noise_model(noise: Any, source: str = "<config>", field: str = "noise") -> NoiseModel:
    """The noise model object of a noise config ({"model": name, **params}, a model name, or a
    model object, which is used as is), checked to be one the NIU runs; unknown models or
    parameters raise FormatError naming source and field."""
    if isinstance(noise, str):
        noise = {"model": noise}
    if not isinstance(noise, (NoiseModel, MappingABC)):
        raise _fail(source, field, f"expected a noise model name or a dict with 'model', got {noise!r}")
    if isinstance(noise, MappingABC):
        for key in noise:
            if not isinstance(key, str):
                raise _fail(source, field, f"parameter names are strings, got {key!r}")
        if "model" in noise and not isinstance(noise["model"], str):
            raise _fail(source, f"{field}.model", f"expected a noise model name, got {noise['model']!r}")
    # The NIU runs drift_reference "programmed" only: a config that names none gets it, so what the
    # results file stores is what ran.  Whether the NIU can run the model (its family, converter,
    # drift reference, ...) is the NIU compiler's to say.
    if not isinstance(noise, NoiseModel):
        noise = niu.niu_noise_config(noise)
    try:
        model = noise if isinstance(noise, NoiseModel) else noise_model_from_dict(noise)
        niu.check_model(model)  # AIMC weights come from the NIU: its compiler decides what it runs
    except _core.FormatError as exc:
        raise _resourced(exc, source, field) from None
    return model


def resolve_noise(noise: Any, source: str = "<config>", field: str = "noise") -> dict:
    """A noise config {"model": name, **params} with every default filled in, from a dict, a name
    or a noise-model object; unknown models or parameters raise FormatError naming source and field."""
    return resolve_noise_model(noise, source, field).to_dict()


@dataclass(frozen=True)
class Placement:
    """Where one layer of a network runs: its index and name, "digital" or "aimc", and for AIMC
    layers the resolved noise config (defaults filled) and peripherals config (None: none)."""
    index: int
    name: str
    device: str
    noise: dict | None = None
    peripherals: dict | None = None
    # The noise model object (built once per mapping rule, shared by its layers).
    model: NoiseModel | None = field(default=None, compare=False, repr=False)

    @property
    def is_aimc(self) -> bool:
        return self.device == "aimc"


_INHERIT = "inherit"  # a rule without "peripherals": the run's default applies (compared by value: it survives pickling)


@dataclass(frozen=True)
class _Rule:
    pattern: str
    device: str
    model: NoiseModel | None  # None: the run's default noise
    peripherals: Any = _INHERIT  # a resolved peripherals config, None (off) or _INHERIT

    @property
    def noise(self) -> dict | None:
        return None if self.model is None else self.model.to_dict()


class Mapping:
    """A hybrid layer mapping; see the module docstring for the rules."""

    def __init__(self, default: str = "digital", layers: MappingABC[str, Any] | None = None,
                 source: str = "<mapping>") -> None:
        self.source = source
        if default not in DEVICES:
            raise _fail(source, "default", f"expected one of {', '.join(DEVICES)}, got {default!r}")
        self.default = default
        if layers is not None and not isinstance(layers, MappingABC):
            raise _fail(source, "layers", "expected a mapping of layer-name patterns to 'digital', 'aimc' or a dict")
        self._models: dict[str, NoiseModel] = {}  # noise config as given (JSON) -> its model, built once
        self._rules = [self._rule(str(pattern), value) for pattern, value in (layers or {}).items()]

    # construction --------------------------------------------------------------------------------
    def _rule(self, pattern: str, value: Any) -> _Rule:
        field = f"layers.{pattern}"
        if isinstance(value, str):
            if value not in DEVICES:
                raise _fail(self.source, field, f"expected one of {', '.join(DEVICES)}, got {value!r}")
            return _Rule(pattern, value, None)
        if not isinstance(value, MappingABC):
            raise _fail(self.source, field, f"expected 'digital', 'aimc' or a dict, got {value!r}")
        unknown = sorted(set(value) - {"device", "noise", "peripherals"})
        if unknown:
            raise _fail(self.source, f"{field}.{unknown[0]}", "unknown key (known: device, noise, peripherals)")
        device = value.get("device", "aimc" if ("noise" in value or "peripherals" in value) else None)
        if device not in DEVICES:
            raise _fail(self.source, f"{field}.device", f"expected one of {', '.join(DEVICES)}, got {device!r}")
        noise = value.get("noise")
        if noise is not None and device == "digital":
            raise _fail(self.source, f"{field}.noise", "a digital layer takes no noise model")
        periph: Any = _INHERIT
        if "peripherals" in value:
            if device == "digital":
                raise _fail(self.source, f"{field}.peripherals", "a digital layer has no analog peripherals")
            periph = _peripherals.resolve(value["peripherals"], self.source, f"{field}.peripherals")
        return _Rule(pattern, device, None if noise is None else self._model(noise, f"{field}.noise"), periph)

    def _model(self, noise: Any, field: str) -> NoiseModel:
        """The model of a rule's noise config; rules that give the same config share one."""
        if isinstance(noise, NoiseModel):
            return resolve_noise_model(noise, self.source, field)
        key = json.dumps(noise, sort_keys=True, default=repr)
        if key not in self._models:
            self._models[key] = resolve_noise_model(noise, self.source, field)
        return self._models[key]

    @classmethod
    def all_aimc(cls, source: str = "<mapping>") -> "Mapping":
        """Every GEMM layer on AIMC with the run's default noise."""
        return cls(default="aimc", source=source)

    @classmethod
    def from_dict(cls, config: MappingABC[str, Any], source: str = "<mapping>") -> "Mapping":
        if not isinstance(config, MappingABC):
            raise _fail(source, "<root>", "expected a mapping with 'default' and/or 'layers'")
        unknown = sorted(set(config) - {"default", "layers"})
        if unknown:
            raise _fail(source, unknown[0], "unknown key (known: default, layers)")
        return cls(config.get("default", "digital"), config.get("layers"), source=source)

    @classmethod
    def from_yaml(cls, path, field: str = "mapping", source: str = "<arguments>") -> "Mapping":
        """A mapping file, read with the limits of aimcemu.yamlfile; a missing file or one that is
        not a regular file is an error naming `field`."""
        config = load_yaml(path, field, source, "mapping file")
        return cls.from_dict(config, source=os.fspath(path))

    @classmethod
    def coerce(cls, mapping: Any, source: str = "<config>") -> "Mapping | None":
        """None | "all" | a Mapping | a dict | a YAML file path -> a Mapping (None stays None)."""
        if mapping is None or isinstance(mapping, Mapping):
            return mapping
        if isinstance(mapping, str) and mapping == "all":
            return cls.all_aimc(source=source)
        if isinstance(mapping, (str, os.PathLike)):
            return cls.from_yaml(mapping, "mapping", source)
        if isinstance(mapping, MappingABC):
            return cls.from_dict(mapping, source=f"{source}: mapping")
        raise _fail(source, "mapping", f"expected None, 'all', a Mapping, a dict or a YAML file, got {mapping!r}")

    def noise_models(self) -> list[tuple[NoiseModel, str]]:
        """The noise models its rules name, each with its field (`layers.<pattern>.noise`)."""
        return [(rule.model, f"layers.{rule.pattern}.noise") for rule in self._rules if rule.model is not None]

    def to_dict(self) -> dict:
        layers = {}
        for rule in self._rules:
            entry: dict[str, Any] = {"device": rule.device}
            if rule.noise is not None:
                entry["noise"] = rule.noise
            if rule.peripherals != _INHERIT:
                entry["peripherals"] = rule.peripherals
            layers[rule.pattern] = rule.device if len(entry) == 1 else entry
        return {"default": self.default, "layers": layers}

    # resolution ----------------------------------------------------------------------------------
    def resolve(self, net, default_noise: Any = None, default_peripherals: dict | None = None) -> list[Placement]:
        """One Placement per layer of `net`, in network order.  `default_noise` (a model object, a
        config or a name) is the noise of AIMC layers whose rule names none (None: pcm_like with
        its defaults); it is built at most once.  `default_peripherals` (a resolved peripherals
        config, aimcemu.peripherals.resolve) is that of AIMC layers whose rule gives none."""
        layers = net.layers  # the binding copies the list on every access
        names = [l.name for l in layers]
        has_weights = [bool(l.is_gemm) for l in layers]
        devices = [self.default] * len(layers)
        models: list[NoiseModel | None] = [None] * len(layers)
        periphs: list[Any] = [_INHERIT] * len(layers)
        for rule in self._rules:
            matched = [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, rule.pattern)]
            if not matched:
                raise _fail(self.source, f"layers.{rule.pattern}",
                            f"matches no layer of model '{net.name}' (layers: {', '.join(names)})")
            if rule.device == "aimc" and not any(has_weights[i] for i in matched):
                raise _fail(self.source, f"layers.{rule.pattern}",
                            "matches only layers without weights, which cannot run on AIMC")
            for i in matched:
                devices[i], models[i], periphs[i] = rule.device, rule.model, rule.peripherals
        fallback: NoiseModel | None = None
        configs: dict[int, dict] = {}  # id(model) -> its config, computed once per model
        placements = []
        for i, layer in enumerate(layers):
            if devices[i] == "aimc" and has_weights[i]:
                model = models[i]
                if model is None:
                    if fallback is None:
                        fallback = resolve_noise_model(DEFAULT_NOISE if default_noise is None else default_noise)
                    model = fallback
                if id(model) not in configs:
                    configs[id(model)] = model.to_dict()
                periph = default_peripherals if periphs[i] == _INHERIT else periphs[i]
                placements.append(Placement(i, layer.name, "aimc", configs[id(model)], periph, model))
            else:
                placements.append(Placement(i, layer.name, "digital"))
        return placements

    def __repr__(self) -> str:
        return f"Mapping({self.to_dict()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self.to_dict() == other.to_dict()
