"""A Ctrl-C while `aimcemu sweep --scheduler ADDRESS` connects to a scheduler that does not answer
stops the sweep within a fraction of a second.

Was: the coordinator defers signals to its own points, and connecting was one long call into Dask,
so the signal took effect only when Dask gave up (its connect timeout, 30 s by default): a user who
mistyped the address of a firewalled host waited half a minute for the Ctrl-C.  The coordinator
now connects in a thread of its own and checks for a stop every sweeps.STOP_CHECK_S meanwhile.

The scheduler here is a socket that accepts the connection and never says a word, which is what
a host that is not a Dask scheduler (or a scheduler that hangs) looks like to Dask's handshake.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from aimcemu import executors
from hostile import tiny_files

pytest.importorskip("distributed")

# Dask's own connect timeout is 30 s; the stop must come long before it.
STOP_WITHIN_S = 5.0


def sweep_config(tmp_path: Path) -> Path:
    model, data = tiny_files(tmp_path / "study")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "sweep"), "model": str(model), "data": str(data),
                                    "noise": {"model": "pcm_like"}, "mapping": "all", "t": [1.0], "chips": 2,
                                    "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}))
    return path


def accept_while_alive(server: socket.socket, sweep: subprocess.Popen, timeout_s: float = 120.0) -> socket.socket:
    """The sweep's connection to `server`; the sweep's own output should it end first."""
    server.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return server.accept()[0]
        except TimeoutError:
            assert sweep.poll() is None, sweep.communicate()
    raise AssertionError(f"the sweep did not connect in {timeout_s} s")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_connecting_to_a_silent_scheduler_stops_the_sweep_at_once(tmp_path, stop):
    config = sweep_config(tmp_path)
    with socket.socket() as silent_scheduler:
        silent_scheduler.bind(("127.0.0.1", 0))
        silent_scheduler.listen()
        address = f"tcp://127.0.0.1:{silent_scheduler.getsockname()[1]}"
        sweep = subprocess.Popen([sys.executable, "-m", "aimcemu", "sweep", "--config", str(config),
                                  "--scheduler", address, "--no-progress"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            connection = accept_while_alive(silent_scheduler, sweep)  # the sweep is in Dask's handshake now
            with connection:
                time.sleep(0.3)  # well inside the handshake's wait
                sent = time.monotonic()
                sweep.send_signal(stop)
                out, err = sweep.communicate(timeout=120)
                took = time.monotonic() - sent
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.communicate()
    assert sweep.returncode == 130, err  # for SIGTERM too: "interrupted", as in test_sweep_signals
    assert took < STOP_WITHIN_S, f"the sweep stopped {took:.1f} s after the signal"
    assert "interrupted" in err, err
    assert "Traceback" not in err, err


class Stopped(Exception):
    """What the fake check_stop raises: the user's stop."""


class FakeClient:
    closed = False

    def close(self):
        self.closed = True


def test_a_client_that_connects_after_the_stop_is_closed():
    connected, client = threading.Event(), FakeClient()
    stops = iter([None, None, Stopped()])  # the stop comes at the third check

    def connect():
        connected.wait(10)  # until the caller has given up
        return client

    def check_stop():
        stop = next(stops)
        if stop is not None:
            raise stop

    with pytest.raises(Stopped):
        executors._connect_checking(connect, check_stop)
    assert not client.closed
    connected.set()
    deadline = time.monotonic() + 10
    while not client.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.closed, "the late connection was left open"


def test_a_connect_error_reaches_the_caller_and_a_quick_client_is_returned():
    def refused():
        raise OSError("Timed out trying to connect")

    with pytest.raises(OSError, match="Timed out trying to connect"):
        executors._connect_checking(refused, lambda: None)
    client = FakeClient()
    assert executors._connect_checking(lambda: client, lambda: None) is client and not client.closed
