"""Hostile models and calibration data for the importers (aimcemu.onnx_import, aimcemu.importer,
``aimcemu import``): each gets an error naming the file and the tensor, node or field at fault,
never a hang, a traceback or unbounded memory.

Cases that hung or allocated without bound before run as a subprocess under a timeout (and an
address-space limit); the rest go through the command in this process (tests/python/hostile.py:
exit status 2, the message, no traceback, nothing written).
"""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import aimcemu  # noqa: E402
from aimcemu import _netbuild  # noqa: E402
from aimcemu.onnx_import import convert_onnx  # noqa: E402
from hostile import assert_refused  # noqa: E402

WEIGHT = np.arange(18, dtype=np.float32).reshape(2, 1, 3, 3) / 20 - 0.4


def conv_model(weight=WEIGHT, batch="N", nodes_before=(), extra_inits=(), weight_name="W", op="Relu"):
    """x [batch, 1, 8, 8] -> Conv(W) -> Relu (or op), opset 13."""
    inits = ([numpy_helper.from_array(weight, "W")] if weight is not None else []) + list(extra_inits)
    nodes = [*nodes_before, helper.make_node("Conv", ["x", weight_name], ["y"], name="conv"),
             helper.make_node(op, ["y"], ["z"], name="act")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "c", "h", "w"])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def save(model, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def images(count: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (count, 1, 8, 8)).astype(np.float32)


def run_cli(args: list, timeout: float, memory_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`aimcemu ARGS` in a child process (a hang fails the test at `timeout`, not the suite)."""
    def limit():
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return subprocess.run([sys.executable, "-m", "aimcemu", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=os.environ.copy())


def assert_cli_refused(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


# --- 1. calibration values and parameters that are not finite -----------------------------------


def test_inf_in_a_later_calibration_batch_is_refused_not_a_hang(tmp_path):
    model = save(conv_model(), tmp_path / "m.onnx")
    data = images(65)                  # two batches of the importer's 64
    data[64, 0, 0, 0] = np.inf
    np.save(tmp_path / "cal.npy", data)
    result = run_cli(["import", model, "-o", tmp_path / "m.h5", "--calibration", tmp_path / "cal.npy"], timeout=120)
    assert_cli_refused(result, "m.onnx: field 'calibration_data': calibration produced Inf at batch 1")
    assert not (tmp_path / "m.h5").exists()


@pytest.mark.parametrize("first", [np.nan, np.inf, -np.inf])
def test_range_statistics_refuse_non_finite_values(first):
    stats = _netbuild.RangeStatistics("model.onnx")
    with pytest.raises(aimcemu.FormatError, match=r"model.onnx: field 'conv': calibration produced (NaN|Inf) at batch 0"):
        stats.update("y", np.array([[0.5, first]]), "conv")
    stats = _netbuild.RangeStatistics("model.onnx")
    stats.update("y", np.array([[0.5, -0.25]]))
    with pytest.raises(aimcemu.FormatError, match="at batch 1"):
        stats.update("y", np.array([[0.5, first]]))


def test_range_statistics_take_the_largest_finite_values():
    stats = _netbuild.RangeStatistics()
    stats.update("y", np.array([1.0, -np.finfo(np.float64).max]))
    stats.update("y", np.array([3.0]))
    assert stats.max_abs("y") == np.finfo(np.float64).max
    assert stats.percentile("y", 50.0) <= np.finfo(np.float64).max


def test_nan_produced_inside_the_model_names_the_node(tmp_path):
    huge = np.full((2, 1, 3, 3), 3e38, np.float32)       # finite, but its products overflow float32
    with pytest.raises(aimcemu.FormatError, match=r"field 'conv \(output 'y'\)': calibration produced Inf at batch 0"):
        convert_onnx(save(conv_model(huge), tmp_path / "m.onnx"), images())


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_onnx_weight_names_the_node(tmp_path, bad):
    weight = WEIGHT.copy()
    weight[1, 0, 2, 2] = bad
    with pytest.raises(aimcemu.FormatError, match=r"m.onnx: field 'conv': weight holds NaN or Inf"):
        convert_onnx(save(conv_model(weight), tmp_path / "m.onnx"), images())


def test_batchnorm_variance_must_keep_var_plus_eps_positive():
    node = _netbuild.Node("y", "layer1.bn", "bn", bn=_netbuild.BatchNorm(np.ones(2), np.zeros(2), np.zeros(2),
                                                                         np.array([1.0, -1.0]), 1e-5))
    with pytest.raises(aimcemu.FormatError, match=r"src: field 'layer1.bn': BatchNorm var \+ epsilon must be > 0"):
        _netbuild.check_parameters([node], "src")
    node.bn.var = np.array([1.0, np.nan])
    with pytest.raises(aimcemu.FormatError, match="BatchNorm var holds NaN or Inf"):
        _netbuild.check_parameters([node], "src")


def test_torch_import_refuses_non_finite_parameters_and_data():
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.ReLU()).eval()
    data = torch.rand(4, 1, 8, 8)
    data[3, 0, 0, 0] = float("nan")
    with pytest.raises(aimcemu.FormatError, match=r"field 'calibration_data': calibration produced NaN at batch 0") as info:
        import_torch(model, data)
    assert "While executing" not in str(info.value)      # one line, without torch.fx's node dump
    with torch.no_grad():
        model[1].running_var[0] = -1.0
    with pytest.raises(aimcemu.FormatError, match=r"field '1': BatchNorm var \+ epsilon must be > 0"):
        import_torch(model, torch.rand(4, 1, 8, 8))


def test_torch_calibration_batches_of_different_sizes_are_refused():
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    with pytest.raises(aimcemu.FormatError, match=r"<import_torch:[^>]*>: field 'calibration_data': batch 1 \(counting from 0\) holds images of shape "
                                         r"\(1, 30, 30\), batch 0 of \(1, 8, 8\)"):
        import_torch(model, [torch.rand(4, 1, 8, 8), torch.rand(1, 1, 30, 30)])


# --- 2. external data ------------------------------------------------------------------------


def external_model(folder: Path, location: str, offset=None, length=None) -> Path:
    model = conv_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
    return save(model, folder / "m.onnx")


@pytest.fixture
def external_folder(tmp_path):
    """model/ with the weights in w.bin (after 8 bytes of padding); outside/ beside it."""
    folder, outside = tmp_path / "model", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "w.bin").write_bytes(b"padding!" + WEIGHT.tobytes())
    (outside / "secret.bin").write_bytes(WEIGHT.tobytes())
    return folder


def test_external_data_inside_the_folder_is_read(external_folder):
    inline = convert_onnx(save(conv_model(), external_folder / "inline.onnx"), images())
    (external_folder / "sub").mkdir()
    os.symlink("../w.bin", external_folder / "sub" / "link.bin")        # a link that stays inside
    for location in ("w.bin", "sub/../w.bin", "sub/link.bin"):
        imported = convert_onnx(external_model(external_folder, location, offset=8, length=WEIGHT.nbytes), images())
        assert list(imported.network.layers[0].weights) == list(inline.network.layers[0].weights)
        assert imported.frac_bits == inline.frac_bits


def make_location(folder: Path, case: str) -> tuple[str, dict]:
    """The external data location (and offset/length) of one hostile case."""
    if case == "link out":
        os.symlink(folder.parent / "outside" / "secret.bin", folder / "link.bin")
        return "link.bin", {}
    if case == "folder link out":
        os.symlink(folder.parent / "outside", folder / "dirlink")
        return "dirlink/secret.bin", {}
    if case == "link to /dev/zero":
        os.symlink("/dev/zero", folder / "zero")
        return "zero", {}
    if case == "fifo":
        os.mkfifo(folder / "fifo")
        return "fifo", {}
    if case == "folder":
        (folder / "sub").mkdir()
        return "sub", {}
    return {"absolute": ("/dev/zero", {}), "dot-dot": ("../outside/secret.bin", {}), "empty": ("", {}),
            "missing": ("nothere.bin", {}), "short length": ("w.bin", {"length": 8}),
            "past the end": ("w.bin", {"offset": 9}), "huge offset": ("w.bin", {"offset": 2 ** 70}),
            "negative offset": ("w.bin", {"offset": -5})}[case]


EXTERNAL_CASES = {
    "link out": "location 'link.bin' points outside the model's folder",
    "folder link out": "location 'dirlink/secret.bin' points outside the model's folder",
    "link to /dev/zero": "location 'zero' points outside the model's folder",
    "fifo": "file 'fifo' is not a regular file",
    "folder": "file 'sub' is not a regular file",
    "absolute": "location '/dev/zero' must be a path relative to the model's folder",
    "dot-dot": "location '../outside/secret.bin' points outside the model's folder",
    "empty": "location '' must be a non-empty file name",
    "missing": "file 'nothere.bin' cannot be opened (No such file or directory)",
    "short length": "length 8 is not the 72 bytes of dims [2, 1, 3, 3]",
    "past the end": "offset 9 + length 72 exceeds the size 80 of 'w.bin'",
    "huge offset": f"offset {2 ** 70} + length 72 exceeds",
    "negative offset": "offset -5 must be >= 0",
}


@pytest.mark.parametrize("case", EXTERNAL_CASES)
def test_hostile_external_data_is_refused_naming_the_initializer(external_folder, case, capsys):
    location, where = make_location(external_folder, case)
    model = external_model(external_folder, location, **where)
    # A child process: onnx versions that follow the location read /dev/zero or a FIFO forever.
    result = run_cli(["import", model, "-o", external_folder / "m.h5", "--input-shape", "1,8,8"], timeout=60,
                     memory_bytes=4 * 2 ** 30)
    assert_cli_refused(result, f"m.onnx: field 'initializer 'W'': external data {EXTERNAL_CASES[case]}")


# --- 3. unsupported operations through the command ------------------------------------------------


def test_cli_reports_unsupported_operations_without_a_traceback(tmp_path, capsys):
    model = save(conv_model(op="Sigmoid"), tmp_path / "sig.onnx")
    np.save(tmp_path / "cal.npy", images())
    assert_refused(["import", model, "-o", tmp_path / "out" / "m.h5", "--calibration", tmp_path / "cal.npy"],
                   tmp_path, capsys, "aimcemu import: error: cannot import", "node 'act' (Sigmoid): Sigmoid is not "
                   "supported")


# --- 4. onnxruntime's errors and a fixed batch dimension ------------------------------------------


def test_onnxruntime_errors_name_the_model(tmp_path, capsys):
    wrong_channels = np.zeros((2, 3, 3, 3), np.float32)     # the image has 1 channel
    model = save(conv_model(wrong_channels), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", images())
    err = assert_refused(["import", model, "-o", tmp_path / "out" / "m.h5", "--calibration", tmp_path / "cal.npy"],
                         tmp_path, capsys, "m.onnx: field 'calibration_data': onnxruntime failed on batch 0")
    assert len(err.strip().splitlines()) == 1


def test_fixed_batch_dimension_is_fed_batches_of_that_size(tmp_path):
    data = images(100)
    dynamic = convert_onnx(save(conv_model(batch="N"), tmp_path / "dyn.onnx"), data)
    for batch in (1, 4):
        fixed = convert_onnx(save(conv_model(batch=batch), tmp_path / f"b{batch}.onnx"), data)
        assert list(fixed.network.layers[0].weights) == list(dynamic.network.layers[0].weights)
        assert (fixed.input_frac_bits, fixed.frac_bits) == (dynamic.input_frac_bits, dynamic.frac_bits)
    with pytest.raises(aimcemu.FormatError, match=r"\.onnx: field 'calibration_data': the model fixes its batch size at 3; 1 image\(s\) are "
                                         r"left over"):
        convert_onnx(save(conv_model(batch=3), tmp_path / "b3.onnx"), data)


# --- 5. shape subgraphs that allocate -------------------------------------------------------------


def test_constant_of_shape_memory_bomb_is_refused(tmp_path):
    const = lambda values, name: numpy_helper.from_array(np.asarray(values), name)  # noqa: E731
    inits = [const(np.array([1, 1, 20000, 20000], np.int64), "mul"), const(np.array([0], np.int64), "s0"),
             const(np.array([1], np.int64), "s1"), const(np.array([-1], np.int64), "m1")]
    nodes = [helper.make_node("Shape", ["x"], ["sh"], name="shape"), helper.make_node("Mul", ["sh", "mul"], ["big"], name="mul"),
             helper.make_node("ConstantOfShape", ["big"], ["bomb"], name="bomb"),
             helper.make_node("Shape", ["bomb"], ["sh2"], name="shape2"),
             helper.make_node("Slice", ["sh2", "s0", "s1"], ["n"], name="slice"),
             helper.make_node("Concat", ["n", "m1"], ["target"], name="concat", axis=0)]
    model = conv_model(nodes_before=nodes, extra_inits=inits)
    model.graph.node.append(helper.make_node("Reshape", ["z", "target"], ["flat"], name="reshape"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, ["n", "f"]))
    path = save(model, tmp_path / "bomb.onnx")
    np.save(tmp_path / "cal.npy", images(4))
    # 1.6 GB per image if onnxruntime ran it: a child process with 4 GiB of address space.
    result = run_cli(["import", path, "-o", tmp_path / "m.h5", "--calibration", tmp_path / "cal.npy"], timeout=120,
                     memory_bytes=4 * 2 ** 30)
    assert_cli_refused(result, "node 'bomb' (ConstantOfShape): ConstantOfShape is not supported")


# --- 6. QDQ scales and zero points -----------------------------------------------------------------


def qdq_model(x_scale=0.01, x_zero=np.uint8(128), w_scale=None, axis=0, opset=13):
    """QuantizeLinear/DequantizeLinear on the image, int8 weights with per-channel scales."""
    w_scale = np.full((2,), 0.01, np.float32) if w_scale is None else w_scale
    as_tensor = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    inits = [as_tensor(np.float32(x_scale), "xs"), as_tensor(x_zero, "xz"),
             as_tensor(np.full((2, 1, 3, 3), 10, np.int8), "Wq"), as_tensor(w_scale, "ws")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["Wq", "ws"], ["W"], name="dqw", axis=axis),
             helper.make_node("Conv", ["xd", "W"], ["z"], name="conv")]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "c", "h", "w"])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("kwargs, expected", [
    ({"x_scale": 0.0}, "field 'node 'qx' (QuantizeLinear)': scale must be finite and > 0, got [0.0]"),
    ({"x_scale": -0.5}, "field 'node 'qx' (QuantizeLinear)': scale must be finite and > 0, got [-0.5]"),
    ({"x_scale": np.nan}, "field 'node 'qx' (QuantizeLinear)': scale must be finite and > 0, got [nan]"),
    ({"w_scale": np.array([0.01, np.inf], np.float32)}, "field 'node 'dqw' (DequantizeLinear)': scale must be finite"),
    ({"w_scale": np.full(3, 0.01, np.float32)},
     "'node 'dqw' (DequantizeLinear)': per-axis scale of shape [3] does not match axis 0 of the quantized tensor"),
    ({"axis": 5}, "'node 'dqw' (DequantizeLinear)': per-axis scale of shape [2] does not match axis 5"),
    ({"x_zero": np.int16(0), "opset": 21}, "node 'qx' (QuantizeLinear): int16 quantization is not supported"),
])
def test_bad_qdq_parameters_are_refused_naming_the_node(tmp_path, capsys, kwargs, expected):
    model = save(qdq_model(**kwargs), tmp_path / "q.onnx")
    assert_refused(["import", model, "-o", tmp_path / "out" / "q.h5"], tmp_path, capsys, f"q.onnx", expected)


def test_valid_qdq_model_still_imports(tmp_path):
    imported = convert_onnx(save(qdq_model(), tmp_path / "q.onnx"), images())
    assert imported.weight_frac_bits[0] is not None


# --- 7. the command's inputs, and Cast of a constant ------------------------------------------------


@pytest.mark.parametrize("shape", ["0,8,8", "1,8,70000", "1,-8,8", "1,8"])
def test_input_shape_out_of_range_names_the_field(tmp_path, capsys, shape):
    model = save(conv_model(), tmp_path / "m.onnx")
    assert_refused(["import", model, "-o", tmp_path / "out" / "m.h5", "--input-shape", shape], tmp_path, capsys,
                   "--input-shape: field 'input_shape': expected C,H,W (three integers in 1..65535)")


def test_calibration_file_that_is_no_array_names_the_option(tmp_path, capsys):
    model = save(conv_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object))
    (tmp_path / "text.npy").write_text("not an array\n")
    for name in ("pickled.npy", "text.npy"):
        assert_refused(["import", model, "-o", tmp_path / "out" / "m.h5", "--calibration", tmp_path / name],
                       tmp_path, capsys, f"--calibration: field 'calibration': {tmp_path / name}: not a .npy array")


def test_cast_of_a_constant_weight_follows_its_type(tmp_path):
    casts = [helper.make_node("Cast", ["Wf"], ["Wi"], name="to_int", to=TensorProto.INT32),
             helper.make_node("Cast", ["Wi"], ["W"], name="to_float", to=TensorProto.FLOAT)]
    weight = np.full((2, 1, 3, 3), 1.7, np.float32)
    model = conv_model(None, nodes_before=casts, extra_inits=[numpy_helper.from_array(weight, "Wf")])
    imported = convert_onnx(save(model, tmp_path / "cast.onnx"), images())
    weights = np.asarray(imported.network.layers[0].weights, np.float64) * 2.0 ** -imported.weight_frac_bits[0]
    assert np.all(weights == 1.0)      # int32(1.7) = 1, as onnxruntime computes it


# --- and: tensors whose data disagrees with their dims, huge strides, a Constant without value ----


def test_initializer_data_longer_than_its_dims_names_the_initializer(tmp_path):
    model = conv_model()
    model.graph.initializer[0].raw_data = np.zeros(28, np.float32).tobytes()    # dims [2, 1, 3, 3]: 18
    with pytest.raises(aimcemu.FormatError, match=r"m.onnx: field 'initializer 'W'': cannot reshape"):
        convert_onnx(save(model, tmp_path / "m.onnx"), images())


def test_stride_beyond_the_window_fields_is_refused_naming_the_node(tmp_path, capsys):
    model = conv_model()
    model.graph.node[0].attribute.append(helper.make_attribute("strides", [2 ** 40, 1]))
    np.save(tmp_path / "cal.npy", images())
    assert_refused(["import", save(model, tmp_path / "m.onnx"), "-o", tmp_path / "out" / "m.h5", "--calibration",
                    tmp_path / "cal.npy"], tmp_path, capsys, f"conv: stride ({2 ** 40}, 1) must lie in 1..65535")


def test_constant_without_a_value_is_unsupported_not_a_key_error(tmp_path):
    constant = helper.make_node("Constant", [], ["W"], name="k", value_float=0.5)
    with pytest.raises(_netbuild.UnsupportedOperationError,
                       match="node 'k' \\(Constant\\): only a Constant with a dense 'value' tensor"):
        convert_onnx(save(conv_model(None, nodes_before=[constant]), tmp_path / "m.onnx"), images())


# --- found in review: opset-21 output_dtype, negative dims, swapped folders, all-zero first batches ---


def qdq21_activation_model(explicit_zero_point: bool, output_dtype=TensorProto.INT8):
    """Conv, then QuantizeLinear to int8 named by output_dtype (no zero point) or by an int8 zero point."""
    weight = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(0.05, np.float32), "s")]
    q_inputs, q_attrs = ["y", "s"], {}
    if explicit_zero_point:
        inits.append(numpy_helper.from_array(np.array(0, np.int8), "z"))
        q_inputs.append("z")
    else:
        q_attrs["output_dtype"] = output_dtype
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
             helper.make_node("QuantizeLinear", q_inputs, ["q"], name="q", **q_attrs),
             helper.make_node("DequantizeLinear", ["q", "s"] + (["z"] if explicit_zero_point else []), ["out"], name="dq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", "c", "h", "w"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_quantize_linear_without_zero_point_takes_its_output_dtype(tmp_path):
    """int8 by output_dtype is signed: no implied ReLU, as with an int8 zero point (before: read as uint8)."""
    explicit = convert_onnx(save(qdq21_activation_model(True), tmp_path / "zp.onnx"), images())
    by_dtype = convert_onnx(save(qdq21_activation_model(False), tmp_path / "dtype.onnx"), images())
    assert [(l.name, l.relu) for l in by_dtype.network.layers] == [(l.name, l.relu) for l in explicit.network.layers]
    assert not any(l.relu for l in by_dtype.network.layers)
    with pytest.raises(_netbuild.UnsupportedOperationError, match="QuantizeLinear to INT16 is not supported"):
        convert_onnx(save(qdq21_activation_model(False, TensorProto.INT16), tmp_path / "int16.onnx"), images())


def test_external_data_with_a_negative_dimension_names_the_initializer(external_folder, capsys):
    model = conv_model()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.dims[:] = [-2, 1, 3, 3]
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    path = save(model, external_folder / "m.onnx")
    result = run_cli(["import", path, "-o", external_folder / "m.h5", "--input-shape", "1,8,8"], timeout=60)
    assert_cli_refused(result, "m.onnx: field 'initializer 'W'': external data tensor of dims [-2, 1, 3, 3]: "
                               "a dimension is negative")


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(external_folder, monkeypatch):
    """The location is checked, then a folder on its way becomes a link out before the open."""
    from aimcemu import onnx_import

    (external_folder / "sub").mkdir()
    (external_folder / "sub" / "secret.bin").write_bytes(b"padding!" + WEIGHT.tobytes())
    model = external_model(external_folder, "sub/secret.bin", offset=8, length=WEIGHT.nbytes)
    real_realpath = os.path.realpath

    def swap_after_the_check(path, *args, **kwargs):
        resolved = real_realpath(path, *args, **kwargs)
        if str(path).endswith("sub/secret.bin") and (external_folder / "sub").is_dir():
            os.rename(external_folder / "sub", external_folder.parent / "outside" / "sub")
            os.symlink(external_folder.parent / "outside" / "sub", external_folder / "sub")
        return resolved

    monkeypatch.setattr(onnx_import.os.path, "realpath", swap_after_the_check)
    with pytest.raises(aimcemu.FormatError, match="location 'sub/secret.bin' points outside the model's folder"):
        convert_onnx(model, images())


def test_an_all_zero_first_batch_leaves_the_percentiles_as_one_batch_would():
    """Batches of one image (a fixed batch of 1) with a black first image: the same histogram."""
    values = np.random.default_rng(1).uniform(0, 0.45, size=(9, 64))
    together, one_by_one = _netbuild.RangeStatistics(), _netbuild.RangeStatistics()
    together.update("x", np.vstack([np.zeros((1, 64)), values]))
    one_by_one.update("x", np.zeros((1, 64)))
    for row in values:
        one_by_one.update("x", row[None])
    percentiles = [float(p) for p in range(1, 100)] + [99.9, 99.99]
    assert [one_by_one.percentile("x", p) for p in percentiles] == [together.percentile("x", p) for p in percentiles]


def many_external_tensors_model(folder: Path, count: int) -> Path:
    """conv_model with `count` - 1 extra empty initializers, all stored in w.bin with the weight."""
    model = conv_model()
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "8"), ("length", str(WEIGHT.nbytes))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    for i in range(count - 1):
        extra = numpy_helper.from_array(np.zeros((0,), np.float32), f"empty{i}")
        extra.ClearField("raw_data")
        extra.data_location = TensorProto.EXTERNAL
        entry = extra.external_data.add()
        entry.key, entry.value = "location", "w.bin"
        model.graph.initializer.append(extra)
    return save(model, folder / "m.onnx")


def test_external_tensors_sharing_a_file_open_it_once(external_folder, monkeypatch):
    from aimcemu import onnx_import

    path = many_external_tensors_model(external_folder, 50)
    opened = []
    real_open = os.open
    monkeypatch.setattr(onnx_import.os, "open", lambda p, *a, **k: (opened.append(p), real_open(p, *a, **k))[1])
    before = len(os.listdir("/proc/self/fd"))
    model = onnx_import._load(os.fspath(path))
    assert opened.count(os.path.realpath(external_folder / "w.bin")) == 1
    assert len(os.listdir("/proc/self/fd")) == before  # closed after the load
    assert numpy_helper.to_array(model.graph.initializer[0]).tobytes() == WEIGHT.tobytes()


def test_too_many_external_tensors_are_refused(external_folder, monkeypatch):
    from aimcemu import onnx_import

    monkeypatch.setattr(onnx_import, "MAX_EXTERNAL_TENSORS", 20)
    path = many_external_tensors_model(external_folder, 25)
    with pytest.raises(aimcemu.FormatError, match="external data is stored for more than 20 tensors"):
        onnx_import._load(os.fspath(path))


# --- found in review (importleft): torch's own errors, calibration dtypes, ranges, layer names ---


def torch_models_that_torch_refuses():
    """(model, the field the refusal names, what torch says) per mismatch torch finds on calibration."""
    nn = pytest.importorskip("torch").nn
    torch = pytest.importorskip("torch")
    wrong_bias = nn.Conv2d(1, 2, 3)
    wrong_bias.bias = nn.Parameter(torch.zeros(3))

    class Sum(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(1, 2, 3), nn.Conv2d(1, 2, 5)

        def forward(self, x):
            return self.a(x) + self.b(x)

    return {
        "in_channels": (nn.Sequential(nn.Conv2d(3, 2, 3)), "0 (Conv2d)", "expected input[4, 1, 8, 8] to have 3 channels"),
        "bias": (nn.Sequential(wrong_bias), "0 (Conv2d)", "expected bias to be 1-dimensional with 2 elements"),
        "batchnorm": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(3)), "1 (BatchNorm2d)",
                      "running_mean should contain 2 elements not 3"),
        "in_features": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(10, 3)), "2 (Linear)",
                        "mat1 and mat2 shapes cannot be multiplied (4x72 and 10x3)"),
        "kernel": (nn.Sequential(nn.Conv2d(1, 2, 9)), "0 (Conv2d)", "Kernel size can't be greater than actual input size"),
        "pool": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(8)), "1 (MaxPool2d)", "Output size is too small"),
        "add": (Sum(), "add", "The size of tensor a (6) must match the size of tensor b (4)"),
    }


@pytest.mark.parametrize("case", ["in_channels", "bias", "batchnorm", "in_features", "kernel", "pool", "add"])
def test_torch_errors_on_calibration_name_the_module(case):
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    model, field, said = torch_models_that_torch_refuses()[case]
    with pytest.raises(aimcemu.FormatError) as info:
        import_torch(model.eval(), torch.rand(4, 1, 8, 8), name="m")
    message = str(info.value)
    assert message.startswith(f"<import_torch:m>: field '{field}': torch cannot run it on calibration batch 0 "
                              "(counting from 0): "), message
    assert said in message
    assert "While executing" not in message and len(message.splitlines()) == 1


NOT_REAL_IMAGES = {"complex128": images().astype(np.complex128) + 0.5j, "bool": images() > 0,
                   "object": images().astype(object), "str": images().astype(str), "bytes": images().astype(bytes)}


@pytest.mark.parametrize("kind", NOT_REAL_IMAGES)
@pytest.mark.parametrize("container", ["array", "batches"])
def test_calibration_data_that_are_not_real_numbers_are_refused(tmp_path, kind, container):
    """Both importers; complex data was cast to float with only NumPy's ComplexWarning before."""
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    data = NOT_REAL_IMAGES[kind]
    batch = " batch 0 (counting from 0)" if container == "batches" else ""
    expected = f"field 'calibration_data':{batch} holds {np.dtype(data.dtype).name} values; expected real numbers"
    data = data if container == "array" else [data]
    model = save(conv_model(), tmp_path / "m.onnx")
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"m.onnx: {expected}")):
        convert_onnx(model, data)
    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"<import_torch:m>: {expected}")):
        import_torch(module, data, name="m")


