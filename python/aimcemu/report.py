"""``aimcemu report``: one self-contained HTML page from a results file or a sweep folder.

    from aimcemu.report import report
    page = report("results/drift")                      # -> results/drift/report.html
    page = report("results/run.h5", "run.html", layers=["stem", "head"])

The page holds its plots as PNG data URIs (no scripts, no external files), so it opens offline
and can be mailed around: accuracy versus t per mapping with 95 % confidence bands over chips;
a per-layer SNR heatmap over t; histograms of noisy against noise-free activations for chosen
layers (where the file stored them); and an NIU/throughput table from ``aimcemu.perf`` for the
run's model and AIMC layers.  ``save_pngs`` also writes the figures as PNG files.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import itertools
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from . import _core, analysis, modelfile, validate
from ._optional import require
from .config import aimc_layer_names
from .perf import perf
from .results import capped_alphas, open_run, open_sweep

NIU_COUNTS = (1, 2, 4)


def _plt():
    matplotlib = require("matplotlib", "aimcemu report")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    _plt().close(fig)
    return buffer.getvalue()


# --- loading ------------------------------------------------------------------------------------
class _Source:
    """A run file or a sweep folder, seen through the same questions the report asks."""

    def __init__(self, path):
        self.path = Path(path)
        self.is_sweep = self.path.is_dir()
        if self.is_sweep:
            self.ds = open_sweep(self.path, lazy=False)
            self.config = self.ds.attrs["config"]
        else:
            self.run = open_run(self.path)
            self.ds = analysis.run_as_grid(self.run)
            self.config = self.run.attrs["config"]
        self.grid_dims = [d for d in self.ds["accuracy"].dims if d not in ("chip", "t", "rep")]

    def points(self) -> list[dict]:
        """Every grid point as {axis: label} ({} for a single run)."""
        if not self.grid_dims:
            return [{}]
        if "done" not in self.ds:  # a single run over several drift compensations: all points ran
            return [{d: v.item() for d, v in zip(self.grid_dims, combo)}
                    for combo in itertools.product(*(self.ds[d].values for d in self.grid_dims))]
        # `done` is per task; a task covers every drift compensation, so that axis (a grid dim
        # of the rounds) is not one of `done`'s: each done task is a point per compensation.
        task_dims = [d for d in self.grid_dims if d in self.ds["done"].dims]
        within_task = [d for d in self.grid_dims if d not in task_dims]
        if task_dims:
            done = [{d: p[d].item() for d in task_dims}
                    for p in self.ds["done"].stack(point=task_dims) if bool(p)]
        else:
            done = [{}] if bool(self.ds["done"]) else []
        inner = [dict(zip(within_task, combo))
                 for combo in itertools.product(*(self.ds[d].values.tolist() for d in within_task))]
        return [{d: {**task, **rest}[d] for d in self.grid_dims} for task in done for rest in inner]

    def unfinished_tasks(self) -> tuple[int, list[dict]]:
        """(number of tasks, the grid points {axis: label} of those without a results file yet: a
        sweep that was interrupted or is still running).  A single run has none."""
        if not self.is_sweep or "done" not in self.ds:
            return 0, []
        done = self.ds["done"]
        if not done.dims:
            return 1, ([] if bool(done) else [{}])
        stacked = done.stack(point=list(done.dims))
        return stacked.size, [{d: p[d].item() for d in done.dims} for p in stacked if not bool(p)]

    def files_with_activations(self) -> list[tuple[Path, list[str]]]:
        """(file, its layers with stored activations in network order) of every file that has
        rounds and stores some, from what opening the run or sweep read of each file."""
        if not self.is_sweep:
            stored = [str(n) for n, s in zip(self.run["layer"].values, self.run["activations_stored"].values) if s]
            return [(self.path, stored)] if stored and self.run.sizes["round"] else []
        found = []
        layers = [str(n) for n in self.ds["layer"].values]
        for file, stored in zip(np.ravel(self.ds["file"].values),
                                self.ds["activations_stored"].values.reshape(-1, len(layers))):
            if stored.any():
                found.append((self.path / file, [n for n, s in zip(layers, stored) if s]))
        return found


def _point_name(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items()) or "run"


# --- figures ------------------------------------------------------------------------------------
def accuracy_figure(src: _Source):
    """Accuracy vs t, one line per grid point, with the 95 % CI over chips as a band."""
    plt = _plt()
    acc = analysis.accuracy_vs_t(src.ds)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    times = acc["t"].values
    for point in src.points():
        sel = acc.sel(point) if point else acc
        ax.plot(times, sel["mean"].values, marker="o", label=_point_name(point))
        ax.fill_between(times, sel["ci_low"].values, sel["ci_high"].values, alpha=0.2)
    reference = float(np.nanmax(np.asarray(src.ds["reference_accuracy"].values, dtype=float)))
    ax.axhline(reference, color="k", lw=0.8, ls="--", label="noise-free")
    if np.all(times > 0):
        ax.set_xscale("log")
    else:  # t = 0 (just programmed) has no log position: linear up to 1 s, log beyond
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(left=0.0)
    ax.set_xlabel("time since programming t (s)")
    ax.set_ylabel("top-1 accuracy")
    ax.set_title(f"accuracy vs t (mean and 95 % CI over {src.ds.sizes['chip']} chips)")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def snr_heatmap_figure(src: _Source, point: dict):
    """Per-layer SNR (dB, mean over chips) at each t for one grid point."""
    plt = _plt()
    snr = analysis.snr_over_t(src.ds)
    if point:
        snr = snr.sel(point)
    values = snr.transpose("layer", "t").values
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * values.shape[0] + 1.6))
    image = ax.imshow(values, aspect="auto", cmap="viridis")
    ax.set_yticks(range(values.shape[0]), snr["layer"].values, fontsize=8)
    ax.set_xticks(range(values.shape[1]), [f"{t:g}" for t in snr["t"].values], fontsize=8)
    ax.set_xlabel("t (s)")
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, snr_cell_text(v), ha="center", va="center", fontsize=7, color="w" if np.isfinite(v) else "0.4")
    fig.colorbar(image, ax=ax, label="SNR (dB)")
    ax.set_title(f"per-layer SNR over t: {_point_name(point)}")
    fig.tight_layout()
    return fig


def snr_cell_text(value: float) -> str:
    """A heatmap cell (analysis.snr_over_t's conventions): the mean in dB; +inf "exact" (every
    round equalled the reference, e.g. a digital layer fed by digital layers); -inf "lost" (some
    round's reference was all zero and its output not); NaN "n/a" (no round ran)."""
    if np.isfinite(value):
        return f"{value:.1f}"
    return "n/a" if np.isnan(value) else ("exact" if value > 0 else "lost")


def histogram_figure(path: Path, layers: Sequence[str]):
    """Noisy vs noise-free activation histograms (log counts) for each chosen layer."""
    plt = _plt()
    hist = analysis.activation_histograms(path, layers)
    fig, axes = plt.subplots(1, len(layers), figsize=(3.6 * len(layers), 3.2), squeeze=False)
    values = hist["value"].values
    for ax, name in zip(axes[0], layers):
        ref = hist["reference"].sel(layer=name).values
        noisy = hist["noisy"].sel(layer=name).values / max(hist.attrs["rounds"], 1)
        ax.step(values, ref, where="mid", label="noise-free", lw=1.0)
        ax.step(values, noisy, where="mid", label="noisy (per round)", lw=1.0)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("int8 activation")
    axes[0][0].set_ylabel("count")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"activation histograms: {path.name}", fontsize=9)
    fig.tight_layout()
    return fig


