"""An independent pure-Python reference of the noise models' random keying and formulas.

It re-implements pcg32 (pcg-cpp's setseq_xsh_rr_64_32), the splitmix64 key chain and the
Box-Muller sampler exactly as docs/noise_models.md specifies them, and the PCM-like and
generic formulas from aihwkit's published constants, then requires the C++ core to agree.  This
pins the documented keying: anyone (the NIU, another language) can reproduce the draws.

Integer steps (the pcg32 outputs, the uniforms, which devices are stuck, the converter) must
agree exactly.  Values that go through log, sin, cos, exp or pow agree to RTOL: the C++ core
evaluates them with its own vectorised polynomials (noise_models/simd.hpp), a few ulp from
libm's; a keying or formula error (another device's draw, another stream) is off by O(1).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from aimcemu import noise

MASK64 = (1 << 64) - 1
RTOL = 1e-13   # a few hundred ulp of headroom over the few ulp the two math libraries differ by
PCG_MULT = 6364136223846793005


class Pcg32:
    def __init__(self, seed: int, stream: int) -> None:
        self.inc = ((stream << 1) | 1) & MASK64
        self.state = ((seed + self.inc) * PCG_MULT + self.inc) & MASK64

    def __call__(self) -> int:
        old = self.state
        self.state = (old * PCG_MULT + self.inc) & MASK64
        xorshifted = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & 0xFFFFFFFF


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


PURPOSE = {"programming": 1, "drift_exponent": 2, "fault": 3, "read": 4, "relaxation": 5}


def device_stream(seed: int, chip: int, layer: int, purpose: str, round_: int = 0) -> Pcg32:
    h = splitmix64(seed)
    for part in (chip, layer, PURPOSE[purpose], round_):
        h = splitmix64(h ^ part)
    return Pcg32(h, splitmix64(h ^ 0x5BD1E995))


def gaussians(gen: Pcg32, n: int) -> list[float]:
    """Box-Muller pairs: device 2j gets the cosine, device 2j+1 the sine of outputs 2j, 2j+1."""
    out = []
    while len(out) < n:
        a, b = gen(), gen()
        radius = math.sqrt(-2.0 * math.log((a + 0.5) * 2.0**-32))
        angle = 2.0 * math.pi * (b * 2.0**-32)
        out += [radius * math.cos(angle), radius * math.sin(angle)]
    return out[:n]


def single_pair(weights: np.ndarray, g_max: float) -> list[float]:
    scale = g_max / max(float(np.max(np.abs(weights))), 1e-7)
    g = []
    for w in weights.ravel():
        g += [min(max(w * scale, 0.0), g_max), min(max(-w * scale, 0.0), g_max)]
    return g


def test_pcg32_known_answer():
    gen = Pcg32(42, 54)
    assert [gen() for _ in range(6)] == [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]


def pcm_prog_sigma(g: float, g_max: float = 25.0) -> float:
    c0, c1, c2 = 0.26348, 1.9650, -1.1731
    x = g / g_max
    return ((c2 * x + c1) * x + c0) * (g_max / 25.0)


def pcm_nu_params(g: float, g_max: float = 25.0) -> tuple[float, float]:
    x = max(abs(g) / g_max, 1e-7)
    mu = min(max(-0.0155 * math.log(x) + 0.0244, 0.049), 0.1)
    sd = min(max(-0.0125 * math.log(x) - 0.0059, 0.008), 0.045)
    return mu, sd


def pcm_read_q(g: float, g_max: float = 25.0) -> float:
    return min(0.0088 / max((abs(g) / g_max) ** 0.65, 1e-3), 0.2)


@pytest.fixture
def weights() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((6, 7))


def test_pcm_programming_agrees_with_reference(weights):
    seed, chip, layer = 123, 4, 9
    model = noise.PCMLikeNoiseModel(drift_reference="programmed")
    state = model.program(weights, seed=seed, chip=chip, layer=layer)
    g_target = single_pair(weights, 25.0)
    xi_prog = gaussians(device_stream(seed, chip, layer, "programming"), len(g_target))
    xi_nu = gaussians(device_stream(seed, chip, layer, "drift_exponent"), len(g_target))
    g_prog = [max(0.0, g + 1.0 * pcm_prog_sigma(g) * z) for g, z in zip(g_target, xi_prog)]
    nu = [1.0 * abs(pcm_nu_params(g)[0] + pcm_nu_params(g)[1] * z) for g, z in zip(g_target, xi_nu)]
    assert state.g_target.ravel().tolist() == g_target
    np.testing.assert_allclose(state.g_prog.ravel(), g_prog, rtol=RTOL, atol=0)
    np.testing.assert_allclose(state.nu.ravel(), nu, rtol=RTOL, atol=0)

    # a read in the physical mode: drift then relative 1/f noise keyed by the round
    t, round_ = 3600.0, 7
    xi_read = gaussians(device_stream(seed, chip, layer, "read", round_), len(g_target))
    t_total = t + 20.0
    factor = math.sqrt(math.log((t_total + 250e-9) / (2.0 * 250e-9)))
    log_ratio = math.log(t_total / 20.0)
    expected = []
    for g, n, z in zip(g_prog, nu, xi_read):
        g_drift = g * math.exp(-n * log_ratio)
        expected.append(max(0.0, g_drift + 1.0 * abs(g_drift) * (pcm_read_q(g) * factor) * z))
    np.testing.assert_allclose(model.read_conductances(state, t, round_).ravel(), expected, rtol=RTOL, atol=0)


def test_generic_model_agrees_with_reference(weights):
    model = noise.GenericNoiseModel(prog_additive=0.03, read_multiplicative=0.02, stuck_low_prob=0.1)
    state = model.program(weights, seed=1, chip=2, layer=3)
    g_target = single_pair(weights, 25.0)
    fault_gen = device_stream(1, 2, 3, "fault")
    uniforms = [fault_gen() * 2.0**-32 for _ in g_target]
    xi = gaussians(device_stream(1, 2, 3, "programming"), len(g_target))
    expected = [0.0 if u < 0.1 else g + math.sqrt((0.03 * 25.0) ** 2 + (0.0 * g) ** 2) * z for g, u, z in zip(g_target, uniforms, xi)]
    np.testing.assert_allclose(state.g_prog.ravel(), expected, rtol=RTOL, atol=0)
    assert state.fault.ravel().tolist() == [1 if u < 0.1 else 0 for u in uniforms]


def test_reading_reconverts_like_aihwkit(weights):
    """drift_reference='reconverted': W_prog is re-mapped with max|W_prog| -> g_max before drift."""
    model = noise.PCMLikeNoiseModel(read_noise_scale=0.0)
    state = model.program(weights, seed=3)
    w_prog = model.programmed_weights(state)
    g_start = np.array(single_pair(w_prog, 25.0)).reshape(state.g_prog.shape)
    t = 86400.0
    expected_g = g_start * np.exp(-state.nu * math.log((t + 20.0) / 20.0))
    np.testing.assert_allclose(model.read_conductances(state, t, 0), expected_g, rtol=1e-14, atol=0)
