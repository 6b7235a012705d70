"""Model and data set files from Python: written by the C++ core and read by h5py in the same
process (h5py's wheel bundles its own libhdf5), edited with h5py and read back by the core, and
every bad file raising aimcemu.FormatError whose message names the file and the field."""
from __future__ import annotations

import gc
import os

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile

LAYER_FIELDS = ["name", "kind", "input", "kernel", "stride", "pad", "out_channels", "bias_shift", "out_shift",
                "relu", "residual_input", "residual_shift", "relu_after_residual", "input_shift", "avg_mult"]


def tiny_network():
    """conv 3x3 (pad 1) on 4x4x2 -> max-pool 2x2 -> linear to 3 classes."""
    conv = _core.Layer()
    conv.name, conv.kind, conv.kernel, conv.pad, conv.out_channels = "conv", _core.LayerKind.conv, 3, 1, 2
    conv.weights = (np.arange(36) % 11 - 5).astype(np.int8)
    conv.bias = np.array([3, -3], np.int8)
    conv.out_shift, conv.relu = 3, True
    pool = _core.Layer()
    pool.name, pool.kind, pool.input, pool.kernel, pool.stride = "pool", _core.LayerKind.max_pool, 0, 2, 2
    fc = _core.Layer()
    fc.name, fc.kind, fc.input, fc.out_channels = "fc", _core.LayerKind.linear, 1, 3
    fc.weights = (np.arange(24) % 5 - 2).astype(np.int8)
    fc.bias = np.zeros(3, np.int8)
    fc.out_shift = 1
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = "tiny", _core.Shape3(4, 4, 2), 6
    net.class_names = ["a", "b", "c"]
    net.layers = [conv, pool, fc]
    net.resolve()
    return net


def assert_same_network(a, b):
    assert (a.name, tuple(a.input_shape), a.input_frac_bits, a.output_layer, list(a.class_names)) == \
        (b.name, tuple(b.input_shape), b.input_frac_bits, b.output_layer, list(b.class_names))
    assert len(a.layers) == len(b.layers)
    for x, y in zip(a.layers, b.layers):
        for f in LAYER_FIELDS:
            assert getattr(x, f) == getattr(y, f), (x.name, f)
        np.testing.assert_array_equal(x.weights, y.weights)
        np.testing.assert_array_equal(x.bias, y.bias)
        assert tuple(x.out_shape) == tuple(y.out_shape)


def test_resnet18_round_trip_and_h5py_reads_what_the_core_wrote(tmp_path):
    net = _core.zoo.resnet18(seed=3, image_size=32, num_classes=10)
    path = tmp_path / "r18.h5"
    modelfile.save_model(net, path)
    assert_same_network(net, modelfile.load_model(path))
    layers = net.layers
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "aimcemu-model" and f.attrs["format_version"] == 2
        assert list(f.attrs["input_shape"]) == [32, 32, 3]
        assert list(f["layers"]) == [l.name for l in layers]  # creation order, i.e. network order
        conv1 = layers[0]
        w = f["layers"][conv1.name]["weights"]
        assert w.dtype == np.int8 and w.shape == (64, 7, 7, 3)
        np.testing.assert_array_equal(w[()].reshape(-1), conv1.weights)
        assert f["layers"][conv1.name].attrs["kind"] == "conv"
    assert os.listdir(tmp_path) == ["r18.h5"]


def test_layer_groups_list_in_network_order_in_h5py(tmp_path):
    path = tmp_path / "tiny.h5"
    modelfile.save_model(tiny_network(), path)
    with h5py.File(path, "r") as f:
        assert list(f["layers"].keys()) == ["conv", "pool", "fc"]


def edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def replace(group, name, data):
    if name in group:
        del group[name]
    group.create_dataset(name, data=data)


