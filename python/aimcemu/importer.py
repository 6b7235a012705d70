"""PyTorch -> aimcemu INT8 network import (power-of-two scales).

``import_torch(module, calibration_data)`` traces an eval-mode PyTorch CNN with torch.fx, maps its
graph onto the layer kinds of formats/network.hpp (conv, linear, add, max_pool, avg_pool), fuses
what the accelerator's post-processing can absorb (BatchNorm into the conv, ReLU into the producer,
a residual add into the conv that feeds it), chooses power-of-two scales from calibration ranges
(aimcemu.quantize) and returns a resolved ``_core.Network``.  docs/import.md describes the scheme.

Anything the format cannot express raises UnsupportedOperationError naming every offending module;
nothing is ever skipped silently.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from . import _core
from . import quantize as q

CALIBRATION_BATCH = 256
NETWORK_INPUT = _core.NETWORK_INPUT   # "the producer is the image" (formats/network.hpp)


class UnsupportedOperationError(NotImplementedError):
    """The model uses operations the INT8 network format cannot express.

    ``problems`` holds one (where, what) pair per offending op: where is the module's qualified
    name (or the graph node's name for a function call) and what says why."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        lines = "\n".join(f"  {where}: {what}" for where, what in self.problems)
        super().__init__(f"cannot import the model, {len(self.problems)} unsupported operation(s):\n{lines}")


@dataclass
class ImportedModel:
    """What the importer produced: the network plus each tensor's scale, so that a caller can map
    int8 activations back to the float model's values (value = int8 * 2^-frac_bits)."""
    network: _core.Network
    input_frac_bits: int
    frac_bits: list[int]           # per layer, the frac bits of the layer's output

    def quantize_images(self, images_nchw) -> np.ndarray:
        return q.quantize_images(_to_numpy(images_nchw), self.input_frac_bits)


def import_torch(module: nn.Module, calibration_data, name: str | None = None) -> _core.Network:
    """Converts an eval-mode PyTorch CNN to a resolved INT8 ``_core.Network``.

    calibration_data: a float tensor/array [N, C, H, W], or an iterable of such batches (or of
    (images, labels) tuples, as a DataLoader yields).  Activation scales come from the max |value|
    each tensor takes over it, so it should look like the data the network will see."""
    return convert_torch(module, calibration_data, name).network


def convert_torch(module: nn.Module, calibration_data, name: str | None = None) -> ImportedModel:
    """import_torch, also returning the frac bits of every tensor."""
    if any(m.training for m in module.modules()):
        raise ValueError("import_torch needs the module in eval mode (BatchNorm statistics and dropout are "
                         "frozen only then): call module.eval() first")
    graph_module = _trace(module)
    ops = _classify_graph(graph_module)
    ranges = _calibrate(graph_module, calibration_data)
    plans, input_node, output_layer = _GraphMapper(ops, ranges).map(graph_module.graph)
    return _Quantizer(plans, ranges, input_node).build(name or type(module).__name__, output_layer)


def fold_batchnorm(weight: torch.Tensor, bias: torch.Tensor | None, bn: nn.BatchNorm2d) -> tuple[np.ndarray, np.ndarray]:
    """Conv weight [O, C, kh, kw] and bias [O] with an eval-mode BatchNorm folded in, in float64:
    bn(conv(x)) = conv'(x) with w' = w * g, b' = (b - mean) * g + beta, g = gamma / sqrt(var + eps)."""
    out_channels = weight.shape[0]
    w = weight.detach().double()
    b = bias.detach().double() if bias is not None else torch.zeros(out_channels, dtype=torch.float64)
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones(out_channels, dtype=torch.float64)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros(out_channels, dtype=torch.float64)
    g = gamma / torch.sqrt(bn.running_var.detach().double() + bn.eps)
    folded_w = w * g.reshape(-1, *([1] * (w.dim() - 1)))
    folded_b = (b - bn.running_mean.detach().double()) * g + beta
    return folded_w.numpy(), folded_b.numpy()


# --------------------------------------------------------------------------------------------
# Tracing and op classification


def _to_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _trace(module: nn.Module) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(module)
    except Exception as exc:  # fx raises several types (TraceError, TypeError, ...) for the same cause
        raise UnsupportedOperationError([(type(module).__name__, f"torch.fx cannot trace it ({exc})")]) from exc


@dataclass
class _Op:
    """One graph node as a layer kind: tag is input, output, conv, bn, relu, linear, add,
    max_pool, avg_pool, global_avg_pool, flatten or identity."""
    tag: str
    module: nn.Module | None = None
    kernel: int = 1
    stride: int = 1
    pad: int = 0


class _Unsupported(Exception):
    pass


def _square(value, what: str) -> int:
    """A kernel/stride/padding given as int or pair; the format has one value for both axes."""
    if isinstance(value, int):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] == value[1]:
        return int(value[0])
    raise _Unsupported(f"{what} {value} is not square (the format has one value for both axes)")


