"""Network.resolve refuses what no run can compute, naming the layer's field, instead of letting
the network through the writer and the reader to fail in every run: an avg_pool whose
avg_mult * 128 * kernel_h * kernel_w reaches 2^31 (docs/arithmetic.md), and a bias_shift of 24
(128 << 24 is 2^31 on its own), which resolve blamed on 'weights' and gemm on M."""
from __future__ import annotations

import numpy as np
import pytest

import aimcemu
from aimcemu import _core


def avg_pool_net(kernel: int, avg_mult: int):
    layer = _core.Layer()
    layer.name = "pool"
    layer.kind = _core.LayerKind.avg_pool
    layer.input = -1
    layer.kernel = kernel
    layer.avg_mult = avg_mult
    layer.out_shift = 20
    net = _core.Network()
    net.name = "t"
    net.input_shape = _core.Shape3(kernel, kernel, 1)
    net.layers = [layer]
    return net


def test_resolve_refuses_an_avg_pool_that_can_overflow_int32():
    assert 127 * 128 * 364 * 364 >= 2**31
    with pytest.raises(aimcemu.FormatError, match=r"layers/0 \(pool\)/avg_mult.*364x364"):
        avg_pool_net(364, 127).resolve()


def test_resolve_keeps_the_largest_avg_pool_that_fits_and_it_runs_exactly():
    assert 127 * 128 * 363 * 363 < 2**31
    net = avg_pool_net(363, 127)
    net.resolve()
    x = np.full((1, 363, 363, 1), -128, np.int8)
    out = _core.run_network(net, x, "reference")[0]
    acc = 127 * -128 * 363 * 363
    assert out.ravel()[0] == max(-128, (acc + (1 << 19)) >> 20)


def conv_net(bias_shift: int):
    layer = _core.Layer()
    layer.name = "c"
    layer.kind = _core.LayerKind.conv
    layer.kernel = 1
    layer.out_channels = 1
    layer.weights = np.zeros(1, np.int8)
    layer.bias = np.full(1, -128, np.int8)
    layer.bias_shift = bias_shift
    net = _core.Network()
    net.name = "t"
    net.input_shape = _core.Shape3(1, 1, 1)
    net.layers = [layer]
    return net


def test_bias_shift_24_is_refused_as_bias_shift():
    assert _core.LAYER_FIELD_RANGES["bias_shift"] == (0, 23)
    with pytest.raises(aimcemu.FormatError, match=r"layers/0 \(c\)/bias_shift': must be in 0\.\.23 \(got 24\)"):
        conv_net(24).resolve()
    with pytest.raises(aimcemu.FormatError, match=r"field 'bias_shift': bias_shift must be in 0\.\.23 \(got 24\)"):
        _core.gemm(np.ones((1, 1), np.int8), np.ones((1, 1), np.int8), np.ones(1, np.int8), 24)


def test_bias_shift_23_resolves_and_runs_exactly():
    net = conv_net(23)
    net.resolve()
    out = _core.run_network(net, np.zeros((1, 1, 1, 1), np.int8), "reference")[0]
    assert out.ravel()[0] == -128  # -128 << 23, out_shift 0, saturated
