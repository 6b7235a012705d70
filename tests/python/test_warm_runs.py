"""A sweep's later runs in one process: what they keep from earlier runs and what they no longer copy.

Pinned here: the reference key is the two-level SHA-256 its docstring defines (written out again
below from the network's bytes), the same for one thread and for the worker pool, and it still
misses on one changed byte; the emulator leaves the caller's network as it was (weights lent,
not copied, and back also when the emulator is refused); a run with AIMC layers leaves its chip
states' memory for the next run, and the next run's results file is the same, byte for byte,
whether it reuses that memory or not (the kept states are stale, never used as they are)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile, niu
from aimcemu import reference as reference_module
from aimcemu.reference import reference_key
from conftest import digits_subset
from test_reference_reuse import assert_same_contents, file_contents

IMAGES = 12
NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=2, rounds=2, seed=5, layers=["classifier"])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


def two_level_sha256(buffers: list[bytes], piece: int) -> str:
    """The key's definition, independently: each buffer cut into pieces of `piece` bytes, the
    SHA-256 of (8-byte little-endian length, SHA-256 digest) of every piece in order."""
    top = hashlib.sha256(b"aimcemu reference key v2")
    for buffer in buffers:
        for at in range(0, max(len(buffer), 1), piece):
            part = buffer[at:at + piece]
            top.update(len(part).to_bytes(8, "little") + hashlib.sha256(part).digest())
    return top.hexdigest()


def network_buffers(net) -> list[bytes]:
    buffers: list[bytes] = []
    _core.feed_network(net, lambda view: buffers.append(bytes(view)))
    return buffers


@pytest.mark.parametrize("piece", [reference_module._PIECE_BYTES, 64, 4096])
@pytest.mark.parametrize("threads", [1, 0])
def test_the_reference_key_is_its_two_level_definition_for_any_thread_count(digits, monkeypatch, piece, threads):
    _, _, net, images, _ = digits
    monkeypatch.setattr(reference_module, "_PIECE_BYTES", piece)  # 64 and 4096: most pieces go to the pool
    layers = [3, 0, len(net.layers) - 1]
    images = np.ascontiguousarray(images)
    expected = two_level_sha256(
        network_buffers(net) + [repr((str(images.dtype), images.shape, sorted(layers))).encode(), images.tobytes()], piece)
    assert reference_key(net, images, layers, threads) == expected
    changed = images.copy()
    changed[-1, -1, -1, -1] ^= 1
    assert reference_key(net, changed, layers, threads) != expected


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
