"""Import defects a review found (ONNX BatchNormalization modes, MatMul addends, graph outputs,
opset-4 Reshape, the CLI writing over external data, in-place ops in import_torch).  Each case
was imported silently wrong or crashed with a raw KeyError/IndexError before its fix."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import aimcemu  # noqa: E402
from aimcemu.onnx_import import convert_onnx  # noqa: E402
from aimcemu._netbuild import UnsupportedOperationError  # noqa: E402
from test_import_hostile import assert_cli_refused, run_cli  # noqa: E402
from test_import_refusals import images, save_graph  # noqa: E402

RNG = np.random.default_rng(11)
CONV_WEIGHT = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
BN = {"g": np.full(4, 2, np.float32), "b": np.zeros(4, np.float32), "m": np.full(4, 5, np.float32),
      "v": np.ones(4, np.float32)}


def refused(path: Path, *words: str, data=None) -> None:
    with pytest.raises(UnsupportedOperationError) as info:
        convert_onnx(path, images() if data is None else data)
    message = str(info.value)
    for text in (path.name, *words):
        assert text in message, message


# --- 1. and 6. BatchNormalization ---------------------------------------------------------------


def test_batchnorm_in_training_mode_is_refused(tmp_path):
    """onnxruntime normalises by the batch's statistics then: importing the running ones is wrong."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y", "rm", "rv"], name="bn",
                              training_mode=1)]
    path = save_graph(tmp_path / "bn_train.onnx", nodes, {"w": CONV_WEIGHT, **BN}, opset=15)
    refused(path, "node 'bn' (BatchNormalization): training_mode=1")


def test_batchnorm_in_inference_mode_still_imports(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], name="bn", training_mode=0)]
    path = save_graph(tmp_path / "bn.onnx", nodes, {"w": CONV_WEIGHT, **BN}, opset=15)
    assert [layer.kind.name for layer in convert_onnx(path, images()).network.layers] == ["conv"]


@pytest.mark.parametrize("param_shape", [(4,), (4, 4, 4)])
def test_batchnorm_opset7_spatial_0_is_refused(tmp_path, param_shape):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], name="bn", spatial=0)]
    inits = {k: np.broadcast_to(v.reshape(4, *[1] * (len(param_shape) - 1)), param_shape).astype(np.float32)
             for k, v in BN.items()}
    path = save_graph(tmp_path / "bn7.onnx", nodes, {"w": CONV_WEIGHT, **inits}, opset=7)
    refused(path, "node 'bn' (BatchNormalization): attribute spatial=0")


def test_batchnorm_parameters_not_per_channel_are_refused(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"], name="bn")]
    inits = {k: v.reshape(4, 1, 1) for k, v in BN.items()}
    path = save_graph(tmp_path / "bn_shape.onnx", nodes, {"w": CONV_WEIGHT, **inits})
    refused(path, "node 'bn' (BatchNormalization)", "must each be [C]")


# --- 3. a constant Add after a MatMul -----------------------------------------------------------


def matmul_add(path: Path, addend: np.ndarray) -> Path:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"), helper.make_node("Flatten", ["c"], ["f"], name="fl"),
             helper.make_node("MatMul", ["f", "B"], ["m"], name="mm"), helper.make_node("Add", ["m", "C"], ["y"], name="a")]
    inits = {"w": CONV_WEIGHT, "B": RNG.normal(size=(64, 5)).astype(np.float32), "C": addend}
    return save_graph(path, nodes, inits, out_rank=2)


def test_a_matmul_addend_of_shape_out_by_1_is_not_a_bias(tmp_path):
    """[5, 1] adds row i's value to image i of a batch of 5 (other batch sizes fail): no
    per-output bias.  It was folded as one, silently, on calibration batches of 5."""
    path = matmul_add(tmp_path / "mab.onnx", np.arange(5, dtype=np.float32).reshape(5, 1))
    refused(path, "node 'a' (Add): a constant addend of shape [5, 1] after a MatMul is not a bias", data=images(5))


