"""``aimcemu report RESULTS``: a self-contained HTML report (embedded PNG plots) of a results
file or a sweep folder."""
from __future__ import annotations

import argparse

HELP = "write a self-contained HTML report (accuracy vs t, SNR heatmap, histograms, NIU table)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="a results file (.h5) or a sweep folder")
    parser.add_argument("--output", "-o", default=None,
                        help="HTML file (default: report.html in the sweep folder, or <run>.html beside the file)")
    parser.add_argument("--layers", default=None, help="comma-separated layers for the activation histograms")
    parser.add_argument("--png", default=None, help="also write the figures as PNG files into this folder")
    parser.add_argument("--no-niu", action="store_true", help="leave out the NIU/throughput table")


def main(args: argparse.Namespace) -> int:
    from ..report import report, save_pngs

    layers = [n.strip() for n in args.layers.split(",") if n.strip()] if args.layers else None
    page = report(args.results, args.output, layers=layers, niu=not args.no_niu)
    print(f"report    {page}")
    if args.png:
        for path in save_pngs(args.results, args.png, layers):
            print(f"figure    {path}")
    return 0
