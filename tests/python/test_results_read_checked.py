"""Results files are user input, read by the analysis views only as the file the checking process
read: open_run and open_sweep take every value from the core's checked reader, and the views that
read activations (error_stats, activation_histograms, open_layer, the report's histograms) read
them through the descriptor that was checked, so a file renamed over the path in between is not
what is read, and a broken file is refused naming the file and the field instead of reaching
h5py.  The window between the check and the read lasts microseconds; the test-only hook
``_core.files.set_between_reads_hook_for_tests`` renames the other file over the path exactly there."""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time

import h5py
import numpy as np
import pytest
import xarray as xr

import aimcemu
from aimcemu import analysis, report, results

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


def corpus_copy(name, target):
    shutil.copyfile(os.path.join(CORPUS, name), target)
    return target


def altered_copy(target):
    """noisy.h5 with other activations and accuracies: the same layout, other values."""
    corpus_copy("noisy.h5", target)
    with h5py.File(target, "r+") as f:
        for name, group in f["layers"].items():
            if group.attrs["activations_stored"]:
                a = group["activations"][()]
                group["activations"][...] = np.clip(a.astype(np.int16) // 2 + 3, -128, 127).astype(np.int8)
        # rounds reversed: accuracies with their predictions and logits, so they still agree
        for name in ("accuracy", "predictions", "logits"):
            f[name][...] = f[name][()][::-1]
    return target


def test_open_run_reads_the_file_that_was_checked(tmp_path, replace_between_reads):
    run, following = corpus_copy("noisy.h5", tmp_path / "run.h5"), altered_copy(tmp_path / "following.h5")
    expected = results.open_run(corpus_copy("noisy.h5", tmp_path / "copy.h5"))
    assert not np.array_equal(results.open_run(following)["accuracy"], expected["accuracy"])
    replaced = replace_between_reads(run, following)
    ds = results.open_run(run)
    assert replaced == [os.fspath(run)]
    xr.testing.assert_identical(ds.drop_attrs() if hasattr(ds, "drop_attrs") else ds.assign_attrs(path=None),
                                expected.drop_attrs() if hasattr(expected, "drop_attrs") else expected.assign_attrs(path=None))


@pytest.mark.parametrize("view", ["error_stats", "activation_histograms", "open_layer"])
def test_the_activation_views_read_the_file_that_was_checked(view, tmp_path, replace_between_reads):
    run, following = corpus_copy("noisy.h5", tmp_path / "run.h5"), altered_copy(tmp_path / "following.h5")
    read = {"error_stats": lambda p: analysis.error_stats(p, ["conv"]),
            "activation_histograms": lambda p: analysis.activation_histograms(p, ["conv"]),
            "open_layer": lambda p: analysis.open_layer(p, "conv").load()}[view]
    expected = read(corpus_copy("noisy.h5", tmp_path / "copy.h5"))
    assert not read(following).equals(expected)
    replaced = replace_between_reads(run, following)
    got = read(run)
    assert replaced == [os.fspath(run)]
    xr.testing.assert_identical(got, expected)


def test_open_layer_keeps_the_checked_file_open_while_the_dataset_lives(tmp_path):
    run = corpus_copy("noisy.h5", tmp_path / "run.h5")
    expected = analysis.open_layer(corpus_copy("noisy.h5", tmp_path / "copy.h5"), "conv").load()
    lazy = analysis.open_layer(run, "conv")
    os.rename(altered_copy(tmp_path / "following.h5"), run)  # after the open: the lazy reads come later
    xr.testing.assert_identical(lazy.load(), expected)


@pytest.mark.parametrize("view", ["error_stats", "activation_histograms", "open_layer"])
def test_a_broken_file_is_refused_by_the_activation_views_naming_the_file_and_field(view, tmp_path):
    """An activations dataset of the wrong shape used to reach h5py (a broadcasting error or wrong
    sums); a file that is not HDF5 reached libhdf5."""
    read = {"error_stats": lambda p: analysis.error_stats(p),
            "activation_histograms": lambda p: analysis.activation_histograms(p),
            "open_layer": lambda p: analysis.open_layer(p, "conv")}[view]
    shape = corpus_copy("bad-activations_shape.h5", tmp_path / "shape.h5")
    with pytest.raises(aimcemu.FormatError, match=r"shape\.h5.*layers/conv/activations"):
        read(shape)
    junk = corpus_copy("bad-not_hdf5.h5", tmp_path / "junk.h5")
    with pytest.raises(aimcemu.FormatError, match=r"junk\.h5"):
        read(junk)


def test_the_activation_views_name_a_layer_that_is_missing_or_not_stored(tmp_path):
    run = corpus_copy("noisy.h5", tmp_path / "run.h5")
    with pytest.raises(KeyError, match="'nope' is not a layer"):
        analysis.error_stats(run, ["nope"])
    with pytest.raises(KeyError, match="'nope' is not a layer"):
        analysis.open_layer(run, "nope")
    with pytest.raises(ValueError, match=r"run\.h5: layer 'pool' has no stored activations"):
        analysis.activation_histograms(run, ["pool"])
    assert list(analysis.error_stats(run)["layer"].values) == ["conv", "fc"]  # network order, stored only


def make_sweep_folder(folder, files, models=None):
    """A sweep folder over one grid axis whose task files are copies of `files` (noisy.h5's config);
    `models`: each task's model name (its run's "model"), else none."""
    (folder / "tasks").mkdir(parents=True)
    with h5py.File(os.path.join(CORPUS, "noisy.h5")) as f:
        config = json.loads(f.attrs["config"])
    tasks = []
    for i, source in enumerate(files):
        name = f"tasks/{i}-p{i}.h5"
        shutil.copyfile(source, folder / name)
        run = {} if models is None else {"model": models[i]}
        tasks.append({"id": f"p{i}", "file": name, "point": {"p": i}, "run": run})
    index = {"format": results.FORMAT, "format_version": results.FORMAT_VERSION, "config": config,
             "axes": {"p": list(range(len(files)))}, "tasks": tasks}
    (folder / results.INDEX_FILE).write_text(json.dumps(index))
    return folder


def test_open_sweep_reads_the_task_files_that_were_checked(tmp_path, replace_between_reads):
    altered = altered_copy(tmp_path / "altered.h5")
    noisy = os.path.join(CORPUS, "noisy.h5")
    folder = make_sweep_folder(tmp_path / "sweep", [noisy, noisy, altered])
    expected = results.open_sweep(folder, lazy=False)
    assert not np.array_equal(expected["accuracy"].sel(p=1), expected["accuracy"].sel(p=2))
    task = folder / "tasks/1-p1.h5"
    for lazy in (False, True):
        shutil.copyfile(noisy, task)
        following = shutil.copyfile(altered, tmp_path / "following.h5")
        replaced = replace_between_reads(task, following)
        ds = results.open_sweep(folder, lazy=lazy).compute()  # lazy: each file is read when computed
        assert replaced == [os.fspath(task)]
        replaced.clear()
        xr.testing.assert_identical(ds, expected)


def test_open_sweep_says_which_task_files_store_which_layers(tmp_path):
    digital, noisy = os.path.join(CORPUS, "digital.h5"), os.path.join(CORPUS, "noisy.h5")
    folder = make_sweep_folder(tmp_path / "sweep", [noisy, digital, noisy])
    (folder / "tasks/2-p2.h5").unlink()  # not run yet
    ds = results.open_sweep(folder)
    stored = ds["activations_stored"].transpose("p", "layer")
    assert list(ds["layer"].values) == ["conv", "pool", "mix", "avg", "fc"]
    # digital.h5 has no rounds: nothing of it to show, though its fc group holds a reference
    np.testing.assert_array_equal(stored.values, [[True, False, False, False, True], [False] * 5, [False] * 5])


def test_the_report_takes_its_histogram_layers_from_the_checked_read(tmp_path):
    digital, noisy = os.path.join(CORPUS, "digital.h5"), os.path.join(CORPUS, "noisy.h5")
    folder = make_sweep_folder(tmp_path / "sweep", [digital, noisy])
    source = report._Source(folder)
    assert source.files_with_activations() == [(folder / "tasks/1-p1.h5", ["conv", "fc"])]
    run_source = report._Source(corpus_copy("noisy.h5", tmp_path / "run.h5"))
    assert run_source.files_with_activations() == [(tmp_path / "run.h5", ["conv", "fc"])]


def test_a_task_file_with_a_layer_the_sweep_does_not_list_opens(tmp_path):
    """The sweep's layers come from each model's first file; a later file of the same model name
    with another layer (a model file changed between resumed runs) is read without that layer
    (the report crashed with a KeyError on it; found by review)."""
    renamed = corpus_copy("noisy.h5", tmp_path / "renamed.h5")
    with h5py.File(renamed, "r+") as f:
        f["layers"].move("fc", "fc_v2")
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]]
        f.attrs["layer_names"] = [("fc_v2" if n == "fc" else n) for n in names]
    results.check_results_file(renamed)
    folder = make_sweep_folder(tmp_path / "sweep", [os.path.join(CORPUS, "noisy.h5"), renamed])
    for lazy in (False, True):
        ds = results.open_sweep(folder, lazy=lazy).compute()
        assert list(ds["layer"].values) == ["conv", "pool", "mix", "avg", "fc"]
        assert np.isnan(ds["snr_db"].sel(p=1, layer="fc")).all()
        np.testing.assert_array_equal(ds["snr_db"].sel(p=1, layer="conv"), ds["snr_db"].sel(p=0, layer="conv"))
        assert not ds["activations_stored"].sel(p=1, layer="fc") and ds["activations_stored"].sel(p=1, layer="conv")


