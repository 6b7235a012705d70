"""A results file's config says how the run was made (docs/hdf5_layout.md, "config"):

- threads as requested (0 = all cores, so that rerunning the config behaves the same) and
  threads_used, the count the PU, NIU and noise models were given, for a run and a sweep's task;
- layers in one form for one selection, whether it came from the command line, a Python list or
  a sweep option;
- files written before threads_used existed, with layers as the command line's string, still
  read in every reader, and a sweep folder of such task files resumes without rerunning them."""
from __future__ import annotations

import importlib.util
import json
import os

import h5py
import pytest

import aimcemu
from aimcemu import analysis, cli, executors, reference, rounds, runner
from hostile import tiny_files

NOISY = dict(mapping="all", noise={"model": "pcm_like"}, t=[0.0, 3600.0], chips=2)


def stored_config(path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["config"])


@pytest.fixture
def tiny(tmp_path):
    """(model, data) of the tiny conv -> pool -> fc network, 12 images."""
    return tiny_files(tmp_path / "inputs")


@pytest.fixture
def threads_given(monkeypatch):
    """Every thread count the run hands the core (the reference pass, the NIU, the noisy passes)."""
    given = []
    compute, run_network, write_round = reference.compute_reference, rounds.run_network, rounds.NoisyWeights.write_round

    def spy_compute(net, images, layers, backend, threads):
        given.append(threads)
        return compute(net, images, layers, backend, threads)

    def spy_run_network(net, images, backend, threads, *args, **kwargs):
        given.append(threads)
        return run_network(net, images, backend, threads, *args, **kwargs)

    def spy_write_round(self, *args, **kwargs):
        given.append(self.threads)
        return write_round(self, *args, **kwargs)

    monkeypatch.setattr(runner, "compute_reference", spy_compute)
    monkeypatch.setattr(rounds, "run_network", spy_run_network)
    monkeypatch.setattr(rounds.NoisyWeights, "write_round", spy_write_round)
    return given


@pytest.mark.parametrize("threads, used", [(0, len(os.sched_getaffinity(0))), (1, 1), (3, 3)])
def test_a_run_stores_threads_as_requested_and_the_count_it_ran(tiny, tmp_path, threads_given, threads, used):
    """threads=0 stores 0 and threads_used = the CPUs this process may run on (its affinity mask,
    what the core's resolve_threads reads 0 as); an explicit count is stored as itself twice.
    The core is handed that very count everywhere."""
    model, data = tiny
    out = tmp_path / "run.h5"
    aimcemu.run(model, data, out, threads=threads, **NOISY)
    config = stored_config(out)
    assert (config["threads"], config["threads_used"]) == (threads, used)
    assert type(config["threads_used"]) is int and config["threads_used"] >= 1
    # the reference pass, and every noisy round's NIU write and PU pass (at least), all with that count
    assert len(threads_given) >= 1 + 2 * config["noisy_rounds"] and set(threads_given) == {used}


