"""A run's configuration, parsed and validated once: ``RunConfig``.

Every entry point builds one: ``aimcemu.run`` (from its arguments and/or a YAML file),
``aimcemu.sweep`` (one per grid point, while planning, so workers never check again),
``aimcemu perf --mapping`` and ``aimcemu report`` (which reads back what a results file stored).
The options, their defaults and their rules live here and nowhere else::

    cfg = RunConfig.resolve({"mapping": "all", "noise": "pcm_like", "t": "0,1h,1d", "chips": 8})
    cfg.t                      # (0.0, 3600.0, 86400.0)
    cfg.placements(net)        # where each layer of `net` runs, with its noise model object
    cfg.stored(...)            # the resolved JSON that results files keep (docs/hdf5_layout.md)

Rules (a violation raises aimcemu.FormatError naming the source and the option; the ranges
are aimcemu.validate's, listed with their reasons in docs/reliability.md):
    model, data   a regular file (None: the embedded model; its test set beside it)
    output        a results file path (None: results/<model>_<timestamp>.h5, or -2, -3, ... before
                  .h5 when that name is taken: a default name never replaces a file); never an
                  input of the run, a folder, a device or a FIFO; a trailing '/' is a folder
                  that receives the default name (aimcemu.files.output_file)
    mapping       None (all digital) | "all" | a Mapping | a dict | a YAML mapping file
    noise         the default noise of AIMC layers: {"model": name, **params}, a name, or a
                  noise model object; alone it means mapping "all"
    peripherals   the default analog tile peripherals of AIMC layers (aimcemu.peripherals): a
                  preset name, a dict, or "pcm,out_noise=0.02"; None: none; alone it means
                  mapping "all"
    t             times since programming, strictly increasing, finite, >= 0: numbers, or
                  strings with a unit s, min, h, d, y (365 d), e.g. "0,1h,1d,1y"
    chips, rounds integers in 1..2^20;  seed an integer in 0..2^64 - 1;  threads 0..4096 (0 = all
                  cores); chips x t x rounds x compensations <= 2^20 noisy rounds in one run
    drift_compensation  "none", "global", or several ("none,global", a list), each once
    backend       the PU model's kernel name (the PU model checks it)
    layers        whose activations to store: "all", "none", names (a list or "a,b"; at least one)
    A digital run (no mapping, no noise) has no noisy rounds: t, chips, rounds, seed and
    drift_compensation given to it would be ignored, so they are an error instead (NOISY_ONLY).

Noise models are built once per distinct config: the default noise here, each mapping rule's
noise in the Mapping, and every placement shares its rule's model object.
"""
from __future__ import annotations

import copy
import datetime as _dt
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping as MappingABC

import numpy as np

from . import _core, modelfile, validate
from . import peripherals as _peripherals
from . import niu
from .mapping import DEFAULT_NOISE, Mapping, Placement, resolve_noise_model
from .noise import NoiseModel
from .yamlfile import load_yaml

# The run options and their defaults, in the order the docs list them.
RUN_DEFAULTS: dict[str, Any] = {
    "model": None, "data": None, "output": None, "backend": "fast", "threads": 0, "layers": "all",
    "mapping": None, "noise": None, "peripherals": None, "t": (0.0,), "chips": 1, "rounds": 1, "seed": 0,
    "drift_compensation": "none"}
# A sweep's top-level options: the run options a task takes (threads and output are the
# sweep's to choose), activations not stored unless asked, and the grid.
SWEEP_DEFAULTS: dict[str, Any] = {
    **{key: RUN_DEFAULTS[key] for key in ("output", "model", "data", "mapping", "noise", "peripherals")}, "t": [0.0],
    **{key: RUN_DEFAULTS[key] for key in ("chips", "rounds", "seed", "drift_compensation", "backend")},
    "layers": "none", "grid": None}

DRIFT_COMPENSATIONS = ("none", "global")  # the results writer's codes (formats/results.hpp), in order
# NIU round id of the drift-compensation calibration readouts (reserved: noisy rounds use
# 0..rounds-1).  It fits the 32-bit round field of the NIU program.
CALIBRATION_ROUND = 2**32 - 1

