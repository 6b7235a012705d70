"""``aimcemu run``: one study from a model file and a data set file to an HDF5 results file.

With no arguments it runs the embedded default model on its shipped test set, digitally.  With
--mapping (a YAML mapping file or "all") and/or --noise it adds noisy rounds over chips and
times and prints accuracy vs t at the end::

    aimcemu run --mapping all --noise pcm_like --t 0,1h,1d,1y --chips 8 --drift-compensation none,global

With --peripherals (a preset such as aihwkit or pcm, and/or settings) the AIMC layers also pass
DACs, output noise and ADCs (docs/peripherals.md)::

    aimcemu run --mapping all --peripherals pcm,out_noise=0.02 --chips 4

With several drift compensations the table has one block per compensation; the same chips,
times and NIU draws are used under each.
"""
from __future__ import annotations

import argparse

HELP = "run a model on a data set and write an HDF5 results file (no arguments: the embedded default)"


# The PU model's kernels (the PU model checks the name, _core.check_backend, and its error lists
# them; tests/python/test_hostile_cli.py keeps this list equal to that one).  Written here, not
# asked of the core, so that building the parser imports nothing heavy.
BACKENDS = ("fast", "reference", "cycle_sa")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=None, help="model file (default: the embedded model)")
    parser.add_argument("--data", "-d", default=None, help="data set file (default: test_set.h5 beside the model)")
    parser.add_argument("--output", "-o", default=None, help="results file (default: results/<model>_<timestamp>.h5)")
    parser.add_argument("--mapping", default=None,
                        help='layer mapping: a YAML file (docs/hybrid_runs.md) or "all" (every GEMM layer on AIMC)')
    parser.add_argument("--noise", default=None,
                        help='default noise of AIMC layers: a model name (pcm_like, hermes, ...) or a YAML/JSON '
                             'snippet such as \'{model: pcm_like, read_noise_scale: 0}\' (alone it implies --mapping all)')
    parser.add_argument("--peripherals", default=None,
                        help='analog tile peripherals of AIMC layers (docs/peripherals.md): a preset (aihwkit, pcm, '
                             'ideal) and/or settings, e.g. "pcm,out_noise=0.02" or '
                             '"out_res=1/64,out_bound=10" (alone it implies --mapping all)')
    parser.add_argument("--t", default=None, help="times since programming, e.g. 0,3600,86400 or 0,1h,1d,1y (default 0)")
    parser.add_argument("--chips", type=int, default=None, help="chip instances (default 1)")
    parser.add_argument("--rounds", type=int, default=None, help="noisy rounds per chip and t (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="master seed (default 0)")
    parser.add_argument("--drift-compensation", default=None,
                        help='drift compensation of AIMC layers: none (default), global, or both as "none,global" '
                             "(every round then runs under each, with the same noise draws)")
    parser.add_argument("--backend", default=None,
                        help=f"PU model kernel: {', '.join(BACKENDS)} (default: fast; all three give the same "
                             "bits: fast picks the CPU's fastest kernel, reference is a plain loop, cycle_sa the "
                             "cycle-by-cycle systolic array)")
    parser.add_argument("--threads", type=int, default=None, help="worker threads, 0 = all cores")
    parser.add_argument("--layers", default=None,
                        help='whose activations to store: "all" (default), "none" or comma-separated layer names')
    parser.add_argument("--config", default=None, help="YAML file with the same options (arguments override it)")


def parse_noise(text: str | None):
    """A model name stays a name; anything with braces or a colon is read as a YAML/JSON mapping."""
    if text is None:
        return None
    from .. import FormatError, validate

    text = validate.text(text, "noise", "--noise")
    if "{" not in text and ":" not in text:
        return {"model": text.strip()}
    from ..yamlfile import parse_yaml

    value = parse_yaml(text, "--noise")
    if not isinstance(value, dict):
        raise FormatError("--noise: field '<root>': expected a model name or a mapping with 'model'")
    return value


def format_summary(summary) -> str:
    """The short table printed after a run; accuracy vs t last when there are noisy rounds."""
    lines = [
        f"model     {summary.model}",
        f"images    {summary.images}",
        f"accuracy  {summary.accuracy:.4f} (noise-free reference)",
    ]
    if summary.round_accuracy:
        compensations = summary.compensations()
        per_compensation = f" x {len(compensations)} compensations" if len(compensations) > 1 else ""
        lines.append(f"rounds    {len(summary.round_accuracy)} noisy "
                     f"({len(set(summary.round_chip))} chips x {len(set(summary.round_t))} t x "
                     f"{len(set(summary.niu_round))} rounds{per_compensation})")
    lines.append(f"time      {summary.inference_s:.3f} s inference, {summary.noise_s:.3f} s NIU, "
                 f"{summary.write_s:.3f} s writing")
    lines.append("")
    width = max(len(l.name) for l in summary.layers)
    lines.append(f"{'layer':<{width}}  {'kind':<8}  {'shape (y, x, channel)':<22}  {'device':<16}  stored")
    for l in summary.layers:
        shape = "x".join(str(d) for d in l.shape)
        device = l.device if l.noise_model is None else f"{l.device} ({l.noise_model})"
        lines.append(f"{l.name:<{width}}  {l.kind:<8}  {shape:<22}  {device:<16}  {'yes' if l.stored else 'no'}")
    lines.append("")
    lines.append(f"results   {summary.path}")
    if summary.round_accuracy:
        lines += ["", summary.format_accuracy_table()]
    return "\n".join(lines)


# The flag of each run option (and of the config file), which errors name when the value came
# from the command line (the model is the positional argument: '<arguments>').
FLAGS = {key: "--" + key.replace("_", "-") for key in
         ("data", "output", "mapping", "noise", "peripherals", "t", "chips", "rounds", "seed", "drift_compensation",
          "backend", "threads", "layers", "config")}


def main(args: argparse.Namespace) -> int:
    from ..config import RunConfig
    from ..runner import execute

    explicit = {"model": args.model, "data": args.data, "output": args.output, "mapping": args.mapping,
                "noise": parse_noise(args.noise), "peripherals": args.peripherals, "t": args.t, "chips": args.chips,
                "rounds": args.rounds, "seed": args.seed, "drift_compensation": args.drift_compensation,
                "backend": args.backend, "threads": args.threads, "layers": args.layers}
    # Options not given on the command line keep the config file's value (or the default).
    given = {key: value for key, value in explicit.items() if value is not None}
    # As aimcemu.run(**given, config=...) resolves and runs them, with errors naming the flags.
    config = RunConfig.resolve(args.config, given, explicit_sources=FLAGS)
    summary = execute(config, progress=True)
    print(format_summary(summary))
    return 0
