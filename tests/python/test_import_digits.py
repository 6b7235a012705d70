"""Tests of the shipped default model (models/digits/) and of the script that makes it.

The model's INT8 accuracy on its shipped test set is recomputed with the independent NumPy
reference (int8_reference.py) and must be within 1 point of the float accuracy recorded at
training time.  The slow test retrains from scratch and requires the same int8 weights, bit for bit.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import h5py
import numpy as np
import pytest

from aimcemu import _core
from int8_reference import run_network_reference

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "digits" / "model.h5"
TEST_SET = REPO / "models" / "digits" / "test_set.h5"


def load_train_script():
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location("train_digits", REPO / "scripts" / "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shipped():
    net = _core.load_model(str(MODEL))
    data = _core.load_dataset(str(TEST_SET), net)   # also checks shape, frac bits and labels fit
    with h5py.File(TEST_SET, "r") as f:
        attrs = dict(f.attrs)
    return net, data, attrs


def predictions(net, images: np.ndarray) -> np.ndarray:
    logits = run_network_reference(net, images)[net.output_index()]
    return logits.reshape(len(images), -1).argmax(axis=1)


def test_shipped_int8_accuracy_within_one_point_of_float(shipped):
    net, data, attrs = shipped
    accuracy = float(np.mean(predictions(net, data["images"]) == data["labels"]))
    assert abs(accuracy - attrs["float_accuracy"]) <= 0.01
    # The reference is deterministic, so the recorded INT8 accuracy is reproduced exactly.
    assert accuracy == attrs["int8_accuracy"]
    assert accuracy >= 0.95


def test_shipped_test_set_is_the_documented_split(shipped):
    """The shipped images are exactly the script's held-out split, quantized at the model's scale."""
    script = load_train_script()
    from aimcemu.quantize import quantize_images

    net, data, attrs = shipped
    _, x_test, _, y_test = script.load_split()
    assert attrs["source"] == "sklearn.datasets.load_digits" and attrs["split_seed"] == script.SPLIT_SEED
    assert data["input_frac_bits"] == net.input_frac_bits
    np.testing.assert_array_equal(data["images"], quantize_images(x_test, net.input_frac_bits))
    np.testing.assert_array_equal(data["labels"], y_test)


def test_shipped_model_structure(shipped):
    net = shipped[0]
    kinds = [layer.kind.name for layer in net.layers]
    assert kinds == ["conv", "conv", "conv", "max_pool", "conv", "avg_pool", "linear"]
    block_conv2 = net.layers[net.find_layer("block_conv2")]
    assert block_conv2.residual_input == net.find_layer("stem") and block_conv2.relu_after_residual
    assert list(net.class_names) == [str(d) for d in range(10)]
    assert tuple(net.input_shape) == (8, 8, 1)


def test_shipped_model_on_cpp_pu_model(shipped):
    if not hasattr(_core, "run_network"):
        pytest.skip("_core.run_network is not in this build yet (PU functional model not bound)")
    net, data, _ = shipped
    images = data["images"][:64]
    expected = run_network_reference(net, images)
    got = _core.run_network(net, images, backend="fast")
    for layer, mine, ref in zip(net.layers, got, expected):
        np.testing.assert_array_equal(np.asarray(mine).reshape(ref.shape), ref, err_msg=layer.name)


# The shipped weights were trained on an AVX-512 CPU.  Float training is reproducible bit for bit
# only where torch runs the same kernels: on an AVX2-only CPU (AMD Zen 3) a rerun of the script
# gives int8 weights that correlate 0.976-0.999 per layer with the shipped ones (the rounding of
# float sums differs and SGD amplifies it), the same shifts, and 99.56 % INT8 accuracy against
# the shipped 99.78 %.  Training with TRAIN_SEED + 1 instead gives correlations between -0.09 and
# 0.01 and different shifts, so the bounds below tell the script's model from any other.
MIN_WEIGHT_CORRELATION = 0.95
MAX_ACCURACY_DROP = 0.01


@pytest.mark.slow
def test_training_reproduces_shipped_weights(shipped):
    """Retrains (about 15 s on one core) and re-imports: the same layers, fields and scales, and
    per layer int8 weights that correlate >= MIN_WEIGHT_CORRELATION with the shipped ones (bit
    for bit on the CPU family that trained them; see above)."""
    torch = pytest.importorskip("torch")
    script = load_train_script()
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    try:
        x_train, _, y_train, _ = script.load_split()
        model = script.train(x_train, y_train)
        from aimcemu.importer import import_torch

        net = import_torch(model, torch.from_numpy(x_train), name="digits_resnet")
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
    shipped_net, data, _ = shipped
    assert net.input_frac_bits == shipped_net.input_frac_bits
    fields = ["name", "kind", "input", "kernel", "stride", "pad", "out_channels", "bias_shift", "out_shift", "relu",
              "residual_input", "residual_shift", "relu_after_residual", "input_shift", "avg_mult"]
    for mine, ref in zip(net.layers, shipped_net.layers, strict=True):
        for name in fields:
            assert getattr(mine, name) == getattr(ref, name), f"{ref.name}.{name}"
        if np.asarray(ref.weights).size:
            mine_w, ref_w = (np.asarray(w, dtype=np.float64).ravel() for w in (mine.weights, ref.weights))
            correlation = np.corrcoef(mine_w, ref_w)[0, 1]
            assert correlation >= MIN_WEIGHT_CORRELATION, f"{ref.name}: weight correlation {correlation:.4f}"
    accuracy = np.mean(predictions(net, data["images"]) == data["labels"])
    shipped_accuracy = np.mean(predictions(shipped_net, data["images"]) == data["labels"])
    assert accuracy >= shipped_accuracy - MAX_ACCURACY_DROP
