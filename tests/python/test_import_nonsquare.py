"""Non-square kernels, per-axis strides and asymmetric padding through both importers (issue 14).

A PyTorch model with 1x7, 7x1 and 3x5 convolutions, non-square pools and a global average pool
over a non-square map imports through import_torch and, exported, through import_onnx (float and
QDQ) to the same network; the INT8 network tracks the float model, and the C++ PU model runs it
bit for bit like the independent NumPy reference.  Hand-written ONNX graphs check auto_pad
SAME_UPPER / SAME_LOWER / VALID and explicit asymmetric pads against onnxruntime, and the
refusals (ceil_mode, dilations) name the node and the attribute.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from aimcemu import _core  # noqa: E402
from aimcemu import quantize as q  # noqa: E402
from aimcemu.importer import convert_torch  # noqa: E402
from aimcemu.onnx_import import UnsupportedOperationError, convert_onnx, layer_cosines  # noqa: E402
from int8_reference import run_network_reference  # noqa: E402
from test_import_onnx import export, quantize_qdq  # noqa: E402
from test_import_torch import randomize_batchnorm  # noqa: E402


class NonSquareNet(nn.Module):
    """3x12x15 in: conv 1x7 (pad (0, 3)) + BN + ReLU -> conv 7x1 stride (2, 1) pad (3, 0) + ReLU
    -> conv 3x5 stride (1, 2) pad (1, 2) + ReLU -> max pool 2x3 stride (1, 2) pad (1, 1) -> avg
    pool 3x2 stride (2, 1) pad (1, 0) -> global average over the 4x3 map -> linear."""

    def __init__(self):
        super().__init__()
        self.row = nn.Conv2d(3, 8, (1, 7), padding=(0, 3), bias=False)
        self.row_bn = nn.BatchNorm2d(8)
        self.column = nn.Conv2d(8, 8, (7, 1), stride=(2, 1), padding=(3, 0))
        self.wide = nn.Conv2d(8, 12, (3, 5), stride=(1, 2), padding=(1, 2))
        self.pool = nn.MaxPool2d((2, 3), stride=(1, 2), padding=(1, 1))
        self.avg = nn.AvgPool2d((3, 2), stride=(2, 1), padding=(1, 0))
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        x = F.relu(self.row_bn(self.row(x)))
        x = F.relu(self.column(x))
        x = F.relu(self.wide(x))
        x = self.gap(self.avg(self.pool(x)))
        return self.fc(torch.flatten(x, 1))


# (kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right) per layer.
EXPECTED_WINDOWS = {
    "row": (1, 7, 1, 1, 0, 0, 3, 3),
    "column": (7, 1, 2, 1, 3, 3, 0, 0),
    "wide": (3, 5, 1, 2, 1, 1, 2, 2),
    "pool": (2, 3, 1, 2, 1, 1, 1, 1),
    "avg": (3, 2, 2, 1, 1, 1, 0, 0),
    "gap": (4, 3, 1, 1, 0, 0, 0, 0),
    "fc": (1, 1, 1, 1, 0, 0, 0, 0),
}


def window_tuple(layer) -> tuple:
    w = layer.window
    return (w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_bottom, w.pad_left, w.pad_right)


def assert_same_network(a, b) -> None:
    """Layer by layer the same network, windows per axis included."""
    fields = ("kind", "input", "relu", "residual_input", "relu_after_residual", "residual_shift", "input_shift",
              "out_shift", "bias_shift", "avg_mult", "out_channels")
    assert len(a.layers) == len(b.layers)
    assert tuple(a.input_shape) == tuple(b.input_shape) and a.input_frac_bits == b.input_frac_bits
    for la, lb in zip(a.layers, b.layers):
        assert window_tuple(la) == window_tuple(lb), la.name
        for name in fields:
            assert getattr(la, name) == getattr(lb, name), (la.name, name)
        np.testing.assert_array_equal(la.weights, lb.weights, err_msg=la.name)
        np.testing.assert_array_equal(la.bias, lb.bias, err_msg=la.name)


def relative_error(imported, images: np.ndarray, want: np.ndarray) -> float:
    out = run_network_reference(imported.network, imported.quantize_images(images))[-1]
    got = q.dequantize(out.reshape(len(images), -1), imported.frac_bits[-1])
    return float(np.linalg.norm(got - want.reshape(len(images), -1)) / np.linalg.norm(want))


@pytest.fixture(scope="module")
def nonsquare(tmp_path_factory):
    """(model, calibration images, torch import, float ONNX path, folder)."""
    gen = torch.Generator().manual_seed(14)
    torch.manual_seed(14)
    model = NonSquareNet()
    randomize_batchnorm(model, gen)
    model.eval()
    images = torch.rand(256, 3, 12, 15, generator=gen)
    folder = tmp_path_factory.mktemp("nonsquare")
    path = export(model, folder / "nonsquare.onnx", images[:1])
    return model, images, convert_torch(model, images, name="nonsquare"), path, folder


def test_torch_import_keeps_every_axis(nonsquare):
    _, _, imported, _, _ = nonsquare
    net = imported.network
    assert [layer.kind.name for layer in net.layers] == [
        "conv", "conv", "conv", "max_pool", "avg_pool", "avg_pool", "linear"]
    assert {layer.name: window_tuple(layer) for layer in net.layers} == EXPECTED_WINDOWS
    shapes = [tuple(layer.out_shape) for layer in net.layers]
    assert shapes == [(12, 15, 8), (6, 15, 8), (6, 8, 12), (7, 4, 12), (4, 3, 12), (1, 1, 12), (1, 1, 5)]
    assert net.layers[2].gemm_m == 3 * 5 * 8
    # The square shorthand reads only where both axes agree, and names the layer otherwise.
    assert net.layers[6].kernel == 1 and net.layers[6].pad == 0
    with pytest.raises(ValueError, match=r"layers/wide/kernel"):
        net.layers[2].kernel  # noqa: B018


def test_torch_import_tracks_the_float_model(nonsquare):
    """As test_import_torch measures it: relative L2 of the dequantized logits within 5 %."""
    model, images, imported, _, _ = nonsquare
    with torch.no_grad():
        want = model(images).double().numpy()
    assert relative_error(imported, images.numpy(), want) < 0.05


@pytest.mark.parametrize("backend", ["fast", "reference", "cycle_sa"])
def test_pu_model_runs_the_nonsquare_network_like_the_reference(nonsquare, backend):
    _, images, imported, _, _ = nonsquare
    x = imported.quantize_images(images[:8 if backend != "cycle_sa" else 2])
    expected = run_network_reference(imported.network, x)
    got = _core.run_network(imported.network, x, backend=backend)
    for layer, mine, ref in zip(imported.network.layers, got, expected):
        np.testing.assert_array_equal(np.asarray(mine).reshape(ref.shape), ref, err_msg=layer.name)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")   # PyTorch's own copy
def test_torch_padding_same_puts_the_odd_pad_at_the_end():
    """padding='same' with even kernels: PyTorch pads (k - 1) // 2 before and the rest after."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(2, 3, (2, 4), padding="same")).eval()
    images = torch.rand(64, 2, 5, 6)
    imported = convert_torch(model, images)
    assert window_tuple(imported.network.layers[0]) == (2, 4, 1, 1, 0, 1, 1, 2)
    with torch.no_grad():
        want = model(images).double().numpy().transpose(0, 2, 3, 1)
    assert relative_error(imported, images.numpy(), want) < 0.03


