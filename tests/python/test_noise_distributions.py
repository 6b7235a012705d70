"""Kolmogorov-Smirnov tests of whole sampled distributions against closed forms.

A fixed seed makes each test deterministic; the threshold p > 1e-3 is what a correct model
passes with probability 0.999 for a random seed.  With n samples the KS statistic resolves
CDF errors of about 1.36/sqrt(n) (0.4 % for n = 1e5), so the quadrature that evaluates the
composite CDFs is made accurate to better than 1e-6.

The composite PCM CDF is built from pcm_like's published fits written out below (aihwkit 1.2.0's
``inference/noise/pcm.py``; docs/noise_models.md), not from the model's own sigma and nu
functions, so a wrong coefficient in the model fails it.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from aimcemu import noise

N = 100_000
P_MIN = 1e-3


def constant_layer(x: float, n: int = N) -> np.ndarray:
    """n weights equal to x plus one anchor 1.0 that maps to g_max."""
    w = np.full(n + 1, x)
    w[-1] = 1.0
    return w


def test_gaussian_sampler_is_standard_normal_with_correct_tails():
    model = noise.GenericNoiseModel(prog_additive=0.01)
    n = 1_000_000
    state = model.program(constant_layer(0.5, n), seed=11)
    z = (state.g_prog[:-1, 0] - state.g_target[:-1, 0]) / (0.01 * 25.0)
    assert stats.kstest(z, "norm").pvalue > P_MIN
    # tails beyond 4 sigma: binomial count, 5-sigma band
    p4 = 2 * special.ndtr(-4.0)
    count = np.count_nonzero(np.abs(z) > 4.0)
    assert abs(count - n * p4) < 5 * np.sqrt(n * p4)


@pytest.mark.parametrize("code", [-1.0, -0.3, 0.05, 0.7])
def test_generic_composite_weight_is_normal(code):
    """w = (g+ - g-)/scale with programming and read noise on both devices: N(code, 2(sp^2+sr^2)/scale^2)."""
    model = noise.GenericNoiseModel(prog_additive=0.02, read_additive=0.01)
    state = model.program(constant_layer(code), seed=3, chip=1)
    w = model.read(state, 60.0, 2)[:-1]
    sigma = np.sqrt(2 * ((0.02 * 25.0) ** 2 + (0.01 * 25.0) ** 2)) / state.scale
    assert stats.kstest(w, "norm", args=(code, sigma)).pvalue > P_MIN


# pcm_like at its defaults (aihwkit's PCMLikeNoiseModel): g in uS, x = g / G_MAX.
G_MAX, T0, T_READ = 25.0, 20.0, 250e-9


def pcm_prog_sigma(g: np.ndarray) -> np.ndarray:
    x = np.asarray(g) / G_MAX
    return (0.26348 + 1.9650 * x - 1.1731 * x**2) * G_MAX / 25.0   # prog_coeff at g_max 25 uS


def pcm_nu_mean_std(g: float) -> tuple[float, float]:
    ln_x = np.log(max(g / G_MAX, 1e-7))
    return float(np.clip(-0.0155 * ln_x + 0.0244, 0.049, 0.1)), float(np.clip(-0.0125 * ln_x - 0.0059, 0.008, 0.045))


def pcm_read_q(g: np.ndarray) -> np.ndarray:
    return np.minimum(0.0088 / np.maximum((np.abs(g) / G_MAX) ** 0.65, 1e-3), 0.2)


def pcm_device_cdf(g_target: float, t: float, y: np.ndarray, drift_scale: float = 1.0) -> np.ndarray:
    """CDF of a pcm_like device read at t (programmed-reference mode, every noise scale 1 but
    drift_scale): integrate the read-noise normal CDF over programming noise and the folded-normal
    drift exponent by Gauss-Hermite quadrature."""
    nodes, w = special.roots_hermitenorm(32)
    w = w / w.sum()
    g_prog = np.maximum(0.0, g_target + pcm_prog_sigma(g_target) * nodes)
    nu_mean, nu_std = pcm_nu_mean_std(g_target)
    nu = drift_scale * np.abs(nu_mean + nu_std * nodes)
    t_total = t + T0
    drift = (t_total / T0) ** -nu if t_total > T0 else np.ones_like(nu)
    g_drift = g_prog[:, None] * drift[None, :]                              # [prog node, nu node]
    read_time_factor = np.sqrt(np.log((t_total + T_READ) / (2 * T_READ)))
    sigma = g_drift * (pcm_read_q(g_prog) * read_time_factor)[:, None]
    sigma = np.maximum(sigma, 1e-300)  # far-tail nodes where g_prog clips to 0
    z = (y[:, None, None] - g_drift[None]) / sigma[None]
    return np.einsum("nij,ij->n", special.ndtr(z), w[:, None] * w[None, :])


@pytest.mark.parametrize("x, t", [
    (0.6, 86400.0),
    pytest.param(0.3, 0.0, marks=pytest.mark.slow),
    pytest.param(1.0, 0.0, marks=pytest.mark.slow),
    pytest.param(0.3, 86400.0 * 365, marks=pytest.mark.slow),
    pytest.param(1.0, 3600.0, marks=pytest.mark.slow),
])
def test_pcm_composite_device_distribution(x, t):
    model = noise.PCMLikeNoiseModel(drift_reference="programmed")
    g_target = x * G_MAX
    state = model.program(constant_layer(x, 20_000), seed=17, chip=3, layer=1)
    g = model.read_conductances(state, t, 5)[:-1, 0]
    assert stats.kstest(g, lambda y: pcm_device_cdf(g_target, t, np.asarray(y))).pvalue > P_MIN


def test_pcm_composite_detects_a_wrong_model():
    """The KS test has power: the same samples fail against a CDF with 10 % more drift."""
    model = noise.PCMLikeNoiseModel(drift_reference="programmed")
    state = model.program(constant_layer(0.6, 20_000), seed=17, chip=3, layer=1)
    g = model.read_conductances(state, 86400.0, 5)[:-1, 0]
    assert stats.kstest(g, lambda y: pcm_device_cdf(15.0, 86400.0, np.asarray(y), drift_scale=1.1)).pvalue < 1e-6
