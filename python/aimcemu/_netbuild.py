"""The framework-neutral half of model import: a source graph -> a quantized ``_core.Network``.

Both front ends (``aimcemu.importer`` for PyTorch, ``aimcemu.onnx_import`` for ONNX) translate
their graph into :class:`Node` objects (one per value-producing op, parameters as float64 NumPy
arrays) and measure each node's value range (:class:`RangeStatistics`, or scales read from a QDQ
model).  This module then maps the nodes onto the layer kinds of formats/network.hpp, fusing what
the accelerator's post-processing absorbs (BatchNorm into the conv, ReLU into the producer, a
residual add into the conv that feeds it), and chooses power-of-two scales (aimcemu.quantize).
docs/import.md describes the scheme.  No torch or onnx import here.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import _core, validate
from . import quantize as q

NETWORK_INPUT = _core.NETWORK_INPUT   # "the producer is the image" (formats/network.hpp)
HISTOGRAM_BINS = 2048
DEFAULT_PERCENTILE = 99.99
# The largest image dimension (C, H, W) a model may take, and kernel or stride a window may
# state: larger values do not fit the network's fields.
IMAGE_DIM_MAX = 65535

# Node tags: input, conv, bn, relu, linear, add, max_pool, avg_pool, global_avg_pool, flatten,
# identity.  A front end gives every node exactly one.
TAGS = ("input", "conv", "bn", "relu", "linear", "add", "max_pool", "avg_pool", "global_avg_pool", "flatten",
        "identity")


class UnsupportedOperationError(NotImplementedError):
    """The model uses operations the INT8 network format cannot express.

    ``problems`` holds one (where, what) pair per offending op: where names the op as the user
    can find it (a module path, an ONNX node) and what says why; ``source`` names the model."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "the model"):
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  {where}: {what}" for where, what in self.problems)
        super().__init__(f"cannot import {source}, {len(self.problems)} unsupported operation(s):\n{lines}")


@dataclass
class BatchNorm:
    """Eval-mode BatchNorm parameters (per channel, float64)."""
    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    eps: float


@dataclass(frozen=True)
class WindowGeometry:
    """A conv's or pool's window as the source states it: kernel and stride (h, w), explicit pads
    (top, bottom, left, right), or ``same`` ("upper"/"lower": pad so that out = ceil(in / stride),
    the odd pad at the end or the beginning, which needs the input size and is resolved when the
    graph is mapped).  ``exclude_pad``: an average pool that divides by the in-image taps only."""
    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)
    same: str = ""
    exclude_pad: bool = False


def pair(value, what: str) -> tuple[int, int]:
    """A kernel/stride/padding given as one int (both axes) or one value per axis (h, w)."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    values = tuple(int(v) for v in value)
    if len(values) != 2:
        raise ValueError(f"{what} {values} must be one value or one per axis (h, w)")
    return values


def same_pads(size: int, kernel: int, stride: int, same: str) -> tuple[int, int]:
    """(before, after) padding of one axis for SAME: out = ceil(size / stride), the total padding
    split evenly, the odd one at the end ("upper") or the beginning ("lower")."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    small = total // 2
    return (small, total - small) if same == "upper" else (total - small, small)


@dataclass(eq=False)
class Node:
    """One value of the source graph and the op that produces it.

    weight: conv [O, C, kh, kw] or linear [O, I] (float64); bias [O] or None; bn for tag "bn".
    users: how many ops (and the graph output) read the value; fusion needs a sole reader."""
    name: str                      # the value's name in the source graph (fx node, ONNX tensor)
    where: str                     # where a user finds the op (module path, ONNX node name)
    tag: str
    inputs: list["Node"] = field(default_factory=list)
    users: int = 0
    geometry: "WindowGeometry" = field(default_factory=lambda: WindowGeometry())
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    bn: BatchNorm | None = None