# Options that only noisy rounds use, with the values that mean "not given".
NOISY_ONLY: dict[str, Any] = {"t": [0.0], "chips": 1, "rounds": 1, "seed": 0, "drift_compensation": "none"}

TIME_UNITS = {"": 1.0, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "y": 365.0 * 86400.0}


def _fail(source: str, field: str, what: str) -> _core.FormatError:
    return _core.FormatError(f"{source}: field '{field}': {what}")


# --- single options ---------------------------------------------------------------------------
def format_time(seconds: float) -> str:
    """A readable time: 0, 1s, 1h, 1d, 1y (largest unit that divides it), else seconds."""
    for unit in ("y", "d", "h", "min"):
        scale = TIME_UNITS[unit]
        if seconds >= scale and float(seconds / scale).is_integer():
            return f"{seconds / scale:g}{unit}"
    return f"{seconds:g}s" if seconds else "0"


def _check_niu_runs_at_every_t(noise, mapping: Mapping, times, sources: dict) -> None:
    """Every noise model of the run (the default, pcm_like when none is given, and each mapping
    rule's) compiled for the NIU at every t, before any work: a t beyond the drift field's range or
    a noise parameter whose table overflows its field would otherwise fail the run at its first
    round at that t, or a sweep at its first task there.  The error names the option (t, or the
    noise config's field) and the NIU's field."""
    default = (noise if noise is not None else resolve_noise_model(DEFAULT_NOISE),
               sources["noise"], "noise")
    models = [default] + [(model, mapping.source, rule_field) for model, rule_field in mapping.noise_models()]
    checked: set[int] = set()  # rules that give the same noise config share one model
    for model, source, noise_field in models:
        if id(model) in checked:
            continue
        checked.add(id(model))
        # The code tables (t-independent, the bulk of the work) once, then what depends on t at
        # t = 0 first: what fails there is the noise config's; what fails only later, the t's.
        checks = [(0.0, (source, noise_field), niu.check_runs_at)]
        checks += [(t, (sources["t"], "t"), niu.check_tables_at) for t in dict.fromkeys(times) if t != 0.0]
        for t, where, check in checks:
            try:
                check(model, t)
            except _core.FormatError as exc:
                inner = str(exc).removeprefix("<niu compiler>: ")
                raise _fail(*where, f"the NIU cannot run {model.model} at t = {t:g} s: {inner}") from None


def parse_times(value: Any, source: str = "<arguments>", field: str = "t") -> list[float]:
    """A list of times in seconds from numbers or strings like "0,3600" / "0,1h,1d,1y" (a list
    may mix both).  Must be finite, >= 0 and strictly increasing."""
    if _is_number(value):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = comma_items(value, source, field)
    else:
        try:
            items = list(value)
        except TypeError:
            raise _fail(source, field, f"expected a list of times, got {value!r}") from None
    times = [_one_time(item, source, field) for item in items]
    if not times:
        raise _fail(source, field, "empty: give at least one time")
    for earlier, later in zip(times, times[1:]):
        if not later > earlier:
            raise _fail(source, field, f"times must be strictly increasing ({earlier:g} s is followed by {later:g} s)")
    return times


