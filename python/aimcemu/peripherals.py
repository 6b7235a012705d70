"""Analog tile peripherals of AIMC layers: DAC, output noise, output bound and ADC.

A peripherals config follows aihwkit's ``IOParameters`` where they overlap (docs/peripherals.md
lists every difference)::

    {"inp_res": 1/126, "inp_bound": 1.0, "out_noise": 0.06, "out_bound": 12.0, "out_res": 1/510,
     "noise_management": "abs_max", "bound_management": "none"}

    inp_res, out_res   DAC / ADC resolution over [-bound, bound]: 1/steps (<= 1) or a number of
                       steps (> 1), as in aihwkit, also as the text "1/64" (YAML reads 1/64 as
                       text); None = an ideal converter.  The steps must be a whole number: at
                       most 254 for the DAC (its codes travel through the PU's INT8 GEMM), 2^20
                       for the ADC, which needs a finite out_bound.
    inp_bound          DAC range in units of the input's full scale (> 0)
    out_noise          std of the additive Gaussian output noise, in units of a full-scale
                       output (s_w * s_x accumulator units: largest |w| times the input's full
                       scale), >= 0
    out_bound          ADC range (clipping), same units, > 0; None = unbounded
    noise_management   "abs_max" (the input's full scale is its largest |x|, per image) or
                       "none" (the INT8 full scale, 128)
    bound_management   "none" only: aihwkit's iterative re-run of a clipped MVM is not emulated

A config is a preset name ("aihwkit": IOParameters' defaults; "pcm": aihwkit's StandardIOParameters,
its StandardHWATrainingPreset's 254 DAC/ADC steps, out_noise 0.04, out_bound 10; "ideal"), a dict (optionally with "preset" and
overrides), or the CLI form "pcm,out_noise=0.02".  ``None`` means no peripherals at all.  Bad
settings raise aimcemu.FormatError naming the source, the layer and the field.
"""
from __future__ import annotations

import math
from typing import Any, Mapping as MappingABC

from . import _core
from .validate import as_float

AIHWKIT_DEFAULT = {"inp_res": 1 / 126, "inp_bound": 1.0, "out_noise": 0.06, "out_bound": 12.0,
                   "out_res": 1 / 510, "noise_management": "abs_max", "bound_management": "none"}
PRESETS: dict[str, dict] = {
    "ideal": {"inp_res": None, "inp_bound": 1.0, "out_noise": 0.0, "out_bound": None, "out_res": None,
              "noise_management": "abs_max", "bound_management": "none"},
    "aihwkit": AIHWKIT_DEFAULT,
    "pcm": {**AIHWKIT_DEFAULT, "inp_res": 1 / 254, "out_res": 1 / 254, "out_noise": 0.04, "out_bound": 10.0},
}
KEYS = tuple(AIHWKIT_DEFAULT)
NOISE_MANAGEMENTS = ("abs_max", "none")
# The settings whose values are words; every other setting is a number (or none: ideal).
TEXT_KEYS = ("noise_management", "bound_management")


def _fail(source: str, field: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"{source}: field '{field}': {what}")


def parse_cli(text: str, source: str = "--peripherals", field: str = "") -> dict:
    """'pcm' / 'aihwkit,out_noise=0.02' / 'out_noise=0.1,out_bound=8' -> a config dict.  Errors
    name `source` and the setting, under `field` when given (as resolve names it)."""
    def name(key: str) -> str:
        return f"{field}.{key}" if field else key

    config: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            if "preset" in config:
                raise _fail(source, name("preset"), f"two presets given ({config['preset']!r}, {part!r})")
            config["preset"] = part
            continue
        key, value = (s.strip() for s in part.split("=", 1))
        if key in TEXT_KEYS:
            # "none" is one of these settings' values (noise_management=none), not "no value".
            config[key] = value
        elif value.lower() in ("none", "null", ""):
            config[key] = None  # a numeric setting without a value: ideal (no DAC, bound, ADC)
        else:
            config[key] = parse_number(value, source, name(key))
    return config


def parse_number(text: str, source: str, field: str) -> float:
    """A number written as text: "0.5", or a fraction "1/126" as aihwkit writes resolutions (the
    CLI form, and a resolution in YAML, where 1/64 is a string)."""
    try:
        num, slash, den = text.partition("/")
        return float(num) / float(den) if slash else float(num)  # "1/" is no number, not 1
    except (ValueError, ZeroDivisionError):
        raise _fail(source, field, f"expected a number, got {text!r}") from None


