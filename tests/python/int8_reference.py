"""Independent pure-NumPy reference of aimcemu's bit-exact INT8 arithmetic contract.

This module is the yardstick the C++ PU model (and the PyTorch importer) is tested against, so it
shares no code with the C++ side: convolution is an explicit loop over kernel taps with a tensor
contraction per tap (no IM2COL), every intermediate is int64, and each rule of the contract in
formats/network.hpp / docs/arithmetic.md is one small function here.

    conv / linear:  acc = sum(w * x) + (bias << bias_shift)
                    y   = sat8(round_shift(acc, out_shift)); relu if `relu`
    add:            y   = sat8(align(a, input_shift) + align(b, residual_shift));
                    relu if `relu` or `relu_after_residual`
    max_pool:       y   = max over the window (padding never wins); relu if `relu`
    avg_pool:       acc = avg_mult * sum(window, zero padding); y = sat8(round_shift(acc, out_shift));
                    relu if `relu`
    every kind except add, when residual_input >= 0:
                    y   = sat8(y + align(r, residual_shift)); relu if `relu_after_residual`

round_shift(v, s) = (v + 2^(s-1)) >> s for s > 0 (arithmetic shift: round half up), v for s = 0.
align(r, s) = r << s for s >= 0, round_shift(r, -s) for s < 0.

Public entry point: ``run_network_reference(net, images) -> list of int8 [N, H, W, C] arrays``,
one per layer, for a resolved ``aimcemu._core.Network`` and int8 images [N, H, W, C] (HWC).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

INT8_MIN, INT8_MAX = -128, 127


def round_shift(v: np.ndarray, s: int) -> np.ndarray:
    """Power-of-two division rounding half up: (v + 2^(s-1)) >> s; identity for s == 0."""
    v = np.asarray(v, dtype=np.int64)
    if s == 0:
        return v
    if s < 0:
        raise ValueError(f"round_shift needs s >= 0, got {s}")
    return (v + (np.int64(1) << np.int64(s - 1))) >> np.int64(s)


def align(r: np.ndarray, s: int) -> np.ndarray:
    """Bring a residual operand to the output's scale: r << s, or round_shift(r, -s) for s < 0."""
    r = np.asarray(r, dtype=np.int64)
    return r << np.int64(s) if s >= 0 else round_shift(r, -s)


def sat8(v: np.ndarray) -> np.ndarray:
    return np.clip(v, INT8_MIN, INT8_MAX).astype(np.int64)


def relu(v: np.ndarray) -> np.ndarray:
    return np.maximum(v, 0)


class Window(NamedTuple):
    """A window per axis: kernel, stride, pads (top, bottom, left, right)."""
    kh: int
    kw: int
    sh: int
    sw: int
    top: int
    bottom: int
    left: int
    right: int

    @classmethod
    def square(cls, kernel: int, stride: int = 1, pad: int = 0) -> "Window":
        return cls(kernel, kernel, stride, stride, pad, pad, pad, pad)

    @classmethod
    def of(cls, layer) -> "Window":
        w = layer.window
        return cls(w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_bottom, w.pad_left, w.pad_right)

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        return (h + self.top + self.bottom - self.kh) // self.sh + 1, (w + self.left + self.right - self.kw) // self.sw + 1


def _as_window(kernel, stride, pad) -> Window:
    return kernel if isinstance(kernel, Window) else Window.square(kernel, stride, pad)


def _window(padded: np.ndarray, ky: int, kx: int, win: Window, oh: int, ow: int) -> np.ndarray:
    """The [N, oh, ow, C] slice of a padded NHWC tensor that kernel tap (ky, kx) reads."""
    return padded[:, ky: ky + win.sh * (oh - 1) + 1: win.sh, kx: kx + win.sw * (ow - 1) + 1: win.sw, :]


def _pad_hw(x: np.ndarray, win: Window, value: int) -> np.ndarray:
    return np.pad(x, ((0, 0), (win.top, win.bottom), (win.left, win.right), (0, 0)), constant_values=value)


def conv_acc(x: np.ndarray, weights: np.ndarray, kernel, stride: int = 1, pad: int = 0) -> np.ndarray:
    """Exact convolution sums: x int [N,H,W,C], weights [O, kh, kw, C] -> int64 [N, oh, ow, O].
    kernel: a Window, or a square kernel with stride and pad."""
    win = _as_window(kernel, stride, pad)
    x = np.asarray(x, dtype=np.int64)
    w = np.asarray(weights, dtype=np.int64).reshape(-1, win.kh, win.kw, x.shape[3])
    oh, ow = win.out_hw(x.shape[1], x.shape[2])
    padded = _pad_hw(x, win, 0)
    acc = np.zeros((x.shape[0], oh, ow, w.shape[0]), dtype=np.int64)
    for ky in range(win.kh):
        for kx in range(win.kw):
            tap = _window(padded, ky, kx, win, oh, ow)
            acc += np.tensordot(tap, w[:, ky, kx, :], axes=([3], [1]))
    return acc


