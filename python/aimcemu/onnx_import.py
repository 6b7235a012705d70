"""ONNX -> aimcemu INT8 network import (float models and onnxruntime QDQ models).

    net = aimcemu.import_onnx("model.onnx", calibration_data=images)     # float model
    net = aimcemu.import_onnx("model_qdq.onnx")                          # QDQ: scales from the file
    imported = convert_onnx("model_qdq.onnx")                            # plus scales and their moves
    for move in imported.scale_moves: print(move)

Each ONNX op becomes a framework-neutral node (aimcemu._netbuild, shared with the PyTorch
importer), which is mapped, fused and quantized exactly as import_torch does.  Float models are
calibrated with onnxruntime on ``calibration_data`` (max-abs or percentile, as import_torch).  In
a QDQ model (QuantizeLinear/DequantizeLinear pairs, as onnxruntime.quantization.quantize_static
writes them) each quantized tensor's range comes from its QuantizeLinear scale and zero point,
weights and biases are dequantized from the file, and each scale's move to the nearest power of
two that holds the same range is reported (``ScaleMove``).  A QuantizeLinear whose range starts
at 0 clamps negatives, so it stands for a ReLU (onnxruntime removes Relu nodes that way).

Anything that cannot be converted raises UnsupportedOperationError naming the file and every
offending node; an unreadable file or input without a known size raises aimcemu.FormatError.
"""
from __future__ import annotations

import collections
import logging
import math
import os
import stat
from dataclasses import dataclass

import numpy as np

from . import _core
from . import _netbuild as nb
from . import quantize as q
from . import validate
from ._netbuild import DEFAULT_PERCENTILE, ImportedModel, UnsupportedOperationError  # noqa: F401 (public)
from ._optional import require

onnx = require("onnx", "aimcemu.onnx_import (import_onnx)")
from onnx import numpy_helper  # noqa: E402

CALIBRATION_BATCH = 64
# Ops that only compute a reshape's target shape from a tensor's shape.  None of them makes a
# tensor whose size is a value (ConstantOfShape, Expand, Tile, Range): onnxruntime runs these
# ops, and a 1 KB file could make it allocate any amount of memory.
_SHAPE_OPS = {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice", "Mul", "Div"}
# Image dimensions (C, H, W) a model may take, from the file or input_shape.
MAX_IMAGE_DIM = nb.IMAGE_DIM_MAX
# Zero point types of QuantizeLinear/DequantizeLinear: the network holds int8, so a 16-bit or
# float8 QDQ tensor would silently lose bits.  A bias is dequantized from int32 (zero point 0).
_QDQ_TYPES = (np.int8, np.uint8)
# Scale types of QuantizeLinear/DequantizeLinear read as they are.
_SCALE_TYPES = (np.float32, np.float16, np.float64)
# The input element types the importer can feed images in (_Graph.input_dtype).
_INPUT_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
                onnx.TensorProto.DOUBLE: np.float64}


@dataclass
class ScaleMove:
    """How far a QDQ scale moved on import.  kind: "activation" or "weight"; qdq_scale: the
    file's scale (per-channel weights: the smallest and largest); pow2_scale = 2^-frac_bits, the
    scale the network uses; bits = log2(pow2_scale / qdq_scale) (0: exact; +1: one bit coarser)."""
    tensor: str
    kind: str
    qdq_scale: tuple[float, float]
    pow2_scale: float
    bits: tuple[float, float]

    def __str__(self) -> str:
        lo, hi = self.bits
        moved = f"{lo:+.2f}" if lo == hi else f"{lo:+.2f}..{hi:+.2f}"
        return f"{self.kind} {self.tensor}: scale {self.qdq_scale[0]:.4g} -> 2^{round(-math.log2(self.pow2_scale))} ({moved} bits)"


def import_onnx(path, calibration_data=None, input_shape=None, name: str | None = None, calibration: str = "max",
                percentile: float = DEFAULT_PERCENTILE) -> _core.Network:
    """Converts an ONNX CNN (float, or QDQ-quantized) to a resolved INT8 ``_core.Network``.

    calibration_data: float images [N, C, H, W] (an array or an iterable of batches); required for a
    float model, optional for a QDQ model (used only for tensors the file leaves unquantized).
    input_shape: (C, H, W), needed when the model's input has dynamic spatial dimensions."""
    return convert_onnx(path, calibration_data, input_shape, name, calibration, percentile).network


def convert_onnx(path, calibration_data=None, input_shape=None, name: str | None = None, calibration: str = "max",
                 percentile: float = DEFAULT_PERCENTILE) -> ImportedModel:
    """import_onnx, also returning every tensor's frac bits and, for QDQ models, the scale moves."""
    path = os.fspath(path)
    percentile = nb.check_calibration_method(calibration, percentile, path, calibration_data is not None)
    model = _load(path)
    graph = _Graph(model, path)
    nb.check_parameters(graph.nodes, path)
    chw = graph.input_chw(input_shape)
    graph.input_dtype()      # refused before any calibration work
    if calibration_data is None and not graph.qdq_ranges:
        raise _core.FormatError(f"{path}: field 'calibration_data': a float model (no QuantizeLinear) needs "
                                "calibration_data to choose its scales")
    stats = _run_onnxruntime(model, path, graph, chw, calibration_data)
    node_of = {n.name: n for n in graph.nodes}
    ranges = nb.ranges_from_statistics(stats, node_of, calibration, percentile) if calibration_data is not None \
        else nb.Ranges({}, {node_of[k]: v for k, v in stats.shape.items() if k in node_of})
    for node, max_abs in graph.qdq_ranges.items():
        ranges.max_abs[node] = max_abs            # the file's own scales win over calibration
    ranges.missing_range = lambda node: (f"tensor '{node.name}' has no QuantizeLinear; pass calibration_data "
                                         "to calibrate it")
    ranges.source = path
    name = name or graph.name
    imported = nb.build_network(graph.nodes, graph.output, ranges, name, path)
    imported.scale_moves = graph.scale_moves(imported)
    return imported


