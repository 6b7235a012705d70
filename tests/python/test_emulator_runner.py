"""Hybrid runs go through the emulation loop (``_core.niu.Emulator``): the NIU writes each round's
noisy weights from the clean HBM region into the back buffer, publishes it, and the PU runs on its
lease.  Checked here: the runner really builds and drives an emulator (one published round per
noisy round, each run on the round it published), and what it stores equals the direct path
(``niu.apply`` per layer + ``_core.run_network`` with those weights) bit for bit, also with two
noise models (two NIU programs concatenated in the emulator's layer order)."""
from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile, niu
from conftest import digits_subset

IMAGES = 24
PCM = {"model": "pcm_like"}
HERMES = {"model": "hermes"}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """(model path, data path, net, images): the embedded model on a test-set subset."""
    model, subset, net, images, _ = digits_subset(tmp_path_factory, IMAGES)
    return model, subset, net, images


@pytest.fixture
def emulators(monkeypatch):
    """Every Emulator the runner creates, recording the rounds it wrote and the rounds the PU ran."""
    created = []

    class RecordingEmulator(_core.niu.Emulator):
        def __init__(self, net, aimc_layers):
            super().__init__(net, aimc_layers)
            self.written, self.ran = [], []
            created.append(self)

        def write_round(self, programs, threads=0):
            round_id = super().write_round(programs, threads)
            self.written.append(round_id)
            return round_id

        def run_published(self, images, backend="fast", threads=0, expected_round=0, **options):
            round_id, activations = super().run_published(images, backend, threads, expected_round, **options)
            self.ran.append(round_id)
            return round_id, activations

    monkeypatch.setattr(_core.niu, "Emulator", RecordingEmulator)
    return created


def test_noisy_rounds_run_through_the_emulator_and_equal_the_direct_path(digits, emulators, tmp_path):
    model, data, net, images = digits
    layers = net.layers
    mapping = {"default": "digital", "layers": {"block_conv*": "aimc", "classifier": {"noise": HERMES}}}
    noise_of = {1: PCM, 2: PCM, 6: HERMES}  # block_conv1, block_conv2 (default noise), classifier
    times = (0.0, 86400.0)
    out = tmp_path / "run.h5"
    summary = aimcemu.run(model, data, out, mapping=mapping, noise=PCM, t=times, chips=2, rounds=2, seed=7,
                          drift_compensation="global", layers="all")
    coordinates = list(zip(summary.niu_round, summary.round_chip, summary.round_t))
    assert len(emulators) == 1
    emulator = emulators[0]
    assert sorted(emulator.aimc_layers) == sorted(noise_of)
    # One published round per noisy round, and the PU ran exactly the round just published.
    assert emulator.written == list(range(1, len(coordinates) + 1))
    assert emulator.ran == emulator.written
    with h5py.File(out, "r") as f:
        # niu_round is the file's niu_round (the NIU round id, repeating across chips and t), not
        # the position; its old name round_index still answers, with a DeprecationWarning.
        np.testing.assert_array_equal(f["niu_round"][()], summary.niu_round)
        assert summary.niu_round == [0, 1] * 4
        with pytest.warns(DeprecationWarning, match="use niu_round"):
            assert summary.round_index == summary.niu_round
        for position, (round_id, chip, t) in enumerate(coordinates):
            direct = {i: niu.apply(layers[i].weights, noise, seed=7, chip=chip, round=round_id, t=t, layer=i,
                                   alpha=summary.drift_alpha[layers[i].name][chip][times.index(t)])
                      for i, noise in noise_of.items()}
            acts = _core.run_network(net, images, "fast", 0, direct)
            for index, layer in enumerate(layers):
                np.testing.assert_array_equal(f[f"layers/{layer.name}/activations"][position], acts[index],
                                              err_msg=f"round {position} layer {layer.name}")
    # The last round's weights are still published in the emulator's HBM; digital ones are clean.
    round_id, chip, t = coordinates[-1]
    for i, noise in noise_of.items():
        alpha = summary.drift_alpha[layers[i].name][chip][times.index(t)]
        np.testing.assert_array_equal(emulator.weights(i), niu.apply(layers[i].weights, noise, seed=7, chip=chip,
                                                                     round=round_id, t=t, layer=i, alpha=alpha))
    for i in (0, 4):  # stem, head: digital
        np.testing.assert_array_equal(emulator.weights(i), layers[i].weights)


def test_a_digital_run_builds_no_emulator(digits, emulators, tmp_path):
    model, data, _, _ = digits
    aimcemu.run(model, data, tmp_path / "digital.h5", layers="none")
    assert emulators == []


