"""Hybrid layer mappings: which layers run digitally on the PU and which on AIMC tiles.

A mapping puts every GEMM layer (conv, linear, average pool run as a GEMM) either on the PU's
digital INT8 datapath or on AIMC, where an NIU rewrites its weights with one noise instance per
inference round.  Each AIMC layer names its noise model; layers without one use the run's default
noise (``aimcemu.run(noise=...)``).  Layers without weights (max pool, add) are always digital.

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

Rules (each violation raises aimcemu.FormatError naming the source and the field): a pattern
that matches no layer, or only layers without weights while asking for AIMC, is an error; the
device is "digital" or "aimc"; a noise config must name a known model with known parameters and
one the NIU supports.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Any, Mapping as MappingABC

import numpy as np

from . import _core

DEVICES = ("digital", "aimc")
DEFAULT_NOISE = {"model": "pcm_like"}


def _fail(source: str, field: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"{source}: field '{field}': {what}")


def resolve_noise(noise: Any, source: str = "<config>", field: str = "noise") -> dict:
    """A noise config {"model": name, **params} with every default filled in, from a dict or a
    noise-model object; unknown models or parameters raise FormatError naming source and field."""
    from . import noise as noise_models

    if hasattr(noise, "to_dict"):
        noise = noise.to_dict()
    if isinstance(noise, str):
        noise = {"model": noise}
    if not isinstance(noise, MappingABC):
        raise _fail(source, field, f"expected a noise model name or a dict with 'model', got {noise!r}")
    for key in noise:
        if not isinstance(key, str):
            raise _fail(source, field, f"parameter names are strings, got {key!r}")
    if "model" in noise and not isinstance(noise["model"], str):
        raise _fail(source, f"{field}.model", f"expected a noise model name, got {noise['model']!r}")
    try:
        resolved = noise_models.noise_model_from_dict(dict(noise)).to_dict()
        _check_niu_supports(resolved)
    except _core.FormatError as exc:
        raise _fail(source, field, str(exc)) from None
    return resolved


def _check_niu_supports(noise: dict) -> None:
    """AIMC weights come from the NIU: compiling a one-weight program is the NIU compiler's own
    check of the model and its parameters (no list of supported models is kept here)."""
    from . import niu

    niu.compile_program(noise, [np.ones(1, np.int8)])


@dataclass(frozen=True)
class Placement:
    """Where one layer of a network runs: its index and name, "digital" or "aimc", and for AIMC
    layers the resolved noise config (defaults filled)."""
    index: int
    name: str
    device: str
    noise: dict | None = None

    @property
    def is_aimc(self) -> bool:
        return self.device == "aimc"


@dataclass(frozen=True)
class _Rule:
    pattern: str
    device: str
    noise: Any  # None: the run's default noise


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
        unknown = sorted(set(value) - {"device", "noise"})
        if unknown:
            raise _fail(self.source, f"{field}.{unknown[0]}", "unknown key (known: device, noise)")
        device = value.get("device", "aimc" if "noise" in value else None)
        if device not in DEVICES:
            raise _fail(self.source, f"{field}.device", f"expected one of {', '.join(DEVICES)}, got {device!r}")
        noise = value.get("noise")
        if noise is not None and device == "digital":
            raise _fail(self.source, f"{field}.noise", "a digital layer takes no noise model")
        if noise is not None:
            noise = resolve_noise(noise, self.source, f"{field}.noise")
        return _Rule(pattern, device, noise)

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
        """A mapping file, read with the limits of aimcemu.validate.load_yaml_file."""
        from . import validate

        config = validate.load_yaml_file(path, field, source, "mapping file")
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

    def to_dict(self) -> dict:
        layers = {}
        for rule in self._rules:
            layers[rule.pattern] = rule.device if rule.noise is None else {"device": rule.device, "noise": rule.noise}
        return {"default": self.default, "layers": layers}

    # resolution ----------------------------------------------------------------------------------
    def resolve(self, net, default_noise: Any = None) -> list[Placement]:
        """One Placement per layer of `net`, in network order.  `default_noise` is the noise of
        AIMC layers whose rule names none (None: pcm_like with its defaults)."""
        layers = net.layers  # the binding copies the list on every access
        names = [l.name for l in layers]
        has_weights = [bool(l.is_gemm) for l in layers]
        devices = [self.default] * len(layers)
        noises: list[Any] = [None] * len(layers)
        for rule in self._rules:
            matched = [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, rule.pattern)]
            if not matched:
                raise _fail(self.source, f"layers.{rule.pattern}",
                            f"matches no layer of model '{net.name}' (layers: {', '.join(names)})")
            if rule.device == "aimc" and not any(has_weights[i] for i in matched):
                raise _fail(self.source, f"layers.{rule.pattern}",
                            "matches only layers without weights, which cannot run on AIMC")
            for i in matched:
                devices[i], noises[i] = rule.device, rule.noise
        fallback = None
        placements = []
        for i, layer in enumerate(layers):
            if devices[i] == "aimc" and has_weights[i]:
                noise = noises[i]
                if noise is None:
                    if fallback is None:
                        fallback = resolve_noise(DEFAULT_NOISE if default_noise is None else default_noise)
                    noise = fallback
                placements.append(Placement(i, layer.name, "aimc", noise))
            else:
                placements.append(Placement(i, layer.name, "digital"))
        return placements

    def __repr__(self) -> str:
        return f"Mapping({self.to_dict()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self.to_dict() == other.to_dict()
