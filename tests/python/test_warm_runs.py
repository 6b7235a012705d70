"""A sweep's later runs in one process: what they keep from earlier runs and what they no longer copy.

Pinned here: the emulator leaves the caller's network as it was (weights lent,
not copied, and back also when the emulator is refused); a run with AIMC layers leaves its chip
states' memory and its PU pass buffers for the next run, within a limit, and the next run's results
file is the same, byte for byte, whether it reuses that memory or not (the kept states are stale,
never used as they are)."""
from __future__ import annotations

import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile, niu
from conftest import digits_subset
from test_reference_reuse import assert_same_contents, file_contents

IMAGES = 12
NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=2, rounds=2, seed=5, layers=["classifier"])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


def network_buffers(net) -> list[bytes]:
    buffers: list[bytes] = []
    _core.feed_network(net, lambda view: buffers.append(bytes(view)))
    return buffers


def test_the_emulator_leaves_the_callers_network_as_it_was(digits):
    model, _, net, _, _ = digits
    gemm = [i for i, l in enumerate(net.layers) if len(l.weights)]
    before = network_buffers(net)
    emulator = _core.niu.Emulator(net, gemm)
    assert network_buffers(net) == before
    for i in gemm:  # the HBM got the weights the caller still holds
        np.testing.assert_array_equal(emulator.clean_weights(i), net.layers[i].weights)
    for refused in ([gemm[0], gemm[0]], [len(net.layers)]):
        with pytest.raises(aimcemu.FormatError):
            _core.niu.Emulator(net, refused)
        assert network_buffers(net) == before
    hostile = modelfile.load_model(model)
    layers = hostile.layers
    layers[gemm[1]].weights = layers[gemm[1]].weights[:-1]  # one weight short: resolve refuses it
    hostile.layers = layers
    hostile_before = network_buffers(hostile)
    with pytest.raises(aimcemu.FormatError, match="weights"):
        _core.niu.Emulator(hostile, gemm)
    assert network_buffers(hostile) == hostile_before


def test_a_run_keeps_its_chip_states_memory_for_the_next_and_writes_the_same_file(digits, tmp_path):
    model, data, net, _, _ = digits
    niu.release_kept_memory()
    aimcemu.run(model, data, tmp_path / "first.h5", **NOISY)
    kept = _core.niu.kept_chip_state_bytes()
    aimc_weights = sum(len(l.weights) for l in net.layers)
    assert kept >= 8 * aimc_weights  # every AIMC layer's state, 8 bytes per weight
    aimcemu.run(model, data, tmp_path / "reusing.h5", **NOISY)  # writes its states into that memory
    assert _core.niu.kept_chip_state_bytes() == kept
    assert _core.niu.release_kept_chip_states() == kept
    assert _core.niu.kept_chip_state_bytes() == 0
    aimcemu.run(model, data, tmp_path / "fresh.h5", **NOISY)  # fresh memory
    expected = file_contents(tmp_path / "fresh.h5")
    assert_same_contents(expected, file_contents(tmp_path / "first.h5"))
    assert_same_contents(expected, file_contents(tmp_path / "reusing.h5"))


def test_the_kept_chip_states_stay_within_their_limit(digits, tmp_path):
    model, data, _, _, _ = digits
    niu.release_kept_memory()  # what an earlier test's network left may be larger
    aimcemu.run(model, data, tmp_path / "a.h5", **NOISY)
    kept = _core.niu.kept_chip_state_bytes()
    assert kept > 0
    previous = _core.niu.set_kept_chip_state_limit(kept - 1)  # what is kept now is over it: freed
    try:
        assert _core.niu.kept_chip_state_bytes() == 0
        aimcemu.run(model, data, tmp_path / "b.h5", **NOISY)
        assert _core.niu.kept_chip_state_bytes() == 0
    finally:
        _core.niu.set_kept_chip_state_limit(previous)
    aimcemu.run(model, data, tmp_path / "c.h5", **NOISY)
    assert _core.niu.kept_chip_state_bytes() == kept


def test_a_run_keeps_its_pass_buffers_for_the_next_and_writes_the_same_file(tmp_path):
    """ResNet-18 (the digits model's buffers are below the pool's 64 KiB): the PU pass buffers of
    one run serve the next run's passes; the files are the same as with fresh buffers."""
    net = _core.zoo.by_name("resnet18")
    images = np.random.default_rng(1).integers(-128, 128, size=(2, *net.input_shape), dtype=np.int8)
    model, data = tmp_path / "model.h5", tmp_path / "data.h5"
    modelfile.save_model(net, model)
    modelfile.save_dataset(images, np.zeros(2, dtype=np.int64), data, source="random")
    options = dict(mapping="all", noise="pcm_like", rounds=2, seed=3, layers="none", threads=2)
    niu.release_kept_memory()
    aimcemu.run(model, data, tmp_path / "first.h5", **options)
    kept = _core.niu.kept_pass_buffer_bytes()
    assert kept > 0 and _core.niu.kept_hbm_bytes() > 0
    assert niu.kept_memory_bytes() == kept + _core.niu.kept_chip_state_bytes() + _core.niu.kept_hbm_bytes()
    aimcemu.run(model, data, tmp_path / "reusing.h5", **options)
    assert _core.niu.kept_pass_buffer_bytes() > 0
    freed = niu.kept_memory_bytes()
    assert niu.release_kept_memory() == freed and niu.kept_memory_bytes() == 0
    aimcemu.run(model, data, tmp_path / "fresh.h5", **options)
    expected = file_contents(tmp_path / "fresh.h5")
    assert_same_contents(expected, file_contents(tmp_path / "first.h5"))
    assert_same_contents(expected, file_contents(tmp_path / "reusing.h5"))
