"""Tests of the PyTorch importer (aimcemu.importer) and its quantization scheme (aimcemu.quantize).

Numerical checks use closed-form bounds: where inputs and weights are exactly representable at
their power-of-two scales the accumulator is exact, so the only error is the final round-half-up,
at most half an output LSB.  Bit-exactness of the C++ PU model is checked against the independent
NumPy reference (int8_reference.py) layer by layer.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aimcemu import _core  # noqa: E402
from aimcemu import quantize as q  # noqa: E402
from aimcemu.importer import UnsupportedOperationError, convert_torch, fold_batchnorm, import_torch  # noqa: E402
from int8_reference import run_network_reference  # noqa: E402


def kinds(net) -> list[str]:
    return [layer.kind.name for layer in net.layers]


def randomize_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    """Non-trivial running statistics and affine parameters, so that folding has work to do."""
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        n = bn.num_features
        bn.running_mean.copy_(torch.rand(n, generator=gen) * 2 - 1)
        bn.running_var.copy_(torch.rand(n, generator=gen) * 1.5 + 0.5)
        bn.weight.data.copy_(torch.rand(n, generator=gen) + 0.5)
        bn.bias.data.copy_(torch.rand(n, generator=gen) - 0.5)


class ResidualNet(nn.Module):
    """Every supported op: conv+BN+ReLU, a fusable residual block, a block whose conv output is
    read twice (standalone add), max/avg/adaptive pools, flatten over a 2x2 map, two Linears."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(8)
        self.conv_a = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(8)
        self.conv_b = nn.Conv2d(8, 8, 1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)     # 8x8 -> 4x4
        self.avg = nn.AvgPool2d(2)                            # 4x4 -> 2x2
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        x = torch.relu(self.bn_a(self.conv_a(x)) + x)         # fusable: conv_a feeds only the add
        b = self.conv_b(x)
        x = F.relu(b + b.relu())                              # b read twice: standalone add + ReLU
        x = self.avg(self.pool(x))
        x = self.drop(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


@pytest.fixture(scope="module")
def residual_import():
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    model = ResidualNet()
    randomize_batchnorm(model, gen)
    model.eval()
    images = torch.randn(128, 3, 8, 8, generator=gen)
    return model, images, convert_torch(model, images, name="residual")


# --- structure -------------------------------------------------------------------------------


def test_fusion_structure(residual_import):
    _, _, imported = residual_import
    net = imported.network
    layers = {layer.name: layer for layer in net.layers}
    # conv_a absorbs bn_a, the residual add and the ReLU after it; stem absorbs BN and ReLU.
    assert kinds(net) == ["conv", "conv", "conv", "max_pool", "add", "max_pool", "avg_pool", "linear", "linear"]
    assert layers["stem"].relu and layers["stem"].residual_input == -1
    conv_a = layers["conv_a"]
    assert conv_a.residual_input == net.find_layer("stem")
    assert not conv_a.relu and conv_a.relu_after_residual
    # b.relu() cannot be fused (b has two readers): an exact 1x1 max pool with the ReLU flag.
    relu_pool = net.layers[3]
    assert (relu_pool.kernel, relu_pool.stride, relu_pool.pad, relu_pool.relu) == (1, 1, 0, True)
    add = net.layers[4]
    assert {add.input, add.residual_input} == {net.find_layer("conv_b"), 3}
    assert add.relu and not add.relu_after_residual
    assert layers["fc1"].relu and not layers["fc2"].relu
    assert net.output_index() == len(net.layers) - 1
    assert tuple(net.input_shape) == (8, 8, 3)


def test_output_tracks_float_model(residual_import):
    """An empirical bound: 8-bit power-of-two scales through 9 layers stay within 5 % (relative
    L2) of the float logits on this model; a wrong shift or permutation gives errors near 100 %."""
    model, images, imported = residual_import
    out = run_network_reference(imported.network, imported.quantize_images(images))[-1]
    got = q.dequantize(out.reshape(len(images), -1), imported.frac_bits[-1])
    with torch.no_grad():
        want = model(images).double().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.05


def test_all_shifts_in_field_ranges(residual_import):
    for layer in residual_import[2].network.layers:
        assert 0 <= layer.out_shift <= 31 and 0 <= layer.bias_shift <= 24
        assert -8 <= layer.residual_shift <= 8 and -8 <= layer.input_shift <= 8


@pytest.mark.parametrize("backend,count", [("fast", 32), ("reference", 8), ("cycle_sa", 2)])
def test_cpp_layers_match_reference(residual_import, backend, count):
    """The C++ PU model runs the imported network bit for bit like the NumPy reference, layer by
    layer, on every GEMM backend."""
    if not hasattr(_core, "run_network"):
        pytest.skip("_core.run_network is not in this build yet (PU functional model not bound)")
    _, images, imported = residual_import
    images_int8 = imported.quantize_images(images[:count])
    expected = run_network_reference(imported.network, images_int8)
    got = _core.run_network(imported.network, images_int8, backend=backend)
    assert len(got) == len(expected)
    for layer, mine, ref in zip(imported.network.layers, got, expected):
        np.testing.assert_array_equal(np.asarray(mine).reshape(ref.shape), ref, err_msg=layer.name)


class TorchvisionBasicBlock(nn.Module):
    """torchvision's BasicBlock as written there: `out += identity` with the downsample computed
    after conv2, so in graph order the shortcut conv comes last."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyTorchvisionResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = TorchvisionBasicBlock(8, 8, 1)
        self.layer2 = TorchvisionBasicBlock(8, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def test_torchvision_style_resnet():
    """Every residual add is fused (no add layers), in-place ReLUs are calibrated on the right
    values, and the logits track the float model (same empirical 5 % bound as above)."""
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    model = TinyTorchvisionResNet()
    randomize_batchnorm(model, gen)
    model.eval()
    images = torch.randn(64, 3, 32, 32, generator=gen)
    imported = convert_torch(model, images)
    net = imported.network
    assert "add" not in kinds(net)
    assert kinds(net).count("conv") == 6
    # The add is fused into the main path's conv2 (the first operand of `out += identity`), as in
    # the zoo's ResNets; layer2's shortcut conv is computed later in torch, so conv2 moves after it.
    fused = [layer.name for layer in net.layers if layer.residual_input >= 0]
    assert fused == ["layer1.conv2", "layer2.conv2"]
    layer2_conv2 = net.layers[net.find_layer("layer2.conv2")]
    assert layer2_conv2.residual_input == net.find_layer("layer2.downsample.0")
    assert layer2_conv2.input == net.find_layer("layer2.conv1") and layer2_conv2.relu_after_residual
    assert net.layers[net.find_layer("avgpool")].input == net.find_layer("layer2.conv2")
    gap_index = net.find_layer("avgpool")
    gap = net.layers[gap_index]
    scale = 2.0 ** (imported.frac_bits[gap_index] - imported.frac_bits[gap.input]) / 16
    assert gap.kernel == 4 and gap.avg_mult / 2 ** gap.out_shift == scale  # 1/16: exact
    images_int8 = imported.quantize_images(images)
    reference = run_network_reference(net, images_int8)
    got = q.dequantize(reference[-1].reshape(len(images), -1), imported.frac_bits[-1])
    with torch.no_grad():
        want = model(images).double().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.05
    if hasattr(_core, "run_network"):  # the C++ PU model agrees bit for bit, layer by layer
        for layer, mine, ref in zip(net.layers, _core.run_network(net, images_int8, backend="fast"), reference):
            np.testing.assert_array_equal(mine, ref, err_msg=layer.name)


# --- exact numerics --------------------------------------------------------------------------


def exact_grid(gen: torch.Generator, shape, steps: int, scale: float) -> torch.Tensor:
    """Values k * scale with integer k in [-steps, steps - 1]: exactly representable in int8."""
    return (torch.randint(-steps, steps, shape, generator=gen) * scale).double()


def test_linear_hwc_permutation_exact():
    """Flatten of a 3-channel 2x3 map into a Linear: torch flattens CHW, the format HWC.  With exact
    operands the only error is the final rounding, so a wrong column order cannot pass."""
    gen = torch.Generator().manual_seed(5)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 3, 4, bias=False)).double().eval()
    weight = exact_grid(gen, (4, 18), 7, 1 / 8)
    weight[0, 0] = 7 / 8                                   # max |w| = 7/8 -> frac 7, w * 128 exact
    model[1].weight.data.copy_(weight)
    images = exact_grid(gen, (64, 3, 2, 3), 8, 1 / 8)
    images[0, 0, 0, 0] = -1.0                              # max |x| = 1 -> frac 6, x * 64 exact
    imported = convert_torch(model, images)
    assert imported.input_frac_bits == 6

    # The stored weights are the torch weights with columns in (h, w, c) order.
    stored = imported.network.layers[0].weights.reshape(4, 2, 3, 3)       # [O, H, W, C]
    expected = (weight.numpy().reshape(4, 3, 2, 3).transpose(0, 2, 3, 1) * 128).astype(np.int8)
    np.testing.assert_array_equal(stored, expected)

    out = run_network_reference(imported.network, imported.quantize_images(images))[-1].reshape(64, 4)
    lsb = 2.0 ** -imported.frac_bits[-1]
    want = model(images).detach().numpy()
    assert np.max(np.abs(q.dequantize(out, imported.frac_bits[-1]) - want)) <= lsb / 2


def test_exact_conv_with_residual_and_pools():
    """conv -> (+ input conv) -> max pool -> global avg pool with exact operands: every int8
    intermediate is the float value rounded once, so the output is within one LSB per rounding."""
    gen = torch.Generator().manual_seed(6)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(2, 4, 3, padding=1, bias=False)
            self.conv2 = nn.Conv2d(4, 4, 1, bias=False)
            self.pool = nn.MaxPool2d(2)
            self.gap = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            y = F.relu(self.conv1(x))
            y = F.relu(self.conv2(y) + y)
            return torch.flatten(self.gap(self.pool(y)), 1)

    model = Block().double().eval()
    for conv in (model.conv1, model.conv2):
        conv.weight.data.copy_(exact_grid(gen, conv.weight.shape, 4, 1 / 4))
    images = exact_grid(gen, (32, 2, 4, 4), 4, 1 / 4)
    imported = convert_torch(model, images)
    net = imported.network
    assert kinds(net) == ["conv", "conv", "max_pool", "avg_pool"]
    assert net.layers[1].residual_input == 0 and net.layers[1].relu_after_residual
    gap = net.layers[3]
    # 1/(2*2) times a power of two is exact as avg_mult / 2^out_shift.
    assert gap.kernel == 2
    assert gap.avg_mult / 2 ** gap.out_shift == 2.0 ** (imported.frac_bits[3] - imported.frac_bits[2]) / 4

    outs = run_network_reference(net, imported.quantize_images(images))
    with torch.no_grad():
        y1 = F.relu(model.conv1(images))
        want = model(images).numpy()
    # conv1's int8 output is y1 rounded once (its accumulator is exact).
    lsb1 = 2.0 ** -imported.frac_bits[0]
    assert np.max(np.abs(q.dequantize(outs[0], imported.frac_bits[0]) - y1.permute(0, 2, 3, 1).numpy())) <= lsb1 / 2
    # The output carries at most: conv1 rounding through conv2 (|w| sum), conv2's rounding, the
    # residual's alignment and the average's rounding; a generous closed bound is 4 output LSBs
    # plus conv1's error propagated through conv2's largest row sum of |w|.
    w2_row = float(model.conv2.weight.detach().abs().sum(dim=(1, 2, 3)).max())
    bound = 4 * 2.0 ** -imported.frac_bits[-1] + (1 + w2_row) * lsb1 / 2
    got = q.dequantize(outs[-1].reshape(32, -1), imported.frac_bits[-1])
    assert np.max(np.abs(got - want)) <= bound


def test_fold_batchnorm_matches_conv_then_bn():
    gen = torch.Generator().manual_seed(7)
    conv = nn.Conv2d(3, 6, 3, padding=1).double()
    bn = nn.BatchNorm2d(6).double()
    randomize_batchnorm(bn, gen)
    bn.eval()
    x = torch.randn(4, 3, 7, 7, generator=gen, dtype=torch.float64)
    weight, bias = fold_batchnorm(conv.weight, conv.bias, bn)
    folded = F.conv2d(x, torch.from_numpy(weight), torch.from_numpy(bias), padding=1)
    with torch.no_grad():
        np.testing.assert_allclose(folded.numpy(), bn(conv(x)).numpy(), rtol=1e-12, atol=1e-12)


def test_fold_batchnorm_without_conv_bias_or_affine():
    gen = torch.Generator().manual_seed(8)
    conv = nn.Conv2d(2, 3, 1, bias=False).double()
    bn = nn.BatchNorm2d(3, affine=False).double()
    bn.running_mean.copy_(torch.rand(3, generator=gen))
    bn.running_var.copy_(torch.rand(3, generator=gen) + 0.5)
    bn.eval()
    x = torch.randn(2, 2, 3, 3, generator=gen, dtype=torch.float64)
    weight, bias = fold_batchnorm(conv.weight, None, bn)
    with torch.no_grad():
        np.testing.assert_allclose(F.conv2d(x, torch.from_numpy(weight), torch.from_numpy(bias)).numpy(),
                                   bn(conv(x)).numpy(), rtol=1e-12, atol=1e-12)


# --- quantization scheme ---------------------------------------------------------------------


@pytest.mark.parametrize("max_abs,frac", [(1.0, 6), (127.0, 0), (127.5, -1), (0.5, 7), (0.99, 7), (3.96, 5), (3.97, 4)])
def test_frac_bits_for_range(max_abs, frac):
    assert q.frac_bits_for_range(max_abs) == frac
    assert max_abs * 2.0 ** frac <= 127 < max_abs * 2.0 ** (frac + 1)


def test_frac_bits_of_dead_and_bad_tensors():
    assert q.frac_bits_for_range(0.0) == q.FRAC_BITS_OF_ZERO_TENSOR
    with pytest.raises(ValueError, match="nan"):
        q.frac_bits_for_range(float("nan"))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8])
def test_avg_pool_multiplier(k):
    mult, shift = q.avg_pool_multiplier(1.0 / (k * k))
    assert 1 <= mult <= 127
    # Round-to-nearest at the largest shift that keeps mult in int8: error <= half a step.
    assert abs(mult / 2 ** shift - 1 / (k * k)) <= 2.0 ** -(shift + 1)
    assert round(1 / (k * k) * 2 ** (shift + 1)) > 127
    if k & (k - 1) == 0:
        assert mult / 2 ** shift == 1 / (k * k)


def test_quantize_bias_uses_smallest_shift():
    bias, shift = q.quantize_bias(np.array([0.5, -3.0, 0.01]), acc_frac_bits=8)
    # -3 * 2^8 = -768 needs 3 bits of shift to fit int8 (-96).
    assert shift == 3
    np.testing.assert_array_equal(bias, [16, -96, 0])


def test_quantize_rounds_half_up_and_saturates():
    np.testing.assert_array_equal(q.quantize(np.array([0.125, -0.125, 0.375, -0.375, 18.75, -18.75]), 2),
                                  [1, 0, 2, -1, 75, -75])
    np.testing.assert_array_equal(q.quantize(np.array([40.0, -40.0]), 2), [127, -128])


# --- errors ----------------------------------------------------------------------------------


def test_unsupported_ops_are_all_named():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.grouped = nn.Conv2d(4, 4, 3, groups=2)
            self.squash = nn.Sigmoid()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            x = self.squash(self.grouped(x))
            return self.fc(x.view(x.size(0), -1).tanh())

    with pytest.raises(UnsupportedOperationError) as info:
        import_torch(Bad().eval(), torch.randn(2, 4, 3, 3))
    where = [w for w, _ in info.value.problems]
    message = str(info.value)
    assert "grouped (Conv2d)" in where and "squash (Sigmoid)" in where
    assert "groups=2" in message and "Sigmoid is not supported" in message
    assert ".tanh()" in message   # .view(x.size(0), -1) flattens, which the importer supports
    assert isinstance(info.value, NotImplementedError)


def test_batchnorm_without_conv_is_rejected():
    model = nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 2, 1)).eval()
    with pytest.raises(UnsupportedOperationError, match="0: BatchNorm must directly follow a convolution"):
        import_torch(model, torch.randn(4, 1, 3, 3))


def test_linear_without_flatten_is_rejected():
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Linear(3, 2)).eval()
    with pytest.raises(UnsupportedOperationError, match="1: a fully connected layer must read a flattened"):
        import_torch(model, torch.randn(4, 1, 3, 3))


def test_ceil_mode_and_dilation_are_rejected_naming_the_module_and_attribute():
    model = nn.Sequential(nn.Conv2d(1, 2, 3, dilation=2), nn.MaxPool2d((1, 2), ceil_mode=True),
                          nn.AvgPool2d((2, 1), ceil_mode=True)).eval()
    with pytest.raises(UnsupportedOperationError) as info:
        import_torch(model, torch.randn(2, 1, 9, 9))
    problems = dict(info.value.problems)
    assert "dilation (2, 2) is not supported" in problems["0 (Conv2d)"]
    assert "ceil_mode=True is not supported" in problems["1 (MaxPool2d)"]
    assert "ceil_mode=True is not supported" in problems["2 (AvgPool2d)"]


def test_training_mode_is_rejected():
    with pytest.raises(ValueError, match="eval mode"):
        import_torch(nn.Sequential(nn.Conv2d(1, 2, 1)), torch.randn(2, 1, 3, 3))


def test_empty_or_misshaped_calibration_is_rejected():
    model = nn.Sequential(nn.Conv2d(1, 2, 1)).eval()
    with pytest.raises(_core.FormatError, match="field 'calibration_data': holds no images"):
        import_torch(model, [])
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        import_torch(model, torch.randn(3, 3))


def test_calibration_accepts_loader_batches():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()).eval()
    data = torch.rand(8, 1, 5, 5)
    from_tensor = import_torch(model, data)
    from_batches = import_torch(model, [(data[:4], None), (data[4:], None)])
    assert from_tensor.layers[0].out_shift == from_batches.layers[0].out_shift
    np.testing.assert_array_equal(from_tensor.layers[0].weights, from_batches.layers[0].weights)


def test_public_entry_point():
    import aimcemu
    from aimcemu import importer

    assert aimcemu.import_torch is importer.import_torch
    net = aimcemu.import_torch(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()).eval(), torch.rand(4, 1, 5, 5), name="tiny")
    assert net.name == "tiny" and [layer.name for layer in net.layers] == ["0"] and net.layers[0].relu
