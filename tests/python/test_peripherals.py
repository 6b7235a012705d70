"""Analog tile peripherals against a float reference written here from aihwkit 1.2.0's
definitions (rpucuda/rpu_forward_backward_pass.cpp and rpu_pulsed_meta_parameter.cpp, read for
facts only):

  resolution   res = r * 2 * bound, with r = 1/steps (or 1/r when r > 1)
  DAC          v = round(x * scale / res) * res, then clipped to [-inp_bound, inp_bound]
  ADC          v = y + out_noise * N(0, 1); v = round(v / res) * res; v = clip(v, +-out_bound)
  noise mgmt   abs_max: scale = 1 / max|x| (we take the max per image, aihwkit per vector)

in normalised units (an output of 1 = s_w * s_x accumulator units; docs/peripherals.md).
Tolerances come from the sample sizes (5 standard errors); each docstring names a plausible
wrong model that the tolerance rejects.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import aimcemu
from aimcemu import peripherals as periph

N_IMAGES, P, N = 64, 64, 64   # 262144 outputs per setting


def linear_net(core, m: int, n: int, rng, s_w: int):
    """One linear layer (bias 0, so the accumulator is the analog sum) with largest |w| = s_w."""
    layer = core.Layer()
    layer.name = "fc"
    layer.kind = core.LayerKind.linear
    layer.out_channels = n
    w = rng.integers(-s_w, s_w + 1, n * m).astype(np.int8)
    w[0] = s_w
    layer.weights = w
    layer.bias = np.zeros(n, dtype=np.int8)
    layer.out_shift = 0
    net = core.Network()
    net.name = "periph"
    net.input_shape = core.Shape3(1, 1, m)
    net.layers = [layer]
    net.resolve()
    return net


def hook(core, net, settings: dict, seed=1, chip=0, round_id=0):
    return core.niu.Peripherals(net, [periph.core_settings(periph.resolve(settings))], seed, chip, round_id)


def apply_many(peripherals, x, acc_of_image):
    """y [images, P, N] for each image's accumulators (image index = its position)."""
    return np.stack([peripherals.apply_output(0, i, x, acc_of_image(i)) for i in range(N_IMAGES)])


@pytest.fixture
def setup(core, rng):
    s_w, s_x = 100, 60
    net = linear_net(core, 8, N, rng, s_w)
    x = np.zeros(8, dtype=np.int8)
    x[3] = -s_x                     # abs-max full scale s_x
    return net, x, float(s_w * s_x)


@pytest.mark.parametrize("out_noise", [0.02, 0.06, 0.2])
def test_output_noise_variance_is_out_noise_squared(core, rng, setup, out_noise):
    """var((y - acc) / U) = out_noise^2 (+ the final rounding to integers, 1/12 / U^2).  A model
    whose noise were relative to the INT8 full scale (128 * 128) instead of s_w * s_x, or summed
    two normals (x sqrt 2), is off by 170% / 100%; the tolerance is 1.4%."""
    net, x, unit = setup
    p = hook(core, net, {"out_noise": out_noise})
    acc = rng.integers(-20000, 20000, (N_IMAGES, P, N)).astype(np.int32)
    y = apply_many(p, x, lambda i: acc[i])
    d = (y.astype(np.float64) - acc) / unit
    n = d.size
    expected = out_noise**2 + 1 / 12 / unit**2
    assert abs(d.var() / expected - 1) < 5 * math.sqrt(2 / n)
    assert abs(d.mean()) < 5 * math.sqrt(expected / n)
    # Standardised fourth moment of a normal is 3 (checks the shape, not just the scale).
    kurtosis = np.mean((d - d.mean()) ** 4) / d.var() ** 2
    assert abs(kurtosis - 3) < 5 * math.sqrt(24 / n)
    # Different images draw different noise (the key includes the image index).
    assert not np.array_equal(y[0] - acc[0], y[1] - acc[1])


def test_the_lanes_of_a_chunk_draw_independent_noise(core, rng, setup):
    """Each of the block's 8 lanes has its own stream (periph_stream_state keyed by the lane):
    the noise of any two outputs is uncorrelated.  Review rev_A: a model whose lanes all drew
    lane 0's stream (the 8 outputs of a chunk with the same noise, correlation 1) passed every
    test above.  4096 samples per output: the bound is 6 standard errors of a null correlation,
    over the 2016 pairs of the 64 outputs."""
    net, x, unit = setup
    p = hook(core, net, {"out_noise": 0.2})
    zero = np.zeros((P, N), dtype=np.int32)
    d = apply_many(p, x, lambda i: zero).reshape(-1, N).astype(np.float64)
    corr = np.corrcoef(d.T)
    off_diagonal = corr[~np.eye(N, dtype=bool)]
    assert np.abs(off_diagonal).max() < 6 / math.sqrt(d.shape[0])


