"""``aimcemu import MODEL.onnx -o model.h5``: an ONNX model (float or QDQ) as an aimcemu model file."""
from __future__ import annotations

import argparse

HELP = "convert an ONNX model (float, or QDQ from onnxruntime.quantization) to an aimcemu model file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the ONNX file")
    parser.add_argument("--output", "-o", required=True, help="the aimcemu model file to write (.h5)")
    parser.add_argument("--calibration", default=None,
                        help="float images [N, C, H, W] as a .npy file (required for a float model)")
    parser.add_argument("--method", choices=("max", "percentile"), default="max",
                        help="calibration rule: max |value| (default) or a percentile of |value|")
    parser.add_argument("--percentile", type=float, default=None, help="percentile for --method percentile (99.99)")
    parser.add_argument("--input-shape", default=None, help="C,H,W when the model's input size is dynamic")
    parser.add_argument("--name", default=None, help="network name (default: the ONNX graph's name)")


def _input_shape(text: str | None):
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--input-shape: expected C,H,W (three integers), got {text!r}") from None


def main(args: argparse.Namespace) -> int:
    import numpy as np

    from .. import modelfile
    from .._netbuild import DEFAULT_PERCENTILE
    from ..onnx_import import convert_onnx

    images = np.load(args.calibration) if args.calibration else None
    imported = convert_onnx(args.model, images, _input_shape(args.input_shape), args.name, args.method,
                            args.percentile if args.percentile is not None else DEFAULT_PERCENTILE)
    modelfile.save_model(imported.network, args.output)
    net = imported.network
    print(f"model     {args.output}: {net.name}, {len(net.layers)} layers, {net.total_weights()} int8 weights")
    for move in imported.scale_moves:
        print(f"scale     {move}")
    return 0
