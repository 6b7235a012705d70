"""Hybrid AIMC/digital runs: ``aimcemu.run`` with a mapping, noise, chips, t and rounds.

The noisy weights the run hands to the PU model are captured and checked bit for bit against the
NIU Python API (``aimcemu.niu.apply``) for the same (seed, chip, round, t, alpha); the stored
activations against ``_core.run_network`` on those weights and against the independent NumPy
reference.  The embedded digits model runs on a 48-image subset of its test set, so every run
here takes well under a second."""
from __future__ import annotations

import json
import os
import re

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, cli, modelfile, niu, rounds, runner
from int8_reference import run_network_reference
from conftest import digits_subset

IMAGES = 48
PCM = {"model": "pcm_like"}
# No read noise and no drift: what is left is the programming noise, fixed per chip.
PROGRAMMING_ONLY = {"model": "pcm_like", "read_noise_scale": 0.0, "drift_scale": 0.0}
# Deterministic drift only: every device drifts by exactly (t/t0 + 1)^-0.1.
DRIFT_ONLY = {"model": "state_independent", "prog_noise_scale": 0.0, "read_noise_scale": 0.0, "drift_nu_std": 0.0}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """(model path, data path, net, images, labels): the embedded model on a test-set subset."""
    return digits_subset(tmp_path_factory, IMAGES)


@pytest.fixture
def captured(monkeypatch):
    """Records the weights dict of every run_network call the runner makes, in call order (a
    published round's weights read back from the emulator's HBM at the time of the call)."""
    calls = []
    real = rounds.run_network

    def spy(net, images, backend, threads, weights=None, **options):
        calls.append(weights.read_back() if isinstance(weights, rounds.PublishedRound) else weights)
        return real(net, images, backend, threads, weights, **options)

    monkeypatch.setattr(rounds, "run_network", spy)
    return calls


def round_weights(calls):
    """The per-round weight dicts (the first call is the noise-free reference)."""
    assert calls[0] is None
    return calls[1:]


def file_arrays(path) -> dict[str, np.ndarray]:
    """Every dataset of a results file by path."""
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


def test_noisy_weights_are_the_niu_apis_and_activations_the_pu_models(digits, captured, tmp_path):
    model, data, net, images, labels = digits
    out = tmp_path / "run.h5"
    summary = aimcemu.run(model, data, out, mapping={"default": "digital", "layers": {"block_conv*": "aimc",
                                                                                      "classifier": "aimc"}},
                          noise=PCM, t=(0.0, 3600.0), chips=2, rounds=2, seed=5, drift_compensation="global",
                          layers=["block_conv1", "classifier"])
    layers = net.layers
    aimc = [1, 2, 6]
    # chip-major enumeration, NIU round id = round
    expected_coords = [(r, c, t) for c in range(2) for t in (0.0, 3600.0) for r in range(2)]
    assert list(zip(summary.niu_round, summary.round_chip, summary.round_t)) == expected_coords
    weights = round_weights(captured)
    assert len(weights) == len(expected_coords)
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["round"][()], np.arange(len(expected_coords)))  # unique index
        np.testing.assert_array_equal(f["niu_round"][()], [c[0] for c in expected_coords])
        assert list(f["drift_compensation"].asstr()[()]) == ["global"] * len(expected_coords)
        np.testing.assert_array_equal(f["chip"][()], [c[1] for c in expected_coords])
        np.testing.assert_array_equal(f["t"][()], [c[2] for c in expected_coords])
        config = json.loads(f.attrs["config"])
        for position, ((round_id, chip, t), w) in enumerate(zip(expected_coords, weights)):
            assert sorted(w) == aimc
            for i in aimc:
                alpha = summary.drift_alpha[layers[i].name][chip][[0.0, 3600.0].index(t)]
                expected = niu.apply(layers[i].weights, PCM, seed=5, chip=chip, round=round_id, t=t, layer=i,
                                     alpha=alpha)
                np.testing.assert_array_equal(w[i], expected)
            acts = _core.run_network(net, images, "fast", 0, w)
            np.testing.assert_array_equal(f["layers/block_conv1/activations"][position], acts[1])
            np.testing.assert_array_equal(f["layers/classifier/activations"][position], acts[6])
            _check_metrics(f["layers/block_conv1"], position, acts[1])
            predicted = acts[6].reshape(IMAGES, -1).argmax(axis=1)
            assert f["accuracy"][position] == pytest.approx(np.mean(predicted == labels), abs=0)
        noisy_ref = run_network_reference(_with_weights(model, weights[-1]), images)
        np.testing.assert_array_equal(f["layers/classifier/activations"][-1], noisy_ref[6])
        for i, layer in enumerate(layers):
            group = f["layers"][layer.name]
            assert group.attrs["device"] == ("aimc" if i in aimc else "digital")
            if i in aimc:
                assert group.attrs["noise_model"] == "pcm_like"
                expected_alpha = [summary.drift_alpha[layer.name][c][[0.0, 3600.0].index(t)] for _, c, t in expected_coords]
                np.testing.assert_array_equal(group["drift_alpha"][()], expected_alpha)
            else:
                assert "drift_alpha" not in group
    assert config["placements"]["stem"] == {"device": "digital"}
    assert config["placements"]["classifier"]["noise"]["model"] == "pcm_like"
    assert config["noise"]["g_max"] == 25.0  # defaults filled in
    assert (config["chips"], config["rounds"], config["seed"], config["t"]) == (2, 2, 5, [0.0, 3600.0])
    assert config["drift_alpha"] == summary.drift_alpha


