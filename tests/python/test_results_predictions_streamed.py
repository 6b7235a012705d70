"""Opening a results file checks its predictions a block of rounds at a time.

The reader checks every round's accuracy against its predictions (int64 [rounds, images]); it
read them whole, 256 MB for 640 rounds x 50,000 images, in the checking process and again in the
caller.  It now reads blocks of 8 MiB of rounds into one buffer: the same checks and errors
(naming the round of a later block), with memory bounded by the block.  Files are written with
the real writer: a one-layer network on many images, no layer stored."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core

BLOCK_BYTES = 8 << 20  # formats/results_reader.cpp kPredictionBlockBytes


def tiny_network():
    rng = np.random.default_rng(5)
    fc = _core.Layer()
    fc.name, fc.kind, fc.out_channels = "fc", _core.LayerKind.linear, 10
    fc.weights = rng.integers(-64, 64, size=40, dtype=np.int8)
    fc.bias = np.zeros(10, np.int8)
    fc.out_shift = 6
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = "tiny", _core.Shape3(1, 1, 4), 7
    net.layers = [fc]
    net.resolve()
    return net


def write_results(path, images: int, rounds: int) -> None:
    """A results file of `rounds` rounds over `images` images, each round a few logits changed."""
    rng = np.random.default_rng(9)
    net = tiny_network()
    labels = rng.integers(0, 10, size=images)
    w = _core.ResultsWriter(os.fspath(path), net, labels, [(r % 8, 0, float(r // 8)) for r in range(rounds)],
                            json.dumps({"seed": 1}), "none", 1)
    reference = rng.integers(-128, 128, size=(images, 1, 1, 10), dtype=np.int8)
    w.set_reference(0, reference)
    for r in range(rounds):
        noisy = reference.copy()
        noisy[rng.integers(0, images, size=images // 4), 0, 0, rng.integers(0, 10)] += 7
        w.set_round(r, 0, noisy)
    w.commit()


IMAGES = 20_000
ROUNDS = 3 * (BLOCK_BYTES // (IMAGES * 8)) + 5   # three whole blocks and part of a fourth


@pytest.fixture(scope="module")
def several_blocks(tmp_path_factory):
    path = tmp_path_factory.mktemp("streamed") / "r.h5"
    write_results(path, IMAGES, ROUNDS)
    return path


def test_a_file_of_several_blocks_reads_with_every_rounds_accuracy(several_blocks):
    info = _core.read_results(os.fspath(several_blocks))
    with h5py.File(several_blocks, "r") as f:
        predictions, labels = f["predictions"][()], f["labels"][()]
    np.testing.assert_array_equal(info["accuracy"], (predictions == labels).mean(axis=1))
    assert len(info["accuracy"]) == ROUNDS


def damaged_copy(source, target, change) -> str:
    target.write_bytes(source.read_bytes())
    with h5py.File(target, "r+") as f:
        change(f)
    return os.fspath(target)


@pytest.mark.parametrize("check", [True, False], ids=["checking-process", "in-process"])
def test_an_accuracy_that_disagrees_in_a_later_block_names_its_round(tmp_path, several_blocks, check):
    late = ROUNDS - 2

    def change(f):
        f["accuracy"][late] = f["accuracy"][late] + 1 / IMAGES

    path = damaged_copy(several_blocks, tmp_path / "acc.h5", change)
    with pytest.raises(aimcemu.FormatError, match=f"^{path}: field 'accuracy': round {late}: stored .*, but "
                                                  f"predictions match \\d+ of {IMAGES} labels"):
        _core.read_results(path, check)


@pytest.mark.parametrize("check", [True, False], ids=["checking-process", "in-process"])
def test_a_class_index_outside_the_classes_in_a_later_block_is_refused(tmp_path, several_blocks, check):
    def change(f):
        row = f["predictions"][ROUNDS - 1]
        row[IMAGES - 1] = 12
        f["predictions"][ROUNDS - 1] = row

    path = damaged_copy(several_blocks, tmp_path / "pred.h5", change)
    with pytest.raises(aimcemu.FormatError, match=f"^{path}: field 'predictions': class index 12 outside 0..9"):
        _core.read_results(path, check)


# VmHWM, not ru_maxrss: the latter keeps the high-water mark of the process before its exec (the
# test runner's, hundreds of MB), which would hide the growth.
PEAK_CHILD = """
import sys
from aimcemu import _core

def peak_bytes():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

_core.read_results(sys.argv[1], False)
before = peak_bytes()
_core.read_results(sys.argv[2], False)
print(peak_bytes() - before)
"""


def test_reading_a_large_file_does_not_hold_its_predictions(tmp_path, several_blocks):
    # Was: the predictions were read whole, 64 MB here (peak memory grew by as much).
    large = tmp_path / "large.h5"
    write_results(large, 50_000, 160)   # 64 MB of predictions, 8 MB a block
    small = tmp_path / "small.h5"
    write_results(small, 50_000, 2)     # warms the reader up on the same shapes
    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, os.fspath(small), os.fspath(large)],
                         capture_output=True, text=True, check=True, env=os.environ)
    growth = int(out.stdout.strip())
    assert growth < 32 << 20, f"peak memory grew by {growth / 2**20:.0f} MB reading 64 MB of predictions"
