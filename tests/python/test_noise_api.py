"""The Python noise-model API: configs, shapes, chip/round semantics, compensation, errors."""
from __future__ import annotations

import numpy as np
import pytest

import aimcemu
from aimcemu import noise

CUSTOM_DRIFT = {"g_lst": [0.0, 10.0, 25.0], "nu_mean_lst": [0.1, 0.06, 0.05], "nu_std_lst": [0.04, 0.02, 0.01]}

ALL_MODELS = [
    noise.PCMLikeNoiseModel(),
    noise.PCMLikeNoiseModel(converter=noise.DualPairConductanceConverter(), drift_reference="programmed"),
    noise.HermesNoiseModel(),
    noise.HermesNoiseModel(num_devices=1),
    noise.StateIndependentNoiseModel(read_q=0.0088),
    noise.CustomDriftPCMLikeNoiseModel(CUSTOM_DRIFT),
    noise.ReRamWan2022NoiseModel(),
    noise.ReRamCMONoiseModel(),
    noise.GenericNoiseModel(prog_additive=0.02, read_multiplicative=0.01, stuck_high_prob=0.01, levels=32),
]


def read_time(model: noise.NoiseModel) -> float:
    return 86400.0 if model.model == "reram_wan2022" else 3600.0


@pytest.fixture(scope="module")
def weights() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((16, 3, 3, 8))


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.model)
def test_config_round_trip_rebuilds_an_identical_model(model, weights):
    config = model.to_dict()
    assert config["model"] == model.model
    again = noise.noise_model_from_dict(config)
    assert type(again) is type(model)
    assert again.to_dict() == config
    assert type(model).from_dict(config) == model
    a = model.program(weights, seed=1, chip=2, layer=3)
    b = again.program(weights, seed=1, chip=2, layer=3)
    np.testing.assert_array_equal(a.g_prog, b.g_prog)
    np.testing.assert_array_equal(model.read(a, read_time(model), 4), again.read(b, read_time(model), 4))


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.model)
def test_shapes_and_chip_semantics(model, weights):
    state = model.program(weights, seed=7, chip=0, layer=1)
    d = state.devices_per_weight
    assert state.shape == weights.shape
    assert state.g_prog.shape == weights.shape + (d,)
    t = read_time(model)
    w = model.read(state, t, 0)
    assert w.shape == weights.shape and w.dtype == np.float64
    assert model.read_conductances(state, t, 0).shape == weights.shape + (d,)
    # same chip: identical programming; same round: identical read; different chip: different devices
    again = model.program(weights, seed=7, chip=0, layer=1)
    np.testing.assert_array_equal(state.g_prog, again.g_prog)
    np.testing.assert_array_equal(model.read(again, t, 0), w)
    other_chip = model.program(weights, seed=7, chip=1, layer=1)
    assert not np.array_equal(other_chip.g_prog, state.g_prog)


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.model)
def test_thread_count_does_not_change_results(model):
    w = np.random.default_rng(1).standard_normal((300, 200))  # several chunks of 16384 weights
    t = read_time(model)
    model.num_threads = 1
    state = model.program(w, seed=5, chip=1, layer=2)
    reference = model.read(state, t, 3)
    model.num_threads = 3
    state3 = model.program(w, seed=5, chip=1, layer=2)
    np.testing.assert_array_equal(state3.g_prog, state.g_prog)
    np.testing.assert_array_equal(model.read(state3, t, 3), reference)
    model.num_threads = 0


@pytest.mark.parametrize("bad", [-1, 2.5, "2", 4097, None])
def test_num_threads_refuses_what_is_not_a_thread_count(bad):
    """Before: int(n) took 2.5 as 2 and "2" as 2, and -1 reached the C++ engine."""
    model = ALL_MODELS[0]
    with pytest.raises(aimcemu.FormatError, match=rf"<{type(model).__name__}>: field 'num_threads'"):
        model.num_threads = bad
    assert model.num_threads == 0


def test_a_read_keeps_its_values_while_later_layers_reuse_the_engine_buffers():
    """Reads of large layers come from recycled buffers: a read array must own its memory until
    NumPy frees it, whatever the engine does meanwhile (programs, reads, freed states)."""
    model = noise.PCMLikeNoiseModel()
    w = np.random.default_rng(2).standard_normal((400, 500))  # 1.6 MB per read: pooled
    state = model.program(w, seed=3, chip=0, layer=0)
    first = model.read(state, 3600.0, 0)
    kept = first.copy()
    assert first.flags.writeable and first.shape == w.shape
    del state
    for layer in range(1, 4):
        other = model.program(w[::-1].copy(), seed=3, chip=0, layer=layer)
        model.read(other, 3600.0, 0)
        del other
    np.testing.assert_array_equal(first, kept)
    again = model.read(model.program(w, seed=3, chip=0, layer=0), 3600.0, 0)
    np.testing.assert_array_equal(again, kept)