def niu_rows(config: dict, niu_counts: Sequence[int] = NIU_COUNTS, net=None) -> list[dict]:
    """FPS and latency of the run's model on the default system: digital, then with its AIMC
    layers and 1, 2, 4 NIUs (aimcemu.perf).  `config` is what the results file or the sweep's
    index stored; `net`, the run's model when the caller has loaded it already (it is read from
    the config's model file otherwise, once for all rows)."""
    if net is None:
        net = modelfile.load_model(_model_path(config))
    aimc = _aimc_layer_names(config, net)
    rows = []
    for niu in (0, *niu_counts):
        layers = None if niu == 0 else aimc
        if niu and not aimc:
            break
        summary = perf(net, aimc_layers=layers, niu=niu).summary()
        rows.append({"NIUs": niu, "AIMC layers": summary["aimc_layers"], "FPS": f"{summary['fps']:.0f}",
                     "latency (ms)": f"{summary['latency_ms']:.4f}", "bottleneck": summary["bottleneck"]})
    return rows


def _niu_section(config: dict) -> str:
    """The NIU/throughput table, or a note saying why it is left out.  The table needs the run's
    model file, found at the path the run stored (as it was given: relative to the folder the run
    was started in), which may be gone or be another model by now; the rest of the report comes
    from the results alone, so a missing model costs only this table."""
    stored = config.get("model")
    try:
        net = modelfile.load_model(_model_path(config))  # once for the whole table
        expected = config.get("model_name")
        if stored is not None and expected is not None and net.name != expected:
            return _note(f"NIU table left out: the model file at the run's stored path {stored!r} is model "
                         f"{net.name!r}, the run's was {expected!r}.")
        return _table(niu_rows(config, net=net))
    except (OSError, _core.FormatError) as exc:
        where = f"at the run's stored path {stored!r}" if stored is not None else "(the embedded default)"
        return _note(f"NIU table left out: the run's model file {where} could not be read "
                     f"({exc}); a relative path is read from the current folder, so run the report from the "
                     "folder the run was started in, or pass --no-niu.")