def _check_metrics(group, position: int, noisy: np.ndarray) -> None:
    """The stored SNR, cosine and mismatch rate of one round against their definitions."""
    ref = group["reference"][()].astype(np.float64)
    err = noisy.astype(np.float64) - ref
    assert group["snr_db"][position] == pytest.approx(10 * np.log10(np.sum(ref**2) / np.sum(err**2)), rel=1e-12)
    cosine = np.sum(ref * noisy) / np.sqrt(np.sum(ref**2) * np.sum(noisy.astype(np.float64) ** 2))
    assert group["cosine"][position] == pytest.approx(cosine, rel=1e-12)
    assert group["mismatch_rate"][position] == np.count_nonzero(err) / err.size


def _with_weights(model_path, weights: dict):
    """A fresh copy of the model whose GEMM layers carry the given weights (for the NumPy reference)."""
    net = modelfile.load_model(model_path)
    layers = net.layers
    for i, w in weights.items():
        layers[i].weights = w
    net.layers = layers
    net.resolve()
    return net


def test_a_mapping_without_aimc_layers_reproduces_the_reference(digits, captured, tmp_path):
    model, data, net, _, _ = digits
    out = tmp_path / "digital.h5"
    summary = aimcemu.run(model, data, out, mapping={"default": "digital"}, t=(0.0, 86400.0), chips=2)
    assert all(w is None or w == {} for w in captured[1:])
    assert summary.round_accuracy == [summary.accuracy] * 4
    with h5py.File(out, "r") as f:
        for name in f.attrs["layer_names"]:
            g = f["layers"][name]
            for position in range(4):
                np.testing.assert_array_equal(g["activations"][position], g["reference"][()])
            assert np.all(np.isinf(g["snr_db"][()])) and np.all(g["snr_db"][()] > 0)
            np.testing.assert_array_equal(g["mismatch_rate"][()], 0.0)
            np.testing.assert_array_equal(g["cosine"][()], 1.0)


