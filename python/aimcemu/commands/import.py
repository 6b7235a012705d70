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
    from ..onnx_import import MAX_IMAGE_DIM

    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or not all(1 <= v <= MAX_IMAGE_DIM for v in shape):
        raise ValueError(f"--input-shape: field 'input_shape': expected C,H,W (three integers in 1..{MAX_IMAGE_DIM}), got {text!r}")
    return shape


def _calibration_images(path: str | None):
    """The .npy images, mapped rather than read (calibration reads them batch by batch); no pickles."""
    if path is None:
        return None
    import numpy as np

    from .._netbuild import CALIBRATION_KINDS

    try:
        images = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:   # numpy's errors for a bad header, an object array, ...
        raise ValueError(f"--calibration: field 'calibration': {path}: not a .npy array of float images ({exc})") from None
    if not isinstance(images, np.ndarray):           # np.load opens an .npz archive as an NpzFile
        if hasattr(images, "close"):
            images.close()
        raise ValueError(f"--calibration: field 'calibration': {path}: an .npz archive; expected a .npy array of float images "
                         "[N, C, H, W] (np.save)")
    if images.ndim != 4:
        raise ValueError(f"--calibration: field 'calibration': {path}: holds an array of shape {images.shape}; expected float images "
                         "[N, C, H, W]")
    if images.dtype.kind not in CALIBRATION_KINDS:   # complex would lose its imaginary part; bool is no image
        raise ValueError(f"--calibration: field 'calibration': {path}: holds {images.dtype.name} values; expected real numbers "
                         "(float or integer images [N, C, H, W])")
    return images


def main(args: argparse.Namespace) -> int:
    import os

    from .. import modelfile
    from .._netbuild import DEFAULT_PERCENTILE
    from ..files import new_folder_for, output_file
    from ..onnx_import import convert_onnx, external_data_files
    from ..validate import input_file

    # Checked before any work: the inputs are regular files, and the output is never one of them
    # (by inode: the model, its external data files, the calibration images), a folder, a device
    # or a FIFO; a trailing '/' is a folder for <onnx name>.h5.
    model = input_file(args.model, "model", what="ONNX file")
    calibration = None if args.calibration is None else input_file(args.calibration, "calibration", "--calibration", what=".npy file")
    stem = os.path.splitext(os.path.basename(model))[0] or "model"
    inputs = [("model", model), *(("model's external data file", file) for file in external_data_files(model)),
              ("calibration", calibration)]
    output = output_file(args.output, "output", "--output", inputs=inputs,
                         default_name=lambda: f"{stem}.h5", create_folder=False)
    input_shape = _input_shape(args.input_shape)
    images = _calibration_images(calibration)
    imported = convert_onnx(model, images, input_shape, args.name, args.method,
                            args.percentile if args.percentile is not None else DEFAULT_PERCENTILE)
    # Made only now, so a refused import leaves no folder; a failed write takes it away again.
    with new_folder_for(output.parent, "output", "--output"):
        modelfile.save_model(imported.network, output)
    net = imported.network
    print(f"model     {output}: {net.name}, {len(net.layers)} layers, {net.total_weights()} int8 weights")
    for move in imported.scale_moves:
        print(f"scale     {move}")
    return 0