@pytest.mark.parametrize("shape", [(5,), (1, 5), (), (1,), (1, 1)])
def test_a_matmul_per_output_bias_still_folds(tmp_path, shape):
    values = np.arange(5, dtype=np.float32) if np.prod(shape) == 5 else np.full(5, 2.0, np.float32)
    path = matmul_add(tmp_path / "mab.onnx", values[:int(np.prod(shape))].reshape(shape))
    imported = convert_onnx(path, images())
    assert [layer.kind.name for layer in imported.network.layers] == ["conv", "linear"]
    linear = imported.network.layers[1]
    assert np.count_nonzero(np.asarray(linear.bias)) == (4 if np.prod(shape) == 5 else 5)


# --- 4. a graph output that is no data tensor --------------------------------------------------


@pytest.mark.parametrize("case", ["shape", "initializer", "constant"])
def test_a_graph_output_that_is_no_data_tensor_is_refused(tmp_path, case, capsys):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c")]
    inits, output = {"w": CONV_WEIGHT}, "y"
    if case == "shape":
        nodes.append(helper.make_node("Shape", ["c"], ["y"], name="s"))
    elif case == "initializer":
        output = "w"
    else:
        nodes.append(helper.make_node("Constant", [], ["y"], name="k",
                                      value=numpy_helper.from_array(np.ones(3, np.float32))))
    path = save_graph(tmp_path / "out.onnx", nodes, inits, output=output)
    refused(path, f"graph output '{output}'", "not a tensor computed from the input image")
    np.save(tmp_path / "cal.npy", images())
    assert_cli_refused(run_cli(["import", path, "-o", tmp_path / "m.h5", "--calibration", tmp_path / "cal.npy"], 120),
                       str(path), f"graph output '{output}'")


# --- 5. Reshape of opset 4 -------------------------------------------------------------------------


def test_reshape_with_its_shape_as_an_attribute_is_refused(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c"),
             helper.make_node("Reshape", ["c"], ["y"], name="r", shape=[-1, 64])]
    path = save_graph(tmp_path / "reshape4.onnx", nodes, {"w": CONV_WEIGHT}, out_rank=2, opset=4)
    refused(path, "node 'r' (Reshape): a Reshape without a shape input (opset 4 and below")


# --- 7. the CLI never writes over the model's external data --------------------------------------


def test_cli_refuses_to_write_over_the_models_external_data(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    plain = save_graph(tmp_path / "plain.onnx", nodes, {"w": CONV_WEIGHT})
    model = onnx.load(plain)
    folder = tmp_path / "m"
    folder.mkdir()
    onnx.save_model(model, folder / "ext.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    data = folder / "w.bin"
    before = data.read_bytes()
    np.save(tmp_path / "cal.npy", images())
    (tmp_path / "alias.bin").hardlink_to(data)
    for target in (data, tmp_path / "alias.bin"):
        result = run_cli(["import", folder / "ext.onnx", "-o", target, "--calibration", tmp_path / "cal.npy"], 120)
        assert_cli_refused(result, "model's external data file")
        assert data.read_bytes() == before
    result = run_cli(["import", folder / "ext.onnx", "-o", tmp_path / "ok.h5", "--calibration", tmp_path / "cal.npy"], 120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("hide", [False, True])
def test_a_shape_taken_from_the_input_does_not_hide_a_layer_from_the_memory_check(tmp_path, hide):
    """Review rev_B: ONNX's shape inference leaves every value after Reshape(x, Shape(x)) unsized,
    so this 55 KB file, whose convolution needs 35 GB per image, passed the memory check and
    reached onnxruntime's allocator.  onnxruntime's symbolic inference sizes them: refused as the
    same network without the Reshape is."""
    front = ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["xr"], name="rs")]
             if hide else [helper.make_node("Identity", ["x"], ["xr"], name="rs")])
    nodes = front + [helper.make_node("QuantizeLinear", ["xr", "sc", "z"], ["q"], name="q"),
                     helper.make_node("DequantizeLinear", ["q", "sc", "z"], ["d"], name="dq"),
                     helper.make_node("Conv", ["d", "w"], ["y"], name="c", pads=[1, 1, 1, 1])]
    path = save_graph(tmp_path / "bomb.onnx", nodes, {"w": np.ones((512, 3, 3, 3), np.float32),
                                                      "sc": np.array(0.1, np.float32), "z": np.array(0, np.int8)},
                      in_shape=(1, 3, 4096, 4096))
    with pytest.raises(aimcemu.FormatError, match=r"field 'input x': .*needs 3501\d{7} bytes"):
        convert_onnx(path)
