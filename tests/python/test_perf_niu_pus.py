"""`aimcemu perf --niu N`: the summary names the PUs the system runs, the ones its resource table
and FPS count, and `--peripherals aimc` without AIMC layers is an error, not a silent no-op.

Was: `perf --niu 2` printed "PUs 5xPU2x+5xPU1x" (the requested mix) and compared its FPS with the
paper's ten-PU figure (-13 %), while the system model had given two slots to the NIUs and timed
8 PUs (5 PU2x + 3 PU1x, the resource table's counts); `perf --peripherals aimc` alone flagged no
layer and printed the same numbers as without it."""
from __future__ import annotations

import pytest

import aimcemu
from aimcemu import cli
from aimcemu.perf import niu_fit, perf


def pu_counts_of(mix: str) -> dict:
    counts = {}
    for part in mix.split("+"):
        count, name = part.split("x", 1)
        counts[name] = int(count)
    return counts


@pytest.mark.parametrize("niu, sharing", [(0, "shared"), (2, "shared"), (1, "per-pu")])
def test_the_summary_names_the_pus_the_system_runs(niu, sharing):
    aimc = "all" if niu else None
    r = perf("resnet18", niu=niu, niu_sharing=sharing, aimc_layers=aimc)
    s = r.summary()
    timed = {}
    for p in r.report.pus:   # what the system model timed (its FPS)
        name = r.config.pus[p.slot].name
        timed[name] = timed.get(name, 0) + 1
    assert pu_counts_of(s["pus"]) == timed
    assert s["pus_requested"] == "5xPU2x+5xPU1x"
    if niu:
        rows = {row["name"]: row["count"] for row in niu_fit(r)["rows"]}
        assert {name: rows[name] for name in timed} == timed   # the resource table's counts
        assert sum(timed.values()) < 10
    else:
        assert s["pus"] == "5xPU2x+5xPU1x"


def test_the_cli_table_shows_the_pus_left_and_no_paper_comparison(capsys):
    assert cli.main(["perf", "--niu", "2", "--no-layers"]) == 0
    out = capsys.readouterr().out
    row = out.splitlines()[1].split()
    assert row[:2] == ["resnet50", "5xPU2x+3xPU1x"]
    assert row[4:6] == ["-", "-"]   # paper, error: the paper's figure is for ten PUs
    assert "8 PUs left (5xPU2x+3xPU1x of 5xPU2x+5xPU1x)" in out
    table = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith(("PU2x ", "PU1x "))}
    assert table == {"PU2x": "5", "PU1x": "3"}
    # without NIUs the paper's system is compared with the paper
    assert "paper_fps" in perf("resnet50").summary()


def test_peripherals_aimc_without_aimc_layers_is_an_error(capsys):
    with pytest.raises(aimcemu.FormatError, match=r"field 'peripherals': 'aimc' selects the AIMC layers, and no "
                                                  r"layer is on AIMC"):
        perf("resnet18", peripherals="aimc")
    assert cli.main(["perf", "--model", "resnet18", "--peripherals", "aimc", "--no-layers"]) == 2
    assert "no layer is on AIMC" in capsys.readouterr().err
    # with AIMC layers it flags exactly those; "all" needs none
    r = perf("resnet18", peripherals="aimc", aimc_layers="fc", niu=1)
    assert [row["layer"] for row in r.layer_rows() if row["peripherals"]] == ["fc"] * len(r.runs)
    r = perf("resnet18", peripherals="all")
    assert all(row["peripherals"] for row in r.layer_rows() if row["kind"] in ("conv", "linear"))