AFFINITY_CHILD = """
import json, os, sys
import h5py
import aimcemu
from aimcemu import _core
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
print(json.dumps({"core": _core.resolve_threads(0), "explicit": _core.resolve_threads(3)}))
aimcemu.run(sys.argv[1], sys.argv[2], sys.argv[3], threads=0, mapping="all", noise={"model": "pcm_like"})
with h5py.File(sys.argv[3], "r") as f:
    print(json.loads(f.attrs["config"])["threads_used"])
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to restrict the process to one")
def test_all_cores_means_the_cpus_the_process_may_run_on(tiny, tmp_path):
    """Under an affinity mask of one CPU (taskset, a cpuset, a SLURM allocation), 0 threads is 1
    thread, in the core and in the stored config: the core counted every online CPU
    (std::thread::hardware_concurrency), so a job given 4 CPUs of a 128-CPU node ran 128 threads."""
    import subprocess
    import sys

    model, data = tiny
    out = tmp_path / "one_cpu.h5"
    child = subprocess.run([sys.executable, "-c", AFFINITY_CHILD, os.fspath(model), os.fspath(data), os.fspath(out)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    resolved, stored = child.stdout.splitlines()[-2:]
    assert json.loads(resolved) == {"core": 1, "explicit": 3}
    assert int(stored) == 1


def test_a_sweep_task_stores_the_threads_its_worker_gave_it(tiny, tmp_path):
    """A task runs with the pool's per-task threads (cores // workers unless threads= says), which
    it stores as threads and threads_used alike; an explicit threads= is what every task stores."""
    model, data = tiny
    sweep = {"model": str(model), "data": str(data), **NOISY, "grid": {"noise.prog_noise_scale": [0.5, 2.0]}}
    for threads, expected in ((0, max(1, executors.cores() // 1)), (1, 1)):
        folder = tmp_path / f"threads{threads}"
        result = aimcemu.sweep({**sweep, "output": str(folder)}, workers=1, threads=threads, progress=False)
        assert result.ran == 2
        for summary in result.summaries.values():
            config = stored_config(folder / summary["file"])
            assert (config["threads"], config["threads_used"]) == (expected, expected), summary["file"]


def test_one_layer_selection_is_stored_alike_from_the_command_line_a_list_and_a_sweep(tiny, tmp_path):
    """The names in network order, each once, whatever order or form they were given in; a list
    that names every layer is "all"."""
    model, data = tiny
    configs = {}
    assert cli.main(["run", os.fspath(model), "--data", os.fspath(data), "-o", os.fspath(tmp_path / "cli.h5"),
                     "--layers", "fc,conv"]) == 0
    configs["cli"] = stored_config(tmp_path / "cli.h5")
    aimcemu.run(model, data, tmp_path / "list.h5", layers=["conv", "fc", "conv"])
    configs["list"] = stored_config(tmp_path / "list.h5")
    result = aimcemu.sweep({"output": str(tmp_path / "s"), "model": str(model), "data": str(data),
                            "layers": ["fc", "conv"]}, workers=1, progress=False)
    (task,) = result.summaries.values()
    configs["sweep"] = stored_config(tmp_path / "s" / task["file"])
    assert {name: config["layers"] for name, config in configs.items()} == \
        {"cli": ["conv", "fc"], "list": ["conv", "fc"], "sweep": ["conv", "fc"]}

    for name, layers in (("every", "pool,fc,conv"), ("all", "all")):
        aimcemu.run(model, data, tmp_path / f"{name}.h5", layers=layers)
    assert stored_config(tmp_path / "every.h5")["layers"] == stored_config(tmp_path / "all.h5")["layers"] == "all"


def make_old_style(path, layers: str = "conv,fc") -> None:
    """The config as files were written before threads_used: without it, layers as the command
    line's string."""
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["config"])
        del config["threads_used"]
        config["layers"] = layers
        f.attrs["config"] = json.dumps(config, sort_keys=True)


def test_an_old_style_results_file_reads_in_every_reader(tiny, tmp_path):
    """Every reader gives the same numbers for the file before and after its config is made old-style."""
    pytest.importorskip("xarray")
    pytest.importorskip("matplotlib")
    from aimcemu import report, results

    def read_all(path) -> dict:
        run = results.open_run(path)
        return {"run": run.drop_attrs(), "layer": results.open_layer(path, "fc").drop_attrs(),
                "summary": results.read_task_summary(path), "errors": analysis.error_stats(path),
                "histograms": analysis.activation_histograms(path, layers=["conv"]),
                "ties": analysis.prediction_ties(path).drop_attrs(), "over t": analysis.accuracy_vs_t(run).drop_attrs()}

    model, data = tiny
    out = tmp_path / "old.h5"
    aimcemu.run(model, data, out, layers=["conv", "fc"], **NOISY)
    new = read_all(out)
    make_old_style(out)
    assert "threads_used" not in stored_config(out)
    old = read_all(out)
    assert old.keys() == new.keys()
    for name in new:
        assert old[name].identical(new[name]) if hasattr(new[name], "identical") else old[name] == new[name], name
    assert results.open_run(out).attrs["config"]["layers"] == "conv,fc" and old["run"].sizes["round"] == 4
    page = report.report(out, output=tmp_path / "old.html").read_text()
    assert "&quot;layers&quot;: &quot;conv,fc&quot;" in page and "Accuracy" in page


def test_a_sweep_folder_of_old_style_task_files_resumes_without_rerunning_them(tiny, tmp_path):
    """Resume finds finished tasks by their file and the plan's task ids, never by comparing the
    file's config with what this version would store."""
    model, data = tiny
    cfg = {"output": str(tmp_path / "s"), "model": str(model), "data": str(data), **NOISY, "layers": "fc,conv",
           "grid": {"noise.prog_noise_scale": [0.5, 2.0]}}
    assert aimcemu.sweep(cfg, workers=1, progress=False).ran == 2
    task_files = sorted((tmp_path / "s" / "tasks").glob("*.h5"))
    for path in task_files:
        make_old_style(path, "fc,conv")
    before = {path: (os.stat(path).st_ino, os.stat(path).st_mtime_ns) for path in task_files}

    result = aimcemu.sweep(cfg, workers=1, progress=False)
    assert (result.ran, result.skipped, result.complete) == (0, 2, True)
    assert {path: (os.stat(path).st_ino, os.stat(path).st_mtime_ns) for path in task_files} == before
    assert all("threads_used" not in stored_config(path) for path in task_files)
    if importlib.util.find_spec("xarray") is not None:
        from aimcemu import results
        assert results.open_sweep(tmp_path / "s")["accuracy"].size == 2 * 4