def printable(text: str | bytes) -> str:
    """text for a message, by the one escaping rule of every message (_core.printable): control
    bytes and bytes outside valid UTF-8 as \\xNN, so a hostile name cannot cut or garble the line.
    Bytes are taken as they are: protobuf hands a string field that is not valid UTF-8 over as bytes."""
    return _core.printable(text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape"))


def check_layer_name(name: str, source: str, field: str) -> None:
    """Refuses (FormatError naming the field) a name that cannot name a layer: the writers' own rule
    (_core.check_layer_name), applied at import so that nothing is built from such a name."""
    _core.check_layer_name(name, source, printable(field))


def fold_batchnorm(weight: np.ndarray, bias: np.ndarray | None, bn: BatchNorm) -> tuple[np.ndarray, np.ndarray]:
    """Conv weight [O, C, kh, kw] and bias [O] with an eval-mode BatchNorm folded in, in float64:
    bn(conv(x)) = conv'(x) with w' = w * g, b' = (b - mean) * g + beta, g = gamma / sqrt(var + eps)."""
    w = np.asarray(weight, dtype=np.float64)
    b = np.zeros(w.shape[0]) if bias is None else np.asarray(bias, dtype=np.float64)
    g = bn.gamma / np.sqrt(bn.var + bn.eps)
    return w * g.reshape(-1, *([1] * (w.ndim - 1))), (b - bn.mean) * g + bn.beta


def check_parameters(nodes: list[Node], source: str) -> None:
    """Refuses (FormatError naming the node) weights, biases and BatchNorm parameters that are not
    finite, and a BatchNorm whose var + eps is not positive: no int8 scale holds them, and
    calibration would only report the NaN they cause one layer later."""
    for node in nodes:
        arrays = [("weight", node.weight), ("bias", node.bias)]
        if node.bn is not None:
            bn = node.bn
            arrays += [("BatchNorm scale", bn.gamma), ("BatchNorm bias", bn.beta), ("BatchNorm mean", bn.mean),
                       ("BatchNorm var", bn.var), ("BatchNorm epsilon", np.asarray(bn.eps))]
        for what, values in arrays:
            if values is not None and not np.isfinite(values).all():
                raise _core.FormatError(f"{source}: field '{node.where}': {what} holds NaN or Inf")
        if node.bn is not None and not (node.bn.var + node.bn.eps > 0).all():
            raise _core.FormatError(f"{source}: field '{node.where}': BatchNorm var + epsilon must be > 0, "
                                    f"got {float(np.min(node.bn.var + node.bn.eps)):.6g}")


# --------------------------------------------------------------------------------------------
# Calibration data and statistics

# NumPy kinds of calibration images: real numbers (float, signed or unsigned integer).  A complex
# image would lose its imaginary part in the cast to float (NumPy only warns); bool, strings,
# bytes, objects, dates and records are no images.
CALIBRATION_KINDS = "fiu"


def check_calibration_dtype(dtype, source: str, batch: int | None = None) -> None:
    """Refuses (FormatError naming calibration_data) calibration values that are not real numbers."""
    dtype = np.dtype(dtype)
    if dtype.kind not in CALIBRATION_KINDS:
        refuse_calibration_type(dtype.name, source, batch)


def check_calibration_rank(shape, source: str) -> None:
    """Refuses (FormatError naming calibration_data) a 0-d array or tensor, which holds no images to
    split into batches (other ranks are refused per batch, naming the image shape expected)."""
    if len(shape) == 0:
        raise _core.FormatError(f"{source}: field 'calibration_data': expected images [N, C, H, W], got an array "
                                f"of shape {tuple(shape)}")


def calibration_iterable(data, source: str):
    """An iterator over the calibration batches; anything that is neither an array of images nor
    iterable (a float, None) is refused naming calibration_data."""
    try:
        return iter(data)
    except TypeError:
        raise _core.FormatError(f"{source}: field 'calibration_data': a {type(data).__name__} is neither images "
                                "[N, C, H, W] nor an iterable of such batches") from None


def refuse_calibration_type(type_name: str, source: str, batch: int | None = None):
    where = "" if batch is None else f" batch {batch} (counting from 0)"
    raise _core.FormatError(f"{source}: field 'calibration_data':{where} holds {type_name} values; expected real "
                            "numbers (float or integer images)")



# Elements RangeStatistics.update converts to float64 at a time (8 MiB per temporary).
UPDATE_CHUNK = 1 << 20


def _abs_chunks(flat: np.ndarray):
    """|flat| in float64, UPDATE_CHUNK elements at a time (each a new array the caller may change)."""
    for start in range(0, flat.size, UPDATE_CHUNK):
        yield np.abs(flat[start:start + UPDATE_CHUNK].astype(np.float64))
    if flat.size == 0:
        yield np.zeros(0)


class RangeStatistics:
    """Per-value range statistics over calibration batches, in one pass.

    Keeps the largest |value| and a histogram of |value| on [0, top) with HISTOGRAM_BINS bins;
    when a batch exceeds top, top doubles and pairs of bins merge (exact), so percentiles need no
    second pass.  ``max_abs(key)`` is the max-abs rule; ``percentile(key, p)`` the p-th
    percentile of |value| (to a bin's width, top/2048), never above the max.

    source names the model in errors: a NaN or Inf in a batch is refused (FormatError) naming the
    value and the batch, since no scale can hold it."""

    def __init__(self, source: str = "the model"):
        self.source = source
        self.peak: dict = {}
        self.shape: dict = {}
        self.batches: dict = {}
        self._hist: dict = {}
        self._top: dict = {}

    def update(self, key, values: np.ndarray, where: str | None = None) -> None:
        """values: one batch [N, ...] of the value named key; where: how errors name it (default: key).

        The batch is read in chunks of UPDATE_CHUNK elements converted to float64 one at a time:
        converting a whole value at once made temporaries of several times its size (float64
        copy, |x|, scaled, binned), which set the importer's peak memory.  Two passes, since the
        histogram's top follows the whole batch's peak."""
        flat = np.asarray(values).ravel()
        batch = self.batches.get(key, 0)
        self.batches[key] = batch + 1
        peak, has_nan, has_inf = 0.0, False, False
        for chunk in _abs_chunks(flat):
            has_nan = has_nan or bool(np.isnan(chunk).any())
            has_inf = has_inf or bool(np.isinf(chunk).any())
            if chunk.size and not (has_nan or has_inf):
                peak = max(peak, float(chunk.max()))
        if has_nan or has_inf:
            raise _core.FormatError(f"{self.source}: field '{where or key}': calibration produced "
                                    f"{'NaN' if has_nan else 'Inf'} at batch {batch} (counting from 0); no int8 "
                                    "scale can hold it")
        earlier_peak = self.peak.get(key, 0.0)
        self.peak[key] = max(earlier_peak, peak)
        if key not in self._hist:
            self._hist[key] = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
            self._top[key] = 1.0
        if earlier_peak == 0.0 and peak > 0.0:
            # Every count so far is a zero, in bin 0 whatever top is, so top is chosen from the first
            # batch with a non-zero value (exact): an all-zero first batch (a black image, batches of
            # one) would otherwise leave the bins wider than the values need.
            # 2^1023 at most: 2.0 ** 1024 overflows; the loop below doubles to inf for such a peak.
            self._top[key] = 2.0 ** min(math.ceil(math.log2(peak)), 1023)
        # Bounded: a finite peak is passed after at most ~2100 doublings, and top stops at inf.
        while peak >= self._top[key] and math.isfinite(self._top[key]):
            h = self._hist[key]
            self._hist[key] = np.concatenate([h.reshape(-1, 2).sum(axis=1), np.zeros(HISTOGRAM_BINS // 2, np.int64)])
            self._top[key] *= 2.0
        per_bin = HISTOGRAM_BINS / self._top[key]
        for chunk in _abs_chunks(flat):
            chunk *= per_bin
            bins = np.minimum(chunk.astype(np.int64), HISTOGRAM_BINS - 1)
            self._hist[key] += np.bincount(bins, minlength=HISTOGRAM_BINS)

    def max_abs(self, key) -> float:
        return self.peak[key]

    def percentile(self, key, p: float) -> float:
        hist = self._hist[key]
        total = int(hist.sum())
        if total == 0 or self.peak[key] == 0.0:
            return 0.0
        rank = math.ceil(total * p / 100.0)
        upper_bin = int(np.searchsorted(np.cumsum(hist), rank))
        return min((upper_bin + 1) * self._top[key] / HISTOGRAM_BINS, self.peak[key])


@dataclass
class Ranges:
    """What the quantizer needs per node: its per-sample shape and the |value| range to fit int8.

    max_abs maps a node to a float, or to None where only the shape is known (a front end then
    has to say why, via missing_range)."""
    max_abs: dict
    shape: dict
    missing_range: Callable[[Node], str] = lambda node: "no calibrated range"
    source: str = "the model"         # names the model in the error of a missing range

    def of(self, node: Node) -> float:
        value = self.max_abs.get(node)
        if value is None:
            raise UnsupportedOperationError([(node.where, self.missing_range(node))], self.source)
        return value


def check_calibration_method(calibration, percentile, source: str, has_data: bool) -> float:
    """Refuses (FormatError naming the field) a calibration method other than 'max' or
    'percentile', a percentile that is no number in (0, 100], and either one changed from its
    default without calibration data (it would have no effect).  Called before anything is loaded
    or calibrated; returns the percentile as a float."""
    if not isinstance(calibration, str) or calibration not in ("max", "percentile"):
        raise _core.FormatError(f"{source}: field 'calibration': expected 'max' or 'percentile', got {calibration!r}")
    value = validate.number(percentile, "percentile", source)
    if not 0.0 < value <= 100.0:
        raise _core.FormatError(f"{source}: field 'percentile': expected a value in (0, 100], got {percentile!r}")
    if not has_data:
        for field_name, given, default in (("calibration", calibration, "max"),
                                           ("percentile", value, DEFAULT_PERCENTILE)):
            if given != default:
                raise _core.FormatError(f"{source}: field '{field_name}': {given!r} has no effect without "
                                        "calibration_data (a QDQ model takes its scales from the file)")
    return value


def ranges_from_statistics(stats: RangeStatistics, node_of_key: dict, calibration: str = "max",
                           percentile: float = DEFAULT_PERCENTILE) -> Ranges:
    """Ranges of the nodes from calibration statistics keyed by the front end's own keys."""
    percentile = check_calibration_method(calibration, percentile, stats.source, True)
    max_abs, shape = {}, {}
    for key, node in node_of_key.items():
        if key in stats.shape:
            shape[node] = stats.shape[key]
            max_abs[node] = stats.max_abs(key) if calibration == "max" else stats.percentile(key, percentile)
    return Ranges(max_abs, shape)


# --------------------------------------------------------------------------------------------
# Nodes -> layer plans (structure and fusion; no numbers yet)


@dataclass
class _Plan:
    """One layer of the network being built.  ``tail`` is the node whose value the layer
    currently outputs; fusing an op into the layer moves the tail to that op."""
    name: str
    kind: str                      # a _core.LayerKind name
    input: int
    tail: Node
    node: Node                     # the op that made the layer (conv/linear/pool/add)
    window: _core.Window = field(default_factory=_core.Window)
    bn: BatchNorm | None = None
    relu: bool = False
    residual_input: int = -1
    relu_after_residual: bool = False
    pre_residual: Node | None = None   # GEMM value before a fused residual add
    flat_chw: tuple | None = None      # linear: the (C, H, W) shape its input was flattened from


@dataclass(frozen=True)
class _Value:
    """Where a graph value lives: a layer's output (or the input, -1), and, when the source sees
    it flattened, the (C, H, W) shape it was flattened from."""
    layer: int
    flat_chw: tuple | None = None


class GraphMapper:
    def __init__(self, ranges: Ranges, source: str):
        self.ranges = ranges
        self.source = source
        self.plans: list[_Plan] = []
        self.values: dict[Node, _Value] = {}
        self.names: set[str] = set()

    def map(self, nodes: list[Node], output: Node) -> tuple[list[_Plan], int]:
        """nodes in topological order (the input first); output: the node the model returns."""
        for node in nodes:
            if node.tag == "input":
                self.values[node] = _Value(NETWORK_INPUT)
            else:
                getattr(self, "_map_" + node.tag)(node)
        layer = self.values[output].layer
        if layer < 0:
            self._fail(output, "the model returns its input unchanged")
        return self.plans, layer

    # -- helpers

    def _fail(self, node: Node, what: str):
        raise UnsupportedOperationError([(node.where, what)], self.source)

    def _unique_name(self, node: Node) -> str:
        base = node.where
        check_layer_name(base, self.source, f"{base} name")
        name, n = base, 2
        while name in self.names:
            name, n = f"{base}_{n}", n + 1
        self.names.add(name)
        return name

    def _add_plan(self, node: Node, kind: str, source: Node, **fields) -> _Plan:
        plan = _Plan(self._unique_name(node), kind, self.values[source].layer, node, node, **fields)
        self.plans.append(plan)
        self.values[node] = _Value(len(self.plans) - 1)
        return plan

    def _sole_tail_of(self, node: Node) -> _Plan | None:
        """The plan whose current output is `node`, when nothing else reads `node` (so an op on it
        can be fused into that plan without changing what other consumers see)."""
        layer = self.values[node].layer
        if layer == NETWORK_INPUT or node.users != 1:
            return None
        plan = self.plans[layer]
        return plan if plan.tail is node else None

    def _spatial_input(self, node: Node) -> Node:
        source = node.inputs[0]
        if self.values[source].flat_chw is not None or len(self.ranges.shape[source]) != 3:
            self._fail(node, "expects a [N, C, H, W] tensor, got a flattened one")
        return source

    def _window(self, node: Node, source: Node) -> _core.Window:
        """The node's window with SAME padding resolved on the source's size; each pad must be
        below its axis' kernel (the format's rule, which keeps padding out of every max)."""
        g = node.geometry
        (kh, kw), (sh, sw) = g.kernel, g.stride
        for name, value in (("kernel", g.kernel), ("stride", g.stride)):
            if not all(1 <= v <= IMAGE_DIM_MAX for v in value):
                self._fail(node, f"{name} {tuple(value)} must lie in 1..{IMAGE_DIM_MAX} per axis")
        if g.same:
            _, h, w = self.ranges.shape[source]
            (top, bottom), (left, right) = same_pads(h, kh, sh, g.same), same_pads(w, kw, sw, g.same)
        else:
            top, bottom, left, right = g.pads
        for name, pad, kernel in (("pad_top", top, kh), ("pad_bottom", bottom, kh), ("pad_left", left, kw),
                                  ("pad_right", right, kw)):
            if not 0 <= pad < kernel:
                self._fail(node, f"padding {name}={pad} must be in 0..{kernel - 1} (below the kernel's "
                                 f"{'height' if name in ('pad_top', 'pad_bottom') else 'width'} {kernel})")
        if g.exclude_pad and (top or bottom or left or right):
            self._fail(node, "an average pool that excludes the padding from its divisor (count_include_pad "
                             "off) is not supported with padding (the GEMM divides by kernel_h * kernel_w)")
        return _core.Window(kh, kw, sh, sw, top, bottom, left, right)

    def _alias(self, node: Node, source: Node, value: _Value) -> None:
        self.values[node] = value
        plan = self._sole_tail_of(source)
        if plan is not None:
            plan.tail = node

    # -- one method per node tag

    def _map_windowed(self, node, kind: str):
        source = self._spatial_input(node)
        self._add_plan(node, kind, source, window=self._window(node, source))

    def _map_conv(self, node):
        self._map_windowed(node, "conv")

    def _map_max_pool(self, node):
        self._map_windowed(node, "max_pool")

    def _map_avg_pool(self, node):
        self._map_windowed(node, "avg_pool")

    def _map_global_avg_pool(self, node):
        source = self._spatial_input(node)
        _, h, w = self.ranges.shape[source]
        self._add_plan(node, "avg_pool", source, window=_core.Window(kernel_h=h, kernel_w=w))

    def _map_bn(self, node):
        source = node.inputs[0]
        plan = self._sole_tail_of(source)
        if (plan is None or plan.kind != "conv" or plan.bn is not None or plan.relu
                or plan.residual_input >= 0 or source.tag != "conv"):
            self._fail(node, "BatchNorm must directly follow a convolution whose output only it reads "
                             "(it is folded into that convolution)")
        plan.bn = node.bn
        plan.tail = node
        self.values[node] = self.values[source]

    def _map_relu(self, node):
        source = node.inputs[0]
        plan = self._sole_tail_of(source)
        if plan is None:
            # Nothing to fuse into (the input, or a value with several readers): a 1x1 max pool
            # with its ReLU flag is an exact standalone ReLU.
            plan = self._add_plan(node, "max_pool", source)
            plan.relu = True
            self.values[node] = _Value(self.values[node].layer, self.values[source].flat_chw)
            return
        if plan.kind != "add" and plan.residual_input >= 0:
            plan.relu_after_residual = True   # after the fused residual add
        else:
            plan.relu = True
        plan.tail = node
        self.values[node] = self.values[source]

    def _map_identity(self, node):
        self._alias(node, node.inputs[0], self.values[node.inputs[0]])

    def _map_flatten(self, node):
        """flatten(x, 1) or a reshape to [N, features]: nothing to compute, but the next linear
        layer must permute its columns from the source's CHW order to the format's HWC order."""
        source = node.inputs[0]
        value = self.values[source]
        shape, out_shape = self.ranges.shape[source], self.ranges.shape[node]
        if len(out_shape) != 1 or int(np.prod(out_shape)) != int(np.prod(shape)):
            self._fail(node, f"a reshape of per-sample shape {shape} to {out_shape} is not supported "
                             "(only flattening to [N, features])")
        if value.flat_chw is None:
            if len(shape) != 3:
                self._fail(node, f"flatten of a tensor of per-sample shape {shape} is not supported")
            value = _Value(value.layer, tuple(shape))
        self._alias(node, source, value)

    def _map_linear(self, node):
        source = node.inputs[0]
        value = self.values[source]
        if value.flat_chw is None or len(self.ranges.shape[source]) != 1:
            self._fail(node, "a fully connected layer must read a flattened [N, features] tensor (flatten first)")
        self._add_plan(node, "linear", source, flat_chw=value.flat_chw)
        # The source sees [N, features]; a following linear reads it as a 1x1 map (no permutation).
        self.values[node] = _Value(len(self.plans) - 1, (node.weight.shape[0], 1, 1))

    def _map_add(self, node):
        a, b = node.inputs
        va, vb = self.values[a], self.values[b]
        if va.flat_chw != vb.flat_chw:
            self._fail(node, "adding a flattened tensor to an unflattened one is not supported")
        # The accelerator's post-processing adds a residual to a conv/linear output.  Fuse into the
        # first operand's layer when possible (ResNet code writes `out += identity`, main path
        # first, so the shortcut becomes the residual as in the paper), else into the second's.
        for operand, shortcut in ((a, b), (b, a)):
            plan = self._sole_tail_of(operand)
            layer, other = self.values[operand].layer, self.values[shortcut].layer
            if (plan is None or plan.kind not in ("conv", "linear") or plan.residual_input >= 0
                    or other in (NETWORK_INPUT, layer)):
                continue
            if layer < other:
                self._move_to_end(layer)      # the residual operand must be an earlier layer
            plan.pre_residual = plan.tail
            plan.residual_input = self.values[shortcut].layer
            plan.tail = node
            self.values[node] = _Value(self.values[operand].layer, va.flat_chw)
            return
        first, second = (a, b) if vb.layer != NETWORK_INPUT else (b, a)
        if self.values[second].layer == NETWORK_INPUT:
            self._fail(node, "adding the network input to itself is not supported")
        plan = self._add_plan(node, "add", first)
        plan.residual_input = self.values[second].layer
        self.values[node] = _Value(self.values[node].layer, va.flat_chw)

    def _move_to_end(self, layer: int) -> None:
        """Moves plan `layer` to the end of the list and renumbers every reference.  Safe when the
        add being fused is the plan's only reader: then no other plan reads it, and the plans after
        it do not depend on it."""
        def renumber(index: int) -> int:
            return index - 1 if index > layer else index

        moved = self.plans.pop(layer)
        for plan in self.plans:
            plan.input, plan.residual_input = renumber(plan.input), renumber(plan.residual_input)
        self.plans.append(moved)
        last = len(self.plans) - 1
        self.values = {node: _Value(last if v.layer == layer else renumber(v.layer), v.flat_chw)
                       for node, v in self.values.items()}


# --------------------------------------------------------------------------------------------
# Layer plans -> quantized _core.Network


@dataclass
class ImportedModel:
    """What an importer produced: the network plus each tensor's scale, so that a caller can map
    int8 activations back to the source model's values (value = int8 * 2^-frac_bits).

    sources[i] names the source-graph value that layer i's output stands for (an fx node, an
    ONNX tensor); weight_frac_bits[i] is None for layers without weights.  An ONNX QDQ import
    also fills scale_moves (aimcemu.onnx_import.ScaleMove per quantized tensor)."""
    network: _core.Network
    input_frac_bits: int
    frac_bits: list[int]           # per layer, the frac bits of the layer's output
    sources: list[str] = field(default_factory=list)
    weight_frac_bits: list = field(default_factory=list)
    scale_moves: list = field(default_factory=list)

    def quantize_images(self, images_nchw) -> np.ndarray:
        return q.quantize_images(np.asarray(images_nchw), self.input_frac_bits)


class Quantizer:
    def __init__(self, plans: list[_Plan], ranges: Ranges, input_node: Node, source: str):
        self.plans = plans
        self.ranges = ranges
        self.input_node = input_node
        self.source = source
        self.frac: list[int] = []
        self.weight_frac: list = []
        self.input_frac = self._checked_frac(ranges.of(input_node), input_node.where, "the network input")

    def build(self, name: str, output_layer: int) -> ImportedModel:
        net = _core.Network()
        net.name = name
        c, h, w = self.ranges.shape[self.input_node]
        net.input_shape = _core.Shape3(h, w, c)
        net.input_frac_bits = self.input_frac
        net.layers = [self._layer(plan) for plan in self.plans]
        net.output_layer = output_layer
        net.resolve(self.source)
        self._check_shapes(net)
        return ImportedModel(net, self.input_frac, list(self.frac), [p.tail.name for p in self.plans],
                             list(self.weight_frac))

    def _frac_of(self, layer: int) -> int:
        return self.input_frac if layer == NETWORK_INPUT else self.frac[layer]

    def _fit(self, plan: _Plan, *nodes: Node) -> int:
        """Finest frac bits at which every node's range (values of plan's layer) fits int8: those of
        the widest range.  Only that one is checked against the format's limits: a narrower one
        (a residual branch before its add) only bounds the scale from above, and is stored at the
        widest one's scale, so its own range neither refuses nor warns."""
        widest = max(nodes, key=self.ranges.of)
        where = f" ({widest.where})" if widest.where != plan.name else ""
        return self._checked_frac(self.ranges.of(widest), plan.name, f"the value '{widest.name}'{where}")

    def _checked_frac(self, max_abs: float, where: str, what: str) -> int:
        """The frac bits of a range within the format's FRAC_BITS_MIN..FRAC_BITS_MAX.  A range the
        clamp would saturate, or round to 0 everywhere, makes the import meaningless: refused,
        naming the tensor, its range and the limit.  One that keeps only some of int8's bits at the
        finest scale is imported with a warning (a nearly-dead tensor is legitimate)."""
        f = q.unclamped_frac_bits(max_abs)
        if f < q.FRAC_BITS_MIN:
            raise UnsupportedOperationError([(where, f"{what} reaches {max_abs:.4g}, above the largest range the "
                                                     f"format holds, {q.RANGE_MAX:.6g} = 127 * 2^{-q.FRAC_BITS_MIN} "
                                                     "(every value above it would saturate)")], self.source)
        if f <= q.FRAC_BITS_MAX:
            return f
        largest = max_abs * 2.0 ** q.FRAC_BITS_MAX      # its largest value in steps of the finest scale
        if largest < 0.5:
            raise UnsupportedOperationError([(where, f"{what} reaches only {max_abs:.4g}, below half the finest step "
                                                     f"the format holds, 2^-{q.FRAC_BITS_MAX} (every value would "
                                                     "quantize to 0)")], self.source)
        warnings.warn(f"{self.source}: {where}: {what} reaches only {max_abs:.4g}, below "
                      f"{q.RANGE_FULL_PRECISION_MIN:.4g} = 127 * 2^-{q.FRAC_BITS_MAX}: at the format's finest scale "
                      f"its largest value is {int(q.round_half_up(largest))} of 127 ({f - q.FRAC_BITS_MAX} bit(s) "
                      "of precision lost)", RuntimeWarning, stacklevel=2)
        return q.FRAC_BITS_MAX

    def _layer(self, plan: _Plan):
        layer = _core.Layer()
        layer.name = plan.name
        layer.kind = getattr(_core.LayerKind, plan.kind)
        layer.input = plan.input
        layer.relu = plan.relu
        layer.residual_input = plan.residual_input
        layer.relu_after_residual = plan.relu_after_residual
        x_frac = self._frac_of(plan.input)
        w_frac = None
        if plan.kind in ("conv", "linear"):
            y_frac, w_frac = self._gemm(plan, layer, x_frac)
        elif plan.kind == "add":
            y_frac = self._add(plan, layer, x_frac)
        elif plan.kind == "avg_pool":
            y_frac = self._avg_pool(plan, layer, x_frac)
        else:  # max_pool: exact, keeps its input's scale
            layer.window = plan.window
            y_frac = x_frac
        self.frac.append(y_frac)
        self.weight_frac.append(w_frac)
        return layer

    @staticmethod
    def _gemm_float_operands(plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
        weight, bias = plan.node.weight, plan.node.bias
        if plan.bn is not None:
            weight, bias = fold_batchnorm(weight, bias, plan.bn)
        elif bias is None:
            bias = np.zeros(weight.shape[0])
        if plan.kind == "conv":
            weight = weight.transpose(0, 2, 3, 1)          # [O, C, kh, kw] -> [O, kh, kw, C]
        else:
            c, h, w = plan.flat_chw                         # sources flatten CHW, we flatten HWC
            weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(weight, dtype=np.float64).reshape(weight.shape[0], -1), np.asarray(bias, np.float64)

    def _gemm(self, plan: _Plan, layer, x_frac: int) -> tuple[int, int]:
        weight, bias = self._gemm_float_operands(plan)
        weight_range = float(np.max(np.abs(weight))) if weight.size else 0.0
        w_frac = self._checked_frac(weight_range, plan.name, "the weight tensor")
        w_q = q.quantize(weight, w_frac)
        acc_frac = w_frac + x_frac
        y_frac = self._fit(plan, plan.tail, *([plan.pre_residual] if plan.pre_residual is not None else []))
        y_frac = max(min(y_frac, acc_frac), acc_frac - q.OUT_SHIFT_MAX)
        if plan.residual_input >= 0:
            r_frac = self.frac[plan.residual_input]
            y_frac = min(y_frac, r_frac + q.ALIGN_SHIFT_MAX)
            self._check_align(plan, y_frac - r_frac, "residual")
            layer.residual_shift = y_frac - r_frac
        layer.out_shift = acc_frac - y_frac
        layer.weights = w_q.reshape(-1)
        try:
            layer.bias, layer.bias_shift = q.quantize_bias(bias, acc_frac)
        except ValueError as exc:      # a bias too large for int8 << BIAS_SHIFT_MAX at this scale
            raise UnsupportedOperationError([(plan.name, str(exc))], self.source) from None
        layer.out_channels = weight.shape[0]
        if plan.kind == "conv":
            layer.window = plan.window
        return y_frac, w_frac

    def _add(self, plan: _Plan, layer, a_frac: int) -> int:
        b_frac = self.frac[plan.residual_input]
        y_frac = min(self._fit(plan, plan.tail), a_frac + q.ALIGN_SHIFT_MAX, b_frac + q.ALIGN_SHIFT_MAX)
        layer.input_shift = y_frac - a_frac
        layer.residual_shift = y_frac - b_frac
        self._check_align(plan, layer.input_shift, "first operand")
        self._check_align(plan, layer.residual_shift, "second operand")
        return y_frac

    def _avg_pool(self, plan: _Plan, layer, x_frac: int) -> int:
        taps = plan.window.kernel_h * plan.window.kernel_w
        layer.window = plan.window
        y_frac = self._fit(plan, plan.tail)
        # y = avg_mult * sum / 2^out_shift must approximate mean * 2^(y_frac - x_frac).
        while 2.0 ** (y_frac - x_frac) / taps > q.AVG_MULT_MAX:
            y_frac -= 1
        layer.avg_mult, layer.out_shift = q.avg_pool_multiplier(2.0 ** (y_frac - x_frac) / taps)
        return y_frac

    def _check_align(self, plan: _Plan, shift: int, what: str) -> None:
        if not -q.ALIGN_SHIFT_MAX <= shift <= q.ALIGN_SHIFT_MAX:
            raise UnsupportedOperationError([(plan.name, f"the {what} of the add is {abs(shift)} binary orders of "
                                                         f"magnitude off the sum's scale (the format aligns at most "
                                                         f"{q.ALIGN_SHIFT_MAX})")],
                                            self.source)

    def _check_shapes(self, net) -> None:
        """The resolved C++ shapes must match what the source computed, or the mapping is wrong."""
        for plan, layer in zip(self.plans, net.layers):
            source_shape = self.ranges.shape[plan.tail]
            ours = tuple(layer.out_shape)
            expected = (source_shape[1], source_shape[2], source_shape[0]) if len(source_shape) == 3 else None
            same = ours == expected if expected else int(np.prod(ours)) == int(np.prod(source_shape))
            if not same:
                raise AssertionError(f"{self.source}: layer {plan.name} has shape {ours} but the source computed "
                                     f"{source_shape} (CHW); this is an importer bug")


def build_network(nodes: list[Node], output: Node, ranges: Ranges, name: str, source: str) -> ImportedModel:
    """Maps the nodes (topological order, the input first) and quantizes them."""
    _core.check_display_name(name, source, "name")   # the writers' rule, before anything is built
    plans, output_layer = GraphMapper(ranges, source).map(nodes, output)
    return Quantizer(plans, ranges, nodes[0], source).build(name, output_layer)