@pytest.mark.parametrize("dtype", ["complex64", "bool"])
def test_torch_calibration_tensors_that_are_not_real_numbers_are_refused(dtype):
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    data = torch.ones(4, 1, 8, 8, dtype=getattr(torch, dtype))
    for given, batch in ((data, ""), ([data], " batch 0 \\(counting from 0\\)")):
        with pytest.raises(aimcemu.FormatError, match=f"field 'calibration_data':{batch} holds {dtype} values"):
            import_torch(module, given, name="m")


@pytest.mark.parametrize("kind", ["complex128", "bool", "str"])
def test_cli_refuses_calibration_files_that_are_not_real_numbers(tmp_path, capsys, kind):
    model = save(conv_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", NOT_REAL_IMAGES[kind])
    name = np.dtype(NOT_REAL_IMAGES[kind].dtype).name
    assert_refused(["import", model, "-o", tmp_path / "out" / "m.h5", "--calibration", tmp_path / "cal.npy"],
                   tmp_path, capsys, f"--calibration: field 'calibration': {tmp_path / 'cal.npy'}: holds {name} values; expected real numbers")


def test_integer_and_half_precision_calibration_data_still_import(tmp_path):
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    data = (images() * 100).round()
    model = save(conv_model(), tmp_path / "m.onnx")
    expected = convert_onnx(model, data.astype(np.float32))
    for given in (data.astype(np.int16), torch.from_numpy(data.astype(np.float32)).to(torch.bfloat16)):
        assert convert_onnx(model, given).frac_bits == expected.frac_bits
    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    assert import_torch(module, data.astype(np.int16)).input_frac_bits == import_torch(module, data).input_frac_bits


def test_a_range_above_the_format_is_refused_naming_the_tensor(tmp_path):
    """Calibration up to 1e9: at the coarsest scale, 2^16, every value above 8.3e6 saturated silently before."""
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    model = save(conv_model(), tmp_path / "m.onnx")
    data = images()
    data[0, 0, 0, 0] = 1e9
    with pytest.raises(_netbuild.UnsupportedOperationError,
                       match=r"m.onnx, 1 unsupported operation\(s\):\n  input 'x': the network input reaches 1e\+09, "
                             r"above the largest range the format holds, 8.32307e\+06 = 127 \* 2\^16 \(every value "
                             r"above it would saturate\)"):
        convert_onnx(model, data)
    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    with torch.no_grad():
        module[0].weight.fill_(1e8)
    with pytest.raises(_netbuild.UnsupportedOperationError, match=r"  0: the weight tensor reaches 1e\+08, above"):
        import_torch(module, torch.rand(4, 1, 8, 8))


def test_weights_that_all_quantize_to_zero_are_refused(tmp_path):
    """Weights of 1e-9 at the finest scale, 2^-24, all became 0 before: the layer computed its bias only."""
    with pytest.raises(_netbuild.UnsupportedOperationError,
                       match=r"  conv: the weight tensor reaches only 4.5e-10, below half the finest step the format "
                             r"holds, 2\^-24 \(every value would quantize to 0\)"):
        convert_onnx(save(conv_model(WEIGHT * 1e-9), tmp_path / "m.onnx"), images())


def test_a_tiny_tensor_that_keeps_some_bits_imports_with_a_warning(tmp_path):
    """Weights up to 4.5e-7 (and so outputs up to 1.6e-6) keep some bits at 2^-24: imported, each one named."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = convert_onnx(save(conv_model(WEIGHT * 1e-6), tmp_path / "m.onnx"), images())
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 2, messages
    assert re.fullmatch(r".*m.onnx: conv: the weight tensor reaches only 4.5e-07, below 7.57e-06 = 127 \* 2\^-24: at "
                        r"the format's finest scale its largest value is 8 of 127 \(4 bit\(s\) of precision lost\)",
                        messages[0]), messages[0]
    assert re.fullmatch(r".*m.onnx: conv: the value 'z' \(act\) reaches only 1.6\d+e-06, .*", messages[1]), messages[1]
    assert imported.weight_frac_bits[0] == 24
    assert np.abs(np.asarray(imported.network.layers[0].weights)).max() == 8


def test_a_narrow_residual_branch_neither_refuses_nor_warns_when_the_sum_is_wide():
    """A layer with a fused residual add is stored at the scale of its widest value (the sum); the
    branch before the add only bounds that scale from above.  Its own range of 1.5e-8 (below the
    finest step) refused the import, and a branch keeping few bits warned about bits the layer, at
    the sum's coarser scale, never had (found by review)."""
    torch = pytest.importorskip("torch")
    from aimcemu.importer import convert_torch

    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = torch.nn.Conv2d(1, 2, 1), torch.nn.Conv2d(2, 2, 1)
            with torch.no_grad():
                self.conv1.weight.zero_()
                self.conv1.bias.copy_(torch.tensor([0.1, 0.1 + 1.5e-8]))
                self.conv2.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]).view(2, 2, 1, 1))
                self.conv2.bias.zero_()

        def forward(self, x):
            y = torch.relu(self.conv1(x))
            return torch.relu(y + self.conv2(y))

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        imported = convert_torch(Residual().eval(), torch.rand(4, 1, 8, 8))
    assert imported.frac_bits == [10, 10]  # both outputs reach about 0.1: 127 / 0.1 < 2^11


