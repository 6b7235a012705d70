"""A drift sweep from Python: accuracy vs time since programming, with 95 % CIs over chips.

    python examples/drift_sweep.py [--scheduler tcp://host:8786] [--output results/drift_sweep]

Runs examples/sweep.yaml (3 t x 3 noise scales x 2 mappings x 8 chips on the embedded model),
prints accuracy vs t per grid point and writes the HTML report beside the results.  Rerunning
resumes: finished tasks are not run again."""
import argparse
from pathlib import Path

from aimcemu import analysis
from aimcemu.report import report
from aimcemu.sweeps import load_config, sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default=None, help="Dask scheduler address (default: local processes)")
    parser.add_argument("--output", default="results/drift_sweep")
    args = parser.parse_args()

    config = load_config(Path(__file__).with_name("sweep.yaml"))
    result = sweep(config, output=args.output, executor=args.scheduler)

    ds = analysis.open_sweep(result.folder)
    acc = analysis.accuracy_vs_t(ds)
    for mapping in acc["mapping"].values:
        for scale in acc["noise.prog_noise_scale"].values:
            point = acc.sel(mapping=mapping, **{"noise.prog_noise_scale": scale})
            cells = ", ".join(f"t={t:g}s {m:.3f} [{lo:.3f}, {hi:.3f}]" for t, m, lo, hi in
                              zip(point["t"].values, point["mean"].values, point["ci_low"].values, point["ci_high"].values))
            print(f"{mapping:>5} prog_noise_scale={scale:<4} {cells}")

    # Where in the network the error grows: mean SNR per layer at the last t, all layers on AIMC.
    snr = analysis.snr_over_t(ds).sel(mapping="all", **{"noise.prog_noise_scale": 1.0}).isel(t=-1)
    print("\nSNR (dB) per layer at t =", float(snr["t"]), "s:")
    for layer, value in zip(snr["layer"].values, snr.values):
        print(f"  {layer:<12} {value:6.2f}")
    print("\nreport:", report(result.folder))


if __name__ == "__main__":  # the worker processes import this file: run only here
    main()