def test_a_digital_run_keeps_only_the_layers_its_file_needs(digits, monkeypatch, tmp_path):
    """Without noisy rounds the reference pass keeps the stored layers and the output only (in the
    reference the writer shares; nothing comes back to NumPy), and the file holds the same
    predictions, accuracy and stored activations as one that kept every layer."""
    model, data, net, _, _ = digits
    keeps = []
    real = rounds.run_network

    def spy(*args, keep=None, into=None, **options):
        keeps.append((keep, None if into is None else into.layers))
        return real(*args, keep=keep, into=into, **options)

    monkeypatch.setattr(rounds, "run_network", spy)
    stored = net.layers[0].name
    needed = aimcemu.run(model, data, tmp_path / "needed.h5", layers=[stored])
    everything = aimcemu.run(model, data, tmp_path / "all.h5", layers="all")
    assert keeps == [([], [0, net.output_index()]), ([], list(range(len(net.layers))))]
    assert needed.accuracy == everything.accuracy
    a, b = file_arrays(tmp_path / "needed.h5"), file_arrays(tmp_path / "all.h5")
    for name in ("reference_predictions", "reference_accuracy", f"layers/{stored}/reference"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_results_do_not_depend_on_the_thread_count(digits, tmp_path):
    model, data, _, _, _ = digits
    files = []
    for threads in (1, 2):
        out = tmp_path / f"threads{threads}.h5"
        aimcemu.run(model, data, out, mapping="all", noise="hermes", t="0,1d", chips=2, rounds=1, seed=3,
                    drift_compensation="global", threads=threads)
        files.append(file_arrays(out))
    assert files[0].keys() == files[1].keys()
    for name in files[0]:
        np.testing.assert_array_equal(files[0][name], files[1][name], err_msg=name)


def test_a_chip_keeps_its_programmed_state_across_t(digits, captured, tmp_path):
    model, data, _, _, _ = digits
    aimcemu.run(model, data, tmp_path / "persist.h5", mapping="all", noise=PROGRAMMING_ONLY,
                t=(0.0, 3600.0, 3.15e7), chips=2, layers="none")
    weights = round_weights(captured)  # chip 0: t0, t1, t2; chip 1: t0, t1, t2
    for chip in range(2):
        first = weights[3 * chip]
        for later in weights[3 * chip + 1: 3 * chip + 3]:
            for i in first:
                np.testing.assert_array_equal(later[i], first[i])
    assert any(not np.array_equal(weights[0][i], weights[3][i]) for i in weights[0])  # chips differ


def test_read_noise_is_fresh_per_round_and_shared_across_t(digits, captured, tmp_path):
    model, data, net, _, _ = digits
    noise = {"model": "pcm_like", "prog_noise_scale": 0.0, "drift_scale": 0.0}
    aimcemu.run(model, data, tmp_path / "read.h5", mapping={"layers": {"head": "aimc"}}, noise=noise,
                t=(0.0, 86400.0), rounds=2, layers="none")
    w = [d[4] for d in round_weights(captured)]  # order: (t0, r0), (t0, r1), (t1, r0), (t1, r1)
    assert not np.array_equal(w[0], w[1])
    clean = net.layers[4].weights
    for round_id, t, got in ((0, 0.0, w[0]), (1, 0.0, w[1]), (0, 86400.0, w[2]), (1, 86400.0, w[3])):
        np.testing.assert_array_equal(got, niu.apply(clean, noise, chip=0, round=round_id, t=t, layer=4))


def test_global_drift_compensation_undoes_deterministic_drift(digits, captured, tmp_path):
    model, data, net, _, _ = digits
    t = (0.0, 3600.0, 86400.0, 3.15e7)
    plain = aimcemu.run(model, data, tmp_path / "plain.h5", mapping="all", noise=DRIFT_ONLY, t=t, layers="none")
    captured.clear()
    compensated = aimcemu.run(model, data, tmp_path / "comp.h5", mapping="all", noise=DRIFT_ONLY, t=t, layers="none",
                              drift_compensation="global")
    # With constant nu = 0.1 every weight shrinks by (t/t0 + 1)^-0.1 and alpha is its inverse up
    # to the rounding of the INT8 calibration readout (mean |code| of the drifted layer); the NIU
    # then writes the clean codes back, off by at most one code where alpha's error tips a rounding.
    for name, per_chip in compensated.drift_alpha.items():
        assert per_chip[0][0] == 1.0
        for k, time in enumerate(t):
            assert per_chip[0][k] == pytest.approx((time / 20.0 + 1.0) ** 0.1, rel=0.02), (name, time)
    layers = net.layers
    changed = total = 0
    for w in round_weights(captured):
        for i, noisy in w.items():
            diff = np.abs(noisy.astype(np.int64) - layers[i].weights)
            assert diff.max() <= 1
            changed, total = changed + np.count_nonzero(diff), total + diff.size
    assert changed / total < 0.05
    for i, noisy in round_weights(captured)[0].items():  # t = 0: no drift, alpha = 1, exact
        np.testing.assert_array_equal(noisy, layers[i].weights)
    assert compensated.round_accuracy == [compensated.accuracy] * len(t)
    with h5py.File(plain.path, "r") as f:
        assert f["layers/classifier/mismatch_rate"][-1] > 0.5
    assert plain.round_accuracy[-1] < compensated.accuracy - 0.3


def test_accuracy_vs_t_summarises_the_files_rounds(digits, tmp_path):
    model, data, _, _, _ = digits
    summary = aimcemu.run(model, data, tmp_path / "table.h5", mapping="all", noise=PCM, t="0,1d,1y", chips=3,
                          rounds=2, layers="none")
    with h5py.File(summary.path, "r") as f:
        acc, chip, t = f["accuracy"][()], f["chip"][()], f["t"][()]
    rows = summary.accuracy_vs_t()
    assert [r["t"] for r in rows] == [0.0, 86400.0, 365 * 86400.0]
    for row in rows:
        per_chip = [acc[(chip == c) & (t == row["t"])].mean() for c in range(3)]
        assert row["chips"] == 3
        assert row["mean"] == pytest.approx(np.mean(per_chip), abs=1e-12)
        assert row["std"] == pytest.approx(np.std(per_chip, ddof=1), abs=1e-12)
        assert (row["min"], row["max"]) == (min(per_chip), max(per_chip))
    table = summary.format_accuracy_table()
    assert "1d" in table and "1y" in table and "mean" in table


def test_cli_prints_accuracy_vs_t(digits, tmp_path, capsys):
    model, data, _, _, _ = digits
    out = tmp_path / "cli.h5"
    mapping = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hybrid_mapping.yaml")
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out), "--mapping", mapping,
                     "--noise", "{model: pcm_like, read_noise_scale: 0.5}", "--t", "0,1h,1y", "--chips", "2",
                     "--seed", "9", "--drift-compensation", "global", "--layers", "none"]) == 0
    text = capsys.readouterr().out
    assert "accuracy vs t (drift compensation: global" in text and "aimc (hermes)" in text
    with h5py.File(out, "r") as f:
        config = json.loads(f.attrs["config"])
        assert f["accuracy"].shape == (6,)
    assert config["noise"]["read_noise_scale"] == 0.5 and config["seed"] == 9
    assert config["placements"]["head"]["noise"]["model"] == "hermes"
    assert config["placements"]["block_conv1"]["noise"]["read_noise_scale"] == 0.5
    assert config["placements"]["stem"] == {"device": "digital"}


