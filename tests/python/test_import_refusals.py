"""ONNX files the importer used to import wrongly without a word, or to crash on: each is now
refused naming the file and the node or field, or imported exactly.

- QDQ saturation the datapath cannot compute: onnxruntime's quantize_static removes a ReLU6
  (Clip 0..6) and leaves a uint8 QuantizeLinear of range 0..6 (it was imported as a ReLU that
  saturates at 7.94); a range ending at 0 (uint8, zero point 255) clamps positives to 0.
- A DequantizeLinear whose scale or zero point differ from its QuantizeLinear's (was an alias).
- A MatMul's bias Add folded although another node reads the MatMul's output ((m + b) + m was
  computed as 2(m + b)).
- Dropout in training mode (was identity); a weight dequantized from int32 (int32 is a bias's type).
- Node names that are not UTF-8, nodes without outputs (AttributeError, IndexError).
- Calibration data that is one number, an .npz archive or a 0-d .npy (TypeError, IndexError, ...).
- A file of a few hundred bytes declaring a large image or batch (the shape pass ran
  onnxruntime on zeros of the declared batch and kept every value: hundreds of MB, or any amount).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: E402

import aimcemu  # noqa: E402
from aimcemu import _core, onnx_import  # noqa: E402
from aimcemu.importer import UnsupportedOperationError, convert_torch  # noqa: E402
from aimcemu.onnx_import import convert_onnx  # noqa: E402
from hostile import assert_refused  # noqa: E402
from test_import_hostile import assert_cli_refused, run_cli  # noqa: E402

RNG = np.random.default_rng(3)
CONV_WEIGHT = (RNG.normal(size=(4, 3, 3, 3)) * 2).astype(np.float32)


def save_graph(path: Path, nodes, inits: dict, in_shape=("N", 3, 6, 6), out_rank: int = 4, opset: int = 13,
               output: str = "y") -> Path:
    """x [in_shape] -> nodes -> `output`, with the given initializers."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [f"d{i}" for i in range(out_rank)])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def images(count: int = 16, chw=(3, 6, 6), seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, *chw)).astype(np.float32)


class _Reader(CalibrationDataReader):
    def __init__(self, data: np.ndarray):
        self.batches = iter([{"x": data}])

    def get_next(self):
        return next(self.batches, None)


