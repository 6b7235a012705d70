"""QDQ weights and scale moves checked exactly against the file, for the weight types
onnxruntime's quantize_static writes: int8 per channel, and uint8 (asymmetric, zero points near
128) per tensor and per channel.

A QDQ layer's weights are the file's ``(q - z) * s`` (per channel where the file has it),
re-rounded to the layer's power-of-two scale: each of ours lies within half of our step of the
file's value, read here independently of the importer.  A per-channel scale applied per tensor,
or a zero point ignored, moves weights by many steps.  Every activation's scale move lies in
``log2(m / 127) <= bits < 1 + log2(m / 127)`` with ``m = max(z - q_min, q_max - z)``
(docs/import.md), which a range that ignores the zero point breaks.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import torch.nn as nn  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: E402

from aimcemu import _core  # noqa: E402
from aimcemu.onnx_import import convert_onnx, layer_cosines  # noqa: E402


class _Reader(CalibrationDataReader):
    def __init__(self, images: np.ndarray):
        self.batches = iter([{"image": images}])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def float_model(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """conv, ReLU, conv (weights shifted off zero, so uint8 zero points land far from 128), ReLU,
    flatten over a 4x4 map, linear; exported with a dynamic batch."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(8 * 4 * 4, 5)).eval()
    with torch.no_grad():
        net[2].weight += 0.3
        net[0].weight[0] *= 0.05        # one channel of a much smaller scale than the rest
    images = torch.rand(128, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("qdqw") / "float.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, images[:1], str(path), dynamo=False, input_names=["image"], output_names=["out"],
                          dynamic_axes={"image": {0: "n"}, "out": {0: "n"}})
    return path, images.numpy()


WEIGHT_TYPES = {"int8 per channel": (QuantType.QInt8, True), "uint8 per tensor": (QuantType.QUInt8, False),
                "uint8 per channel": (QuantType.QUInt8, True)}


@pytest.fixture(scope="module", params=list(WEIGHT_TYPES))
def qdq(request, float_model) -> Path:
    path, images = float_model
    weight_type, per_channel = WEIGHT_TYPES[request.param]
    out = path.with_name(f"qdq_{request.param.replace(' ', '_')}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(path), str(out), _Reader(images), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=weight_type)
    return out


def file_weights(path: Path) -> dict[str, np.ndarray]:
    """Per Conv/Gemm node name, its weight as the file defines it: (q - z) * s, per channel along
    the DequantizeLinear's axis, in float64 ([O, C, kh, kw] or Gemm's [out, in] with transB)."""
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dequantized = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            q = inits[node.input[0]].astype(np.float64)
            scale = inits[node.input[1]].astype(np.float64)
            zero = inits[node.input[2]].astype(np.float64) if len(node.input) > 2 else np.zeros(1)
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            shape = [1] * q.ndim
            if scale.size > 1:
                shape[axis] = -1
            dequantized[node.output[0]] = (q - zero.reshape(shape if zero.size > 1 else [1] * q.ndim)) * scale.reshape(shape)
    return {node.name: dequantized[node.input[1]] for node in model.graph.node if node.op_type in ("Conv", "Gemm")}


def ours_as_file_layout(layer, weights: np.ndarray, in_hwc) -> np.ndarray:
    """Our int8 weights [N][kh][kw][Cin] (conv) or [N][h*w*c] (linear after flatten) in the file's
    order: conv [O, C, kh, kw]; linear [out, c*h*w] (torch flattens CHW, the format HWC)."""
    if layer.kind == _core.LayerKind.conv:
        kh, kw = layer.kernel_h, layer.kernel_w
        return weights.reshape(layer.out_channels, kh, kw, -1).transpose(0, 3, 1, 2)
    h, w, c = in_hwc
    return weights.reshape(layer.out_channels, h, w, c).transpose(0, 3, 1, 2).reshape(layer.out_channels, -1)


def test_weights_are_the_files_within_half_a_step(qdq):
    imported = convert_onnx(qdq)
    net = imported.network
    expected = file_weights(qdq)
    onnx_names = {name.strip("/").replace("/", "."): name for name in expected}
    assert len(expected) == 3
    for index, layer in enumerate(net.layers):
        if layer.kind not in (_core.LayerKind.conv, _core.LayerKind.linear):
            continue
        reference = expected[onnx_names[layer.name]]
        if layer.kind == _core.LayerKind.linear:
            reference = reference.T if reference.shape[0] != layer.out_channels else reference
        in_hwc = tuple(net.layers[layer.input].out_shape) if layer.input >= 0 else None
        step = 2.0 ** -imported.weight_frac_bits[index]
        ours = ours_as_file_layout(layer, np.asarray(layer.weights, np.float64), in_hwc) * step
        error = np.abs(ours - reference.reshape(ours.shape))
        assert error.max() <= step / 2 * (1 + 1e-9), (layer.name, error.max() / step)


def test_activation_moves_lie_within_the_bound_of_their_zero_point(qdq):
    model = onnx.load(str(qdq))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    zero_point_of = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            zero = inits[node.input[2]]
            zero_point_of[node.input[0]] = zero_point_of[node.output[0]] = zero
    moves = [m for m in convert_onnx(qdq).scale_moves if m.kind == "activation"]
    assert len(moves) == 4                 # the image, both ReLUs, the output
    zero_points = set()
    for move in moves:
        zero = zero_point_of[move.tensor]
        info = np.iinfo(zero.dtype)
        widest = max(int(zero) - info.min, info.max - int(zero))
        zero_points.add(int(zero))
        low = math.log2(widest / 127)
        assert low - 1e-9 <= move.bits[0] == move.bits[1] < low + 1, (str(move), int(zero))
    assert len(zero_points) > 1           # zero point 0 (after the ReLUs) and an asymmetric one (the output)


def test_layers_follow_onnxruntime(qdq, float_model):
    imported = convert_onnx(qdq)
    test = np.random.default_rng(9).uniform(0, 1, (64, 3, 8, 8)).astype(np.float32)
    outputs = _core.run_network(imported.network, imported.quantize_images(test), backend="fast")
    cosines = layer_cosines(imported, qdq, test, outputs)
    assert min(c for _, _, c in cosines) > 0.999, cosines