def test_a_bias_too_large_for_its_layer_names_the_layer():
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3)).eval()
    with torch.no_grad():
        module[0].weight.fill_(1e-6)
        module[0].bias.fill_(1.0)
    with pytest.warns(RuntimeWarning), pytest.raises(_netbuild.UnsupportedOperationError,
                                                     match=r"  0: bias up to 1 does not fit int8 << 23"):
        import_torch(module, torch.rand(4, 1, 8, 8) * 1e-6)


@pytest.mark.parametrize("node_name, layer_name", [(".", "."), ("..", ".."), ("/../", ".."), ("/./", "."),
                                                   ("a\0b", "a\\x00b")])
def test_onnx_node_names_that_cannot_name_a_layer_are_refused_on_import(tmp_path, node_name, layer_name):
    """Before: imported, then refused by save_model naming the output file ('.'), or saved ('..'; 'a\\0b' as 'a')."""
    model = conv_model()
    model.graph.node[0].name = node_name
    shown = node_name.replace("\0", "\\x00")
    expected = f"m.onnx: field 'node '{shown}' (Conv) name': '{layer_name}' cannot name a layer"
    with pytest.raises(aimcemu.FormatError, match=re.escape(expected)):
        convert_onnx(save(model, tmp_path / "m.onnx"), images())


