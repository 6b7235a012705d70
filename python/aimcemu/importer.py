"""PyTorch -> aimcemu INT8 network import (power-of-two scales).

``import_torch(module, calibration_data)`` traces an eval-mode PyTorch CNN with torch.fx, turns
each graph node into a framework-neutral node (aimcemu._netbuild, shared with the ONNX importer),
measures every value's range on the calibration data and lets _netbuild map the nodes onto the
layer kinds of formats/network.hpp, fuse what the accelerator's post-processing absorbs and choose
power-of-two scales.  Returns a resolved ``_core.Network``.  docs/import.md describes the scheme.

Anything the format cannot express raises UnsupportedOperationError naming every offending module;
nothing is ever skipped silently.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from . import _core
from . import _netbuild as nb
from ._netbuild import DEFAULT_PERCENTILE, ImportedModel, UnsupportedOperationError  # noqa: F401 (public)
from ._optional import require

torch = require("torch", "aimcemu.importer (import_torch)")
import torch.fx as fx  # noqa: E402  (after the check above, which names the extra to install)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CALIBRATION_BATCH = 256


def import_torch(module: nn.Module, calibration_data, name: str | None = None, calibration: str = "max",
                 percentile: float = DEFAULT_PERCENTILE) -> _core.Network:
    """Converts an eval-mode PyTorch CNN to a resolved INT8 ``_core.Network``.

    calibration_data: a float tensor/array [N, C, H, W], or an iterable of such batches (or of
    (images, labels) tuples, as a DataLoader yields).  calibration="max" takes each tensor's
    scale from the largest |value| it reaches on that data; "percentile" from the given
    percentile of |value| (clipping rare outliers for a finer scale)."""
    return convert_torch(module, calibration_data, name, calibration, percentile).network


def convert_torch(module: nn.Module, calibration_data, name: str | None = None, calibration: str = "max",
                  percentile: float = DEFAULT_PERCENTILE) -> ImportedModel:
    """import_torch, also returning the frac bits of every tensor."""
    if any(m.training for m in module.modules()):
        raise ValueError("import_torch needs the module in eval mode (BatchNorm statistics and dropout are "
                         "frozen only then): call module.eval() first")
    name = name or type(module).__name__
    source = f"<import_torch:{nb.printable(name)}>"   # a NUL would cut the C++ error messages short
    percentile = nb.check_calibration_method(calibration, percentile, source, True)
    graph_module = _trace(module)
    ops = _classify_graph(graph_module)
    nodes, node_of = _neutral_nodes(graph_module, ops)
    nb.check_parameters(nodes, source)
    stats = _calibrate(graph_module, calibration_data, source)
    ranges = nb.ranges_from_statistics(stats, node_of, calibration, percentile)
    return nb.build_network(nodes, _output_node(graph_module, node_of), ranges, name, source)


def fold_batchnorm(weight: torch.Tensor, bias: torch.Tensor | None, bn: nn.BatchNorm2d) -> tuple[np.ndarray, np.ndarray]:
    """Conv weight [O, C, kh, kw] and bias [O] with an eval-mode BatchNorm folded in, in float64:
    bn(conv(x)) = conv'(x) with w' = w * g, b' = (b - mean) * g + beta, g = gamma / sqrt(var + eps)."""
    return nb.fold_batchnorm(_f64(weight), None if bias is None else _f64(bias), _batchnorm(bn))


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _batchnorm(bn: nn.BatchNorm2d) -> nb.BatchNorm:
    n = bn.num_features
    return nb.BatchNorm(gamma=_f64(bn.weight) if bn.weight is not None else np.ones(n),
                        beta=_f64(bn.bias) if bn.bias is not None else np.zeros(n),
                        mean=_f64(bn.running_mean), var=_f64(bn.running_var), eps=float(bn.eps))


# --------------------------------------------------------------------------------------------
# Tracing and op classification


def _trace(module: nn.Module) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(module)
    except Exception as exc:  # fx raises several types (TraceError, TypeError, ...) for the same cause
        raise UnsupportedOperationError([(type(module).__name__, f"torch.fx cannot trace it ({exc})")]) from exc


@dataclass
class _Op:
    """One graph node as a layer kind: a _netbuild tag, or output, or shape (x.size(0) and the
    like, which only feed a reshape's target shape)."""
    tag: str
    module: nn.Module | None = None
    geometry: nb.WindowGeometry = nb.WindowGeometry()


class _Unsupported(Exception):
    pass


def _pair(value, what: str) -> tuple[int, int]:
    """A kernel/stride/padding given as int or (h, w)."""
    try:
        return nb.pair(value, what)
    except ValueError as exc:
        raise _Unsupported(str(exc)) from None