def test_a_lazy_sweep_reads_a_task_file_when_its_block_is_computed(tmp_path):
    """Lazy: opening reads each model's first file only; a broken later file is refused, naming it,
    when its block is computed.  Eager: when the folder is opened."""
    noisy = os.path.join(CORPUS, "noisy.h5")
    folder = make_sweep_folder(tmp_path / "sweep", [noisy, noisy, noisy])
    shutil.copyfile(os.path.join(CORPUS, "bad-accuracy_above_one.h5"), folder / "tasks/2-p2.h5")
    ds = results.open_sweep(folder, lazy=True)
    assert float(ds["accuracy"].sel(p=0).mean().compute()) == pytest.approx(float(ds["accuracy"].sel(p=1).mean().compute()))
    with pytest.raises(aimcemu.FormatError, match=r"2-p2\.h5"):
        ds["accuracy"].sel(p=2).compute()
    with pytest.raises(aimcemu.FormatError, match=r"2-p2\.h5"):
        results.open_sweep(folder, lazy=False)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_open_layer_gives_its_file_back_without_a_resource_warning(tmp_path):
    """The unclosed file's ResourceWarning is raised in a finalizer: pytest reports it as unraisable."""
    import gc
    import warnings

    run = corpus_copy("noisy.h5", tmp_path / "run.h5")
    before = len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        activations = analysis.open_layer(run, "conv")["activations"]  # the Dataset itself goes at once
        assert int(activations.sum()) != 0
        del activations
        gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.fixture
