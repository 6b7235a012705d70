"""``aimcemu perf``: per-layer latency, FPS, efficiency and NIU impact on the accelerator model."""
from __future__ import annotations

import argparse
import sys

HELP = "time a network on the accelerator model: per-layer table, Table-I-style summary, NIU impact"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50",
                        help="zoo network (see 'aimcemu models') or model file (default resnet50)")
    parser.add_argument("--pus", default="5xPU2x+5xPU1x", help="PU mix, e.g. 5xPU2x+5xPU1x (the U50 default)")
    parser.add_argument("--mode", choices=["frame-parallel", "layer-pipelined"], default="frame-parallel",
                        help="each PU runs whole frames (paper Table I), or layers cut into stages across PUs")
    parser.add_argument("--first-layer", choices=["host", "fpga"], default="host",
                        help="first layer's IM2COL on the host (padded to 160 B, as in the paper) or in the FPGA")
    parser.add_argument("--avg-pool", choices=["block-diagonal", "dense"], default="block-diagonal",
                        help="how the average pool maps to the GEMM engine")
    parser.add_argument("--timing-model", choices=["full", "roofline"], default="full",
                        help="full model, or the roofline straw man: SA cycles only, no fill, data movement or stall")
    parser.add_argument("--scheduler", choices=["baseline", "adaptive", "double-buffer", "in-order-prefetch"],
                        default="adaptive", help="weight-transfer schedule (default: the paper's two phases)")
    parser.add_argument("--aimc-layers", default=None, metavar="NAMES",
                        help="layers mapped to AIMC: 'all' or comma-separated names (default none)")
    parser.add_argument("--mapping", default=None, metavar="MAPPING",
                        help="layers mapped to AIMC as a run takes them: a YAML mapping file or 'all' "
                             "(docs/hybrid_runs.md); instead of --aimc-layers")
    parser.add_argument("--peripherals", default=None, metavar="LAYERS",
                        help='layers whose results pass the analog tile peripherals (docs/peripherals.md): '
                             '"aimc" (the AIMC layers), "all" or comma-separated names')
    parser.add_argument("--niu", type=int, default=0, metavar="COUNT", help="NIUs replacing PUs (shared sharing)")
    parser.add_argument("--niu-sharing", choices=["shared", "per-pu"], default="shared",
                        help="shared: COUNT NIUs serve all PUs; per-pu: one NIU beside each PU (half the slots)")
    parser.add_argument("--niu-lanes", type=int, default=32,
                        help="lanes of the NIU RTL (1, 4, 8 or 32 are synthesized; default 32, one HBM channel's "
                             "read-modify-write): the rate is its co-simulated weights per cycle")
    parser.add_argument("--format", choices=["table", "csv", "json"], default="table", help="stdout format")
    parser.add_argument("--output", metavar="PATH", help="also write the result: .csv (per layer) or .json (all)")
    parser.add_argument("--no-layers", action="store_true", help="table format: summary only")
    parser.add_argument("--plot", metavar="DIR", help="write per-layer latency and scheduler ratio plots (PNG)")


def _output_path(args: argparse.Namespace):
    """--output, checked before any work: .csv or .json (the format follows the extension), never
    the model file, a folder, a device or a FIFO; a trailing '/' is a folder that receives
    <model>_perf.json."""
    import os

    from ..files import output_file
    from ..validate import fail

    if args.output is None:
        return None
    model_file = args.model if os.path.isfile(args.model) else None
    name = os.path.splitext(os.path.basename(args.model))[0] or "model"
    path = output_file(args.output, "output", "--output", inputs=[("model", model_file)],
                       default_name=lambda: f"{name}_perf.json", create_folder=False)
    if path.suffix.lower() not in (".csv", ".json"):
        raise fail("--output", "output", f"{path} must end in .csv (per-layer table) or .json (everything); "
                                              f"the format follows the extension")
    return path


def main(args: argparse.Namespace) -> int:
    from ..perf import perf
    from ..validate import integer

    integer(args.niu, "niu", "--niu", 0, 4096)
    output = _output_path(args)
    result = perf(args.model, pus=args.pus, mode=args.mode, first_layer=args.first_layer, avg_pool=args.avg_pool,
                  scheduler=args.scheduler, aimc_layers=args.aimc_layers, mapping=args.mapping,
                  peripherals=args.peripherals, niu=args.niu, niu_sharing=args.niu_sharing, niu_lanes=args.niu_lanes,
                  timing_model=args.timing_model)
    if args.format == "json":
        import json

        from ..perf import json_default

        json.dump(result.to_dict(), sys.stdout, indent=2, default=json_default)
        print()
    elif args.format == "csv":
        import csv

        rows = result.layer_rows()
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    else:
        if not args.no_layers:
            print(result.layer_table())
            print()
        print(result.table_one())
    if output is not None:
        from ..files import new_folder_for

        # Made only now, so a refused run leaves no folder; a failed write takes it away again.
        with new_folder_for(output.parent, "output", "--output"):
            if output.suffix.lower() == ".csv":
                result.to_csv(output)
            else:
                result.to_json(output)
    if args.plot:
        for path in result.plot(args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0