def _load(path: str):
    """The model with its external data read in (see _ExternalData), checked by onnx's checker.
    onnx.load is never let near external data: older versions follow links out of the model's
    folder and read devices and FIFOs without end."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError, ...
        raise _invalid_model(path, exc) from exc
    _check_nodes(model.graph, path)
    _ExternalData(path).read_into(model)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx's ValidationError, ...
        raise _invalid_model(path, exc) from exc
    return model


def external_data_files(path) -> list[str]:
    """The files the model's tensors keep their external data in (joined to the model's folder,
    as written; not checked, _ExternalData checks them when the model is read), for the CLI to
    refuse writing over one.  [] for a file that is no readable model: convert_onnx says why."""
    path = os.fspath(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # protobuf's DecodeError, ...: reported by convert_onnx
        return []
    folder = os.path.dirname(os.path.abspath(path))
    files = []
    try:
        for _, tensor in _all_tensors(model.graph):
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                location = next((e.value for e in tensor.external_data if e.key == "location"), "")
                if isinstance(location, str) and location and "\0" not in location:
                    file = os.path.join(folder, location)
                    if file not in files:
                        files.append(file)
    except Exception:  # a node without outputs, names that are not UTF-8, ...: _load refuses the model
        return []
    return files


def _check_nodes(graph, path: str, prefix: str = "") -> None:
    """Refuses (FormatError naming the file and the node) what every later message would trip on:
    a node's name, type, domain or tensor names that are not valid UTF-8 (protobuf hands them over
    as bytes), and a node without outputs (an unnamed node is named by its first output)."""
    for index, node in enumerate(graph.node):
        label = f"{prefix}node #{index}"
        for what, text in (("op type", node.op_type), ("domain", node.domain), ("name", node.name),
                           *(("input", name) for name in node.input), *(("output", name) for name in node.output)):
            if isinstance(text, bytes):
                raise _core.FormatError(f"{path}: field '{label} {what}': '{nb.printable(text)}' is not valid UTF-8")
        if not node.output:
            named = f", name '{nb.printable(node.name)}'" if node.name else ""
            raise _core.FormatError(f"{path}: field '{label} ({nb.printable(node.op_type)}{named})': the node has "
                                    "no outputs")
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _check_nodes(sub, path, f"{prefix}{label} attribute '{nb.printable(attr.name)}': ")


def _invalid_model(path: str, exc: Exception):
    first_line = str(exc).splitlines()[0] if str(exc) else "truncated or corrupt"
    return _core.FormatError(f"{path}: field 'model': not a valid ONNX model ({type(exc).__name__}: {first_line})")


# Bytes per element of the tensor types external data may hold (TensorProto.DataType); the rest
# (strings, 4-bit and 8-bit float types) are refused.
_EXTERNAL_ITEMSIZE = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.FLOAT16: 2,
                      onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1,
                      onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2, onnx.TensorProto.INT32: 4,
                      onnx.TensorProto.UINT32: 4, onnx.TensorProto.INT64: 8, onnx.TensorProto.UINT64: 8,
                      onnx.TensorProto.BOOL: 1}
# All external data of one model together (a float ResNet-152 holds 240 MB).
MAX_EXTERNAL_BYTES = 2 ** 31
# External tensors of one model (a ResNet-152 has about 800): bounds the work of a file of many
# empty ones, which MAX_EXTERNAL_BYTES does not.
MAX_EXTERNAL_TENSORS = 100_000


class _ExternalData:
    """Reads the external data of a model's tensors itself, the same way whatever the onnx version:
    a relative, non-empty location whose real path lies inside the model folder's real path, a
    regular file opened without following a last link and without blocking, the tensor's exact
    size within the file, MAX_EXTERNAL_BYTES in all.  Errors name the model and the tensor."""

    def __init__(self, path: str):
        self.path = path
        self.folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        self.total = 0
        self.tensors = 0
        self._files: dict[str, tuple[int, int]] = {}  # a checked file's real path -> (descriptor, size)

    def read_into(self, model) -> None:
        try:
            for label, tensor in _all_tensors(model.graph):
                if tensor.data_location == onnx.TensorProto.EXTERNAL:
                    tensor.raw_data = self._read(label, tensor)
                    del tensor.external_data[:]
                    tensor.data_location = onnx.TensorProto.DEFAULT
        finally:
            for fd, _ in self._files.values():
                os.close(fd)
            self._files.clear()

    def _fail(self, label: str, what: str):
        return _core.FormatError(f"{self.path}: field '{label}': external data {what}")

    def _read(self, label: str, tensor) -> bytes:
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if not location or "\0" in location:
            raise self._fail(label, f"location {location!r} must be a non-empty file name")
        if os.path.isabs(location):
            raise self._fail(label, f"location '{location}' must be a path relative to the model's folder")
        file = os.path.realpath(os.path.join(self.folder, location))
        if os.path.commonpath([self.folder, file]) != self.folder or file == self.folder:
            raise self._fail(label, f"location '{location}' points outside the model's folder {self.folder}")
        itemsize = _EXTERNAL_ITEMSIZE.get(tensor.data_type)
        if itemsize is None:
            raise self._fail(label, f"of type {onnx.TensorProto.DataType.Name(tensor.data_type)} is not supported")
        if any(int(d) < 0 for d in tensor.dims):
            raise self._fail(label, f"tensor of dims {list(tensor.dims)}: a dimension is negative")
        expected = math.prod(int(d) for d in tensor.dims) * itemsize
        offset = self._integer(label, info, "offset", 0)
        length = self._integer(label, info, "length", expected)
        if length != expected:
            raise self._fail(label, f"length {length} is not the {expected} bytes of dims {list(tensor.dims)}")
        self.total += expected
        self.tensors += 1
        if self.total > MAX_EXTERNAL_BYTES:
            raise self._fail(label, f"exceeds {MAX_EXTERNAL_BYTES} bytes over all tensors")
        if self.tensors > MAX_EXTERNAL_TENSORS:
            raise self._fail(label, f"is stored for more than {MAX_EXTERNAL_TENSORS} tensors")
        fd, size = self._opened(label, location, file)
        if offset + length > size:
            raise self._fail(label, f"offset {offset} + length {length} exceeds the size {size} of '{location}'")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise self._fail(label, f"file '{location}' shrank while being read")
        return data

    def _opened(self, label: str, location: str, file: str) -> tuple[int, int]:
        """(descriptor, size) of the checked `file`, opened once per model: the tensors of a
        model mostly share one file."""
        if file in self._files:
            return self._files[file]
        try:
            fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise self._fail(label, f"file '{location}' cannot be opened ({exc.strerror})") from None
        try:
            # The folders on the way may have been swapped for links since the check above
            # (O_NOFOLLOW guards the last name only): the file opened must be inside the folder too.
            opened = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else file
            if os.path.commonpath([self.folder, opened]) != self.folder:
                raise self._fail(label, f"location '{location}' points outside the model's folder {self.folder}")
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._fail(label, f"file '{location}' is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        self._files[file] = (fd, st.st_size)
        return self._files[file]

    def _integer(self, label: str, info: dict, key: str, default: int) -> int:
        if key not in info:
            return default
        try:
            value = int(info[key])
        except ValueError:
            raise self._fail(label, f"{key} {info[key]!r} is not an integer") from None
        if value < 0:
            raise self._fail(label, f"{key} {value} must be >= 0")
        return value


def _all_tensors(graph, prefix: str = ""):
    """(label, TensorProto) for every tensor stored in the graph: initializers, sparse
    initializers, node attributes, and those of subgraphs."""
    for tensor in graph.initializer:
        yield f"{prefix}initializer '{tensor.name}'", tensor
    for sparse in graph.sparse_initializer:
        yield f"{prefix}sparse initializer '{sparse.values.name}'", sparse.values
        yield f"{prefix}sparse initializer '{sparse.values.name}' indices", sparse.indices
    for index, node in enumerate(graph.node):
        where = f"{prefix}{_where(node, index)}"
        for attr in node.attribute:
            if attr.HasField("t"):
                yield f"{where} attribute '{attr.name}'", attr.t
            for tensor in attr.tensors:
                yield f"{where} attribute '{attr.name}'", tensor
            if attr.HasField("g"):
                yield from _all_tensors(attr.g, f"{where} attribute '{attr.name}': ")
            for sub in attr.graphs:
                yield from _all_tensors(sub, f"{where} attribute '{attr.name}': ")


def _tensor_array(tensor, where: str, path: str) -> np.ndarray:
    """A TensorProto as an array; its data disagreeing with its dims is a FormatError naming it."""
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:    # e.g. raw_data longer than the dims
        raise _core.FormatError(f"{path}: field '{where}': {exc}") from exc


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _where(node, index: int) -> str:
    if not node.name:
        return f"node #{index} ({node.op_type}, output '{nb.printable(node.output[0])}')"
    return f"node '{nb.printable(node.name)}' ({node.op_type})"


def _layer_name(node, index: int) -> str:
    """A layer name from the ONNX node: PyTorch's exporter writes '/layer1/0/conv1/Conv', which
    becomes 'layer1.0.conv1.Conv' ('/' cannot name an HDF5 group in the model file)."""
    name = (node.name or f"{node.op_type}_{index}").strip("/").replace("/", ".")
    return name or f"{node.op_type}_{index}"


def _qdq_range(scale: np.ndarray, zero_point: np.ndarray, dtype) -> tuple[float, float]:
    info = np.iinfo(dtype)
    s, z = float(np.max(scale)), float(np.max(zero_point)) if zero_point.size else 0.0
    return s * (info.min - z), s * (info.max - z)


def _broadcast_shape(values: np.ndarray, scale, axis: int) -> list[int]:
    """The shape that lines a per-axis scale (or zero point) up with values' axis."""
    shape = [1] * values.ndim
    if np.size(scale) > 1:
        shape[axis % values.ndim] = -1
    return shape


def _dequantize(values: np.ndarray, scale: np.ndarray, zero_point, axis: int) -> np.ndarray:
    shape = _broadcast_shape(values, scale, axis)
    zp = np.zeros(1) if zero_point is None else np.asarray(zero_point, dtype=np.float64)
    zp_shape = shape if zp.size > 1 else [1] * values.ndim
    return (values.astype(np.float64) - zp.reshape(zp_shape)) * np.asarray(scale, dtype=np.float64).reshape(shape)