def _normal_cdf(z):
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


@pytest.mark.parametrize("bound", [0.5, 1.0, 2.0])
def test_clipping_fraction_matches_the_normal_tail(core, rng, setup, bound):
    """Fraction of outputs at +-out_bound = mean over outputs of P(|y + out_noise z| >= bound)
    (aihwkit clips after noise and discretisation; no ADC here).  Clipping before the noise
    instead changes the fraction by several percent of itself; the tolerance is 5 binomial SE."""
    net, x, unit = setup
    out_noise = 0.2
    p = hook(core, net, {"out_noise": out_noise, "out_bound": bound})
    y_n = rng.uniform(-1.3 * bound, 1.3 * bound, (N_IMAGES, P, N))
    acc = np.round(y_n * unit).astype(np.int32)
    y = apply_many(p, x, lambda i: acc[i])
    bound_acc = round(bound * unit)
    clipped = np.abs(y) == bound_acc
    assert np.all(np.abs(y) <= bound_acc)
    exact = acc / unit
    prob = _normal_cdf((-bound - exact) / out_noise) + 1 - _normal_cdf((bound - exact) / out_noise)
    se = math.sqrt(float(np.sum(prob * (1 - prob)))) / prob.size
    assert abs(clipped.mean() - prob.mean()) < 5 * se, (clipped.mean(), prob.mean())


@pytest.mark.parametrize("steps", [16, 64, 256, 1024])
def test_adc_levels_equal_the_float_reference(core, rng, setup, steps):
    """Without noise every output is the float reference's level, round(y / res) * res clipped
    at the bound, in accumulator units to within one unit (the fixed-point step).  Off-by-one
    levels are allowed only within 1e-6 of a rounding tie.  The quantisation error's mean square
    is res^2 / 12 for inputs spread over many levels."""
    net, x, unit = setup
    bound = 1.0
    p = hook(core, net, {"out_bound": bound, "out_res": 1 / steps})
    y_n = rng.uniform(-1.2, 1.2, (N_IMAGES, P, N))
    acc = np.round(y_n * unit).astype(np.int32)
    y = apply_many(p, x, lambda i: acc[i]).astype(np.float64)
    res = 2 * bound / steps
    exact = acc / unit
    ref = np.clip(np.floor(exact / res + 0.5) * res, -bound, bound) * unit
    near_tie = np.abs(np.abs(exact / res - np.floor(exact / res)) - 0.5) < 1e-6
    assert np.all((np.abs(y - ref) <= 1.0) | near_tie)
    assert np.count_nonzero(np.abs(y - ref) > 1.0) <= np.count_nonzero(near_tie)
    inside = np.abs(exact) < bound - res
    err = (y[inside] - acc[inside]) / unit
    mse = np.mean(err**2)
    # The float reference on the same integer inputs, rounded to integers like every PU result.
    ref_mse = np.mean(((np.floor(ref[inside] + 0.5) - acc[inside]) / unit) ** 2)
    # A uniform error of variance res^2/12 has a sample mean square with SE sqrt(res^4/180/n).
    se = math.sqrt(res**4 / 180 / err.size)
    assert abs(mse - ref_mse) < 5 * se
    # The registers a driver reads back describe that step: adc_step = 2^e * f with f in [1, 2)
    # (e >= 0 here) gives STEP = f * 2^30 with STEP_SHIFT 30 - e and RECIP = 2^(31 + e) / adc_step
    # with RECIP_SHIFT 31 + e (docs/peripherals.md); the shifts were missing from the dict.
    regs = p.registers(0, x)
    adc_step = res * unit
    e = math.frexp(adc_step)[1] - 1
    assert (regs["step_shift"], regs["recip_shift"]) == (30 - e, 31 + e), (regs, adc_step)
    assert regs["step"] == math.floor(math.ldexp(adc_step, regs["step_shift"]) + 0.5)
    assert regs["recip"] == math.floor(math.ldexp(1 / adc_step, regs["recip_shift"]) + 0.5)
    # Closed form: res^2/12, plus up to two uniform one-unit roundings (integer inputs and
    # outputs), 2/(12 unit^2), which matters only for fine ADCs (1.5 % at 1024 steps here).
    assert abs(mse - res**2 / 12) < 5 * se + 2 / (12 * unit**2)


