"""Throughput and latency of a network on the accelerator model (``aimcemu perf``).

Wraps the C++ timing model (``aimcemu._core.timing``): per-layer PU timing, the two-phase weight
scheduler and the system model with NIUs.  ``perf()`` returns a :class:`PerfResult` that prints a
per-layer table and a Table-I-style summary, writes CSV/JSON, and plots the paper's Fig. 5
(per-layer latency, scheduler time and memory ratios).

Example::

    from aimcemu.perf import perf
    r = perf("resnet50")                       # U50: 5 PU2x + 5 PU1x, frame-parallel
    print(r.summary()["fps"])                  # ~590 FPS (paper: 584.92)
    r = perf("resnet50", aimc_layers="all", niu=2)
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import _core
from ._optional import require
from .config import aimc_layer_names

_t = _core.timing

# The paper's measured figures (Table I, its footnote, Sec. V).
PAPER = {
    "resnet18": {"fps": 1237.72, "fps_fpga_im2col": 767.9},
    "resnet50": {"fps": 584.92, "fps_fpga_im2col": 453.7, "latency_ms": {"PU1x": 25.3, "PU2x": 12.9}},
}
U50_PUS = "5xPU2x+5xPU1x"


@dataclass
class PerfOptions:
    """Everything that defines one timing study (stored with the results)."""

    model: str = "resnet50"
    pus: str = U50_PUS
    mode: str = "frame-parallel"            # or "layer-pipelined"
    first_layer: str = "host"               # host IM2COL (padded to 160 B) or "fpga"
    avg_pool: str = "block-diagonal"        # or "dense"
    scheduler: str = "adaptive"             # baseline, adaptive, double-buffer, in-order-prefetch
    aimc_layers: str | list[str] | None = None   # None / "all" / layer names
    niu: int = 0
    niu_sharing: str = "shared"             # or "per-pu"
    niu_lanes: int = 32                     # lanes of the NIU RTL; its rate is the co-simulated weights/cycle
    niu_channel_efficiency: float | None = None   # None: the HBM's sustained share (Shuhai)
    timing_model: str = "full"              # or "roofline": SA cycles only (no fill, data movement, stalls)
    # Layers whose results pass the analog tile peripherals (docs/peripherals.md): None, "aimc"
    # (the AIMC layers; an error when there are none), "all" or layer names.  The block takes R_g
    # results per cycle (no stall) and adds its pipeline depth to each such layer's fill.
    peripherals: str | list[str] | None = None
    extra: dict = field(default_factory=dict)


def resolve_network(model):
    """A Network object, a zoo name (``aimcemu models``), or a model file path."""
    if not isinstance(model, str):
        return model
    if model in _core.zoo.names() or model == "resnet50v1":
        return _core.zoo.by_name(model)
    if os.path.isfile(model):
        return _core.load_model(model)
    raise _core.FormatError(f"<perf>: field 'model': '{model}' is neither a zoo network "
                            f"({', '.join(_core.zoo.names())}) nor a model file")


def aimc_mask(net, spec) -> list[bool]:
    """Per-layer AIMC flags from None/'none', 'all' (every conv and FC layer) or layer names."""
    gemm = [l.kind in (_core.LayerKind.conv, _core.LayerKind.linear) for l in net.layers]
    if spec is None or spec == "" or spec == "none":
        return [False] * len(net.layers)
    if spec == "all":
        return gemm
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    mask = [False] * len(net.layers)
    for name in (n.strip() for n in names):
        index = net.find_layer(name)
        if index < 0:
            raise _core.FormatError(f"<perf>: field 'aimc_layers': no layer named '{name}' in {net.name}")
        if not gemm[index]:
            raise _core.FormatError(f"<perf>: field 'aimc_layers': layer '{name}' is not a conv or FC layer")
        mask[index] = True
    return mask


def peripheral_mask(net, spec, aimc: list[bool]) -> list[bool]:
    """Per-layer peripherals flags from None, "aimc" (the AIMC layers), "all" or layer names."""
    if spec is None or spec == "none":
        return [False] * len(net.layers)
    if spec == "aimc":
        return list(aimc)
    try:
        return aimc_mask(net, spec)
    except _core.FormatError as exc:
        raise _core.FormatError(str(exc).replace("'aimc_layers'", "'peripherals'")) from None


def _timing_options(opts: PerfOptions, peripherals: list[bool] | None = None):
    t = _t.TimingOptions()
    if peripherals is not None and any(peripherals):
        constants = _core.niu.constants()
        t.peripherals = list(peripherals)
        t.periph_lanes = int(constants["NIU_PERIPH_LANES"])
        t.periph_latency = int(constants["NIU_PERIPH_PIPE_STAGES"])
    choices = {"host": _t.FirstLayerIm2col.host, "fpga": _t.FirstLayerIm2col.fpga}
    if opts.first_layer not in choices:
        raise _core.FormatError(f"<perf>: field 'first_layer': '{opts.first_layer}' (known: host, fpga)")
    t.first_layer = choices[opts.first_layer]
    pools = {"block-diagonal": _t.AvgPoolMapping.block_diagonal, "dense": _t.AvgPoolMapping.dense}
    if opts.avg_pool not in pools:
        raise _core.FormatError(f"<perf>: field 'avg_pool': '{opts.avg_pool}' (known: block-diagonal, dense)")
    t.avg_pool = pools[opts.avg_pool]
    models = {"full": _t.TimingModel.full, "roofline": _t.TimingModel.roofline}
    if opts.timing_model not in models:
        raise _core.FormatError(f"<perf>: field 'timing_model': '{opts.timing_model}' (known: full, roofline)")
    t.model = models[opts.timing_model]
    return t


def build_system(opts: PerfOptions, peripherals: list[bool] | None = None):
    cfg = _t.SystemConfig()
    cfg.pus = _t.parse_pu_mix(opts.pus, "<perf>")
    cfg.timing = _timing_options(opts, peripherals)
    cfg.policy = _t.schedule_policy_from_string(opts.scheduler, "<perf>")
    cfg.mode = _t.multi_pu_mode_from_string(opts.mode, "<perf>")
    cfg.niu_count = int(opts.niu)
    cfg.niu_sharing = _t.niu_sharing_from_string(opts.niu_sharing, "<perf>")
    niu = niu_config(opts)
    if opts.niu_channel_efficiency is not None:
        niu.channel_efficiency = float(opts.niu_channel_efficiency)
    cfg.niu = _t.niu_throughput(niu)
    return cfg


class PerfResult:
    """One study: the system report plus each PU type's per-layer timing and schedule."""

    def __init__(self, net, options: PerfOptions, config, report, runs: dict, aimc: list[bool]):
        self.net, self.options, self.config, self.report, self.runs, self.aimc = net, options, config, report, runs, aimc

    # ---- tables -------------------------------------------------------------------------
    def layer_rows(self) -> list[dict]:
        """One row per timed layer and PU type: where its time goes (SA cycles, fill/drain, waves a
        data-movement stage made longer, weight-load stall from the schedule) and its efficiency."""
        rows = []
        for pu_name, run in self.runs.items():
            stall_by_layer: dict[str, float] = {}
            for tile, sched in zip(run.problem.tiles, run.schedule.tiles):
                layer = tile.label.rsplit("#", 1)[0]
                stall_by_layer[layer] = stall_by_layer.get(layer, 0.0) + sched.stall
            f = run.timing.pu.fast_hz
            mine = set(run.layers)
            for lt in run.timing.layers:
                if not lt.timed or lt.layer not in mine:
                    continue
                stall = stall_by_layer.get(lt.name, 0.0)
                rows.append({
                    "pu": pu_name, "layer": lt.name, "kind": str(lt.kind).split(".")[-1],
                    "n": lt.n, "m": lt.m_eff, "p": lt.p, "tiles": lt.tiles,
                    "sa_cycles": lt.sa_cycles, "fill_cycles": lt.fill_cycles,
                    "adm_bound_cycles": round(lt.adm_bound_cycles), "stall_cycles": round(stall * f),
                    "cycles": round(lt.cycles + stall * f), "latency_us": (lt.time_s + stall) * 1e6,
                    "efficiency": lt.macs / ((lt.cycles + stall * f) * self._macs_per_cycle(pu_name)),
                    "bound": lt.bound, "aimc": bool(self.aimc[lt.layer]), "peripherals": bool(lt.peripherals),
                    "periph_stall_cycles": round(lt.periph_stall_cycles),
                })
        return rows

    def time_breakdown(self) -> dict:
        """Per PU run: the ideal latency (SA cycles only) and what the model adds to it -- fill and
        drain, waves a data-movement stage (ADM, HBM channel, WRB) made longer, weight-load stall --
        in ms, with the weights port's sustained rate and the three rates it is the smallest of."""
        out = {}
        for key, run in self.runs.items():
            pu, f = run.timing.pu, run.timing.pu.fast_hz
            layers = [run.timing.layers[i] for i in run.layers if run.timing.layers[i].timed]
            ideal = sum(lt.sa_cycles for lt in layers) / f
            fill = sum(lt.fill_cycles for lt in layers) / f
            adm = sum(lt.adm_bound_cycles for lt in layers) / f
            out[key] = {
                "ideal_ms": ideal * 1e3, "fill_ms": fill * 1e3, "adm_bound_ms": adm * 1e3,
                "stall_ms": max(0.0, run.latency_s - run.compute_s) * 1e3, "latency_ms": run.latency_s * 1e3,
                "weight_port_gbps": pu.weight_port_bytes_per_s / 1e9, "axi_port_gbps": pu.port_bytes_per_s / 1e9,
                "uram_write_gbps": pu.uram_write_bytes_per_s / 1e9, "hbm_channel_gbps": pu.hbm_channel_bytes_per_s / 1e9,
            }
        return out

    def pu_mix(self) -> str:
        """The PUs the system runs, as --pus writes them ("5xPU2x+3xPU1x"): the requested mix less
        the slots NIUs took (the C++ system model chooses which)."""
        counts: dict[str, int] = {}
        for p in self.report.pus:
            name = self.config.pus[p.slot].name
            counts[name] = counts.get(name, 0) + 1
        return "+".join(f"{count}x{name}" for name, count in counts.items())

    def _macs_per_cycle(self, pu_name: str) -> float:
        pu = next(p for p in self.config.pus if p.name == pu_name.split("@")[0])
        return pu.r_sa * pu.c_sa

    def summary(self) -> dict:
        r = self.report
        tops = r.peak_ops / 1e12
        out = {
            # the PUs the system runs (NIUs may have taken slots), and the mix asked for
            "model": self.net.name, "pus": self.pu_mix(), "pus_requested": self.options.pus,
            "mode": self.options.mode,
            "first_layer": self.options.first_layer, "scheduler": self.options.scheduler,
            "aimc_layers": sum(self.aimc), "niu": len(r.nius), "niu_sharing": self.options.niu_sharing,
            "fps": r.fps, "latency_ms": r.latency_s * 1e3, "efficiency": r.efficiency, "peak_tops": tops,
            "fps_per_tops": r.fps / tops if tops else 0.0, "bottleneck": r.bottleneck,
            "max_hbm_channel_use": r.max_channel_use, "hbm_channels": r.channels_used,
            "aimc_weights": r.aimc_weights,
            "timing_model": self.options.timing_model,
            "pu_latency_ms": {}, "pu_stall_ms": {}, "pu_baseline_stall_ms": {},
            "time_breakdown": self.time_breakdown(),
        }
        if r.nius:
            out.update(niu_summary(self))
        for p in r.pus:
            key = p.pu if self.options.mode == "frame-parallel" else f"stage{p.slot}:{p.pu}"
            out["pu_latency_ms"][key] = p.latency_s * 1e3
            out["pu_stall_ms"][key] = p.stall_s * 1e3
            out["pu_baseline_stall_ms"][key] = p.baseline_stall_s * 1e3
        paper = PAPER.get(self.net.name, {})
        # The paper's figures are for its ten PUs: not for a system whose NIUs took PU slots.
        if (self.options.pus == U50_PUS and not r.nius and self.options.mode == "frame-parallel"
                and not any(self.aimc) and self.options.timing_model == "full"):
            key = "fps" if self.options.first_layer == "host" else "fps_fpga_im2col"
            if key in paper:
                out["paper_fps"] = paper[key]
                out["fps_error"] = r.fps / paper[key] - 1
            if self.options.first_layer == "host" and "latency_ms" in paper:
                out["paper_latency_ms"] = paper["latency_ms"]
        return out

    def table_one(self) -> str:
        """Table-I-style text summary."""
        s = self.summary()
        lines = [f"{'model':<14}{'PUs':<16}{'mode':<17}{'FPS':>9}{'paper':>9}{'error':>8}"
                 f"{'eff':>8}{'FPS/TOPS':>10}  latency per PU",
                 f"{s['model']:<14}{s['pus']:<16}{s['mode']:<17}{s['fps']:>9.2f}"
                 + (f"{s['paper_fps']:>9.2f}{100 * s['fps_error']:>+7.2f}%" if "paper_fps" in s else f"{'-':>9}{'-':>8}")
                 + f"{100 * s['efficiency']:>7.1f}%{s['fps_per_tops']:>10.1f}  "
                 + ", ".join(f"{k} {v:.2f} ms" for k, v in s["pu_latency_ms"].items())]
        if "paper_latency_ms" in s:
            lines.append("paper latency: " + ", ".join(
                f"{k} {v} ms (model {s['pu_latency_ms'].get(k, float('nan')):.2f}, "
                f"{100 * (s['pu_latency_ms'].get(k, float('nan')) / v - 1):+.2f}%)"
                for k, v in s["paper_latency_ms"].items()))
        lines.append(f"stalls (baseline -> {self.options.scheduler}): " + ", ".join(
            f"{k} {s['pu_baseline_stall_ms'][k]:.3f} -> {v:.3f} ms" for k, v in s["pu_stall_ms"].items()))
        lines.extend(self._gap_lines(s))
        if s["niu"]:
            lines.append(f"NIUs: {s['niu']} ({s['niu_sharing']}) in place of PUs, {len(self.report.pus)} PUs "
                         f"left ({s['pus']} of {s['pus_requested']}), {s['aimc_layers']} AIMC layers, "
                         f"{s['aimc_weights']} weights per copy, bottleneck: {s['bottleneck']}; utilisation "
                         + ", ".join(f"{n.utilization:.2f}" for n in self.report.nius))
        lines.append(f"HBM: {s['hbm_channels']} channels, busiest at {100 * s['max_hbm_channel_use']:.1f}%")
        if s["niu"]:
            lines.append(niu_resource_table(self))
        return "\n".join(lines)

    def _gap_lines(self, s: dict) -> list[str]:
        """Why each PU run is slower than its ideal (SA cycles only), and the paper's figure."""
        lines = []
        paper = s.get("paper_latency_ms", {})
        for key, b in s["time_breakdown"].items():
            pu = key.split("@")[0]
            line = (f"{key}: ideal {b['ideal_ms']:.3f} ms + fill/drain {b['fill_ms']:.3f} + ADM/HBM-bound "
                    f"{b['adm_bound_ms']:.3f} + weight stall {b['stall_ms']:.3f} = {b['latency_ms']:.3f} ms")
            if pu in paper:
                line += f" (paper {paper[pu]} ms, {100 * (b['latency_ms'] / paper[pu] - 1):+.2f}%)"
            lines.append(line)
            lines.append(f"  weights port {b['weight_port_gbps']:.2f} GB/s = min(AXI {b['axi_port_gbps']:.2f}, "
                         f"URAM writes {b['uram_write_gbps']:.2f}, HBM channel {b['hbm_channel_gbps']:.2f})")
        return lines

    def layer_table(self) -> str:
        """Per layer: SA cycles, fill/drain, ADM/HBM-bound cycles, weight-load stall, their sum."""
        cols = [("pu", "pu", 6, "s"), ("layer", "layer", 22, "s"), ("n", "n", 5, "d"), ("m", "m", 6, "d"),
                ("p", "p", 6, "d"), ("tiles", "tiles", 5, "d"), ("sa_cycles", "sa", 9, "d"),
                ("fill_cycles", "fill", 5, "d"), ("adm_bound_cycles", "adm", 7, "d"), ("stall_cycles", "stall", 7, "d"),
                ("cycles", "cycles", 9, "d"), ("latency_us", "latency_us", 10, ".1f"), ("efficiency", "eff", 6, ".3f"),
                ("bound", "bound", 8, "s")]
        head = " ".join(f"{h:>{w}}" if t != "s" else f"{h:<{w}}" for _, h, w, t in cols)
        lines = [head]
        for row in self.layer_rows():
            lines.append(" ".join(f"{row[c]:>{w}{t}}" if t != "s" else f"{str(row[c]):<{w}}" for c, _, w, t in cols))
        return "\n".join(lines)

    # ---- files --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        r = self.report
        return {
            "options": asdict(self.options),
            "summary": self.summary(),
            "layers": self.layer_rows(),
            "pus": [{"slot": p.slot, "pu": p.pu, "latency_ms": p.latency_s * 1e3, "fps": p.fps,
                     "stall_ms": p.stall_s * 1e3, "baseline_stall_ms": p.baseline_stall_s * 1e3,
                     "lower_bound_stall_ms": p.lower_bound_stall_s * 1e3, "niu": p.niu,
                     "layers": list(p.layers) if self.options.mode == "layer-pipelined" else "all",
                     "weight_channel_use": p.weight_channel_use,
                     "activation_channel_use": p.activation_channel_use,
                     "residual_channel_use": p.residual_channel_use} for p in r.pus],
            "nius": [{"slot": n.slot, "pus": list(n.pus), "utilization": n.utilization,
                      "channel_use": n.channel_use} for n in r.nius],
        }

    def to_json(self, path) -> None:
        from .files import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, default=json_default) + "\n")

    def to_csv(self, path) -> None:
        import io

        from .files import atomic_write_text

        rows = self.layer_rows()
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0].keys()) if rows else ["layer"])
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(path, buffer.getvalue())

    def plot(self, directory) -> list[Path]:
        """Fig. 5(a) per-layer latency per PU type; Fig. 5(b)/(c) scheduler time and memory ratios."""
        return _plot_all(self, Path(directory))