def _quantize(values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    shape = _broadcast_shape(values, scale, axis)
    info = np.iinfo(zero_point.dtype)
    zp_shape = shape if zero_point.size > 1 else [1] * values.ndim
    scaled = np.rint(values / np.asarray(scale, dtype=np.float64).reshape(shape)) + zero_point.astype(np.float64).reshape(zp_shape)
    return np.clip(scaled, info.min, info.max).astype(zero_point.dtype)


class _Graph:
    """The ONNX graph as _netbuild nodes: data tensors become nodes, constants are folded, Q/DQ
    pairs on data are dropped (their scales kept as the tensor's range)."""

    def __init__(self, model, path: str):
        self.path = path
        self.name = model.graph.name or os.path.splitext(os.path.basename(path))[0]
        g = model.graph
        self.const = {init.name: _tensor_array(init, f"initializer '{init.name}'", path) for init in g.initializer}
        inputs = [i for i in g.input if i.name not in self.const]
        if len(inputs) != 1:
            raise UnsupportedOperationError([("graph inputs", f"the model must take exactly one input, it takes "
                                                              f"{len(inputs)}")], path)
        self.input_info = inputs[0]
        self.input = nb.Node(inputs[0].name, f"input '{inputs[0].name}'", "input")
        self.value: dict[str, nb.Node] = {inputs[0].name: self.input}
        self.shape_values: set[str] = set()
        self.nodes = [self.input]
        self.qdq_ranges: dict[nb.Node, float] = {}
        self.activation_scales: dict[nb.Node, float] = {}
        self.weight_scales: dict[nb.Node, np.ndarray] = {}
        self.dq_scale_of: dict[str, np.ndarray] = {}     # dequantized constant -> its scales
        self.int32_dequantized: set[str] = set()          # constants dequantized from int32 (biases only)
        # A QuantizeLinear's output on data -> (its scales, zero point, the node as messages name it),
        # which the DequantizeLinear reading it must repeat.
        self.quantized_by: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
        # Outputs that would have been constants but for a refused node (a refused fold, or a fold
        # of such an output): a node needing one as a constant is not reported a second time.
        self.refused_constants: set[str] = set()
        # How often each tensor is read: by a node's input, or as a graph output.
        self.readers = collections.Counter([name for node in g.node for name in node.input if name] +
                                           [out.name for out in g.output])
        # The operator types that read each tensor: a QuantizeLinear whose DequantizeLinear feeds an
        # explicit Relu or Clip in the file does not stand for a removed one.
        self.reader_ops: dict[str, set[str]] = collections.defaultdict(set)
        self.dequantized_by: dict[str, list[str]] = collections.defaultdict(list)   # Q output -> DQ outputs
        for node in g.node:
            for name in filter(None, node.input):
                self.reader_ops[name].add(node.op_type)
            if node.op_type == "DequantizeLinear" and node.input and node.output:
                self.dequantized_by[node.input[0]].extend(node.output)
        problems = []
        for index, node in enumerate(g.node):
            try:
                self._convert(node, index)
            except _Skip as exc:
                if not isinstance(exc, _SkipFollowing):
                    problems.append((_where(node, index), str(exc)))
                if self._only_constants(node.input):
                    self.refused_constants.update(node.output)
                for out in node.output:   # stand-ins, so that later nodes still get checked
                    self.value.setdefault(out, nb.Node(out, out, "identity"))
        if len(g.output) != 1:
            problems.append(("graph outputs", f"the model must return one tensor, it returns {len(g.output)}"))
        elif g.output[0].name not in self.value:
            out = nb.printable(g.output[0].name)
            kind = ("a shape" if g.output[0].name in self.shape_values else
                    "a constant (an initializer or Constant)" if g.output[0].name in self.const else
                    "not computed by any node")
            problems.append((f"graph output '{out}'", f"it is {kind}, not a tensor computed from the input image"))
        if problems:
            raise UnsupportedOperationError(problems, path)
        self.output = self.value[g.output[0].name]
        for node in self.nodes:
            for source in node.inputs:
                source.users += 1
        self.output.users += 1

    # -- input

    def _input_dims(self) -> list:
        """The input's dims, None where dynamic (no dim_value, or a dim_value of 0 or below)."""
        return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in self.input_info.type.tensor_type.shape.dim]

    def input_dtype(self) -> type:
        """The NumPy type of the images the model takes (calibration batches and the shape pass's
        zero image are fed in it): float, float16 or double.  Anything else is refused naming the
        input: an integer input has no float range to calibrate, and bfloat16 has no NumPy type."""
        elem = self.input_info.type.tensor_type.elem_type
        if elem not in _INPUT_TYPES:
            name = onnx.TensorProto.DataType.Name(elem) if elem in onnx.TensorProto.DataType.values() else str(elem)
            raise _core.FormatError(f"{self.path}: field 'input '{nb.printable(self.input_info.name)}'': element "
                                    f"type {name} is not supported (expected FLOAT, FLOAT16 or DOUBLE images)")
        return _INPUT_TYPES[elem]

    def fixed_batch(self) -> int | None:
        """The batch size the file fixes (torch.onnx.export writes 1 unless told otherwise), or None."""
        return self._input_dims()[0]

    def input_chw(self, input_shape) -> tuple[int, int, int]:
        dims = self._input_dims()
        where = f"input '{self.input_info.name}'"
        if len(dims) != 4:
            raise _core.FormatError(f"{self.path}: field '{where}': expected images [N, C, H, W], got rank {len(dims)}")
        if dims[0] is not None and dims[0] > MAX_IMAGE_DIM:
            raise _core.FormatError(f"{self.path}: field '{where}': batch size {dims[0]} is above {MAX_IMAGE_DIM}")
        if input_shape is not None:
            chw = tuple(int(v) for v in input_shape)
            if len(chw) != 3 or any(d is not None and d != v for d, v in zip(dims[1:], chw)):
                raise _core.FormatError(f"{self.path}: field '{where}': input_shape {tuple(input_shape)} does not "
                                        f"fit the model's [N, C, H, W] = {dims}")
        elif any(d is None for d in dims[1:]):
            raise _core.FormatError(f"{self.path}: field '{where}': dynamic shape {dims} (None = dynamic); pass "
                                    "input_shape=(C, H, W) (CLI: --input-shape C,H,W)")
        else:
            chw = tuple(dims[1:])
        if not all(1 <= v <= MAX_IMAGE_DIM for v in chw):
            raise _core.FormatError(f"{self.path}: field '{where}': image shape (C, H, W) = {chw} must lie in "
                                    f"1..{MAX_IMAGE_DIM} per dimension")
        return chw

    # -- one ONNX node

    def _data(self, name: str) -> nb.Node:
        if name not in self.value:
            raise _Skip(f"input '{name}' is neither a tensor computed from the image nor a constant")
        return self.value[name]

    def _only_constants(self, inputs) -> bool:
        """Whether every given input is a constant, or would be one but for a refused node."""
        return all(i in self.const or i in self.refused_constants or i == "" for i in inputs)

    def _constant(self, name: str, what: str) -> np.ndarray:
        if name not in self.const:
            if name in self.refused_constants:
                raise _SkipFollowing()
            raise _Skip(f"its {what} ('{name}') must be a constant (an initializer)")
        return self.const[name]

    def _add(self, node, index: int, tag: str, inputs: list[nb.Node], **fields) -> nb.Node:
        where = _layer_name(node, index)
        nb.check_layer_name(where, self.path, f"{_where(node, index)} name")
        made = nb.Node(node.output[0], where, tag, inputs, **fields)
        self.nodes.append(made)
        self.value[node.output[0]] = made
        return made

    def _convert(self, node, index: int) -> None:
        op, ins = node.op_type, list(node.input)
        if node.domain not in ("", "ai.onnx"):
            raise _Skip(f"operator domain '{node.domain}' is not supported")
        if op == "Constant":
            value = _attrs(node).get("value")
            if value is None:
                raise _Skip("only a Constant with a dense 'value' tensor is supported")
            self.const[node.output[0]] = _tensor_array(value, _where(node, index), self.path)
            return
        if ins and op in _FOLDED_OPS and self._only_constants(ins):
            if any(i in self.refused_constants for i in ins):
                self.refused_constants.update(node.output)   # a fold of a refused constant: nothing to add
            else:
                self._fold_constant(node, index)
            return
        if self._computes_a_shape(op, ins):
            self.shape_values.update(node.output)
            return
        handler = getattr(self, "_op_" + op, None)
        if handler is None:
            raise _Skip(f"{op} is not supported")
        handler(node, index, ins, _attrs(node))

    def _computes_a_shape(self, op: str, ins: list[str]) -> bool:
        """Shape(x), and shape ops on its results and constants: they only feed a Reshape's
        target shape (x.view(x.size(0), -1) exports that way) and carry no tensor data."""
        if op == "Shape":
            return True
        used = [i for i in ins if i]
        return (op in _SHAPE_OPS and any(i in self.shape_values for i in used)
                and all(i in self.shape_values or i in self.const for i in used))

    def _fold_constant(self, node, index: int) -> None:
        op, a = node.op_type, _attrs(node)
        x = self.const[node.input[0]]
        if op in ("QuantizeLinear", "DequantizeLinear"):
            _refuse_blocked(a)
        if op == "QuantizeLinear":
            zp = _quantize_zero_point(self.const[node.input[2]] if len(node.input) > 2 and node.input[2] else None, a)
            self._check_qdq(node, index, x, self.const[node.input[1]], zp, a.get("axis", 1))
            value = _quantize(x.astype(np.float64), self.const[node.input[1]], zp, a.get("axis", 1))
        elif op == "DequantizeLinear":
            zp = self.const[node.input[2]] if len(node.input) > 2 and node.input[2] else None
            self._check_qdq(node, index, x, self.const[node.input[1]], zp, a.get("axis", 1), dequantize=True)
            value = _dequantize(x, self.const[node.input[1]], zp, a.get("axis", 1))
            self.dq_scale_of[node.output[0]] = np.atleast_1d(self.const[node.input[1]]).astype(np.float64)
            if x.dtype == np.int32:
                self.int32_dequantized.add(node.output[0])
        elif op == "Transpose":
            value = np.transpose(x, a.get("perm"))
        elif op == "Cast":
            value = x.astype(_cast_type(a.get("to")))
        else:  # Identity
            value = x
        self.const[node.output[0]] = value

    def _check_qdq(self, node, index: int, values: np.ndarray, scale: np.ndarray, zero_point, axis: int,
                   dequantize: bool = False) -> None:
        """Scales finite and > 0, one per tensor or one per index of axis; int8/uint8 data (a
        dequantized bias: int32 with zero point 0).  Bad numbers are a FormatError, other types
        unsupported (_Skip)."""
        field = f"{self.path}: field '{_where(node, index)}'"
        scale = np.asarray(scale)
        if scale.dtype not in _SCALE_TYPES:     # bfloat16 (an ml_dtypes type, not a NumPy float), integers, ...
            raise _Skip(f"a scale of type {scale.dtype.name} is not supported (only float32, float16 and float64)")
        if not np.isfinite(scale).all() or not (scale > 0).all():
            raise _core.FormatError(f"{field}: scale must be finite and > 0, got {scale.ravel()[:4].tolist()}")
        if scale.ndim > 1:
            raise _core.FormatError(f"{field}: scale of shape {list(scale.shape)} must be a scalar or 1-D")
        if scale.size > 1:
            if scale.ndim != 1 or not -values.ndim <= axis < values.ndim or scale.size != values.shape[axis]:
                raise _core.FormatError(f"{field}: per-axis scale of shape {list(scale.shape)} does not match axis "
                                        f"{axis} of the quantized tensor of shape {list(values.shape)}")
        data_type = values.dtype if dequantize else np.asarray(zero_point).dtype
        bias = dequantize and data_type == np.int32 and (zero_point is None or not np.any(zero_point))
        if data_type not in _QDQ_TYPES and not bias:
            raise _Skip(f"{data_type} quantization is not supported (only int8 and uint8: the network holds "
                        "int8)")
        if zero_point is not None and np.size(zero_point) not in (1, scale.size):
            raise _core.FormatError(f"{field}: zero point of shape {list(np.shape(zero_point))} does not match the "
                                    f"scale's {list(scale.shape)}")

    def _weight(self, name: str, what: str) -> np.ndarray:
        if name in self.int32_dequantized and what not in ("bias", "addend"):
            # int32 is a bias's type in QDQ files (accumulator scale); a weight in it would lose bits
            # in int8 unnoticed, as a 16-bit one would (refused in _check_qdq).
            raise _Skip(f"its {what} ('{nb.printable(name)}') is dequantized from int32, which is supported only "
                        "for a bias (weights: int8 or uint8)")
        return np.asarray(self._constant(name, what), dtype=np.float64)

    def _note_weight_scale(self, made: nb.Node, weight_name: str) -> None:
        scales = self.dq_scale_of.get(weight_name)
        if scales is not None:
            self.weight_scales[made] = scales

    # -- Q/DQ on data: aliases that carry a range

    def _op_QuantizeLinear(self, node, index, ins, a):
        _refuse_blocked(a)
        source = self._data(ins[0])
        scale = self._constant(ins[1], "scale")
        zp = _quantize_zero_point(self._constant(ins[2], "zero point") if len(ins) > 2 and ins[2] else None, a)
        if np.size(scale) != 1 or np.size(zp) != 1:
            raise _Skip("per-channel quantization of an activation is not supported (the format has one scale per tensor)")
        self._check_qdq(node, index, np.zeros(()), scale, zp, a.get("axis", 1))
        lo, hi = _qdq_range(scale, zp, zp.dtype)
        implied_clamp = lo >= 0.0 and source.tag not in ("relu", "input")
        _refuse_clamps_the_datapath_lacks(lo, hi, zp, implied_clamp and not self._clamped_downstream(node.output[0]))
        if implied_clamp:
            # Saturation at 0 is a ReLU (onnxruntime drops Relu nodes this way); make it explicit.
            source = self._add(node, index, "relu", [source])
            source.where = f"{_layer_name(node, index)}.implied_relu"   # uint8 saturation at 0 is the ReLU
        self.qdq_ranges[source] = max(abs(lo), abs(hi))
        self.activation_scales[source] = float(np.max(scale))
        self.value[node.output[0]] = source
        self.quantized_by[node.output[0]] = (np.asarray(scale, np.float64).ravel(), zp, _where(node, index))

    def _clamped_downstream(self, quantized: str) -> bool:
        """Whether every DequantizeLinear of a QuantizeLinear's output feeds an explicit Relu or Clip
        (onnxruntime's QDQKeepRemovableActivations keeps them, and gives the Q before them their
        range): the clamp is then the file's own node, imported (a Relu) or refused (a Clip) there,
        not a removed one that only this range reveals."""
        dequantized = self.dequantized_by.get(quantized, [])
        return bool(dequantized) and all(self.reader_ops.get(name) and self.reader_ops[name] <= {"Relu", "Clip"}
                                         for name in dequantized)

    def _op_DequantizeLinear(self, node, index, ins, a):
        """DequantizeLinear(QuantizeLinear(x)) with the same scale and zero point is x rounded to the
        file's grid: an alias of x carrying its range.  Any other pair rescales or shifts x, which
        the importer would silently drop, so it is refused."""
        _refuse_blocked(a)
        source = self._data(ins[0])
        if ins[0] not in self.quantized_by:
            if source.tag == "identity" and source.name == source.where == ins[0]:
                raise _SkipFollowing()       # the stand-in of a refused node, reported there
            raise _Skip(f"its input '{nb.printable(ins[0])}' is not the output of a QuantizeLinear (only "
                        "QuantizeLinear -> DequantizeLinear pairs on data are supported)")
        q_scale, q_zero_point, q_where = self.quantized_by[ins[0]]
        scale = np.asarray(self._constant(ins[1], "scale"), np.float64).ravel()
        zero_point = self._constant(ins[2], "zero point") if len(ins) > 2 and ins[2] else None
        zero_point = np.zeros((), q_zero_point.dtype) if zero_point is None else np.asarray(zero_point)
        if not np.array_equal(scale, q_scale):
            raise _Skip(f"its scale {_numbers(scale)} differs from the scale {_numbers(q_scale)} of "
                        f"{q_where}, which quantized its input (the pair would rescale the tensor)")
        if zero_point.dtype != q_zero_point.dtype or not np.array_equal(zero_point.ravel(), q_zero_point.ravel()):
            raise _Skip(f"its zero point {_numbers(zero_point)} ({zero_point.dtype}) differs from the zero point "
                        f"{_numbers(q_zero_point)} ({q_zero_point.dtype}) of {q_where}, "
                        "which quantized its input (the pair would shift the tensor)")
        self.value[node.output[0]] = source

    # -- layers

    def _op_Conv(self, node, index, ins, a):
        x = self._data(ins[0])
        weight = self._weight(ins[1], "weight")
        if weight.ndim != 4:
            raise _Skip(f"only 2-D convolutions are supported (weight of rank {weight.ndim})")
        if a.get("group", 1) != 1:
            raise _Skip(f"grouped convolution (group={a['group']}) is not supported")
        geometry = self._geometry(a, weight.shape[2:])
        bias = self._weight(ins[2], "bias") if len(ins) > 2 and ins[2] else None
        made = self._add(node, index, "conv", [x], geometry=geometry, weight=weight, bias=bias)
        self._note_weight_scale(made, ins[1])

    @staticmethod
    def _geometry(a: dict, kernel_hw, exclude_pad: bool = False) -> nb.WindowGeometry:
        """kernel_shape, strides, pads ([top, left, bottom, right]) or auto_pad of a Conv or pool;
        dilations and ceil_mode, which the format lacks, are refused naming the attribute."""
        dilations = [int(d) for d in a.get("dilations", [1, 1])]
        if any(d != 1 for d in dilations):
            raise _Skip(f"attribute dilations={dilations} is not supported (only 1)")
        if a.get("ceil_mode", 0):
            raise _Skip("attribute ceil_mode=1 is not supported (output sizes round down)")
        kernel = [int(k) for k in a.get("kernel_shape", kernel_hw)]
        stride = [int(s) for s in a.get("strides", [1, 1])]
        if len(kernel) != 2 or len(stride) != 2:
            raise _Skip(f"only 2-D windows are supported (kernel_shape={kernel}, strides={stride})")
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            same = "upper" if auto_pad == "SAME_UPPER" else "lower"
            return nb.WindowGeometry(tuple(kernel), tuple(stride), same=same, exclude_pad=exclude_pad)
        if auto_pad == "VALID":
            return nb.WindowGeometry(tuple(kernel), tuple(stride), exclude_pad=exclude_pad)
        if auto_pad != "NOTSET":
            raise _Skip(f"attribute auto_pad={auto_pad} is not supported")
        pads = [int(p) for p in a.get("pads", [0, 0, 0, 0])]
        if len(pads) != 4:
            raise _Skip(f"attribute pads={pads} must hold 4 values (top, left, bottom, right)")
        top, left, bottom, right = pads
        return nb.WindowGeometry(tuple(kernel), tuple(stride), (top, bottom, left, right), exclude_pad=exclude_pad)

    def _op_BatchNormalization(self, node, index, ins, a):
        """Inference mode only: training_mode=1 (opset 14+), or the running-statistics outputs of
        older opsets, normalise by the batch's own statistics.  Opset 7's spatial=0 (one
        statistic per element) and parameters that are not one value per channel ([C]) are
        refused too: the fold takes one scale and shift per channel."""
        x = self._data(ins[0])
        if a.get("training_mode", 0):
            raise _Skip("training_mode=1 (normalises by the batch's statistics) is not supported (only inference "
                        "mode, training_mode=0)")
        if any(node.output[1:]):
            raise _Skip(f"outputs beyond the first ({[nb.printable(o) for o in node.output[1:] if o]}: running or "
                        "saved statistics) mean training mode, which is not supported (only inference mode)")
        if a.get("spatial", 1) != 1:
            raise _Skip(f"attribute spatial={a['spatial']} (one statistic per element) is not supported (only "
                        "spatial=1: one per channel)")
        if len(ins) < 5 or not all(ins[1:5]):
            raise _Skip("it needs its four inputs scale, bias, mean and var")
        gamma, beta, mean, var = (self._weight(n, w) for n, w in zip(ins[1:5], ("scale", "bias", "mean", "var")))
        shapes = [list(np.shape(v)) for v in (gamma, beta, mean, var)]
        if any(len(shape) != 1 for shape in shapes) or len({shape[0] for shape in shapes}) != 1:
            raise _Skip(f"its scale, bias, mean and var of shapes {shapes} must each be [C] (one value per "
                        "channel)")
        self._add(node, index, "bn", [x], bn=nb.BatchNorm(gamma, beta, mean, var, float(a.get("epsilon", 1e-5))))

    def _op_Relu(self, node, index, ins, a):
        self._add(node, index, "relu", [self._data(ins[0])])

    def _op_Gemm(self, node, index, ins, a):
        x = self._data(ins[0])
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            raise _Skip("only Gemm with transA=0, alpha=1, beta=1 is supported")
        weight = self._weight(ins[1], "weight")
        weight = weight if a.get("transB", 0) else weight.T          # -> [out, in]
        bias = self._gemm_bias(self._weight(ins[2], "bias"), weight.shape[0]) if len(ins) > 2 and ins[2] else None
        made = self._add(node, index, "linear", [x], weight=weight, bias=bias)
        self._note_weight_scale(made, ins[1])

    @staticmethod
    def _gemm_bias(c: np.ndarray, outputs: int) -> np.ndarray:
        """Gemm's C, which ONNX broadcasts to [batch, outputs], as one bias per output: C may hold
        one value for all outputs or one per output ([outputs] or [1, outputs]); a C that varies
        along the batch is no bias."""
        if c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1) or (c.ndim >= 1 and c.shape[-1] not in (1, outputs)):
            raise _Skip(f"a bias C of shape {list(c.shape)} is not supported (one value, or one per output: "
                        f"[{outputs}] or [1, {outputs}])")
        return np.broadcast_to(c.reshape(-1), (outputs,)).copy()

    def _op_MatMul(self, node, index, ins, a):
        x = self._data(ins[0])
        weight = self._weight(ins[1], "weight")
        if weight.ndim != 2:
            raise _Skip("only a matrix product with a constant [in, out] matrix is supported")
        made = self._add(node, index, "linear", [x], weight=weight.T)
        self._note_weight_scale(made, ins[1])

    def _op_Add(self, node, index, ins, a):
        data = [i for i in ins if i in self.value]
        if len(data) == 2:
            self._add(node, index, "add", [self.value[ins[0]], self.value[ins[1]]])
            return
        x = self._data(data[0]) if data else self._data(ins[0])
        const_name = ins[1] if ins[0] == data[0] else ins[0]
        addend = self._weight(const_name, "addend")
        # x + b after a bias-less MatMul (how some exporters write Linear): the layer's bias, when
        # this Add is the MatMul output's only reader (another reader needs it without the bias),
        # and b broadcasts as a bias does, the rule of Gemm's C: one value, or one per output
        # ([out] or [1, out]); an [out, 1] would add row i to image i of a batch of out.
        if x.tag == "linear" and x.bias is None and self._read_once(x):
            outputs = x.weight.shape[0]
            if addend.ndim > 2 or (addend.ndim == 2 and addend.shape[0] != 1) or \
                    (addend.ndim >= 1 and addend.shape[-1] not in (1, outputs)):
                raise _Skip(f"a constant addend of shape {list(addend.shape)} after a MatMul is not a bias (only one "
                            f"value, or one per output: [{outputs}] or [1, {outputs}])")
            x.bias = np.broadcast_to(addend.reshape(-1), (outputs,)).copy()
            self.value[node.output[0]] = x
            return
        raise _Skip("adding a constant is supported only as the bias of a preceding MatMul whose output only this "
                    "Add reads")

    def _read_once(self, made: nb.Node) -> bool:
        """Whether the ONNX graph reads made's value exactly once.  Its names are the producing
        node's output and the QuantizeLinear/DequantizeLinear outputs that alias it; each alias
        but the first is made by one reader of another alias, the rest are readers of the value."""
        aliases = [name for name, value in self.value.items() if value is made]
        return sum(self.readers[name] for name in aliases) - (len(aliases) - 1) == 1

    def _op_MaxPool(self, node, index, ins, a):
        if len(node.output) > 1 and node.output[1]:
            raise _Skip("the indices output is not supported")
        self._add(node, index, "max_pool", [self._data(ins[0])], geometry=self._geometry(a, a["kernel_shape"]))

    def _op_AveragePool(self, node, index, ins, a):
        geometry = self._geometry(a, a["kernel_shape"], exclude_pad=not a.get("count_include_pad", 0))
        self._add(node, index, "avg_pool", [self._data(ins[0])], geometry=geometry)

    def _op_GlobalAveragePool(self, node, index, ins, a):
        self._add(node, index, "global_avg_pool", [self._data(ins[0])])

    def _op_Flatten(self, node, index, ins, a):
        if a.get("axis", 1) != 1:
            raise _Skip(f"Flatten(axis={a['axis']}) is not supported (only axis=1)")
        self._add(node, index, "flatten", [self._data(ins[0])])

    def _op_Reshape(self, node, index, ins, a):
        if len(ins) < 2 or not ins[1]:
            raise _Skip("a Reshape without a shape input (opset 4 and below, which give the shape as an attribute) "
                        "is not supported (only opset 5 and above)")
        if ins[1] not in self.const and ins[1] not in self.shape_values:
            raise _Skip("the target shape must be a constant or computed from the input's shape")
        self._add(node, index, "flatten", [self._data(ins[0])])   # the mapper accepts [N, features] only

    def _op_Dropout(self, node, index, ins, a):
        """Identity in inference mode, the default; training_mode true (a constant) drops values at
        random, and one computed from data cannot be known: both refused."""
        if len(ins) > 2 and ins[2]:
            if ins[2] not in self.const:
                raise _Skip(f"its training_mode ('{nb.printable(ins[2])}') must be a constant (false)")
            if np.any(self.const[ins[2]]):
                raise _Skip("training_mode=true (drops values at random) is not supported (only inference mode)")
        self._op_Identity(node, index, ins, a)

    def _op_Identity(self, node, index, ins, a):
        self._add(node, index, "identity", [self._data(ins[0])])

    # -- report

    def scale_moves(self, imported: ImportedModel) -> list[ScaleMove]:
        """Per quantized tensor, the QDQ scale against the power-of-two scale the network uses."""
        moves = []
        frac_of_node = {imported.sources[i]: f for i, f in enumerate(imported.frac_bits)}
        frac_of_node[self.input.name] = imported.input_frac_bits
        for node, scale in self.activation_scales.items():
            if node.name in frac_of_node:
                pow2 = 2.0 ** -frac_of_node[node.name]
                moves.append(ScaleMove(node.name, "activation", (scale, scale), pow2, (math.log2(pow2 / scale),) * 2))
        for node, scales in self.weight_scales.items():
            layer = next((i for i, layer in enumerate(imported.network.layers) if layer.name == node.where), None)
            if layer is None or imported.weight_frac_bits[layer] is None:
                continue
            pow2 = 2.0 ** -imported.weight_frac_bits[layer]
            bits = np.log2(pow2 / scales)
            moves.append(ScaleMove(node.where, "weight", (float(scales.min()), float(scales.max())), pow2,
                                   (float(bits.min()), float(bits.max()))))
        return moves