def reader_calls(monkeypatch):
    """The paths of every call of the core's checked reader (one checking process per call):
    [(binding name, [paths])], counted by wrapping the bindings open_sweep calls."""
    calls = []

    def counted(name):
        original = getattr(results._core, name)

        def call(paths, *args, **kwargs):
            calls.append((name, [paths] if isinstance(paths, str) else list(paths)))
            return original(paths, *args, **kwargs)
        monkeypatch.setattr(results._core, name, call)

    counted("read_results")
    counted("read_results_files")
    return calls


def files_read(calls):
    return sorted(os.path.basename(path) for _, paths in calls for path in paths)


def test_a_lazy_sweep_checks_its_task_files_a_group_per_checking_process(tmp_path, reader_calls):
    """Computing every block used to start one checking process per task file (3,000 files: 94 s
    against 79 s read eagerly); a group of files now goes through one, and each file is read once:
    each model's first file at the open, for the layer list and its own block (it was read again
    when its block was computed)."""
    group = getattr(results, "TASK_FILES_PER_LAZY_READ", 32)
    count = 2 * group + 3
    noisy = os.path.join(CORPUS, "noisy.h5")
    folder = make_sweep_folder(tmp_path / "sweep", [noisy] * count)
    names = sorted(f"{i}-p{i}.h5" for i in range(count))
    ds = results.open_sweep(folder, lazy=True)
    assert len(reader_calls) == 1 and files_read(reader_calls) == ["0-p0.h5"]
    reader_calls.clear()
    loaded = ds.load()
    assert [name for name, _ in reader_calls] == ["read_results_files"] * math.ceil((count - 1) / group)
    assert files_read(reader_calls) == sorted(set(names) - {"0-p0.h5"})  # each once; the first not again
    reader_calls.clear()
    xr.testing.assert_identical(loaded, results.open_sweep(folder, lazy=False))
    assert files_read(reader_calls) == names  # eager: each file once too
    reader_calls.clear()
    one = results.open_sweep(folder, lazy=True)["accuracy"].sel(p=count - 1)
    reader_calls.clear()
    one.compute()  # one block: its group only
    assert [len(paths) for _, paths in reader_calls] == [(count - 1) % group or group]