def _conv_op(m: nn.Conv2d) -> _Op:
    if m.groups != 1:
        raise _Unsupported(f"grouped convolution (groups={m.groups}) is not supported")
    if tuple(m.dilation) != (1, 1):
        raise _Unsupported(f"dilation {tuple(m.dilation)} is not supported")
    if m.padding_mode != "zeros":
        raise _Unsupported(f"padding_mode '{m.padding_mode}' is not supported (zero padding only)")
    kernel = _square(m.kernel_size, "kernel")
    stride = _square(m.stride, "stride")
    if m.padding == "valid":
        pad = 0
    elif m.padding == "same":
        if stride != 1 or kernel % 2 == 0:
            raise _Unsupported("padding='same' is supported only for odd kernels at stride 1")
        pad = kernel // 2
    else:
        pad = _square(m.padding, "padding")
    if pad >= kernel:
        raise _Unsupported(f"padding {pad} >= kernel {kernel} is not supported")
    return _Op("conv", m, kernel, stride, pad)


def _max_pool_op(m: nn.MaxPool2d) -> _Op:
    if m.ceil_mode or m.return_indices:
        raise _Unsupported("ceil_mode and return_indices are not supported")
    if _square(m.dilation, "dilation") != 1:
        raise _Unsupported(f"dilation {m.dilation} is not supported")
    kernel = _square(m.kernel_size, "kernel")
    stride = _square(m.stride if m.stride is not None else m.kernel_size, "stride")
    pad = _square(m.padding, "padding")
    return _Op("max_pool", m, kernel, stride, pad)


def _avg_pool_op(m: nn.AvgPool2d) -> _Op:
    kernel = _square(m.kernel_size, "kernel")
    stride = _square(m.stride if m.stride is not None else m.kernel_size, "stride")
    pad = _square(m.padding, "padding")
    if m.ceil_mode or m.divisor_override is not None:
        raise _Unsupported("ceil_mode and divisor_override are not supported")
    if pad > 0 and not m.count_include_pad:
        raise _Unsupported("count_include_pad=False with padding is not supported (the GEMM divides by k*k)")
    return _Op("avg_pool", m, kernel, stride, pad)


