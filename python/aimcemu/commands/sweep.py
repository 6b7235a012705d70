"""``aimcemu sweep``: run or resume a noise sweep described in YAML (docs/sweeps.md).

Locally on a process pool by default, or on a Dask cluster with --scheduler.  Ctrl-C (SIGINT) or
SIGTERM, to the command or to its whole process group, stops it cleanly at any moment: tasks
already running finish, nothing else starts, and the same command later runs only what is left.
Exit status 130 when interrupted; 2 when a task failed, a worker process died (killed, e.g. by
the out-of-memory killer) or a Dask cluster lost the tasks (its scheduler gone, KilledWorker),
after the running tasks have finished, and when the sweep ended with task files missing."""
from __future__ import annotations

import argparse
import sys

HELP = "run or resume a noise sweep (grid x chips x t) from a YAML config, locally or on Dask"
INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", required=True, help="sweep YAML file (see docs/sweeps.md)")
    parser.add_argument("--output", "-o", default=None, help="sweep folder (overrides 'output' in the config)")
    parser.add_argument("--scheduler", default=None,
                        help="Dask scheduler address, e.g. tcp://host:8786 (default: a local process pool)")
    parser.add_argument("--workers", type=int, default=None,
                        help="local pool size (default: all cores, at most one per task)")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="if another sweep is running in the same folder, wait up to this long for it "
                             "(a finite number >= 0; default: refuse at once)")
    parser.add_argument("--check", action="store_true", help="validate the config and list the tasks, run nothing")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    import importlib

    sweep_module = importlib.import_module("aimcemu.sweeps")

    from ..executors import check_executor
    from ..validate import text, workers

    if args.workers is not None:
        workers(args.workers, "workers", "--workers")
    wait_s = sweep_module.validate_wait(args.wait, "wait", "--wait")
    check_executor(args.scheduler, "--scheduler", "scheduler")
    config = sweep_module.load_config(args.config, "--config")
    output_source = "--output" if args.output is not None else "<sweep>"  # <sweep>: the config file, below
    if args.output is not None:  # before planning: a folder that cannot be made is the flag's fault
        sweep_module.check_output_folder(text(args.output, "output", output_source), output_source)
    with sweep_module.errors_named_after(args.config):
        if args.check:
            plan = sweep_module.plan(config, args.output)
            sweep_module.check_output_folder(plan.folder, output_source)  # creating nothing
            print(format_plan(plan))
            return 0
        # A lost Dask cluster (ClusterLostError) and a dead worker (WorkerDiedError) are worded by
        # aimcemu.cli, as every command's errors: what was kept, what to do, exit status 2.
        result = sweep_module.sweep(config, args.output, executor=args.scheduler, workers=args.workers,
                                    progress=not args.no_progress, wait_s=wait_s)
    if result.interrupted:
        print(interrupted_message(result), file=sys.stderr)
        return INTERRUPTED
    if not result.complete:  # no task failed, yet some file is missing: never call that complete
        print(f"aimcemu sweep: error: {incomplete_message(result)}", file=sys.stderr)
        return 2
    print(f"sweep complete: {result.total} tasks ({result.ran} run now, {result.skipped} already done) "
          f"in {result.folder}")
    print(format_accuracy(result.folder))
    return 0


LISTED_TASKS = 20  # --check lists this many tasks, then counts the rest (a grid may have 100 000)


def format_plan(plan) -> str:
    """What --check prints: the task count, the axes, and the first tasks (file, grid point)."""
    lines = [f"{len(plan.tasks)} tasks in {plan.folder}; axes: "
             + (", ".join(f"{k} ({len(v)})" for k, v in plan.axes.items()) or "none")]
    for task in plan.tasks[:LISTED_TASKS]:
        point = ", ".join(f"{axis}={label}" for axis, label in task.point.items()) or "(the single point)"
        lines.append(f"  {task.file}  {point}")
    if len(plan.tasks) > LISTED_TASKS:
        lines.append(f"  ... and {len(plan.tasks) - LISTED_TASKS} more")
    return "\n".join(lines)


def interrupted_message(result) -> str:
    """What an interrupted sweep leaves, as it is: all tasks may have finished before the signal."""
    if result.complete:
        return (f"interrupted after every task had finished: all {result.total} tasks are done in "
                f"{result.folder} ({result.ran} in this call); `aimcemu report {result.folder}` shows them")
    return (f"interrupted: {result.done} of {result.total} tasks done ({result.ran} in this call); "
            "rerun the same command to finish")


