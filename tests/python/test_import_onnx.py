"""Tests of the ONNX importer (aimcemu.onnx_import) and of what it shares with import_torch.

Float ONNX models exported from PyTorch must import to the same network, bit for bit, as
import_torch makes from the PyTorch module (same calibration).  QDQ models written by
onnxruntime's quantize_static are checked against onnxruntime itself: per-layer cosine to its
quantized intermediate values, and (slow, on the embedded digits model) accuracy within 1 point
of onnxruntime's INT8 accuracy.  Bad files get errors naming the file and the node.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: E402

import aimcemu  # noqa: E402
from aimcemu import _core, _netbuild, cli, modelfile  # noqa: E402
from aimcemu.importer import UnsupportedOperationError, convert_torch, import_torch  # noqa: E402
from aimcemu.onnx_import import convert_onnx, import_onnx, layer_cosines  # noqa: E402
from int8_reference import run_network_reference  # noqa: E402
from test_import_digits import load_train_script  # noqa: E402
from test_import_torch import randomize_batchnorm  # noqa: E402

def export(model: nn.Module, path: Path, example: torch.Tensor, dynamic_hw: bool = False) -> Path:
    """PyTorch's TorchScript ONNX exporter (the dynamo one needs onnxscript), batch axis dynamic."""
    axes = {0: "n", 2: "h", 3: "w"} if dynamic_hw else {0: "n"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(path), dynamo=False, input_names=["image"], output_names=["out"],
                          dynamic_axes={"image": axes, "out": {0: "n"}})
    return path


class _Reader(CalibrationDataReader):
    def __init__(self, images: np.ndarray):
        self.batches = iter([{"image": images[i:i + 64]} for i in range(0, len(images), 64)])

    def get_next(self):
        return next(self.batches, None)