def test_yaml_study_config_holds_the_same_keys(digits, tmp_path):
    model, data, _, _, _ = digits
    study = tmp_path / "study.yaml"
    study.write_text(f"model: {model}\ndata: {data}\noutput: {tmp_path / 'study.h5'}\nmapping: all\n"
                     "noise: {model: hermes}\nt: [0, 3600]\nchips: 2\nrounds: 1\nseed: 4\n"
                     "drift_compensation: global\nlayers: none\n")
    summary = aimcemu.run(config=study, chips=3)  # explicit arguments override the file
    assert summary.round_chip == [0, 0, 1, 1, 2, 2] and summary.drift_compensation == "global"
    assert all(l.noise_model == "hermes" for l in summary.layers if l.device == "aimc")


BAD_INPUTS = [
    ({"mapping": {"layers": {"nope": "aimc"}}}, r"field 'layers.nope': matches no layer"),
    ({"mapping": {"layers": {"max_pool": "aimc"}}}, r"field 'layers.max_pool': matches only layers without weights"),
    ({"mapping": {"layers": {"stem": "analog"}}}, r"field 'layers.stem': expected one of digital, aimc"),
    ({"mapping": {"layers": {"stem": {"noise": {"model": "nope"}}}}}, r"field 'layers.stem.noise'.*unknown noise model"),
    ({"mapping": "all", "noise": {"model": "nope"}}, r"field 'noise'.*unknown noise model 'nope'"),
    ({"mapping": "all", "t": (3600.0, 0.0)}, r"field 't': times must be strictly increasing"),
    ({"mapping": "all", "t": "0,0"}, r"field 't': times must be strictly increasing"),
    ({"mapping": "all", "t": (-1.0, 0.0)}, r"field 't': times must be finite and >= 0"),
    ({"mapping": "all", "t": "0,1week"}, r"field 't': cannot read '1week' as a time"),
    ({"mapping": "all", "chips": 0}, r"field 'chips': must be an integer >= 1"),
    ({"mapping": "all", "drift_compensation": "per_row"}, r"field 'drift_compensation'"),
    ({"mapping": "all", "drift_compensation": ["none", "local"]}, r"field 'drift_compensation'.*'local'"),
    ({"mapping": "all", "drift_compensation": "none,none"}, r"field 'drift_compensation'.*twice"),
    ({"mapping": "all", "drift_compensation": []}, r"field 'drift_compensation': needs at least one"),
]


