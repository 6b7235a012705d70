"""A sweep worker's later runs take the model and data set its last run loaded
(aimcemu.modelfile.process_inputs, with reuse_reference): the same results file as a fresh
run's, and a fresh load whenever either file is another one or was written since."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import aimcemu
from aimcemu import modelfile, process_memory
from test_reference_reuse import assert_same_contents, file_contents
from conftest import digits_subset

NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=2, rounds=2, seed=7, layers=["stem", "classifier"])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, 12)


@pytest.fixture
def loads(monkeypatch):
    """Counts the checked loads of a model (and its data set) that runs make."""
    modelfile.process_inputs().clear()
    real = modelfile.load_model_and_check_dataset
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(modelfile, "load_model_and_check_dataset", counted)
    yield calls
    modelfile.process_inputs().clear()


def second_checkpoint(model, path):
    """The model with one weight of its first GEMM layer changed, saved at `path`."""
    net = modelfile.load_model(model)
    layer = next(l for l in net.layers if l.is_gemm)
    weights = np.array(layer.weights)
    weights.flat[0] = 5 if weights.flat[0] != 5 else -5
    layer.weights = weights
    modelfile.save_model(net, path)


def test_later_runs_on_the_same_files_load_them_once_and_write_the_same_file(digits, tmp_path, loads):
    model, data, _, _, _ = digits
    fresh = aimcemu.run(model, data, tmp_path / "fresh.h5", **NOISY)
    for name in ("first", "second", "third"):
        aimcemu.run(model, data, tmp_path / f"{name}.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 2  # the fresh run's and the first reusing run's
    kept = modelfile.process_inputs()
    assert kept.bytes > 0 and process_memory.kept_bytes() >= kept.bytes
    expected = file_contents(tmp_path / "fresh.h5")
    for name in ("first", "second", "third"):
        assert_same_contents(expected, file_contents(tmp_path / f"{name}.h5"))
    # Without reuse_reference nothing is kept or taken.
    aimcemu.run(model, data, tmp_path / "alone.h5", **NOISY)
    assert len(loads) == 3 and fresh.accuracy is not None


def test_the_kept_arrays_are_read_only(digits, tmp_path, loads):
    model, data, _, _, _ = digits
    aimcemu.run(model, data, tmp_path / "a.h5", reuse_reference=True, **NOISY)
    kept = modelfile.process_inputs().lookup(model, data)
    assert kept is not None
    with pytest.raises(ValueError):
        kept.images[0, 0, 0, 0] = 1
    with pytest.raises(ValueError):
        kept.labels[0] = 1


def test_a_checkpoint_renamed_over_the_model_file_is_loaded(digits, tmp_path, loads):
    model, data, _, _, _ = digits
    path = tmp_path / "model.h5"
    shutil.copyfile(model, path)
    second_checkpoint(model, tmp_path / "checkpoint2.h5")
    aimcemu.run(path, data, tmp_path / "before.h5", reuse_reference=True, **NOISY)
    shutil.copyfile(tmp_path / "checkpoint2.h5", tmp_path / "next.h5")
    os.replace(tmp_path / "next.h5", path)
    aimcemu.run(path, data, tmp_path / "after.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 2
    aimcemu.run(tmp_path / "checkpoint2.h5", data, tmp_path / "expected.h5", **NOISY)
    after = file_contents(tmp_path / "after.h5")
    expected = file_contents(tmp_path / "expected.h5")
    expected["/@config"]["model"] = after["/@config"]["model"]
    assert_same_contents(expected, after)


def test_a_file_written_in_place_or_another_data_set_is_loaded_again(digits, tmp_path, loads):
    model, data, _, _, _ = digits
    path = tmp_path / "model.h5"
    shutil.copyfile(model, path)
    aimcemu.run(path, data, tmp_path / "a.h5", reuse_reference=True, **NOISY)
    with open(path, "r+b") as f:  # the same bytes written again: only its change time tells
        content = f.read()
        f.seek(0)
        f.write(content)
    aimcemu.run(path, data, tmp_path / "b.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 2
    other = tmp_path / "other.h5"
    shutil.copyfile(data, other)
    aimcemu.run(path, other, tmp_path / "c.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 3
    aimcemu.run(path, other, tmp_path / "d.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 3


def test_files_that_change_during_the_load_are_not_kept(digits, tmp_path, monkeypatch):
    model, data, _, _, _ = digits
    path = tmp_path / "model.h5"
    shutil.copyfile(model, path)
    modelfile.process_inputs().clear()
    real = modelfile.load_model_and_check_dataset

    def load_then_touch(*args, **kwargs):
        loaded = real(*args, **kwargs)
        os.utime(path, ns=(1, 1))  # what the load read may not be what the file holds now
        return loaded

    monkeypatch.setattr(modelfile, "load_model_and_check_dataset", load_then_touch)
    aimcemu.run(path, data, tmp_path / "a.h5", reuse_reference=True, **NOISY)
    assert modelfile.process_inputs().bytes == 0


def test_release_frees_the_kept_inputs(digits, tmp_path, loads):
    model, data, _, _, _ = digits
    aimcemu.run(model, data, tmp_path / "a.h5", reuse_reference=True, **NOISY)
    assert modelfile.process_inputs().bytes > 0
    process_memory.release()
    assert modelfile.process_inputs().bytes == 0
    aimcemu.run(model, data, tmp_path / "b.h5", reuse_reference=True, **NOISY)
    assert len(loads) == 2
