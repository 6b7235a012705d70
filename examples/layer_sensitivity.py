"""Which layers can go analog?  Put each conv/linear layer alone on AIMC and rank them.

    python examples/layer_sensitivity.py [--t 86400] [--chips 8] [--scheduler tcp://host:8786]

Each layer runs alone on PCM tiles (the rest digital) over N chips; the table lists the accuracy
(mean and 95 % CI over chips), the drop against the noise-free reference and the SNR of the
layer's own output and of the network's output, most sensitive layer first."""
import argparse

from aimcemu import analysis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model file (default: the embedded model)")
    parser.add_argument("--t", type=float, nargs="+", default=[86400.0], help="times after programming (s)")
    parser.add_argument("--chips", type=int, default=8)
    parser.add_argument("--scheduler", default=None)
    parser.add_argument("--output", default="results/layer_sensitivity")
    args = parser.parse_args()

    table = analysis.layer_sensitivity(args.model, noise={"model": "pcm_like"}, t=args.t, chips=args.chips,
                                       drift_compensation="global", output=args.output, executor=args.scheduler)
    print(analysis.format_table(table.to_dict("records"),
                                ["layer", "accuracy", "ci_low", "ci_high", "accuracy_drop", "own_snr_db", "output_snr_db"]))
    print("\nmost sensitive first:", " > ".join(analysis.rank_layers(table)))


if __name__ == "__main__":  # the worker processes import this file: run only here
    main()