@pytest.mark.parametrize("options, message", BAD_INPUTS)
def test_bad_input_raises_format_error_and_leaves_no_file(digits, tmp_path, options, message):
    model, data, _, _, _ = digits
    out = tmp_path / "bad.h5"
    with pytest.raises(aimcemu.FormatError, match=message):
        aimcemu.run(model, data, out, **options)
    assert os.listdir(tmp_path) == []


def test_bad_mapping_file_is_named_and_the_cli_exits_2(digits, tmp_path, capsys):
    model, data, _, _, _ = digits
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("default: digital\nlayers:\n  block9: aimc\n")
    out = tmp_path / "out.h5"
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out),
                     "--mapping", os.fspath(mapping)]) == 2
    err = capsys.readouterr().err
    assert f"{mapping}: field 'layers.block9': matches no layer" in err and "Traceback" not in err
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out), "--noise", "pcm_like",
                     "--t", "1d,1h"]) == 2
    assert "field 't': times must be strictly increasing" in capsys.readouterr().err
    study = tmp_path / "study.yaml"
    study.write_text("mapping: all\nt: [0, -5]\n")
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out),
                     "--config", os.fspath(study)]) == 2
    assert f"{study}: field 't': times must be finite and >= 0" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["mapping.yaml", "study.yaml"]


@pytest.mark.slow
def test_embedded_model_accuracy_vs_t_over_eight_chips(tmp_path):
    """The study of the issue on the full test set, in one run (examples/drift_study.yaml): PCM on
    every layer, 8 chips, t up to a year, with and without compensation.  Drift without
    compensation shrinks every weight and with it the logits' margins; global compensation
    restores the scale, so it must keep clearly more accuracy at one year."""
    study = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "drift_study.yaml")
    rows = aimcemu.run(config=study, output=tmp_path / "study.h5").accuracy_vs_t()
    results = {name: [r for r in rows if r["drift_compensation"] == name] for name in ("none", "global")}
    assert [len(r) for r in results.values()] == [4, 4] and all(r["chips"] == 8 for r in rows)
    assert results["global"][-1]["mean"] > results["none"][-1]["mean"] + 0.3
    assert results["global"][0]["mean"] > 0.95
    # The run is deterministic (bit-exact NIU, integer inference): docs/hybrid_runs.md's table
    # quotes its all-AIMC columns to the digit.
    documented = documented_accuracy_table()
    for name, column in (("none", 0), ("global", 1)):
        quoted = [documented[t][column] for t in ("0", "1 h", "1 day", "1 year")]
        measured = [(round(r["mean"], 4), round(r["std"], 4)) for r in results[name]]
        assert measured == quoted, f"docs/hybrid_runs.md, all AIMC, {name}: rerun gives {measured}"