def test_cli_refuses_a_node_name_that_cannot_name_a_layer_before_writing(tmp_path, capsys):
    model = conv_model()
    model.graph.node[0].name = ".."
    np.save(tmp_path / "cal.npy", images())
    assert_refused(["import", save(model, tmp_path / "m.onnx"), "-o", tmp_path / "out" / "m.h5", "--calibration",
                    tmp_path / "cal.npy"], tmp_path, capsys, "m.onnx: field 'node '..' (Conv) name': '..' cannot name a layer")


def test_torch_module_names_that_cannot_name_a_layer_are_refused_on_import():
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    module = torch.nn.Sequential()
    module.add_module("a/b", torch.nn.Conv2d(1, 2, 3))
    with pytest.raises(aimcemu.FormatError, match="<import_torch:m>: field 'a/b name': 'a/b' cannot name a layer"):
        import_torch(module.eval(), torch.rand(4, 1, 8, 8), name="m")
    with pytest.raises(aimcemu.FormatError, match="<import_torch:m\\\\x00n>: field 'name': holds a NUL byte at position 1"):
        import_torch(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3)).eval(), torch.rand(4, 1, 8, 8), name="m\0n")


def test_layer_cosines_feed_a_fixed_batch_model_batches_of_its_size(tmp_path):
    """Before: onnxruntime refused the 8 images of a model exported with batch 1 (torch.onnx.export's default)."""
    from aimcemu import _core
    from aimcemu.onnx_import import layer_cosines

    test = images(8, seed=3)
    dynamic_path = save(conv_model(batch="N"), tmp_path / "dyn.onnx")
    dynamic = convert_onnx(dynamic_path, images())
    outputs = _core.run_network(dynamic.network, dynamic.quantize_images(test))
    expected = layer_cosines(dynamic, dynamic_path, test, outputs)
    for batch in (1, 4):
        path = save(conv_model(batch=batch), tmp_path / f"b{batch}.onnx")
        fixed = convert_onnx(path, images())
        cosines = layer_cosines(fixed, path, test, _core.run_network(fixed.network, fixed.quantize_images(test)))
        assert [(layer, tensor) for layer, tensor, _ in cosines] == [(layer, tensor) for layer, tensor, _ in expected]
        np.testing.assert_allclose([c for *_, c in cosines], [c for *_, c in expected], rtol=1e-6)
    path = save(conv_model(batch=3), tmp_path / "b3.onnx")
    fixed = convert_onnx(path, images(9))
    with pytest.raises(aimcemu.FormatError, match=r"\.onnx: field 'images_nchw': the model fixes its batch size at 3; 2 image\(s\) are left over"):
        layer_cosines(fixed, path, test, _core.run_network(fixed.network, fixed.quantize_images(test)))


