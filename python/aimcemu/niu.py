"""The noise injection unit (NIU): bit-exact fixed-point noise on INT8 weights.

The NIU is the hardware block that, each inference round, reads a layer's clean INT8 weights,
injects one instance of device noise and writes the PU's weight region.  This module compiles
NIU programs from a noise-model config and runs the bit-exact model, so that Python sees exactly
the weights the FPGA would::

    from aimcemu import niu
    noisy = niu.apply(w_int8, {"model": "pcm_like"}, seed=1, chip=0, round=3, t=3600.0)

    prog = niu.compile_program({"model": "hermes"}, [w1, w2], seed=1, chip=0, round=0, t=86400.0)
    noisy1 = prog.apply(0, w1)

Chips, rounds and time follow aihwkit's program/drift semantics: programming noise and drift
exponents depend on (seed, chip, layer, weight index) only; read noise is fresh per round and
does not depend on t (sweeps over t use common random numbers).  Supported models: the PCM
family (pcm_like, hermes, state_independent, custom_drift_pcm) with a single-pair converter.
The datapath, its rounding and its differences from the float model are in
docs/niu_datapath.md.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import _core
from .noise import NoiseModel, noise_model_from_dict

_niu = _core.niu

__all__ = ["NiuProgram", "compile_program", "apply", "constants", "check_model", "check_runs_at", "check_code_tables", "check_tables_at", "max_alpha",
           "kept_memory_bytes", "release_kept_memory", "DRIFT_REFERENCE", "niu_noise_config"]

# The one drift reference the NIU runs: each device drifts from its programmed conductance
# (docs/niu_datapath.md section 3, "Physics reference").  The float64 models keep aihwkit's
# "reconverted" default; a config built for the NIU gets this one instead.  A model that asks for
# "reconverted" is refused by the NIU compiler itself (niu/program.cpp), the one place that checks.
DRIFT_REFERENCE = "programmed"


def niu_noise_config(config: Mapping[str, Any]) -> dict:
    """A noise config {"model": name, **params} as the NIU runs it: drift_reference "programmed"
    when the config does not name it (so the config stored with a run says what ran).  Every field,
    drift_reference included, is checked when the model is built and compiled for the NIU."""
    config = dict(config)
    if "drift_reference" not in config and isinstance(config.get("model"), str) \
            and _has_drift_reference(config["model"]):
        config["drift_reference"] = DRIFT_REFERENCE
    return config


def _has_drift_reference(model_name: str) -> bool:
    try:
        model_name.encode("utf-8")  # a lone surrogate: building the model names the field
        return any(row["name"] == "drift_reference" for row in _core.noise.param_table(model_name))
    except (_core.FormatError, ValueError, KeyError, UnicodeEncodeError):
        return False  # an unknown model: building it names the field


def _noise_model(noise: Any) -> NoiseModel:
    """The model object of a noise argument: a model object as is, a config dict built once, with
    the NIU's drift reference when it names none (niu_noise_config)."""
    if isinstance(noise, NoiseModel):
        return noise  # used as is: the NIU compiler refuses what it cannot run
    if hasattr(noise, "to_dict"):
        noise = noise.to_dict()
    if not isinstance(noise, Mapping) or "model" not in noise:
        raise _core.FormatError("noise config: field 'model': expected a dict with a 'model' name")
    return noise_model_from_dict(niu_noise_config(noise))


def _as_int8(weights: Any, field: str) -> np.ndarray:
    """The core's int8 rule (python/src/arrays.hpp) checked here first, so that the error names
    the layer (`field`) rather than the binding's argument."""
    array = np.asarray(weights)
    if array.dtype != np.int8:
        raise _core.FormatError(f"<memory>: field '{field}': expected a numpy int8 array, got dtype {array.dtype}")
    return np.ascontiguousarray(array)


def check_model(noise: Any) -> NoiseModel:
    """The noise model object, after the NIU compiler's check that its datapath runs it (PCM
    family, one differential pair, g_min = 0); FormatError otherwise."""
    model = _noise_model(noise)
    _niu.check_model(model.core_model)
    return model


