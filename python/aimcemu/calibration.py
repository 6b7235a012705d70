"""Global drift compensation of a run (aihwkit's GlobalDriftCompensation), done in the NIU.

Per chip, the AIMC layers are read out once at t = 0 (the baseline) and once at every t of the
run, in the reserved calibration round; alpha = baseline / readout(t), both floored at the
noise models' READOUT_FLOOR, is folded into the NIU's back-conversion scale of every round
under "global".  An alpha larger than that scale holds (niu.max_alpha) is capped, with a
warning and an entry in the results file's config.  docs/hybrid_runs.md explains the choices.
"""
from __future__ import annotations

import os
import sys
import warnings

from .config import RunConfig
from .noise import READOUT_FLOOR
from .rounds import NoisyWeights

Alphas = dict[int, list[list[float]]]  # layer index -> alpha[chip][t index]


def calibrate(noisy: NoisyWeights, cfg: RunConfig) -> tuple[Alphas, list[dict]]:
    """({layer index: alpha[chip][t index]} of every AIMC layer under global compensation (all
    1.0 when the run has none), the capped alphas).  The readouts are taken once per (chip, t)
    whatever the number of compensations."""
    layers = sorted(noisy.clean)
    if "global" not in cfg.compensations:
        return {i: [[1.0] * len(cfg.t) for _ in range(cfg.chips)] for i in layers}, []
    alphas: Alphas = {i: [] for i in layers}
    for chip in range(cfg.chips):
        baseline = noisy.readout(chip, 0.0)
        per_t = [drift_alpha(noisy, chip, t, baseline) for t in cfg.t]
        for i in layers:
            alphas[i].append([a[i] for a in per_t])
    return alphas, cap_alphas(noisy, alphas, list(cfg.t))


def drift_alpha(noisy: NoisyWeights, chip: int, t: float, baseline: dict[int, float]) -> dict[int, float]:
    """alpha = baseline / readout(t) per AIMC layer, both floored at READOUT_FLOOR (not yet
    clamped to what the NIU holds: see cap_alphas)."""
    readout = noisy.readout(chip, t)
    return {i: max(baseline[i], READOUT_FLOOR) / max(readout[i], READOUT_FLOOR) for i in readout}


def cap_alphas(noisy: NoisyWeights, alphas: Alphas, times: list[float]) -> list[dict]:
    """Clamps every alpha (in place) to its layer's NIU limit; returns what was capped."""
    capped = []
    for i, per_chip in alphas.items():
        limit = noisy.alpha_limit(i)
        for chip, per_t in enumerate(per_chip):
            for k, alpha in enumerate(per_t):
                if alpha > limit:
                    capped.append({"layer": noisy.names[i], "chip": chip, "t": times[k], "alpha": alpha,
                                   "limit": limit})
                    per_t[k] = limit
    if capped:
        worst = max(capped, key=lambda c: c["alpha"] / c["limit"])
        warnings.warn(f"drift compensation: {len(capped)} alpha(s) exceed what the NIU's back-conversion holds and "
                      f"were capped (largest: layer {worst['layer']}, chip {worst['chip']}, t={worst['t']:g} s, "
                      f"alpha {worst['alpha']:.4g} > {worst['limit']:.4g}); listed in the run summary's and the "
                      f"config's drift_alpha_capped", RuntimeWarning, stacklevel=_caller_outside_package())
    return capped


def _caller_outside_package() -> int:
    """The stacklevel of warnings.warn, called from the caller of this function, that names the
    first frame outside the aimcemu package: the user's aimcemu.run(...) line, whichever entry
    point (run, execute, a sweep) led here."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def round_alpha(alphas: Alphas, layer: int, chip: int, t_index: int, compensation: str) -> float:
    """The factor folded into a round's NIU program: 1 under "none", the calibrated one under "global"."""
    return alphas[layer][chip][t_index] if compensation == "global" else 1.0
