"""The ONNX importer feeds images in the model's input type, and its calibration's memory is bounded.

- A float16 model (a network exported after `.half()`) could not be calibrated: the importer fed
  float32 images and onnxruntime refused them, the error blaming `calibration_data`.  Now the
  images go in the input's type; the check is an equality: a float16 network whose every value
  float16 holds exactly (integer weights, inputs and sums below 2048) imports to the very network
  its float32 twin imports to.
- Input types the importer cannot feed (integers, bfloat16) are refused naming the input, and
  images beyond float16's range naming calibration_data, before onnxruntime runs.
- Calibration's peak memory: batches are cut to MAX_RUN_BYTES of values, and the range statistics
  no longer convert each whole value to float64, nor keeps onnxruntime an arena (ResNet-50 peaked at
  2.9 GB for 1 GiB batches, now 1.2 GB): a calibration grows the process by less than 2.5 times
  the values of its largest run.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from aimcemu import _core, onnx_import  # noqa: E402
from aimcemu.onnx_import import convert_onnx  # noqa: E402


def conv_net(path: Path, elem_type: int, dtype, chw=(3, 6, 6), seed: int = 3) -> Path:
    """x -> conv 3x3 (8 channels, pad 1) -> Relu -> conv 1x1 (4 channels): integer weights in -2..2
    and biases in -4..4, stored as `dtype`, the graph's values typed `elem_type`."""
    rng = np.random.default_rng(seed)
    w1 = rng.integers(-2, 3, (8, chw[0], 3, 3)).astype(dtype)
    b1 = rng.integers(-4, 5, 8).astype(dtype)
    w2 = rng.integers(-2, 3, (4, 8, 1, 1)).astype(dtype)
    b2 = rng.integers(-4, 5, 4).astype(dtype)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    inits = [numpy_helper.from_array(v, k) for k, v in {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem_type, ["N", *chw])],
                              [helper.make_tensor_value_info("y", elem_type, ["N", 4, *chw[1:]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def integer_images(count: int = 16, chw=(3, 6, 6)) -> np.ndarray:
    """Images of integers in -2..2: every sum of the network above is an integer of magnitude
    below 2048 (27 * 2 * 2 + 4 = 112 after conv1, 8 * 112 * 2 + 4 = 1796 after conv2), which
    float16 holds exactly."""
    return np.random.default_rng(9).integers(-2, 3, (count, *chw)).astype(np.float32)


def test_a_float16_model_imports_to_its_float32_twin(tmp_path):
    images = integer_images()
    half = convert_onnx(conv_net(tmp_path / "half.onnx", TensorProto.FLOAT16, np.float16), images)
    full = convert_onnx(conv_net(tmp_path / "full.onnx", TensorProto.FLOAT, np.float32), images)
    assert half.frac_bits == full.frac_bits and half.input_frac_bits == full.input_frac_bits
    assert half.weight_frac_bits == full.weight_frac_bits
    for h, f in zip(half.network.layers, full.network.layers, strict=True):
        np.testing.assert_array_equal(h.weights, f.weights)
        np.testing.assert_array_equal(h.bias, f.bias)


def test_a_float16_model_without_calibration_data_is_refused_for_its_scales_not_its_type(tmp_path):
    """The shape pass's zero image goes in float16 too: a float model without calibration data is
    refused for the scales it lacks, as a float32 one is."""
    path = conv_net(tmp_path / "half.onnx", TensorProto.FLOAT16, np.float16)
    with pytest.raises(_core.FormatError, match="needs calibration_data to choose its scales"):
        convert_onnx(path)


@pytest.mark.parametrize("elem_type, name", [(TensorProto.BFLOAT16, "BFLOAT16"), (TensorProto.UINT8, "UINT8"),
                                             (TensorProto.INT32, "INT32")])
def test_an_input_type_without_float_images_is_refused_naming_the_input(tmp_path, elem_type, name):
    path = conv_net(tmp_path / "odd.onnx", TensorProto.FLOAT, np.float32)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.elem_type = elem_type
    path.write_bytes(model.SerializeToString())
    with pytest.raises(_core.FormatError) as refused:
        convert_onnx(path, integer_images())
    message = str(refused.value)
    assert message.startswith(f"{path}: field 'input 'x'': element type {name} is not supported"), message


def test_images_beyond_float16_are_refused_naming_calibration_data_and_the_batch(tmp_path):
    path = conv_net(tmp_path / "half.onnx", TensorProto.FLOAT16, np.float16)
    images = integer_images(40)
    images[35, 0, 0, 0] = 70000.0
    with pytest.raises(_core.FormatError) as refused:
        convert_onnx(path, [images[:20], images[20:]])    # in the second batch
    assert str(refused.value) == (f"{path}: field 'calibration_data': batch 1 (counting from 0) holds 70000, "
                                  "beyond the +-65504 of float16, the model's input type")


# The child's growth of resident memory over a calibration, in bytes: VmHWM (the peak) after it
# less VmRSS before, both read in the child so pytest's own size does not count.
PEAK_GROWTH_SCRIPT = """
import sys
import numpy as np
from aimcemu import onnx_import
def status(key):
    return int(dict(line.split(":", 1) for line in open("/proc/self/status"))[key].split()[0]) * 1024
images = np.random.default_rng(0).standard_normal((int(sys.argv[2]), 1, 512, 512)).astype(np.float32)
onnx_import.convert_onnx(sys.argv[1], images[:1])          # onnxruntime's and NumPy's own first costs
before = status("VmRSS")
onnx_import.convert_onnx(sys.argv[1], images)
per_image = onnx_import._bytes_per_image(onnx_import._load(sys.argv[1]), "x", (1, 512, 512))
largest_run = min(max(1, onnx_import.MAX_RUN_BYTES // per_image), len(images)) * per_image
print(status("VmHWM") - before, largest_run)
"""


def test_calibration_peak_memory_is_bounded_by_the_run_limit(tmp_path):
    """16 images of 1 x 512 x 512 through conv 16 + Relu: 33 channels of 1 MiB of values per image
    (input, conv, Relu), 528 MiB for the set.  Runs of at most MAX_RUN_BYTES of values (7 images,
    231 MiB) grow the process by less than 2.5 times a run (measured: 2.0; with a 1 GiB limit, the
    whole set in one run, 1.05).  With onnxruntime's arena and whole-value float64 statistics the
    set's one run grew it by 3.9 times (2065 MiB): this bound fails on that code."""
    path = wide_net(tmp_path / "wide.onnx")
    result = subprocess.run([sys.executable, "-c", PEAK_GROWTH_SCRIPT, str(path), "16"], capture_output=True,
                            text=True, timeout=300, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
    growth, largest_run = (int(v) for v in result.stdout.split())
    assert largest_run == 7 * 33 * 2 ** 20
    assert growth < 2.5 * largest_run, (f"calibration grew the process by {growth / 2 ** 20:.0f} MiB for runs of "
                                        f"{largest_run / 2 ** 20:.0f} MiB of values")


def wide_net(path: Path) -> Path:
    """x [N, 1, 512, 512] -> conv 3x3 (16 channels) -> Relu."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(16, np.float32), "b")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 512, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 512, 512])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path