@pytest.mark.parametrize("steps", [32, 256])
def test_noise_and_adc_add_as_independent_errors(core, rng, setup, steps):
    """With output noise comparable to or above the ADC step, aihwkit's noise-then-quantise gives
    errors of variance out_noise^2 + res^2 / 12 (Widrow's quantisation theorem).  Quantising
    before adding the noise would give the same variance but a non-uniform per-level error; a
    model that dropped the noise would miss by > 90%.  Tolerance 5 SE of the variance."""
    net, x, unit = setup
    out_noise, bound = 0.06, 1.0
    res = 2 * bound / steps
    p = hook(core, net, {"out_noise": out_noise, "out_bound": bound, "out_res": 1 / steps})
    y_n = rng.uniform(-0.5, 0.5, (N_IMAGES, P, N))
    acc = np.round(y_n * unit).astype(np.int32)
    y = apply_many(p, x, lambda i: acc[i])
    d = (y.astype(np.float64) - acc) / unit
    expected = out_noise**2 + res**2 / 12
    assert abs(d.var() / expected - 1) < 5 * math.sqrt(2 / d.size)


def test_dac_codes_follow_aihwkit_discretisation(core, rng):
    """DAC codes: round(x / s_x / res) with res = 2 * inp_bound / steps, clipped at the bound;
    s_x = max|x| of the image (abs_max) or 128 (none)."""
    net = linear_net(core, 300, 4, rng, 127)
    x = rng.integers(-128, 128, 300).astype(np.int8)
    for nm in ("abs_max", "none"):
        for steps, inp_bound in ((126, 1.0), (254, 1.0), (16, 0.5), (7, 2.0)):
            p = hook(core, net, {"inp_res": 1 / steps, "inp_bound": inp_bound, "noise_management": nm})
            s_x = max(1, int(np.abs(x.astype(int)).max())) if nm == "abs_max" else 128
            res = 2 * inp_bound / steps
            value = np.clip(np.floor(x / s_x / res + 0.5) * res, -inp_bound, inp_bound)
            expected = np.clip(np.round(value / res), -(steps // 2), steps // 2)
            assert np.array_equal(p.input_codes(0, x).astype(int), expected.astype(int)), (nm, steps)
            # The DAC step folds back into accumulator units in the block: res * s_x as a 31-bit
            # normalised mantissa, SCALE = res * s_x * 2^SCALE_SHIFT in [2^30, 2^31).
            regs = p.registers(0, x)
            dac_step = 2 * inp_bound * s_x / steps
            assert regs["scale_shift"] == 30 - (math.frexp(dac_step)[1] - 1)   # dac_step in [2^e, 2^(e+1))
            assert regs["scale"] == round(math.ldexp(dac_step, regs["scale_shift"]))


def test_dac_codes_of_a_tiny_input_bound_are_the_extreme_codes(core, rng):
    """Review rev_A: a double beyond int's range was cast to int (undefined behaviour): with
    inp_bound 1e-8 positive inputs came out as the most negative code, and at 1e-307 (per code
    infinite, 0 * inf NaN) every input did.  Every nonzero input is beyond the bound: its sign's
    extreme code; zero stays zero."""
    net = linear_net(core, 4, 4, rng, 127)
    x = np.array([0, 5, -5, 0], dtype=np.int8)
    for inp_bound in (1e-7, 1e-8, 1e-307):
        p = hook(core, net, {"inp_res": 1 / 254, "inp_bound": inp_bound})
        assert p.input_codes(0, x).astype(int).tolist() == [0, 127, -127, 0], inp_bound


def test_ideal_settings_give_the_digital_path_bit_for_bit(core, rng):
    net = linear_net(core, 40, 30, rng, 90)
    images = rng.integers(-128, 128, (5, 1, 1, 40)).astype(np.int8)
    digital = core.run_network(net, images)
    for nm in ("abs_max", "none"):
        p = hook(core, net, {"preset": "ideal", "noise_management": nm})
        assert all(np.array_equal(a, b) for a, b in zip(core.run_network(net, images, peripherals=p), digital))
    p = hook(core, net, {"preset": "aihwkit"})
    assert not np.array_equal(core.run_network(net, images, peripherals=p)[0], digital[0])


@pytest.mark.parametrize("settings, field", [
    ({"out_res": 0}, "out_res"),
    ({"inp_res": 0}, "inp_res"),
    ({"inp_res": -0.1}, "inp_res"),
    ({"out_bound": -12}, "out_bound"),
    ({"out_bound": 0}, "out_bound"),
    ({"inp_bound": -1}, "inp_bound"),
    ({"out_noise": float("nan")}, "out_noise"),
    ({"out_bound": float("nan")}, "out_bound"),
    ({"out_res": float("nan"), "out_bound": 10}, "out_res"),
    ({"out_res": 1 / 64}, "out_res"),              # an ADC needs a bound
    ({"inp_res": 1 / 300}, "inp_res"),             # more DAC steps than INT8 codes
    ({"out_res": 0.3, "out_bound": 1}, "out_res"),  # not a whole number of steps
    ({"out_res": float("inf"), "out_bound": 1}, "out_res"),   # infinitely many steps (was an OverflowError)
    ({"inp_res": 1e30}, "inp_res"),                # beyond a C int (was a cast error)
    ({"out_res": 1e-30, "out_bound": 1}, "out_res"),
    ({"inp_res": 5e-324}, "inp_res"),              # 1 / res overflows to infinity
    ({"out_bound": float("inf")}, "out_bound"),       # review rev_A: written to the results as "Infinity"
    ({"out_bound": "-inf"}, "out_bound"),
    ({"out_res": 1000000.5, "out_bound": 1}, "out_res"),     # review rev_A: half a step at 10^6 steps
    ({"out_res": 1 / 1000000.5, "out_bound": 1}, "out_res"),
    ({"out_res": 1048575.6, "out_bound": 1}, "out_res"),
    ({"noise_management": "max"}, "noise_management"),
    ({"bound_management": "iterative"}, "bound_management"),
    ({"out_nois": 0.1}, "out_nois"),
    ({"preset": "hermes"}, "preset"),
])
def test_bad_settings_name_the_layer_and_the_field(settings, field, tmp_path):
    mapping = {"default": "digital", "layers": {"fc1": {"device": "aimc", "peripherals": settings}}}
    with pytest.raises(aimcemu.FormatError, match=rf"field 'layers\.fc1\.peripherals\.{field}'"):
        aimcemu.mapping.Mapping.from_dict(mapping, source="study.yaml")
    with pytest.raises(aimcemu.FormatError, match=rf"field 'peripherals\.{field}'"):
        aimcemu.config.RunConfig.resolve({"peripherals": settings})


def test_a_resolution_that_rounds_to_the_step_limit_is_taken():
    """Review rev_s12: the limit was compared before rounding, so 1/254 in float32 (what a
    float32 config or aihwkit holds) and 254.0000001 were refused as "more than 254 steps"."""
    import numpy as np

    most = aimcemu._core.niu.PERIPH_MAX_INP_STEPS
    for res in (float(np.float32(1 / most)), most + 1e-7, float(most)):
        assert periph.steps_of(res, "<test>", "inp_res", most) == most
    with pytest.raises(aimcemu.FormatError, match="expected at most"):
        periph.steps_of(most + 1.0, "<test>", "inp_res", most)


def test_presets_and_cli_strings():
    assert periph.resolve("aihwkit") == periph.AIHWKIT_DEFAULT
    pcm = periph.resolve("pcm,out_noise=0.02,out_res=1/64")
    assert pcm["out_noise"] == 0.02 and pcm["out_res"] == 1 / 64 and pcm["out_bound"] == 10.0
    assert periph.core_settings(periph.resolve("pcm"))["inp_steps"] == 254
    assert periph.core_settings(periph.resolve({"out_res": 510, "out_bound": 12}))["out_steps"] == 510
    assert periph.resolve(None) is None


def test_mapping_rules_override_the_default(core, rng):
    net = linear_net(core, 8, 4, rng, 50)
    m = aimcemu.mapping.Mapping.from_dict({"default": "aimc", "layers": {"fc": {"peripherals": None}}})
    default = periph.resolve("aihwkit")
    assert m.resolve(net, None, default)[0].peripherals is None
    m = aimcemu.mapping.Mapping.from_dict({"default": "aimc"})
    assert m.resolve(net, None, default)[0].peripherals == default
    m = aimcemu.mapping.Mapping.from_dict({"layers": {"fc": {"peripherals": "pcm"}}})
    placement = m.resolve(net, None, None)[0]
    assert placement.is_aimc and placement.peripherals == periph.resolve("pcm")
    assert aimcemu.mapping.Mapping.from_dict(m.to_dict()) == m


ZERO_WEIGHT_NOISE = {"model": "pcm_like", "prog_noise_scale": 0.0, "read_noise_scale": 0.0, "drift_scale": 0.0}


def test_runs_with_ideal_peripherals_equal_runs_without(tmp_path):
    """Through the whole stack (config, NIU rounds in the emulator's HBM, PU, results file): ideal
    peripherals change no activation of any round; the file keeps the settings per layer."""
    import h5py

    files = {}
    for name, spec in (("none", None), ("ideal", "ideal")):
        files[name] = tmp_path / f"{name}.h5"
        aimcemu.run(output=files[name], mapping="all", noise=ZERO_WEIGHT_NOISE, peripherals=spec, chips=2, seed=3)
    with h5py.File(files["none"]) as a, h5py.File(files["ideal"]) as b:
        for layer in a["layers"]:
            assert np.array_equal(a["layers"][layer]["activations"][()], b["layers"][layer]["activations"][()]), layer
        conv = next(g for g in b["layers"].values() if g.attrs.get("device") == "aimc")
        assert json.loads(conv.attrs["peripherals"]) == periph.resolve("ideal")
        assert json.loads(a["layers"][conv.name.split("/")[-1]].attrs["peripherals"]) is None
        assert json.loads(b.attrs["config"])["peripherals"] == periph.resolve("ideal")


def test_run_with_peripherals_is_reproducible_and_noisy(tmp_path):
    summaries = [aimcemu.run(output=tmp_path / f"r{k}.h5", peripherals="pcm,out_res=1/14,out_noise=0.1", chips=2,
                             threads=threads) for k, threads in enumerate((1, 2))]
    assert summaries[0].round_accuracy == summaries[1].round_accuracy   # any thread count, same bytes
    assert min(summaries[0].round_accuracy) < summaries[0].accuracy


def test_cli_run_takes_peripherals(tmp_path, capsys):
    from aimcemu.cli import main

    assert main(["run", "--peripherals", "aihwkit,out_noise=0.02", "--output", str(tmp_path / "c.h5")]) == 0
    import h5py

    with h5py.File(tmp_path / "c.h5") as f:
        assert json.loads(f.attrs["config"])["peripherals"]["out_noise"] == 0.02
    assert main(["run", "--peripherals", "out_bound=-1", "--output", str(tmp_path / "d.h5")]) != 0
    assert "field 'peripherals.out_bound'" in capsys.readouterr().err


def test_perf_accounts_for_the_block_without_a_stall():
    """The block takes R_g results per cycle, the WRB's read rate: no stall, and its pipeline
    depth adds to each layer's fill."""
    from aimcemu.perf import perf

    base = perf("resnet18", aimc_layers="all", niu=1)
    with_block = perf("resnet18", aimc_layers="all", niu=1, peripherals="aimc")
    depth = aimcemu._core.niu.constants()["NIU_PERIPH_PIPE_STAGES"]
    rows = {(r["pu"], r["layer"]): r for r in base.layer_rows()}
    checked = 0
    for r in with_block.layer_rows():
        if r["kind"] in ("conv", "linear"):
            assert r["peripherals"] and r["periph_stall_cycles"] == 0
            assert r["fill_cycles"] == rows[r["pu"], r["layer"]]["fill_cycles"] + depth
            checked += 1
    assert checked > 10
    # A block at half the rate would stall the WRB-bound layers: the model sees it.
    from aimcemu import _core

    net = _core.zoo.by_name("resnet18")
    options = _core.timing.TimingOptions()
    options.peripherals = [True] * len(net.layers)
    options.periph_lanes = 4
    slow = _core.timing.time_network(net, _core.timing.pu2x(), options)
    assert any(l.periph_stall_cycles > 0 for l in slow.layers)


def test_sweep_axis_over_a_peripheral_setting(tmp_path):
    """grid: {peripherals.out_noise: [...]} runs one task per value on top of the sweep's preset;
    each task's results file records its resolved settings."""
    import h5py

    result = aimcemu.sweep({"output": str(tmp_path / "s"), "peripherals": "pcm", "chips": 1,
                            "grid": {"peripherals.out_noise": [0.0, 0.3]}}, workers=1, progress=False)
    files = sorted((tmp_path / "s").rglob("*.h5"))
    assert len(files) == 2, result
    noises = set()
    for path in files:
        with h5py.File(path) as f:
            config = json.loads(f.attrs["config"])
            assert config["peripherals"]["out_bound"] == 10.0   # the preset under the axis
            noises.add(config["peripherals"]["out_noise"])
    assert noises == {0.0, 0.3}