def _module_op(m: nn.Module) -> _Op:
    if isinstance(m, nn.Conv2d):
        return _conv_op(m)
    if isinstance(m, nn.BatchNorm2d):
        if m.running_mean is None or m.running_var is None:
            raise _Unsupported("BatchNorm2d without running statistics cannot be folded")
        return _Op("bn", m)
    if isinstance(m, nn.ReLU):
        return _Op("relu", m)
    if isinstance(m, nn.Linear):
        return _Op("linear", m)
    if isinstance(m, nn.MaxPool2d):
        return _max_pool_op(m)
    if isinstance(m, nn.AvgPool2d):
        return _avg_pool_op(m)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        size = m.output_size
        if size not in (1, (1, 1), [1, 1]):
            raise _Unsupported(f"AdaptiveAvgPool2d to {size} is not supported (only to 1x1)")
        return _Op("global_avg_pool", m)
    if isinstance(m, nn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            raise _Unsupported(f"Flatten(start_dim={m.start_dim}, end_dim={m.end_dim}) is not supported (only 1, -1)")
        return _Op("flatten", m)
    if isinstance(m, (nn.Identity, nn.modules.dropout._DropoutNd)):
        return _Op("identity", m)  # dropout is the identity in eval mode
    raise _Unsupported(f"{type(m).__name__} is not supported")


def _check_flatten_args(args, kwargs) -> None:
    start = args[1] if len(args) > 1 else kwargs.get("start_dim", 0)
    end = args[2] if len(args) > 2 else kwargs.get("end_dim", -1)
    if start != 1 or end != -1:
        raise _Unsupported(f"flatten(start_dim={start}, end_dim={end}) is not supported (only start_dim=1, end_dim=-1)")


def _check_add_args(args, kwargs) -> None:
    if len(args) != 2 or not all(isinstance(a, fx.Node) for a in args) or kwargs.get("alpha", 1) != 1:
        raise _Unsupported("only the sum of two tensors is supported (no constants, no alpha)")


_RELU_FUNCTIONS = (F.relu, torch.relu)
_ADD_FUNCTIONS = (operator.add, operator.iadd, torch.add)


def _function_op(node: fx.Node) -> _Op:
    target = node.target
    if target in _RELU_FUNCTIONS:
        return _Op("relu")
    if target in _ADD_FUNCTIONS:
        _check_add_args(node.args, node.kwargs)
        return _Op("add")
    if target is torch.flatten:
        _check_flatten_args(node.args, node.kwargs)
        return _Op("flatten")
    raise _Unsupported(f"function {getattr(target, '__name__', target)} is not supported")


def _method_op(node: fx.Node) -> _Op:
    if node.target in ("relu", "relu_"):
        return _Op("relu")
    if node.target in ("add", "add_", "__add__", "__iadd__"):
        _check_add_args(node.args, node.kwargs)
        return _Op("add")
    if node.target == "flatten":
        _check_flatten_args(node.args, node.kwargs)
        return _Op("flatten")
    raise _Unsupported(f"tensor method .{node.target}() is not supported")


def _node_where(node: fx.Node) -> str:
    """A name a user can find in their model: the module path, or the owning module + node."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack") or {}
    owner = next(reversed(stack.keys()), "") if stack else ""
    return f"{owner}.{node.name}" if owner else node.name


def _classify_graph(graph_module: fx.GraphModule) -> dict[fx.Node, _Op]:
    """Maps every node to an _Op, or raises one error that lists every unsupported node."""
    modules = dict(graph_module.named_modules())
    ops: dict[fx.Node, _Op] = {}
    problems: list[tuple[str, str]] = []
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        problems.append(("forward", f"the model must take exactly one input tensor, it takes {len(placeholders)}"))
    for node in graph_module.graph.nodes:
        try:
            if node.op == "placeholder":
                ops[node] = _Op("input")
            elif node.op == "output":
                ops[node] = _Op("output")
            elif node.op == "call_module":
                ops[node] = _module_op(modules[node.target])
            elif node.op == "call_function":
                ops[node] = _function_op(node)
            elif node.op == "call_method":
                ops[node] = _method_op(node)
            else:
                raise _Unsupported(f"graph op '{node.op}' ({node.target}) is not supported")
        except _Unsupported as exc:
            kind = f" ({type(modules[node.target]).__name__})" if node.op == "call_module" else ""
            problems.append((_node_where(node) + kind, str(exc)))
    if problems:
        raise UnsupportedOperationError(problems)
    return ops


# --------------------------------------------------------------------------------------------
# Calibration


@dataclass
class _Ranges:
    """Per node: the largest |value| over the calibration data and the per-sample shape."""
    max_abs: dict = field(default_factory=dict)
    shape: dict = field(default_factory=dict)


class _RangeRecorder(fx.Interpreter):
    def __init__(self, graph_module: fx.GraphModule, ranges: _Ranges):
        super().__init__(graph_module)
        self.ranges = ranges

    def run_node(self, node):
        out = super().run_node(node)
        if isinstance(out, torch.Tensor):
            # Read right away: an in-place op later in the graph may overwrite this tensor.
            peak = float(out.detach().abs().max()) if out.numel() else 0.0
            self.ranges.max_abs[node] = max(self.ranges.max_abs.get(node, 0.0), peak)
            self.ranges.shape[node] = tuple(out.shape[1:])
        return out


def _calibration_batches(data) -> Iterable[torch.Tensor]:
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        for start in range(0, data.shape[0], CALIBRATION_BATCH):
            yield data[start:start + CALIBRATION_BATCH]
        return
    for item in data:
        yield torch.as_tensor(item[0] if isinstance(item, (tuple, list)) else item)


def _calibrate(graph_module: fx.GraphModule, calibration_data) -> _Ranges:
    ranges = _Ranges()
    recorder = _RangeRecorder(graph_module, ranges)
    param = next(graph_module.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    batches = 0
    with torch.no_grad():
        for batch in _calibration_batches(calibration_data):
            if batch.dim() != 4:
                raise ValueError(f"calibration_data: expected images [N, C, H, W], got a batch of shape {tuple(batch.shape)}")
            recorder.run(batch.to(dtype))
            batches += 1
    if batches == 0:
        raise ValueError("calibration_data is empty")
    return ranges


# --------------------------------------------------------------------------------------------
# Graph -> layer plans (structure and fusion; no numbers yet)


@dataclass
class _Plan:
    """One layer of the network being built.  ``tail`` is the graph node whose value the layer
    currently outputs; fusing an op into the layer moves the tail to that op."""
    name: str
    kind: str                      # a _core.LayerKind name
    input: int
    tail: fx.Node
    op: _Op
    bn: nn.BatchNorm2d | None = None
    relu: bool = False
    residual_input: int = -1
    relu_after_residual: bool = False
    pre_residual: fx.Node | None = None   # GEMM value before a fused residual add
    flat_chw: tuple | None = None          # linear: torch CHW shape its input was flattened from


@dataclass(frozen=True)
class _Value:
    """Where a graph value lives: a layer's output (or the input, -1), and, when torch sees it
    flattened, the (C, H, W) shape it was flattened from."""
    layer: int
    flat_chw: tuple | None = None


class _GraphMapper:
    def __init__(self, ops: dict[fx.Node, _Op], ranges: _Ranges):
        self.ops = ops
        self.ranges = ranges
        self.plans: list[_Plan] = []
        self.values: dict[fx.Node, _Value] = {}
        self.names: set[str] = set()

    def map(self, graph: fx.Graph) -> tuple[list[_Plan], fx.Node, int]:
        input_node, output_layer = None, -1
        for node in graph.nodes:
            tag = self.ops[node].tag
            if tag == "input":
                input_node = node
                self.values[node] = _Value(NETWORK_INPUT)
            elif tag == "output":
                output_layer = self._output(node)
            else:
                getattr(self, "_map_" + tag)(node)
        return self.plans, input_node, output_layer

    # -- helpers

    def _fail(self, node: fx.Node, what: str):
        raise UnsupportedOperationError([(_node_where(node), what)])

    def _unique_name(self, node: fx.Node) -> str:
        base = _node_where(node)
        name, n = base, 2
        while name in self.names:
            name, n = f"{base}_{n}", n + 1
        self.names.add(name)
        return name

    def _add_plan(self, node: fx.Node, kind: str, source: fx.Node, **fields) -> _Plan:
        value = self.values[source]
        plan = _Plan(self._unique_name(node), kind, value.layer, node, self.ops[node], **fields)
        self.plans.append(plan)
        self.values[node] = _Value(len(self.plans) - 1)
        return plan

    def _sole_tail_of(self, node: fx.Node) -> _Plan | None:
        """The plan whose current output is `node`, when nothing else reads `node` (so an op on it
        can be fused into that plan without changing what other consumers see)."""
        layer = self.values[node].layer
        if layer == NETWORK_INPUT or len(node.users) != 1:
            return None
        plan = self.plans[layer]
        return plan if plan.tail is node else None

    def _spatial_input(self, node: fx.Node) -> fx.Node:
        source = node.args[0]
        if self.values[source].flat_chw is not None or len(self.ranges.shape[source]) != 3:
            self._fail(node, "expects a [N, C, H, W] tensor, got a flattened one")
        return source

    def _alias(self, node: fx.Node, source: fx.Node, value: _Value) -> None:
        self.values[node] = value
        plan = self._sole_tail_of(source)
        if plan is not None:
            plan.tail = node

    # -- one method per op tag

    def _map_conv(self, node):
        self._add_plan(node, "conv", self._spatial_input(node))

    def _map_max_pool(self, node):
        self._add_plan(node, "max_pool", self._spatial_input(node))

    def _map_avg_pool(self, node):
        self._add_plan(node, "avg_pool", self._spatial_input(node))

    def _map_global_avg_pool(self, node):
        source = self._spatial_input(node)
        _, h, w = self.ranges.shape[source]
        if h != w:
            self._fail(node, f"global average pool over a non-square {h}x{w} map is not supported")
        self.ops[node] = _Op("global_avg_pool", self.ops[node].module, kernel=h, stride=1, pad=0)
        self._add_plan(node, "avg_pool", source)

    def _map_bn(self, node):
        source = node.args[0]
        plan = self._sole_tail_of(source)
        if (plan is None or plan.kind != "conv" or plan.bn is not None or plan.relu
                or plan.residual_input >= 0 or self.ops[source].tag != "conv"):
            self._fail(node, "BatchNorm2d must directly follow a Conv2d whose output only it reads "
                             "(it is folded into that conv)")
        plan.bn = self.ops[node].module
        plan.tail = node
        self.values[node] = self.values[source]

    def _map_relu(self, node):
        source = node.args[0] if node.args else node.kwargs["input"]
        plan = self._sole_tail_of(source)
        if plan is None:
            # Nothing to fuse into (the input, or a value with several readers): a 1x1 max pool
            # with its ReLU flag is an exact standalone ReLU.
            plan = self._add_plan(node, "max_pool", source)
            plan.op = _Op("max_pool", kernel=1, stride=1, pad=0)
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
        self._alias(node, node.args[0], self.values[node.args[0]])

    def _map_flatten(self, node):
        source = node.args[0]
        value = self.values[source]
        shape = self.ranges.shape[source]
        if value.flat_chw is None:
            if len(shape) != 3:
                self._fail(node, f"flatten of a tensor of per-sample shape {shape} is not supported")
            value = _Value(value.layer, tuple(shape))
        self._alias(node, source, value)

    def _map_linear(self, node):
        source = node.args[0]
        value = self.values[source]
        if value.flat_chw is None or len(self.ranges.shape[source]) != 1:
            self._fail(node, "Linear must read a flattened [N, features] tensor (flatten(x, 1) first)")
        self._add_plan(node, "linear", source, flat_chw=value.flat_chw)
        # torch sees [N, features]; a following Linear reads it as a 1x1 map (no permutation).
        self.values[node] = _Value(len(self.plans) - 1, (self.ops[node].module.out_features, 1, 1))

    def _map_add(self, node):
        a, b = node.args[0], node.args[1]
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

    def _output(self, node: fx.Node) -> int:
        result = node.args[0]
        if not isinstance(result, fx.Node):
            self._fail(node, "the model must return a single tensor")
        layer = self.values[result].layer
        if layer < 0:
            self._fail(node, "the model returns its input unchanged")
        return layer


# --------------------------------------------------------------------------------------------
# Layer plans -> quantized _core.Network


class _Quantizer:
    def __init__(self, plans: list[_Plan], ranges: _Ranges, input_node: fx.Node):
        self.plans = plans
        self.ranges = ranges
        self.input_node = input_node
        self.frac: list[int] = []
        self.input_frac = q.frac_bits_for_range(ranges.max_abs[input_node])

    def build(self, name: str, output_layer: int) -> ImportedModel:
        net = _core.Network()
        net.name = name
        c, h, w = self.ranges.shape[self.input_node]
        net.input_shape = _core.Shape3(h, w, c)
        net.input_frac_bits = self.input_frac
        layers = [self._layer(plan) for plan in self.plans]
        net.layers = layers
        net.output_layer = output_layer
        net.resolve(f"<import_torch:{name}>")
        self._check_shapes(net)
        return ImportedModel(net, self.input_frac, list(self.frac))

    def _frac_of(self, layer: int) -> int:
        return self.input_frac if layer == NETWORK_INPUT else self.frac[layer]

    def _fit(self, *nodes: fx.Node) -> int:
        """Finest frac bits at which every node's calibrated range fits int8."""
        return min(q.frac_bits_for_range(self.ranges.max_abs[n]) for n in nodes)

    def _layer(self, plan: _Plan):
        layer = _core.Layer()
        layer.name = plan.name
        layer.kind = getattr(_core.LayerKind, plan.kind)
        layer.input = plan.input
        layer.relu = plan.relu
        layer.residual_input = plan.residual_input
        layer.relu_after_residual = plan.relu_after_residual
        x_frac = self._frac_of(plan.input)
        if plan.kind in ("conv", "linear"):
            y_frac = self._gemm(plan, layer, x_frac)
        elif plan.kind == "add":
            y_frac = self._add(plan, layer, x_frac)
        elif plan.kind == "avg_pool":
            y_frac = self._avg_pool(plan, layer, x_frac)
        else:  # max_pool: exact, keeps its input's scale
            layer.kernel, layer.stride, layer.pad = plan.op.kernel, plan.op.stride, plan.op.pad
            y_frac = x_frac
        self.frac.append(y_frac)
        return layer

    def _gemm_float_operands(self, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
        module = plan.op.module
        if plan.bn is not None:
            weight, bias = fold_batchnorm(module.weight, module.bias, plan.bn)
        else:
            weight = module.weight.detach().double().numpy()
            bias = (module.bias.detach().double().numpy() if module.bias is not None
                    else np.zeros(weight.shape[0]))
        if plan.kind == "conv":
            weight = weight.transpose(0, 2, 3, 1)          # [O, C, kh, kw] -> [O, kh, kw, C]
        else:
            c, h, w = plan.flat_chw                         # torch flattens CHW, we flatten HWC
            weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(weight).reshape(weight.shape[0], -1), bias

    def _gemm(self, plan: _Plan, layer, x_frac: int) -> int:
        weight, bias = self._gemm_float_operands(plan)
        w_q, w_frac = q.quantize_weights(weight)
        acc_frac = w_frac + x_frac
        y_frac = self._fit(plan.tail, *([plan.pre_residual] if plan.pre_residual is not None else []))
        y_frac = max(min(y_frac, acc_frac), acc_frac - q.OUT_SHIFT_MAX)
        if plan.residual_input >= 0:
            r_frac = self.frac[plan.residual_input]
            y_frac = min(y_frac, r_frac + q.ALIGN_SHIFT_MAX)
            self._check_align(plan, y_frac - r_frac, "residual")
            layer.residual_shift = y_frac - r_frac
        layer.out_shift = acc_frac - y_frac
        layer.weights = w_q.reshape(-1)
        layer.bias, layer.bias_shift = q.quantize_bias(bias, acc_frac)
        layer.out_channels = weight.shape[0]
        if plan.kind == "conv":
            layer.kernel, layer.stride, layer.pad = plan.op.kernel, plan.op.stride, plan.op.pad
        return y_frac

    def _add(self, plan: _Plan, layer, a_frac: int) -> int:
        b_frac = self.frac[plan.residual_input]
        y_frac = min(self._fit(plan.tail), a_frac + q.ALIGN_SHIFT_MAX, b_frac + q.ALIGN_SHIFT_MAX)
        layer.input_shift = y_frac - a_frac
        layer.residual_shift = y_frac - b_frac
        self._check_align(plan, layer.input_shift, "first operand")
        self._check_align(plan, layer.residual_shift, "second operand")
        return y_frac

    def _avg_pool(self, plan: _Plan, layer, x_frac: int) -> int:
        k = plan.op.kernel
        layer.kernel, layer.stride, layer.pad = k, plan.op.stride, plan.op.pad
        y_frac = self._fit(plan.tail)
        # y = avg_mult * sum / 2^out_shift must approximate mean * 2^(y_frac - x_frac).
        while 2.0 ** (y_frac - x_frac) / (k * k) > q.AVG_MULT_MAX:
            y_frac -= 1
        layer.avg_mult, layer.out_shift = q.avg_pool_multiplier(2.0 ** (y_frac - x_frac) / (k * k))
        return y_frac

    @staticmethod
    def _check_align(plan: _Plan, shift: int, what: str) -> None:
        if not -q.ALIGN_SHIFT_MAX <= shift <= q.ALIGN_SHIFT_MAX:
            raise UnsupportedOperationError([(plan.name, f"the {what} of the add is {abs(shift)} binary orders of "
                                                         f"magnitude off the sum's scale (the format aligns at most "
                                                         f"{q.ALIGN_SHIFT_MAX})")])

    def _check_shapes(self, net) -> None:
        """The resolved C++ shapes must match what torch computed, or the mapping is wrong."""
        for plan, layer in zip(self.plans, net.layers):
            torch_shape = self.ranges.shape[plan.tail]
            ours = tuple(layer.out_shape)
            expected = (torch_shape[1], torch_shape[2], torch_shape[0]) if len(torch_shape) == 3 else None
            same = ours == expected if expected else int(np.prod(ours)) == int(np.prod(torch_shape))
            if not same:
                raise AssertionError(f"import_torch: layer {plan.name} has shape {ours} but torch computed "
                                     f"{torch_shape} (CHW); this is an importer bug")