def comma_items(text: str, source: str, field: str) -> list[str]:
    """The items of a comma-separated list, stripped; [] when there are none (",", "").  An empty
    item between others ("0,,1", "a,b,") is an error: a typo there would silently drop a value."""
    items = [part.strip() for part in text.split(",")]
    if not any(items):
        return []
    if not all(items):
        position = items.index("") + 1
        raise _fail(source, field, f"{text!r} has an empty item (item {position} of {len(items)}); "
                                   "separate the items by single commas")
    return items


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _one_time(item: Any, source: str, field: str) -> float:
    if isinstance(item, str):
        match = re.fullmatch(r"([-+0-9.eE]+)\s*(s|min|h|d|y)?", item)
        try:
            seconds = float(match.group(1)) * TIME_UNITS[match.group(2) or ""] if match else math.nan
        except ValueError:
            seconds = math.nan
        if match is None or math.isnan(seconds):
            raise _fail(source, field, f"cannot read {item!r} as a time (a number of seconds or with a unit "
                                       "s, min, h, d, y)")
    elif _is_number(item):
        seconds = validate.as_float(item, source, field)  # an int beyond the float range: FormatError, not OverflowError
    else:
        raise _fail(source, field, f"expected a number of seconds, got {item!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise _fail(source, field, f"times must be finite and >= 0, got {item!r}")
    return seconds + 0.0  # -0 is 0 (and is stored and printed as 0)


def parse_compensations(value: Any, source: str = "<arguments>", field: str = "drift_compensation") -> list[str]:
    """Drift compensation names from "none", "global", "none,global" or a list of names:
    known, distinct, at least one."""
    items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
        raise _fail(source, field, f"expected a name or a list of names ({', '.join(DRIFT_COMPENSATIONS)}), "
                                   f"got {value!r}")
    names = list(items)
    if not names:
        raise _fail(source, field, f"needs at least one of {', '.join(DRIFT_COMPENSATIONS)}")
    for name in names:
        if name not in DRIFT_COMPENSATIONS:
            raise _fail(source, field, f"expected one of {', '.join(DRIFT_COMPENSATIONS)}, got {name!r}")
    if len(set(names)) != len(names):
        raise _fail(source, field, f"{value!r} names a compensation twice")
    return names


def threads_used(requested: int) -> int:
    """The worker threads the PU and NIU models get for a requested count: the count itself, or
    for 0 the CPUs this process may run on (its affinity mask: taskset, cpusets, SLURM), as the
    core resolves 0 (_core.resolve_threads, the same function).  A run passes this count to the
    core instead of 0, so the count a results file stores (threads_used) is the one the core was
    given.  One call may still start fewer threads when it has less work to share out (fewer
    images than threads)."""
    return int(_core.resolve_threads(validate.threads(requested)))


def layer_selection(layers: Any, source: str = "<arguments>") -> str | list[str]:
    """"all", "none", or a list of layer names (a comma-separated string is split); a
    selection that names no layer (",", an empty list) is an error, not "store nothing"."""
    if isinstance(layers, str):
        layers = validate.text(layers, "layers", source)
        if layers in ("all", "none"):
            return layers
        names = comma_items(layers, source, "layers")
    elif isinstance(layers, (list, tuple)):
        names = [validate.text(name, "layers", source) for name in layers]
    else:
        raise _fail(source, "layers", f"expected 'all', 'none' or layer names, got {layers!r}")
    if not names:
        raise _fail(source, "layers", f"{layers!r} names no layer (use 'none' to store no activations, 'all' for "
                                      "every layer)")
    return names


def load_yaml_config(path, what: str = "options", source: str = "<arguments>") -> dict:
    """A YAML config file that must hold a mapping; FormatError naming the file otherwise (read
    with the limits of aimcemu.yamlfile).  `source` names where the path came from when the file
    cannot be read (the command's flag, e.g. --config)."""
    config = load_yaml(path, "config", source)
    source = os.fspath(path)
    if not isinstance(config, dict):
        raise _fail(source, "<root>", f"expected a mapping of {what}")
    for key in config:
        if not isinstance(key, str):
            raise _fail(source, repr(key), "option names are strings")
    return config


def aimc_layer_names(net, mapping: Any, noise: Any = None, source: str = "<config>") -> list[str]:
    """The names of the layers a mapping spec (None, "all", a dict, a Mapping, a YAML file) puts
    on AIMC in `net`, in network order; [] for None."""
    resolved = Mapping.coerce(mapping, source=source)
    if resolved is None:
        return []
    default = None if noise is None else resolve_noise_model(noise, source, "noise")
    return [p.name for p in resolved.resolve(net, default) if p.is_aimc]


# --- the whole configuration -----------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """Equality that treats lists, tuples and arrays of times alike."""
    sequences = (list, tuple, np.ndarray)
    if isinstance(a, sequences) or isinstance(b, sequences):
        try:
            return isinstance(a, sequences) and isinstance(b, sequences) and len(a) == len(b) \
                and all(x == y for x, y in zip(a, b))
        except (TypeError, ValueError):
            return False
    return a is b or (type(a) is type(b) and a == b)


@dataclass(frozen=True)
class RunConfig:
    """Every option of one run, validated, with defaults filled in (see the module docstring).

    ``options`` keeps the options as given after validation, in the form the results file
    stores them (t as a list of seconds, drift_compensation as a name or a list of names)."""
    model: str                          # model file path
    data: str                           # data set file path
    output: str | None                  # results file path (None: a timestamped default)
    mapping: Mapping | None             # None: a digital run
    noise: NoiseModel | None            # the default noise of AIMC layers as given (None: pcm_like)
    peripherals: dict | None            # the default peripherals of AIMC layers, resolved (None: none)
    t: tuple[float, ...]
    chips: int
    rounds: int
    seed: int
    compensations: tuple[str, ...]      # drift compensations, in round order
    backend: str
    threads: int
    layers: str | list[str]             # "all", "none" or layer names
    options: dict = field(repr=False, compare=False, default_factory=dict)
    sources: dict = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def resolve(cls, config: MappingABC | str | os.PathLike | None = None,
                explicit: MappingABC[str, Any] | None = None, source: str | None = None,
                explicit_sources: MappingABC[str, str] | None = None) -> "RunConfig":
        """Defaults, then `config` (a dict, or a YAML file), then the `explicit` options that
        differ from their defaults (aimcemu.run's arguments).  `source` names a dict config in
        errors (default "<config>"); `explicit_sources` names explicit options (the command's
        flags, e.g. {"noise": "--noise"}; default "<arguments>")."""
        options, sources = _merge(config, dict(explicit or {}), source, dict(explicit_sources or {}))
        for key in ("model", "data", "output"):
            if options[key] is not None:
                if not isinstance(options[key], (str, os.PathLike)):
                    raise _fail(sources[key], key, f"expected a path, got {options[key]!r}")
                options[key] = validate.text(os.fspath(options[key]), key, sources[key])
        model, data = modelfile.locate_inputs(options["model"], options["data"], sources)
        return cls._validated(options, sources, model, data)

    @classmethod
    def _validated(cls, options: dict, sources: dict, model: str, data: str) -> "RunConfig":
        def check(key: str, rule) -> int:
            options[key] = rule(options[key], key, sources[key])
            return options[key]

        if not isinstance(options["backend"], str):
            raise _fail(sources["backend"], "backend", "must be a name (the PU model checks which)")
        validate.text(options["backend"], "backend", sources["backend"])
        if hasattr(_core, "check_backend"):  # a core without the PU model runs no pass at all
            _core.check_backend(options["backend"], sources["backend"], "backend")
        threads, chips, rounds, seed = check("threads", validate.threads), check("chips", validate.chips), \
            check("rounds", validate.rounds), check("seed", validate.seed)
        names = parse_compensations(options["drift_compensation"], sources["drift_compensation"])
        options["drift_compensation"] = names[0] if len(names) == 1 else names
        options["t"] = parse_times(options["t"], sources["t"], "t")
        noise = None if options["noise"] is None else resolve_noise_model(options["noise"], sources["noise"], "noise")
        periph = _peripherals.resolve(options["peripherals"], sources["peripherals"], "peripherals")
        options["peripherals"] = periph
        mapping = options["mapping"]
        if mapping is None and (noise is not None or periph is not None):
            mapping = "all"  # a noise or peripherals alone put every GEMM layer on AIMC
        mapping = Mapping.coerce(mapping, sources["mapping"])
        if mapping is None:
            _refuse_ignored_options(options, sources)
        else:
            validate.noisy_rounds(1, len(options["t"]), 1, 1, sources["t"])  # too many times: t's source
            validate.noisy_rounds(chips, len(options["t"]), rounds, len(names), sources["chips"])
            _check_niu_runs_at_every_t(noise, mapping, options["t"], sources)
        layers = layer_selection(options["layers"], sources["layers"])
        return cls(model=model, data=data, output=None if options["output"] is None else os.fspath(options["output"]),
                   mapping=mapping, noise=noise, peripherals=periph, t=tuple(options["t"]), chips=chips, rounds=rounds, seed=seed,
                   compensations=tuple(names), backend=options["backend"], threads=threads,
                   layers=layers, options=options, sources=sources)

    # derived -----------------------------------------------------------------------------------
    @property
    def drift_compensation(self) -> str | list[str]:
        """The name, or the list of names when the run covers several (as it was given)."""
        return self.compensations[0] if len(self.compensations) == 1 else list(self.compensations)

    @property
    def threads_used(self) -> int:
        """The worker threads this run's PU and NIU models use (threads, 0 resolved to the
        machine's CPUs: threads_used()), read on the machine that runs it."""
        return threads_used(self.threads)

    def stored_layers(self, net_layers) -> str | list[str]:
        """The layer selection in one form for the same selection, as results files store it:
        "none", "all" (also for a list that names every layer), or the names in network order,
        each once.  The names were checked against the network (runner.stored_layer_names)."""
        if self.layers in ("all", "none"):
            return self.layers
        chosen = set(self.layers)
        names = [layer.name for layer in net_layers if layer.name in chosen]
        return "all" if len(names) == len(net_layers) else names

    @property
    def noisy(self) -> bool:
        """Whether the run has noisy rounds (a mapping puts layers on AIMC)."""
        return self.mapping is not None

    def with_options(self, output=None, threads: int | None = None) -> "RunConfig":
        """The same configuration writing to `output` with `threads` worker threads (what a
        sweep's worker changes; everything else was checked when the sweep was planned)."""
        changes: dict[str, Any] = {}
        if output is not None:
            changes["output"] = os.fspath(output)
        if threads is not None:
            changes["threads"] = validate.threads(threads)
        return replace(self, **changes, options={**self.options, **changes})

    def placements(self, net) -> list[Placement] | None:
        """Where each layer of `net` runs (None for a digital run): the mapping resolved on the
        network, with the default noise (pcm_like when none was given)."""
        if self.mapping is None:
            return None
        return self.mapping.resolve(net, self.noise, self.peripherals)

    def round_coordinates(self) -> list[tuple[int, int, float, str]]:
        """(NIU round id, chip, t, drift compensation) of every noisy round, compensation-major:
        for compensation, for chip, for t, for round.  The file's round index is the position."""
        if not self.noisy:
            return []
        return [(r, chip, t, name) for name in self.compensations for chip in range(self.chips) for t in self.t
                for r in range(self.rounds)]

    @property
    def output_named_by_default(self) -> bool:
        """Whether the results file gets the default name (no output, or a folder ending in '/'):
        such a name never replaces a file; the run claims a free one when it writes
        (aimcemu.files.claim_new_file: NAME, NAME-2, NAME-3, ...)."""
        return self.output is None or self.output.endswith(("/", os.sep))

    def output_path(self, model_name: str) -> Path:
        """The results file: the given output, or results/<model>_<timestamp>.h5; a given output
        is checked (aimcemu.files.output_file): never an input of this run (model, data set,
        config or mapping file, compared by inode), a folder, a device or a FIFO, and a trailing
        '/' is a folder that receives the default name.  Nothing is created here: a default name
        is only a candidate until the run claims it (output_named_by_default), and the folder is
        created then."""
        from .files import check_folder_creatable, output_file

        def default_name() -> str:
            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name) or "model"
            return f"{safe}_{stamp}.h5"

        if self.output is None:
            check_folder_creatable("results", "output", self.sources.get("output", "<arguments>"))
            return Path("results") / default_name()
        return output_file(self.output, "output", self.sources.get("output", "<arguments>"),
                           inputs=self.input_files(), default_name=default_name, create_folder=False)

    def input_files(self) -> list[tuple[str, str]]:
        """(option, path) of every file this run reads: the model, the data set, config files and
        the mapping file."""
        inputs = [("model", self.model), ("data", self.data)]
        inputs += [("config", path) for path in sorted(set(self.sources.values())) if os.path.isfile(path)]
        if self.mapping is not None and os.path.isfile(self.mapping.source):
            inputs.append(("mapping", self.mapping.source))
        return inputs

    def stored(self, net, out_path: Path, images: int, placements: list[Placement] | None,
               noisy_rounds: int) -> dict:
        """The full resolved configuration a results file stores: every option with defaults
        filled, the mapping resolved to one entry per layer, and the noisy-round count."""
        from . import __version__

        aimc = [p for p in placements or [] if p.is_aimc]
        if self.noise is not None:
            noise = self.noise.to_dict()
        elif aimc:
            noise = aimc[0].noise if all(p.noise == aimc[0].noise for p in aimc) else None
        else:
            noise = None
        return {
            **{k: copy.deepcopy(v) for k, v in self.options.items() if k not in ("mapping", "noise")},
            # The selection in one form (stored_layers), so that "fc,conv1" from the command line
            # and ["conv1", "fc"] from a sweep are stored alike.
            "layers": self.stored_layers(net.layers),
            # threads stays as requested (0: all cores, so that rerunning this config behaves the
            # same); threads_used says what ran on this machine.
            "threads_used": self.threads_used,
            "model": self.model, "data": self.data, "output": os.fspath(out_path), "model_name": net.name,
            "images": int(images), "mapping": None if self.mapping is None else self.mapping.to_dict(),
            "mapping_source": None if self.mapping is None else self.mapping.source, "noise": noise,
            "noisy_rounds": noisy_rounds,
            "placements": None if placements is None else
            {p.name: {"device": p.device, **({"noise": p.noise, "peripherals": p.peripherals} if p.is_aimc else {})}
             for p in placements},
            "calibration_round": CALIBRATION_ROUND if "global" in self.compensations else None,
            "aimcemu_version": __version__, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        }