def _pool_geometry(m, exclude_pad: bool = False) -> nb.WindowGeometry:
    """nn.MaxPool2d / nn.AvgPool2d: the stride defaults to the kernel; symmetric padding per axis."""
    kernel = _pair(m.kernel_size, "kernel_size")
    stride = _pair(m.stride if m.stride is not None else m.kernel_size, "stride")
    ph, pw = _pair(m.padding, "padding")
    return nb.WindowGeometry(kernel, stride, (ph, ph, pw, pw), exclude_pad=exclude_pad)


def _conv_op(m: nn.Conv2d) -> _Op:
    if m.groups != 1:
        raise _Unsupported(f"grouped convolution (groups={m.groups}) is not supported")
    if tuple(m.dilation) != (1, 1):
        raise _Unsupported(f"dilation {tuple(m.dilation)} is not supported")
    if m.padding_mode != "zeros":
        raise _Unsupported(f"padding_mode '{m.padding_mode}' is not supported (zero padding only)")
    kernel, stride = _pair(m.kernel_size, "kernel_size"), _pair(m.stride, "stride")
    if m.padding == "valid":
        return _Op("conv", m, nb.WindowGeometry(kernel, stride))
    if m.padding == "same":   # PyTorch allows it at stride 1 only; the odd pad goes to the end
        return _Op("conv", m, nb.WindowGeometry(kernel, stride, same="upper"))
    ph, pw = _pair(m.padding, "padding")
    return _Op("conv", m, nb.WindowGeometry(kernel, stride, (ph, ph, pw, pw)))


def _max_pool_op(m: nn.MaxPool2d) -> _Op:
    if m.ceil_mode:
        raise _Unsupported("ceil_mode=True is not supported (output sizes round down)")
    if m.return_indices:
        raise _Unsupported("return_indices=True is not supported")
    if _pair(m.dilation, "dilation") != (1, 1):
        raise _Unsupported(f"dilation={m.dilation} is not supported (only 1)")
    return _Op("max_pool", m, _pool_geometry(m))


def _avg_pool_op(m: nn.AvgPool2d) -> _Op:
    if m.ceil_mode:
        raise _Unsupported("ceil_mode=True is not supported (output sizes round down)")
    if m.divisor_override is not None:
        raise _Unsupported("divisor_override is not supported")
    return _Op("avg_pool", m, _pool_geometry(m, exclude_pad=not m.count_include_pad))


def _check_tensors(m: nn.Module) -> None:
    """The module's own parameters and buffers must hold real values the importer can read:
    not a lazy module's uninitialized ones, not meta-device ones (no data), not complex ones
    (float64 conversion would drop the imaginary part with only a warning)."""
    for name, tensor in (*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)):
        if isinstance(tensor, nn.parameter.UninitializedTensorMixin):
            raise _Unsupported(f"{name} is uninitialized (a lazy module: run the model on one batch first)")
        if tensor.is_meta:
            raise _Unsupported(f"{name} is on the meta device (it holds no values)")
        if tensor.is_complex():
            raise _Unsupported(f"{name} is {str(tensor.dtype).removeprefix('torch.')} (only real values)")


def _module_op(m: nn.Module) -> _Op:
    _check_tensors(m)
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


def _is_shape_value(arg) -> bool:
    """x.size(...), x.shape, x.shape[i]: a shape, not a tensor."""
    if not isinstance(arg, fx.Node):
        return False
    if arg.op == "call_method" and arg.target in ("size", "dim"):
        return True
    if arg.op == "call_function" and arg.target is getattr and arg.args[1] in ("shape", "ndim"):
        return True
    return arg.op == "call_function" and arg.target is operator.getitem and _is_shape_value(arg.args[0])


def _function_op(node: fx.Node) -> _Op:
    target = node.target
    if _is_shape_value(node):
        return _Op("shape")
    if target is torch.reshape:
        return _Op("flatten")     # the mapper accepts only a reshape to [N, features]
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
    if _is_shape_value(node):
        return _Op("shape")
    if node.target in ("view", "reshape"):
        return _Op("flatten")     # the mapper accepts only a reshape to [N, features]
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
    problems = _in_place_problems(graph_module, ops, modules)
    if problems:
        raise UnsupportedOperationError(problems)
    return ops


def _is_in_place(node: fx.Node, modules: dict) -> bool:
    """Whether the node overwrites its first operand: nn.ReLU(inplace=True), F.relu(x,
    inplace=True), x.relu_(), x.add_(y), x.__iadd__(y), operator.iadd (x += y traces as a plain add
    in torch.fx, so only an explicit call is seen)."""
    if node.op == "call_module":
        module = modules[node.target]
        return isinstance(module, nn.ReLU) and bool(module.inplace)
    if node.op == "call_function":
        if node.target in _RELU_FUNCTIONS:
            return bool(node.kwargs.get("inplace", node.args[1] if len(node.args) > 1 else False))
        return node.target is operator.iadd
    return node.op == "call_method" and node.target in ("relu_", "add_", "__iadd__")


