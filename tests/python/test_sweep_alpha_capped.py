"""A sweep keeps what each task's run reports of capped drift-compensation alphas (the alphas
larger than the NIU's back-conversion holds, run at its limit: RunSummary.drift_alpha_capped).

Before, a sweep lost them: index.json's task summaries and open_sweep had no trace of them, the
HTML report of a sweep flagged no row (only a run file's report did), and the only warning was
the run's own, raised in the worker process (printed there, pointing at no line of the caller's,
or lost in a Dask worker's log) and never again when a resumed sweep found the task done.

Deterministic drift with nu = 0.3 (no other noise) shrinks the weights about 72-fold in a year:
every AIMC layer's alpha at 1 y exceeds what the NIU holds, on every chip.  At nu = 0.001 nothing
is capped.  The reference is the same configuration run directly with aimcemu.run."""
from __future__ import annotations

import json
import os
import re
import shutil
import warnings

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import report, results
from conftest import digits_subset

STRONG_DRIFT = {"model": "state_independent", "drift_nu_mean": 0.3, "drift_nu_std": 0.0,
                "prog_noise_scale": 0.0, "read_noise_scale": 0.0}
YEAR = 365 * 86400.0
TIMES = [0.0, YEAR]
NUS = [0.3, 0.001]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, 8)


def config(digits, folder, **changes) -> dict:
    model, data, *_ = digits
    return {"output": str(folder), "model": str(model), "data": str(data), "noise": STRONG_DRIFT, "mapping": "all",
            "t": TIMES, "chips": 2, "drift_compensation": ["none", "global"],
            "grid": {"noise.drift_nu_mean": NUS}, **changes}


def capped_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "capped" in str(w.message)]


@pytest.fixture(scope="module")
def swept(digits, tmp_path_factory):
    """(the sweep folder, the warnings its first call raised, the direct runs' summaries per nu)."""
    base = tmp_path_factory.mktemp("capped")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = aimcemu.sweep(config(digits, base / "sweep"), workers=1, progress=False)
    with pytest.warns(RuntimeWarning, match="capped"):  # the direct run's own
        model, data, *_ = digits
        direct = {nu: aimcemu.run(model, data, base / f"direct-{nu}.h5", mapping="all",
                                  noise={**STRONG_DRIFT, "drift_nu_mean": nu}, t=tuple(TIMES), chips=2,
                                  drift_compensation="none,global", threads=1, layers="none")
                  for nu in NUS}
    assert result.complete and result.ran == 2
    assert direct[0.3].drift_alpha_capped and direct[0.001].drift_alpha_capped == []
    return base / "sweep", caught, direct


def test_the_index_keeps_each_tasks_capped_alphas(swept):
    folder, _, direct = swept
    index = json.loads((folder / "index.json").read_text())
    by_nu = {task["point"]["noise.drift_nu_mean"]: task["summary"] for task in index["tasks"]}
    assert by_nu[0.3]["drift_alpha_capped"] == direct[0.3].drift_alpha_capped  # bit-exact, JSON floats
    assert by_nu[0.001]["drift_alpha_capped"] == []


def test_open_sweep_gives_alpha_over_limit_where_capped(swept):
    folder, _, direct = swept
    for lazy in (False, True):
        ds = results.open_sweep(folder, lazy=lazy)
        ratio = ds["alpha_capped"]
        assert ratio.dims == ("noise.drift_nu_mean", "layer", "chip", "t")
        expected = np.zeros(ratio.shape)
        layers = list(ds["layer"].values)
        for c in direct[0.3].drift_alpha_capped:
            expected[0, layers.index(c["layer"]), c["chip"], TIMES.index(c["t"])] = c["alpha"] / c["limit"]
        np.testing.assert_array_equal(ratio.values, expected)
        assert (expected[0, :, :, 1] > 1).sum() == len(direct[0.3].drift_alpha_capped)  # every one is at 1 y