def test_pcm_reads_differ_per_round_and_drift_with_time(weights):
    model = noise.PCMLikeNoiseModel()
    state = model.program(weights, seed=1)
    r0, r1 = model.read(state, 3600.0, 0), model.read(state, 3600.0, 1)
    assert not np.array_equal(r0, r1)
    # mean |w| shrinks with t (drift), for the same programmed state
    means = [np.mean(np.abs(model.read(state, t, 0))) for t in (0.0, 3600.0, 3.15e7)]
    assert means[0] > means[1] > means[2]


def test_closed_forms_are_exposed_for_the_pcm_family():
    model = noise.PCMLikeNoiseModel()
    np.testing.assert_allclose(model.prog_sigma([0.0, 25.0]), [0.26348, 0.26348 + 1.9650 - 1.1731], rtol=1e-15)
    assert model.read_time_factor(0.0) == pytest.approx(4.1838, abs=1e-4)
    np.testing.assert_allclose(model.drift_factor([0.1], 3.15e7 - 20.0), [(3.15e7 / 20.0) ** -0.1], rtol=1e-14)
    assert model.nu_mean(0.0) == 0.1 and model.nu_std(0.0) == 0.045
    assert model.read_q(25.0) == pytest.approx(0.0088, rel=1e-15)


@pytest.mark.parametrize("converter", [noise.SinglePairConductanceConverter(), noise.NPairConductanceConverter([1.0, 2.0, 4.0]),
                                       noise.SingleDeviceConductanceConverter()], ids=lambda c: c.kind)
def test_converters_round_trip_and_stay_in_range(converter, weights):
    g, fit = converter.convert_to_conductances(weights)
    assert g.min() >= converter.g_min - 1e-12 and g.max() <= converter.g_max + 1e-12
    np.testing.assert_allclose(converter.convert_back_to_weights(g, fit), weights, atol=1e-12)
    assert noise.converter_from_dict(converter.to_dict()) == converter


@pytest.mark.parametrize("comp", [noise.GlobalDriftCompensation(), noise.PerColumnDriftCompensation(),
                                  noise.GlobalDriftCompensationWithExactReference()], ids=repr)
def test_drift_compensation_is_exact_with_deterministic_drift(comp, weights):
    model = noise.StateIndependentNoiseModel(prog_noise_scale=0.0, read_noise_scale=0.0, drift_nu_std=0.0,
                                             drift_nu_mean=0.1)
    state = model.program(weights, seed=2)
    baseline = comp.baseline(model, state)
    drifted = model.read(state, 1000.0, 0)
    alpha = comp.alpha(baseline, drifted)
    assert alpha.shape == ((1,) if comp.kind == "global" else (weights.shape[0],))
    np.testing.assert_allclose(comp.apply(alpha, drifted), weights, rtol=1e-12, atol=1e-14)
    assert not np.allclose(drifted, weights, rtol=1e-3)
    assert noise.drift_compensation_from_dict(comp.to_dict()).to_dict() == comp.to_dict()


def test_drift_compensation_reduces_error_under_pcm_noise(weights):
    model = noise.PCMLikeNoiseModel()
    state = model.program(weights, seed=3)
    for comp in (noise.GlobalDriftCompensation(), noise.PerColumnDriftCompensation()):
        baseline = comp.baseline(model, state)
        drifted = model.read(state, 86400.0 * 365, 1)
        fixed = comp.apply(comp.alpha(baseline, drifted), drifted)
        assert np.linalg.norm(fixed - weights) < 0.5 * np.linalg.norm(drifted - weights)


