"""Output paths under hostile conditions: default names that never replace a file, and output
folders created only when the output is about to be written, with errors in words.

A default results name (no output given, or a folder ending in '/') carries a timestamp in seconds;
two runs in the same second named the same file, the second replaced the first, and the first
RunSummary.path pointed at the second run's data.  A default name is now claimed: created empty
with O_EXCL (NAME, NAME-2, NAME-3, ...) just before the run writes, and removed if the run fails.
An explicit output keeps its rule: it is replaced.
"""
from __future__ import annotations

import datetime as real_dt
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import h5py
import pytest

import aimcemu
from aimcemu import FormatError, config, files, runner
from hostile import Snapshot, assert_refused, tiny_files


class OneSecond(real_dt.datetime):
    """A clock stopped at one second: every default name of the test is the same candidate."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 2, 3, 4, 5, tzinfo=tz)


@pytest.fixture
def same_second(monkeypatch):
    monkeypatch.setattr(config, "_dt", SimpleNamespace(datetime=OneSecond, timezone=real_dt.timezone))


@pytest.fixture
def study(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    model, _ = tiny_files(folder)
    monkeypatch.chdir(tmp_path)
    return model


def stored_seed(path) -> int:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])["seed"]


def test_two_default_named_runs_in_one_second_write_two_files(study, same_second, tmp_path):
    first = aimcemu.run(study, noise="pcm_like", seed=1, chips=3)
    second = aimcemu.run(study, noise="pcm_like", seed=2, chips=3)
    assert first.path == os.path.join("results", "tiny_20260102-030405.h5")
    assert second.path == os.path.join("results", "tiny_20260102-030405-2.h5")
    assert (stored_seed(first.path), stored_seed(second.path)) == (1, 2)  # each summary's file is its run's
    assert sorted(os.listdir(tmp_path / "results")) == ["tiny_20260102-030405-2.h5", "tiny_20260102-030405.h5"]


def test_a_default_name_never_replaces_an_existing_file(study, same_second, tmp_path):
    (tmp_path / "results").mkdir()
    taken = tmp_path / "results" / "tiny_20260102-030405.h5"
    taken.write_bytes(b"someone else's file")
    (tmp_path / "results" / "tiny_20260102-030405-2.h5").symlink_to(tmp_path / "nowhere.h5")  # a link is taken too
    summary = aimcemu.run(study, noise="pcm_like")
    assert summary.path == os.path.join("results", "tiny_20260102-030405-3.h5")
    assert taken.read_bytes() == b"someone else's file"
    assert not (tmp_path / "nowhere.h5").exists()  # never created through the link


def test_a_folder_output_gets_a_new_name_too(study, same_second, tmp_path):
    paths = [aimcemu.run(study, output="out/", noise="pcm_like", seed=seed).path for seed in (1, 2)]
    assert paths == [os.path.join("out", "tiny_20260102-030405.h5"), os.path.join("out", "tiny_20260102-030405-2.h5")]
    assert [stored_seed(p) for p in paths] == [1, 2]


def test_an_explicit_output_is_still_replaced(study, tmp_path):
    first = aimcemu.run(study, output="run.h5", noise="pcm_like", seed=1)
    second = aimcemu.run(study, output="run.h5", noise="pcm_like", seed=2)
    assert first.path == second.path == "run.h5"
    assert stored_seed("run.h5") == 2
    assert sorted(os.listdir(tmp_path)) == ["run.h5", "study"]


def test_a_failed_default_named_run_leaves_no_file(study, same_second, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("calibration failed")

    monkeypatch.setattr(runner, "calibrate", broken)
    with pytest.raises(RuntimeError, match="calibration failed"):
        aimcemu.run(study, noise="pcm_like")
    assert not (tmp_path / "results").exists()  # neither the claimed file nor the folder made for it


def test_claims_are_exclusive(tmp_path):
    """What two processes racing for one name rely on: each claim is a new file (O_EXCL), the next
    free number, and a claim that was not written is removed only while it is the empty file."""
    target = tmp_path / "new" / "run.h5"
    claims = [files.claim_new_file(target, "output") for _ in range(4)]
    assert [c.path.name for c in claims] == ["run.h5", "run-2.h5", "run-3.h5", "run-4.h5"]
    claims[0].release()
    assert not claims[0].path.exists()
    claims[1].path.write_bytes(b"written by the run")
    claims[1].release()
    assert claims[1].path.read_bytes() == b"written by the run"


# --- output folders ---------------------------------------------------------------------------------
def test_a_refused_run_creates_no_output_folder(study, tmp_path, capsys):
    """The layers selection is checked after the output path: the folder the output names must not
    appear (output_file created it while checking the path)."""
    assert_refused(["run", study, "-o", f"{tmp_path / 'new' / 'deeper'}/", "--layers", "nosuch"], tmp_path, capsys,
                   "field 'layers'")
    assert_refused(["run", study, "--layers", "nosuch"], tmp_path, capsys, "field 'layers'")  # nor results/


def test_a_refused_perf_creates_no_output_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_refused(["perf", "--model", "no_such_model", "--output", "new/"], tmp_path, capsys, "no_such_model")


def test_a_refused_import_creates_no_output_folder(tmp_path, capsys):
    pytest.importorskip("onnx")
    model = tmp_path / "net.onnx"
    model.write_bytes(b"not checked before the shape")
    assert_refused(["import", model, "-o", f"{tmp_path / 'new'}/", "--input-shape", "x"], tmp_path, capsys,
                   "input")


def test_a_folder_that_cannot_be_created_is_refused_in_words_before_any_work(study, tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a folder")
    err = assert_refused(["run", study, "-o", f"{blocker / 'sub'}/"], tmp_path, capsys,
                         "--output: field 'output': ", f"{blocker} is not a folder")
    assert "Errno" not in err


def test_mkdir_errors_name_the_field_in_words(tmp_path, monkeypatch):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(FormatError, match=r"^<arguments>: field 'output': cannot create folder .*: not a directory$"):
        files.make_folder(blocker / "a" / "b", "output")
    with pytest.raises(FormatError, match="a file of that name exists"):
        files.make_folder(blocker, "output")

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(FormatError) as caught:
        files.make_folder(tmp_path / "new", "output", "--output")
    assert str(caught.value) == f"--output: field 'output': cannot create folder {tmp_path / 'new'}: read-only file system"


def test_an_unwritable_parent_is_refused_before_any_work(study, tmp_path, capsys, monkeypatch):
    """A read-only folder (checked with access(2), simulated here: the tests may run as root)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == locked else real_access(path, mode, **kw))
    snapshot = Snapshot(tmp_path)
    with pytest.raises(FormatError, match=rf"field 'output': cannot create folder .*new: {locked} is not writable"):
        aimcemu.run(study, output=os.fspath(locked / "new") + "/")
    snapshot.assert_unchanged()


def test_a_file_where_the_default_folder_goes_is_refused_before_any_work(study, tmp_path, capsys):
    (tmp_path / "results").write_text("not a folder")
    err = assert_refused(["run", study], tmp_path, capsys, "field 'output': cannot create folder results: "
                                                         "results is not a folder")
    assert "Errno" not in err
