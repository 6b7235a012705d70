"""The metrics of a noisy round are taken by the PU during its pass (``ResultsWriter.round_metrics``,
emulator/round_metrics.hpp) for every layer the results file does not store; only the stored
layers and the output come back to Python.  Checked here against the path that hands every layer
to the writer (``set_round`` on all of them, what the run did before): every dataset and
attribute of the results file is the same, bit for bit, at 1, 2 and 3 threads, for a hybrid and
an all-AIMC run; a run really leaves the unstored layers in C++; misuse is a FormatError."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core
from conftest import digits_subset

IMAGES = 7  # micro-batches of unequal size at 2 and 3 threads


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    model, subset, net, images, _ = digits_subset(tmp_path_factory, IMAGES)
    return model, subset, net


class EveryLayerToTheWriter(_core.ResultsWriter):
    """The writer without in-pass metrics: every layer of every round comes back and goes through set_round."""

    def round_metrics(self):
        return None


def contents(path) -> dict:
    """Every dataset and attribute, numbers as bytes and object references (dimension scales) as the
    names they point to; the config without what differs by design (its time, threads, folder)."""
    out = {}
    with h5py.File(path, "r") as f:
        def plain(value):
            if isinstance(value, h5py.Reference):
                return f[value].name
            if isinstance(value, np.ndarray) and value.dtype.kind not in "OSUV":
                return (value.dtype.str, value.shape, value.tobytes())
            if isinstance(value, np.ndarray):
                return [plain(v) for v in value.tolist()]
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            return value

        def visit(name, obj):
            for key, value in obj.attrs.items():
                if name == "/" and key == "config":
                    config = json.loads(value)
                    for varies in ("created", "threads", "threads_used"):
                        config.pop(varies, None)
                    value = json.dumps(config, sort_keys=True).replace(str(path.parent), "<dir>")
                out[f"{name}@{key}"] = plain(value)
            if isinstance(obj, h5py.Dataset):
                out[name] = plain(obj[()])

        visit("/", f)
        f.visititems(visit)
    return out


CASES = {
    "hybrid": dict(mapping={"default": "digital", "layers": {"block_conv*": "aimc"}}, noise={"model": "pcm_like"},
                   t=[0.0, 3600.0], chips=2, rounds=2, drift_compensation=["none", "global"], layers=["block_conv1"]),
    "all_aimc": dict(mapping="all", noise={"model": "hermes"}, t=[86400.0], rounds=3, layers="none"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_in_pass_metrics_give_the_same_file_as_every_layer_to_the_writer(digits, tmp_path, monkeypatch, case):
    model, data, net = digits
    kwargs = CASES[case]
    with monkeypatch.context() as patch:
        patch.setattr(_core, "ResultsWriter", EveryLayerToTheWriter)
        (tmp_path / "before").mkdir()
        aimcemu.run(model, data, tmp_path / "before" / "run.h5", threads=1, seed=5, **kwargs)
    before = contents(tmp_path / "before" / "run.h5")
    with h5py.File(tmp_path / "before" / "run.h5", "r") as f:  # the metrics have teeth: the rounds are noisy
        assert any(np.any(f[f"layers/{l.name}/mismatch_rate"][()] > 0) for l in net.layers)
    for threads in (1, 2, 3):
        (tmp_path / f"threads{threads}").mkdir()
        out = tmp_path / f"threads{threads}" / "run.h5"
        aimcemu.run(model, data, out, threads=threads, seed=5, **kwargs)
        after = contents(out)
        assert sorted(after) == sorted(before)
        assert [k for k in before if before[k] != after[k]] == [], f"{threads} threads"


def test_a_round_returns_only_what_the_file_needs(digits, tmp_path):
    model, data, net = digits
    layers = net.layers
    images = aimcemu.modelfile.load_dataset(data, net)["images"]
    stored = layers[1].name
    writer = _core.ResultsWriter(str(tmp_path / "r.h5"), net, np.zeros(IMAGES, np.int64), [(0, 0, 0.0)], "{}", [stored])
    reference = _core.run_network(net, images, "fast", 1, None)
    for i, acts in enumerate(reference):
        writer.set_reference(i, acts)
    aimc = [i for i, l in enumerate(layers) if l.weights is not None and np.size(l.weights)]
    emulator = _core.niu.Emulator(net, aimc)
    programs = [aimcemu.niu.compile_program({"model": "pcm_like"}, [layers[i].weights for i in aimc], seed=1,
                                            chip=0, round=0, t=60.0, layer_ids=aimc).core_program]
    round_id = emulator.write_round(programs, 1)
    metrics = writer.round_metrics()
    output = net.output_index()
    assert metrics.measured == [i for i in range(len(layers)) if i not in (1, output)]
    _, full = emulator.run_published(images, "fast", 2, round_id)
    _, got = emulator.run_published(images, "fast", 2, round_id, metrics=metrics)
    for i in range(len(layers)):
        if i in metrics.measured:
            assert got[i] is None
            noisy, ref = full[i].astype(np.int64).ravel(), reference[i].astype(np.int64).ravel()
            assert metrics.sums(i) == (int(ref @ ref), int(noisy @ noisy), int(ref @ noisy),
                                       int((noisy - ref) @ (noisy - ref)), int(np.count_nonzero(noisy != ref)), noisy.size)
        else:
            np.testing.assert_array_equal(got[i], full[i])
    # A RoundMetrics serves one pass: run twice, its sums cover every value twice, which the writer refuses.
    emulator.run_published(images, "fast", 2, round_id, metrics=metrics)
    first = layers[metrics.measured[0]].name
    with pytest.raises(_core.FormatError, match=f"layers/{first}/activations"):
        writer.set_round_metrics(0, metrics)
    fresh = writer.round_metrics()
    emulator.run_published(images, "fast", 2, round_id, metrics=fresh)
    writer.set_round_metrics(0, fresh)