# The upper bound of a QuantizeLinear's range that marks a ReLU6 (Clip 0..6) which onnxruntime's
# quantizer removed: it calibrates the Clip's input to the Clip's output range, 0..6.
_RELU6_TOP = 6.0


def _refuse_clamps_the_datapath_lacks(lo: float, hi: float, zero_point: np.ndarray, implied_clamp: bool) -> None:
    """Refuses a QuantizeLinear whose saturation is part of what the model computes and which the
    PU cannot compute: the PU has a ReLU (a clamp at 0 from below) and int8 saturation at
    127 * 2^-f, a power of two that never lands on an arbitrary top (docs/arithmetic.md).
    - hi <= 0 (uint8 with zero point 255, int8 with 127): every positive value becomes 0.
    - an implied clamp to 0..6: onnxruntime's quantize_static removes a ReLU6 (Clip 0..6) this way,
      and importing it as a ReLU would let values reach 7.94 instead of 6.  Not when the file keeps
      its Relu or Clip after the pair (QDQKeepRemovableActivations): the caller passes
      implied_clamp False then.
    An implied clamp to any other 0..hi is a removed Relu or a removed Clip(0, hi), which the file
    cannot tell apart; it imports as a ReLU (docs/import.md says how to keep Clips in the file)."""
    z = zero_point.ravel()[0].item()
    if hi <= 0.0:
        raise _Skip(f"its range {lo:.6g}..{hi:.6g} ({zero_point.dtype} with zero point {z}) clamps every positive "
                    "value to 0, which the datapath cannot compute (its only clamp at 0 is a ReLU, which keeps the "
                    "positive values)")
    if implied_clamp and math.isclose(hi, _RELU6_TOP, rel_tol=1e-6):
        saturates_at = 127 * 2.0 ** -q.frac_bits_for_range(hi)
        raise _Skip(f"its range 0..{hi:.6g} ({zero_point.dtype} with zero point {z}) clamps at 6: a ReLU6 "
                    "(Clip 0..6) that onnxruntime's quantizer removed; the datapath has ReLU only and its "
                    f"power-of-two scale cannot saturate at 6 (it would at {saturates_at:g}), so it would be "
                    "imported as a plain ReLU (a plain ReLU whose calibrated range happens to end at 6 imports "
                    "when quantized with extra_options={'QDQKeepRemovableActivations': True})")