@pytest.mark.parametrize("make, field", [
    (lambda: noise.PCMLikeNoiseModel(prog_noise_scale=-0.5), "prog_noise_scale"),
    (lambda: noise.GenericNoiseModel(prog_additive=-0.01), "prog_additive"),
    (lambda: noise.StateIndependentNoiseModel(drift_nu_std=-1.0), "drift_nu_std"),
    (lambda: noise.PCMLikeNoiseModel(g_max=0.0), "g_max"),
    (lambda: noise.SinglePairConductanceConverter(g_max=-1.0), "g_max"),
    (lambda: noise.noise_model_from_dict({"model": "pcm_typo"}), "model"),
    (lambda: noise.noise_model_from_dict({"g_max": 25.0}), "model"),
    (lambda: noise.noise_model_from_dict({"model": "pcm_like", "t_zero": 20.0}), "t_zero"),
    (lambda: noise.noise_model_from_dict({"model": "pcm_like", "t0": "twenty"}), "t0"),
    (lambda: noise.HermesNoiseModel(num_devices=3), "num_devices"),
    (lambda: noise.ReRamCMONoiseModel(acceptance_range=2e-2), "acceptance_range"),
    (lambda: noise.GenericNoiseModel(stuck_low_prob=0.7, stuck_high_prob=0.6), "stuck_high_prob"),
    (lambda: noise.CustomDriftPCMLikeNoiseModel({"g_lst": [0.0, 10.0], "nu_mean_lst": [0.1, 0.05],
                                                 "nu_std_lst": [0.01, 0.01]}), "g_lst"),
    (lambda: noise.drift_compensation_from_dict({"compensation": "per_row"}), "compensation"),
    # A read longer than t + t0 gave NaN (or silently zero) weights: t_read <= t0 is required.
    (lambda: noise.PCMLikeNoiseModel(t_read=250.0), "t_read"),
    (lambda: noise.HermesNoiseModel(t_read=400.0), "t_read"),
    (lambda: noise.StateIndependentNoiseModel(t0=1e-9), "t_read"),
    (lambda: noise.noise_model_from_dict({"model": "pcm_like", "t_read": 250.0}), "t_read"),
    # bool("false") is True; a list or a str config were a TypeError / AttributeError naming nothing.
    (lambda: noise.drift_compensation_from_dict({"compensation": "global", "exact_reference": "false"}),
     "exact_reference"),
    (lambda: noise.GlobalDriftCompensation(exact_reference=1), "exact_reference"),
    (lambda: noise.drift_compensation_from_dict({"compensation": ["global"]}), "compensation"),
    (lambda: noise.drift_compensation_from_dict("global"), "compensation"),
    (lambda: noise.CustomDriftPCMLikeNoiseModel([1, 2, 3]), "custom_drift_model"),
    # {model: pcm_like, t0: , g_max: ~} resolved silently to t0 20 and g_max 25.
    (lambda: noise.noise_model_from_dict({"model": "pcm_like", "t0": None}), "t0"),
    (lambda: noise.noise_model_from_dict({"model": "pcm_like", "converter": None, "g_max": 30.0}), "converter"),
    (lambda: noise.NoiseModel.from_dict({"model": "hermes", "g_max": None}), "g_max"),
])
def test_bad_parameters_raise_format_error_naming_the_field(make, field):
    with pytest.raises(aimcemu.FormatError, match=f"'{field}'"):
        make()


def test_bad_reads_raise_format_error(weights):
    model = noise.PCMLikeNoiseModel()
    state = model.program(weights)
    with pytest.raises(aimcemu.FormatError, match="'t'"):
        model.read(state, -1.0, 0)
    with pytest.raises(aimcemu.FormatError, match="'t'"):
        model.read(state, float("nan"), 0)
    wan = noise.ReRamWan2022NoiseModel()
    with pytest.raises(aimcemu.FormatError, match="86400"):
        wan.read(wan.program(weights), 3600.0, 0)
    with pytest.raises(aimcemu.FormatError, match="'weights'"):
        model.program(np.array([1.0, np.inf]))
    with pytest.raises(aimcemu.FormatError, match="'state'"):
        noise.HermesNoiseModel().read(noise.ReRamCMONoiseModel().program(weights), 1.0, 0)


