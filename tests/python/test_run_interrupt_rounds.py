"""Ctrl-C during the noisy rounds stops the run at the round loop's own points, never inside the
hand-over of a round to the writer thread.  Found hung: `aimcemu run` after SIGINT, its main
thread joining a writer thread that waited for a round that never came (a KeyboardInterrupt
raised inside queue/threading code lost the writer's wake-up; test_run_cli's signal test timed
out once in a loaded full run).  Here the signal comes exactly there: sent from inside the
hand-over itself."""
from __future__ import annotations

import gc
import os
import signal
import threading
import time
import traceback

import pytest

import aimcemu
from aimcemu import rounds


def test_ctrl_c_inside_the_hand_over_is_raised_after_it(tmp_path, monkeypatch):
    original = rounds.RoundWriter.put
    calls = []

    def put_interrupted(self, *args, **kwargs):
        calls.append(len(calls))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, in the middle of the hand-over
        return original(self, *args, **kwargs)

    monkeypatch.setattr(rounds.RoundWriter, "put", put_interrupted)
    out = tmp_path / "r.h5"
    with pytest.raises(KeyboardInterrupt) as info:
        aimcemu.run(output=out, mapping="all", noise="pcm_like", chips=3, t=[0.0, 3600.0], progress=False)
    frames = [frame.name for frame in traceback.extract_tb(info.tb)]
    assert "put_interrupted" not in frames and "put" not in frames, frames
    assert len(calls) == 1  # stopped before the next round
    assert not any(t.name == "aimcemu-results-writer" and t.is_alive() for t in threading.enumerate())
    del info  # its frames hold the run's writer, which removes its temporary file when it goes
    gc.collect()
    assert os.listdir(tmp_path) == []  # no results file, no temporary file
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back