def _numbers(values: np.ndarray, shown: int = 4) -> str:
    """Up to `shown` values of an array for a message (floats to 7 significant digits)."""
    flat = np.asarray(values).ravel()
    text = ", ".join(f"{v:.7g}" if flat.dtype.kind == "f" else str(v) for v in flat[:shown].tolist())
    return f"[{text}{', ...' if flat.size > shown else ''}]"


def _refuse_blocked(a: dict) -> None:
    """Blocked quantization (opset 21's block_size: one scale per block of an axis) is not
    supported: the format has one scale per tensor, and per-axis scales are all the importer maps."""
    if a.get("block_size", 0):
        raise _Skip(f"blocked quantization (attribute block_size={a['block_size']}) is not supported (only a scale "
                    "per tensor or per index of one axis)")


def _quantize_zero_point(zero_point, a: dict) -> np.ndarray:
    """A QuantizeLinear's zero point: its input, or, when it has none, 0 of the type its
    output_dtype attribute names (opset 21), uint8 when neither is given.  A zero point of another
    type than output_dtype is refused; only int8 and uint8 are supported (the network holds int8)."""
    to = a.get("output_dtype", 0)
    named = {onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8}
    if to and to not in named:
        raise _Skip(f"QuantizeLinear to {onnx.TensorProto.DataType.Name(to)} is not supported (only int8 and uint8: "
                    "the network holds int8)")
    if zero_point is None:
        return np.zeros((), named.get(to, np.uint8))
    zero_point = np.asarray(zero_point)
    if to and zero_point.dtype != np.dtype(named[to]):
        raise _Skip(f"QuantizeLinear's zero point is {zero_point.dtype} but its output_dtype is "
                    f"{onnx.TensorProto.DataType.Name(to)}")
    return zero_point