def test_a_state_reads_only_through_a_model_of_the_same_physics_and_conductance_mapping(weights):
    # A pcm_like state at g_max 25 read without a word through g_max 50 or through hermes.
    model = noise.PCMLikeNoiseModel()
    state = model.program(weights, seed=2)
    for other in (noise.PCMLikeNoiseModel(g_max=50.0), noise.PCMLikeNoiseModel(g_min=1.0), noise.HermesNoiseModel()):
        for call in (lambda: other.read(state, 1.0, 0), lambda: other.read_conductances(state, 1.0, 0),
                     lambda: other.programmed_weights(state)):
            with pytest.raises(aimcemu.FormatError, match="field 'state'"):
                call()
        with pytest.raises(aimcemu.FormatError, match="field 'state'"):
            noise.GlobalDriftCompensation().baseline(other, state)
    again = noise.noise_model_from_dict(model.to_dict())
    np.testing.assert_array_equal(again.read(state, 3600.0, 1), model.read(state, 3600.0, 1))
    # Program once, read another way: read-time parameters (and where drift starts) may differ.
    for reader in (noise.PCMLikeNoiseModel(read_noise_scale=0.0), noise.PCMLikeNoiseModel(t_read=1e-6, t0=30.0),
                   noise.PCMLikeNoiseModel(drift_reference="programmed")):
        assert np.isfinite(reader.read(state, 3600.0, 1)).all()
        noise.GlobalDriftCompensation().baseline(reader, state)
    quiet = noise.PCMLikeNoiseModel(read_noise_scale=0.0, drift_scale=0.0)
    np.testing.assert_array_equal(quiet.read(state, 3600.0, 1), quiet.read(state, 3600.0, 7))  # no read noise left


def test_a_run_config_refuses_a_long_read_and_an_empty_key_naming_file_and_field():
    # The run-config path (YAML text, then mapping.resolve_noise, as RunConfig uses them): t_read
    # = 250 reached the NIU, which failed on "field 'RT': value -nan"; an empty key took its default.
    from aimcemu import mapping, yamlfile

    for text, field in (("{model: pcm_like, t_read: 250}", "t_read"), ("{model: pcm_like, t0: , g_max: 30}", "t0")):
        with pytest.raises(aimcemu.FormatError, match=rf"run\.yaml: field 'noise': .*field '{field}'"):
            mapping.resolve_noise(yamlfile.parse_yaml(text, "run.yaml"), "run.yaml")


def test_seeds_chips_layers_and_rounds_must_be_whole_numbers_in_range(weights):
    # -1 gave pybind's "incompatible function arguments", chip 1.5 became chip 1 silently.
    model = noise.PCMLikeNoiseModel()
    for field, call in (("seed", lambda v: model.program(weights, seed=v)),
                        ("chip", lambda v: model.program(weights, chip=v)),
                        ("layer", lambda v: model.program(weights, layer=v))):
        for bad in (-1, 2**64, 1.5, 2.0, True, "3", None):
            with pytest.raises(aimcemu.FormatError, match=f"field '{field}'"):
                call(bad)
    state = model.program(weights, seed=np.uint64(2**64 - 1), chip=np.int32(3), layer=0)
    for read in (model.read, model.read_conductances):
        for bad in (-1, 2**64, 0.5, False):
            with pytest.raises(aimcemu.FormatError, match="field 'round'"):
                read(state, 1.0, bad)
    np.testing.assert_array_equal(model.read(state, 1.0, np.int64(4)), model.read(state, 1.0, 4))


def test_a_zero_dimensional_array_is_the_number_it_holds():
    # np.array(20.0) failed with "iteration over a 0-d array", naming no field.
    assert noise.PCMLikeNoiseModel(t0=np.array(20.0), g_max=np.float32(30.0)).params["t0"] == 20.0
    with pytest.raises(aimcemu.FormatError, match="field 't0'"):
        noise.PCMLikeNoiseModel(t0=np.array(True))


def test_vector_paths_of_the_noise_math_give_the_same_bits():
    """AVX-512 and AVX2 run the same operations per element: program + read of a layer through
    each path (where the CPU has both) gives the same bits; unknown names are refused."""
    core = aimcemu._core.noise
    with pytest.raises(ValueError, match="unknown 'avx9'"):
        core.use_noise_simd_isa("avx9")
    active = core.noise_simd_isa()
    assert active in ("avx512", "avx2", "scalar")
    paths = []
    for isa in ("avx2", "avx512"):
        try:
            core.use_noise_simd_isa(isa)
            paths.append(isa)
        except ValueError as e:
            assert "this CPU has no " + isa in str(e)
    core.use_noise_simd_isa(active)
    if len(paths) < 2:
        pytest.skip(f"this CPU has only {paths or ['scalar']}: nothing to compare")
    w = np.sin(0.37 * np.arange(50021.0))   # several chunks and a partial last vector
    model = noise.PCMLikeNoiseModel()
    results = []
    try:
        for isa in paths:
            core.use_noise_simd_isa(isa)
            state = model.program(w, seed=3, chip=1, layer=2)
            results.append((model.programmed_weights(state), model.read(state, 86400.0, 4)))
    finally:
        core.use_noise_simd_isa(active)
    for a, b in zip(results[0], results[1]):
        assert a.tobytes() == b.tobytes()