def documented_accuracy_table() -> dict[str, list[tuple[float, float]]]:
    """{t: [(mean, std) per column]} of the accuracy table in docs/hybrid_runs.md."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "hybrid_runs.md")
    rows = {}
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in ("0", "1 h", "1 day", "1 year"):
            rows[cells[0]] = [tuple(float(x) for x in re.findall(r"\d\.\d{4}", c)[:2]) for c in cells[1:]]
    assert len(rows) == 4, f"{path}: the accuracy table has rows {sorted(rows)}"
    return rows


def test_a_noise_model_object_equals_its_config(digits, tmp_path):
    from aimcemu.noise import HermesNoiseModel

    model, data, _, _, _ = digits
    runs = [aimcemu.run(model, data, tmp_path / f"{i}.h5", mapping={"layers": {"head": "aimc"}}, noise=noise,
                        t=(0.0, 3600.0), chips=2, layers="head")
            for i, noise in enumerate((HermesNoiseModel(drift_reference="programmed"), {"model": "hermes"}, "hermes"))]
    arrays = [file_arrays(r.path) for r in runs]
    for other in arrays[1:]:
        for name in arrays[0]:
            np.testing.assert_array_equal(arrays[0][name], other[name], err_msg=name)
    assert arrays[0]["accuracy"].shape == (4,)


# --- several drift compensations in one run ---------------------------------------------------------
def test_both_compensations_use_the_same_niu_draws_and_differ_only_in_alpha(digits, captured, monkeypatch, tmp_path):
    model, data, net, _, _ = digits
    calibrations = []
    real_weights = rounds.NoisyWeights.weights

    def count_calibrations(self, chip, round_id, t, alpha=None):
        if round_id == runner.CALIBRATION_ROUND:
            calibrations.append((chip, t))
        return real_weights(self, chip, round_id, t, alpha)

    monkeypatch.setattr(rounds.NoisyWeights, "weights", count_calibrations)
    times = (0.0, 3600.0, 86400.0)
    out = tmp_path / "both.h5"
    summary = aimcemu.run(model, data, out, mapping="all", noise=PCM, t=times, chips=2, rounds=2, seed=5,
                          drift_compensation=["none", "global"], layers="none")
    expected = [(r, c, t, name) for name in ("none", "global") for c in range(2) for t in times for r in range(2)]
    assert list(zip(summary.niu_round, summary.round_chip, summary.round_t, summary.round_compensation)) == expected
    # One calibration readout per (chip, t), shared by every compensation (t = 0 is the baseline).
    assert sorted(calibrations) == sorted((c, t) for c in range(2) for t in times)
    weights = round_weights(captured)
    layers = net.layers
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["round"][()], np.arange(len(expected)))
        np.testing.assert_array_equal(f["niu_round"][()], [e[0] for e in expected])
        assert list(f["drift_compensation"].asstr()[()]) == [e[3] for e in expected]
        alpha = {name: f["layers"][name]["drift_alpha"][()] for name in summary.drift_alpha}
    for position, ((round_id, chip, t, name), w) in enumerate(zip(expected, weights)):
        for i, noisy in w.items():
            stored = alpha[layers[i].name][position]
            if name == "none":
                assert stored == 1.0
            else:
                assert stored == summary.drift_alpha[layers[i].name][chip][times.index(t)]
            np.testing.assert_array_equal(noisy, niu.apply(layers[i].weights, PCM, seed=5, chip=chip, round=round_id,
                                                           t=t, layer=i, alpha=stored))
    # At t = 0 the global alpha is exactly 1 (readout = baseline), so the two rounds are the same weights.
    half = len(expected) // 2
    for position in range(half):
        if expected[position][2] == 0.0:
            for i, noisy in weights[position].items():
                np.testing.assert_array_equal(noisy, weights[position + half][i])
    rows = summary.accuracy_vs_t()
    assert [(r["drift_compensation"], r["t"]) for r in rows] == [(n, t) for n in ("none", "global") for t in times]
    table = summary.format_accuracy_table()
    assert "drift compensation: none, global" in table
    assert sum(line.startswith("none ") for line in table.splitlines()) == len(times)
    assert sum(line.startswith("global ") for line in table.splitlines()) == len(times)


def test_a_two_compensation_run_holds_the_two_single_runs(digits, tmp_path):
    """Each compensation's rounds are bit-identical to a run with that compensation alone."""
    model, data, _, _, _ = digits
    options = dict(mapping="all", noise=PCM, t=(0.0, 86400.0), chips=2, seed=2, layers=["head"])
    both = file_arrays(aimcemu.run(model, data, tmp_path / "both.h5", drift_compensation="none,global", **options))
    for k, name in enumerate(("none", "global")):
        single = file_arrays(aimcemu.run(model, data, tmp_path / f"{name}.h5", drift_compensation=name, **options))
        for key in ("accuracy", "logits", "layers/head/activations", "layers/head/drift_alpha", "layers/head/snr_db"):
            np.testing.assert_array_equal(both[key][4 * k: 4 * k + 4], single[key], err_msg=f"{name}: {key}")


