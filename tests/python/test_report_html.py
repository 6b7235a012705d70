"""``aimcemu report``: a self-contained HTML page (PNG data URIs, no scripts, no external links)
whose tables agree with aimcemu.analysis; rendered by headless Chromium without console errors
when Chromium is installed."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

import aimcemu
from aimcemu import analysis, cli
from aimcemu import report as report_module
from aimcemu.report import report
from conftest import digits_subset

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """Collects the page's images, links, scripts and table cells."""

    def __init__(self):
        super().__init__()
        self.images, self.links, self.scripts, self.cells = [], [], 0, []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag in ("a", "link") and "href" in attrs:
            self.links.append(attrs["href"])
        if tag == "script":
            self.scripts += 1
        self._in_cell = tag == "td"

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)
            self._in_cell = False


def parse(path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The first 40 images of the embedded test set, as a data set file."""
    return str(digits_subset(tmp_path_factory, 40)[1])


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory, small_data):
    folder = tmp_path_factory.mktemp("sweep") / "s"
    aimcemu.sweep({"output": str(folder), "data": small_data, "noise": {"model": "pcm_like"}, "t": [1.0, 3600.0, 86400.0],
                   "chips": 3, "seed": 1, "layers": ["stem", "head"],
                   "grid": {"mapping": {"all": "all", "head": {"default": "digital", "layers": {"head": "aimc"}}}}},
                  workers=2, progress=False)
    return folder


def assert_self_contained(page: _Page) -> list[bytes]:
    assert page.scripts == 0 and page.links == []
    pngs = []
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(PNG_SIGNATURE)
        pngs.append(png)
    return pngs


def test_sweep_report_is_self_contained_and_matches_the_analysis(sweep_folder):
    path = report(sweep_folder)
    assert path == sweep_folder / "report.html"
    page = parse(path)
    pngs = assert_self_contained(page)
    # accuracy vs t, one SNR heatmap per mapping, histograms of the stored layers
    assert len(pngs) == 4
    text = path.read_text()
    assert "Accuracy vs t" in text and "SNR heatmap: mapping=head" in text and "Activation histograms" in text
    acc = analysis.accuracy_vs_t(analysis.open_sweep(sweep_folder))
    for mapping in ("all", "head"):
        for t in (1.0, 3600.0, 86400.0):
            assert f"{float(acc['mean'].sel(mapping=mapping, t=t)):.4f}" in page.cells
    assert "NIUs and throughput" in text
    niu_rows = report_module.niu_rows(analysis.open_sweep(sweep_folder).attrs["config"])
    assert [row["NIUs"] for row in niu_rows] == [0, 1, 2, 4]
    assert [row["AIMC layers"] for row in niu_rows] == [0, 5, 5, 5]  # the union of both mappings' AIMC layers
    for row in niu_rows:
        assert row["FPS"] in page.cells


def test_run_report_and_cli_with_pngs(tmp_path, small_data, capsys):
    run = aimcemu.run(data=small_data, output=str(tmp_path / "run.h5"), mapping="all", t=(1.0, 86400.0), chips=2,
                      layers="all")
    assert cli.main(["report", run.path, "--layers", "stem,classifier", "--png", str(tmp_path / "png"), "--no-niu"]) == 0
    out = capsys.readouterr().out
    page_path = tmp_path / "run.html"
    assert f"report    {page_path}" in out
    page = parse(page_path)
    assert len(assert_self_contained(page)) == 3
    assert "NIUs and throughput" not in page_path.read_text()
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == ["accuracy_vs_t.png", "activation_histograms.png", "snr_heatmap__run.png"]
    import matplotlib.image

    image = matplotlib.image.imread(tmp_path / "png" / "accuracy_vs_t.png")
    assert image.ndim == 3 and image.shape[0] > 100 and np.ptp(image) > 0


def test_the_niu_table_reads_the_model_file_once(tmp_path, small_data, monkeypatch):
    """The table's four rows (0, 1, 2, 4 NIUs) and the AIMC layer names share one load of the
    run's model: it was read six times, about 0.25 s of a 3.6 s report of ResNet-50."""
    run = aimcemu.run(data=small_data, output=str(tmp_path / "run.h5"), mapping="all", t=(1.0,), layers="none")
    loads = []
    load = aimcemu._core.load_model
    monkeypatch.setattr(aimcemu._core, "load_model", lambda path: loads.append(path) or load(path))
    page_path = report(run.path, output=tmp_path / "run.html", layers=[])
    assert "NIUs and throughput" in page_path.read_text()
    assert len(loads) == 1, loads


def test_report_errors(tmp_path, small_data):
    run = aimcemu.run(data=small_data, output=str(tmp_path / "run.h5"), mapping="all", t=(1.0,), layers=["stem"])
    with pytest.raises(ValueError, match="'head' has no stored activations"):
        report(run.path, layers=["head"])
    with pytest.raises(FileNotFoundError, match="no results file or sweep folder"):
        report(tmp_path / "missing")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium is not installed")
def test_report_renders_in_headless_chromium(sweep_folder, tmp_path):
    page = report(sweep_folder, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--window-size=1100,2400", f"--screenshot={shot}", f"file://{page}"],
                          capture_output=True, text=True, timeout=180)
    assert shot.is_file() and shot.read_bytes().startswith(PNG_SIGNATURE), proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page}"],
                         capture_output=True, text=True, timeout=180).stdout
    assert len(re.findall(r"<img ", dom)) == 4  # the browser parsed every figure


