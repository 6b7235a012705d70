"""aimcemu perf: the Python API and the CLI over the C++ timing model."""
from __future__ import annotations

import csv
import json

import pytest

import aimcemu
from aimcemu import cli
from aimcemu.perf import PAPER, aimc_mask, niu_config, perf, resolve_network


@pytest.fixture(scope="module")
def r50():
    return perf("resnet50")


def test_table_one_resnet50_within_one_percent(r50):
    s = r50.summary()
    assert s["fps"] == pytest.approx(PAPER["resnet50"]["fps"], rel=0.01)
    assert s["pu_latency_ms"]["PU2x"] == pytest.approx(12.9, rel=0.01)
    assert s["pu_latency_ms"]["PU1x"] == pytest.approx(25.3, rel=0.01)
    assert s["peak_tops"] == pytest.approx(4.608)
    assert s["fps_per_tops"] == pytest.approx(s["fps"] / 4.608)
    assert 0.9 < s["efficiency"] <= 1.0
    assert "584.92" in r50.table_one()


def test_layer_rows_add_up_to_the_pu_latency(r50):
    rows = r50.layer_rows()
    for pu in ("PU2x", "PU1x"):
        mine = [r for r in rows if r["pu"] == pu]
        assert {r["layer"] for r in mine} >= {"conv1", "fc", "avgpool", "layer4.2.conv3"}
        assert "maxpool" not in {r["layer"] for r in mine}  # fused into conv1's post-processing
        total_ms = sum(r["latency_us"] for r in mine) / 1e3
        # the rows carry the reported round's stalls; the latency is the mean of two rounds
        assert total_ms == pytest.approx(r50.summary()["pu_latency_ms"][pu], rel=1e-3)
        for r in mine:
            assert r["cycles"] >= r["sa_cycles"]
            assert r["cycles"] == pytest.approx(r["sa_cycles"] + r["fill_cycles"] + r["adm_bound_cycles"]
                                                + r["stall_cycles"], abs=2)
            assert 0.0 <= r["efficiency"] <= 1.0


def test_shared_niu_sets_the_rate_when_everything_is_aimc():
    r = perf("resnet50", aimc_layers="all", niu=1)
    s = r.summary()
    net = resolve_network("resnet50")
    assert s["aimc_weights"] == net.total_weights()
    assert s["bottleneck"] == "NIU"
    # One frame per NIU round: the NIU model's time for the weights and the 54 layers' program
    # blocks (2.9 % of the round: a rate over the weights alone would give 178.6 FPS, not 173.4).
    round_s = aimcemu._core.timing.niu_round_time(niu_config(r.options), net.total_weights(), 54).seconds
    assert s["fps"] == pytest.approx(1.0 / round_s, rel=1e-9)


def test_niu_rate_and_resources_come_from_the_rtl(capsys):
    """--niu-lanes picks a synthesized NIU: its co-simulated weights per cycle set the rate, its
    Yosys resources appear beside the PUs' with the XCU50 fit; other lane counts are refused."""
    syntheses = {s["lanes"]: s for s in aimcemu._core.niu.syntheses()}
    assert {1, 4, 8, 32} <= set(syntheses)
    r = perf("resnet50", aimc_layers="all", niu=2, niu_lanes=8)
    assert r.config.niu.weights_per_s == pytest.approx(syntheses[8]["weights_per_cycle"] * 300e6, rel=1e-12)
    s = r.summary()
    assert s["niu_lanes"] == 8 and s["niu_resources"]["LUT"] == syntheses[8]["LUT"] and s["fits_xcu50"]
    table = r.table_one()
    assert "NIU (8 lanes)" in table and "XCU50" in table and "fits the XCU50" in table
    # Full rate: the channel, not the datapath, bounds the NIU.
    assert perf("resnet50", aimc_layers="all", niu=1, niu_lanes=32).config.niu.bound == "hbm-channel"
    with pytest.raises(aimcemu.FormatError, match="niu.lanes.*not built for 5 lanes"):
        perf("resnet50", aimc_layers="all", niu=1, niu_lanes=5)
    assert cli.main(["perf", "--model", "resnet18", "--niu", "1", "--aimc-layers", "fc", "--niu-lanes", "3"]) == 2
    assert "niu.lanes" in capsys.readouterr().err