def resolve(config: Any, source: str = "<config>", field: str = "peripherals") -> dict | None:
    """The full peripherals config (every key of KEYS, aihwkit's names) of a preset name, a dict
    or a CLI string; None stays None.  Checked here and by the core (FormatError naming
    source and field.key)."""
    if config is None:
        return None
    if isinstance(config, str):
        config = parse_cli(config, source, field)
    if not isinstance(config, MappingABC):
        raise _fail(source, field, f"expected a preset name ({', '.join(PRESETS)}) or a dict, got {config!r}")
    config = dict(config)
    preset = config.pop("preset", None)
    if preset is not None and preset not in PRESETS:
        raise _fail(source, f"{field}.preset", f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    unknown = sorted(set(config) - set(KEYS))
    if unknown:
        raise _fail(source, f"{field}.{unknown[0]}", f"unknown setting (known: preset, {', '.join(KEYS)})")
    out = {**PRESETS[preset or "ideal"], **config}
    for key in ("inp_bound", "out_noise"):
        out[key] = _number(out[key], source, f"{field}.{key}")
    for key in ("inp_res", "out_res"):  # "1/64" too: YAML reads a fraction as a string
        value = out[key]
        if isinstance(value, str):
            value = parse_number(value, source, f"{field}.{key}")
        out[key] = None if value is None else _number(value, source, f"{field}.{key}")
    out["out_bound"] = None if out["out_bound"] is None else _number(out["out_bound"], source, f"{field}.out_bound")
    if out["out_bound"] is not None and math.isinf(out["out_bound"]):  # the core reads inf as null's "unbounded"
        raise _fail(source, f"{field}.out_bound", f"{out['out_bound']!r} is not a bound; leave it null for an "
                                                  "unbounded output")
    if out["noise_management"] not in NOISE_MANAGEMENTS:
        raise _fail(source, f"{field}.noise_management",
                    f"expected one of {', '.join(NOISE_MANAGEMENTS)}, got {out['noise_management']!r}")
    if out["bound_management"] != "none":
        raise _fail(source, f"{field}.bound_management",
                    f"only 'none' is emulated (aihwkit's iterative bound management re-runs a clipped MVM "
                    f"with a smaller input scale), got {out['bound_management']!r}")
    _core.niu.check_peripherals(core_settings(out, source, field), source, field)
    return out


def _number(value: Any, source: str, field: str) -> float:
    """A setting's number as a float (inf and NaN pass: the core's check names what they mean there)."""
    return as_float(value, source, field)


# The most steps each converter takes (the core's limits), by its resolution's key.
def _max_steps(key: str) -> int:
    return {"inp_res": _core.niu.PERIPH_MAX_INP_STEPS, "out_res": _core.niu.PERIPH_MAX_OUT_STEPS}[key]


def steps_of(res: float | None, source: str, field: str, most: int) -> int:
    """aihwkit's resolution (1/steps, or steps when > 1) as a whole number of steps, at most `most`;
    0 = ideal."""
    if res is None:
        return 0
    if math.isnan(res):
        raise _fail(source, field, "is NaN")
    if res <= 0:
        raise _fail(source, field, f"zero or negative levels ({res!r}); leave it null for an ideal converter "
                                   "(aihwkit reads <= 0 as ideal, we refuse it as a likely mistake)")
    steps = res if res > 1 else 1.0 / res
    if not steps < most + 0.5:  # also infinity (1/res of a subnormal res, or res itself); rounded below
        raise _fail(source, field, f"expected at most {most} steps (1/{most} or {most}), got {res!r} ({steps:g} steps)")
    whole = round(steps)
    # 1/steps held in float32 (what an aihwkit config holds) comes back within 2^-24 (6e-8) of its
    # count, relatively; 1.5e-7 leaves room for that and still refuses a half step at 2^20 steps.
    if whole < 1 or abs(steps - whole) > 1.5e-7 * steps:
        raise _fail(source, field, f"expected 1/steps or steps for a whole number of steps, got {res!r} "
                                   f"({steps:g} steps)")
    return int(whole)


def core_settings(config: dict, source: str = "<config>", field: str = "peripherals") -> dict:
    """The settings dict aimcemu._core.niu.Peripherals takes, from a resolved config."""
    return {"inp_steps": steps_of(config["inp_res"], source, f"{field}.inp_res", _max_steps("inp_res")),
            "inp_bound": config["inp_bound"], "out_noise": config["out_noise"],
            "out_bound": math.inf if config["out_bound"] is None else config["out_bound"],
            "out_steps": steps_of(config["out_res"], source, f"{field}.out_res", _max_steps("out_res")),
            "noise_management": config["noise_management"]}


def describe(config: dict | None) -> str:
    """A short label: 'none', 'ideal', or the non-ideal settings."""
    if config is None:
        return "none"
    parts = []
    for key in ("inp_res", "out_res"):
        if config[key] is not None:
            parts.append(f"{key.split('_')[0]} {steps_of(config[key], '', key, _max_steps(key))} steps")
    if config["out_noise"]:
        parts.append(f"out_noise {config['out_noise']:g}")
    if config["out_bound"] is not None:
        parts.append(f"out_bound {config['out_bound']:g}")
    return ", ".join(parts) or "ideal"