def _cast_type(to) -> np.dtype:
    """The NumPy type of a Cast's ``to``; only the numeric types a weight can take."""
    names = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
             onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8,
             onnx.TensorProto.INT16: np.int16, onnx.TensorProto.UINT16: np.uint16, onnx.TensorProto.INT32: np.int32,
             onnx.TensorProto.UINT32: np.uint32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.UINT64: np.uint64,
             onnx.TensorProto.BOOL: np.bool_}
    if to not in names:
        raise _Skip(f"Cast to type {to} of a constant is not supported (only numeric types)")
    return np.dtype(names[to])


class _Skip(Exception):
    """One node cannot be converted (collected, then raised together)."""


class _SkipFollowing(_Skip):
    """A node needs as a constant what a refused node would have made a constant: not reported
    again (the first refusal says what to fix; this one would only name its consequence)."""


# Ops on constants the importer evaluates at import (weights stored as floats and quantized in the
# graph, transposed or cast weights).
_FOLDED_OPS = ("QuantizeLinear", "DequantizeLinear", "Identity", "Transpose", "Cast")


def _run_onnxruntime(model, path: str, graph: _Graph, chw, calibration_data) -> nb.RangeStatistics:
    """Runs the float graph with every node's value as an output: ranges over the calibration
    data, or (without it) the shapes from one zero image.  Every value of a run is kept: calibration
    batches are cut to MAX_RUN_BYTES of them (at least one image), and a network whose values for
    one image (or for the batch its file fixes) exceed what the machine can give is refused."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    for node in graph.nodes[1:]:
        if node.name not in existing:
            probe.graph.output.append(onnx.ValueInfoProto(name=node.name))
    input_name = graph.input.name
    per_image = _bytes_per_image(model, input_name, chw)
    _refuse_if_too_large(path, graph, f"one image of shape (C, H, W) = {tuple(chw)}", per_image)
    batch_size = graph.fixed_batch()
    if calibration_data is None:
        return _shape_pass(probe, path, graph, chw, batch_size, per_image)
    if batch_size:
        _refuse_if_too_large(path, graph, f"the batch of {batch_size} images its file fixes", batch_size * per_image)
    session = _session(probe, path)
    names = [o.name for o in session.get_outputs()]
    stats = nb.RangeStatistics(path)
    order = _graph_order(graph, names)
    where = {n.name: f"{n.where} (output '{n.name}')" for n in graph.nodes[1:]}
    where[input_name] = "calibration_data"
    batches = _batches(calibration_data, chw, path)
    batches = _fixed_size(batches, batch_size, path) if batch_size else _cut(batches, max(1, MAX_RUN_BYTES // per_image))
    dtype = graph.input_dtype()
    count = 0
    for batch in batches:
        batch = _as_input_type(batch, dtype, path, count)
        try:
            outputs = session.run(names, {input_name: batch})
        except Exception as exc:  # onnxruntime's own error types
            raise _core.FormatError(f"{path}: field 'calibration_data': onnxruntime failed on batch {count} "
                                    f"(counting from 0): {_first_line(exc)}") from exc
        value_of = dict(zip(names, outputs))
        for key in order:
            value = batch if key == input_name else value_of[key]
            stats.update(key, value, where.get(key, key))
            stats.shape[key] = tuple(value.shape[1:])
        count += 1
    if count == 0:
        raise _core.FormatError(f"{path}: field 'calibration_data': holds no images")
    return stats


def _graph_order(graph: _Graph, names: list[str]) -> list[str]:
    """The input and the session's outputs in graph order, so that a NaN or Inf is reported at the
    node that first produces it."""
    value_names = set(names)
    order = [graph.input.name, *[n.name for n in graph.nodes[1:] if n.name in value_names]]
    listed = set(order)
    return order + [name for name in names if name not in listed]


def _shape_pass(probe, path: str, graph: _Graph, chw, batch_size: int | None, per_image: int) -> nb.RangeStatistics:
    """Every value's per-image shape, from onnxruntime on one zero image.  A file that fixes its
    batch at B > 1 is tried at batch 1 first (B zero images would cost B times the memory); only
    if the graph itself needs B (a constant Reshape target holding B) is it run at B, within what
    the machine can give."""
    one = onnx.ModelProto()
    one.CopyFrom(probe)
    one.graph.input[_input_position(one.graph, graph.input.name)].type.tensor_type.shape.dim[0].dim_value = 1
    for output in one.graph.output:    # declared output batch sizes would disagree with batch 1
        output.ClearField("type")
    try:
        return _shapes(_session(one, path), path, graph, (1, *chw))
    except _core.FormatError:
        if not batch_size or batch_size == 1:
            raise
    _refuse_if_too_large(path, graph, f"the batch of {batch_size} images its file fixes", batch_size * per_image)
    return _shapes(_session(probe, path), path, graph, (batch_size, *chw))


def _input_position(onnx_graph, name: str) -> int:
    return next(i for i, value in enumerate(onnx_graph.input) if value.name == name)


def _shapes(session, path: str, graph: _Graph, nchw: tuple[int, ...]) -> nb.RangeStatistics:
    """Every value's shape (without the batch) on zero images of shape nchw."""
    names = [o.name for o in session.get_outputs()]
    image = np.zeros(nchw, graph.input_dtype())
    try:
        outputs = session.run(names, {graph.input.name: image})
    except Exception as exc:  # onnxruntime's own error types
        raise _core.FormatError(f"{path}: field 'model': onnxruntime failed on a zero image: "
                                f"{_first_line(exc)}") from exc
    stats = nb.RangeStatistics(path)
    stats.shape[graph.input.name] = tuple(image.shape[1:])
    for name, value in zip(names, outputs):
        stats.shape[name] = tuple(value.shape[1:])
    return stats


