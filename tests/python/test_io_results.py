"""Results files written by the C++ writer and opened by h5py and xarray (engine="h5netcdf") in
the same process: named dimensions on every axis, coordinates, values, and metrics against their
closed forms computed here in NumPy."""
from __future__ import annotations

import json
import math
import os
import re

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

ROUNDS = [(0, 1, 1.0), (1, 1, 3600.0), (2, 2, 1.0)]  # (round, chip, t)


@pytest.fixture(scope="module")
def net():
    return _core.zoo.resnet18(seed=5, image_size=16, num_classes=10)


def synthetic(net, rng, images=4, rounds=len(ROUNDS)):
    """Reference activations per layer, and per round a copy with a few elements perturbed."""
    reference = [rng.integers(-128, 128, size=(images, *tuple(l.out_shape)), dtype=np.int8) for l in net.layers]
    noisy = []
    for r in range(rounds):
        per_layer = []
        for ref in reference:
            a = ref.copy()
            flat = a.reshape(-1)
            idx = rng.choice(flat.size, size=max(1, flat.size // (5 + r)), replace=False)
            flat[idx] = np.clip(flat[idx].astype(np.int16) + rng.integers(-3, 4, size=idx.size), -128, 127)
            per_layer.append(a)
        noisy.append(per_layer)
    return reference, noisy


def write(path, net, labels, reference, noisy, rounds=ROUNDS, layers="all", config=None):
    w = _core.ResultsWriter(os.fspath(path), net, labels, rounds[:len(noisy)], json.dumps(config or {"seed": 1}),
                            layers, 2)
    for i, a in enumerate(reference):
        w.set_reference(i, a)
    for r, per_layer in enumerate(noisy):
        for i, a in enumerate(per_layer):
            w.set_round(r, net.layers[i].name if i % 2 else i, a)  # by name or by index
    w.commit()
    return w


def closed_forms(noisy, ref):
    n, r = noisy.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    err = np.sum((n - r) ** 2)
    snr = math.inf if err == 0 else 10 * math.log10(np.sum(r * r) / err)
    cos = np.sum(r * n) / math.sqrt(np.sum(r * r) * np.sum(n * n))
    return snr, cos, np.mean(n != r)


def test_h5py_reads_values_and_metrics(tmp_path, net, rng):
    labels = np.array([1, 2, 3, 4])
    reference, noisy = synthetic(net, rng)
    w = write(tmp_path / "r.h5", net, labels, reference, noisy)
    layers = net.layers
    with h5py.File(tmp_path / "r.h5", "r") as f:
        assert f.attrs["format"] == "aimcemu-results" and f.attrs["model"] == net.name
        assert json.loads(f.attrs["config"]) == {"seed": 1}
        assert list(f["layers"]) == [l.name for l in layers]
        np.testing.assert_array_equal(f["chip"][()], [1, 1, 2])
        np.testing.assert_array_equal(f["t"][()], [1.0, 3600.0, 1.0])
        for i, layer in enumerate(layers):
            g = f["layers"][layer.name]
            np.testing.assert_array_equal(g["reference"][()], reference[i])
            np.testing.assert_array_equal(g["activations"][()], np.stack([n[i] for n in noisy]))
            assert "scale_factor" not in g.attrs
            assert g.attrs["out_shift"] == layer.out_shift
            for r in range(len(noisy)):
                snr, cos, mis = closed_forms(noisy[r][i], reference[i])
                assert g["snr_db"][r] == pytest.approx(snr, rel=1e-12)
                assert g["cosine"][r] == pytest.approx(cos, rel=1e-12)
                assert g["mismatch_rate"][r] == pytest.approx(mis, rel=1e-12)
        out = [n[-1].reshape(4, -1) for n in noisy]
        np.testing.assert_array_equal(f["predictions"][()], np.stack([o.argmax(axis=1) for o in out]))
        np.testing.assert_allclose(f["accuracy"][()], [np.mean(o.argmax(axis=1) == labels) for o in out])
        assert f["reference_accuracy"][()] == np.mean(reference[-1].reshape(4, -1).argmax(axis=1) == labels)
    assert w.round_accuracy == pytest.approx(list(np.mean([o.argmax(axis=1) == labels for o in out], axis=1)))


def test_xarray_opens_every_group_with_named_dimensions(tmp_path, net, rng):
    reference, noisy = synthetic(net, rng)
    write(tmp_path / "r.h5", net, np.arange(4), reference, noisy)
    root = xr.open_dataset(tmp_path / "r.h5", engine="h5netcdf")
    assert root["logits"].dims == ("round", "image", "class")
    assert root["accuracy"].dims == ("round",)
    assert set(root.coords) >= {"round", "chip", "t", "image", "class"}
    root.close()
    layers = net.layers
    for i in (0, len(layers) // 2, len(layers) - 1):  # each open costs ~0.2 s in h5netcdf
        layer = layers[i]
        ds = xr.open_dataset(tmp_path / "r.h5", group=f"layers/{layer.name}", engine="h5netcdf")
        assert ds["activations"].dims == ("round", "image", "y", "x", "channel")
        assert ds["reference"].dims == ("image", "y", "x", "channel")
        assert ds["snr_db"].dims == ("round",)
        assert ds.sizes["channel"] == layer.out_shape.c and ds.sizes["y"] == layer.out_shape.h
        assert ds["activations"].dtype == np.int8  # no CF decoding turned it into floats
        np.testing.assert_array_equal(ds["activations"].sel(round=1).values, noisy[1][i])
        np.testing.assert_array_equal(ds["t"].values, [1.0, 3600.0, 1.0])
        ds.close()


def test_digital_run_has_zero_rounds_and_still_opens_in_xarray(tmp_path, net, rng):
    reference, _ = synthetic(net, rng, rounds=0)
    w = write(tmp_path / "r.h5", net, np.arange(4), reference, [])
    assert w.round_accuracy == []
    ds = xr.open_dataset(tmp_path / "r.h5", group=f"layers/{net.layers[0].name}", engine="h5netcdf")
    assert ds.sizes["round"] == 0 and ds["reference"].shape == (4, *tuple(net.layers[0].out_shape))
    ds.close()


def test_layer_selection_stores_only_named_layers(tmp_path, net, rng):
    reference, noisy = synthetic(net, rng, rounds=1)
    names = [l.name for l in net.layers]
    write(tmp_path / "r.h5", net, np.arange(4), reference, noisy, layers=[names[0], names[-1]])
    write(tmp_path / "none.h5", net, np.arange(4), reference, noisy, layers="none")
    with h5py.File(tmp_path / "r.h5", "r") as f, h5py.File(tmp_path / "none.h5", "r") as g:
        for name in names:
            assert ("activations" in f["layers"][name]) == (name in (names[0], names[-1]))
            assert "activations" not in g["layers"][name] and "snr_db" in g["layers"][name]


def test_bad_inputs_raise_and_leave_no_file(tmp_path, net, rng):
    reference, noisy = synthetic(net, rng, rounds=1)
    with pytest.raises(aimcemu.FormatError, match="no layer named 'nope'"):
        write(tmp_path / "a.h5", net, np.arange(4), reference, noisy, layers=["nope"])
    with pytest.raises(aimcemu.FormatError, match="int8"):
        write(tmp_path / "b.h5", net, np.arange(4), [a.astype(np.int16) for a in reference], noisy)
    with pytest.raises(aimcemu.FormatError, match="field 'file'"):
        write(tmp_path / "missing" / "c.h5", net, np.arange(4), reference, noisy)
    with pytest.raises(aimcemu.FormatError, match="never set"):
        w = _core.ResultsWriter(os.fspath(tmp_path / "d.h5"), net, np.arange(4), ROUNDS[:1])
        w.set_reference(0, reference[0])
        w.commit()
    del w
    assert os.listdir(tmp_path) == []


def test_metric_bindings_match_closed_forms(rng):
    ref = rng.integers(-128, 128, size=1000, dtype=np.int8)
    noisy = ref.copy()
    noisy[::10] = np.clip(noisy[::10].astype(np.int16) + 1, -128, 127)
    snr, cos, mis = closed_forms(noisy, ref)
    assert _core.snr_db(noisy, ref) == pytest.approx(snr, rel=1e-12)
    assert _core.cosine_similarity(noisy, ref) == pytest.approx(cos, rel=1e-12)
    assert _core.mismatch_rate(noisy, ref) == pytest.approx(mis, rel=0)
    assert _core.snr_db(ref, ref) == math.inf


# Each value the reader refuses in a file, given to the writer instead (review R, D2): the writer
# refuses it with the reader's message, and the reader refuses a valid file edited to hold it.
REFUSED = {
    "label_above": ([0, 1, 12, 3], (0, 0, 0.0), "labels", "labels", "label 12 outside 0..9"),
    "label_negative": ([0, 1, 2, -1], (0, 0, 0.0), "labels", "labels", "label -1 outside 0..9"),
    "chip": ([0, 1, 2, 3], (0, -1, 0.0), "rounds[0].chip", "chip", "negative chip -1"),
    "niu_round": ([0, 1, 2, 3], (-3, 0, 0.0), "rounds[0].niu_round", "niu_round", "negative NIU round id"),
    "t_negative": ([0, 1, 2, 3], (0, 0, -5.0), "rounds[0].t", "t", "times must be finite and >= 0"),
    "t_nan": ([0, 1, 2, 3], (0, 0, math.nan), "rounds[0].t", "t", "times must be finite and >= 0"),
    "t_inf": ([0, 1, 2, 3], (0, 0, math.inf), "rounds[0].t", "t", "times must be finite and >= 0"),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_writer_refuses_what_the_reader_refuses(tmp_path, net, rng, case):
    labels, bad_round, writer_field, reader_field, message = case
    bad = tmp_path / "bad.h5"
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{bad}: field '{writer_field}': {message}")):
        _core.ResultsWriter(os.fspath(bad), net, np.array(labels), [bad_round])
    assert os.listdir(tmp_path) == []  # nothing written, not even a temporary file

    edited = tmp_path / "edited.h5"
    reference, noisy = synthetic(net, rng, rounds=1)
    write(edited, net, np.arange(4), reference, noisy, rounds=[(0, 0, 0.0)], layers="none")
    with h5py.File(edited, "r+") as f:
        if reader_field == "labels":
            f["labels"][...] = labels
        else:
            f[reader_field][0] = bad_round[("niu_round", "chip", "t").index(reader_field)]
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{edited}: field '{reader_field}': {message}")):
        _core.read_results(os.fspath(edited))


def test_snr_db_carries_its_unit_in_the_file(tmp_path, net, rng):
    # Raw readers (h5py, xarray on a layer group) see the unit too, not only open_run (review R, D5).
    reference, noisy = synthetic(net, rng, rounds=1)
    write(tmp_path / "r.h5", net, np.arange(4), reference, noisy, layers="none")
    with h5py.File(tmp_path / "r.h5", "r") as f:
        for layer in net.layers:
            g = f["layers"][layer.name]
            assert g["snr_db"].attrs["units"] == "dB"
            assert "units" not in g["cosine"].attrs and "units" not in g["mismatch_rate"].attrs
    group = xr.open_dataset(tmp_path / "r.h5", group=f"layers/{net.layers[0].name}", engine="h5netcdf")
    assert group["snr_db"].attrs["units"] == "dB"
    group.close()
    from aimcemu.results import open_run

    assert open_run(tmp_path / "r.h5")["snr_db"].attrs == {"units": "dB"}