def test_a_fresh_and_a_resumed_sweep_warn_alike_at_the_callers_line(swept, digits, tmp_path):
    folder, fresh_caught, _ = swept
    [fresh] = capped_warnings(fresh_caught)
    point_file = aimcemu.sweeps.plan(config(digits, folder)).tasks[0].file  # nu = 0.3
    assert fresh.startswith(f"drift compensation: 1 of 2 finished tasks in {folder} ran with alpha(s) capped")
    assert f"{point_file} (noise.drift_nu_mean=0.3: 10 capped)" in fresh
    [at] = [w for w in fresh_caught if str(w.message) == fresh]
    assert os.path.abspath(at.filename) == os.path.abspath(__file__)

    resumed_folder = tmp_path / "sweep"
    shutil.copytree(folder, resumed_folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = aimcemu.sweep(config(digits, resumed_folder), workers=1, progress=False)
    assert (result.ran, result.skipped) == (0, 2)
    [resumed] = [w for w in caught if str(w.message) in capped_warnings(caught)]
    assert str(resumed.message) == fresh.replace(str(folder), str(resumed_folder))
    assert os.path.abspath(resumed.filename) == os.path.abspath(__file__)


def test_a_local_worker_leaves_the_runs_own_warning_to_the_coordinator(digits, tmp_path, capfd):
    """The worker's stderr is the test's (capfd): the run's per-task warning is not printed there."""
    cfg = config(digits, tmp_path / "sweep", grid={"noise.drift_nu_mean": [0.3]})
    with pytest.warns(RuntimeWarning, match=r"^drift compensation: 1 of 1 finished tasks"):
        aimcemu.sweep(cfg, workers=1, progress=False)
    assert "exceed what the NIU's back-conversion holds" not in capfd.readouterr().err


def test_the_sweep_report_flags_the_capped_rows(swept, tmp_path):
    folder, _, direct = swept
    page = report.report(folder, tmp_path / "report.html", niu=False).read_text()
    assert "<th>alpha capped</th>" in page
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", page)
    flagged = [row.split("</td><td>") for row in rows if "<td>yes: " in f"<td>{row}"]
    layers = ", ".join(sorted({c["layer"] for c in direct[0.3].drift_alpha_capped}))
    worst = max(c["alpha"] / c["limit"] for c in direct[0.3].drift_alpha_capped)
    assert flagged == [["0.3", "global", f"{YEAR:g}", *flagged[0][3:6],
                        f"yes: {layers} on 2 chip(s), up to {worst:.3g}x the limit"]]


def test_a_sweep_without_capping_has_no_column_and_no_warning(digits, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aimcemu.sweep(config(digits, tmp_path / "sweep", grid={"noise.drift_nu_mean": [0.001]}), workers=1,
                      progress=False)
    page = report.report(tmp_path / "sweep", tmp_path / "report.html", niu=False).read_text()
    assert "alpha capped" not in page


def test_a_task_file_with_a_malformed_capped_list_is_named(swept, tmp_path):
    folder = tmp_path / "sweep"
    shutil.copytree(swept[0], folder)
    task = json.loads((folder / "index.json").read_text())["tasks"][0]["file"]
    with h5py.File(folder / task, "r+") as f:
        cfg = json.loads(f.attrs["config"])
        cfg["drift_alpha_capped"][3]["t"] = 60.0  # not among the sweep's times
        f.attrs["config"] = json.dumps(cfg)
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{folder / task}: field 'config.drift_alpha_capped[3].t': "
                                                            "t = 60 s is not among the sweep's times")):
        results.open_sweep(folder, lazy=False)
    with h5py.File(folder / task, "r+") as f:
        cfg["drift_alpha_capped"][3]["alpha"] = cfg["drift_alpha_capped"][3]["limit"]
        f.attrs["config"] = json.dumps(cfg)
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"{folder / task}: field 'config.drift_alpha_capped[3]"
                                                            ".alpha': ")):
        results.read_task_summary(folder / task)


@pytest.mark.parametrize("entry, field", [("x", "[0]"), ({"layer": "a", "chip": 0, "t": 0.0, "alpha": 2.0}, "[0]"),
                                          ({"layer": 1, "chip": 0, "t": 0.0, "alpha": 2.0, "limit": 1.0}, "[0].layer"),
                                          ({"layer": "a", "chip": True, "t": 0.0, "alpha": 2.0, "limit": 1.0},
                                           "[0].chip"),
                                          ({"layer": "a", "chip": 0, "t": float("nan"), "alpha": 2.0, "limit": 1.0},
                                           "[0].t"),
                                          ({"layer": "a", "chip": 0, "t": 0.0, "alpha": 2.0, "limit": 0}, "[0].limit")])
def test_capped_alphas_checks_each_field(entry, field):
    with pytest.raises(aimcemu.FormatError, match=re.escape(f"f.h5: field 'config.drift_alpha_capped{field}': ")):
        results.capped_alphas({"drift_alpha_capped": [entry]}, "f.h5")
    assert results.capped_alphas({}, "f.h5") == []


def test_the_sweep_command_marks_the_capped_rows(swept, digits, tmp_path, capsys):
    """`aimcemu sweep` ends with the accuracy table: the "global" row at 1 y of nu = 0.3 reads
    "yes" under "alpha capped", with and without the analysis extra (the index's summaries)."""
    from aimcemu import cli
    from aimcemu.commands import sweep as sweep_command

    folder = tmp_path / "sweep"
    shutil.copytree(swept[0], folder)  # done: the command resumes it, runs nothing, prints the table
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(config(digits, folder)))  # JSON is YAML
    with pytest.warns(RuntimeWarning, match="1 of 2 finished tasks"):
        assert cli.main(["sweep", "-c", str(path), "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    for table in (printed[1:], sweep_command._format_accuracy_from_index(folder).splitlines()):
        assert table[0].split()[-2:] == ["alpha", "capped"]
        # t as the run summary prints it: readable and in seconds (a float's 3.154e+07 before)
        assert table[0].split()[2:4] == ["t", "seconds"]
        assert [row.split()[:4] for row in table[1:] if row.rstrip().endswith("yes")] == [["0.3", "global", "1y",
                                                                                        f"{YEAR:.6g}"]]
