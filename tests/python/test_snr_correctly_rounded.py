"""snr_db is the correctly rounded 10 log10(sum ref^2 / sum err^2) of the exact integer sums.

The reference is Python's decimal module at 60 digits (independent of the C library); float(Decimal)
rounds correctly, so the stored double must equal it bit for bit.  The old 10 * log10(double(ref) /
double(err)) failed it for ~40 % of the random pairs below (the quotient rounds before the
logarithm), and its glibc log10 differs between the FMA and non-FMA variants (review R, D1).
"""
from __future__ import annotations

import math
import random
from decimal import Decimal, getcontext

import numpy as np
import pytest

from aimcemu import _core


def exact_snr_db(ref_energy: int, error_energy: int) -> float:
    getcontext().prec = 60
    return float(10 * (Decimal(ref_energy) / Decimal(error_energy)).log10())


def greedy_squares(total: int, largest: int) -> list[int]:
    """Magnitudes d <= largest whose squares sum to total."""
    out = []
    while total:
        d = min(math.isqrt(total), largest)
        out.append(d)
        total -= d * d
    return out


def arrays_with_sums(ref_energy: int, error_energy: int) -> tuple[np.ndarray, np.ndarray]:
    """(noisy, reference) int8 arrays with sum ref^2 == ref_energy and sum (noisy-ref)^2 == error_energy.

    The reference is 127s and 1s; the error sits on extra zeros of the reference (noisy there is
    -128 or -d), so it does not change sum ref^2."""
    big, ones = divmod(ref_energy, 127 * 127)
    errors = greedy_squares(error_energy, 128)
    ref = np.concatenate([np.full(big, 127), np.ones(ones), np.zeros(len(errors))]).astype(np.int8)
    noisy = ref.copy()
    noisy[big + ones:] = -np.array(errors, dtype=np.int64)
    return noisy, ref


def energies(noisy, ref):
    r, e = ref.astype(np.int64), noisy.astype(np.int64) - ref.astype(np.int64)
    return int(np.sum(r * r)), int(np.sum(e * e))


# The review's cases: the first two store different bits with glibc's FMA and non-FMA log10 (the
# old code got both wrong on an FMA machine); the third is the review's other example.
REVIEW_PAIRS = [(1051, 997), (149964, 336), (33748, 494)]


@pytest.mark.parametrize("ref_energy,error_energy", REVIEW_PAIRS)
def test_review_pairs_are_correctly_rounded(ref_energy, error_energy):
    noisy, ref = arrays_with_sums(ref_energy, error_energy)
    assert energies(noisy, ref) == (ref_energy, error_energy)
    assert _core.snr_db(noisy, ref).hex() == exact_snr_db(ref_energy, error_energy).hex()


def test_random_array_sums_are_correctly_rounded():
    rng = random.Random(20261203)
    wrong = []
    for _ in range(3000):
        # log-uniform sums from 1 to 10^7, and every fifth pair within a few units of each other
        # (SNR near 0 dB, where the logarithm cancels most).
        ref_energy = int(10 ** rng.uniform(0, 7))
        error_energy = int(10 ** rng.uniform(0, 7)) if rng.random() < 0.8 else max(1, ref_energy + rng.randint(-3, 3))
        noisy, ref = arrays_with_sums(ref_energy, error_energy)
        assert energies(noisy, ref) == (ref_energy, error_energy)
        if _core.snr_db(noisy, ref) != exact_snr_db(ref_energy, error_energy):
            wrong.append((ref_energy, error_energy))
    assert wrong == []


def test_large_sums_are_correctly_rounded():
    # Sums a layer of 2^37 or more elements reaches: near 2^53, where double(sum) starts to round,
    # and beyond, up to the int64 limit; ratios within one unit of 1 as well.
    rng = random.Random(7)
    top = 2**63 - 1
    pairs = [(2**53 + 1, 2**53), (2**53, 2**53 + 1), (2**53 + 1, 3), (5, 2**53 + 1), (top, 1), (1, top),
             (top, top - 1), (top - 1, top), (2**62 + 1, 2**62), (10**18, 10**17), (3 * 2**60, 2**60)]
    for _ in range(2000):
        a = rng.randrange(2**52, 2**63)
        b = rng.choice([rng.randrange(1, 2**63), max(1, a + rng.randint(-1000, 1000)), rng.randrange(1, 1000)])
        pairs.append((a, b) if rng.random() < 0.5 else (b, a))
    wrong = [(a, b) for a, b in pairs if _core.snr_db_from_sums(a, b) != exact_snr_db(a, b)]
    assert wrong == []


def test_sums_binding_keeps_the_infinity_rules_and_refuses_negatives():
    assert _core.snr_db_from_sums(5, 0) == math.inf
    assert _core.snr_db_from_sums(0, 0) == math.inf  # noisy == ref == 0
    assert _core.snr_db_from_sums(0, 5) == -math.inf
    assert _core.snr_db_from_sums(1000, 10) == 20.0
    with pytest.raises(ValueError, match="error_energy"):
        _core.snr_db_from_sums(5, -1)
    with pytest.raises(ValueError, match="ref_energy"):
        _core.snr_db_from_sums(-5, 1)
