"""`aimcemu models | head`: a reader that leaves early ends the command quietly.

Was: "aimcemu models: error: [Errno 32] Broken pipe" on stderr and exit status 2.  Now no message,
and the status a shell reports for a program that SIGPIPE ended (128 + 13).  The pipe's read end
is closed before the command starts, so its first write fails every time (no race with a real
`head`).  A broken pipe that is not stdout stays an error."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml

from aimcemu import cli


def run_into_a_closed_pipe(argv, cwd) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "aimcemu", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, timeout=120)
    finally:
        os.close(write_end)


def sweep_config(tmp_path) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sw"), "noise": {"model": "pcm_like"}}))
    return str(path)


@pytest.mark.parametrize("command", ["models", "perf", "sweep"])
def test_a_closed_stdout_ends_the_command_quietly(tmp_path, command):
    argv = {"models": ["models"], "perf": ["perf", "--model", "resnet18", "--no-layers"],
            "sweep": ["sweep", "-c", sweep_config(tmp_path), "--check"]}[command]
    done = run_into_a_closed_pipe(argv, tmp_path)
    assert done.stderr == ""
    assert done.returncode == 128 + signal.SIGPIPE == cli.CLOSED_STDOUT


def test_a_broken_pipe_elsewhere_is_still_an_error(monkeypatch, capsys):
    from aimcemu.commands import models

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")   # e.g. a Dask connection, stdout being fine

    monkeypatch.setattr(models, "main", broken)
    assert cli.main(["models"]) == 2
    assert "aimcemu models: error: [Errno 32] Broken pipe" in capsys.readouterr().err