def quantize(float_path: Path, path: Path, keep_activations: bool = False) -> Path:
    """onnxruntime's quantize_static (QDQ, uint8 activations, int8 weights) on images whose conv
    outputs reach well beyond 6."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(float_path), str(path), _Reader(images(64)), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        extra_options={"QDQKeepRemovableActivations": keep_activations})
    return path


def conv_then(path: Path, *activation) -> Path:
    """Conv (3 -> 4 channels, 3x3, pad 1) followed by the given node writing 'y'."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c", pads=[1, 1, 1, 1]), *activation]
    inits = {"w": CONV_WEIGHT, "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    return save_graph(path, nodes, inits)


# --- QDQ saturation the datapath cannot compute -------------------------------------------------


def test_relu6_removed_by_quantize_static_is_refused(tmp_path):
    """quantize_static drops Clip(0, 6) and calibrates the conv's QuantizeLinear to 0..6; the PU's
    power-of-two scale would saturate at 7.9375 instead, so 1 in 3 outputs here would exceed 6."""
    float_path = conv_then(tmp_path / "relu6.onnx", helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6"))
    qdq = quantize(float_path, tmp_path / "relu6_qdq.onnx")
    assert "Clip" not in [n.op_type for n in onnx.load(str(qdq)).graph.node]     # what makes it silent
    with pytest.raises(UnsupportedOperationError, match=re.escape("(QuantizeLinear): its range 0..6 (uint8 with "
                                                                   "zero point 0) clamps at 6: a ReLU6")) as info:
        convert_onnx(qdq)
    assert str(qdq) in str(info.value) and "7.9375" in str(info.value)


def test_relu_removed_by_quantize_static_still_imports_as_relu(tmp_path):
    float_path = conv_then(tmp_path / "relu.onnx", helper.make_node("Relu", ["c"], ["y"], name="relu"))
    imported = convert_onnx(quantize(float_path, tmp_path / "relu_qdq.onnx"))
    assert [(layer.kind.name, layer.relu) for layer in imported.network.layers] == [("conv", True)]


def test_relu6_kept_in_the_file_is_refused_as_a_clip(tmp_path):
    """The way around the ambiguity docs/import.md gives: keep the activations in the file."""
    float_path = conv_then(tmp_path / "relu6.onnx", helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6"))
    qdq = quantize(float_path, tmp_path / "relu6_kept.onnx", keep_activations=True)
    with pytest.raises(UnsupportedOperationError, match=re.escape("node 'relu6' (Clip): Clip is not supported")):
        convert_onnx(qdq)


def test_a_relu_whose_range_ends_at_6_imports_when_the_file_keeps_its_relu(tmp_path):
    """Review rev_s13: a plain ReLU whose calibrated maximum is 6.0 looks like a removed ReLU6 when
    quantize_static drops the Relu (refused, the file cannot tell them apart), and was refused also
    with the Relu kept (QDQKeepRemovableActivations gives the Q before it the 0..6 range), the way
    around docs/import.md gives.  With the Relu in the file it imports as a conv with ReLU."""
    data = images(64)
    float_path = conv_then(tmp_path / "relu.onnx", helper.make_node("Relu", ["c"], ["y"], name="relu"))
    top = ort.InferenceSession(str(float_path), providers=["CPUExecutionProvider"]).run(None, {"x": data})[0].max()
    model = onnx.load(str(float_path))
    weight = next(init for init in model.graph.initializer if init.name == "w")
    weight.CopyFrom(numpy_helper.from_array(CONV_WEIGHT * np.float32(6.0 / top), "w"))
    onnx.save(model, str(float_path))
    removed = quantize(float_path, tmp_path / "relu_qdq.onnx")
    with pytest.raises(UnsupportedOperationError, match="QDQKeepRemovableActivations"):
        convert_onnx(removed)
    kept = quantize(float_path, tmp_path / "relu_kept.onnx", keep_activations=True)
    assert "Relu" in [n.op_type for n in onnx.load(str(kept)).graph.node]
    imported = convert_onnx(kept)
    assert [(layer.kind.name, layer.relu) for layer in imported.network.layers] == [("conv", True)]


def q_dq(path: Path, q_zero_point, dq_scale=0.05, dq_zero_point=None) -> Path:
    """Conv -> QuantizeLinear(0.05, q_zero_point) -> DequantizeLinear(dq_scale, dq_zero_point)."""
    dq_zero_point = q_zero_point if dq_zero_point is None else dq_zero_point
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "qs", "qz"], ["cq"], name="q"),
             helper.make_node("DequantizeLinear", ["cq", "ds", "dz"], ["y"], name="dq")]
    inits = {"w": CONV_WEIGHT, "qs": np.array(0.05, np.float32), "qz": q_zero_point,
             "ds": np.array(dq_scale, np.float32), "dz": dq_zero_point}
    return save_graph(path, nodes, inits)


def test_a_range_ending_at_zero_is_refused(tmp_path):
    """uint8 with zero point 255: onnxruntime maps every positive value to 0; the ReLU the importer
    has clamps the other side."""
    path = q_dq(tmp_path / "top0.onnx", np.array(255, np.uint8))
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": images()})[0]
    assert reference.max() == 0 and reference.min() < -1       # what the file computes
    with pytest.raises(UnsupportedOperationError, match=re.escape("node 'q' (QuantizeLinear): its range -12.75..0 "
                                                                   "(uint8 with zero point 255) clamps every positive "
                                                                   "value to 0")):
        convert_onnx(path, images())


