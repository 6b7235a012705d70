"""aimcemu.analysis against independent computations on the raw h5py arrays: run and sweep
views, error statistics, histograms, the Student-t confidence interval and the layer
sensitivity study."""
from __future__ import annotations

import math

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import analysis
from conftest import digits_subset


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The first 40 images of the embedded test set, as a data set file."""
    return str(digits_subset(tmp_path_factory, 40)[1])


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory, small_data):
    """3 chips x 2 t x 2 rounds, every layer's activations stored."""
    out = tmp_path_factory.mktemp("run") / "run.h5"
    return aimcemu.run(data=small_data, output=str(out), mapping="all", noise={"model": "pcm_like"},
                       t=(1.0, 86400.0), chips=3, rounds=2, seed=3, layers="all").path


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory, small_data):
    folder = tmp_path_factory.mktemp("sweep") / "s"
    config = {"output": str(folder), "data": small_data, "noise": {"model": "pcm_like"}, "mapping": "all",
              "t": [1.0, 86400.0], "chips": 3, "seed": 8,
              "grid": {"noise.prog_noise_scale": [0.5, 2.0],
                       "mapping": {"all": "all", "head": {"default": "digital", "layers": {"head": "aimc"}}}}}
    aimcemu.sweep(config, workers=2, progress=False)
    return folder


def test_open_run_matches_the_file(noisy_run):
    ds = analysis.open_run(noisy_run)
    with h5py.File(noisy_run) as f:
        np.testing.assert_array_equal(ds["accuracy"].values, f["accuracy"][()])
        np.testing.assert_array_equal(ds["chip"].values, f["chip"][()])
        np.testing.assert_array_equal(ds["t"].values, f["t"][()])
        assert list(ds["layer"].values) == list(f.attrs["layer_names"])
        for name in f["layers"]:
            for metric in analysis.METRICS:
                np.testing.assert_array_equal(ds[metric].sel(layer=name).values, f["layers"][name][metric][()])
    assert ds.sizes["round"] == 12 and ds.attrs["config"]["chips"] == 3


@pytest.mark.parametrize("chunk", [None, 1000])  # the default, and steps that split every round unevenly
def test_error_stats_and_histograms_equal_numpy(noisy_run, chunk, monkeypatch):
    if chunk:
        monkeypatch.setattr(analysis, "CHUNK_ELEMENTS", chunk)
    err = analysis.error_stats(noisy_run, ["stem", "classifier"])
    hist = analysis.activation_histograms(noisy_run, ["stem", "classifier"], rounds=[0, 5])
    with h5py.File(noisy_run) as f:
        for name in ("stem", "classifier"):
            ref = f["layers"][name]["reference"][()].astype(np.float64)
            noisy = f["layers"][name]["activations"][()].astype(np.float64)
            diff = noisy - ref[None]
            axes = tuple(range(1, diff.ndim))
            np.testing.assert_allclose(err["error_mean"].sel(layer=name).values, diff.mean(axis=axes), rtol=1e-12)
            np.testing.assert_allclose(err["error_std"].sel(layer=name).values, diff.std(axis=axes), rtol=1e-9, atol=1e-12)
            values, counts = np.unique(ref.astype(np.int64), return_counts=True)
            np.testing.assert_array_equal(hist["reference"].sel(layer=name, value=values).values, counts)
            assert hist["reference"].sel(layer=name).sum() == ref.size
            values, counts = np.unique(noisy[[0, 5]].astype(np.int64), return_counts=True)
            np.testing.assert_array_equal(hist["noisy"].sel(layer=name, value=values).values, counts)
            assert hist["noisy"].sel(layer=name).sum() == 2 * ref.size


def test_error_stats_and_histograms_hold_no_wide_copy_of_a_round(noisy_run, monkeypatch):
    # Both converted whole rounds to int64 (error_stats: reference, round, error and its square,
    # about 32 bytes per element; the histograms 16): a ResNet-50 run's stem round of 64 images
    # (51 MB of int8) took 1.6 GB.  Now: the int8 reference and round plus fixed-size chunks.
    import tracemalloc

    monkeypatch.setattr(analysis, "CHUNK_ELEMENTS", 1024)
    with h5py.File(noisy_run) as f:
        round_bytes = f["layers"]["stem"]["reference"].nbytes  # int8: one byte per element
    assert round_bytes >= 40_000, "too small a layer to tell a chunked pass from a whole-round one"
    for view in (lambda: analysis.error_stats(noisy_run, ["stem"]),
                 lambda: analysis.activation_histograms(noisy_run, ["stem"])):
        view()  # imports and caches outside the measurement
        tracemalloc.start()
        try:
            view()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * round_bytes + 64 * 1024, (peak, round_bytes)


def test_layers_without_stored_activations_are_refused(tmp_path, small_data):
    path = aimcemu.run(data=small_data, output=str(tmp_path / "r.h5"), mapping="all", t=(1.0,), layers="none").path
    with pytest.raises(ValueError, match="no stored activations"):
        analysis.error_stats(path, ["stem"])
    with pytest.raises(KeyError, match="not a layer"):
        analysis.activation_histograms(path, ["nope"])


