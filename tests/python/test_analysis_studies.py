"""aimcemu.analysis' studies against independent NumPy recomputations from the raw h5py arrays:
run_as_grid and snr_over_t over a run of two drift compensations (with exact and lost rounds),
accuracy_vs_t's clipped interval and one-chip convention (shared by RunSummary and the report),
and the refusals of inputs these studies cannot answer (a digital run, a confidence given in
percent, rounds that are not rounds of the file)."""
from __future__ import annotations

import math
import os
import shutil

import h5py
import numpy as np
import pytest
import xarray as xr

from aimcemu import analysis
from aimcemu.summary import RunSummary

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


@pytest.fixture
def run_with_edge_rounds(tmp_path):
    """noisy.h5 (rounds: compensation none then global, x chip 0..1 x t 0, 3600; 1 round each)
    with SNR edge cases: conv +inf in its first two rounds (exact), pool -inf in round 5 (lost),
    mix +inf in every round of (none, t = 0) (rounds 0 and 2)."""
    path = tmp_path / "edges.h5"
    shutil.copyfile(os.path.join(CORPUS, "noisy.h5"), path)
    with h5py.File(path, "r+") as f:
        # An exact round has no differing element (cosine 1), a lost one cosine 0: the reader
        # refuses metrics of a round that contradict each other.
        for name, rounds in (("conv", slice(0, 2)), ("mix", [0, 2])):
            f[f"layers/{name}/snr_db"][rounds] = np.inf
            f[f"layers/{name}/mismatch_rate"][rounds] = 0.0
            f[f"layers/{name}/cosine"][rounds] = 1.0
        f["layers/pool/snr_db"][5] = -np.inf
        f["layers/pool/cosine"][5] = 0.0
    return path


def raw_rounds(path):
    with h5py.File(path) as f:
        return {"chip": f["chip"][()], "t": f["t"][()], "comp": f["drift_compensation"].asstr()[()],
                "accuracy": f["accuracy"][()], "layers": list(f["layers"]),
                **{(m, n): f["layers"][n][m][()] for n in f["layers"] for m in analysis.METRICS}}


def expected_snr(values: list[float]) -> float:
    """The documented reduction, written out: -inf if any round lost the signal, else the mean in
    dB of the finite rounds, +inf if every round was exact."""
    if any(v == -math.inf for v in values):
        return -math.inf
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        return sum(finite) / len(finite)
    return math.inf if values else math.nan


def test_run_as_grid_places_every_round_at_its_compensation_chip_and_t(run_with_edge_rounds):
    raw = raw_rounds(run_with_edge_rounds)
    grid = analysis.run_as_grid(analysis.open_run(run_with_edge_rounds))
    assert grid["accuracy"].dims == ("drift_compensation", "chip", "t", "rep")
    assert grid["drift_compensation"].values.tolist() == ["none", "global"]  # the run's order
    assert grid.sizes == {"drift_compensation": 2, "chip": 2, "t": 2, "rep": 1, "layer": 5}
    for r in range(len(raw["chip"])):
        where = dict(drift_compensation=raw["comp"][r], chip=raw["chip"][r], t=raw["t"][r], rep=0)
        assert float(grid["accuracy"].sel(where)) == raw["accuracy"][r]
        for name in raw["layers"]:
            for metric in analysis.METRICS:
                assert float(grid[metric].sel({**where, "layer": name})) == raw[(metric, name)][r]


def test_snr_over_t_is_the_documented_db_mean_per_compensation(run_with_edge_rounds):
    """Keeping +inf (conv: +inf), dropping -inf (pool: a finite value), averaging in linear power,
    or over t as well, each fails here."""
    raw = raw_rounds(run_with_edge_rounds)
    snr = analysis.snr_over_t(analysis.open_run(run_with_edge_rounds))
    assert snr.dims == ("layer", "drift_compensation", "t")
    checked = 0
    for name in raw["layers"]:
        for comp in ("none", "global"):
            for t in (0.0, 3600.0):
                rounds = (raw["comp"] == comp) & (raw["t"] == t)
                expected = expected_snr(raw[("snr_db", name)][rounds].tolist())
                got = float(snr.sel(layer=name, drift_compensation=comp, t=t))
                assert got == pytest.approx(expected, rel=1e-12), (name, comp, t)
                checked += 1
    assert checked == 20
    assert float(snr.sel(layer="pool", drift_compensation="global", t=3600.0)) == -math.inf  # round 5: lost
    assert float(snr.sel(layer="mix", drift_compensation="none", t=0.0)) == math.inf  # every round exact
    conv = raw[("snr_db", "conv")]
    assert float(snr.sel(layer="conv", drift_compensation="none", t=0.0)) == conv[2]  # round 0 exact, round 2 not