def linear_acc(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Exact FC sums on the HWC-flattened input: x [N,H,W,C], weights [O, H*W*C] -> [N,1,1,O]."""
    flat = np.asarray(x, dtype=np.int64).reshape(x.shape[0], -1)
    w = np.asarray(weights, dtype=np.int64).reshape(-1, flat.shape[1])
    return (flat @ w.T).reshape(x.shape[0], 1, 1, w.shape[0])


def max_pool(x: np.ndarray, kernel, stride: int = 1, pad: int = 0) -> np.ndarray:
    """Exact max over each window; padded positions hold a value below any int8 so never win."""
    win = _as_window(kernel, stride, pad)
    x = np.asarray(x, dtype=np.int64)
    oh, ow = win.out_hw(x.shape[1], x.shape[2])
    padded = _pad_hw(x, win, np.iinfo(np.int64).min)
    out = np.full((x.shape[0], oh, ow, x.shape[3]), np.iinfo(np.int64).min, dtype=np.int64)
    for ky in range(win.kh):
        for kx in range(win.kw):
            out = np.maximum(out, _window(padded, ky, kx, win, oh, ow))
    return out


def window_sum(x: np.ndarray, kernel, stride: int = 1, pad: int = 0) -> np.ndarray:
    """Sum over each window with zero padding (padding counts in the window, as in the GEMM)."""
    win = _as_window(kernel, stride, pad)
    x = np.asarray(x, dtype=np.int64)
    oh, ow = win.out_hw(x.shape[1], x.shape[2])
    padded = _pad_hw(x, win, 0)
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=np.int64)
    for ky in range(win.kh):
        for kx in range(win.kw):
            out += _window(padded, ky, kx, win, oh, ow)
    return out


def requantize(acc: np.ndarray, out_shift: int, apply_relu: bool) -> np.ndarray:
    y = sat8(round_shift(acc, out_shift))
    return relu(y) if apply_relu else y


def _kind(layer) -> str:
    kind = layer.kind
    return kind.name if hasattr(kind, "name") else str(kind)


def run_layer(layer, x: np.ndarray, residual: np.ndarray | None) -> np.ndarray:
    """One layer of the contract.  x: producer output [N,H,W,C]; residual: the second operand or
    None.  Returns int64 values already in int8 range."""
    kind = _kind(layer)
    if kind == "add":
        y = sat8(align(x, layer.input_shift) + align(residual, layer.residual_shift))
        return relu(y) if (layer.relu or layer.relu_after_residual) else y
    if kind in ("conv", "linear"):
        weights = np.asarray(layer.weights, dtype=np.int64)
        acc = (conv_acc(x, weights, Window.of(layer)) if kind == "conv"
               else linear_acc(x, weights))
        acc = acc + (np.asarray(layer.bias, dtype=np.int64) << np.int64(layer.bias_shift))
        y = requantize(acc, layer.out_shift, layer.relu)
    elif kind == "max_pool":
        y = max_pool(x, Window.of(layer))
        y = relu(y) if layer.relu else y
    elif kind == "avg_pool":
        acc = np.int64(layer.avg_mult) * window_sum(x, Window.of(layer))
        y = requantize(acc, layer.out_shift, layer.relu)
    else:
        raise ValueError(f"layer {layer.name}: unknown kind {kind}")
    if residual is not None:
        y = sat8(y + align(residual, layer.residual_shift))
        y = relu(y) if layer.relu_after_residual else y
    return y


def run_network_reference(net, images) -> list[np.ndarray]:
    """Runs every layer of a resolved ``_core.Network`` on int8 images [N, H, W, C].

    Returns one int8 array [N, H, W, C] per layer, in network order."""
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    expected = tuple(net.input_shape)
    if images.ndim != 4 or tuple(images.shape[1:]) != expected:
        raise ValueError(f"images: expected [N, {expected[0]}, {expected[1]}, {expected[2]}], got {images.shape}")
    layers = net.layers  # one copy of the layer list (the binding copies on every access)
    outputs: list[np.ndarray] = []

    def producer(index: int) -> np.ndarray:
        return images.astype(np.int64) if index < 0 else outputs[index]

    for layer in layers:
        residual = producer(layer.residual_input) if layer.residual_input >= 0 else None
        y = run_layer(layer, producer(layer.input), residual)
        expected_out = (images.shape[0], *tuple(layer.out_shape))
        if y.shape != expected_out:
            raise AssertionError(f"layer {layer.name}: reference produced {y.shape}, network says {expected_out}")
        outputs.append(y)
    return [o.astype(np.int8) for o in outputs]