def test_a_lazy_group_spanning_several_models_reads_as_eagerly(tmp_path, reader_calls):
    """Groups are consecutive task files whatever their model: the blocks of two models with other
    layers (noisy: conv, pool, mix, fc; digital: no rounds) in one group equal the eager read, and
    the open reads each model's first file once, in one checking process."""
    noisy, digital = os.path.join(CORPUS, "noisy.h5"), os.path.join(CORPUS, "digital.h5")
    models = ["noisy", "digital"] * 4
    folder = make_sweep_folder(tmp_path / "sweep", [noisy if m == "noisy" else digital for m in models], models)
    ds = results.open_sweep(folder, lazy=True)
    assert len(reader_calls) == 1 and files_read(reader_calls) == ["0-p0.h5", "1-p1.h5"]
    loaded = ds.load()
    assert files_read(reader_calls) == sorted(f"{i}-p{i}.h5" for i in range(len(models)))
    assert len(reader_calls) == 2
    eager = results.open_sweep(folder, lazy=False)
    xr.testing.assert_identical(loaded, eager)
    assert list(eager["layer"].values) == ["conv", "pool", "mix", "avg", "fc"]
    assert not np.isnan(eager["snr_db"].sel(p=6, layer="conv")).any() and np.isnan(eager["snr_db"].sel(p=7)).all()


BROKEN = {"bad-accuracy_above_one.h5": "accuracy", "bad-activations_shape.h5": "layers/conv/activations",
          "bad-not_hdf5.h5": "file", "bad-truncated_half.h5": "file"}