@pytest.mark.parametrize("scale_of", ["xs", "ws"])
def test_a_bfloat16_qdq_scale_is_unsupported_naming_the_node(tmp_path, capsys, scale_of):
    """Before: 'scale must be finite and > 0, got [0.0100...]' (bfloat16 is no NumPy float kind)."""
    model = qdq_model(opset=21)
    inits = model.graph.initializer
    index = next(i for i, t in enumerate(inits) if t.name == scale_of)
    dims = list(inits[index].dims)
    inits[index].CopyFrom(helper.make_tensor(scale_of, TensorProto.BFLOAT16, dims, [0.01] * max(1, int(np.prod(dims)))))
    node = "node 'qx' (QuantizeLinear)" if scale_of == "xs" else "node 'dqw' (DequantizeLinear)"
    assert_refused(["import", save(model, tmp_path / "q.onnx"), "-o", tmp_path / "out" / "q.h5"], tmp_path, capsys,
                   "q.onnx, ", f"{node}: a scale of type bfloat16 is not supported")


def test_a_blocked_qdq_scale_is_unsupported_naming_the_node(tmp_path, capsys):
    """Before: 'scale of shape [2, 1, 3, 3] must be a scalar or 1-D', as if the file were invalid."""
    model = qdq_model(w_scale=np.full((2, 1, 3, 1), 0.01, np.float32), axis=3, opset=21)
    model.graph.node[2].attribute.append(helper.make_attribute("block_size", 3))
    assert_refused(["import", save(model, tmp_path / "q.onnx"), "-o", tmp_path / "out" / "q.h5"], tmp_path, capsys,
                   "node 'dqw' (DequantizeLinear): blocked quantization (attribute block_size=3) is not supported")