def _schedule_run(result: PerfResult):
    """The run whose schedule Fig. 5(b)/(c) show: PU2x if present (as in the paper), else the first."""
    for name, run in result.runs.items():
        if name.startswith("PU2x"):
            return name, run
    return next(iter(result.runs.items()))


def _save_png(fig, path: Path) -> None:
    """A figure as a PNG file, written atomically (aimcemu.files)."""
    import io

    from .files import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    atomic_write_bytes(path, buffer.getvalue())


def _plot_all(result: PerfResult, directory: Path) -> list[Path]:
    matplotlib = require("matplotlib", "aimcemu perf plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if directory.exists() and not directory.is_dir():
        raise _core.FormatError(f"<perf>: field 'plot': {directory} exists and is not a folder")
    from .files import new_folder_for

    with new_folder_for(directory, "plot", "<perf>"):  # taken away again if the first figure cannot be written
        return _draw_figures(result, directory, plt)


def _draw_figures(result: PerfResult, directory: Path, plt) -> list[Path]:
    """Fig. 5(a), (b) and (c) as PNG files in `directory`."""
    files = []
    name = result.net.name

    # Fig. 5(a): per-layer latency on each PU type.
    rows = result.layer_rows()
    fig, ax = plt.subplots(figsize=(12, 4))
    pus = list(dict.fromkeys(r["pu"] for r in rows))
    width = 0.8 / max(1, len(pus))
    for k, pu in enumerate(pus):
        mine = [r for r in rows if r["pu"] == pu]
        ax.bar([i + k * width for i in range(len(mine))], [r["latency_us"] / 1e3 for r in mine], width, label=pu)
    ax.set_xlabel("layer index")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{name}: per-layer latency (model, incl. weight stalls)")
    ax.legend()
    fig.tight_layout()
    files.append(directory / f"{name}_layer_latency.png")
    _save_png(fig, files[-1])
    plt.close(fig)

    # Fig. 5(b)/(c): per-tile time and memory ratios of the chosen PU's schedule.
    pu, run = _schedule_run(result)
    base, adapt = run.baseline.tiles, run.schedule.tiles
    n = len(base)
    relocated = [adapt[(i + 1) % n].lead > 1 for i in range(n)]
    stalled = [base[(i + 1) % n].stall > 0 for i in range(n)]
    ratios = [min(t.time_ratio, 1e4) for t in base]
    colors = ["tab:blue" if r else ("tab:red" if s else "tab:gray") for r, s in zip(relocated, stalled)]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.bar(range(n), ratios, color=colors, width=1.0)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("tile index i")
    ax.set_ylabel("e_i / l_(i+1)")
    ax.set_title(f"{name} on {pu}: time ratios (blue: next load relocated by the adaptive phase, "
                 f"red: still stalled)")
    fig.tight_layout()
    files.append(directory / f"{name}_{pu}_time_ratio.png")
    _save_png(fig, files[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(range(n), [t.memory_ratio for t in base], lw=0.8, label="(m_i + m_(i+1)) / capacity")
    ax.plot(range(n), [t.occupancy for t in adapt], lw=0.8, label=f"{result.options.scheduler}: occupancy at load")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("tile index i")
    ax.set_ylabel("URAM ratio")
    ax.set_title(f"{name} on {pu}: memory ratios (<= 1: the schedule fits)")
    ax.legend()
    fig.tight_layout()
    files.append(directory / f"{name}_{pu}_memory_ratio.png")
    _save_png(fig, files[-1])
    plt.close(fig)
    return files


def json_default(value):
    """json.dump's fallback for a result: non-finite floats as null, anything else as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def perf(model="resnet50", *, mapping=None, **options) -> PerfResult:
    """Time `model` on the system described by the options (see :class:`PerfOptions`).

    mapping: the AIMC layers as a run's mapping gives them ("all", a dict, a Mapping or a YAML
    mapping file; aimcemu.config resolves it on the network), instead of aimc_layers."""
    unknown = set(options) - set(PerfOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"perf() got unknown options: {sorted(unknown)}")
    if mapping is not None:
        if options.get("aimc_layers") is not None:
            raise _core.FormatError("<perf>: field 'mapping': give the AIMC layers as a mapping or as aimc_layers, "
                                    "not both")
        options["aimc_layers"] = aimc_layer_names(resolve_network(model), mapping, source="<perf>")
    opts = PerfOptions(model=model if isinstance(model, str) else getattr(model, "name", "network"), **options)
    net = resolve_network(model)
    aimc = aimc_mask(net, opts.aimc_layers)
    if opts.peripherals == "aimc" and not any(aimc):
        # Would time nothing extra without a word.  Not "all AIMC" as peripherals alone imply in a
        # run: AIMC layers need NIUs here, which only the caller can size.
        raise _core.FormatError("<perf>: field 'peripherals': 'aimc' selects the AIMC layers, and no layer is on "
                                "AIMC: give them (--aimc-layers or --mapping with --niu; in Python aimc_layers or "
                                "mapping with niu), or name the layers ('all')")
    cfg = build_system(opts, peripheral_mask(net, opts.peripherals, aimc))
    report = _t.evaluate_system(net, cfg, aimc)
    runs = {}
    if opts.mode == "frame-parallel":
        present = {cfg.pus[p.slot].name: cfg.pus[p.slot] for p in report.pus}
        for name, pu in present.items():
            runs[name] = _t.run_pu(net, pu, cfg.timing, cfg.policy, [], aimc, False)
    else:
        for p in report.pus:
            pu = cfg.pus[p.slot]
            runs[f"{pu.name}@{p.slot}"] = _t.run_pu(net, pu, cfg.timing, cfg.policy, list(p.layers), aimc, True)
    return PerfResult(net, opts, cfg, report, runs, aimc)


# ---- NIU cost (docs/niu_rtl.md): the RTL's measured rate and resources, the XCU50 fit -------------

def niu_config(opts: PerfOptions):
    """The NIU's timing config for the RTL built with ``opts.niu_lanes`` lanes (a FormatError names
    ``niu_lanes`` for a lane count the RTL was not synthesized and co-simulated for)."""
    lanes = opts.niu_lanes
    if isinstance(lanes, bool) or not isinstance(lanes, int) and not (isinstance(lanes, float) and lanes.is_integer()):
        raise _core.FormatError(f"<perf>: field 'niu_lanes': expected a lane count (an integer), got {lanes!r}")
    return _core.niu.config_for_lanes(int(lanes), "<perf>")


def niu_fit(result: PerfResult) -> dict:
    """PUs left in the slots, the NIUs, and the shell against the XCU50 (LUT, DSP, BRAM36, URAM)."""
    counts = {"PU2x": 0, "PU1x": 0}
    for p in result.report.pus:  # the PUs of PerfResult.pu_mix
        name = result.config.pus[p.slot].name
        counts[name] = counts.get(name, 0) + 1
    return _core.niu.fit_on_xcu50(counts["PU2x"], counts["PU1x"], len(result.report.nius),
                                  int(result.options.niu_lanes), "<perf>")


def niu_summary(result: PerfResult) -> dict:
    synthesis = next(s for s in _core.niu.syntheses() if s["lanes"] == int(result.options.niu_lanes))
    fit = niu_fit(result)
    return {"niu_lanes": int(result.options.niu_lanes), "niu_weights_per_cycle": synthesis["weights_per_cycle"],
            "niu_resources": {k: synthesis[k] for k in ("LUT", "FF", "DSP", "BRAM36", "URAM")},
            "fits_xcu50": fit["fits"], "xcu50_limiting": fit["limiting"],
            "xcu50_limiting_fraction": fit["limiting_fraction"]}


def niu_resource_table(result: PerfResult) -> str:
    """Each block's LUT/FF/DSP/BRAM36/URAM beside the PUs', their sum with the shell, and the XCU50."""
    fit = niu_fit(result)

    def cell(value, width):
        return f"{'-':>{width}}" if value is None else f"{value:>{width},.0f}"

    lines = [f"{'resources (each)':<26}{'count':>6}{'LUT':>10}{'FF':>10}{'DSP':>8}{'BRAM36':>8}{'URAM':>6}"]
    for row in fit["rows"] + [dict(fit["shell"], count=1), dict(fit["total"], count=None), dict(fit["device"], count=None)]:
        count = "" if row["count"] is None else str(row["count"])
        lines.append(f"{row['name']:<26}{count:>6}{cell(row['LUT'], 10)}{cell(row['FF'], 10)}{cell(row['DSP'], 8)}"
                     f"{row['BRAM36']:>8.1f}{row['URAM']:>6.0f}")
    verdict = "fits" if fit["fits"] else "does NOT fit"
    lines.append(f"the configuration {verdict} the XCU50 ({fit['limiting']} at {100 * fit['limiting_fraction']:.1f}%; "
                 "per-block figures: PUs from the paper, the NIU from Yosys, docs/niu_rtl.md)")
    return "\n".join(lines)