def test_accuracy_vs_t_is_the_student_t_interval_over_chips(noisy_run):
    acc = analysis.accuracy_vs_t(analysis.open_run(noisy_run))
    with h5py.File(noisy_run) as f:
        accuracy, chip, t = f["accuracy"][()], f["chip"][()], f["t"][()]
    # 3 chips, 2 degrees of freedom, where the t quantile has a closed form:
    # F(x) = 1/2 + x / (2 sqrt(2 + x^2))  =>  x_p = a sqrt(2 / (1 - a^2)), a = 2p - 1
    quantile = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))
    assert analysis.student_t_quantile(0.975, 2) == pytest.approx(quantile, rel=1e-12)
    for i, time in enumerate(sorted(set(t))):
        per_chip = np.array([accuracy[(chip == c) & (t == time)].mean() for c in range(3)])
        mean, std = per_chip.mean(), per_chip.std(ddof=1)
        half = quantile * std / math.sqrt(3)
        assert acc["mean"].values[i] == pytest.approx(mean, rel=1e-12)
        assert acc["ci_low"].values[i] == pytest.approx(mean - half, rel=1e-12, abs=1e-15)
        assert acc["ci_high"].values[i] == pytest.approx(mean + half, rel=1e-12)
        assert int(acc["n"].values[i]) == 3


def test_open_sweep_places_every_round_at_its_grid_point(small_sweep):
    ds = analysis.open_sweep(small_sweep, lazy=False)
    assert dict(ds["snr_db"].sizes) == {"noise.prog_noise_scale": 2, "mapping": 2, "layer": 7, "chip": 3, "t": 2, "rep": 1}
    assert list(ds["noise.prog_noise_scale"].values) == [0.5, 2.0]
    for scale in (0.5, 2.0):
        for mapping in ("all", "head"):
            point = {"noise.prog_noise_scale": scale, "mapping": mapping}
            with h5py.File(small_sweep / str(ds["file"].sel(point).item())) as f:
                for r, (c, t) in enumerate(zip(f["chip"][()], f["t"][()])):
                    assert ds["accuracy"].sel(point).sel(chip=c, t=t, rep=0).item() == f["accuracy"][r]
                    assert ds["snr_db"].sel(point).sel(layer="head", chip=c, t=t, rep=0).item() == \
                        f["layers/head/snr_db"][r]
    # a layer left digital keeps the reference exactly: infinite SNR at every round
    assert np.isinf(ds["snr_db"].sel(mapping="head", layer="stem").values).all()
    lazy = analysis.open_sweep(small_sweep, lazy=True)
    assert lazy["snr_db"].chunks is not None
    for opened in (ds, lazy):   # the unit the task files carry, as open_run gives it
        assert opened["snr_db"].attrs["units"] == "dB" and opened["t"].attrs["units"] == "s"
    for name in ("accuracy", "snr_db", "cosine", "mismatch_rate", "reference_accuracy"):
        np.testing.assert_array_equal(lazy[name].values, ds[name].values)


def test_an_unfinished_sweep_opens_with_nan_for_missing_tasks(small_sweep, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(small_sweep, copy)
    ds = analysis.open_sweep(copy, lazy=False)
    missing = ds["file"].sel({"noise.prog_noise_scale": 2.0, "mapping": "head"}).item()
    (copy / missing).unlink()
    ds = analysis.open_sweep(copy)
    assert not ds["done"].sel({"noise.prog_noise_scale": 2.0, "mapping": "head"})
    assert np.isnan(ds["accuracy"].sel({"noise.prog_noise_scale": 2.0, "mapping": "head"}).values).all()
    assert int(ds["done"].sum()) == 3
    acc = analysis.accuracy_vs_t(ds)
    assert int(acc["n"].sel({"noise.prog_noise_scale": 2.0, "mapping": "head"}).max()) == 0


def test_layer_sensitivity_ranks_layers_by_accuracy_drop(tmp_path, small_data):
    table = analysis.layer_sensitivity(data=small_data, noise={"model": "pcm_like", "prog_noise_scale": 3.0},
                                       t=[86400.0], chips=2, drift_compensation="none", output=tmp_path / "sens",
                                       layers=["stem", "head", "classifier"], workers=2, progress=False)
    assert sorted(table["layer"]) == ["classifier", "head", "stem"]
    assert list(table["accuracy_drop"]) == sorted(table["accuracy_drop"], reverse=True)
    ds = analysis.open_sweep(tmp_path / "sens")
    for row in table.itertuples():
        per_chip = ds["accuracy"].sel(mapping=row.layer).mean(("t", "rep")).values
        assert row.accuracy == pytest.approx(per_chip.mean(), rel=1e-12)
        assert row.accuracy_drop == pytest.approx(row.reference_accuracy - per_chip.mean(), rel=1e-12, abs=1e-15)
        assert row.ci_low <= row.accuracy <= row.ci_high
        assert np.isfinite(row.own_snr_db)
    assert analysis.rank_layers(table) == list(table["layer"])
    with pytest.raises(ValueError, match="not a conv or linear layer"):
        analysis.layer_sensitivity(data=small_data, layers=["max_pool"], output=tmp_path / "x")
