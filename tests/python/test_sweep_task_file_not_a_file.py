"""A folder, FIFO or socket at a task's file name (tasks/<position>-<id>.h5) is refused before any
task runs, naming that path and field 'file'.  Found by review: the sweep took it for a task not
yet done, ran the other tasks first, and then the task's run refused its output as
"<arguments>: field 'output': ... exists and is not a regular file"."""
from __future__ import annotations

import os
import socket

import pytest

import aimcemu
from aimcemu import sweeps
from hostile import tiny_files


def make_fifo(path):
    os.mkfifo(path)


def make_socket(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(os.fspath(path))
    server.close()  # the socket file stays


@pytest.mark.parametrize("kind, make", [("a FIFO", make_fifo), ("a folder", os.mkdir), ("a socket", make_socket)],
                         ids=["FIFO", "folder", "socket"])
def test_a_non_file_at_a_task_name_is_refused_before_any_task_runs(tmp_path, kind, make):
    model, data = tiny_files(tmp_path / "inputs")
    config = {"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
              "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0],
              "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}}
    tasks = sweeps.plan(config).tasks
    (tmp_path / "sweep" / "tasks").mkdir(parents=True)
    taken = tmp_path / "sweep" / tasks[1].file  # the second task's: the first would run before it
    make(taken)
    with pytest.raises(aimcemu.FormatError) as caught:
        aimcemu.sweep(config, workers=1, progress=False)
    assert str(caught.value) == (f"{taken}: field 'file': is {kind}, not the results file of its task (grid point "
                                 f"{{'noise.prog_noise_scale': 1.0}}); a task's results file is never written over "
                                 "one: remove it")
    assert os.listdir(tmp_path / "sweep" / "tasks") == [taken.name]  # no task ran; what was there stays