def test_emulator_rounds_equal_run_network_on_the_niu_weights(digits):
    _, _, net, images = digits
    layers = net.layers
    aimc = [6, 1]  # the programs' layer order, not the network's
    emulator = _core.niu.Emulator(net, aimc)
    with pytest.raises(aimcemu.FormatError, match="no round has been written"):
        emulator.weights(1)
    for round_id in range(2):
        program = niu.compile_program(PCM, [layers[i].weights for i in aimc], seed=3, chip=1, round=round_id,
                                      t=60.0, layer_ids=aimc)
        published, acts = emulator.run_round([program._program], images, "fast", 2)
        assert published == round_id + 1
        direct = {i: program.apply(k, layers[i].weights) for k, i in enumerate(aimc)}
        assert any(not np.array_equal(direct[i], layers[i].weights) for i in aimc)  # the noise is there
        for i in aimc:
            np.testing.assert_array_equal(emulator.weights(i), direct[i])
        for got, want in zip(acts, _core.run_network(net, images, "fast", 1, direct)):
            np.testing.assert_array_equal(got, want)
    regions = [r for r in emulator.regions() if r["layer"] in aimc and r["kind"] != "activations"]
    assert len(regions) == 3 * len(aimc)  # clean + two weight buffers each
    assert all(r["base"] % 32 == 0 for r in regions)
    spans = sorted((r["base"], r["base"] + r["bytes"]) for r in regions)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def test_emulator_rejects_bad_programs_and_layers(digits):
    _, _, net, images = digits
    layers = net.layers
    emulator = _core.niu.Emulator(net, [1, 2])
    one_layer = niu.compile_program(PCM, [layers[1].weights], layer_ids=[1])
    with pytest.raises(aimcemu.FormatError, match="1 layers, the system 2 AIMC layers"):
        emulator.write_round([one_layer._program])
    with pytest.raises(aimcemu.FormatError, match="expected a numpy int8 array"):
        emulator.run_round([one_layer._program, one_layer._program], images.astype(np.int16))
    with pytest.raises(aimcemu.FormatError, match="given twice"):
        _core.niu.Emulator(net, [1, 1])
    assert emulator.published_round == 0


def test_the_emulator_reads_the_callers_network_in_place_and_refuses_an_invalid_one_as_resolve_does(digits):
    _, _, net, images = digits
    bad = _core.Network()
    bad.input_shape, bad.layers = net.input_shape, net.layers  # copies of net's layers
    bad.layers[1].weights = bad.layers[1].weights[:-1]         # bad.layers[1] refers to bad's layer
    assert net.layers[1].weights.size == bad.layers[1].weights.size + 1
    with pytest.raises(aimcemu.FormatError) as resolve_error:
        bad.resolve("<emulator>")
    with pytest.raises(aimcemu.FormatError) as emulator_error:
        _core.niu.Emulator(bad, [1, 2])
    assert str(emulator_error.value) == str(resolve_error.value)
    assert "layers/1" in str(emulator_error.value) and "weights" in str(emulator_error.value)

    before = [layer.weights.copy() for layer in net.layers]
    emulator = _core.niu.Emulator(net, [1, 2])
    del emulator  # the caller's network is read, never moved from or rewritten
    for layer, weights in zip(net.layers, before):
        np.testing.assert_array_equal(layer.weights, weights)


def test_emulators_built_while_a_pass_reads_the_same_network_on_another_thread_change_nothing(digits):
    """Both read the caller's network without the GIL (a run builds its emulator while its reference
    key is hashed; a sweep may run passes beside it): readers only, so every result is unchanged."""
    _, _, net, images = digits
    want = _core.run_network(net, images, "fast", 1)
    clean = {i: net.layers[i].weights.copy() for i in (1, 2)}
    passes, stop = [], threading.Event()

    def run_passes():
        while not stop.is_set() and len(passes) < 50:
            passes.append(_core.run_network(net, images, "fast", 1))

    reader = threading.Thread(target=run_passes)
    reader.start()
    try:
        for _ in range(10):
            emulator = _core.niu.Emulator(net, [1, 2])
            for i, weights in clean.items():
                np.testing.assert_array_equal(emulator.clean_weights(i), weights)
    finally:
        stop.set()
        reader.join()
    assert passes
    for got in passes:
        for layer_got, layer_want in zip(got, want):
            np.testing.assert_array_equal(layer_got, layer_want)


def test_the_emulator_gives_its_clean_weights_as_read_only_views_and_their_absmax(digits):
    _, _, net, _ = digits
    layers = net.layers
    emulator = _core.niu.Emulator(net, [6, 1])
    for i, absmax in zip(emulator.aimc_layers, emulator.clean_absmax):
        view = emulator.clean_weights(i)
        np.testing.assert_array_equal(view, layers[i].weights)
        assert absmax == _core.niu.clean_absmax(layers[i].weights, "layer")
        assert view.base is emulator and not view.flags.writeable  # the HBM's bytes, not a copy
        with pytest.raises(ValueError):
            view[0] = 1
    with pytest.raises(aimcemu.FormatError, match="layer index 0 is not an AIMC layer"):
        emulator.clean_weights(0)


