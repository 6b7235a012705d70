"""What one run produced, as aimcemu.run returns it: ``RunSummary`` (and ``LayerSummary``).

The results file holds everything; the summary is the small part a caller looks at first:
the accuracy of the noise-free reference and of every noisy round with its coordinates, and
accuracy vs t as a table over chips.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .config import format_time


@dataclass
class LayerSummary:
    name: str
    kind: str
    shape: tuple[int, int, int]
    stored: bool
    device: str = "digital"          # "digital" or "aimc"
    noise_model: str | None = None   # the AIMC layer's noise model name


@dataclass
class RunSummary:
    """What one run produced; ``os.fspath(summary)`` is the results file.

    Noisy rounds are listed in file order (position k is the file's round k) with their
    coordinates round_chip, round_t, niu_round (the NIU round id 0..rounds-1, the read-noise key:
    it repeats across chips and t, as the file's niu_round does) and round_compensation.
    ``round_index`` is niu_round's old name, kept for older callers.  ``drift_alpha[layer]`` is the [chip][t]
    global-compensation factor of each AIMC layer (all 1.0 when "global" is not among the
    compensations; rounds under "none" always use 1.0).  ``drift_compensation`` is the name, or
    the list of names when the run covers several.  ``drift_alpha_capped`` lists the global
    alphas larger than the NIU's back-conversion holds (niu.max_alpha), one {"layer", "chip",
    "t", "alpha", "limit"} each: the rounds under "global" at that chip and t ran with the
    limit, not the alpha, so their accuracy is not that of full compensation."""
    path: str
    model: str
    images: int
    accuracy: float                 # top-1 of the noise-free reference
    round_accuracy: list[float]     # per noisy round (empty for a digital run)
    layers: list[LayerSummary] = field(default_factory=list)
    inference_s: float = 0.0
    write_s: float = 0.0            # the results file: the reference, the wait for the round writer, commit
    round_chip: list[int] = field(default_factory=list)
    round_t: list[float] = field(default_factory=list)
    niu_round: list[int] = field(default_factory=list)
    drift_alpha: dict[str, list[list[float]]] = field(default_factory=dict)
    drift_compensation: str | list[str] = "none"
    noise_s: float = 0.0
    round_compensation: list[str] = field(default_factory=list)
    drift_alpha_capped: list[dict] = field(default_factory=list)

    def __fspath__(self) -> str:
        return self.path

    @property
    def round_index(self) -> list[int]:
        """niu_round under its old name, which read like the round's position (it is not: it
        repeats across chips and t)."""
        warnings.warn("RunSummary.round_index is niu_round (the NIU round id, not the round's position); "
                      "use niu_round", DeprecationWarning, stacklevel=2)
        return self.niu_round

    def compensations(self) -> list[str]:
        """The drift compensations of the run, in round order."""
        return [self.drift_compensation] if isinstance(self.drift_compensation, str) else list(self.drift_compensation)

    def capped_at(self, compensation: str, t: float) -> list[dict]:
        """The capped alphas behind the rounds of `compensation` at `t` (only "global" has any)."""
        if compensation != "global":
            return []
        return [c for c in self.drift_alpha_capped if c["t"] == t]

    def accuracy_vs_t(self) -> list[dict]:
        """One row per (drift compensation, t), compensation-major: accuracy averaged over the
        rounds of each chip, then mean, std (sample std over chips, ddof=1; NaN for one chip, as
        aimcemu.analysis.accuracy_vs_t gives: one chip has no spread to estimate), min and max
        over chips."""
        rows = []
        acc = np.asarray(self.round_accuracy, dtype=np.float64)
        chips = np.asarray(self.round_chip)
        times = np.asarray(self.round_t, dtype=np.float64)
        compensation = np.asarray(self.round_compensation or [self.compensations()[0]] * len(acc))
        for name in self.compensations():
            for t in sorted(set(self.round_t)):
                here = (times == t) & (compensation == name)
                per_chip = np.array([acc[here & (chips == c)].mean() for c in sorted(set(chips[here]))])
                rows.append({"drift_compensation": name, "t": float(t), "chips": int(per_chip.size),
                             "mean": float(per_chip.mean()),
                             "std": float(per_chip.std(ddof=1)) if per_chip.size > 1 else float("nan"),
                             "min": float(per_chip.min()), "max": float(per_chip.max())})
        return rows

    def format_accuracy_table(self) -> str:
        """Accuracy vs t as a text table, one block per drift compensation (the reference
        accuracy in the heading).  A row whose rounds ran with capped alphas ends in "alpha capped"
        and a note after the table says how many."""
        lines = [f"accuracy vs t (drift compensation: {', '.join(self.compensations())}; "
                 f"noise-free reference {self.accuracy:.4f})",
                 f"{'compensation':<12}  {'t':>6}  {'t [s]':>12}  {'chips':>5}  {'mean':>7}  {'std':>7}  "
                 f"{'min':>7}  {'max':>7}"]
        for row in self.accuracy_vs_t():
            std = f"{row['std']:>7.4f}" if row["chips"] > 1 else f"{'n/a':>7}"  # one chip: no spread
            capped = self.capped_at(row["drift_compensation"], row["t"])
            lines.append(f"{row['drift_compensation']:<12}  {format_time(row['t']):>6}  {row['t']:>12.6g}  "
                         f"{row['chips']:>5}  {row['mean']:>7.4f}  {std}  {row['min']:>7.4f}  "
                         f"{row['max']:>7.4f}" + ("  alpha capped" if capped else ""))
        if self.drift_alpha_capped:
            lines.append(f"alpha capped: {len(self.drift_alpha_capped)} (layer, chip, t) alpha(s) exceeded what the "
                         "NIU's back-conversion holds (niu.max_alpha) and ran at that limit: those rows are not "
                         "fully compensated (drift_alpha_capped)")
        return "\n".join(lines)
