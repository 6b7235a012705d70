"""How much do DACs, ADCs and output noise cost?  Accuracy of a hybrid run vs ADC levels.

    python examples/peripherals_study.py [--model FILE] [--chips 6] [--plot docs/img/peripherals_accuracy.png]

Every conv/linear layer of the model (default: the embedded one) runs on AIMC tiles with aihwkit's
PCM peripherals (254 DAC steps, out_bound 10) while the ADC's levels go from 16 to 1024 and the
output noise from 0 to 0.2 (a full-scale output is 1), with weight noise off (pcm_like with every
noise scale 0) and on (pcm_like at t = 1 h).  Each point is the mean accuracy over chips, the
error bar one standard deviation over chips.  Prints the table and writes the figure that
docs/peripherals.md shows."""
import argparse
import tempfile
from pathlib import Path

import numpy as np

import aimcemu

LEVELS = [16, 32, 64, 128, 256, 512, 1024]
OUT_NOISE = [0.0, 0.04, 0.1, 0.2]
WEIGHT_NOISE = {
    "weight noise off": ({"model": "pcm_like", "prog_noise_scale": 0.0, "read_noise_scale": 0.0, "drift_scale": 0.0}, 0.0),
    "weight noise on (pcm_like, t = 1 h)": ({"model": "pcm_like"}, 3600.0),
}


def accuracy_per_chip(model, noise, t, peripherals, chips, folder) -> np.ndarray:
    summary = aimcemu.run(model, output=Path(folder) / "run.h5", mapping="all", noise=noise, t=[t], chips=chips,
                          peripherals=peripherals, layers="none", seed=1)
    return np.asarray(summary.round_accuracy, dtype=np.float64), summary.accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model file (default: the embedded model)")
    parser.add_argument("--chips", type=int, default=6)
    parser.add_argument("--plot", default="peripherals_accuracy.png")
    args = parser.parse_args()

    results = {}
    digital = None
    with tempfile.TemporaryDirectory() as folder:
        for label, (noise, t) in WEIGHT_NOISE.items():
            for out_noise in OUT_NOISE:
                for levels in LEVELS:
                    # A b-bit ADC in aihwkit's convention: out_res = 1 / (2^b - 2), i.e. 2^b - 1 levels
                    # symmetric about 0 (the pcm preset's 254 steps are its 8-bit ADC).
                    periph = {"preset": "pcm", "out_res": 1 / (levels - 2), "out_noise": out_noise}
                    acc, digital = accuracy_per_chip(args.model, noise, t, periph, args.chips, folder)
                    results[label, out_noise, levels] = acc
                    print(f"{label:38s} out_noise {out_noise:<5g} ADC {levels:5d}: "
                          f"{acc.mean():.4f} +- {acc.std():.4f}")
    print(f"digital reference accuracy: {digital:.4f}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(WEIGHT_NOISE), figsize=(11, 4), sharey=True)
    for ax, label in zip(axes, WEIGHT_NOISE):
        for out_noise in OUT_NOISE:
            acc = np.array([results[label, out_noise, n] for n in LEVELS])
            ax.errorbar(LEVELS, acc.mean(axis=1), yerr=acc.std(axis=1), marker="o", capsize=3,
                        label=f"out_noise {out_noise:g}")
        ax.axhline(digital, color="k", linestyle=":", label="digital reference")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ADC levels 2^b (out_res = 1/(2^b - 2), out_bound 10)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"accuracy (mean +- std over {args.chips} chips)")
    axes[-1].legend(loc="lower right")
    fig.tight_layout()
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
