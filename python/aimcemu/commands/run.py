"""``aimcemu run``: one study from a model file and a data set file to an HDF5 results file.

With no arguments it runs the embedded default model on its shipped test set."""
from __future__ import annotations

import argparse

HELP = "run a model on a data set and write an HDF5 results file (no arguments: the embedded default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None, help="model file (default: the embedded model)")
    parser.add_argument("--data", "-d", default=None, help="data set file (default: test_set.h5 beside the model)")
    parser.add_argument("--output", "-o", default=None, help="results file (default: results/<model>_<timestamp>.h5)")
    parser.add_argument("--backend", default="fast", help="PU model kernel (default: fast)")
    parser.add_argument("--threads", type=int, default=0, help="worker threads, 0 = all cores")
    parser.add_argument("--layers", default="all",
                        help='whose activations to store: "all", "none" or comma-separated layer names')
    parser.add_argument("--config", default=None, help="YAML file with the same options (arguments override it)")


def _load_config(path: str | None) -> dict | None:
    if path is None:
        return None
    import yaml
    from .. import FormatError

    with open(path, encoding="utf-8") as f:
        try:
            config = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise FormatError(f"{path}: field '<yaml>': {exc}") from None
    if not isinstance(config, dict):
        raise FormatError(f"{path}: field '<root>': expected a mapping of options")
    return config


def format_summary(summary) -> str:
    """The short table printed after a run."""
    lines = [
        f"model     {summary.model}",
        f"images    {summary.images}",
        f"accuracy  {summary.accuracy:.4f} (noise-free reference)",
    ]
    lines += [f"round {i:<3} {acc:.4f}" for i, acc in enumerate(summary.round_accuracy)]
    lines.append(f"time      {summary.inference_s:.3f} s inference, {summary.write_s:.3f} s writing")
    lines.append("")
    width = max(len(l.name) for l in summary.layers)
    lines.append(f"{'layer':<{width}}  {'kind':<8}  {'shape (y, x, channel)':<22}  stored")
    for l in summary.layers:
        shape = "x".join(str(d) for d in l.shape)
        lines.append(f"{l.name:<{width}}  {l.kind:<8}  {shape:<22}  {'yes' if l.stored else 'no'}")
    lines.append("")
    lines.append(f"results   {summary.path}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from ..runner import run

    summary = run(model=args.model, data=args.data, output=args.output, backend=args.backend,
                  threads=args.threads, layers=args.layers, config=_load_config(args.config))
    print(format_summary(summary))
    return 0
