"""aimcemu.cli words a sweep's lost Dask cluster (executors.ClusterLostError) as it words a dead
local worker (WorkerDiedError), in one place for every command: "aimcemu COMMAND: error: ...",
exit status 2, no traceback, wherever in the command the error is raised.  Before, only the
sweep() call of commands/sweep.py caught ClusterLostError; raised anywhere else in a command it
ended in a traceback."""
from __future__ import annotations

import importlib

import pytest

from aimcemu import cli, executors

sweep_command = importlib.import_module("aimcemu.commands.sweep")


@pytest.mark.parametrize("error", [executors.ClusterLostError, executors.WorkerDiedError])
def test_a_lost_cluster_raised_anywhere_in_a_command_is_worded(monkeypatch, capsys, tmp_path, error):
    message = f"{tmp_path}: the sweep lost its tasks: the connection to the Dask scheduler was lost"

    def main(args):  # e.g. a scheduler that goes away while the command reads the finished sweep
        raise error(message)

    monkeypatch.setattr(sweep_command, "main", main)
    assert cli.main(["sweep", "-c", str(tmp_path / "sweep.yaml")]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"aimcemu sweep: error: {message}\n")

