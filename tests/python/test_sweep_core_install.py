"""`aimcemu sweep` with the core packages only (no xarray, h5netcdf, scipy, dask): the README says
the core install is enough for run, perf and sweep.

Was: every task ran, then the final accuracy table imported the analysis packages and the command
exited 2 ("needs xarray, which is not installed").  A missing package is simulated by a None in
sys.modules, which makes its import fail as if it were not installed."""
from __future__ import annotations

import re
import sys

import pytest
import yaml

from aimcemu import cli
from aimcemu.commands import sweep as sweep_command
from conftest import digits_subset

ANALYSIS_PACKAGES = ("xarray", "h5netcdf", "scipy", "scipy.stats", "dask", "dask.array", "distributed", "pandas",
                     "matplotlib")


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    return str(digits_subset(tmp_path_factory, 30)[1])


def without_analysis_packages(monkeypatch):
    for name in ANALYSIS_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)


def table_means(text: str) -> list[float]:
    """The mean column of an accuracy table (the column headed 'mean')."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if re.search(r"\bmean\b", line))
    column = lines[header].split().index("mean")
    means = []
    for line in lines[header + 1:]:
        cells = line.split()
        if len(cells) <= column or line.startswith("("):
            break
        means.append(float(cells[column]))
    return means


def sweep_without_analysis_packages(tmp_path, small_data, capsys, monkeypatch, t, chips, scales) -> str:
    """Runs a sweep over prog_noise_scale with the analysis packages hidden; its printed output."""
    config = {"output": str(tmp_path / "sw"), "data": small_data, "noise": {"model": "pcm_like"}, "t": t,
              "chips": chips, "seed": 3, "grid": {"noise.prog_noise_scale": scales}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    with monkeypatch.context() as patch:
        without_analysis_packages(patch)
        assert cli.main(["sweep", "-c", str(path), "--workers", "1", "--no-progress"]) == 0
        return capsys.readouterr().out


def test_a_sweep_finishes_with_exit_0_and_a_table_without_the_analysis_packages(tmp_path, small_data, capsys,
                                                                              monkeypatch):
    out = sweep_without_analysis_packages(tmp_path, small_data, capsys, monkeypatch, [0.0, 3600.0], 2, [0.5, 2.0])
    assert "sweep complete: 2 tasks" in out
    assert "pip install 'aimcemu[analysis]'" in out
    core_means = table_means(out)
    assert len(core_means) == 4   # 2 scales x 2 t
    # The same numbers as the table the analysis packages give (when they are installed).
    pytest.importorskip("xarray")
    pytest.importorskip("scipy")
    full = sweep_command.format_accuracy(tmp_path / "sw")
    assert "ci95" in full
    assert table_means(full) == pytest.approx(core_means, abs=5e-5)


def test_one_chip_has_no_spread_in_either_table(tmp_path, small_data, capsys, monkeypatch):
    """With one chip the interval table printed [nan, nan] and the core table std 0.0; the run summary
    and the report print 'n/a' (analysis.interval_over_chips: no spread between chips)."""
    core = sweep_without_analysis_packages(tmp_path, small_data, capsys, monkeypatch, [0.0], 1, [1.0])
    lines = core.splitlines()
    header = next(i for i, line in enumerate(lines) if re.search(r"\bmean\b", line))
    assert lines[header + 1].split()[-2:] == ["n/a", "1"], core
    pytest.importorskip("xarray")
    pytest.importorskip("scipy")
    full = sweep_command.format_accuracy(tmp_path / "sw")
    assert "nan" not in full.lower() and full.splitlines()[1].split()[-2:] == ["n/a", "1"], full
