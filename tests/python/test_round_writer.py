"""Noisy rounds are written on a background thread (aimcemu.rounds.RoundWriter) while the next round
runs.  Checked here: the rounds reach the writer in order, at most one round is in the writer while
the caller goes on, a writer error surfaces in the caller naming the file and the field, and a run
whose writer fails leaves no file and no thread behind."""
from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import aimcemu
from aimcemu import _core
from aimcemu.rounds import RoundWriter
from conftest import digits_subset

WRITER_THREAD = "aimcemu-results-writer"


class RecordingWriter:
    """Records (round, layer) as set_round sees them; round `gate_round` waits for `gate`."""

    def __init__(self, gate_round: int = -1):
        self.calls: list[tuple[int, int]] = []
        self.gate, self.gate_round = threading.Event(), gate_round

    def set_round(self, position, layer, activations):
        if position == self.gate_round:
            assert self.gate.wait(10)
        self.calls.append((position, layer))


def test_rounds_reach_the_writer_in_order():
    writer = RecordingWriter()
    background = RoundWriter(writer)
    for position in range(3):
        background.put(position, [np.zeros(1, np.int8)] * 2)
    background.close()
    assert writer.calls == [(r, layer) for r in range(3) for layer in range(2)]
    assert WRITER_THREAD not in [t.name for t in threading.enumerate()]


def test_at_most_one_round_is_in_the_writer():
    writer = RecordingWriter(gate_round=0)
    background = RoundWriter(writer)
    background.put(0, [np.zeros(1, np.int8)])  # the writer now waits inside round 0
    handed_over = threading.Event()
    caller = threading.Thread(target=lambda: (background.put(1, [np.zeros(1, np.int8)]), handed_over.set()))
    caller.start()
    # Round 1 is not taken while round 0 is still being written.
    assert not handed_over.wait(0.3)
    writer.gate.set()
    assert handed_over.wait(10)
    caller.join()
    background.close()
    assert writer.calls == [(0, 0), (1, 0)]


def test_a_writer_error_surfaces_in_the_caller():
    class FailingWriter:
        def set_round(self, position, layer, activations):
            if position == 1:
                raise _core.FormatError("out.h5: field 'layers/conv/activations': no space left on device")

    background = RoundWriter(FailingWriter())
    background.put(0, [np.zeros(1, np.int8)])
    background.put(1, [np.zeros(1, np.int8)])
    with pytest.raises(_core.FormatError, match=r"out\.h5: field 'layers/conv/activations'"):
        background.put(2, [np.zeros(1, np.int8)])
    with pytest.raises(_core.FormatError, match="no space left"):
        background.close()
    assert WRITER_THREAD not in [t.name for t in threading.enumerate()]


def test_a_run_whose_writer_fails_leaves_no_file(tmp_path_factory, tmp_path, monkeypatch):
    model, data, *_ = digits_subset(tmp_path_factory, 8)

    class WriterFailingInRound2(_core.ResultsWriter):
        def set_round(self, round_index, layer, activations):
            if round_index == 2:
                raise _core.FormatError(f"{out}: field 'layers/{layer}/activations': write failed")
            super().set_round(round_index, layer, activations)

    monkeypatch.setattr(_core, "ResultsWriter", WriterFailingInRound2)
    out = tmp_path / "run.h5"
    with pytest.raises(_core.FormatError, match=r"run\.h5: field 'layers/0/activations': write failed") as raised:
        aimcemu.run(model, data, out, mapping="all", noise={"model": "pcm_like"}, rounds=4, layers="all")
    # The traceback holds the run's frames and with them the uncommitted writer; once they are
    # gone, its temporary file is removed.
    del raised
    gc.collect()
    assert os.listdir(tmp_path) == []
    assert WRITER_THREAD not in [t.name for t in threading.enumerate()]
