"""The report's NIU table needs the run's model file, stored as the run was given it (a relative
path is relative to the folder the run started in).  Before, a report from another folder, or
after the model moved, failed as a whole with "<arguments>: field 'model': model file not found",
an argument the user never gave; and a different model at the same relative path would have been
used silently.  Now the report is written from the results alone and the table is left out with
a note saying why."""
from __future__ import annotations

import os
import shutil

import aimcemu
from aimcemu import cli, modelfile
from hostile import tiny_files


def run_with_relative_model(tmp_path, monkeypatch):
    study = tmp_path / "study"
    study.mkdir()
    model, data = modelfile.embedded_paths()
    shutil.copy(model, study / "model.h5")
    shutil.copy(data, study / "test_set.h5")
    monkeypatch.chdir(study)
    aimcemu.run("model.h5", output="run.h5", mapping="all", noise="pcm_like", t=(0.0, 3600.0), threads=1)
    return study / "run.h5"


def report_text(results, tmp_path, capsys) -> str:
    out = tmp_path / "report.html"
    assert cli.main(["report", os.fspath(results), "-o", os.fspath(out)]) == 0, capsys.readouterr().err
    return out.read_text()


def test_a_report_from_the_runs_folder_has_the_niu_table(tmp_path, monkeypatch, capsys):
    results = run_with_relative_model(tmp_path, monkeypatch)
    page = report_text(results, tmp_path, capsys)
    assert "<th>NIUs</th>" in page and "NIU table left out" not in page


def test_a_report_from_another_folder_leaves_the_niu_table_out_saying_why(tmp_path, monkeypatch, capsys):
    results = run_with_relative_model(tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    page = report_text(results, tmp_path, capsys)
    assert "NIU table left out" in page and "model file not found: model.h5" in page
    assert "<th>NIUs</th>" not in page and "Accuracy vs t" in page


def test_another_model_at_the_stored_path_is_not_used(tmp_path, monkeypatch, capsys):
    results = run_with_relative_model(tmp_path, monkeypatch)
    impostor = tmp_path / "impostor"
    tiny_files(impostor)
    monkeypatch.chdir(impostor)
    page = report_text(results, tmp_path, capsys)
    assert "NIU table left out" in page and "the run&#x27;s was &#x27;digits_resnet&#x27;" in page
    assert "<th>NIUs</th>" not in page


def test_a_refused_report_leaves_no_new_output_folder(tmp_path, monkeypatch, capsys):
    """`-o new/dir/` was created when the output was checked, before the results were read: a
    results file refused then left the new folders behind."""
    import h5py

    results = run_with_relative_model(tmp_path, monkeypatch)
    with h5py.File(results, "r+") as f:
        f.attrs["config"] = "{not json"
    target = tmp_path / "new" / "dir"
    assert cli.main(["report", os.fspath(results), "-o", f"{target}/"]) == 2
    assert "field 'config'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