def check_runs_at(model: NoiseModel, t: float) -> None:
    """FormatError unless the NIU compiler can make a program of `model` at `t` seconds: its
    tables (programming, drift, read noise) at t must fit the datapath's fixed-point fields (a
    t beyond the drift field's range, a noise scale of 1e300 do not).  The tables depend on the
    weights only through their abs-max: they are checked for every abs-max 1..127."""
    _niu.check_runs_at(model.core_model, float(t))


def check_code_tables(model: NoiseModel) -> None:
    """check_runs_at's part that does not depend on t: the per-code tables (programming noise,
    drift exponent) for every abs-max 1..127.  A caller with several t values runs it once and
    check_tables_at at each t."""
    _niu.check_code_tables(model.core_model)


def check_tables_at(model: NoiseModel, t: float) -> None:
    """check_runs_at's part that depends on t: t itself, the drift field and the read-noise table."""
    _niu.check_tables_at(model.core_model, float(t))


def max_alpha(absmax: int, out_bits: int = 8) -> float:
    """The largest drift-compensation alpha the NIU's back-conversion scale holds for a layer of
    clean abs-max `absmax` (docs/niu_datapath.md section 3)."""
    return float(_niu.max_alpha(int(absmax), int(out_bits)))


class NiuProgram:
    """A compiled NIU program: per-layer tables, scales and RNG streams for one (chip, round, t)."""

    def __init__(self, core_program, shapes: Sequence[tuple[int, ...]]):
        self._program = core_program
        self._shapes = list(shapes)

    @property
    def core_program(self):
        """The compiled program in the core (``_core.niu.NiuProgram``), as the emulator takes it."""
        return self._program

    @property
    def num_layers(self) -> int:
        return self._program.num_layers

    def words(self) -> np.ndarray:
        """The 32-bit word image the RTL is loaded with (docs/niu_datapath.md section 5)."""
        return self._program.words()

    def layer(self, index: int) -> dict:
        """Tables (GT, SP, MU, SN, DF, RT) and registers of one layer."""
        return self._program.layer(index)

    def apply(self, index: int, weights: Any, threads: int = 0) -> np.ndarray:
        """The NIU's noisy int8 weights for layer `index` (same shape as `weights`)."""
        clean = _as_int8(weights, f"layers[{index}].weights")
        self._check_shape(index, clean.shape)
        return _niu.apply_layer(self._program, index, clean, threads)

    def chip_state(self, index: int, weights: Any, threads: int = 0):
        """The chip half of layer `index` for these clean weights: each device's programmed
        conductance and drift exponent, which depend on (seed, chip, layer) but not on the round
        or t.  Compute it once per chip (from any of the chip's programs) and pass it to
        apply_kept() in every round: the result is apply()'s, bit for bit, at a fraction of the
        cost.  Holds 8 bytes per weight (``.nbytes``)."""
        clean = _as_int8(weights, f"layers[{index}].weights")
        self._check_shape(index, clean.shape)
        return _niu.chip_state(self._program, index, clean, threads)

    def apply_kept(self, index: int, state: Any, threads: int = 0) -> np.ndarray:
        """apply(index, weights) for the clean weights `state` was computed from, running only the
        round half (read noise, drift to t, clamping, quantisation).  FormatError (field
        'chip_state') if `state` belongs to another seed, chip, layer, noise model or size."""
        out = _niu.apply_kept(self._program, index, state, threads)
        return out.reshape(self._shapes[index]) if index < len(self._shapes) else out

    def _check_shape(self, index: int, shape: tuple[int, ...]) -> None:
        if index < len(self._shapes) and shape != self._shapes[index]:
            raise _core.FormatError(
                f"<memory>: field 'layers[{index}].weights': shape {shape} differs from the compiled {self._shapes[index]}")