def _model_path(config: dict) -> str:
    """The run's model file: the stored path, or the embedded default when the run named none
    (the data set is not needed here)."""
    if config.get("model") is None:
        return os.fspath(modelfile.embedded_paths()[0])
    return validate.input_file(config["model"], "model", "the run's config", "model file")


def _unfinished_note(src: _Source, listed: int = 10) -> list[str]:
    """A warning at the top of a sweep's report whose tasks have not all written their file:
    their grid points are missing from every table and figure, which would otherwise read as the
    whole study."""
    total, missing = src.unfinished_tasks()
    if not missing:
        return []
    points = ["; ".join(f"{axis}={label}" for axis, label in point.items()) or "(the one task)"
              for point in missing[:listed]]
    more = f" and {len(missing) - listed} more" if len(missing) > listed else ""
    return [_note(f"Incomplete sweep: {len(missing)} of {total} tasks have no results file yet (interrupted, "
                  f"failed or still running; `aimcemu sweep` on the same config resumes them), so these grid "
                  f"points are missing from the tables and figures below: {', '.join(points)}{more}.")]


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _aimc_layer_names(config: dict, net) -> list[str]:
    """The AIMC layers of the stored mapping(s) on `net` (the union over a mapping grid axis)."""
    mappings = [config.get("mapping")]
    grid = config.get("grid") or {}
    if "mapping" in grid:
        mappings = [value for _, value in grid["mapping"]]
    names: list[str] = []
    for spec in mappings:
        names += [n for n in aimc_layer_names(net, spec, config.get("noise")) if n not in names]
    return names


# --- the page -----------------------------------------------------------------------------------
_STYLE = """body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;font-size:90%}
th{background:#eee}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}pre{background:#f6f6f6;
padding:0.6em;overflow-x:auto;font-size:80%}.note{color:#666}"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(rows: list[dict]) -> str:
    if not rows:
        return '<p class="note">(none)</p>'
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def build_figures(results, layers: Sequence[str] | None = None, max_heatmaps: int = 4) -> tuple[_Source, dict]:
    """The report's figures as {title: PNG bytes} (also used by save_pngs)."""
    src = _Source(results)
    figures = {}
    if src.ds.sizes["rep"]:
        figures["Accuracy vs t"] = _png(accuracy_figure(src))
        for point in src.points()[:max_heatmaps]:
            figures[f"SNR heatmap: {_point_name(point)}"] = _png(snr_heatmap_figure(src, point))
    stored = src.files_with_activations()
    if layers:
        _check_histogram_layers(src, list(layers), stored)
    if stored:
        path, available = stored[0]
        chosen = list(layers) if layers else available[:3]
        figures["Activation histograms"] = _png(histogram_figure(path, chosen))
    return src, figures


def _check_histogram_layers(src: _Source, layers: list[str], stored: list[tuple[Path, list[str]]]) -> None:
    """Layers asked for histograms (--layers) must be layers of the results, and the histograms
    need a file with their noisy activations stored: each failure its own message, rather than
    asked-for histograms left out without a word."""
    known = [str(n) for n in src.ds["layer"].values]
    unknown = [n for n in layers if n not in known]
    if unknown:
        raise ValueError(f"report: '{unknown[0]}' is not a layer of {src.path} (layers: {', '.join(known)})")
    if not stored:
        why = "has no noisy rounds (a digital run)" if not src.ds.sizes["rep"] else \
            "stores no activations (run with layers='all' or name the layers)"
        raise ValueError(f"report: histograms of {', '.join(layers)} asked for, but {src.path} {why}")
    path, available = stored[0]
    missing = [n for n in layers if n not in available]
    if missing:
        raise ValueError(f"report: layer '{missing[0]}' has no stored activations in {path} "
                         f"(stored: {', '.join(available)})")