def test_model_file_round_trip_keeps_the_windows(nonsquare, tmp_path):
    from aimcemu import modelfile
    _, _, imported, _, _ = nonsquare
    modelfile.save_model(imported.network, tmp_path / "ns.h5")
    back = modelfile.load_model(tmp_path / "ns.h5")
    assert_same_network(imported.network, back)


def test_float_onnx_imports_like_torch(nonsquare):
    _, images, from_torch, path, _ = nonsquare
    from_onnx = convert_onnx(path, images.numpy(), name="nonsquare")
    assert_same_network(from_torch.network, from_onnx.network)
    assert from_onnx.frac_bits == from_torch.frac_bits


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_nonsquare_import_follows_onnxruntime(nonsquare, per_channel):
    """The existing QDQ measure: every layer's cosine to onnxruntime's quantized values > 0.999."""
    _, images, _, path, folder = nonsquare
    qdq = quantize_qdq(path, folder / f"nonsquare_qdq_{per_channel}.onnx", images.numpy(), per_channel)
    imported = convert_onnx(qdq)
    assert [window_tuple(layer) for layer in imported.network.layers] == list(EXPECTED_WINDOWS.values())
    test = torch.rand(64, 3, 12, 15, generator=torch.Generator().manual_seed(9)).numpy()
    outputs = _core.run_network(imported.network, imported.quantize_images(test), backend="fast")
    cosines = layer_cosines(imported, qdq, test, outputs)
    assert min(c for _, _, c in cosines) > 0.999, cosines   # see test_qdq_import_follows_onnxruntime


# --- hand-written ONNX graphs: auto_pad and asymmetric pads -------------------------------------