@pytest.mark.parametrize("case, dq_scale, dq_zero_point, words", [
    ("scale", 0.1, None, "its scale [0.1] differs from the scale [0.05] of node 'q' (QuantizeLinear)"),
    ("zero point", 0.05, np.array(20, np.int8), "its zero point [20] (int8) differs from the zero point [0] (int8) "
                                                "of node 'q' (QuantizeLinear)"),
])
def test_a_dequantize_unlike_its_quantize_is_refused(tmp_path, case, dq_scale, dq_zero_point, words):
    path = q_dq(tmp_path / "odd.onnx", np.array(0, np.int8), dq_scale, dq_zero_point)
    with pytest.raises(UnsupportedOperationError, match=re.escape(f"node 'dq' (DequantizeLinear): {words}")):
        convert_onnx(path, images())


def test_a_matching_quantize_dequantize_pair_still_imports(tmp_path):
    imported = convert_onnx(q_dq(tmp_path / "pair.onnx", np.array(0, np.int8)), images())
    assert [layer.kind.name for layer in imported.network.layers] == ["conv"]
    assert imported.frac_bits == [4]         # range 0.05 * 128 = 6.4 -> 2^4 (127 / 16 = 7.94)


# --- MatMul bias ------------------------------------------------------------------------------


def matmul_add(path: Path, nodes_after) -> Path:
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="fl"), helper.make_node("MatMul", ["f", "wt"], ["m"], name="mm"),
             *nodes_after]
    inits = {"wt": (RNG.normal(size=(4, 3)) * 0.5).astype(np.float32), "b": np.array([3.0, -3.0, 2.0], np.float32),
             "s": np.array(0.05, np.float32), "z": np.array(0, np.int8)}
    return save_graph(path, nodes, inits, in_shape=("N", 1, 2, 2), out_rank=2)


def test_a_matmul_bias_is_not_folded_when_another_node_reads_the_product(tmp_path):
    """y = (m + b) + m: folding b into the MatMul made both operands m + b, i.e. 2(m + b)."""
    path = matmul_add(tmp_path / "shared.onnx", [helper.make_node("Add", ["m", "b"], ["mb"], name="bias_add"),
                                                 helper.make_node("Add", ["mb", "m"], ["y"], name="sum")])
    with pytest.raises(UnsupportedOperationError, match=re.escape("node 'bias_add' (Add): adding a constant is "
                                                                   "supported only as the bias of a preceding MatMul "
                                                                   "whose output only this Add reads")):
        convert_onnx(path, images(chw=(1, 2, 2)))


def test_a_matmul_bias_through_quantize_dequantize_is_still_folded(tmp_path):
    """MatMul -> Q -> DQ -> Add(b): the Add is the product's only reader (Q and DQ are aliases)."""
    path = matmul_add(tmp_path / "qdq.onnx", [helper.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"], name="q"),
                                              helper.make_node("DequantizeLinear", ["mq", "s", "z"], ["md"], name="dq"),
                                              helper.make_node("Add", ["md", "b"], ["y"], name="bias_add")])
    imported = convert_onnx(path, images(chw=(1, 2, 2)))
    assert [layer.kind.name for layer in imported.network.layers] == ["linear"]
    assert np.any(imported.network.layers[0].bias != 0)


# --- Dropout and int32 weights ----------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False])
def test_dropout_in_training_mode_is_refused(tmp_path, training):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("Dropout", ["c", "ratio", "training"], ["y"], name="drop")]
    path = save_graph(tmp_path / "drop.onnx", nodes, {"w": CONV_WEIGHT, "ratio": np.array(0.5, np.float32),
                                                      "training": np.array(training)})
    if not training:
        assert [layer.kind.name for layer in convert_onnx(path, images()).network.layers] == ["conv"]
        return
    with pytest.raises(UnsupportedOperationError, match=re.escape("node 'drop' (Dropout): training_mode=true (drops "
                                                                   "values at random) is not supported")):
        convert_onnx(path, images())