def test_a_broken_file_in_a_lazy_group_is_named_by_its_own_block(tmp_path, reader_calls):
    """A group with broken files goes through the checking process in one call, each file on its
    own account: each broken file's block raises the error of its own check (file and field, the very
    message), and the sound files of the group still compute; no file is read again one by one (a
    failed group used to be read again file by file).  A config that is not JSON passes the core's
    check and is refused by the reader's own (field 'config')."""
    noisy = os.path.join(CORPUS, "noisy.h5")
    not_json = corpus_copy("noisy.h5", tmp_path / "not_json.h5")
    with h5py.File(not_json, "r+") as f:
        f.attrs["config"] = "{not json"
    broken = {**{os.path.join(CORPUS, name): field for name, field in BROKEN.items()}, os.fspath(not_json): "config"}
    files = [noisy, noisy]
    for source in broken:
        files += [source, noisy]
    folder = make_sweep_folder(tmp_path / "sweep", files)
    ds = results.open_sweep(folder, lazy=True)
    expected = results.open_sweep(make_sweep_folder(tmp_path / "sound", [noisy] * len(files)), lazy=False)
    for p, source in enumerate(files):
        block = ds["snr_db"].sel(p=p)
        if source == noisy:
            xr.testing.assert_identical(block.compute(), expected["snr_db"].sel(p=p))
            continue
        task = os.fspath(folder / f"tasks/{p}-p{p}.h5")
        with pytest.raises(aimcemu.FormatError) as own:
            results.check_results_file(task)
        with pytest.raises(aimcemu.FormatError) as raised:
            block.compute()
        assert str(raised.value) == str(own.value)
        assert str(raised.value).startswith(f"{task}: field '{broken[source]}': ")
    reader_calls.clear()
    with pytest.raises(aimcemu.FormatError, match=r"tasks/\d+-p\d+\.h5: field '"):
        ds.load()
    group = [os.fspath(folder / f"tasks/{p}-p{p}.h5") for p in range(1, len(files))]
    assert reader_calls == [("read_results_files", group)]  # the group's one call, and no file read again


def test_an_eager_sweep_refuses_a_task_file_whose_config_is_not_json(tmp_path):
    """The lazy read and open_run refuse such a file (field 'config'); the eager read took it."""
    noisy = os.path.join(CORPUS, "noisy.h5")
    not_json = corpus_copy("noisy.h5", tmp_path / "not_json.h5")
    with h5py.File(not_json, "r+") as f:
        f.attrs["config"] = "{not json"
    folder = make_sweep_folder(tmp_path / "sweep", [noisy, not_json])
    for lazy in (True, False):
        with pytest.raises(aimcemu.FormatError, match=r"tasks/1-p1\.h5: field 'config': not valid JSON"):
            results.open_sweep(folder, lazy=lazy).load()


def test_a_lazy_sweep_variable_is_one_graph_of_a_task_per_file(tmp_path):
    """One dask array per task file, stacked (3 graph tasks and a layer per file), made dask's
    graph optimisation of a mean over 3,000 task files take 150 s, longer than reading them; each
    variable is now one graph: a block per task, a read per group of files, one per model's first."""
    noisy = os.path.join(CORPUS, "noisy.h5")
    count = 70
    folder = make_sweep_folder(tmp_path / "sweep", [noisy] * count)
    (folder / "tasks/5-p5.h5").unlink()  # a missing task: a constant block
    ds = results.open_sweep(folder, lazy=True)
    group = getattr(results, "TASK_FILES_PER_LAZY_READ", 32)
    reads = math.ceil((count - 2) / group) + 1
    for name in ("accuracy", "snr_db", "reference_accuracy", "activations_stored"):
        graph = dict(ds[name].data.__dask_graph__())
        assert len(graph) == count + reads
        assert ds[name].data.chunks[0] == (1,) * count


# Stands in for aimcemu-check-file: logs each request's file names, hands the files before the one
# named HANG to the real checking process (on the same descriptors, 4 + i), and then, unless the real
# one stopped at a file that failed, sleeps on HANG as a checking process that libhdf5 loops in does.
HANGING_HELPER = """#!{python}
import os, subprocess, sys, time
args = sys.argv[1:]
paths = args[2:]
with open({log!r}, "a") as log:
    log.write(" ".join(os.path.basename(p) for p in paths) + "\\n")
names = [os.path.basename(p) for p in paths]
if {hang!r} not in names:
    os.execv({real!r}, [{real!r}, *args])
hang = names.index({hang!r})
before = b""
if hang:
    before = subprocess.run([{real!r}, "--fds", args[1], *paths[:hang]], pass_fds=range(4, 4 + hang),
                            stdout=subprocess.PIPE).stdout
    os.write(1, before)
records, at = 0, 0
while at < len(before):
    colon = before.index(b":", at)
    at, records = colon + 1 + int(before[at:colon]) + 1, records + 1
if records == hang:
    time.sleep(3600)
"""