def test_snr_over_t_of_a_sweep_over_compensations_equals_the_runs(run_with_edge_rounds, tmp_path):
    """open_sweep's [p, layer, drift_compensation, chip, t, rep] reduces as the run does."""
    import json

    from aimcemu import results

    folder = tmp_path / "sweep"
    (folder / "tasks").mkdir(parents=True)
    with h5py.File(run_with_edge_rounds) as f:
        config = json.loads(f.attrs["config"])
    tasks = []
    for i in range(2):
        shutil.copyfile(run_with_edge_rounds, folder / f"tasks/{i}.h5")
        tasks.append({"id": str(i), "file": f"tasks/{i}.h5", "point": {"p": i}, "run": {}})
    (folder / results.INDEX_FILE).write_text(json.dumps(
        {"format": results.FORMAT, "format_version": results.FORMAT_VERSION, "config": config,
         "axes": {"p": [0, 1]}, "tasks": tasks}))
    of_run = analysis.snr_over_t(analysis.open_run(run_with_edge_rounds))
    for lazy in (False, True):
        of_sweep = analysis.snr_over_t(analysis.open_sweep(folder, lazy=lazy))
        for p in (0, 1):
            np.testing.assert_array_equal(of_sweep.sel(p=p).transpose(*of_run.dims).values, of_run.values)


def test_snr_heatmap_cells_tell_exact_lost_and_missing_apart():
    """The heatmap labelled NaN "exact", and snr_over_t gave NaN for a layer whose rounds were all
    -inf (the signal lost)."""
    from aimcemu.report import snr_cell_text

    assert [snr_cell_text(v) for v in (12.345, math.inf, -math.inf, math.nan)] == ["12.3", "exact", "lost", "n/a"]


# --- accuracy_vs_t ------------------------------------------------------------------------------
def grid_of(per_chip: list[list[float]]) -> xr.Dataset:
    """accuracy[chip, t, rep] (one rep) from per-chip values per t."""
    acc = np.asarray(per_chip, dtype=np.float64)[:, :, None]
    return xr.Dataset({"accuracy": (("chip", "t", "rep"), acc)},
                      coords={"chip": np.arange(acc.shape[0]), "t": np.arange(acc.shape[1]) * 3600.0, "rep": [0]})


def test_the_accuracy_interval_is_student_t_clipped_to_0_1():
    """2 chips at 0.27 and 0.48 (the report printed [-0.9813, 1.7294]), 3 chips near 1 (upper end
    clipped) and 3 chips in the middle (not clipped)."""
    from scipy import stats

    columns = [[0.26740741, 0.99, 0.50], [0.48074074, 1.00, 0.60], [np.nan, 0.995, 0.55]]
    acc = analysis.accuracy_vs_t(grid_of(columns))
    for i in range(3):
        values = np.array([row[i] for row in columns])
        values = values[~np.isnan(values)]
        mean, std, n = values.mean(), values.std(ddof=1), values.size
        half = stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
        assert float(acc["mean"][i]) == pytest.approx(mean, rel=1e-12)
        assert float(acc["std"][i]) == pytest.approx(std, rel=1e-12)
        assert float(acc["ci_low"][i]) == pytest.approx(min(max(mean - half, 0.0), 1.0), rel=1e-12, abs=1e-15)
        assert float(acc["ci_high"][i]) == pytest.approx(min(max(mean + half, 0.0), 1.0), rel=1e-12)
    assert float(acc["ci_low"][0]) == 0.0 and float(acc["ci_high"][0]) == 1.0
    assert float(acc["ci_high"][1]) == 1.0 and 0.0 < float(acc["ci_low"][1]) < float(acc["mean"][1])
    assert 0.0 < float(acc["ci_low"][2]) < float(acc["ci_high"][2]) < 1.0