def _refuse_ignored_options(options: dict, sources: dict) -> None:
    """A digital run (no mapping, no noise) has no noisy rounds: an option that only noisy
    rounds use would be ignored without a word, so it is an error instead."""
    for key, unused in NOISY_ONLY.items():
        if not _same(options[key], unused):
            raise _fail(sources[key], key, f"this run is digital (no mapping and no noise), so it has no noisy rounds "
                                           f"and {key} would be ignored; give a mapping or a noise model, or leave "
                                           f"{key} out")


def _merge(config, explicit: dict, source: str | None, explicit_sources: dict) -> tuple[dict, dict]:
    """(options, where each came from): defaults, then the config, then explicit options."""
    options = dict(RUN_DEFAULTS)
    sources = {key: "<arguments>" for key in RUN_DEFAULTS}
    if isinstance(config, (str, os.PathLike)):
        config_source = os.fspath(config)
        config = load_yaml_config(config, source=explicit_sources.get("config", "<arguments>"))
    elif config is None or isinstance(config, MappingABC):
        config_source = source or "<config>"
    else:
        raise _fail(explicit_sources.get("config", "<arguments>"), "config",
                    f"expected a dict of run options or a YAML file path, got {validate.short_repr(config)}")
    if config:
        for key in config:
            if not isinstance(key, str):
                raise _fail(config_source, validate.short_repr(key), "option names are strings")
        unknown = sorted(set(config) - set(RUN_DEFAULTS))
        if unknown:
            raise _fail(config_source, unknown[0], f"unknown option (known: {', '.join(RUN_DEFAULTS)})")
        options.update(config)
        sources.update({key: config_source for key in config})
    unknown = sorted(set(explicit) - set(RUN_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown run option {unknown[0]!r}")
    for key, value in explicit.items():
        if not _same(value, RUN_DEFAULTS[key]):
            options[key], sources[key] = value, explicit_sources.get(key, "<arguments>")
    return options, sources
