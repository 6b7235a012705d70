"""`_core.run_network` (a run's reference pass, a digital run) keeps its PU pass buffers for the
next pass of the process, in the pool the emulators keep theirs (docs/hybrid_runs.md, "Memory kept
between runs").

Pinned here: the pool is counted and released with the rest of the kept memory; a pass in a pool
that the last call, or a noisy run's emulator, left full of other activations gives the bytes of a
pass in fresh memory; two calls on two Python threads at once each get their own buffers (images
that differ per thread, so a shared buffer would mix them) and the results of fresh memory."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile, niu
from test_reference_reuse import assert_same_contents, file_contents

IMAGES = 2  # ResNet-18: its buffers are above the pool's 64 KiB, below which nothing is pooled


@pytest.fixture(scope="module")
def resnet18():
    net = _core.zoo.by_name("resnet18")
    rng = np.random.default_rng(7)
    images = [rng.integers(-128, 128, size=(IMAGES, *net.input_shape), dtype=np.int8) for _ in range(2)]
    return net, images


def fresh_pass(net, images, **options):
    niu.release_kept_memory()
    out = _core.run_network(net, images, **options)
    niu.release_kept_memory()
    return out


def assert_same_layers(got, expected, what):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(g, e, err_msg=f"{what}: layer {i}")


def test_a_call_keeps_its_buffers_for_the_next_and_gives_the_bytes_of_fresh_memory(resnet18):
    net, (first, second) = resnet18
    expected_first, expected_second = fresh_pass(net, first, threads=2), fresh_pass(net, second, threads=2)
    assert niu.kept_memory_bytes() == 0
    _core.run_network(net, first, threads=2)
    kept = _core.niu.kept_pass_buffer_bytes()
    assert kept > 0 and niu.kept_memory_bytes() == kept
    for threads in (1, 2, 3):  # each pass runs in the last one's buffers, full of other images' layers
        assert_same_layers(_core.run_network(net, second, threads=threads), expected_second, f"{threads} threads")
        assert_same_layers(_core.run_network(net, first, threads=threads), expected_first, f"{threads} threads")
    assert _core.niu.kept_pass_buffer_bytes() > 0
    freed = niu.kept_memory_bytes()
    assert niu.release_kept_memory() == freed and niu.kept_memory_bytes() == 0


def test_the_kept_buffers_stay_within_the_limit(resnet18):
    net, (first, _) = resnet18
    niu.release_kept_memory()
    _core.run_network(net, first, threads=1)
    kept = _core.niu.kept_pass_buffer_bytes()
    previous = _core.niu.set_kept_chip_state_limit(kept - 1)  # what is kept now is over it: freed
    try:
        assert _core.niu.kept_pass_buffer_bytes() == 0
        _core.run_network(net, first, threads=1)
        assert _core.niu.kept_pass_buffer_bytes() == 0
    finally:
        _core.niu.set_kept_chip_state_limit(previous)


def test_two_calls_at_once_each_get_their_own_buffers(resnet18):
    net, images = resnet18
    expected = [fresh_pass(net, x, threads=1) for x in images]
    _core.run_network(net, images[0], threads=1)  # a kept pool for one of the two to take
    start = threading.Barrier(2)
    results: list[list] = [[], []]
    errors: list[BaseException] = []

    def calls(k):
        try:
            for _ in range(4):
                start.wait()
                results[k].append(_core.run_network(net, images[k], threads=1))
        except BaseException as error:  # noqa: BLE001 -- reported by the main thread
            errors.append(error)
            start.abort()

    workers = [threading.Thread(target=calls, args=(k,)) for k in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    for k in (0, 1):
        assert len(results[k]) == 4
        for n, got in enumerate(results[k]):
            assert_same_layers(got, expected[k], f"thread {k}, call {n}")
    assert 0 < _core.niu.kept_pass_buffer_bytes()  # one pool kept, the other freed


def test_a_noisy_runs_buffers_serve_the_next_reference_pass_and_digital_run(resnet18, tmp_path):
    """The emulator's pool (noisy activations) goes to the next run_network call, and a noisy
    run's reference pass takes the pool the last call left: every file is the same as in fresh memory."""
    net, (first, _) = resnet18
    model, data = tmp_path / "model.h5", tmp_path / "data.h5"
    modelfile.save_model(net, model)
    modelfile.save_dataset(first, np.zeros(IMAGES, dtype=np.int64), data, source="random")
    noisy = dict(mapping="all", noise="pcm_like", rounds=1, seed=3, layers="none", threads=2)
    expected_pass = fresh_pass(net, first, threads=2)
    niu.release_kept_memory()
    aimcemu.run(model, data, tmp_path / "fresh.h5", **noisy)
    assert _core.niu.kept_pass_buffer_bytes() > 0
    assert_same_layers(_core.run_network(net, first, threads=2), expected_pass, "after a noisy run")
    aimcemu.run(model, data, tmp_path / "reusing.h5", **noisy)
    aimcemu.run(model, data, tmp_path / "digital_reusing.h5", layers="none", threads=2)
    niu.release_kept_memory()
    aimcemu.run(model, data, tmp_path / "digital_fresh.h5", layers="none", threads=2)
    assert_same_contents(file_contents(tmp_path / "fresh.h5"), file_contents(tmp_path / "reusing.h5"))
    assert_same_contents(file_contents(tmp_path / "digital_fresh.h5"), file_contents(tmp_path / "digital_reusing.h5"))