def _check_results_path(results) -> Path:
    """A results file (regular file) or a sweep folder; anything else is refused by name."""
    from .validate import input_file, text

    results = Path(text(os.fspath(results), "results", "<report>"))
    if not results.exists():
        raise FileNotFoundError(f"report: no results file or sweep folder at {results}")
    if not results.is_dir():
        input_file(results, "results", "<report>", "results file")
    return results


def _output_path(results: Path, output, is_sweep: bool) -> Path:
    """The HTML file: checked like every output (aimcemu.files.output_file): never the results
    file or a task file it reads, a folder, a device or a FIFO; a trailing '/' is a folder that
    receives the default name."""
    from .files import output_file

    default = "report.html" if is_sweep else results.with_suffix(".html").name
    if output is None:
        output = results / default if is_sweep else results.with_suffix(".html")
    inputs = [("results file", results)] if not is_sweep else \
        [("sweep index", results / "index.json")] + [("task file", p) for p in (results / "tasks").glob("*.h5")]
    # The folder of `-o new/dir/` is made only when the page is written: a report refused later
    # (a results file that fails its checks) leaves no new folder behind.
    return output_file(output, "output", "<report>", inputs=inputs, default_name=lambda: default, create_folder=False)


def report(results, output=None, *, layers: Sequence[str] | None = None, niu: bool = True) -> Path:
    """Write the HTML report of a run file or sweep folder; returns its path (default:
    report.html inside a sweep folder, or <run>.html beside a run file)."""
    from .files import atomic_write_text, new_folder_for

    results = _check_results_path(results)
    output = _output_path(results, output, results.is_dir())
    src, figures = build_figures(results, layers)
    parts = [f"<h1>aimcemu report: {html.escape(results.name)}</h1>",
             f'<p class="note">{html.escape(os.fspath(results.resolve()))}, generated '
             f'{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC</p>']
    parts += _unfinished_note(src)
    parts.append("<h2>Accuracy vs t: mean and 95 % CI over chips</h2>")
    parts.append(_table(_accuracy_rows(src)) if src.ds.sizes["rep"] else
                 '<p class="note">This is a digital run: no noisy rounds.</p>')
    for title, png in figures.items():
        parts.append(f"<h2>{html.escape(title)}</h2>{_img(png, title)}")
    if not any(t.startswith("Activation") for t in figures):
        parts.append('<p class="note">No activations stored (run with layers="all" or name layers) '
                     "so no histograms.</p>")
    if niu:
        parts.append("<h2>NIUs and throughput (aimcemu perf, default U50 system)</h2>")
        parts.append(_niu_section(src.config))
    parts.append(f"<h2>Configuration</h2><pre>{html.escape(json.dumps(src.config, indent=1))}</pre>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>aimcemu report: '
            f'{html.escape(results.name)}</title><style>{_STYLE}</style></head><body>\n'
            + "\n".join(parts) + "\n</body></html>\n")
    with new_folder_for(output.parent, "output", "<report>"):  # taken away again if the write fails
        atomic_write_text(output, page)
    return output


def _accuracy_rows(src: _Source) -> list[dict]:
    """One row per grid point and t; an "alpha capped" column, when some alpha was capped, says
    which of the "global" rows ran with alphas the NIU held at its limit (niu.max_alpha); a
    "tied logits" column, when some round of a run file had tied logits, how much of each row's
    accuracy is tie-breaking."""
    acc = analysis.accuracy_vs_t(src.ds)
    capped = _CappedAlphas(src)
    ties = _TieBreaks(src)
    rows = []
    for point in src.points():
        sel = acc.sel(point) if point else acc
        for i, t in enumerate(acc["t"].values):
            low, high = float(sel["ci_low"][i]), float(sel["ci_high"][i])
            row = {**point, "t (s)": f"{t:g}", "mean": f"{float(sel['mean'][i]):.4f}",
                   "95 % CI": f"[{low:.4f}, {high:.4f}]" if np.isfinite(low) else "n/a (one chip)",
                   "chips": int(sel["n"][i])}
            if capped:  # the column appears only when some alpha was capped
                row["alpha capped"] = capped.note(point, float(t))
            if ties:  # the column appears only when some round had tied logits
                row["tied logits"] = ties.note(point, float(t))
            rows.append(row)
    return rows


