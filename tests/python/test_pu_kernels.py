"""The C++ PU functional model against the independent NumPy reference (int8_reference.py).

Covers single layers of randomized shape (kernel 1/3/5/7, stride 1-2, padding up to 3, channel
counts that are not multiples of 8 or 64, depths of thousands), the raw GEMM/IM2COL/SA bindings,
and a small network with every layer kind and residual aligns of both signs.  Every comparison is
exact equality of integers.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import aimcemu
from int8_reference import Window, conv_acc, run_network_reference

KINDS = {"conv", "linear", "add", "max_pool", "avg_pool"}


def make_layer(core, name, kind, input=-1, **fields):
    layer = core.Layer()
    layer.name = name
    layer.kind = getattr(core.LayerKind, kind)
    layer.input = input
    for key, value in fields.items():
        setattr(layer, key, value)
    return layer


def gemm_fields(rng, n, m, relu=False):
    """Random int8 weights/bias and an out_shift that keeps outputs mostly unsaturated: the sum of
    m products of uniform int8 values has a standard deviation of about sqrt(m) * 73^2."""
    spread = math.sqrt(m) * 73 * 73 + 1
    return dict(out_channels=n,
                weights=rng.integers(-128, 128, n * m, dtype=np.int8),
                bias=rng.integers(-128, 128, n, dtype=np.int8),
                bias_shift=int(rng.integers(0, 12)),
                out_shift=max(0, int(round(math.log2(spread / 48)))),
                relu=relu)


def make_network(core, input_shape, layers):
    net = core.Network()
    net.name = "test"
    net.input_shape = core.Shape3(*input_shape)
    net.layers = layers
    net.resolve()
    return net


def random_images(rng, count, shape):
    return rng.integers(-128, 128, (count, *shape), dtype=np.int8)


def assert_all_equal(actual, expected, what):
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == np.int8 and a.shape == e.shape, f"{what}: layer {i} shape {a.shape} vs {e.shape}"
        mismatches = int(np.count_nonzero(a != e))
        assert mismatches == 0, f"{what}: layer {i} differs in {mismatches} of {a.size} values"


def random_conv_cases(rng, count):
    for _ in range(count):
        k = int(rng.choice([1, 3, 5, 7]))
        yield dict(k=k, stride=int(rng.integers(1, 3)), pad=int(rng.integers(0, min(3, k - 1) + 1)),
                   h=k + int(rng.integers(0, 6)), w=k + int(rng.integers(0, 6)),
                   c=int(rng.choice([1, 3, 13, 67, 70])), n=int(rng.choice([1, 10, 17, 65, 70, 130])),
                   relu=bool(rng.integers(0, 2)))


def test_single_conv_layers_match_reference(core, rng):
    values, saturated = 0, 0
    for case in random_conv_cases(rng, 40):
        m = case["k"] * case["k"] * case["c"]
        layer = make_layer(core, "conv", "conv", kernel=case["k"], stride=case["stride"], pad=case["pad"],
                           **gemm_fields(rng, case["n"], m, case["relu"]))
        net = make_network(core, (case["h"], case["w"], case["c"]), [layer])
        images = random_images(rng, 2, (case["h"], case["w"], case["c"]))
        expected = run_network_reference(net, images)
        assert_all_equal(core.run_network(net, images, "fast", threads=2), expected, f"fast {case}")
        assert_all_equal(core.run_network(net, images, "reference", threads=1), expected, f"reference {case}")
        values += expected[0].size
        saturated += int(np.count_nonzero((expected[0] == 127) | (expected[0] == -128)))
    # The comparisons exercise the full output range, not mostly clipped values.
    assert saturated < 0.2 * values


def test_deep_layer_many_accumulation_rounds(core, rng):
    # M = 7*7*70 = 3430: 429 rounds of an 8-column SA; N = 130 spans three 64-row sections.
    layer = make_layer(core, "deep", "conv", kernel=7, stride=2, pad=3, **gemm_fields(rng, 130, 3430))
    net = make_network(core, (9, 8, 70), [layer])
    images = random_images(rng, 1, (9, 8, 70))
    expected = run_network_reference(net, images)
    for backend in ("fast", "reference", "cycle_sa"):
        assert_all_equal(core.run_network(net, images, backend), expected, backend)


def test_linear_flattens_hwc(core, rng):
    layer = make_layer(core, "fc", "linear", **gemm_fields(rng, 11, 3 * 5 * 7))
    net = make_network(core, (3, 5, 7), [layer])
    images = random_images(rng, 3, (3, 5, 7))
    assert_all_equal(core.run_network(net, images), run_network_reference(net, images), "linear")


def test_gemm_binding_every_kernel_and_backend(core, rng):
    n, m, p = 37, 203, 29
    w = rng.integers(-128, 128, (n, m), dtype=np.int8)
    x = rng.integers(-128, 128, (m, p), dtype=np.int8)
    bias = rng.integers(-128, 128, n, dtype=np.int8)
    expected = w.astype(np.int64) @ x.astype(np.int64) + (bias.astype(np.int64) << 7)[:, None]
    for kernel in core.fast_kernels():
        acc = core.gemm(w, x, bias, 7, backend="fast", kernel=kernel, threads=2)
        assert acc.dtype == np.int32 and acc.shape == (n, p)
        np.testing.assert_array_equal(acc, expected, err_msg=kernel)
    np.testing.assert_array_equal(core.gemm(w, x, bias, 7, backend="reference"), expected)
    acc, stats = core.sa_cycle_gemm(w, x, bias, 7, rows=16, cols=4, rg=4)
    np.testing.assert_array_equal(acc, expected)
    assert stats["waves"] == p * math.ceil(n / 16)
    assert stats["cycles_per_wave"] == math.ceil(m / 4)
    assert stats["cycles"] >= stats["waves"] * stats["cycles_per_wave"]


def test_im2col_is_patch_major_and_matches_reference_conv(core, rng):
    x = rng.integers(-128, 128, (6, 7, 5), dtype=np.int8)
    patches = core.im2col(x, 3, 2, 1)
    assert patches.shape == (3 * 4, 3 * 3 * 5)   # [P, M]
    w = rng.integers(-128, 128, (4, 3 * 3 * 5), dtype=np.int8)
    via_im2col = patches.astype(np.int64) @ w.astype(np.int64).T
    direct = conv_acc(x[None], w, 3, 2, 1).reshape(-1, 4)
    np.testing.assert_array_equal(via_im2col, direct)


def test_im2col_with_a_nonsquare_window_matches_reference_conv(core, rng):
    x = rng.integers(-128, 128, (6, 9, 5), dtype=np.int8)
    window = core.Window(kernel_h=3, kernel_w=5, stride_h=1, stride_w=2, pad_top=0, pad_bottom=1, pad_left=2,
                         pad_right=1)
    patches = core.im2col(x, window)
    # out_h = (6 + 0 + 1 - 3) / 1 + 1 = 5, out_w = (9 + 2 + 1 - 5) / 2 + 1 = 4; M = 3 * 5 * 5
    assert patches.shape == (5 * 4, 3 * 5 * 5)
    w = rng.integers(-128, 128, (4, 3 * 5 * 5), dtype=np.int8)
    via_im2col = patches.astype(np.int64) @ w.astype(np.int64).T
    direct = conv_acc(x[None], w, Window(3, 5, 1, 2, 0, 1, 2, 1)).reshape(-1, 4)
    np.testing.assert_array_equal(via_im2col, direct)
    with pytest.raises(ValueError, match="pad_left and pad_right"):
        core.im2col(x, core.Window(kernel_h=3, kernel_w=2, pad_left=2))


def small_network(core, rng):
    """conv+relu -> maxpool -> conv (+residual, align -2, relu) -> 1x1 conv -> add (aligns +1/-1)
    -> strided 7x7 conv -> avgpool -> linear (+ residual from a 1x1x10 conv... of the pool)."""
    c0 = make_layer(core, "c0", "conv", kernel=3, stride=1, pad=1, **gemm_fields(rng, 13, 3 * 3 * 5, relu=True))
    mp = make_layer(core, "mp", "max_pool", input=0, kernel=3, stride=2, pad=1)
    c1 = make_layer(core, "c1", "conv", input=1, kernel=5, stride=1, pad=2, residual_input=1, residual_shift=-2,
                    relu_after_residual=True, **gemm_fields(rng, 13, 5 * 5 * 13))
    c2 = make_layer(core, "c2", "conv", input=2, kernel=1, **gemm_fields(rng, 13, 13))
    add = make_layer(core, "add", "add", input=3, residual_input=2, input_shift=1, residual_shift=-1, relu=True)
    c3 = make_layer(core, "c3", "conv", input=4, kernel=7, stride=2, pad=3, **gemm_fields(rng, 70, 7 * 7 * 13))
    ap = make_layer(core, "ap", "avg_pool", input=5, kernel=3, stride=1, pad=1, avg_mult=57, out_shift=9)
    side = make_layer(core, "side", "linear", input=6, **gemm_fields(rng, 10, 3 * 3 * 70))
    fc = make_layer(core, "fc", "linear", input=6, residual_input=7, residual_shift=2,
                    **gemm_fields(rng, 10, 3 * 3 * 70))
    return make_network(core, (9, 11, 5), [c0, mp, c1, c2, add, c3, ap, side, fc])


def test_small_network_every_backend_and_thread_count(core, rng):
    net = small_network(core, rng)
    images = random_images(rng, 3, (9, 11, 5))
    expected = run_network_reference(net, images)
    assert {layer.kind.name for layer in net.layers} == KINDS
    for backend in ("fast", "reference", "cycle_sa"):
        for threads in (1, 2, 0):
            assert_all_equal(core.run_network(net, images, backend, threads=threads), expected,
                             f"{backend} threads={threads}")


def test_resnet18_small_image_matches_reference(core, rng):
    net = core.zoo.resnet18(seed=5, image_size=32, num_classes=10)
    images = random_images(rng, 2, (32, 32, 3))
    assert_all_equal(core.run_network(net, images, "fast"), run_network_reference(net, images), "resnet18")


def test_weight_override_matches_reference_on_modified_network(core, rng):
    net = small_network(core, rng)
    images = random_images(rng, 2, (9, 11, 5))
    noisy = rng.integers(-128, 128, net.layers[2].weights.size, dtype=np.int8)
    out = core.run_network(net, images, "fast", weights={2: noisy})
    layers = net.layers
    layers[2].weights = noisy
    modified = make_network(core, (9, 11, 5), layers)
    assert_all_equal(out, run_network_reference(modified, images), "weights override")


def test_bad_input_names_the_argument(core, rng):
    net = small_network(core, rng)
    good = random_images(rng, 1, (9, 11, 5))
    cases = [
        (dict(images=good.astype(np.int16)), "images"),
        (dict(images=good[0]), "images"),
        (dict(images=random_images(rng, 1, (9, 11, 4))), "images"),
        (dict(images=good, backend="gpu"), "backend"),
        (dict(images=good, weights={0: np.zeros(3, np.int8)}), "weights[0]"),
        (dict(images=good, weights={1: np.zeros(3, np.int8)}), "weights[1]"),
        (dict(images=good, weights={99: np.zeros(3, np.int8)}), "weights[99]"),
        (dict(images=good, weights={0: np.zeros(net.layers[0].weights.size, np.float32)}), "weights[0]"),
    ]
    for kwargs, field in cases:
        with pytest.raises(aimcemu.FormatError, match=field.replace("[", r"\[").replace("]", r"\]")):
            core.run_network(net, **kwargs)
    w = np.zeros((4, 6), np.int8)
    with pytest.raises(aimcemu.FormatError, match="'x'"):
        core.gemm(w, np.zeros((5, 2), np.int8), np.zeros(4, np.int8), 0)
    with pytest.raises(aimcemu.FormatError, match="'bias'"):
        core.gemm(w, np.zeros((6, 2), np.int8), np.zeros(3, np.int8), 0)
    with pytest.raises(aimcemu.FormatError, match="'rg'"):
        core.sa_cycle_gemm(w, np.zeros((6, 2), np.int8), np.zeros(4, np.int8), 0, rg=5)
    with pytest.raises(aimcemu.FormatError, match="im2col"):
        core.im2col(np.zeros((4, 4, 2), np.int8), 3, 1, 3)


@pytest.mark.slow
def test_full_size_resnets_match_reference(core, rng):
    """ResNet-18 and ResNet-50 at 224x224 (every real layer shape, incl. the 7x7/2 stem on 3
    channels and the 2048-deep 1x1 convs): the fast path equals the NumPy reference."""
    images = random_images(rng, 1, (224, 224, 3))
    for net in (core.zoo.resnet18(seed=2), core.zoo.resnet50(seed=2)):
        assert_all_equal(core.run_network(net, images, "fast"), run_network_reference(net, images), net.name)
