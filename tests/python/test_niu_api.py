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
    model = PCMLikeNoiseModel(drift_reference="programmed")  # the one the NIU runs
    np.testing.assert_array_equal(niu.apply(w, model, seed=1, t=60.0), niu.apply(w, model.to_dict(), seed=1, t=60.0))


def test_program_words_round_trip_and_layout():
    w1, w2 = clean_weights((8, 9)), clean_weights((5, 7), seed=1)
    prog = niu.compile_program({"model": "pcm_like"}, [w1, w2], seed=3, t=10.0, alpha=[1.0, 1.2])
    words = prog.words()
    c = niu.constants()
    assert words.dtype == np.uint32
    assert len(words) == c["NIU_PROG_HEADER_WORDS"] + 2 * c["NIU_LAYER_WORDS"]
    assert words[0] == c["NIU_PROG_MAGIC_VALUE"] == 0x3255494E  # "NIU2"
    assert aimcemu._core.niu.NiuProgram.from_words(words) == prog._program
    layer = prog.layer(1)
    assert layer["count"] == 35 and len(layer["GT"]) == 128 and len(layer["RT"]) == c["NIU_RT_SEGMENTS"]
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


def test_a_layer_index_past_the_program_is_a_format_error_naming_index():
    """Review finding: the range check of a program's layer index raised an IndexError that named
    no argument."""
    w = clean_weights((4, 4))
    prog = niu.compile_program({"model": "pcm_like"}, [w], seed=1, t=60.0)
    state = prog.chip_state(0, w)
    calls = {
        "layer": lambda: prog.layer(1),
        "apply": lambda: prog.apply(1, w),
        "chip_state": lambda: prog.chip_state(1, w),
        "apply_kept": lambda: prog.apply_kept(1, state),
        "_core apply_layer": lambda: aimcemu._core.niu.apply_layer(prog._program, 1, w),
    }
    for name, call in calls.items():
        with pytest.raises(aimcemu.FormatError, match=r"field 'index': layer 1 of an NIU program of 1 layers"):
            call()
    assert prog.layer(0)["count"] == 16


def _gaussian_index(u, bits, c):
    """docs/niu_datapath.md 4.3 written out in NumPy: three-bit groups from the magnitude's top
    bit, the group of the leading one and the six-bit window from the group's top bit."""
    vbits = bits - 1
    offset = (vbits - 1) % 3
    u = u.astype(np.int64)
    sign, v = u >> vbits, u & ((1 << vbits) - 1)
    lead = np.where(v > 0, np.floor(np.log2(np.maximum(v, 1))).astype(np.int64), -1)
    group = np.maximum(lead - offset + 2, 0) // 3
    shift = 3 * group + offset - 5
    window = np.where(shift >= 0, v >> np.maximum(shift, 0), v << np.maximum(-shift, 0)) & 63
    return (sign << 9) | (group << 6) | window


@pytest.mark.parametrize("bits,rom", [(24, "NIU_GAUSS_CHIP_ROM"), (16, "NIU_GAUSS_READ_ROM")])
def test_gaussian_is_the_rom_at_the_documented_index(bits, rom):
    c = niu.constants()
    rng = np.random.default_rng(bits)
    u = np.concatenate([rng.integers(0, 1 << bits, 200000), np.arange(4096), (1 << bits) - 1 - np.arange(4096)])
    u = u.astype(np.uint32)
    expected = np.asarray(c[rom])[_gaussian_index(u, bits, c)]
    np.testing.assert_array_equal(niu._niu.gaussian(u, bits), expected)
    with pytest.raises(aimcemu.FormatError):
        niu._niu.gaussian(np.array([1 << bits], np.uint32), bits)
    with pytest.raises(aimcemu.FormatError):
        niu._niu.gaussian(u[:3], 20)


def test_read_gaussian_moments_over_every_uniform():
    # All 2^16 read uniforms: mean exactly 0, variance within 1.5e-4 of 1, the stated reach.
    z = niu._niu.gaussian(np.arange(1 << 16, dtype=np.uint32), 16) / 4096.0
    assert z.mean() == 0.0
    assert abs(z.var() - 1.0) < 1.5e-4
    assert 4.3 < z.max() < 4.5


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


def test_kept_chip_state_gives_apply_bit_for_bit_in_every_round_and_time():
    # The chip half computed once (from the chip's round-0 program) and the round half of later
    # programs of the same chip equal the full model for every round, t and thread count.
    rng = np.random.default_rng(12)
    layers = [rng.integers(-128, 128, size=(64, 3, 3, 33), dtype=np.int8),
              rng.integers(-90, 91, size=(1000, 37), dtype=np.int8)]
    from aimcemu.noise import PCMLikeNoiseModel
    model = PCMLikeNoiseModel(drift_reference="programmed")  # the one the NIU runs
    first = niu.compile_program(model, layers, seed=3, chip=2, round=0, t=0.0)
    states = [first.chip_state(i, w) for i, w in enumerate(layers)]
    assert [s.nbytes for s in states] == [-(-w.size // 32) * 32 * 8 for w in layers]
    for round_, t in [(0, 0.0), (1, 3600.0), (9, 3.15e7)]:
        program = niu.compile_program(model, layers, seed=3, chip=2, round=round_, t=t)
        for i, w in enumerate(layers):
            expected = program.apply(i, w, threads=1)
            for threads in (1, 2, 3):
                kept = program.apply_kept(i, states[i], threads=threads)
                assert kept.shape == w.shape
                np.testing.assert_array_equal(kept, expected)


def test_kept_chip_state_of_another_chip_is_a_format_error():
    w = np.arange(-100, 100, dtype=np.int8).reshape(8, 25)
    state = niu.compile_program({"model": "pcm_like"}, [w], chip=1).chip_state(0, w)
    other = niu.compile_program({"model": "pcm_like"}, [w], chip=2, round=1, t=60.0)
    with pytest.raises(aimcemu.FormatError, match="chip_state"):
        other.apply_kept(0, state)
    with pytest.raises(aimcemu.FormatError, match="shape"):
        other.chip_state(0, w.reshape(25, 8))


def test_timing_memory_latency_is_charged_per_layer_and_validated_by_field():
    """The NIU timing model's memory latency (docs/niu_rtl.md, "Memory latency and the timing
    model"): 0 by default, R once for the header and 2R + W per layer; a bad value is a
    FormatError naming the field."""
    timing = aimcemu._core.timing
    cfg = timing.NiuConfig()
    cfg.lanes_per_cycle = 4
    assert cfg.read_latency_cycles == 0 and cfg.write_latency_cycles == 0
    ideal = timing.niu_program_time(cfg, [6400, 1833, 12800])
    cfg.read_latency_cycles, cfg.write_latency_cycles = 150, 20
    slow = timing.niu_program_time(cfg, [6400, 1833, 12800])
    assert slow.cycles - ideal.cycles == 150 + 3 * (2 * 150 + 20)
    for field in ("read_latency_cycles", "write_latency_cycles"):
        for bad in (-1.0, float("nan"), float("inf")):
            cfg = timing.NiuConfig()
            setattr(cfg, field, bad)
            with pytest.raises(aimcemu.FormatError, match=f"perf.yaml.*niu.{field}"):
                cfg.validate("perf.yaml")
            with pytest.raises(aimcemu.FormatError, match=f"niu.{field}"):
                timing.niu_round_time(cfg, 1000, 1)