HANG_LIMIT_S = 3.0


@pytest.fixture
def hanging_helper(tmp_path):
    """arm(name): the checking process hangs on the file named `name` (HANGING_HELPER) and runs
    past a time limit of HANG_LIMIT_S (_core.files.set_check_time_limit_for_tests); returns the
    log of requests, one line of file names per checking process started."""
    from aimcemu import _core

    real = _core.files.check_helper()
    log = tmp_path / "requests.log"

    def arm(name):
        fake = tmp_path / "hanging-check-file"
        fake.write_text(HANGING_HELPER.format(python=sys.executable, log=os.fspath(log), hang=name, real=real))
        fake.chmod(0o755)
        log.write_text("")
        _core.files.set_check_helper(os.fspath(fake))
        _core.files.set_check_time_limit_for_tests(HANG_LIMIT_S)
        return log

    yield arm
    _core.files.set_check_helper(real)
    _core.files.set_check_time_limit_for_tests(None)


def test_a_file_that_hangs_the_checking_process_costs_its_time_limit_once(tmp_path, hanging_helper):
    """A lazy group whose checking process hangs on one file and refuses another: the process is
    killed at the hanging file, a fresh one reads the files after it and stops at the broken one,
    a third reads the rest: each file is asked for once (the group used to be read again file by
    file, the hanging file hanging its checking process a second time), each failing file gets the
    error of its own check, and the sound files read."""
    noisy = os.path.join(CORPUS, "noisy.h5")
    broken = os.path.join(CORPUS, "bad-accuracy_above_one.h5")
    sources = [noisy] * 3 + [noisy] + [noisy] * 2 + [broken] + [noisy] * 2
    folder = make_sweep_folder(tmp_path / "sweep", sources)
    paths = [os.fspath(folder / f"tasks/{p}-p{p}.h5") for p in range(len(sources))]
    names = [os.path.basename(p) for p in paths]
    own_error = {}
    with pytest.raises(aimcemu.FormatError) as refused:
        results.check_results_file(paths[6])
    own_error[6] = str(refused.value)
    log = hanging_helper(names[3])
    start = time.perf_counter()
    outcomes = results._read_each_checked(paths)
    seconds = time.perf_counter() - start
    assert log.read_text().splitlines() == [" ".join(names), " ".join(names[4:]), " ".join(names[7:])]
    own_error[3] = (f"{paths[3]}: field 'file': reading it did not finish within the time limit (a corrupt file "
                    "can make the HDF5 library loop); the file is not used")
    expected = results.check_results_file(noisy)
    for p, outcome in enumerate(outcomes):
        if p in own_error:
            assert isinstance(outcome, aimcemu.FormatError) and str(outcome) == own_error[p]
        else:
            np.testing.assert_array_equal(outcome["accuracy"], expected["accuracy"])
    assert HANG_LIMIT_S <= seconds < 2 * HANG_LIMIT_S  # the time limit once, not twice
    with pytest.raises(aimcemu.FormatError) as alone:  # the hanging file's own check says the same
        results.check_results_file(paths[3])
    assert str(alone.value) == own_error[3]


def test_a_config_nested_too_deeply_is_named_not_a_recursion_error(tmp_path, capsys):
    """json.loads raises RecursionError, not ValueError, on 100,000 nested lists: open_run and
    `aimcemu report` printed a traceback (exit 1) instead of naming the field."""
    deep = corpus_copy("noisy.h5", tmp_path / "deep.h5")
    with h5py.File(deep, "r+") as f:
        f.attrs["config"] = "[" * 100_000 + "]" * 100_000
    with pytest.raises(aimcemu.FormatError, match=r"deep\.h5: field 'config': JSON nested too deeply"):
        results.open_run(deep)
    from aimcemu import cli
    assert cli.main(["report", os.fspath(deep), "-o", os.fspath(tmp_path / "report.html")]) == 2
    err = capsys.readouterr().err
    assert "field 'config': JSON nested too deeply" in err and "Traceback" not in err, err