def test_a_weight_dequantized_from_int32_is_refused(tmp_path):
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="wdq"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    inits = {"wq": np.round(CONV_WEIGHT * 1000).astype(np.int32), "ws": np.array(0.001, np.float32)}
    path = save_graph(tmp_path / "w32.onnx", nodes, inits)
    with pytest.raises(UnsupportedOperationError, match=re.escape("node 'c' (Conv): its weight ('w') is dequantized "
                                                                   "from int32, which is supported only for a bias")):
        convert_onnx(path, images())


# --- names and nodes that crashed the importer --------------------------------------------------


def relu_model(path: Path, extra_nodes=(), name: str = "NAMEX") -> Path:
    return save_graph(path, [helper.make_node("Relu", ["x"], ["y"], name=name), *extra_nodes], {},
                      in_shape=(1, 1, 4, 4))


def test_a_node_name_that_is_not_utf8_is_a_format_error(tmp_path, capsys):
    path = relu_model(tmp_path / "bad.onnx")
    path.write_bytes(path.read_bytes().replace(b"NAMEX", b"NAM\xffX"))
    message = f"{path}: field 'node #0 name': 'NAM\\xffX' is not valid UTF-8"
    with pytest.raises(aimcemu.FormatError, match=re.escape(message)):
        convert_onnx(path, np.zeros((1, 1, 4, 4), np.float32))
    assert_refused(["import", path, "-o", tmp_path / "out.h5", "--input-shape", "1,4,4"], tmp_path, capsys, message)


def test_a_node_without_outputs_is_a_format_error(tmp_path, capsys):
    path = relu_model(tmp_path / "nooutput.onnx", [helper.make_node("Identity", ["x"], [])], name="")
    message = f"{path}: field 'node #1 (Identity)': the node has no outputs"
    with pytest.raises(aimcemu.FormatError, match=re.escape(message)):
        convert_onnx(path, np.zeros((1, 1, 4, 4), np.float32))
    assert_refused(["import", path, "-o", tmp_path / "out.h5"], tmp_path, capsys, message)


# --- calibration data -------------------------------------------------------------------------------


@pytest.fixture
def conv_relu(tmp_path) -> Path:
    return conv_then(tmp_path / "m.onnx", helper.make_node("Relu", ["c"], ["y"], name="relu"))


def test_cli_refuses_an_npz_and_a_0d_calibration_file(conv_relu, tmp_path, capsys):
    np.savez(tmp_path / "cal.npz", a=images())
    np.save(tmp_path / "scalar.npy", np.float32(1.0))
    out = tmp_path / "out" / "m.h5"
    assert_refused(["import", conv_relu, "-o", out, "--calibration", tmp_path / "cal.npz"], tmp_path, capsys,
                   f"--calibration: field 'calibration': {tmp_path / 'cal.npz'}: an .npz archive; expected a .npy array")
    assert_refused(["import", conv_relu, "-o", out, "--calibration", tmp_path / "scalar.npy"], tmp_path, capsys,
                   f"--calibration: field 'calibration': {tmp_path / 'scalar.npy'}: holds an array of shape (); expected float images")


@pytest.mark.parametrize("data, words", [
    (np.float32(1.0), "expected images [N, C, H, W], got an array of shape ()"),
    (np.array(1.0), "expected images [N, C, H, W], got an array of shape ()"),
    (3.0, "a float is neither images [N, C, H, W] nor an iterable of such batches"),
])
def test_calibration_data_that_is_one_number_is_refused(conv_relu, data, words):
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{conv_relu}: field 'calibration_data': {words}")):
        convert_onnx(conv_relu, data)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"field 'calibration_data': {words}")):
        convert_torch(module, data)


def test_torch_refuses_a_0d_tensor():
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    with pytest.raises(aimcemu.FormatError, match=re.escape("field 'calibration_data': expected images [N, C, H, W], "
                                                            "got an array of shape ()")):
        convert_torch(module, torch.tensor(1.0))