def one_window_model(path, op: str, attrs: dict, in_chw=(2, 7, 9), out_c: int = 3, seed: int = 0):
    """image -> op (Conv with random weights, or a pool) -> out, with its attributes as given."""
    rng = np.random.default_rng(seed)
    inits, inputs = [], ["image"]
    if op == "Conv":
        kh, kw = attrs["kernel_shape"]
        inits = [numpy_helper.from_array(rng.normal(size=(out_c, in_chw[0], kh, kw)).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.normal(size=out_c).astype(np.float32) * 0.1, "b")]
        inputs = ["image", "w", "b"]
    node = helper.make_node(op, inputs, ["out"], name="win", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, *in_chw])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None] * 4)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def onnxruntime_output(path, images: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": images})[0]


# (op, attributes, expected window: kernel_h, kernel_w, stride_h, stride_w, top, bottom, left, right)
# On the 7x9 input a 3x4 kernel at stride 2 needs (4-1)*2+3-7 = 2 rows and (5-1)*2+4-9 = 3
# columns of SAME padding in all, the odd column at the end (UPPER) or the beginning (LOWER).
WINDOW_CASES = {
    "conv_same_upper": ("Conv", dict(kernel_shape=[3, 4], strides=[2, 2], auto_pad="SAME_UPPER"),
                        (3, 4, 2, 2, 1, 1, 1, 2)),
    "conv_same_lower": ("Conv", dict(kernel_shape=[3, 4], strides=[2, 2], auto_pad="SAME_LOWER"),
                        (3, 4, 2, 2, 1, 1, 2, 1)),
    "conv_same_upper_stride1_even": ("Conv", dict(kernel_shape=[2, 4], auto_pad="SAME_UPPER"),
                                     (2, 4, 1, 1, 0, 1, 1, 2)),
    "conv_valid": ("Conv", dict(kernel_shape=[1, 7], strides=[1, 2], auto_pad="VALID"), (1, 7, 1, 2, 0, 0, 0, 0)),
    "conv_pads_asymmetric": ("Conv", dict(kernel_shape=[3, 5], strides=[1, 2], pads=[0, 2, 1, 1]),
                             (3, 5, 1, 2, 0, 1, 2, 1)),
    "max_pool_same_lower": ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
                            (2, 3, 2, 2, 1, 0, 1, 1)),
    "max_pool_pads": ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 1], pads=[2, 0, 0, 1]),
                      (3, 2, 2, 1, 2, 0, 0, 1)),
    "avg_pool_pads_counted": ("AveragePool", dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 2],
                                                  count_include_pad=1), (2, 3, 1, 2, 1, 0, 0, 2)),
}


@pytest.mark.parametrize("case", sorted(WINDOW_CASES))
def test_onnx_windows_match_onnxruntime(tmp_path, case):
    op, attrs, window = WINDOW_CASES[case]
    path = one_window_model(tmp_path / f"{case}.onnx", op, attrs)
    images = np.random.default_rng(1).uniform(-1, 1, size=(64, 2, 7, 9)).astype(np.float32)
    imported = convert_onnx(path, images)
    (layer,) = imported.network.layers
    assert window_tuple(layer) == window
    want = onnxruntime_output(path, images)
    assert tuple(layer.out_shape) == (want.shape[2], want.shape[3], want.shape[1])
    # max pools are exact up to the input's rounding; conv and avg pool within 8-bit error.
    assert relative_error(imported, images, want.transpose(0, 2, 3, 1)) < (0.02 if op == "MaxPool" else 0.03)


REFUSALS = {
    "ceil_mode": ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1), "attribute ceil_mode=1"),
    "avg_ceil_mode": ("AveragePool", dict(kernel_shape=[3, 1], strides=[2, 1], ceil_mode=1), "attribute ceil_mode=1"),
    "dilations": ("Conv", dict(kernel_shape=[3, 3], dilations=[1, 2]), "attribute dilations=[1, 2]"),
    "pool_dilations": ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2]), "attribute dilations=[2, 2]"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_onnx_refusals_name_the_node_and_the_attribute(tmp_path, case):
    op, attrs, fragment = REFUSALS[case]
    path = one_window_model(tmp_path / f"{case}.onnx", op, attrs)
    with pytest.raises(UnsupportedOperationError) as info:
        convert_onnx(path, np.zeros((2, 2, 7, 9), np.float32))
    assert info.value.problems == [(f"node 'win' ({op})", info.value.problems[0][1])]
    assert fragment in info.value.problems[0][1] and "not supported" in info.value.problems[0][1]
    assert str(path) in str(info.value)


def test_avg_pool_excluding_padding_is_refused_naming_the_node(tmp_path):
    path = one_window_model(tmp_path / "avg.onnx", "AveragePool", dict(kernel_shape=[2, 3], pads=[1, 0, 0, 2]))
    with pytest.raises(UnsupportedOperationError, match=r"win.AveragePool|win: an average pool that excludes"):
        convert_onnx(path, np.random.default_rng(0).uniform(size=(4, 2, 7, 9)).astype(np.float32))