def _in_place_problems(graph_module: fx.GraphModule, ops: dict, modules: dict) -> list[tuple[str, str]]:
    """The importer computes every op out of place.  That is exact for an in-place op only when
    nothing reads the tensor it overwrites under another name: the usual `out = self.relu(out)`
    with nn.ReLU(inplace=True) (the input's only reader is the ReLU) imports; an in-place op
    whose input (or a view of it: reshape, flatten, identity, an earlier in-place op) is read
    after it under another name, such as one whose result is dropped while the input is read
    later, is refused.  A reader that runs before the op gets the value out of place computing
    gives it; reading the overwritten tensor's shape is harmless."""
    def first_operand(node):
        args = _tensor_args(node)
        return args[0] if args else None

    def aliases(node):   # the node's output is (or may be a view of) its first operand
        return node.op != "placeholder" and (_is_in_place(node, modules) or ops[node].tag in ("identity", "flatten"))

    order = {node: position for position, node in enumerate(graph_module.graph.nodes)}   # execution order
    problems = []
    for node in graph_module.graph.nodes:
        if node.op not in ("call_module", "call_function", "call_method") or not _is_in_place(node, modules):
            continue
        target = first_operand(node)
        if target is None:
            continue
        root = target
        while aliases(root) and first_operand(root) is not None:
            root = first_operand(root)
        group, pending = [], [root]       # every name of the overwritten memory
        while pending:
            member = pending.pop()
            group.append(member)
            pending.extend(u for u in member.users if aliases(u) and first_operand(u) is member and u not in group)
        after = {node}                    # the node's result and its views see the new value
        for member in group:
            if member in after or any(first_operand(member) is a for a in after if aliases(member)):
                after.add(member)
        readers = ["the model's output" if u.op == "output" else _node_where(u)
                   for member in group if member not in after for u in member.users
                   if order[u] > order[node] and ops[u].tag != "shape"
                   and not (u in group and first_operand(u) is member)]
        if readers:
            problems.append((_node_where(node), f"in-place op on the value of '{_node_where(target)}', which "
                             f"{', '.join(sorted(set(readers)))} read(s) after it: the importer computes every op "
                             "out of place, so those readers would get the value from before it; compute it out of "
                             "place (nn.ReLU(), F.relu(x), x + y) or read only its result"))
    return problems


# --------------------------------------------------------------------------------------------
# fx graph -> neutral nodes


def _neutral_nodes(graph_module: fx.GraphModule, ops: dict) -> tuple[list[nb.Node], dict]:
    """The tensor-valued fx nodes as _netbuild nodes (topological order), and fx node -> node.
    Shape computations (x.size(0), x.shape[0]) carry no tensor and get no node."""
    node_of: dict[fx.Node, nb.Node] = {}
    nodes = []
    for fx_node in graph_module.graph.nodes:
        op = ops[fx_node]
        if op.tag in ("output", "shape"):
            continue
        inputs = [node_of[a] for a in _tensor_args(fx_node) if a in node_of]
        node = nb.Node(fx_node.name, _node_where(fx_node), op.tag, inputs, geometry=op.geometry)
        module = op.module
        if op.tag in ("conv", "linear"):
            node.weight = _f64(module.weight)
            node.bias = _f64(module.bias) if module.bias is not None else None
        elif op.tag == "bn":
            node.bn = _batchnorm(module)
        node_of[fx_node] = node
        nodes.append(node)
    for fx_node, node in node_of.items():
        node.users = sum(1 for user in fx_node.users if ops[user].tag != "shape")
    return nodes, node_of


def _tensor_args(fx_node: fx.Node) -> list[fx.Node]:
    """The node's tensor operands in order (the data input first)."""
    if fx_node.op == "placeholder":
        return []
    args = list(fx_node.args) or list(fx_node.kwargs.values())
    tag_first_only = fx_node.target not in (*_ADD_FUNCTIONS, "add", "add_", "__add__", "__iadd__")
    args = args[:1] if tag_first_only else args[:2]
    return [a for a in args if isinstance(a, fx.Node)]


def _output_node(graph_module: fx.GraphModule, node_of: dict) -> nb.Node:
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    result = output.args[0]
    if not isinstance(result, fx.Node) or result not in node_of:
        raise UnsupportedOperationError([("output", "the model must return a single tensor")])
    return node_of[result]


# --------------------------------------------------------------------------------------------
# Calibration


