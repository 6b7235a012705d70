"""Tests added by the mutation check of the NIU (docs/testing_noise.md): each kills a plausible
datapath mistake that the statistical tests did not catch, asserting a closed form.

The NIU's back-conversion saturates a code to [-(2^(B-1)-1), 2^(B-1)-1] (docs/niu_datapath.md
section 3): symmetric, so that a code and its negative get mirror-image noise.  With alpha = 1 a
pair's difference never exceeds full scale, so saturation only shows with drift compensation
(alpha > 1); the statistical tests all ran at alpha = 1 and missed a clamp at -128.
"""
from __future__ import annotations

import numpy as np
import pytest

from aimcemu import niu


@pytest.mark.parametrize("out_bits", [8, 4])
def test_compensated_full_scale_codes_saturate_symmetrically(out_bits):
    # Clean codes +-127 and +-100 with alpha 4 at t = 0 (no drift): an output below full scale
    # needs the on-minus-off difference to fall under 1/4 of full scale, 0.54 g_max below the
    # target of code 100, some 13 programming sigmas (4 % of g_max there) plus read noise (4 %
    # relative).  So every output sits exactly at +-(2^(B-1) - 1): a closed form, no tolerance.
    # A clamp at -2^(B-1) puts the negative codes one step lower.
    top = (1 << (out_bits - 1)) - 1
    clean = np.repeat(np.array([127, -127, 100, -100], dtype=np.int8), 4096)
    noisy = niu.apply(clean, {"model": "pcm_like"}, seed=4, chip=1, round=2, t=0.0, alpha=4.0,
                      out_bits=out_bits).astype(int)
    np.testing.assert_array_equal(noisy, np.sign(clean.astype(int)) * top)


def test_output_range_is_symmetric_under_noise():
    # Random codes over the whole range with alpha at the NIU's largest for the layer: the
    # outputs cover both ends, and the negative end is -(2^7 - 1), never -128.
    rng = np.random.default_rng(7)
    clean = rng.integers(-127, 128, size=1 << 16).astype(np.int8)
    noisy = niu.apply(clean, {"model": "pcm_like"}, seed=9, chip=0, round=0, t=86400.0,
                      alpha=niu.max_alpha(127)).astype(int)
    assert noisy.max() == 127 and noisy.min() == -127
