"""Several Python threads may call one ResultsWriter at once (a run's RoundWriter thread writes
rounds while the run's thread takes the next round's metrics).  Its long calls run without the GIL,
so the binding orders them with locks (python/src/bind_io.cpp, PyResultsWriter): every result
below is one that some order of the calls, one after another, gives.

Each case runs in a child process with glibc's mmap threshold fixed at 64 KiB, so a freed layer
copy is unmapped at once: on code without the locks a read of one (set_round accumulating against
a reference that set_reference replaced, a RoundMetrics holding a replaced reference) kills the
child with SIGSEGV, and a torn read gives a value no order of the calls gives.  The child asserts;
the test checks it exited cleanly."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import os, tempfile, threading, time
import h5py
import numpy as np
from aimcemu import _core

net = _core.zoo.resnet18(1, 32, 10)
net.resolve()
IMAGES = 8
images = np.random.default_rng(0).integers(-128, 128, size=(IMAGES, 32, 32, 3), dtype=np.int8)
reference = _core.run_network(net, images, threads=1)
FIRST = 0   # the first conv: 16 x 16 x 64 values per image, a 128 KiB copy (mmapped) for 8 images
OUTPUT = net.output_index()
assert reference[FIRST].nbytes >= 2 * 65536

def new_writer(images=IMAGES, rounds=1):
    path = os.path.join(tempfile.mkdtemp(), "r.h5")
    writer = _core.ResultsWriter(path, net, np.zeros(images, np.int64), [(r, 0, 0.0) for r in range(rounds)],
                                 "{}", "none", 1, True)
    return path, writer

def race(seconds, *loops):
    # Runs each loop in its own thread, over and over, for `seconds`; re-raises the first error.
    stop = time.monotonic() + seconds
    errors, counts = [], [0] * len(loops)
    def run(k):
        try:
            while time.monotonic() < stop:
                loops[k]()
                counts[k] += 1
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(loops))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert all(counts), counts
    return counts
"""

CASES = {
    # set_round accumulates against the layer's reference without the GIL; set_reference (also
    # without it) replaced and freed that reference meanwhile.
    "set_round_while_set_reference": PRELUDE + """
path, w = new_writer()
noisy = reference[FIRST].copy()
noisy[:, :4] ^= 1                                  # 4 of 32 rows of every image differ
for l in range(len(net.layers)):
    w.set_reference(l, reference[l])
race(2.0, lambda: w.set_reference(FIRST, reference[FIRST]), lambda: w.set_round(0, FIRST, noisy))
for l in range(len(net.layers)):
    if l != FIRST:
        w.set_round(0, l, reference[l])
w.commit()
with h5py.File(path, "r") as f:
    got = f["layers/" + net.layers[FIRST].name + "/mismatch_rate"][0]
assert got == np.count_nonzero(noisy != reference[FIRST]) / noisy.size, got
""",
    # round_metrics() (with the GIL) read the layer's reference span and its owner while
    # set_reference (without it) swapped them: the metrics could keep a span of freed bytes.
    "round_metrics_while_set_reference": PRELUDE + """
path, w = new_writer()
for l in range(len(net.layers)):
    w.set_reference(l, reference[l])
emulator = _core.niu.Emulator(net, [])             # no AIMC layer: every round is the reference
emulator.write_round([])
def metrics_of_a_round():
    m = w.round_metrics()
    emulator.run_published(images, threads=1, metrics=m)
    assert FIRST in m.measured
    for l in m.measured:
        sums = m.sums(l)
        assert sums[3] == 0 and sums[4] == 0 and sums[5] == reference[l].size, (l, sums)
race(3.0, lambda: w.set_reference(FIRST, reference[FIRST]), metrics_of_a_round)
""",
    # round_accuracy (with the GIL) read the round's predictions while set_round (without it)
    # wrote them image by image: an accuracy between the two rounds' (all right, all wrong).
    "round_accuracy_while_set_round": PRELUDE + """
MANY = 200_000
labels = np.arange(MANY) % 10
right = np.full((MANY, 1, 1, 10), -5, np.int8)
right[np.arange(MANY), 0, 0, labels] = 100
wrong = np.roll(right, 1, axis=3)
path = os.path.join(tempfile.mkdtemp(), "r.h5")
w = _core.ResultsWriter(path, net, labels, [(0, 0, 0.0)], "{}", "none", 1, True)
w.set_reference(OUTPUT, right)
seen = set()
def read():
    seen.update(w.round_accuracy)
race(2.0, lambda: w.set_round(0, OUTPUT, right), lambda: w.set_round(0, OUTPUT, wrong), read)
assert seen <= {0.0, 1.0}, sorted(seen)[:5]
""",
    # Every call that comes while commit (without the GIL) frees the layers either runs before it
    # or is refused after it (FormatError naming the file); none reads the layers being freed.
    "calls_while_commit": PRELUDE + """
for attempt in range(20):
    path, w = new_writer()
    for l in range(len(net.layers)):
        w.set_reference(l, reference[l])
    for l in range(len(net.layers)):
        w.set_round(0, l, reference[l])
    refused = []
    def call(method):
        try:
            method()
        except _core.FormatError as e:
            assert "field 'file'" in str(e), str(e)
            refused.append(True)
    go = threading.Event()
    def commit():
        go.wait()
        w.commit()
    committing = threading.Thread(target=commit)
    committing.start()
    go.set()
    deadline = time.monotonic() + 30
    while not refused and time.monotonic() < deadline:
        call(w.round_metrics)
        call(lambda: w.reference_needed(FIRST))
        call(lambda: w.set_round(0, OUTPUT, reference[OUTPUT]))
    committing.join()
    assert refused
    info = _core.read_results(path)
    assert info["reference_accuracy"] == w.reference_accuracy
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_concurrent_calls_on_one_writer_give_a_serial_result(case, tmp_path):
    # TMPDIR: the child's tempfile.mkdtemp() folders, removed by pytest (they were left in /tmp)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", TMPDIR=str(tmp_path))
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(CASES[case])], capture_output=True, text=True,
                           timeout=300, env=env)
    assert child.returncode == 0, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