def test_xarray_sees_unique_rounds_and_the_compensation_coordinate(digits, tmp_path):
    import xarray as xr
    from aimcemu import analysis

    model, data, _, _, _ = digits
    summary = aimcemu.run(model, data, tmp_path / "x.h5", mapping="all", noise=PCM, t=(0.0, 3600.0), chips=3,
                          drift_compensation=["none", "global"], layers="none")
    with xr.open_dataset(summary.path, engine="h5netcdf") as ds:
        assert set(ds["accuracy"].coords) == {"round", "chip", "t", "niu_round", "drift_compensation"}
        assert ds["drift_compensation"].values.tolist() == summary.round_compensation
        picked = ds["accuracy"].sel(round=7)
        assert (str(picked["drift_compensation"].values), int(picked["chip"]), float(picked["t"])) == ("global", 0, 3600.0)
    run = analysis.open_run(summary.path)
    assert run["drift_compensation"].values.tolist() == summary.round_compensation
    acc = analysis.accuracy_vs_t(run)
    assert acc["mean"].dims == ("drift_compensation", "t")
    for row in summary.accuracy_vs_t():
        assert float(acc["mean"].sel(drift_compensation=row["drift_compensation"], t=row["t"])) == \
            pytest.approx(row["mean"], abs=1e-12)


def test_cli_runs_both_compensations(digits, tmp_path, capsys):
    model, data, _, _, _ = digits
    out = tmp_path / "cli.h5"
    assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out), "--mapping", "all",
                     "--noise", "pcm_like", "--t", "0,1d", "--chips", "2", "--drift-compensation", "none,global",
                     "--layers", "none"]) == 0
    text = capsys.readouterr().out
    assert "accuracy vs t (drift compensation: none, global" in text and "x 2 compensations" in text
    with h5py.File(out, "r") as f:
        assert json.loads(f.attrs["config"])["drift_compensation"] == ["none", "global"]
        assert f["accuracy"].shape == (8,)


# --- the NIU's alpha limit ------------------------------------------------------------------------
@pytest.mark.parametrize("absmax", [1, 64, 127])
def test_alpha_limit_is_the_largest_alpha_the_niu_compiles(absmax):
    constants = niu.constants()
    limit = runner.niu_alpha_limit(constants, absmax)
    weights = np.array([[absmax, -absmax // 2]], dtype=np.int8)
    niu.apply(weights, PCM, alpha=limit)  # fits
    # One step of K further (K = 2^K_BITS after rounding) no longer fits the back-conversion scale.
    k_step = absmax * 2.0 ** (constants["NIU_K_SHIFT"] - constants["NIU_G_FRAC"])
    with pytest.raises(aimcemu.FormatError, match="BACK_K"):
        niu.apply(weights, PCM, alpha=limit + 1.0 / k_step)
    # NIU v2: K is 15 bits with K_SHIFT 19 over G's 14 fraction bits: (2^15 - 1) / (127 * 2^5).
    assert runner.niu_alpha_limit(constants, 127) == pytest.approx(8.0627, abs=1e-4)


def test_an_alpha_beyond_the_niu_is_capped_with_a_warning_and_a_note(digits, tmp_path):
    model, data, net, _, _ = digits
    fast_drift = {**DRIFT_ONLY, "drift_nu_mean": 0.4}  # weights shrink ~300x in a year: alpha far above 8
    with pytest.warns(RuntimeWarning, match="capped"):
        summary = aimcemu.run(model, data, tmp_path / "cap.h5", mapping="all", noise=fast_drift, t=(0.0, 3.15e7),
                              drift_compensation="global", layers="none")
    with h5py.File(summary.path, "r") as f:
        capped = json.loads(f.attrs["config"])["drift_alpha_capped"]
        assert capped and all(c["t"] == 3.15e7 and c["alpha"] > c["limit"] for c in capped)
        for c in capped:
            index = [l.name for l in net.layers].index(c["layer"])
            absmax = int(np.abs(net.layers[index].weights.astype(np.int64)).max())
            assert c["limit"] == runner.niu_alpha_limit(niu.constants(), absmax)
            assert f["layers"][c["layer"]]["drift_alpha"][1] == c["limit"]
            assert summary.drift_alpha[c["layer"]][0][1] == c["limit"]
