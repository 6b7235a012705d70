"""Bad arguments to Peripherals and a writer's round metrics used after commit get errors or the
right result, never a crash or garbage.

Each case runs in a child process: on code without the checks the child dies of SIGSEGV or prints
garbage (an index into a layer without settings, accumulators wider than the layer, peripherals
made for another network, a RoundMetrics reading the writer's freed reference), raises an error
naming no argument or gives a wrong result (a RoundMetrics of another network, images or writer),
which fails the test instead of killing pytest.  The child asserts; the test checks it exited cleanly."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import gc, os, re, tempfile
import numpy as np
from aimcemu import _core

def refused(call, field):
    try:
        call()
    except _core.FormatError as e:
        assert f"field '{field}'" in str(e), str(e)
        return str(e)
    raise AssertionError(f"no FormatError naming {field}")

def resnet(classes):
    net = _core.zoo.resnet18(1, 32, classes)
    net.resolve()
    return net
"""

PERIPHERALS = PRELUDE + """
net = resnet(10)
L = len(net.layers) - 1                      # the linear layer, 10 outputs
fc = net.layers[L].name
settings = [None] * len(net.layers)
settings[L] = {"out_noise": 0.1}
p = _core.niu.Peripherals(net, settings, seed=1)
x = np.zeros(net.layers[L].in_shape.h * net.layers[L].in_shape.w * net.layers[L].in_shape.c, np.int8)
"""

# A network, 4 images, their activations and a results writer for them (no reference set yet).
WRITER = PRELUDE + """
net = resnet(10)
images = np.random.default_rng(0).integers(-128, 128, size=(4, 32, 32, 3), dtype=np.int8)
acts = _core.run_network(net, images, threads=1)
path = os.path.join(tempfile.mkdtemp(), "r.h5")
w = _core.ResultsWriter(path, net, np.zeros(4, dtype=np.int64), [(0, 0, 0.0)], "{}", "none", 1, True)
"""

# A writer of 4 images with every reference set, and its RoundMetrics (every layer but the output).
METRICS = WRITER + """
for l in range(len(net.layers)):
    w.set_reference(l, acts[l])
m = w.round_metrics()
assert m.measured == [l for l in range(len(net.layers)) if l != net.output_index()]
"""

