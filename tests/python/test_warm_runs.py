"""A sweep's later runs in one process: what they keep from earlier runs and what they no longer copy.

Pinned here: the emulator leaves the caller's network as it was (weights lent,
not copied, and back also when the emulator is refused); a run with AIMC layers leaves its chip
states' memory for the next run, and the next run's results file is the same, byte for byte,
whether it reuses that memory or not (the kept states are stale, never used as they are)."""
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
    niu.release_kept_chip_states()
    aimcemu.run(model, data, tmp_path / "first.h5", **NOISY)
    kept = niu.kept_chip_state_bytes()
    aimc_weights = sum(len(l.weights) for l in net.layers)
    assert kept >= 8 * aimc_weights  # every AIMC layer's state, 8 bytes per weight
    aimcemu.run(model, data, tmp_path / "reusing.h5", **NOISY)  # writes its states into that memory
    assert niu.kept_chip_state_bytes() == kept
    assert niu.release_kept_chip_states() == kept
    assert niu.kept_chip_state_bytes() == 0
    aimcemu.run(model, data, tmp_path / "fresh.h5", **NOISY)  # fresh memory
    expected = file_contents(tmp_path / "fresh.h5")
    assert_same_contents(expected, file_contents(tmp_path / "first.h5"))
    assert_same_contents(expected, file_contents(tmp_path / "reusing.h5"))


def test_the_kept_chip_states_stay_within_their_limit(digits, tmp_path):
    model, data, _, _, _ = digits
    niu.release_kept_chip_states()  # what an earlier test's network left may be larger
    aimcemu.run(model, data, tmp_path / "a.h5", **NOISY)
    kept = niu.kept_chip_state_bytes()
    assert kept > 0
    previous = _core.niu.set_kept_chip_state_limit(kept - 1)  # what is kept now is over it: freed
    try:
        assert niu.kept_chip_state_bytes() == 0
        aimcemu.run(model, data, tmp_path / "b.h5", **NOISY)
        assert niu.kept_chip_state_bytes() == 0
    finally:
        _core.niu.set_kept_chip_state_limit(previous)
    aimcemu.run(model, data, tmp_path / "c.h5", **NOISY)
    assert niu.kept_chip_state_bytes() == kept
