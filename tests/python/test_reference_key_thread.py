"""The reference key's costly part (a SHA-256 of the weights and images) runs on a thread while a
run builds its emulator and results writer (aimcemu.reference.ContentDigest).

Pinned here: the key from the thread's digest is the key computed in place; an error on the thread
reaches whoever asks for the result; a run that fails while the key is hashed leaves no key thread behind."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import aimcemu
from aimcemu import _core
from aimcemu.reference import ContentDigest, content_digest, reference_key


def test_the_threads_digest_gives_the_key_computed_in_place():
    net = _core.zoo.by_name("resnet18")
    images = np.random.default_rng(2).integers(-128, 128, size=(2, *net.input_shape), dtype=np.int8)
    digest = ContentDigest(net, images)
    layers = [0, 3, len(net.layers) - 1]
    assert digest.result() == content_digest(net, images)
    assert reference_key(net, images, layers, digest.result()) == reference_key(net, images, layers)
    assert reference_key(net, images, layers[:2], digest.result()) != reference_key(net, images, layers)


def test_an_error_on_the_thread_reaches_the_caller():
    digest = ContentDigest("not a network", np.zeros((1, 2, 2, 1), dtype=np.int8))
    with pytest.raises(TypeError):
        digest.result()


def test_a_run_failing_while_the_key_is_hashed_leaves_no_key_thread(tmp_path, monkeypatch):
    from aimcemu import modelfile, runner
    net = _core.zoo.by_name("resnet18")
    model, data = tmp_path / "model.h5", tmp_path / "data.h5"
    modelfile.save_model(net, model)
    modelfile.save_dataset(np.zeros((1, *net.input_shape), dtype=np.int8), np.zeros(1, dtype=np.int64), data,
                           source="zeros")
    started = []

    class RecordedDigest(ContentDigest):
        def __init__(self, *args):
            super().__init__(*args)
            started.append(self)

    def refused(*args, **kwargs):
        raise aimcemu.FormatError("<test>: field 'mapping': refused while the key is hashed")

    monkeypatch.setattr(runner, "ContentDigest", RecordedDigest)
    monkeypatch.setattr(runner, "NoisyWeights", refused)
    with pytest.raises(aimcemu.FormatError, match="refused while the key is hashed"):
        aimcemu.run(model, data, tmp_path / "out.h5", mapping="all", noise="pcm_like", reuse_reference=True)
    assert len(started) == 1
    assert not [t for t in threading.enumerate() if t.name == "aimcemu-reference-key"]
    assert not (tmp_path / "out.h5").exists()
