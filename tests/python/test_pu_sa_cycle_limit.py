"""The cycle-level systolic-array model's default cycle limit is an upper bound for every config
its check accepts: shallow FIFOs (fifo_depth = 1) or a one-wave WRB (wrb_waves = 1) serialize the
waves, and with N > rows such runs used to stop at the limit ("the WRB read side waits for wave
...") although they finish bit-exact.  An explicit cycle_limit still stops a run."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import aimcemu
from aimcemu import _core

SHAPES = [(1, 1, 1), (5, 7, 3), (17, 33, 9), (40, 3, 5)]


def exact(w, x, b, shift):
    return w.astype(np.int64) @ x.astype(np.int64) + (b.astype(np.int64) << shift)[:, None]


@pytest.mark.parametrize("rows, cols, rg", [(r, c, g) for r, c, g in itertools.product((1, 2, 8, 16), (1, 3, 8), (1, 2, 8))
                                            if g <= r and r % g == 0])
def test_shallow_configs_finish_exactly_within_the_default_limit(rows, cols, rg):
    rng = np.random.default_rng(rows * 100 + cols * 10 + rg)
    for (n, m, p), fifo, wrb in itertools.product(SHAPES, (1, 2, 16), (1, 2, 64)):
        w = rng.integers(-128, 128, (n, m), dtype=np.int8)
        x = rng.integers(-128, 128, (m, p), dtype=np.int8)
        b = rng.integers(-128, 128, n, dtype=np.int8)
        acc, stats = _core.sa_cycle_gemm(w, x, b, 5, rows=rows, cols=cols, rg=rg, fifo_depth=fifo, wrb_waves=wrb)
        np.testing.assert_array_equal(acc, exact(w, x, b, 5), err_msg=str((rows, cols, rg, fifo, wrb, n, m, p)))
        assert stats["cycles"] <= stats["cycle_limit"]


def test_the_reviewers_failing_configs_now_finish():
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (17, 33), dtype=np.int8)
    x = rng.integers(-128, 128, (33, 9), dtype=np.int8)
    b = np.zeros(17, np.int8)
    for cfg in (dict(rows=8, cols=8, rg=8, fifo_depth=1), dict(rows=8, cols=8, rg=8, wrb_waves=1),
                dict(rows=16, cols=8, rg=8, fifo_depth=1)):
        acc, _ = _core.sa_cycle_gemm(w, x, b, 0, **cfg)
        np.testing.assert_array_equal(acc, exact(w, x, b, 0))


def test_an_explicit_cycle_limit_stops_the_run_and_is_reported():
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (64, 72), dtype=np.int8)
    x = rng.integers(-128, 128, (72, 6), dtype=np.int8)
    b = np.zeros(64, np.int8)
    with pytest.raises(aimcemu.FormatError, match="exceeded 30 cycles"):
        _core.sa_cycle_gemm(w, x, b, 0, cycle_limit=30)
    _, stats = _core.sa_cycle_gemm(w, x, b, 0, cycle_limit=100000)
    assert stats["cycle_limit"] == 100000