def gemm_model(bias_shape) -> onnx.ModelProto:
    """x [N, 1, 8, 8] -> Flatten -> Gemm(W [3, 64], transB, C of bias_shape, all 0.5)."""
    weight = np.random.default_rng(2).uniform(-1, 1, (3, 64)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(np.full(bias_shape, 0.5, np.float32), "C")]
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "W", "C"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_gemm_bias_that_onnx_broadcasts_is_one_bias_per_output(tmp_path):
    """Before: a scalar or [1] C (valid ONNX) was refused as 'layers/0 (fc)/bias: expected 3 values, got 1'."""
    expected = convert_onnx(save(gemm_model((3,)), tmp_path / "full.onnx"), images())
    for shape in ((), (1,), (1, 1), (1, 3)):
        imported = convert_onnx(save(gemm_model(shape), tmp_path / "c.onnx"), images())
        assert list(imported.network.layers[0].bias) == list(expected.network.layers[0].bias), shape
        assert imported.network.layers[0].bias_shift == expected.network.layers[0].bias_shift
    with pytest.raises(_netbuild.UnsupportedOperationError,
                       match=r"node 'fc' \(Gemm\): a bias C of shape \[2, 3\] is not supported"):
        convert_onnx(save(gemm_model((2, 3)), tmp_path / "batch.onnx"), images())