def test_a_given_layer_absmax_compiles_the_same_program_and_a_wrong_one_is_refused(digits):
    _, _, net, _ = digits
    layers = net.layers
    aimc = [1, 6]
    weights = [layers[i].weights for i in aimc]
    emulator = _core.niu.Emulator(net, aimc)
    real = list(emulator.clean_absmax)
    assert real == [_core.niu.clean_absmax(w, "layer") for w in weights]
    scanned = niu.compile_program(PCM, weights, seed=2, chip=1, round=4, t=60.0, layer_ids=aimc)
    given = niu.compile_program(PCM, weights, seed=2, chip=1, round=4, t=60.0, layer_ids=aimc, layer_absmax=real)
    np.testing.assert_array_equal(given.words(), scanned.words())
    # Not checked against the arrays when compiled (that is the scan it saves); the emulator,
    # which holds the clean weights, refuses the program before writing anything.
    wrong = real[:1] + [real[1] - 1 if real[1] > 1 else 2]
    program = niu.compile_program(PCM, weights, seed=2, chip=1, round=4, t=60.0, layer_ids=aimc, layer_absmax=wrong)
    assert not np.array_equal(program.words(), scanned.words())
    with pytest.raises(aimcemu.FormatError, match=r"program\.layers\[1\]\.absmax.*compiled for a clean abs-max of"):
        emulator.write_round([program.core_program])
    assert emulator.published_round == 0
    assert emulator.write_round([given.core_program]) == 1
    np.testing.assert_array_equal(emulator.weights(6), scanned.apply(1, weights[1]))


@pytest.mark.parametrize("layer_absmax, absmax, field", [
    ([0, 5], "layer", r"layer_absmax\[0\]"), ([5, 128], "layer", r"layer_absmax\[1\]"),
    ([5, 2.0], "layer", r"layer_absmax\[1\]"), ([5], "layer", "1 values for 2 layers"),
    ([5, 5], "fixed", "given with absmax 'fixed'")])
def test_bad_layer_absmax_values_are_format_errors_naming_the_field(digits, layer_absmax, absmax, field):
    _, _, net, _ = digits
    layers = net.layers
    with pytest.raises(aimcemu.FormatError, match=field):
        niu.compile_program(PCM, [layers[1].weights, layers[6].weights], absmax=absmax, layer_absmax=layer_absmax)


def test_a_run_takes_each_layers_clean_absmax_once_not_per_round(digits, monkeypatch, tmp_path):
    model, data, net, _ = digits
    scans = []
    real = _core.niu.clean_absmax
    monkeypatch.setattr(_core.niu, "clean_absmax", lambda *args: scans.append(args[1]) or real(*args))
    aimcemu.run(model, data, tmp_path / "r.h5", mapping="all", noise=PCM, chips=2, t=(0.0, 3600.0), rounds=2,
                drift_compensation="global", layers="none")
    assert scans == []  # the emulator took them from its clean region, once, when it was built


def test_an_emulator_never_copies_weights_another_thread_is_replacing():
    # The emulator reads the caller's network in place while it is built; Python may replace a
    # layer's weights meanwhile (the setter frees the old buffer).  Built without the GIL, 24 of
    # 284 emulators in 8 s got torn copies (ones, twos and freed memory's zeros) of the layer.
    import threading
    import time

    net = _core.zoo.resnet18(1, 32, 10)
    k = max((i for i, l in enumerate(net.layers) if l.is_gemm), key=lambda i: net.layers[i].weights.size)
    shape = net.layers[k].weights.shape
    ones, twos = np.ones(shape, np.int8), np.full(shape, 2, np.int8)
    net.layers[k].weights = ones
    stop = threading.Event()

    def replace_forever():
        i = 0
        while not stop.is_set():
            net.layers[k].weights = twos if i % 2 else ones
            i += 1

    replacer = threading.Thread(target=replace_forever)
    replacer.start()
    torn, built, start = 0, 0, time.perf_counter()
    try:
        while time.perf_counter() - start < 3 or built < 50:
            clean = np.asarray(_core.niu.Emulator(net, [k]).clean_weights(k))
            torn += len(np.unique(clean)) != 1 or clean.flat[0] not in (1, 2)
            built += 1
    finally:
        stop.set()
        replacer.join()
    assert torn == 0, f"{torn} of {built} emulators copied torn weights"