class _RangeRecorder(fx.Interpreter):
    def __init__(self, graph_module: fx.GraphModule, stats: nb.RangeStatistics):
        super().__init__(graph_module)
        self.stats = stats
        self.refusal: str | None = None   # a FormatError's message before fx appends its node dump
        self.batch = 0                    # the calibration batch being run, for messages

    def run_node(self, node):
        try:
            out = super().run_node(node)
        except (RuntimeError, ValueError, IndexError) as exc:
            # torch's own checks (channels, a bias or BatchNorm of another size, operands that do not
            # broadcast): one line naming the module, not torch's traceback and fx's node dump.
            self.refusal = (f"{self.stats.source}: field '{_module_label(node, self.module)}': torch cannot run it "
                            f"on calibration batch {self.batch} (counting from 0): {_first_line(exc)}")
            raise _core.FormatError(self.refusal) from exc
        if isinstance(out, torch.Tensor) and out.dim() >= 1:
            # Read right away: an in-place op later in the graph may overwrite this tensor.
            where = "calibration_data" if node.op == "placeholder" else _node_where(node)
            try:
                self.stats.update(node, out.detach().cpu().numpy(), where)
            except _core.FormatError as exc:
                self.refusal = str(exc)
                raise
            self.stats.shape[node] = tuple(out.shape[1:])
        return out


def _module_label(node: fx.Node, root: nn.Module) -> str:
    """The module's qualified name and type ("layer1.0.conv1 (Conv2d)"), or the node's place."""
    if node.op == "call_module":
        return f"{node.target} ({type(root.get_submodule(node.target)).__name__})"
    return _node_where(node)


def _first_line(exc: Exception) -> str:
    """The first non-empty line of an exception's message (fx appends its node dump below it)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _calibration_batches(data, source: str) -> Iterable[torch.Tensor]:
    """The calibration images as tensors of real numbers, batch by batch."""
    if isinstance(data, np.generic):          # a NumPy scalar: no images, and not iterable
        data = np.asarray(data)
    if isinstance(data, np.ndarray):
        nb.check_calibration_dtype(data.dtype, source)
        data = torch.from_numpy(data)
    if isinstance(data, torch.Tensor):
        _check_tensor_type(data, source)
        nb.check_calibration_rank(tuple(data.shape), source)
        for start in range(0, data.shape[0], CALIBRATION_BATCH):
            yield data[start:start + CALIBRATION_BATCH]
        return
    for index, item in enumerate(nb.calibration_iterable(data, source)):
        yield _batch_tensor(item[0] if isinstance(item, (tuple, list)) else item, index, source)


def _batch_tensor(item, index: int, source: str) -> torch.Tensor:
    """One batch of an iterable as a tensor; anything but real numbers is refused naming the batch."""
    if isinstance(item, torch.Tensor):
        _check_tensor_type(item, source, index)
        return item
    try:
        array = np.asarray(item)
    except (ValueError, TypeError) as exc:   # ragged nested lists, ...
        raise _core.FormatError(f"{source}: field 'calibration_data': batch {index} (counting from 0) is not an "
                                f"array of images ({_first_line(exc)})") from None
    nb.check_calibration_dtype(array.dtype, source, index)
    return torch.as_tensor(array)


def _check_tensor_type(tensor: torch.Tensor, source: str, batch: int | None = None) -> None:
    if tensor.is_complex() or tensor.dtype == torch.bool or tensor.is_quantized:
        nb.refuse_calibration_type(str(tensor.dtype).removeprefix("torch."), source, batch)


def _calibrate(graph_module: fx.GraphModule, calibration_data, source: str) -> nb.RangeStatistics:
    stats = nb.RangeStatistics(source)
    recorder = _RangeRecorder(graph_module, stats)
    param = next(graph_module.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    batches = 0
    first_shape = None
    with torch.no_grad():
        for batch in _calibration_batches(calibration_data, source):
            if batch.dim() != 4:
                raise _core.FormatError(f"{source}: field 'calibration_data': expected images [N, C, H, W], got a "
                                        f"batch of shape {tuple(batch.shape)}")
            # The network takes one image size: every batch must have the first one's.
            first_shape = first_shape or tuple(batch.shape[1:])
            if tuple(batch.shape[1:]) != first_shape:
                raise _core.FormatError(f"{source}: field 'calibration_data': batch {batches} (counting from 0) "
                                        f"holds images of shape {tuple(batch.shape[1:])}, batch 0 of {first_shape} "
                                        "(C, H, W); the network takes one image size")
            recorder.batch = batches
            try:
                # A copy: an in-place op on the input (nn.ReLU(inplace=True) first) would otherwise
                # overwrite the caller's images (torch.from_numpy and slices share their memory).
                recorder.run(batch.to(dtype, copy=True))
            except _core.FormatError:
                raise _core.FormatError(recorder.refusal) from None
            batches += 1
    if batches == 0:
        raise _core.FormatError(f"{source}: field 'calibration_data': holds no images")
    return stats