def test_torch_parameters_without_real_values_are_unsupported_naming_the_module():
    """Before: torch's ValueError (lazy), NotImplementedError (meta) or a silent cast of complex weights."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    from aimcemu.importer import import_torch

    cases = [(nn.Sequential(nn.LazyConv2d(2, 3)), "0 (LazyConv2d): weight is uninitialized (a lazy module"),
             (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.LazyLinear(3)), "2 (LazyLinear): weight is uninitialized"),
             (nn.Sequential(nn.Conv2d(1, 2, 3, device="meta")), "0 (Conv2d): weight is on the meta device"),
             (nn.Sequential(nn.Conv2d(1, 2, 3, dtype=torch.complex64)), "0 (Conv2d): weight is complex64 (only real")]
    for module, expected in cases:
        with pytest.raises(_netbuild.UnsupportedOperationError, match=re.escape(expected)):
            import_torch(module.eval(), torch.rand(4, 1, 8, 8))


NAMES_AT_THE_EDGE = ["", ".", "..", "...", ".a", "a..b", "/", "a/b", "a\0b", "\x01", "été", "block9.0.conv1"]


@pytest.mark.parametrize("name", NAMES_AT_THE_EDGE)
def test_import_and_the_model_file_refuse_the_same_layer_names(tmp_path, name):
    """One rule: a name the importers accept is one a Layer takes and a model file stores (and loads
    back as it was); a name they refuse, Layer.name refuses too (save_model's own refusal is tested
    in C++, test_io_model_file).  Before, '..' passed save_model but not import, and Layer.name took
    any text.  Both sides word the refusal with one C++ function (check_layer_name), so comparing
    their words proves nothing; what each must get right is where it points: a real ONNX import at
    the model file and the node, the setter at the field."""
    from aimcemu import _core

    try:
        _netbuild.check_layer_name(name, "m.onnx", "node name")
        import_refused = None
    except aimcemu.FormatError as e:
        import_refused = str(e)
    net = _core.zoo.resnet18(1, 32, 10)
    try:
        net.layers[3].name = name
        set_refused = None
    except aimcemu.FormatError as e:
        set_refused = str(e)
    assert (import_refused is None) == (set_refused is None), (import_refused, set_refused)
    if set_refused is None:
        _core.save_model(net, str(tmp_path / "m.h5"))
        assert _core.load_model(str(tmp_path / "m.h5")).layers[3].name == name
    else:
        assert import_refused.startswith("m.onnx: field 'node name': ")
        assert set_refused.startswith("<Layer>: field 'name': ")
        assert net.layers[3].name == "layer1.0.conv2"   # unchanged
    if name and "/" not in name:  # a node name the ONNX importer takes as the layer's name as it is
        model = conv_model()
        model.graph.node[0].name = name
        path = save(model, tmp_path / "named.onnx")
        if set_refused is None:
            assert convert_onnx(path, images()).network.layers[0].name == name
        else:
            with pytest.raises(aimcemu.FormatError) as refused:
                convert_onnx(path, images())
            assert str(refused.value).startswith(f"{path}: field 'node '{_netbuild.printable(name)}' (Conv) name': ")


def test_network_name_holding_a_nul_is_refused_when_set():
    from aimcemu import _core

    net = _core.zoo.resnet18(1, 32, 10)
    with pytest.raises(aimcemu.FormatError, match=r"<Network>: field 'name': holds a NUL byte at position 1"):
        net.name = "m\0n"
    assert net.name == "resnet18"


ONNX_CALIBRATION_REFUSALS = [
    ("empty", dict(calibration_data=np.zeros((0, 1, 8, 8), np.float32)), "calibration_data", "holds no images"),
    ("no batches", dict(calibration_data=[]), "calibration_data", "holds no images"),
    ("3-D", dict(calibration_data=np.zeros((4, 8, 8), np.float32)), "calibration_data",
     "batch 0 (counting from 0): expected images [N, 1, 8, 8]"),
    ("method", dict(calibration_data=images(), calibration="mean"), "calibration", "expected 'max' or 'percentile'"),
    ("percentile", dict(calibration_data=images(), calibration="percentile", percentile=0.0), "percentile",
     "expected a value in (0, 100]"),
]


@pytest.mark.parametrize("case, kwargs, field, words", ONNX_CALIBRATION_REFUSALS, ids=[c[0] for c in ONNX_CALIBRATION_REFUSALS])
def test_onnx_calibration_arguments_are_refused_naming_the_model_and_field(tmp_path, case, kwargs, field, words):
    """Before: plain ValueErrors ('calibration_data is empty') that named neither the model nor the field."""
    path = save(conv_model(), tmp_path / "m.onnx")
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{path}: field '{field}': {words}")):
        convert_onnx(path, **kwargs)


def test_torch_calibration_arguments_are_refused_naming_the_model_and_field():
    torch = pytest.importorskip("torch")
    from aimcemu.importer import import_torch

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()).eval()
    cases = [(dict(calibration_data=[]), "calibration_data': holds no images"),
             (dict(calibration_data=torch.rand(4, 8, 8)), "calibration_data': expected images [N, C, H, W]"),
             (dict(calibration_data=torch.rand(4, 1, 8, 8), calibration="mean"), "calibration': expected 'max'"),
             (dict(calibration_data=torch.rand(4, 1, 8, 8), calibration="percentile", percentile=101),
              "percentile': expected a value in (0, 100]")]
    for kwargs, words in cases:
        with pytest.raises(aimcemu.FormatError, match=re.escape(f"<import_torch:m>: field '{words}")):
            import_torch(model, name="m", **kwargs)


def test_a_refused_constant_fold_is_reported_once_not_again_at_its_consumer(tmp_path):
    """Before: the blocked DequantizeLinear was reported, and then its Conv too ('its weight
    ('wdq') must be a constant'), a second problem that was only the first one's consequence."""
    model = qdq_model(w_scale=np.full((2, 1, 3, 1), 0.01, np.float32), axis=3, opset=21)
    model.graph.node[2].attribute.append(helper.make_attribute("block_size", 3))
    with pytest.raises(_netbuild.UnsupportedOperationError) as refused:
        convert_onnx(save(model, tmp_path / "q.onnx"))
    message = str(refused.value)
    assert "node 'dqw' (DequantizeLinear): blocked quantization (attribute block_size=3) is not supported" in message
    assert "must be a constant" not in message and "(Conv)" not in message, message
    # A weight that is no constant for another reason (here: the image) is still reported at the Conv.
    model = qdq_model()
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    conv.input[1] = model.graph.input[0].name
    with pytest.raises(_netbuild.UnsupportedOperationError, match=r"\(Conv\): its weight \('\w+'\) must be a constant"):
        convert_onnx(save(model, tmp_path / "q2.onnx"))


def float_weight_qdq_model(block_size=None):
    """A float weight quantized in the graph (as QAT exports it): W -> QuantizeLinear -> DequantizeLinear -> Conv."""
    as_tensor = lambda a, n: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    w_scale = np.full((2, 1, 3, 1), 0.01, np.float32) if block_size else np.full((2,), 0.01, np.float32)
    inits = [as_tensor(np.float32(0.01), "xs"), as_tensor(np.uint8(128), "xz"), as_tensor(WEIGHT, "Wf"),
             as_tensor(w_scale, "ws"), as_tensor(np.zeros(w_scale.shape, np.int8), "wz")]
    extra = {"block_size": block_size, "axis": 3} if block_size else {"axis": 0}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             helper.make_node("QuantizeLinear", ["Wf", "ws", "wz"], ["Wq"], name="qw", **extra),
             helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["W"], name="dqw", **extra),
             helper.make_node("Conv", ["xd", "W"], ["z"], name="conv")]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "c", "h", "w"])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_a_refused_quantization_of_a_float_weight_is_reported_once(tmp_path):
    """Review (rev_lead11): with the weight stored as floats, the refused QuantizeLinear was reported
    and then the Conv too ('its weight ('W') must be a constant')."""
    assert convert_onnx(save(float_weight_qdq_model(), tmp_path / "ok.onnx"), images()).network.layers
    with pytest.raises(_netbuild.UnsupportedOperationError) as refused:
        convert_onnx(save(float_weight_qdq_model(block_size=3), tmp_path / "q.onnx"), images())
    message = str(refused.value)
    assert "node 'qw' (QuantizeLinear): blocked quantization (attribute block_size=3) is not supported" in message
    assert "must be a constant" not in message and "(Conv)" not in message, message


def test_a_refused_computation_used_as_a_weight_is_still_reported_at_its_consumer(tmp_path):
    """Review (rev_lead11): a refused node that computes from the image (a grouped Conv) is no
    would-be constant; the Conv taking its output as weight has its own problem, reported too."""
    inits = [numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "W")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["a"], name="grouped", group=2),
             helper.make_node("Conv", ["x", "a"], ["z"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", "c", "h", "w"])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(_netbuild.UnsupportedOperationError) as refused:
        convert_onnx(save(model, tmp_path / "g.onnx"), np.zeros((2, 2, 8, 8), np.float32))
    message = str(refused.value)
    assert "node 'grouped' (Conv): grouped convolution (group=2) is not supported" in message
    assert "node 'second' (Conv): its weight ('a') must be a constant" in message


@pytest.mark.parametrize("kwargs, field, words", [
    (dict(calibration="mean"), "calibration", "expected 'max' or 'percentile', got 'mean'"),
    (dict(calibration=None), "calibration", "expected 'max' or 'percentile', got None"),
    (dict(calibration="percentile", percentile="99.9"), "percentile", "expected a number, got '99.9'"),
    (dict(calibration="percentile", percentile=None), "percentile", "expected a number"),
    (dict(calibration="percentile", percentile=-5), "percentile", "expected a value in (0, 100], got -5"),
])
def test_calibration_arguments_are_checked_before_anything_is_read(tmp_path, kwargs, field, words):
    """Review (rev_lead11): refused only after the whole calibration pass, or as a bare TypeError."""
    missing = tmp_path / "missing.onnx"     # checked first: the missing file is not the error
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{missing}: field '{field}': {words}")):
        convert_onnx(missing, images(), **kwargs)


def test_calibration_arguments_without_calibration_data_are_refused(tmp_path):
    """Review (rev_lead11): a QDQ model imported without calibration_data ignored them silently."""
    path = save(qdq_model(), tmp_path / "q.onnx")
    for kwargs, field in ((dict(calibration="percentile"), "calibration"), (dict(percentile=99.0), "percentile")):
        with pytest.raises(aimcemu.FormatError, match=re.escape(f"{path}: field '{field}': ") + ".*has no effect "
                           "without calibration_data"):
            convert_onnx(path, **kwargs)
    assert convert_onnx(path, images(), calibration="percentile", percentile=99.0).network.layers   # with data: taken
    float_model = save(conv_model(), tmp_path / "f.onnx")
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{float_model}: field 'calibration_data': a float model")):
        convert_onnx(float_model)


def test_names_that_are_not_utf8_are_refused_when_set():
    """Review (rev_lead11): b'bad\\xffname' was taken, saved, then refused by load_model."""
    from aimcemu import _core

    net = _core.zoo.resnet18(1, 32, 10)
    with pytest.raises(aimcemu.FormatError, match=re.escape("<Layer>: field 'name': 'bad\\xffname' is not valid "
                                                            "UTF-8 (byte 0xff at position 3)")):
        net.layers[3].name = b"bad\xffname"
    with pytest.raises(aimcemu.FormatError, match=re.escape("<Network>: field 'name': 'n\\xe9' is not valid UTF-8")):
        net.name = b"n\xe9"
    with pytest.raises(aimcemu.FormatError, match=re.escape("<Network>: field 'class_names/1': holds a NUL")):
        net.class_names = ["a", "b\0"]
    assert (net.layers[3].name, net.name, list(net.class_names)) == ("layer1.0.conv2", "resnet18", [])


def test_control_bytes_in_names_are_escaped_by_one_rule_in_every_message(tmp_path):
    """Review (rev_lead11): resolve's duplicate-name field printed ESC/CR raw, and the importer's and
    the core's escaping differed ('caf\\xe9\\x01/x' beside 'café\\x01/x' in one message)."""
    from aimcemu import _core

    net = _core.zoo.resnet18(1, 32, 10)
    evil = "evil\x1b[2K\rFAKE"  # a layer name may not hold one (session 12): the setter refuses it
    with pytest.raises(aimcemu.FormatError) as refused:
        net.layers[3].name = evil
    assert "'evil\\x1b[2K\\x0dFAKE' cannot name a layer" in str(refused.value)
    assert not any(c in str(refused.value) for c in "\x1b\r")
    net.layers[3].name = net.layers[4].name = "dup"  # a duplicate: resolve's message quotes the name
    with pytest.raises(aimcemu.FormatError) as refused:
        _core.save_model(net, str(tmp_path / "m.h5"))
    assert "layers/4 (dup)/name': duplicate layer name" in str(refused.value)
    name = "café\x01/x"
    with pytest.raises(aimcemu.FormatError) as refused:
        _netbuild.check_layer_name(name, "m.onnx", f"node '{name}' (Conv) name")
    assert str(refused.value).startswith("m.onnx: field 'node 'café\\x01/x' (Conv) name': 'café\\x01/x' cannot name"), \
        str(refused.value)


def test_files_whose_names_hold_control_characters_are_refused_when_read(tmp_path):
    """A network or layer name from a hostile file is printed (aimcemu run, models): the readers
    refuse ESC/CR as the writers do, naming the file and the field.  Class names are never printed to
    a terminal, and a list read from a CRLF file holds 'cat\r': kept as stored (review rev_s13)."""
    import h5py

    from aimcemu import _core, analysis, modelfile

    model_path = tmp_path / "m.h5"
    modelfile.save_model(_core.zoo.resnet18(1, 32, 10), model_path)
    with h5py.File(model_path, "a") as f:
        f.attrs["name"] = "evil\x1b[2K\rFAKE"
    with pytest.raises(aimcemu.FormatError) as refused:
        modelfile.load_model(model_path)
    assert str(refused.value).startswith(f"{model_path}: field 'name': 'evil\\x1b[2K\\x0dFAKE' holds a control character")

    results = tmp_path / "r.h5"
    aimcemu.run(output=results, threads=1)
    for attribute, index, field in [("model", None, "model"), ("layer_names", 1, "layer_names/1")]:
        bad = tmp_path / f"bad_{attribute}.h5"
        bad.write_bytes(results.read_bytes())
        with h5py.File(bad, "a") as f:
            if index is None:
                f.attrs[attribute] = "x\x1b]0;title\x07"
            else:
                names = [str(n) for n in f.attrs[attribute]]
                names[index] = "x\x1b]0;title\x07"
                f.attrs[attribute] = names
        with pytest.raises(aimcemu.FormatError) as refused:
            analysis.open_run(bad)
        assert str(refused.value).startswith(f"{bad}: field '{field}': 'x\\x1b]0;title\\x07'"), str(refused.value)
        assert "\x1b" not in str(refused.value)

    crlf = tmp_path / "crlf.h5"
    crlf.write_bytes(results.read_bytes())
    with h5py.File(crlf, "a") as f:
        f.attrs["class_names"] = [f"{name}\r" for name in f.attrs["class_names"]]
    assert analysis.open_run(crlf).attrs["model"] == "digits_resnet"   # read, not refused
    net = _core.zoo.resnet18(1, 32, 10)
    net.class_names = [f"c{i}\r" for i in range(10)]
    modelfile.save_model(net, model_path)
    assert list(modelfile.load_model(model_path).class_names)[9] == "c9\r"
