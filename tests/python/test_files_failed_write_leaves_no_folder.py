"""A call that creates a folder for its output and then cannot write there (a full disk) takes
the folders it created away again, while they are empty, and reports the write's error as
before (naming the file and the field).  Found by review: `aimcemu run -o sub/` and a new sweep
folder whose first write failed left an empty `sub/` or an empty sweep folder behind.  The full
disk is simulated: the write raises what it raises on one (ENOSPC); test_full_disk has the real
thing where a small tmpfs can be mounted."""
from __future__ import annotations

import errno
import os

import pytest

import aimcemu
from aimcemu import _core, cli, files
from hostile import tiny_files

NO_SPACE = os.strerror(errno.ENOSPC)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, NO_SPACE)


@pytest.fixture
def study(tmp_path):
    """A folder with a tiny model and data set; outputs go in `out/`, which exists."""
    model, data = tiny_files(tmp_path / "inputs")
    (tmp_path / "out").mkdir()
    return model, data, tmp_path / "out"


class FullDiskAtCommit:
    """The core's results writer, whose commit fails as the core's does on a full disk (the
    temporary file it wrote stays until the writer goes)."""

    def __init__(self, path, *args):
        self._writer, self._path = REAL_RESULTS_WRITER(path, *args), path

    def __getattr__(self, name):
        return getattr(self._writer, name)

    def commit(self):
        raise _core.FormatError(f"{self._path}: field 'file': cannot write {self._path}: {NO_SPACE}")


REAL_RESULTS_WRITER = _core.ResultsWriter


def test_a_run_into_a_new_folder_that_cannot_write_removes_the_folder(study, monkeypatch, capsys):
    model, data, out = study
    monkeypatch.setattr(_core, "ResultsWriter", FullDiskAtCommit)
    code = cli.main(["run", str(model), "--data", str(data), "-o", f"{out}/new/sub/", "--mapping", "all",
                     "--noise", "pcm_like"])
    err = capsys.readouterr().err
    assert code == 2, err
    written = err.split("error: ", 1)[1].split(": field", 1)[0]  # the claimed default name
    assert err == f"aimcemu run: error: {written}: field 'file': cannot write {written}: {NO_SPACE}\n"
    assert written.startswith(f"{out}/new/sub/tiny_")
    assert os.listdir(out) == []  # new/ and new/sub/ are gone; out/, which was there, stays


def test_a_run_into_a_named_file_in_a_new_folder_that_cannot_write_removes_the_folder(study, monkeypatch, capsys):
    """A file name (no trailing '/') in folders that do not exist yet: they are made for the write
    (the run used to fail only at its end, 'No such file or directory') and go again with it."""
    model, data, out = study
    monkeypatch.setattr(_core, "ResultsWriter", FullDiskAtCommit)
    target = out / "new" / "sub" / "run.h5"
    code = cli.main(["run", str(model), "--data", str(data), "-o", str(target), "--mapping", "all",
                     "--noise", "pcm_like"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == f"aimcemu run: error: {target}: field 'file': cannot write {target}: {NO_SPACE}\n"
    assert os.listdir(out) == []


def test_a_run_into_a_named_file_in_a_new_folder_makes_the_folder(study, capsys):
    model, data, out = study
    target = out / "new" / "sub" / "run.h5"
    assert cli.main(["run", str(model), "--data", str(data), "-o", str(target)]) == 0, capsys.readouterr().err
    assert os.listdir(out / "new" / "sub") == ["run.h5"]


def test_a_named_file_whose_folder_cannot_be_made_is_refused_before_the_run(study, monkeypatch, capsys):
    """Its folder's place taken by a file: refused naming the option, and nothing ran (the results
    writer is never made)."""
    model, data, out = study
    (out / "taken").write_text("a file\n")
    made = []
    monkeypatch.setattr(_core, "ResultsWriter", lambda *args: made.append(args))
    code = cli.main(["run", str(model), "--data", str(data), "-o", str(out / "taken" / "run.h5")])
    err = capsys.readouterr().err
    assert code == 2 and made == []
    assert err == (f"aimcemu run: error: --output: field 'output': cannot create folder {out / 'taken'}: "
                   f"{out / 'taken'} is not a folder\n")
    assert os.listdir(out) == ["taken"]


@pytest.mark.parametrize("failing", ["lock file", "index"])
def test_a_new_sweep_folder_whose_first_write_fails_is_removed(study, monkeypatch, failing):
    model, data, out = study
    folder = out / "new" / "sweep"
    config = {"output": str(folder), "model": str(model), "data": str(data), "noise": {"model": "pcm_like"},
              "mapping": "all", "t": [1.0], "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}
    if failing == "lock file":
        monkeypatch.setattr(os, "pwrite", no_space)
        expected = f"{folder / files.FolderLock.NAME}: field 'file': cannot write the lock file: {NO_SPACE}"
    else:
        monkeypatch.setattr(os, "fsync", no_space)  # the first atomic write of the sweep: index.json
        expected = f"[Errno {errno.ENOSPC}] {NO_SPACE}: '{folder / 'index.json'}'"
    with pytest.raises((OSError, aimcemu.FormatError)) as caught:
        aimcemu.sweep(config, workers=1, progress=False)
    assert str(caught.value) == expected
    assert os.listdir(out) == []  # the sweep folder, its tasks/ and lock file, and new/ are gone


def test_a_sweep_folder_that_was_there_stays(study, monkeypatch):
    model, data, out = study
    folder = out / "sweep"
    folder.mkdir()
    config = {"output": str(folder), "model": str(model), "data": str(data), "noise": {"model": "pcm_like"},
              "mapping": "all", "t": [1.0]}
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="index.json"):
        aimcemu.sweep(config, workers=1, progress=False)
    assert sorted(os.listdir(folder)) == [files.FolderLock.NAME, "tasks"]  # not this call's folder: left as it is


@pytest.mark.parametrize("command", ["perf", "report"])
def test_a_command_whose_output_cannot_be_written_removes_the_new_folder(study, monkeypatch, capsys, command):
    model, data, out = study
    if command == "perf":
        output = out / "new" / "perf.json"
        argv = ["perf", "--model", str(model), "--output", str(output)]
    else:
        pytest.importorskip("xarray")
        results = out.parent / "run.h5"
        aimcemu.run(model, data=data, output=results, mapping="all", noise="pcm_like", progress=False)
        output = out / "new" / "report.html"
        argv = ["report", str(results), "--no-niu", "-o", str(output)]
    monkeypatch.setattr(os, "fsync", no_space)
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{NO_SPACE}: '{output}'" in err, err
    assert os.listdir(out) == []
