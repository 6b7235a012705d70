"""The examples of docs/hdf5_layout.md and docs/analysis.md, run as written (only the file paths
replaced) and checked against int64 arithmetic on the raw arrays.  The "Reading" example of
docs/hdf5_layout.md subtracted int8 from int8, which wraps: an error of 224 read as -32, and the
per-channel std was off by up to 73 codes.  The sweep line of analysis.md's report example is run by
tests/python/test_report_html.py (a sweep folder's report)."""
from __future__ import annotations

import ast
import os
import re
import shutil
import shlex

import h5py
import numpy as np
import pytest
import xarray as xr

import aimcemu
from aimcemu import cli
from conftest import digits_subset

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


def code_blocks(doc: str, language: str) -> list[str]:
    """The fenced blocks of `doc` in `language` ("" for none).  Fences are paired in order, so a
    block's closing fence is never read as the opening of a block without a language."""
    text = open(os.path.join(DOCS, doc), encoding="utf-8").read()
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)
    return [body for fence_language, body in blocks if fence_language == language]


@pytest.fixture
def wrapping_run(tmp_path):
    """noisy.h5 with its layer conv renamed stem (the example's layer) and noisy activations as
    far from the reference as int8 goes (-128 where the reference is >= 0, else 127): every error
    is beyond what int8 holds."""
    path = shutil.copyfile(os.path.join(CORPUS, "noisy.h5"), tmp_path / "run.h5")
    with h5py.File(path, "r+") as f:
        f.move("layers/conv", "layers/stem")
        group = f["layers/stem"]
        ref = group["reference"][()]
        group["activations"][...] = np.where(ref >= 0, -128, 127).astype(np.int8)[None]
    return path


def run_example(code: str, path) -> list:
    """Runs the example with `path` for its results file; returns the value of each bare
    expression statement, in order."""
    tree = ast.parse(code)
    assigned = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "path"]
    assert len(assigned) == 1, "the example names its file in one `path = ...` line"
    assigned[0].value = ast.copy_location(ast.Constant(os.fspath(path)), assigned[0].value)
    namespace: dict = {}
    values = []
    for statement in tree.body:
        if isinstance(statement, ast.Expr):
            expression = ast.fix_missing_locations(ast.Expression(statement.value))
            values.append(eval(compile(expression, "<doc>", "eval"), namespace))
        else:
            exec(compile(ast.Module([statement], []), "<doc>", "exec"), namespace)
    return values


def test_the_reading_example_gives_the_errors_without_wrapping(wrapping_run, capsys):
    (block,) = code_blocks("hdf5_layout.md", "python")
    values = run_example(block, wrapping_run)
    picked, per_channel = values[-2], values[-1]
    assert picked.dims == ("y", "x", "channel")
    with h5py.File(wrapping_run) as f:
        ref = f["layers/stem/reference"][()].astype(np.int64)
        noisy = f["layers/stem/activations"][()].astype(np.int64)
    error = noisy - ref[None]
    assert np.abs(error).max() > 127  # the case that wrapped
    assert per_channel.dims == ("round", "channel")
    np.testing.assert_allclose(per_channel.values, error.std(axis=(1, 2, 3)), rtol=1e-12)
    assert "stem" in capsys.readouterr().out


def test_the_selection_examples_of_the_layout(tmp_path):
    """`ds["accuracy"].where(ds["drift_compensation"] == "global", drop=True)` and the groupby,
    as docs/hdf5_layout.md writes them, on a run of two compensations."""
    text = open(os.path.join(DOCS, "hdf5_layout.md"), encoding="utf-8").read()
    examples = [e for e in re.findall(r"`(ds\[[^`]*)`", text) if "drift_compensation" in e]
    assert len(examples) == 2
    path = os.path.join(CORPUS, "noisy.h5")
    with xr.open_dataset(path, engine="h5netcdf") as ds, h5py.File(path) as f:
        global_rounds = f["drift_compensation"].asstr()[()] == "global"
        selected = eval(examples[0], {"ds": ds})
        np.testing.assert_array_equal(selected.values, f["accuracy"][()][global_rounds])
        groups = eval(examples[1], {"ds": ds})
        assert groups.ngroups == 8  # 2 compensations x 2 t x 2 chips, one round each


def test_the_report_example_of_a_run(tmp_path_factory, tmp_path, monkeypatch, capsys):
    """`aimcemu report results/run.h5 --layers stem,head --png figures/` on a run of the embedded
    model (every layer stored), in a folder holding results/run.h5."""
    (line,) = [l for l in code_blocks("analysis.md", "")[0].splitlines() if "run.h5" in l]
    command = shlex.split(line.split("#")[0])
    assert command[:2] == ["aimcemu", "report"]
    data = digits_subset(tmp_path_factory, 20)[1]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    aimcemu.run(data=str(data), output="results/run.h5", mapping="all", t=(1.0, 3600.0), chips=2, layers="all")
    assert cli.main(command[1:]) == 0
    out = capsys.readouterr().out
    assert f"report    {os.path.join('results', 'run.html')}" in out
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == \
        ["accuracy_vs_t.png", "activation_histograms.png", "snr_heatmap__run.png"]
