"""The power-of-two INT8 quantization scheme used by the model importers.

Every tensor t (activation or weight) is stored as int8 q with one per-tensor scale 2^-f, where f
is the tensor's *frac bits*: t ~= q * 2^-f.  The arithmetic these numbers feed is the contract in
formats/network.hpp; this module only chooses the integers.  docs/import.md explains the scheme.

All rounding is half up (floor(v + 0.5)), the same rule the accelerator's requantizer uses, so a
value quantized here and one requantized in hardware round the same way.  Only NumPy (and the
field ranges of the C++ core) are used, so the scheme can be tested without torch.
"""
from __future__ import annotations

import math

import numpy as np

from . import _core

INT8_MIN, INT8_MAX = -128, 127

# Frac bits for a tensor that is zero everywhere in calibration: any scale represents it exactly;
# 7 (the range [-1, 1)) keeps the shifts of its consumers small.
FRAC_BITS_OF_ZERO_TENSOR = 7
# Frac bits are clamped to this range so that a nearly-dead tensor cannot drive shifts out of the
# fields' ranges below (out_shift, residual and input shifts).  The importers refuse a range the
# clamp would saturate or round to zero, and warn where it only costs precision (docs/import.md).
FRAC_BITS_MIN, FRAC_BITS_MAX = -16, 24
# The largest range a tensor can have (at 2^-FRAC_BITS_MIN, every value above it saturates), and
# the smallest at which int8's full precision is kept (below it, the finest scale 2^-FRAC_BITS_MAX
# leaves fewer than 7 bits).
RANGE_MAX = INT8_MAX * 2.0 ** -FRAC_BITS_MIN
RANGE_FULL_PRECISION_MIN = INT8_MAX * 2.0 ** -FRAC_BITS_MAX
# The largest value of each layer field, as formats/network.hpp states its range.
BIAS_SHIFT_MAX = _core.LAYER_FIELD_RANGES["bias_shift"][1]
OUT_SHIFT_MAX = _core.LAYER_FIELD_RANGES["out_shift"][1]
ALIGN_SHIFT_MAX = _core.LAYER_FIELD_RANGES["residual_shift"][1]   # residual_shift and input_shift: -max..max
AVG_MULT_MAX = _core.LAYER_FIELD_RANGES["avg_mult"][1]


def round_half_up(v: np.ndarray) -> np.ndarray:
    return np.floor(np.asarray(v, dtype=np.float64) + 0.5)


def frac_bits_for_range(max_abs: float) -> int:
    """The largest f with max_abs * 2^f <= 127: the finest scale at which the range still fits,
    clamped to FRAC_BITS_MIN..FRAC_BITS_MAX."""
    return int(min(max(unclamped_frac_bits(max_abs), FRAC_BITS_MIN), FRAC_BITS_MAX))


def unclamped_frac_bits(max_abs: float) -> int:
    """The largest f with max_abs * 2^f <= 127, whether or not the format's fields can hold it."""
    if not math.isfinite(max_abs):
        raise ValueError(f"cannot choose a scale for a tensor whose range is {max_abs}")
    if max_abs <= 0.0:
        return FRAC_BITS_OF_ZERO_TENSOR
    f = math.floor(math.log2(INT8_MAX / max_abs))
    # log2 can land one step high on exact powers of two through rounding; correct it.
    while max_abs * 2.0 ** f > INT8_MAX:
        f -= 1
    return int(f)


def quantize(values: np.ndarray, frac_bits: int) -> np.ndarray:
    """round_half_up(values * 2^frac_bits), saturated to int8."""
    scaled = round_half_up(np.asarray(values, dtype=np.float64) * 2.0 ** frac_bits)
    return np.clip(scaled, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize(values: np.ndarray, frac_bits: int) -> np.ndarray:
    return np.asarray(values, dtype=np.float64) * 2.0 ** -frac_bits


def quantize_weights(weights: np.ndarray) -> tuple[np.ndarray, int]:
    """Per-tensor max-abs quantization of a weight tensor: (int8 weights, frac bits)."""
    frac = frac_bits_for_range(float(np.max(np.abs(weights))) if np.size(weights) else 0.0)
    return quantize(weights, frac), frac


def quantize_bias(bias: np.ndarray, acc_frac_bits: int) -> tuple[np.ndarray, int]:
    """Bias as int8 plus a left shift: bias_int8 << shift ~= bias * 2^acc_frac_bits.

    The shift is the smallest one at which every bias fits int8, so the bias keeps as many bits as
    int8 allows at the accumulator's scale."""
    bias = np.asarray(bias, dtype=np.float64)
    for shift in range(BIAS_SHIFT_MAX + 1):
        q = round_half_up(bias * 2.0 ** (acc_frac_bits - shift))
        if q.size == 0 or (q.min() >= INT8_MIN and q.max() <= INT8_MAX):
            return q.astype(np.int8), shift
    raise ValueError(f"bias up to {np.max(np.abs(bias)):.3g} does not fit int8 << {BIAS_SHIFT_MAX} at the "
                     f"accumulator scale 2^-{acc_frac_bits}")


def avg_pool_multiplier(ratio: float) -> tuple[int, int]:
    """(avg_mult, out_shift) with avg_mult / 2^out_shift ~= ratio, avg_mult in 1..AVG_MULT_MAX.

    The largest shift whose multiplier still fits int8 gives the closest approximation (for
    ratio = 1/(k*k) with k a power of two it is exact)."""
    if not ratio > 0.0:
        raise ValueError(f"average-pool scale must be positive, got {ratio}")
    best = None
    for shift in range(OUT_SHIFT_MAX + 1):
        mult = int(round_half_up(ratio * 2.0 ** shift))
        if mult > AVG_MULT_MAX:
            break
        if mult >= 1:
            best = (mult, shift)
    if best is None:
        raise ValueError(f"average-pool scale {ratio} cannot be written as m / 2^s with m in 1..{AVG_MULT_MAX}, "
                         f"s in 0..{OUT_SHIFT_MAX}")
    return best


def quantize_images(images_nchw: np.ndarray, input_frac_bits: int) -> np.ndarray:
    """Float images [N, C, H, W] (PyTorch layout) -> int8 [N, H, W, C] (the network's HWC input)."""
    images = np.asarray(images_nchw, dtype=np.float64)
    if images.ndim != 4:
        raise ValueError(f"images: expected [N, C, H, W], got shape {images.shape}")
    return np.ascontiguousarray(quantize(images, input_frac_bits).transpose(0, 2, 3, 1))