def _cut(batches, size: int):
    """batches, each cut into runs of at most size images."""
    for batch in batches:
        yield from (batch[i:i + size] for i in range(0, len(batch), size))


# Bytes of values the importer's calibration batches are cut to: every value of the graph is an
# output of its onnxruntime runs (for its range or shape), so a batch holds all of them at once,
# about twice over (onnxruntime's tensors and the arrays its Python binding returns).  At 1 GiB
# ResNet-50's calibration peaked at 2.9 GB; at 256 MiB (2 images of its 97 MiB) at 1.2 GB, and
# ran faster (smaller runs stay nearer the caches), to the same ranges.
MAX_RUN_BYTES = 2 ** 28


def _refuse_if_too_large(path: str, graph: _Graph, what: str, needed: int) -> None:
    """Refuses a run whose values exceed what the machine can give now, the rule a run of aimcemu
    follows (validate.run_memory_limit).  Without it a file of a few hundred bytes declaring a large
    image or batch could make onnxruntime allocate any amount of memory; a fixed limit refused valid
    large-input networks (ResNet-50 at 640 x 640 needs 1.25 GB)."""
    limit, meaning = validate.run_memory_limit()
    if needed > limit:
        raise _core.FormatError(f"{path}: field 'input {nb.printable(graph.input.name)}': {what} needs {needed} "
                                "bytes of values (every tensor the graph computes from them, all kept to measure "
                                f"them), more than the {limit} bytes {meaning}")


_ITEMSIZE_OF_TYPE = {onnx.TensorProto.UINT8: 1, onnx.TensorProto.INT8: 1, onnx.TensorProto.BOOL: 1,
                     onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT16: 2,
                     onnx.TensorProto.UINT16: 2, onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8,
                     onnx.TensorProto.UINT64: 8}


def _bytes_per_image(model, input_name: str, chw) -> int:
    """Bytes of every value of the graph that grows with the batch, per image: ONNX shape inference
    at batch 2 less at batch 1, so that weights (and what is computed from them alone) count
    once, not per image.  Intermediates onnxruntime frees after use count too: its arena keeps
    their memory.  Inference runs on a copy without the initializers' data (their dims are what it
    needs; small ones, such as a Reshape's target shape, are kept) so its cost does not grow with
    the weights; a value it cannot size is not counted."""
    shapes = onnx.ModelProto()
    shapes.ir_version = model.ir_version
    shapes.opset_import.extend(model.opset_import)
    shapes.graph.node.extend(model.graph.node)
    shapes.graph.input.extend(model.graph.input)
    for output in model.graph.output:   # a declared output shape would hide the inferred one
        shapes.graph.output.add().name = output.name
    for init in model.graph.initializer:
        dims_only = shapes.graph.initializer.add()
        if math.prod(init.dims) <= 64:
            dims_only.CopyFrom(init)
        else:
            dims_only.name, dims_only.data_type = init.name, init.data_type
            dims_only.dims.extend(init.dims)
    one, two = (_value_bytes(shapes, input_name, (batch, *chw)) for batch in (1, 2))
    return 4 * math.prod(chw) + max(two - one, 0)


def _value_bytes(shapes, input_name: str, nchw: tuple[int, ...]) -> int:
    """Bytes of the values that shape inference sizes with the input at nchw, each value at the
    largest size either inference gives it: ONNX's own, and onnxruntime's symbolic inference,
    which also follows a shape computed from the input's shape (Reshape(x, Shape(x)): ONNX's
    leaves everything after it unsized, so a 55 KB file whose convolution needs 35 GB per image
    passed the memory check).  0 if both fail: onnxruntime then names what is wrong."""
    dims = shapes.graph.input[_input_position(shapes.graph, input_name)].type.tensor_type.shape.dim
    for dim, value in zip(dims, nchw):
        dim.Clear()
        dim.dim_value = value
    bytes_of: dict[str, int] = {}     # by name: an output may be listed twice
    _add_sized_values(_onnx_inferred(shapes), bytes_of)
    computed = {name for node in shapes.graph.node for name in node.output if name}
    if not computed <= bytes_of.keys():   # only then: the symbolic inference imports sympy (40 MB)
        _add_sized_values(_symbolic_inferred(shapes), bytes_of)
    return sum(bytes_of.values())