CORRUPTIONS = {
    "wrong format": ("format", lambda f: f.attrs.__setitem__("format", "not-a-model")),
    "newer version": ("format_version", lambda f: f.attrs.create("format_version", 3, dtype=np.int32)),
    "missing name": ("name", lambda f: f.attrs.__delitem__("name")),
    "missing layer attribute": ("layers/conv/stride_w", lambda f: f["layers/conv"].attrs.__delitem__("stride_w")),
    "float weights": ("layers/conv/weights",
                      lambda f: replace(f["layers/conv"], "weights", np.zeros((2, 3, 3, 2), np.float32))),
    "int16 bias": ("layers/fc/bias", lambda f: replace(f["layers/fc"], "bias", np.zeros(3, np.int16))),
    "wrong rank": ("layers/conv/weights", lambda f: replace(f["layers/conv"], "weights", np.zeros((2, 18), np.int8))),
    "wrong shape": ("layers/fc/weights", lambda f: replace(f["layers/fc"], "weights", np.zeros((4, 6), np.int8))),
    "unknown kind": ("layers/pool/kind", lambda f: f["layers/pool"].attrs.__setitem__("kind", "transformer")),
    "missing bias": ("layers/fc/bias", lambda f: f["layers/fc"].__delitem__("bias")),
    "missing layers": ("layers", lambda f: f.__delitem__("layers")),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_bad_model_files_raise_format_error_naming_file_and_field(tmp_path, case):
    field, fn = CORRUPTIONS[case]
    path = tmp_path / "m.h5"
    modelfile.save_model(tiny_network(), path)
    edit(path, fn)
    with pytest.raises(aimcemu.FormatError) as err:
        modelfile.load_model(path)
    assert str(path) in str(err.value) and f"'{field}'" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_truncated_and_missing_files(tmp_path):
    path = tmp_path / "m.h5"
    modelfile.save_model(_core.zoo.resnet18(image_size=32, num_classes=10), path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 3)
    with pytest.raises(aimcemu.FormatError, match=r"m\.h5: field 'file'.*truncated"):
        modelfile.load_model(path)
    with pytest.raises(aimcemu.FormatError, match="no such file"):
        modelfile.load_model(tmp_path / "absent.h5")


def test_failed_save_leaves_no_file(tmp_path):
    net = tiny_network()
    with pytest.raises(aimcemu.FormatError):
        modelfile.save_model(net, tmp_path / "missing" / "m.h5")
    layers = net.layers
    layers[2].bias = np.zeros(2, np.int8)  # wrong length: rejected before anything is written
    net.layers = layers
    with pytest.raises(aimcemu.FormatError, match="bias"):
        modelfile.save_model(net, tmp_path / "m.h5")
    assert os.listdir(tmp_path) == []


def write_dataset_like_h5py_users(path, images, labels, **attrs):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "aimcemu-dataset"
        f.attrs.create("format_version", 1, dtype=np.int32)
        f.attrs["source"] = "test"
        f.attrs["description"] = "generated"
        for k, v in attrs.items():
            f.attrs[k] = v
        f.create_dataset("images", data=images)
        f.create_dataset("labels", data=labels)


def test_dataset_written_by_h5py_or_core_loads(tmp_path, rng):
    images = rng.integers(-128, 128, size=(5, 4, 4, 2), dtype=np.int8)
    labels = np.array([0, 1, 2, 1, 0], np.int64)
    write_dataset_like_h5py_users(tmp_path / "a.h5", images, labels, input_frac_bits=np.int32(6))
    modelfile.save_dataset(images, labels, tmp_path / "b.h5", source="test", input_frac_bits=6)
    for name in ("a.h5", "b.h5"):
        d = modelfile.load_dataset(tmp_path / name, tiny_network())
        np.testing.assert_array_equal(d["images"], images)
        np.testing.assert_array_equal(d["labels"], labels)
        assert d["input_frac_bits"] == 6 and d["source"] == "test"


def test_loaded_dataset_arrays_are_writable_outlive_their_dict_and_share_nothing(tmp_path, rng):
    images = rng.integers(-128, 128, size=(3, 4, 4, 2), dtype=np.int8)
    labels = np.array([2, 0, 1], np.int64)
    modelfile.save_dataset(images, labels, tmp_path / "d.h5", source="test")
    first = modelfile.load_dataset(tmp_path / "d.h5")
    kept_images, kept_labels = first["images"], first["labels"]
    del first
    gc.collect()
    np.testing.assert_array_equal(kept_images, images)
    np.testing.assert_array_equal(kept_labels, labels)
    assert kept_images.flags.writeable and kept_images.flags.c_contiguous
    kept_images[0, 0, 0, 0] ^= 1
    kept_labels[0] = 0
    again = modelfile.load_dataset(tmp_path / "d.h5")
    np.testing.assert_array_equal(again["images"], images)
    np.testing.assert_array_equal(again["labels"], labels)


@pytest.mark.parametrize("case", ["float images", "labels count", "label too large", "wrong image shape",
                                  "frac bits", "no format"])
def test_bad_dataset_files(tmp_path, rng, case):
    images = rng.integers(-128, 128, size=(5, 4, 4, 2), dtype=np.int8)
    labels = np.array([0, 1, 2, 1, 0], np.int64)
    attrs, field = {}, "images"
    if case == "float images":
        images = images.astype(np.float32)
    elif case == "labels count":
        labels, field = labels[:4], "labels"
    elif case == "label too large":
        labels, field = labels + 1, "labels"
    elif case == "wrong image shape":
        images = images[:, :, :2]
    elif case == "frac bits":
        attrs, field = {"input_frac_bits": np.int32(5)}, "input_frac_bits"
    path = tmp_path / "d.h5"
    write_dataset_like_h5py_users(path, images, labels, **attrs)
    if case == "no format":
        edit(path, lambda f: f.attrs.__delitem__("format"))
        field = "format"
    with pytest.raises(aimcemu.FormatError) as err:
        modelfile.load_dataset(path, tiny_network())
    assert str(path) in str(err.value) and f"field '{field}'" in str(err.value)


def test_embedded_model_and_test_set_load():
    try:
        model_path, data_path = modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    net = modelfile.load_model(model_path)
    data = modelfile.load_dataset(data_path, net)
    assert data["images"].dtype == np.int8 and data["images"].shape[1:] == tuple(net.input_shape)
    assert len(data["labels"]) == len(data["images"]) > 0
