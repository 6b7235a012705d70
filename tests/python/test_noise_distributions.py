"""Kolmogorov-Smirnov tests of whole sampled distributions against closed forms.

A fixed seed makes each test deterministic; the threshold p > 1e-3 is what a correct model
passes with probability 0.999 for a random seed.  With n samples the KS statistic resolves
CDF errors of about 1.36/sqrt(n) (0.4 % for n = 1e5), so the quadrature that evaluates the
composite CDFs is made accurate to better than 1e-6.
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


def pcm_device_cdf(model: noise.PCMLikeNoiseModel, g_target: float, t: float, y: np.ndarray) -> np.ndarray:
    """CDF of a PCM device read at t (programmed-reference mode): integrate the read-noise normal
    CDF over programming noise and the folded-normal drift exponent by Gauss-Hermite quadrature."""
    p = model.params
    nodes, w = special.roots_hermitenorm(32)
    w = w / w.sum()
    g_prog = np.maximum(0.0, g_target + p["prog_noise_scale"] * model.prog_sigma(g_target) * nodes)
    nu = p["drift_scale"] * np.abs(model.nu_mean(g_target) + model.nu_std(g_target) * nodes)
    g_drift = g_prog[:, None] * model.drift_factor(nu, t)[None, :]          # [prog node, nu node]
    sigma = p["read_noise_scale"] * g_drift * (model.read_q(g_prog) * model.read_time_factor(t))[:, None]
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
    g_target = x * 25.0
    state = model.program(constant_layer(x, 20_000), seed=17, chip=3, layer=1)
    g = model.read_conductances(state, t, 5)[:-1, 0]
    assert stats.kstest(g, lambda y: pcm_device_cdf(model, g_target, t, np.asarray(y))).pvalue > P_MIN


def test_pcm_composite_detects_a_wrong_model():
    """The KS test has power: the same samples fail against a CDF with 10 % more drift."""
    model = noise.PCMLikeNoiseModel(drift_reference="programmed")
    state = model.program(constant_layer(0.6, 20_000), seed=17, chip=3, layer=1)
    g = model.read_conductances(state, 86400.0, 5)[:-1, 0]
    wrong = noise.PCMLikeNoiseModel(drift_scale=1.1, drift_reference="programmed")
    assert stats.kstest(g, lambda y: pcm_device_cdf(wrong, 15.0, 86400.0, np.asarray(y))).pvalue < 1e-6
