"""aimcemu.niu: the Python face of the bit-exact NIU model.

Checks determinism over threads, chip persistence, the noise-free identity, the word image, bad
input, and (against aimcemu.noise, the float64 reference) that the per-code output distribution
matches after the INT8 round trip.
"""
import numpy as np
import pytest

import aimcemu
from aimcemu import niu

NO_NOISE = {"model": "pcm_like", "prog_noise_scale": 0.0, "read_noise_scale": 0.0, "drift_scale": 0.0}


def clean_weights(shape=(64, 3, 3, 16), seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-127, 128, size=shape, dtype=np.int8)


def test_noise_free_niu_returns_the_clean_weights():
    w = clean_weights()
    out = niu.apply(w, NO_NOISE, t=3600.0)
    assert out.dtype == np.int8 and out.shape == w.shape
    np.testing.assert_array_equal(out, w)


def test_same_key_same_output_for_any_thread_count():
    w = clean_weights((300, 257))
    args = dict(seed=5, chip=2, round=4, t=86400.0)
    one = niu.apply(w, {"model": "hermes"}, threads=1, **args)
    for threads in (2, 3):
        np.testing.assert_array_equal(niu.apply(w, {"model": "hermes"}, threads=threads, **args), one)
    assert (one != w).mean() > 0.5


def test_chip_persistence_and_fresh_read_noise():
    w = clean_weights((100, 100))
    no_read = {"model": "pcm_like", "read_noise_scale": 0.0}
    np.testing.assert_array_equal(niu.apply(w, no_read, chip=1, round=0, t=3600.0),
                                  niu.apply(w, no_read, chip=1, round=7, t=3600.0))
    assert (niu.apply(w, no_read, chip=1, t=3600.0) != niu.apply(w, no_read, chip=2, t=3600.0)).mean() > 0.5
    pcm = {"model": "pcm_like"}
    assert (niu.apply(w, pcm, round=0, t=3600.0) != niu.apply(w, pcm, round=1, t=3600.0)).mean() > 0.3


def test_noise_model_object_is_accepted():
    from aimcemu.noise import PCMLikeNoiseModel
    w = clean_weights((10, 20))
    model = PCMLikeNoiseModel()
    np.testing.assert_array_equal(niu.apply(w, model, seed=1, t=60.0), niu.apply(w, model.to_dict(), seed=1, t=60.0))


def test_program_words_round_trip_and_layout():
    w1, w2 = clean_weights((8, 9)), clean_weights((5, 7), seed=1)
    prog = niu.compile_program({"model": "pcm_like"}, [w1, w2], seed=3, t=10.0, alpha=[1.0, 1.2])
    words = prog.words()
    c = niu.constants()
    assert words.dtype == np.uint32
    assert len(words) == c["NIU_PROG_HEADER_WORDS"] + 2 * c["NIU_LAYER_WORDS"]
    assert words[0] == 0x3155494E  # "NIU1"
    assert aimcemu._core.niu.NiuProgram.from_words(words) == prog._program
    layer = prog.layer(1)
    assert layer["count"] == 35 and len(layer["GT"]) == 128 and len(layer["RT"]) == 273
    assert layer["GT"][0] == 0


def test_bad_input_is_a_format_error():
    w = clean_weights((4, 4))
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "no_such_model"})
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "pcm_like"}, t=-1.0)
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "reram_cmo"})
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w.astype(np.int16), {"model": "pcm_like"})
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "pcm_like"}, out_bits=9)
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "pcm_like"}, absmax="biggest")
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"model": "pcm_like", "no_such_param": 1.0})
    with pytest.raises(aimcemu.FormatError):
        niu.apply(w, {"prog_noise_scale": 1.0})


def test_gaussian_table_moments():
    # 2^20 uniform 32-bit inputs on a regular grid: the table's own mean and variance (exact 0 and
    # 1 + 1.2e-4 for the continuous table) within 1e-3.
    grid = (np.arange(1 << 20, dtype=np.uint64) * (1 << 12) + (1 << 11)).astype(np.uint32)
    z = niu._niu.gaussian_q12(grid) / 4096.0
    assert abs(z.mean()) < 1e-3
    assert abs(z.var() - 1.0) < 1e-3


@pytest.mark.parametrize("model,t", [("pcm_like", 3600.0), ("hermes", 3.1536e7), ("state_independent", 86400.0)])
def test_distribution_matches_float_reference(model, t):
    """Two-sample chi-square per code, NIU vs aimcemu.noise (drift from programmed state)."""
    from scipy.stats import chi2_contingency

    from aimcemu.noise import noise_model_from_dict
    codes = np.array([0, 5, 30, 90, 127, -45], dtype=np.int8)
    per_code = 8000
    w = np.repeat(codes, per_code).reshape(len(codes), per_code)
    cfg = {"model": model, "drift_reference": "programmed"}
    out = niu.apply(w, cfg, seed=7, chip=1, round=2, t=t)
    ref_model = noise_model_from_dict(cfg)
    state = ref_model.program(w.astype(np.float64), seed=7, chip=1, layer=0)
    ref = ref_model.read(state, t=t, round=2)
    sign = np.where(w < 0, -1.0, 1.0)
    ref_codes = np.clip(sign * np.floor(sign * ref + 0.5), -127, 127).astype(np.int64)
    for k in range(len(codes)):
        lo = min(out[k].min(), ref_codes[k].min())
        a = np.bincount(out[k].astype(np.int64) - lo)
        b = np.bincount(ref_codes[k] - lo, minlength=len(a))
        a = np.pad(a, (0, len(b) - len(a)))
        keep = (a + b) >= 10
        table = np.array([np.append(a[keep], a[~keep].sum()), np.append(b[keep], b[~keep].sum())])
        table = table[:, table.sum(axis=0) > 0]
        p = chi2_contingency(table)[1]
        assert p > 1e-6, f"{model} t={t} code {codes[k]}: p = {p}"
