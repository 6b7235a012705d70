"""`aimcemu sweep --check` writes nothing: whether the sweep folder can be created is decided
without creating anything (the nearest existing folder is a folder, os.access says it may be
written and entered, it is not on a kernel file system such as /proc).  Before, the check made
and removed a hidden `.aimcemu-probe-*` folder in the output folder's parent: gone afterwards,
but the parent was written (its modification time moved), on a read-only check."""
from __future__ import annotations

import os

import pytest
import yaml

from aimcemu import cli, sweeps
from hostile import assert_refused, tiny_files



@pytest.fixture
def study(tmp_path):
    model, data = tiny_files(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"output": str(tmp_path / "parent" / "sweep"), "model": str(model),
                                    "data": str(data), "noise": {"model": "pcm_like"}, "mapping": "all",
                                    "t": [1.0], "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}))
    (tmp_path / "parent").mkdir()
    return tmp_path


def folder_state(folder):
    """The folder's listing (hidden names included) and its own times: a file or folder made in it,
    even if removed at once, moves its modification and change times."""
    st = os.stat(folder)
    return sorted(os.listdir(folder)), st.st_mtime_ns, st.st_ctime_ns


def aged(folder):
    """Sets the folder's times an hour back, so that any write in it shows whatever the clock's grain."""
    past = os.stat(folder).st_mtime_ns - 3600 * 10**9
    os.utime(folder, ns=(past, past))
    return folder


@pytest.mark.parametrize("output_flag", [False, True])
def test_check_on_a_fresh_folder_leaves_its_parent_as_it_was(study, capsys, output_flag):
    parent = aged(study / "parent")
    before = folder_state(parent)
    argv = ["sweep", "-c", str(study / "sweep.yaml"), "--check"]
    if output_flag:
        argv += ["-o", str(parent / "sweep")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "2 tasks in" in capsys.readouterr().out
    assert folder_state(parent) == before


def test_a_folder_that_access_refuses_is_named_and_nothing_is_written(study, capsys, monkeypatch):
    """Root passes every permission check, so the refusal is what os.access says, asked with the
    flags a folder's creation needs."""
    parent = aged(study / "parent")
    before = folder_state(parent)
    asked = []

    def access(path, mode, **kwargs):
        asked.append((os.fspath(path), mode))
        return False

    monkeypatch.setattr(sweeps.os, "access", access)
    assert_refused(["sweep", "-c", study / "sweep.yaml", "--check"], study, capsys,
                   f"{study / 'sweep.yaml'}: field 'output': cannot create folder {parent / 'sweep'}: "
                   f"{parent} is not writable (permission denied)")
    assert asked == [(os.fspath(parent), os.W_OK | os.X_OK)]
    assert folder_state(parent) == before


def test_a_kernel_file_system_is_named():
    with pytest.raises(sweeps._core.FormatError,
                       match=r"^--output: field 'output': cannot create folder /proc/aimcemu-sweep: /proc is on the "
                             r"kernel's proc file system"):
        sweeps.check_output_folder("/proc/aimcemu-sweep", "--output")
    assert not os.path.exists("/proc/aimcemu-sweep")
