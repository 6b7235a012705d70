"""The DAC's rounding at an exact tie: half up (floor(v + 0.5)), where aihwkit rounds half to even.

A DAC code is k = floor(x * per_code + 0.5) with per_code = steps / (2 inp_bound s_x), computed
in double (niu/peripherals.cpp, dac_codes).  With 126 steps, inp_bound 1 and an image whose
largest |x| is 126, per_code is exactly 1/2, so every odd x lands exactly on a tie; with 254
steps and noise management `none` (s_x = 128), per_code is 127/128 and x = +-64 give +-63.5.
aihwkit 1.2.0 rounds those with torch.round / rint, half to even (docs/peripherals.md,
"Differences from aihwkit"); the codes below are ours, and a change of the rounding rule (to
half to even, half away from zero or truncation) fails this test.
"""
from __future__ import annotations

import numpy as np

from aimcemu import peripherals as periph


def one_layer_net(core, inputs: int):
    layer = core.Layer()
    layer.name = "fc"
    layer.kind = core.LayerKind.linear
    layer.out_channels = 2
    layer.weights = np.ones(2 * inputs, dtype=np.int8)
    layer.bias = np.zeros(2, dtype=np.int8)
    layer.out_shift = 0
    net = core.Network()
    net.name = "dac_ties"
    net.input_shape = core.Shape3(1, 1, inputs)
    net.layers = [layer]
    net.resolve()
    return net


def codes(core, x: list[int], settings: dict) -> list[int]:
    image = np.array(x, dtype=np.int8)
    hook = core.niu.Peripherals(one_layer_net(core, image.size), [periph.core_settings(periph.resolve(settings))], 1, 0, 0)
    return hook.input_codes(0, image).astype(int).tolist()


def test_a_tie_rounds_half_up_with_abs_max_scale(core):
    # s_x = 126 (the image's largest |x|), 126 steps: v = x / 2, an exact tie for every odd x.
    x = [126, 1, 3, 5, 63, -1, -3, -5, -63, 0, 2, -2]
    ours = [63, 1, 2, 3, 32, 0, -1, -2, -31, 0, 1, -1]
    assert codes(core, x, {"inp_res": 1 / 126, "inp_bound": 1.0, "noise_management": "abs_max"}) == ours
    # Half to even (aihwkit's torch.round) differs at the ties whose lower neighbour is even:
    # x = 1, 5 (0.5, 2.5) and -3, -63 (-1.5, -31.5); at 1.5, 31.5, -0.5, -2.5 the two agree.
    half_to_even = np.round(np.array(x) / 2).astype(int).tolist()
    assert [x[i] for i, (a, b) in enumerate(zip(ours, half_to_even)) if a != b] == [1, 5, -3, -63]


def test_a_tie_rounds_half_up_with_a_fixed_full_scale(core):
    # noise_management none: s_x = 128; 254 steps: v = x * 127/128, a tie at x = +-64 (+-63.5).
    x = [64, -64, 127, -128, 1, -1]
    settings = {"inp_res": 1 / 254, "inp_bound": 1.0, "noise_management": "none"}
    assert codes(core, x, settings) == [64, -63, 126, -127, 1, -1]