def _add_sized_values(inferred, bytes_of: dict[str, int]) -> None:
    """Each value `inferred` gives a whole shape, at its bytes (the larger where already there)."""
    for value in [] if inferred is None else [*inferred.graph.value_info, *inferred.graph.output]:
        tensor = value.type.tensor_type
        sizes = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        if tensor.HasField("shape") and all(v > 0 for v in sizes):
            size = math.prod(sizes) * _ITEMSIZE_OF_TYPE.get(tensor.elem_type, 4)
            bytes_of[value.name] = max(bytes_of.get(value.name, 0), size)


def _onnx_inferred(shapes):
    try:
        return onnx.shape_inference.infer_shapes(shapes, strict_mode=False)
    except Exception:   # onnx's inference errors
        return None


def _symbolic_inferred(shapes):
    """onnxruntime's symbolic shape inference of a copy of `shapes`; None where it is not
    installed (it needs sympy) or fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:
        return None
    model = onnx.ModelProto()
    model.CopyFrom(shapes)
    logger = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level = logger.level
    logger.setLevel(logging.CRITICAL)   # its warnings about values it cannot size: ours is the message
    try:
        return SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    except Exception:
        return None
    finally:
        logger.setLevel(level)


def _session(model, path: str):
    """An onnxruntime session on the model (every value kept); its errors as a FormatError."""
    ort = require("onnxruntime", "aimcemu.onnx_import (import_onnx)")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every value
    options.log_severity_level = 4   # its errors reach the user as FormatError, not as log lines too
    # No arena: it kept the memory of every run's values after the run, beside the arrays returned.
    options.enable_cpu_mem_arena = False
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own error types
        raise _core.FormatError(f"{path}: field 'model': onnxruntime cannot load it: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _batches(data, chw, path: str):
    """The calibration images as float32 batches of [N, C, H, W]; anything but real numbers is
    refused naming calibration_data (a complex image would lose its imaginary part)."""
    if hasattr(data, "detach"):
        data = _tensor_as_array(data)
    if isinstance(data, np.generic):          # a NumPy scalar: no images, and not iterable
        data = np.asarray(data)
    if isinstance(data, np.ndarray):
        nb.check_calibration_dtype(data.dtype, path)
        nb.check_calibration_rank(data.shape, path)
        images = data
        data = (images[i:i + CALIBRATION_BATCH] for i in range(0, len(images), CALIBRATION_BATCH))
    data = nb.calibration_iterable(data, path)
    for index, batch in enumerate(data):
        batch = batch[0] if isinstance(batch, (tuple, list)) else batch
        try:
            batch = np.asarray(_tensor_as_array(batch) if hasattr(batch, "detach") else batch)
        except (ValueError, TypeError) as exc:   # ragged nested lists, ...
            raise _core.FormatError(f"{path}: field 'calibration_data': batch {index} (counting from 0) is not an "
                                    f"array of images ({_first_line(exc)})") from None
        nb.check_calibration_dtype(batch.dtype, path, index)
        batch = batch.astype(np.float32, copy=False)
        if batch.ndim != 4 or tuple(batch.shape[1:]) != tuple(chw):
            raise _core.FormatError(f"{path}: field 'calibration_data': batch {index} (counting from 0): expected "
                                    f"images [N, {', '.join(map(str, chw))}], got {batch.shape}")
        yield batch


def _as_input_type(batch: np.ndarray, dtype, path: str, index: int) -> np.ndarray:
    """A float32 calibration batch in the model's input type.  float16 cannot hold values beyond
    +-65504: such images are refused naming calibration_data (as Inf they would be blamed on
    whichever node first produced it)."""
    if dtype == np.float16:
        largest = float(np.abs(batch).max()) if batch.size else 0.0
        if largest > float(np.finfo(np.float16).max):
            raise _core.FormatError(f"{path}: field 'calibration_data': batch {index} (counting from 0) holds "
                                    f"{largest:g}, beyond the +-65504 of float16, the model's input type")
    return batch.astype(dtype, copy=False)


def _tensor_as_array(tensor) -> np.ndarray:
    """A torch tensor as an array (bfloat16, which NumPy lacks, as float32)."""
    tensor = tensor.detach().cpu()
    return (tensor.float() if tensor.is_floating_point() else tensor).numpy()


def _fixed_size(batches, size: int, path: str, field: str = "calibration_data"):
    """The images of batches regrouped into batches of exactly size (a model whose file fixes
    the batch dimension takes no other); a remainder is refused (naming field) rather than dropped."""
    pending = []
    for batch in batches:
        pending.append(batch)
        held = sum(len(b) for b in pending)
        if held >= size:
            images = np.concatenate(pending)
            whole = held - held % size
            yield from (images[i:i + size] for i in range(0, whole, size))
            pending = [images[whole:]] if whole < held else []
    left = sum(len(b) for b in pending)
    if left:
        raise _core.FormatError(f"{path}: field '{field}': the model fixes its batch size at {size}; {left} "
                                f"image(s) are left over (pass a multiple of {size})")


def _run_in_batches(session, names: list[str], images: np.ndarray, path: str) -> list[np.ndarray]:
    """session's outputs `names` on all images: in one run, or, where the model fixes its batch
    size (torch.onnx.export's default), in runs of exactly that size, concatenated (a remainder
    is refused, as for calibration)."""
    model_input = session.get_inputs()[0]
    fixed = model_input.shape[0] if model_input.shape and isinstance(model_input.shape[0], int) else None
    if not fixed or fixed <= 0:
        return session.run(names, {model_input.name: images})
    runs = [session.run(names, {model_input.name: batch}) for batch in _fixed_size([images], fixed, path, "images_nchw")]
    return [np.concatenate([run[i] for run in runs]) for i in range(len(names))]


def layer_cosines(imported: ImportedModel, path, images_nchw: np.ndarray, outputs: list[np.ndarray]) -> list[tuple[str, str, float]]:
    """(layer, ONNX tensor, cosine similarity) per layer: our dequantized int8 layer outputs
    (``outputs``, one [N, H, W, C] array per layer, e.g. from ``_core.run_network``) against
    onnxruntime's values of the tensor each layer stands for, on the same float images."""
    ort = require("onnxruntime", "aimcemu.onnx_import.layer_cosines")
    model = _load(os.fspath(path))
    # In a QDQ model compare with the value as quantized: DequantizeLinear(QuantizeLinear(tensor)).
    consumer = {(n.op_type, n.input[0]): n.output[0] for n in model.graph.node if n.input}
    quantized_name = {}
    for source in imported.sources:
        q_out = consumer.get(("QuantizeLinear", source))
        if q_out is None and any(n.op_type == "QuantizeLinear" and n.output[0] == source for n in model.graph.node):
            q_out = source        # an implied ReLU: the layer stands for the QuantizeLinear's output
        quantized_name[source] = consumer.get(("DequantizeLinear", q_out), source) if q_out else source
    existing = {o.name for o in model.graph.output}
    for name in set(quantized_name.values()) - existing:
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    # Unoptimised: the file's QDQ pairs computed as written, in float.  With graph optimisations
    # onnxruntime fuses them into integer kernels whose result depends on the CPU: on AVX2 without
    # VNNI its u8s8 kernel sums pairs of products in saturating int16 (vpmaddubsw), which moved a
    # small network's last layer to cosine 0.983 against the file's own arithmetic.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, _run_in_batches(session, names, np.asarray(images_nchw, dtype=np.float32),
                                                 os.fspath(path))))
    result = []
    for layer, source, frac, ours in zip(imported.network.layers, imported.sources, imported.frac_bits, outputs):
        h, w, c = tuple(layer.out_shape)
        reference = values[quantized_name[source]].reshape(len(images_nchw), c, h, w)   # ONNX: CHW order
        reference = reference.transpose(0, 2, 3, 1).reshape(len(images_nchw), -1)
        mine = q.dequantize(np.asarray(ours).reshape(len(images_nchw), -1), frac)
        denom = np.linalg.norm(mine) * np.linalg.norm(reference)
        result.append((layer.name, source, float(np.sum(mine * reference) / denom) if denom else 1.0))
    return result