def test_a_run_over_both_drift_compensations_reports_each_as_a_point(tmp_path, small_data):
    summary = aimcemu.run(data=small_data, mapping="all", noise={"model": "pcm_like"}, t=(0.0, 86400.0), chips=2,
                          drift_compensation=["none", "global"], layers="none", output=tmp_path / "both.h5")
    page = parse(report(summary.path, tmp_path / "both.html"))
    expected = {(row["drift_compensation"], f"{row['mean']:.4f}") for row in summary.accuracy_vs_t()}
    cells = page.cells
    found = {(cells[i], cells[i + 2]) for i in range(len(cells) - 2) if cells[i] in ("none", "global")}
    assert expected <= found


def test_a_sweep_over_both_drift_compensations_reports_every_point(tmp_path, small_data):
    # `done` is per task, and a task covers both compensations: the report used to stack it over
    # the drift_compensation dimension too and failed with KeyError 'drift_compensation'.
    folder = tmp_path / "dc"
    aimcemu.sweep({"output": str(folder), "data": small_data, "noise": {"model": "pcm_like"}, "mapping": "all",
                   "drift_compensation": ["none", "global"], "t": [1.0, 3600.0], "chips": 2, "layers": "none",
                   "grid": {"noise.prog_noise_scale": [0.5, 1.0]}}, workers=1, progress=False)
    assert cli.main(["report", str(folder)]) == 0
    page = parse(folder / "report.html")
    assert_self_contained(page)
    acc = analysis.accuracy_vs_t(analysis.open_sweep(folder, lazy=False))
    cells = page.cells
    for scale in (0.5, 1.0):
        for compensation in ("none", "global"):
            mean = float(acc["mean"].sel({"noise.prog_noise_scale": scale, "drift_compensation": compensation,
                                          "t": 3600.0}))
            row = [str(scale), compensation, "3600", f"{mean:.4f}"]
            assert any(cells[i:i + 4] == row for i in range(len(cells))), (row, cells)


def test_a_sweep_with_unfinished_tasks_says_which_points_are_missing(tmp_path, small_data):
    """A sweep killed after some tasks: the report's tables held only the finished points and said
    nothing, which reads as the whole study."""
    folder = tmp_path / "cut"
    aimcemu.sweep({"output": str(folder), "data": small_data, "noise": {"model": "pcm_like"}, "mapping": "all",
                   "t": [1.0], "chips": 1, "layers": "none",
                   "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}}, workers=1, progress=False)
    assert cli.main(["report", str(folder)]) == 0
    assert "Incomplete sweep" not in (folder / "report.html").read_text()
    lost = sorted((folder / "tasks").glob("00002-*.h5"))  # the third grid point's file
    assert len(lost) == 1
    lost[0].unlink()  # what a sweep killed before that task finished leaves
    assert cli.main(["report", str(folder)]) == 0
    text = (folder / "report.html").read_text()
    assert "Incomplete sweep: 1 of 3 tasks have no results file yet" in text
    assert "noise.prog_noise_scale=2.0" in text
    rows = [c for c in parse(folder / "report.html").cells if c in ("0.5", "1.0", "2.0")]
    assert "2.0" not in rows and {"0.5", "1.0"} <= set(rows)