class _TieBreaks:
    """Of a run file (analysis.prediction_ties), per table row: the share of images whose largest
    logit was shared by 2+ classes, and the accuracies every tie broken against, or for, the
    label would give, averaged over the row's rounds as its mean is (in a run every chip has
    the same rounds at each t).  A sweep's report leaves them out: they would read the logits of
    every task file, where the rest of the report reads none."""

    def __init__(self, src: _Source):
        self.src, self.ties = src, None
        if not src.is_sweep and src.run.sizes["round"]:
            ties = analysis.prediction_ties(src.path)
            if bool((ties["tied"] > 0).any()):
                self.ties = ties

    def __bool__(self) -> bool:
        return self.ties is not None

    def note(self, point: dict, t: float) -> str:
        """"1.3 % of images; any tie-break gives 0.7011-0.7133" for a row whose rounds had ties,
        else ""."""
        ties = self.ties
        rounds = (ties["t"] == t) & (ties["drift_compensation"] == _row_compensation(self.src, point))
        tied = float(ties["tied"].where(rounds).mean())
        if not tied > 0:
            return ""
        low, high = (float(ties[name].where(rounds).mean()) for name in ("accuracy_low", "accuracy_high"))
        return f"{100 * tied:.2g} % of images; any tie-break gives {low:.4f}-{high:.4f}"


class _CappedAlphas:
    """The capped drift-compensation alphas of a run (its config's drift_alpha_capped) or of a
    sweep (open_sweep's alpha_capped: alpha / limit per task, layer, chip and t), asked per table
    row.  Only rounds under "global" use alphas."""

    def __init__(self, src: _Source):
        self.src = src
        if src.is_sweep:
            self.ratio = src.ds["alpha_capped"]
            self.any = bool((self.ratio > 1).any())
        else:
            self.entries = capped_alphas(src.config, os.fspath(src.path))
            self.any = bool(self.entries)

    def __bool__(self) -> bool:
        return self.any

    def note(self, point: dict, t: float) -> str:
        """"yes: <layers> on <n> chip(s), up to <x>x the limit" for a row whose rounds ran with
        capped alphas, else ""."""
        if _row_compensation(self.src, point) != "global":
            return ""
        if self.src.is_sweep:
            here = self.ratio.sel({d: v for d, v in point.items() if d in self.ratio.dims}).sel(t=t)
            at = np.argwhere(np.asarray(here.transpose("layer", "chip").values > 1))
            layers = sorted({str(here["layer"].values[i]) for i, _ in at})
            chips = {int(c) for _, c in at}
            worst = float(np.nanmax(here.values)) if len(at) else 0.0
        else:
            found = [c for c in self.entries if np.isclose(c["t"], t, rtol=1e-12, atol=0.0)]
            layers = sorted({c["layer"] for c in found})
            chips = {c["chip"] for c in found}
            worst = max((c["alpha"] / c["limit"] for c in found), default=0.0)
        if not layers:
            return ""
        return f"yes: {', '.join(layers)} on {len(chips)} chip(s), up to {worst:.3g}x the limit"


def _row_compensation(src: _Source, point: dict) -> str:
    """The drift compensation of a table row: its label (a grid axis, or the dimension of a run or
    sweep over several), or the run's or sweep's only one."""
    if "drift_compensation" in point:
        return str(point["drift_compensation"])
    given = src.config.get("drift_compensation", "none")
    return given if isinstance(given, str) else given[0]


def save_pngs(results, folder, layers: Sequence[str] | None = None) -> list[Path]:
    """The report's figures as PNG files in `folder`."""
    from .files import atomic_write_bytes, new_folder_for, output_file

    results = _check_results_path(results)
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        from .validate import fail

        raise fail("<report>", "png", f"{folder} exists and is not a folder")
    _, figures = build_figures(results, layers)
    paths = []
    with new_folder_for(folder, "png", "<report>"):  # taken away again if the first write fails
        for title, png in figures.items():
            name = "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_") + ".png"
            path = output_file(folder / name, "png", "<report>", inputs=[("results file", results)])
            atomic_write_bytes(path, png)
            paths.append(path)
    return paths