def test_aimc_mask_names_and_errors():
    net = resolve_network("resnet18")
    mask = aimc_mask(net, "all")
    assert sum(mask) == sum(1 for l in net.layers if l.is_gemm)
    mask = aimc_mask(net, "layer1.0.conv1, fc")
    assert [net.layers[i].name for i, m in enumerate(mask) if m] == ["layer1.0.conv1", "fc"]
    with pytest.raises(aimcemu.FormatError, match="no layer named 'nope'"):
        aimc_mask(net, "nope")
    with pytest.raises(aimcemu.FormatError, match="not a conv or FC"):
        aimc_mask(net, "maxpool")
    with pytest.raises(aimcemu.FormatError, match="neither a zoo network"):
        resolve_network("resnet1000")


def test_cli_json_csv_and_plots(tmp_path, capsys):
    out_csv = tmp_path / "layers.csv"
    assert cli.main(["perf", "--model", "resnet18", "--format", "json", "--output", str(out_csv),
                     "--plot", str(tmp_path / "plots")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["fps"] == pytest.approx(PAPER["resnet18"]["fps"], rel=0.01)
    assert data["options"]["pus"] == "5xPU2x+5xPU1x"
    with open(out_csv) as fh:
        rows = list(csv.DictReader(fh))
    assert {r["pu"] for r in rows} == {"PU2x", "PU1x"}
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["resnet18_PU2x_memory_ratio.png", "resnet18_PU2x_time_ratio.png", "resnet18_layer_latency.png"]
    for name in pngs:
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table_and_bad_input(capsys):
    assert cli.main(["perf", "--model", "resnet18", "--no-layers", "--niu", "2", "--aimc-layers", "fc",
                     "--mode", "layer-pipelined"]) == 0
    out = capsys.readouterr().out
    assert "layer-pipelined" in out and "NIUs: 2" in out
    assert cli.main(["perf", "--model", "resnet18", "--aimc-layers", "layer9.conv"]) == 2
    assert "no layer named 'layer9.conv'" in capsys.readouterr().err
    assert cli.main(["perf", "--model", "resnet18", "--aimc-layers", "all"]) == 2  # AIMC needs an NIU
    assert "NIU" in capsys.readouterr().err
    assert cli.main(["perf", "--pus", "3xPU5x"]) == 2


def test_time_breakdown_adds_up_and_names_the_gap(r50):
    s = r50.summary()
    for pu, b in s["time_breakdown"].items():
        parts = b["ideal_ms"] + b["fill_ms"] + b["adm_bound_ms"] + b["stall_ms"]
        assert parts == pytest.approx(b["latency_ms"], rel=1e-9)
        assert b["latency_ms"] == pytest.approx(s["pu_latency_ms"][pu], rel=1e-12)
        # the weights port is the slowest of its three links
        assert b["weight_port_gbps"] == pytest.approx(min(b["axi_port_gbps"], b["uram_write_gbps"], b["hbm_channel_gbps"]))
    # both PU types write one whole URAM word (64 weight bits) per cascade per fast cycle:
    # 2 x 8 B x 600 MHz, so the PU1x's weights port is bound by the HBM channel like the PU2x's
    for pu in ("PU1x", "PU2x"):
        assert s["time_breakdown"][pu]["uram_write_gbps"] == pytest.approx(9.6)
        assert s["time_breakdown"][pu]["weight_port_gbps"] == pytest.approx(316 / 32 * 425 / 460.8)
    text = r50.table_one()
    assert "PU2x: ideal 12.614 ms" in text and "(paper 12.9 ms" in text


def test_roofline_variant_is_the_sa_cycle_count(capsys):
    r = perf("resnet50", timing_model="roofline")
    for pu, b in r.summary()["time_breakdown"].items():
        assert b["fill_ms"] == 0 and b["adm_bound_ms"] == 0 and b["stall_ms"] == pytest.approx(0, abs=1e-9)
        assert b["latency_ms"] == pytest.approx(b["ideal_ms"], rel=1e-12)
    assert "paper_fps" not in r.summary()  # the straw man is not compared as if it were the model
    assert cli.main(["perf", "--model", "resnet18", "--no-layers", "--timing-model", "roofline"]) == 0
    assert "fill/drain 0.000" in capsys.readouterr().out
    with pytest.raises(aimcemu.FormatError, match="timing_model"):
        perf("resnet18", timing_model="exact")