# --- memory of the importer's onnxruntime runs ----------------------------------------------------


def qdq_pool(path: Path, batch, hw: int) -> Path:
    """A QDQ file of a few hundred bytes: x [batch, 1, hw, hw] -> Q -> DQ -> 1x1 MaxPool."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("MaxPool", ["d"], ["y"], name="p", kernel_shape=[1, 1])]
    return save_graph(path, nodes, {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8)},
                      in_shape=(batch, 1, hw, hw))


def test_an_image_whose_values_exceed_the_limit_is_refused_before_any_allocation(tmp_path, monkeypatch):
    """1 x 30000 x 30000: 11.7 GB of values per image, against a machine that can give 4 GiB (the
    limit is what the machine can give now, validate.run_memory_limit): the importer used to run
    onnxruntime on it (and fail on memory, or take it)."""
    from aimcemu import validate

    path = qdq_pool(tmp_path / "big.onnx", 1, 30000)
    assert path.stat().st_size < 300
    monkeypatch.setattr(validate, "run_memory_limit", lambda: (4 * 2 ** 30, "this machine can give it now"))
    with pytest.raises(aimcemu.FormatError) as refused:
        convert_onnx(path)
    assert str(refused.value) == (f"{path}: field 'input x': one image of shape (C, H, W) = (1, 30000, 30000) needs "
                                  "11700000000 bytes of values (every tensor the graph computes from them, all kept "
                                  "to measure them), more than the 4294967296 bytes this machine can give it now")


def test_an_image_beyond_any_machine_is_refused_by_the_command(tmp_path):
    """1 x 65535 x 65535 through the CLI, in a child under a 4 GiB address space: 55.8 GB of values,
    more than the machine can give (the child would die on memory if it tried)."""
    path = qdq_pool(tmp_path / "huge.onnx", 1, 65535)
    result = run_cli(["import", path, "-o", tmp_path / "m.h5"], timeout=120, memory_bytes=4 * 2 ** 30)
    if validate_limit() >= 55_832_870_925:
        pytest.skip("this machine can give 56 GB")
    assert_cli_refused(result, f"{path.name}: field 'input x': one image of shape (C, H, W) = (1, 65535, 65535) "
                               "needs 55832870925 bytes of values")
    assert not (tmp_path / "m.h5").exists()


def validate_limit() -> int:
    from aimcemu import validate

    return validate.run_memory_limit()[0]


def test_large_input_networks_within_the_machine_are_not_refused(tmp_path, monkeypatch):
    """Review rev_s13: a fixed 1 GiB limit refused ResNet-50 at 640 x 640 (1.25 GB per image), which
    the importer had taken.  Only what the machine cannot give is refused."""
    from aimcemu import validate

    path = qdq_pool(tmp_path / "mid.onnx", 1, 10000)   # 1.3 GB of values for its one image
    per_image = onnx_import._bytes_per_image(onnx.load(str(path)), "x", (1, 10000, 10000))
    assert per_image > 2 ** 30
    monkeypatch.setattr(validate, "run_memory_limit", lambda: (per_image, "this machine has"))
    onnx_import._refuse_if_too_large(str(path), None, "one image", per_image)   # exactly what it can give: taken
    with pytest.raises(aimcemu.FormatError, match="more than the"):
        onnx_import._refuse_if_too_large(str(path), type("G", (), {"input": type("I", (), {"name": "x"})})(),
                                         "one image", per_image + 1)


# The child's peak resident memory in bytes: VmHWM, which starts afresh at exec (ru_maxrss would
# carry over the forking pytest's size).
PEAK_RSS_SCRIPT = """
import sys
from aimcemu.onnx_import import convert_onnx
imported = convert_onnx(sys.argv[1])
assert [layer.kind.name for layer in imported.network.layers] == ["max_pool"]
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(int(status["VmHWM"].split()[0]) * 1024)
"""


def test_a_fixed_batch_shape_pass_runs_one_image(tmp_path):
    """batch 4096 x 128 x 128: the shape pass on the file's batch kept 4 values of 268 MB each
    (about 800 MB peak); on one image it stays at the interpreter's own size."""
    path = qdq_pool(tmp_path / "batch.onnx", 4096, 128)
    result = subprocess.run([sys.executable, "-c", PEAK_RSS_SCRIPT, str(path)], capture_output=True, text=True,
                            timeout=300, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
    peak = int(result.stdout.split()[-1])
    assert peak < 268 * 2 ** 20, f"peak RSS {peak / 2 ** 20:.0f} MiB"   # below the file's batch of zeros alone


def test_a_batch_the_graph_needs_is_run_at_that_size(tmp_path):
    """A constant Reshape target holding the file's batch (4): batch 1 fails in onnxruntime, so the
    shape pass falls back to the file's batch, within the limit."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("Reshape", ["d", "shape"], ["f"], name="r"),
             helper.make_node("Gemm", ["f", "w"], ["g"], name="fc", transB=1),
             helper.make_node("QuantizeLinear", ["g", "s", "z"], ["gq"], name="gq"),
             helper.make_node("DequantizeLinear", ["gq", "s", "z"], ["y"], name="gdq")]
    inits = {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8), "shape": np.array([4, 18], np.int64),
             "w": np.full((3, 18), 0.01, np.float32)}
    path = save_graph(tmp_path / "fixed.onnx", nodes, inits, in_shape=(4, 2, 3, 3), out_rank=2)
    imported = convert_onnx(path)
    assert [tuple(layer.out_shape) for layer in imported.network.layers] == [(1, 1, 3)]


def test_calibration_batches_are_cut_to_the_limit(conv_relu, monkeypatch):
    """A limit of 3 images' values: the 16 images run in runs of at most 3, to the same ranges."""
    data = images(16)
    whole = convert_onnx(conv_relu, data)
    per_image = onnx_import._bytes_per_image(onnx.load(str(conv_relu)), "x", (3, 6, 6))
    assert per_image == 4 * (3 + 4 + 4) * 36            # x, the conv's output and the Relu's, float32
    runs = []
    real_cut = onnx_import._cut
    monkeypatch.setattr(onnx_import, "MAX_RUN_BYTES", 3 * per_image + 1)
    monkeypatch.setattr(onnx_import, "_cut", lambda batches, size: (runs.append(len(b)) or b
                                                                     for b in real_cut(batches, size)))
    cut = convert_onnx(conv_relu, data)
    assert runs == [3, 3, 3, 3, 3, 1]
    assert cut.frac_bits == whole.frac_bits and cut.input_frac_bits == whole.input_frac_bits
    np.testing.assert_array_equal(cut.network.layers[0].weights, whole.network.layers[0].weights)


def test_a_dynamic_image_size_shape_pass_takes_input_shape(tmp_path):
    """The one-image shape pass of a QDQ file with dynamic H and W runs on input_shape."""
    path = qdq_pool(tmp_path / "dyn.onnx", "N", 4)
    model = onnx.load(str(path))
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_param = "hw"
    onnx.save(model, str(path))
    imported = convert_onnx(path, input_shape=(1, 5, 7))
    assert tuple(imported.network.layers[0].out_shape) == (5, 7, 1)


def test_a_tensor_without_a_range_is_refused_naming_the_file(tmp_path):
    """A QDQ file that leaves the Gemm's output unquantized, imported without calibration data."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("Flatten", ["d"], ["f"], name="fl"),
             helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1)]
    inits = {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8), "w": np.full((3, 18), 0.01, np.float32)}
    path = save_graph(tmp_path / "norange.onnx", nodes, inits, in_shape=("N", 2, 3, 3), out_rank=2)
    with pytest.raises(UnsupportedOperationError, match=re.escape(f"cannot import {path}, 1 unsupported operation(s):\n"
                                                                   "  fc: tensor 'y' has no QuantizeLinear")):
        convert_onnx(path)