def incomplete_message(result) -> str:
    """A sweep that ended without an error or a signal but with task files missing."""
    return (f"{result.folder}: the sweep ended with {result.done} of {result.total} tasks done "
            f"({result.ran} in this call) and no error reported; rerun the same command to run the rest")


def format_accuracy(folder) -> str:
    """Accuracy vs t per grid point: mean and 95 % CI over chips, and an "alpha capped" column
    (when some alpha was) marking the "global" rows whose rounds ran with drift-compensation alphas
    the NIU held at its limit.  Without the analysis extra
    (xarray, scipy: the core install runs sweeps too) the mean, std and chip count from the
    index, and a line saying what gives the intervals."""
    from .._optional import MissingExtraError

    try:
        return _format_accuracy_with_intervals(folder)
    except MissingExtraError as exc:
        return (f"{_format_accuracy_from_index(folder)}\n(95 % intervals and `aimcemu report`: {exc})")


def _format_accuracy_with_intervals(folder) -> str:
    from ..analysis import accuracy_vs_t, format_table, open_sweep

    ds = open_sweep(folder, lazy=False)
    acc = accuracy_vs_t(ds)
    grid_dims = [d for d in acc["mean"].dims if d != "t"]
    capped = ds["alpha_capped"] > 1  # [<grid axes>, layer, chip, t]
    rows = []
    for point in acc["mean"].stack(point=grid_dims).transpose("point", "t") if grid_dims else [acc["mean"]]:
        labels = {d: point[d].item() for d in grid_dims}
        for t in acc["t"].values:
            sel = {**labels, "t": t}
            chips = int(acc["n"].sel(sel))
            # One chip has no spread between chips: "n/a", as the run summary and the report print it.
            interval = (f"[{float(acc['ci_low'].sel(sel)):.4f}, {float(acc['ci_high'].sel(sel)):.4f}]"
                        if chips > 1 else "n/a")
            ran_capped = _compensation_of(labels, ds.attrs["config"]) == "global" and bool(
                capped.sel({d: v for d, v in sel.items() if d in capped.dims}).any())
            rows.append({**labels, **_time_cells(t), "mean": float(acc["mean"].sel(sel)), "ci95": interval,
                         "chips": chips, "alpha capped": "yes" if ran_capped else ""})
    return format_table(rows, [*grid_dims, "t", "seconds", "mean", "ci95", "chips",
                               *(["alpha capped"] if any(row["alpha capped"] for row in rows) else [])])


def _time_cells(t) -> dict:
    """A row's time as the run summary prints it: readable (1d, 1y) and in seconds (86400)."""
    from ..config import format_time

    return {"t": format_time(float(t)), "seconds": f"{float(t):.6g}"}


def _compensation_of(labels: dict, config: dict) -> str:
    """A row's drift compensation: its label (a grid axis, or the tasks' list), or the sweep's only one."""
    if "drift_compensation" in labels:
        return str(labels["drift_compensation"])
    given = config.get("drift_compensation", "none")
    return given if isinstance(given, str) else given[0]


def _format_accuracy_from_index(folder) -> str:
    """The same rows as with the analysis extra, from the task summaries in index.json with NumPy
    alone: each chip's accuracy averaged over its rounds, then mean and std (ddof=1) over chips."""
    import numpy as np

    from ..analysis import format_table
    from ..results import read_index

    index = read_index(folder)
    axes = list(index["axes"])
    tasks = [task for task in index["tasks"] if task.get("summary")]
    several = len({c for task in tasks for c in task["summary"]["drift_compensation"]}) > 1
    columns = [*axes, *(["drift_compensation"] if several else []), "t", "seconds", "mean", "std", "chips"]
    rows = []
    for task in tasks:
        summary = task["summary"]
        per_chip: dict = {}
        for acc, chip, t, name in zip(summary["accuracy"], summary["chip"], summary["t"],
                                      summary["drift_compensation"]):
            per_chip.setdefault((name, t), {}).setdefault(chip, []).append(acc)
        # An index written before the summaries kept capped alphas has none to show.
        capped_times = {c["t"] for c in summary.get("drift_alpha_capped", [])}
        for (name, t), chips in per_chip.items():
            means = np.array([np.mean(rounds) for rounds in chips.values()])
            rows.append({**task["point"], **({"drift_compensation": name} if several else {}), **_time_cells(t),
                         "mean": float(means.mean()), "std": float(means.std(ddof=1)) if len(means) > 1 else "n/a",
                         "chips": len(means), "alpha capped": "yes" if name == "global" and t in capped_times else ""})
    return format_table(rows, columns + (["alpha capped"] if any(row["alpha capped"] for row in rows) else []))