def compile_program(noise: Any, layers: Sequence[Any], *, seed: int = 0, chip: int = 0, round: int = 0,
                    t: float = 0.0, alpha: float | Sequence[float] = 1.0, absmax: str = "layer",
                    out_bits: int = 8, layer_ids: Sequence[int] | None = None,
                    layer_absmax: Sequence[int] | None = None) -> NiuProgram:
    """Compiles one NIU program.

    noise:    an aimcemu.noise model object (built once, reused for every program) or a config
              {"model": name, **params} (a model is built from it for this call).
    layers:   the clean int8 weight arrays of the AIMC layers (row-major, axis 0 = out channels).
    alpha:    global drift compensation per layer (scalar or one per layer), folded into the
              back-conversion scale.
    absmax:   "layer" (aihwkit: the layer's max |code| maps to g_max) or "fixed" (127 does).
    out_bits: the PU's weight code width (2..8).
    layer_ids: RNG key of each layer (default 0, 1, ...): keep them fixed across rounds.
    layer_absmax: with absmax "layer", each layer's clean abs-max as clean_absmax gives it, for a
              caller that compiles many programs of the same clean weights and takes it once
              (a run: the emulator's Emulator.clean_absmax); default: taken from `layers` here.
              Not checked against `layers` here (that is the scan it saves): the emulator checks
              every program it writes against its clean region (FormatError on a mismatch).
    """
    model = _noise_model(noise)
    arrays = [_as_int8(w, f"layers[{i}].weights") for i, w in enumerate(layers)]
    alphas = [float(alpha)] * len(arrays) if np.isscalar(alpha) else [float(a) for a in alpha]
    ids = list(range(len(arrays))) if layer_ids is None else [int(i) for i in layer_ids]
    if len(alphas) != len(arrays) or len(ids) != len(arrays):
        raise _core.FormatError("<memory>: field 'alpha/layer_ids': need one value per layer")
    specs = [{"layer_id": ids[i], "count": int(a.size), "absmax": a_max, "alpha": alphas[i]}
             for i, (a, a_max) in enumerate(zip(arrays, _layer_absmax(arrays, absmax, layer_absmax)))]
    core = _niu.compile_program(model.core_model, specs, seed=seed, chip=chip, round=round, t=float(t),
                                out_bits=out_bits)
    return NiuProgram(core, [a.shape for a in arrays])


def _layer_absmax(arrays: list[np.ndarray], absmax: str, given: Sequence[int] | None) -> list[int]:
    """A of every layer: `given` (absmax "layer" only, one int per layer, in 1..127) or each array's."""
    if given is None:
        return [_niu.clean_absmax(a, absmax) for a in arrays]
    if absmax != "layer":
        raise _core.FormatError(f"<memory>: field 'layer_absmax': given with absmax {absmax!r}; it is the "
                                "clean abs-max of absmax 'layer'")
    values = list(given)
    if len(values) != len(arrays):
        raise _core.FormatError(f"<memory>: field 'layer_absmax': {len(values)} values for {len(arrays)} layers")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= 127:
            raise _core.FormatError(f"<memory>: field 'layer_absmax[{i}]': expected an integer in 1..127, got {value!r}")
    return [int(v) for v in values]


def apply(weights: Any, noise: Any, *, seed: int = 0, chip: int = 0, round: int = 0, t: float = 0.0,
          layer: int = 0, alpha: float = 1.0, absmax: str = "layer", out_bits: int = 8, threads: int = 0) -> np.ndarray:
    """Noisy int8 weights of one layer, exactly as the NIU writes them for (seed, chip, round, t)."""
    program = compile_program(noise, [weights], seed=seed, chip=chip, round=round, t=t, alpha=alpha,
                              absmax=absmax, out_bits=out_bits, layer_ids=[layer])
    return program.apply(0, weights, threads)


def constants() -> dict:
    """The generated NIU constants (bit widths, Gaussian table, program layout)."""
    return _niu.constants()


def kept_memory_bytes() -> int:
    """Bytes a run left for the next run of this process: its emulator's NIU chip states' memory
    (8 bytes per AIMC weight) and HBM (clean regions and round buffers), and the PU pass buffers
    of its last pass (an emulator's or `_core.run_network`'s), which the next run rewrites
    instead of faulting in fresh pages (docs/hybrid_runs.md, "Memory kept between runs")."""
    return (int(_niu.kept_chip_state_bytes()) + int(_niu.kept_pass_buffer_bytes())
            + int(_niu.kept_hbm_bytes()))


def release_kept_memory() -> int:
    """Frees the memory kept for the next run now; returns the bytes freed."""
    return (int(_niu.release_kept_chip_states()) + int(_niu.release_kept_pass_buffers())
            + int(_niu.release_kept_hbm()))
