"""A network edited after resolve() is refused by every entry point that runs it, with a
FormatError naming the field, instead of being run on its stale shapes (which read and wrote past
the pass's buffers: free(): invalid pointer, SIGSEGV, or silent garbage).  Each case runs in a
child process, since on code without the check it crashes the interpreter."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aimcemu
from aimcemu import _core

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from aimcemu import _core, modelfile
    net = modelfile.load_model(str(modelfile.embedded_paths()[0]))
    case = sys.argv[1]

    def conv_pool_net():
        conv = _core.Layer()
        conv.name, conv.kind, conv.kernel, conv.pad, conv.out_channels = "conv", _core.LayerKind.conv, 3, 1, 4
        conv.weights = np.ones(4 * 9, np.int8)
        conv.bias = np.zeros(4, np.int8)
        pool = _core.Layer()
        pool.name, pool.kind, pool.input, pool.kernel, pool.stride = "pool", _core.LayerKind.max_pool, 0, 2, 2
        small = _core.Network()
        small.name, small.input_shape, small.layers = "small", _core.Shape3(8, 8, 1), [conv, pool]
        small.resolve()
        return small

    images = np.ones((2, 8, 8, 1), np.int8)
    layer = net.layers[0]
    if case == "weights":
        layer.weights = np.zeros(3, dtype=np.int8)
    elif case == "out_channels":
        layer.out_channels = 1000
    elif case == "input":
        net.layers[3].input = 5
    elif case == "kernel":
        layer.kernel = 7
    elif case == "input_shape":
        net.input_shape = _core.Shape3(1, 1, 1)
        images = np.ones((2, 1, 1, 1), np.int8)
    elif case == "input_shape_consistent":
        # A fully convolutional network: every field check passes at 6x6, only the shapes are stale.
        net = conv_pool_net()
        net.input_shape = _core.Shape3(6, 6, 1)
        images = np.ones((2, 6, 6, 1), np.int8)
    elif case == "stride_consistent":
        net = conv_pool_net()
        net.layers[1].stride = 1
    try:
        _core.run_network(net, images)
    except ValueError as e:
        print("FormatError:", e)
    else:
        print("ran")
""")


def run_case(case: str) -> str:
    done = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"child exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("case, expected", [
    ("weights", "layers/0 (stem)/weights"),
    ("out_channels", "N=1000"),
    ("input", "layers/3 (max_pool)/input"),
    ("kernel", "M=49"),
    ("input_shape", "window larger than the padded input"),
    ("input_shape_consistent", "field 'input_shape': changed since Network.resolve()"),
    ("stride_consistent", "field 'layers/1 (pool)': changed since Network.resolve()"),
])
def test_run_network_refuses_a_network_edited_after_resolve(case, expected):
    out = run_case(case)
    assert out.startswith("FormatError:"), out
    assert expected in out, out


def test_resolve_after_the_edit_makes_the_network_run_again():
    net = _core.Network()
    conv = _core.Layer()
    conv.name, conv.kind, conv.kernel, conv.out_channels = "conv", _core.LayerKind.conv, 1, 2
    conv.weights = np.array([1, -1], np.int8)
    conv.bias = np.zeros(2, np.int8)
    net.name, net.input_shape, net.layers = "one", _core.Shape3(2, 2, 1), [conv]
    net.resolve()
    net.input_shape = _core.Shape3(3, 3, 1)
    images = np.arange(9, dtype=np.int8).reshape(1, 3, 3, 1)
    with pytest.raises(aimcemu.FormatError, match="changed since"):
        _core.run_network(net, images)
    net.resolve()
    out = _core.run_network(net, images)[0]
    np.testing.assert_array_equal(out[..., 0], images[..., 0])
    np.testing.assert_array_equal(out[..., 1], -images[..., 0])
