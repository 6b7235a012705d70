"""A capped drift-compensation alpha is part of what a run reports, not only a RuntimeWarning.

Deterministic drift with nu = 0.3 (no other noise) shrinks the weights by (t/t0 + 1)^-0.3: at one
year about 1/72, beyond what the NIU's back-conversion scale holds (niu.max_alpha, 8.06 for a
layer whose clean abs-max is 127).  So every "global" round at 1 y runs with capped alphas, while
t = 0 and "none" rounds run with their own."""
from __future__ import annotations

import os
import warnings

import pytest

import aimcemu
from aimcemu import cli, report
from conftest import digits_subset

STRONG_DRIFT = {"model": "state_independent", "drift_nu_mean": 0.3, "drift_nu_std": 0.0,
                "prog_noise_scale": 0.0, "read_noise_scale": 0.0}
YEAR = 365 * 86400.0


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, 8)


def capped_run(digits, out, **options):
    model, data, *_ = digits
    return aimcemu.run(model, data, out, mapping="all", noise=STRONG_DRIFT, t=(0.0, YEAR), chips=2,
                       drift_compensation="none,global", threads=1, **options)


def test_summary_lists_the_capped_alphas_and_the_table_flags_their_rows(digits, tmp_path):
    with pytest.warns(RuntimeWarning, match="capped"):
        summary = capped_run(digits, tmp_path / "cap.h5")
    capped = summary.drift_alpha_capped
    assert capped and all(c["t"] == YEAR and c["alpha"] > c["limit"] for c in capped)
    assert {c["chip"] for c in capped} == {0, 1}
    for c in capped:  # the alpha the rounds ran with is the limit
        assert summary.drift_alpha[c["layer"]][c["chip"]][1] == c["limit"]
    rows = summary.format_accuracy_table().splitlines()
    flagged = [line for line in rows if line.endswith("alpha capped")]
    assert len(flagged) == 1 and flagged[0].startswith("global") and "1y" in flagged[0]
    assert any(line.startswith(f"alpha capped: {len(capped)} ") for line in rows)


def test_a_run_without_capping_has_no_flag(digits, tmp_path):
    model, data, *_ = digits
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = aimcemu.run(model, data, tmp_path / "ok.h5", mapping="all", noise=STRONG_DRIFT, t=(0.0, 60.0),
                              drift_compensation="global", threads=1)
    assert summary.drift_alpha_capped == []
    assert "capped" not in summary.format_accuracy_table()


def test_the_warning_points_at_the_callers_line(digits, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capped_run(digits, tmp_path / "where.h5")
    [warning] = [w for w in caught if issubclass(w.category, RuntimeWarning) and "capped" in str(w.message)]
    assert os.path.abspath(warning.filename) == os.path.abspath(__file__)


def test_cli_table_and_report_flag_the_capped_rows(digits, tmp_path, capsys):
    model, data, *_ = digits
    out = tmp_path / "cli.h5"
    with pytest.warns(RuntimeWarning, match="capped"):
        assert cli.main(["run", os.fspath(model), "-d", os.fspath(data), "-o", os.fspath(out), "--mapping", "all",
                         "--noise", "{model: state_independent, drift_nu_mean: 0.3, drift_nu_std: 0.0, "
                         "prog_noise_scale: 0.0, read_noise_scale: 0.0}", "--t", "0,1y", "--chips", "2",
                         "--drift-compensation", "none,global", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert [line.split()[0] for line in printed.splitlines() if line.endswith("alpha capped")] == ["global"]
    page = report.report(out, niu=False).read_text()
    assert "<th>alpha capped</th>" in page
    assert page.count("<td>yes: ") == 1  # the global row at 1 y; none at t = 0 and none under "none"