CASES = {
    # apply_output / input_codes / registers on a layer without settings read a disengaged
    # optional and an empty bias table.
    "layer_without_settings": PERIPHERALS + """
first = net.layers[0].name
x0 = np.zeros(32 * 32 * 3, np.int8)
refused(lambda: p.apply_output(0, 0, x0, np.zeros((1, 4096), np.int32)), "peripherals." + first)
refused(lambda: p.input_codes(0, x0), "peripherals." + first)
refused(lambda: p.registers(0, x0), "peripherals." + first)
assert not p.active(0) and p.active(L)
""",
    "layer_out_of_range": PERIPHERALS + """
for bad in (-1, len(net.layers), 999):
    refused(lambda: p.apply_output(bad, 0, x, np.zeros((1, 10), np.int32)), "layer")
    refused(lambda: p.input_codes(bad, x), "layer")
    refused(lambda: p.registers(bad, x), "layer")
""",
    # N far above the layer's 10 outputs read the bias table past its end.
    "accumulators_wider_than_the_layer": PERIPHERALS + """
for n in (1 << 22, 11, 9, 0):
    refused(lambda: p.apply_output(L, 0, x, np.zeros((1, n), np.int32)), "acc")
out = p.apply_output(L, 0, x, np.zeros((3, 10), np.int32))   # any number of rows of the right width
assert out.shape == (3, 10)
""",
    "input_of_another_size": PERIPHERALS + """
for size in (16, x.size + 1):
    refused(lambda: p.input_codes(L, np.zeros(size, np.int8)), "x")
    refused(lambda: p.apply_output(L, 0, np.zeros(size, np.int8), np.zeros((1, 10), np.int32)), "x")
""",
    # Same layer count, another output width: the run used to return without error.
    "run_network_on_another_network": PERIPHERALS + """
big = resnet(1000)
images = np.zeros((2, 32, 32, 3), np.int8)
message = refused(lambda: _core.run_network(big, images, threads=1, keep=[-1], peripherals=p), "peripherals." + fc)
assert "10 outputs" in message and "1000 outputs" in message, message
small = resnet(10)   # the same network built again: accepted
_core.run_network(small, images, threads=1, keep=[-1], peripherals=p)
""",
    "run_published_on_another_network": PERIPHERALS + """
big = resnet(1000)
emu = _core.niu.Emulator(big, [])
emu.write_round([])
images = np.zeros((2, 32, 32, 3), np.int8)
refused(lambda: emu.run_published(images, threads=1, peripherals=p), "peripherals." + fc)
""",
    # Same shapes, another bias: the bias term the peripherals subtract would be another layer's.
    "run_network_on_another_bias": PERIPHERALS + """
other = resnet(10)
layer = other.layers[L]
bias = np.array(layer.bias, dtype=np.int8)
bias[3] = np.int8(bias[3] ^ 0x55)
layer.bias = bias
assert np.array(other.layers[L].bias)[3] == bias[3]
refused(lambda: _core.run_network(other, np.zeros((1, 32, 32, 3), np.int8), threads=1, peripherals=p),
        "peripherals." + fc)
""",
    "another_layer_count": PERIPHERALS + """
shallow = _core.zoo.resnet18(1, 32, 10)
shallow.layers = list(shallow.layers[:3])
shallow.resolve()
refused(lambda: _core.run_network(shallow, np.zeros((1, 32, 32, 3), np.int8), threads=1, peripherals=p),
        "peripherals")
""",
    # A RoundMetrics made for another network of the same layer count, or for fewer images than
    # the pass runs, stopped in a range check during the pass: a RuntimeError naming no argument.
    "run_published_metrics_of_another_network": METRICS + """
big = _core.zoo.resnet18(1, 64, 10)      # the same 23 layers, every activation 4 times larger
big.resolve()
emu = _core.niu.Emulator(big, [])
emu.write_round([])
message = refused(lambda: emu.run_published(np.zeros((4, 64, 64, 3), np.int8), threads=1, metrics=m),
                  "metrics." + net.layers[0].name)
assert "16x16x64" in message and "32x32x64" in message, message
wide = resnet(1000)                      # only the (unmeasured) output layer differs
emu = _core.niu.Emulator(wide, [])
emu.write_round([])
refused(lambda: emu.run_published(images, threads=1, metrics=m), "metrics." + net.layers[net.output_index()].name)
assert all(v == 0 for l in m.measured for v in m.sums(l))   # nothing was measured
""",
    "run_published_metrics_for_other_images": METRICS + """
emu = _core.niu.Emulator(net, [])
emu.write_round([])
eight = np.concatenate([images, images])
refused(lambda: emu.run_published(eight, threads=1, metrics=m), "images")
assert all(v == 0 for l in m.measured for v in m.sums(l))
emu.run_published(images, threads=1, metrics=m, first_image=1000)   # first_image only keys noise
for l in m.measured:
    assert m.sums(l)[3] == 0 and m.sums(l)[5] == acts[l].size, (l, m.sums(l))
w.set_round_metrics(0, m)
""",
    # Sums taken against another writer's reference (or one set again since) were stored as this
    # file's metrics without a word.
    "set_round_metrics_from_another_writer": METRICS + """
other_path = os.path.join(tempfile.mkdtemp(), "other.h5")
other = _core.ResultsWriter(other_path, net, np.zeros(4, dtype=np.int64), [(0, 0, 0.0)], "{}", "none", 1, True)
for l in range(len(net.layers)):
    other.set_reference(l, acts[l])
emu = _core.niu.Emulator(net, [])
emu.write_round([])
emu.run_published(images, threads=1, metrics=m)
first = net.layers[m.measured[0]].name
refused(lambda: other.set_round_metrics(0, m), "metrics." + first)
w.set_reference(m.measured[0], acts[m.measured[0]])                  # the same values, set again
refused(lambda: w.set_round_metrics(0, m), "metrics." + first)
again = w.round_metrics()
emu.run_published(images, threads=1, metrics=again)
w.set_round_metrics(0, again)
other_metrics = other.round_metrics()
emu.run_published(images, threads=1, metrics=other_metrics)
other.set_round_metrics(0, other_metrics)
""",
    # One RoundMetrics measures one pass; stored for two rounds it gave the second round the
    # first's metrics without a word.  A store that fails (here: no pass measured them, so their
    # sums cover no values) does not count: the same metrics store once their pass has run.
    "set_round_metrics_for_two_rounds": WRITER.replace("[(0, 0, 0.0)]", "[(0, 0, 0.0), (1, 0, 0.0)]") + """
for l in range(len(net.layers)):
    w.set_reference(l, acts[l])
m = w.round_metrics()
emu = _core.niu.Emulator(net, [])
emu.write_round([])
unmeasured = w.round_metrics()
refused(lambda: w.set_round_metrics(1, unmeasured), "layers/" + net.layers[unmeasured.measured[0]].name + "/activations")
emu.run_published(images, threads=1, metrics=unmeasured)
w.set_round_metrics(1, unmeasured)
emu.run_published(images, threads=1, metrics=m)
w.set_round_metrics(0, m)
message = refused(lambda: w.set_round_metrics(1, m), "metrics")
assert "already stored as round 0" in message and "each round needs its own" in message, message
refused(lambda: w.set_round_metrics(0, m), "metrics")   # the same round again: stored once
""",
    # The metrics kept spans into the writer's own reference copies; commit() freed them.  The
    # emulator runs with no AIMC layer, so every round equals the reference exactly.
    "metrics_after_commit": WRITER + """
for l in range(len(net.layers)):
    if w.reference_needed(l):
        w.set_reference(l, acts[l])
m = w.round_metrics()
measured = m.measured
assert measured
emu = _core.niu.Emulator(net, [])
emu.write_round([])
_, outs = emu.run_published(images, threads=1, metrics=m)
before = {l: m.sums(l) for l in measured}
for l in measured:
    assert before[l][3] == 0 and before[l][4] == 0 and before[l][5] == acts[l].size, (l, before[l])
w.set_round_metrics(0, m)
w.set_round(0, net.output_index(), outs[net.output_index()])
w.commit()
junk = [bytearray(b"\\x7f" * (16 * 16 * 64 * 4)) for _ in range(50)] + [np.full(10**6, 77, np.int8) for _ in range(5)]
emu.run_published(images, threads=1, metrics=m)   # the same images again, after commit
for l in measured:
    assert m.sums(l) == tuple(2 * v for v in before[l]), (l, m.sums(l), before[l])
refused(w.round_metrics, "file")
refused(lambda: w.set_round_metrics(0, m), "file")
refused(lambda: w.set_reference(0, acts[0]), "file")
refused(w.commit, "file")
del w
gc.collect()
junk += [bytearray(b"\\x7f" * (16 * 16 * 64 * 4)) for _ in range(50)]
emu.run_published(images, threads=2, metrics=m)   # after the writer is gone
for l in measured:
    assert m.sums(l) == tuple(3 * v for v in before[l]), (l, m.sums(l), before[l])
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_or_right_never_a_crash(case, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the child's tempfile.mkdtemp() folders, removed by pytest
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(CASES[case])], capture_output=True, text=True,
                           timeout=300, env=env)
    assert child.returncode == 0, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