def test_one_chip_has_no_spread_in_analysis_and_in_the_run_summary():
    """analysis gave NaN while RunSummary (and `aimcemu run`) printed std 0.0000 for the same data."""
    acc = analysis.accuracy_vs_t(grid_of([[0.8, 0.7]]))
    assert int(acc["n"][0]) == 1 and float(acc["mean"][0]) == 0.8
    for name in ("std", "ci_low", "ci_high"):
        assert np.isnan(acc[name].values).all(), name
    summary = RunSummary(path="r.h5", model="m", images=10, accuracy=0.9, round_accuracy=[0.8, 0.7],
                         round_chip=[0, 0], round_t=[0.0, 3600.0], niu_round=[0, 0])
    rows = summary.accuracy_vs_t()
    assert [r["chips"] for r in rows] == [1, 1] and all(math.isnan(r["std"]) for r in rows)
    assert all(line.split()[5] == "n/a" for line in summary.format_accuracy_table().splitlines()[2:])
    interval = analysis.interval_over_chips(np.array([0.8]))
    assert interval["n"] == 1 and math.isnan(interval["std"]) and math.isnan(interval["ci_low"])


def test_run_summary_and_analysis_agree_over_several_chips():
    summary = RunSummary(path="r.h5", model="m", images=10, accuracy=0.9, round_accuracy=[0.8, 0.6, 0.7, 0.9],
                         round_chip=[0, 0, 1, 1], round_t=[0.0, 0.0, 0.0, 0.0], niu_round=[0, 1, 0, 1])
    row = summary.accuracy_vs_t()[0]
    acc = analysis.accuracy_vs_t(grid_of([[0.7], [0.8]]))
    assert row["std"] == pytest.approx(float(acc["std"][0]), rel=1e-12)
    assert row["mean"] == pytest.approx(float(acc["mean"][0]), rel=1e-12)
    interval = analysis.interval_over_chips(np.array([0.7, 0.8]))
    assert (interval["ci_low"], interval["ci_high"]) == pytest.approx((float(acc["ci_low"][0]),
                                                                       float(acc["ci_high"][0])), rel=1e-12)


@pytest.mark.parametrize("confidence", [95, 1.0, 0.0, -0.5, True, "0.95"])
def test_a_confidence_that_is_not_a_probability_is_refused(confidence):
    """95 (percent by mistake) gave NaN bounds without a word."""
    with pytest.raises(ValueError, match="confidence must be a probability in \\(0, 1\\)"):
        analysis.accuracy_vs_t(grid_of([[0.8], [0.7]]), confidence=confidence)


def test_accuracy_vs_t_of_a_digital_run_says_so():
    """It raised numpy's "cannot call `vectorize` on size 0 inputs"."""
    path = os.path.join(CORPUS, "digital.h5")
    with pytest.raises(ValueError, match=rf"{path} has no noisy rounds \(a digital run\)"):
        analysis.accuracy_vs_t(analysis.open_run(path))


# --- activation_histograms' rounds ----------------------------------------------------------------
@pytest.mark.parametrize("rounds, what", [([50], "round 50 is not a round of .*noisy.h5 \\(rounds 0..7\\)"),
                                          ([-1], "round -1 is not a round"),
                                          ([0, 0], "rounds \\[0, 0\\] name a round twice"),
                                          ([True], "round True is not a round"),
                                          ([1.0], "round 1.0 is not a round")])
def test_histogram_rounds_must_be_distinct_rounds_of_the_file(rounds, what):
    """[50] gave h5py's IndexError without the file, [-1] the last round, [0, 0] round 0 twice."""
    with pytest.raises(ValueError, match=f"activation_histograms: {what}"):
        analysis.activation_histograms(os.path.join(CORPUS, "noisy.h5"), ["conv"], rounds=rounds)


def test_histograms_of_chosen_rounds_count_them_once():
    path = os.path.join(CORPUS, "noisy.h5")
    hist = analysis.activation_histograms(path, ["conv"], rounds=[6, 1])
    with h5py.File(path) as f:
        noisy = f["layers/conv/activations"][[1, 6]].astype(np.int64)
    np.testing.assert_array_equal(hist["noisy"].sel(layer="conv").values, np.bincount(noisy.ravel() + 128, minlength=256))
    assert hist.attrs["rounds"] == 2