def quantize_qdq(float_path: Path, path: Path, images: np.ndarray, per_channel: bool) -> Path:
    """onnxruntime's static QDQ quantization with its defaults (uint8 activations, int8 weights)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(float_path), str(path), _Reader(images.astype(np.float32)), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return path


class SmallNet(nn.Module):
    """conv+BN+ReLU, a fusable residual block, max pool, avg pool, x.view(x.size(0), -1) over a
    2x2 map (so the CHW -> HWC permutation matters), two Linears."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(8)
        self.conv_a = nn.Conv2d(8, 8, 3, padding=1)
        self.bn_a = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)            # 8x8 -> 4x4
        self.avg = nn.AvgPool2d(2)             # 4x4 -> 2x2
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.relu(self.bn_a(self.conv_a(x)) + x)
        x = self.avg(self.pool(x))
        x = F.relu(self.fc1(x.view(x.size(0), -1)))
        return self.fc2(x)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(model, calibration images, float ONNX path, folder)."""
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    model = SmallNet()
    randomize_batchnorm(model, gen)
    model.eval()
    images = torch.rand(256, 3, 8, 8, generator=gen)
    folder = tmp_path_factory.mktemp("onnx")
    return model, images, export(model, folder / "small.onnx", images[:1]), folder


def assert_same_network(a, b, float32_folding: bool = False) -> None:
    """Layer by layer the same network.  float32_folding: b's BatchNorm was folded into the conv
    weights in float32 by the exporter (ours folds in float64), so a weight or bias right at a
    rounding boundary may land one LSB off; allowed for at most 1 in 1000."""
    fields = ("kind", "input", "relu", "residual_input", "relu_after_residual", "residual_shift", "input_shift",
              "out_shift", "bias_shift", "kernel", "stride", "pad", "avg_mult", "out_channels")
    assert len(a.layers) == len(b.layers)
    assert tuple(a.input_shape) == tuple(b.input_shape) and a.input_frac_bits == b.input_frac_bits
    for la, lb in zip(a.layers, b.layers):
        for name in fields:
            assert getattr(la, name) == getattr(lb, name), (la.name, name)
        for x, y in ((la.weights, lb.weights), (la.bias, lb.bias)):
            if not float32_folding:
                np.testing.assert_array_equal(x, y, err_msg=la.name)
                continue
            off = np.abs(x.astype(np.int64) - y.astype(np.int64))
            assert off.size == 0 or (off.max() <= 1 and np.count_nonzero(off) <= max(1, off.size // 1000)), la.name


# --- float models -------------------------------------------------------------------------------


def test_float_onnx_imports_like_torch(small):
    model, images, path, _ = small
    from_torch = convert_torch(model, images, name="small")
    from_onnx = convert_onnx(path, images.numpy(), name="small")
    assert [layer.kind.name for layer in from_onnx.network.layers] == [
        "conv", "conv", "max_pool", "avg_pool", "linear", "linear"]
    assert_same_network(from_torch.network, from_onnx.network)
    assert from_onnx.frac_bits == from_torch.frac_bits
    # The INT8 network is the bit-exact contract of the independent NumPy reference.
    x = from_onnx.quantize_images(images[:16].numpy())
    for mine, ref in zip(_core.run_network(from_onnx.network, x, backend="fast"),
                         run_network_reference(from_onnx.network, x)):
        np.testing.assert_array_equal(mine, ref)


def test_float_onnx_percentile_calibration(small):
    model, images, path, _ = small
    spiky = images.clone()
    spiky[0, 0, 0, 0] = 50.0                      # one outlier pixel
    by_max = convert_onnx(path, spiky.numpy(), name="small")
    by_percentile = convert_onnx(path, spiky.numpy(), name="small", calibration="percentile", percentile=99.9)
    assert by_max.input_frac_bits == 1            # 50 * 2^1 <= 127
    assert by_percentile.input_frac_bits == 6     # the outlier is clipped: [0, 1) images
    assert_same_network(convert_torch(model, spiky, name="small", calibration="percentile", percentile=99.9).network,
                        by_percentile.network)


def test_range_statistics_percentile_against_numpy(rng):
    """The one-pass histogram percentile is within a bin of np.percentile, across rescaling."""
    stats = _netbuild.RangeStatistics()
    batches = [rng.normal(size=(8, 100)) * scale for scale in (0.1, 1.0, 7.0, 0.5)]
    for batch in batches:
        stats.update("x", batch)
    values = np.abs(np.concatenate([b.ravel() for b in batches]))
    width = 2.0 ** np.ceil(np.log2(values.max())) / _netbuild.HISTOGRAM_BINS
    ordered = np.sort(values)
    for p in (50.0, 99.0, 99.9, 100.0):
        nearest_rank = ordered[int(np.ceil(p / 100.0 * len(values))) - 1]    # the percentile's definition
        assert nearest_rank <= stats.percentile("x", p) <= nearest_rank + width, p
    assert stats.max_abs("x") == values.max()
    with pytest.raises(ValueError, match="calibration"):
        _netbuild.ranges_from_statistics(stats, {}, calibration="mean")


def test_float_model_needs_calibration(small):
    _, _, path, _ = small
    with pytest.raises(ValueError, match=r"small\.onnx.*needs calibration_data"):
        import_onnx(path)


# --- QDQ models ---------------------------------------------------------------------------------


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_import_follows_onnxruntime(small, per_channel):
    model, images, path, folder = small
    qdq = quantize_qdq(path, folder / f"small_qdq_{per_channel}.onnx", images.numpy(), per_channel)
    imported = convert_onnx(qdq)
    net = imported.network
    assert [layer.kind.name for layer in net.layers] == ["conv", "conv", "max_pool", "avg_pool", "linear", "linear"]
    # onnxruntime removes the Relu nodes and lets uint8 saturation at 0 do their work: still ReLUs here.
    assert net.layers[0].relu and net.layers[1].relu_after_residual and net.layers[4].relu
    test = torch.rand(64, 3, 8, 8, generator=torch.Generator().manual_seed(9)).numpy()
    outputs = _core.run_network(net, imported.quantize_images(test), backend="fast")
    cosines = layer_cosines(imported, qdq, test, outputs)
    print("\n" + "\n".join(f"  {layer:<24} {tensor:<50} cos {c:.4f}" for layer, tensor, c in cosines))
    # 0.9999 here; applying the largest per-channel scale to every channel (a per-tensor misreading)
    # gives 0.947, ranges that ignore the zero point 0.914, dropping the implied ReLUs 0.05.
    assert min(c for _, _, c in cosines) > 0.999, cosines
    moves = {m.tensor: m for m in imported.scale_moves}
    assert {m.kind for m in moves.values()} == {"activation", "weight"}
    for move in moves.values():
        lo, hi = move.bits
        # The power of two holds the tensor's whole QDQ range: never finer than the file's scale,
        # at most one bit past the int8 (activations: uint8 range -> int8, one more bit) bound.
        # Per-channel weight scales of small channels move further (one scale per tensor here).
        assert 0.0 <= lo <= hi, str(move)
        if move.kind == "activation":
            assert hi < 2.01, str(move)
        elif not per_channel:
            assert lo == hi and hi < 1.0, str(move)
    assert moves["image"].qdq_scale[0] == pytest.approx(1 / 255, rel=1e-3)   # images in [0, 1] as uint8


def test_qdq_weights_are_the_dequantized_ones(small):
    """A QDQ conv's weights are the file's int8 values times their scale, re-rounded to our
    power-of-two scale: within half a step of ours (the int8 values of the file, read independently)."""
    model, images, path, folder = small
    qdq = quantize_qdq(path, folder / "small_qdq_weights.onnx", images.numpy(), per_channel=False)
    m = onnx.load(str(qdq))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == conv.input[1])
    file_weights = inits[dq.input[0]].astype(np.float64) * float(inits[dq.input[1]])       # [O, C, kh, kw]
    imported = convert_onnx(qdq)
    layer, frac = imported.network.layers[0], imported.weight_frac_bits[0]
    assert layer.name == "stem.Conv"
    ours = layer.weights.reshape(file_weights.shape[0], *file_weights.shape[2:], file_weights.shape[1])
    ours = ours.transpose(0, 3, 1, 2) * 2.0 ** -frac                                         # HWC -> CHW
    assert np.max(np.abs(ours - file_weights)) <= 2.0 ** -frac / 2 + 1e-12
    assert np.max(np.abs(ours - file_weights)) > 0      # the scales differ here, so rounding shows


# --- bad files ----------------------------------------------------------------------------------


class WithSigmoid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.wide = nn.Conv2d(2, 2, 3, dilation=2)

    def forward(self, x):
        return self.wide(torch.sigmoid(self.conv(x)))


def test_unsupported_ops_name_the_file_and_nodes(tmp_path):
    path = export(WithSigmoid().eval(), tmp_path / "sig.onnx", torch.rand(1, 1, 8, 8))
    with pytest.raises(UnsupportedOperationError) as info:
        import_onnx(path, np.random.rand(4, 1, 8, 8).astype(np.float32))
    message = str(info.value)
    assert str(path) in message and "2 unsupported operation(s)" in message
    assert "node '/Sigmoid' (Sigmoid): Sigmoid is not supported" in message
    assert "node '/wide/Conv' (Conv): attribute dilations=[2, 2] is not supported" in message   # after the Sigmoid


def test_truncated_file_is_a_format_error(small, tmp_path):
    _, _, path, _ = small
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(aimcemu.FormatError, match=r"cut\.onnx.*field 'model': not a valid ONNX model"):
        import_onnx(cut, np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        import_onnx(tmp_path / "missing.onnx")


def test_dynamic_input_needs_a_size(small, tmp_path):
    model, images, _, _ = small
    conv_only = nn.Sequential(model.stem, nn.ReLU()).eval()
    path = export(conv_only, tmp_path / "dyn.onnx", images[:1], dynamic_hw=True)
    with pytest.raises(aimcemu.FormatError, match=r"dyn\.onnx: field 'input 'image'': dynamic shape.*input_shape"):
        import_onnx(path, images.numpy())
    net = import_onnx(path, images.numpy(), input_shape=(3, 8, 8))
    assert tuple(net.input_shape) == (8, 8, 3)
    with pytest.raises(aimcemu.FormatError, match="does not fit"):
        import_onnx(path, images.numpy(), input_shape=(1, 8, 8))


# --- the command and the package ----------------------------------------------------------------


def test_cli_import(small, capsys):
    model, images, path, folder = small
    qdq = quantize_qdq(path, folder / "small_cli.onnx", images.numpy(), per_channel=False)
    out = folder / "small_cli.h5"
    assert cli.main(["import", str(qdq), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "6 layers" in printed and "scale     activation image" in printed
    assert_same_network(modelfile.load_model(out), import_onnx(qdq))
    npy = folder / "calibration.npy"
    np.save(npy, images.numpy())
    float_out = folder / "small_float.h5"
    assert cli.main(["import", str(path), "-o", str(float_out), "--calibration", str(npy)]) == 0
    assert_same_network(modelfile.load_model(float_out), import_torch(model, images))
    assert cli.main(["import", str(path), "-o", str(float_out), "--input-shape", "3,x"]) == 2
    assert "--input-shape" in capsys.readouterr().err


def test_public_entry_point():
    from aimcemu import onnx_import

    assert aimcemu.import_onnx is onnx_import.import_onnx


# --- the embedded digits model and ResNets (slow) -----------------------------------------------


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory):
    """The embedded model's network retrained by scripts/train_digits.py (about a minute; the same
    recipe and seeds as the shipped model), exported to ONNX: (model, path, split, folder)."""
    script = load_train_script()
    folder = tmp_path_factory.mktemp("digits_onnx")
    split = script.load_split()
    model = script.train(split[0], split[2])
    return model, export(model, folder / "digits.onnx", torch.from_numpy(split[0][:1])), split, folder


@pytest.mark.slow
def test_digits_float_onnx_imports_like_torch(digits_onnx):
    model, path, (x_train, *_), _ = digits_onnx
    assert_same_network(import_torch(model, torch.from_numpy(x_train)), import_onnx(path, x_train))


@pytest.mark.slow
@pytest.mark.parametrize("per_channel", [False, True])
def test_digits_qdq_accuracy_within_a_point_of_onnxruntime(digits_onnx, per_channel):
    """Exported and quantised by onnxruntime, the digits network imports and runs within 1 point
    of onnxruntime's INT8 accuracy on the same test images."""
    _, path, (x_train, x_test, _, y_test), folder = digits_onnx
    qdq = quantize_qdq(path, folder / f"digits_qdq_{per_channel}.onnx", x_train[:512], per_channel)
    imported = convert_onnx(qdq)
    outputs = _core.run_network(imported.network, imported.quantize_images(x_test), backend="fast")
    ours = float(np.mean(outputs[imported.network.output_index()].reshape(len(x_test), -1).argmax(1) == y_test))
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    theirs = float(np.mean(session.run(None, {"image": x_test})[0].argmax(1) == y_test))
    cosines = layer_cosines(imported, qdq, x_test, outputs)
    print(f"\ndigits QDQ per_channel={per_channel}: accuracy aimcemu {ours:.4f}, onnxruntime {theirs:.4f}")
    print("\n".join(f"  {layer:<24} cos {c:.4f}" for layer, _, c in cosines))
    print("\n".join(f"  {move}" for move in imported.scale_moves))
    assert abs(ours - theirs) <= 0.01
    assert min(c for _, _, c in cosines) > 0.995, cosines     # 0.9987 (head.Conv, per channel) measured


def shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    """ResNet's projection shortcut (1x1 conv + BN) where the shape changes, else None (identity)."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = shortcut(cin, cout, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return F.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = shortcut(cin, cout, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return F.relu(out)


class ResNet(nn.Module):
    """ResNet v1 (He et al. 2016, post-activation; torchvision's layout)."""

    def __init__(self, block, layers, classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for i, count in enumerate(layers):
            width = 64 * 2 ** i
            blocks = []
            for j in range(count):
                blocks.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.mark.slow
@pytest.mark.parametrize("depth", [18, 50])
def test_resnet_v1_imports_and_runs(tmp_path, depth):
    block, layers = (BasicBlock, [2, 2, 2, 2]) if depth == 18 else (Bottleneck, [3, 4, 6, 3])
    torch.manual_seed(depth)
    model = ResNet(block, layers)
    randomize_batchnorm(model, torch.Generator().manual_seed(depth))
    model.eval()
    images = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    path = export(model, tmp_path / f"resnet{depth}.onnx", images[:1])
    imported = convert_onnx(path, images.numpy())
    net = imported.network
    convs = sum(1 for layer in net.layers if layer.kind.name == "conv")
    assert convs == (20 if depth == 18 else 53)
    assert sum(1 for layer in net.layers if layer.residual_input >= 0) == (8 if depth == 18 else 16)
    assert_same_network(import_torch(model, images), net, float32_folding=True)
    outputs = _core.run_network(net, imported.quantize_images(images[:1].numpy()), backend="fast")
    assert outputs[net.output_index()].size == 1000
    cosines = layer_cosines(imported, path, images[:1].numpy(), outputs)
    print(f"\nresnet{depth}: lowest per-layer cosine to onnxruntime {min(c for _, _, c in cosines):.4f}")
