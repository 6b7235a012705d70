"""The results writer's per-layer extras used by hybrid runs: a per-round series (drift_alpha)
and string attributes (device, noise_model), read back with h5py and xarray."""
from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core
from hostile import one_linear_layer_network

pytestmark = pytest.mark.skipif(not hasattr(_core.ResultsWriter, "set_layer_series"),
                                reason="this _core's ResultsWriter has no per-layer series")


def tiny_net():
    """One linear layer, 4 inputs -> 3 classes."""
    return one_linear_layer_network("tiny", 3)


def write(path, series=None, attributes=None):
    net = tiny_net()
    rounds = [(0, 0, 0.0), (0, 0, 3600.0), (0, 1, 0.0), (0, 1, 3600.0)]
    writer = _core.ResultsWriter(os.fspath(path), net, np.array([0, 1]), rounds, "{}", "all", 1)
    acts = np.zeros((2, 1, 1, 3), np.int8)
    writer.set_reference(0, acts)
    for name, value in (attributes or {}).items():
        writer.set_layer_attribute("fc", name, value)
    for name, values in (series or {}).items():
        writer.set_layer_series(0, name, values)
    for r in range(len(rounds)):
        writer.set_round(r, 0, acts)
    writer.commit()


def test_series_and_attributes_are_stored_with_round_coordinates(tmp_path):
    path = tmp_path / "out.h5"
    alpha = [1.0, 1.25, 1.0, 1.5]
    write(path, {"drift_alpha": alpha}, {"device": "aimc", "noise_model": "pcm_like"})
    with h5py.File(path, "r") as f:
        g = f["layers/fc"]
        np.testing.assert_array_equal(g["drift_alpha"][()], alpha)
        assert g.attrs["device"] == "aimc" and g.attrs["noise_model"] == "pcm_like"
    import xarray as xr

    ds = xr.open_dataset(path, group="layers/fc", engine="h5netcdf")
    assert ds["drift_alpha"].dims == ("round",)
    np.testing.assert_array_equal(ds["drift_alpha"]["t"].values, [0.0, 3600.0, 0.0, 3600.0])
    np.testing.assert_array_equal(ds["drift_alpha"]["chip"].values, [0, 0, 1, 1])
    ds.close()


@pytest.mark.parametrize("series, attributes, message", [
    ({"drift_alpha": [1.0, 2.0]}, None, r"layers/fc/drift_alpha.*expected 4 values"),
    ({"snr_db": [1.0] * 4}, None, r"layers/fc/snr_db.*not a free dataset name"),
    ({"a/b": [1.0] * 4}, None, r"not a free dataset name"),
    (None, {"kind": "x"}, r"layers/fc@kind.*not a free attribute name"),
])
def test_bad_extras_raise_and_leave_no_file(tmp_path, series, attributes, message):
    with pytest.raises(aimcemu.FormatError, match=message):
        write(tmp_path / "out.h5", series, attributes)
    assert os.listdir(tmp_path) == []
