"""Bad input found by reliability review C (docs/reliability.md), each pinned where it was a
traceback, a TypeError or an error that did not name its file or field:

1. a lone surrogate ("\\ud800") as a noise model name, parameter name or string value;
2. grid values YAML or NumPy give that are not plain numbers, strings, lists or dicts;
3. a huge base-60 integer in a YAML file (PyYAML built it in quadratic time before it was refused);
4. full-disk errors that did not name the file (and the empty lock file they left);
5. a task file that is a symbolic link to another task's file;
6. a sweep folder whose `tasks` is not a folder.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import mapping, sweeps
from aimcemu.noise import PCMLikeNoiseModel, noise_model_from_dict
from hostile import sweep_in_process
from hostile import assert_refused, cli_run, tiny_files


@pytest.fixture
def folder(tmp_path):
    study = tmp_path / "study"
    tiny_files(study)
    return study


# --- 1. lone surrogates in noise configs --------------------------------------------------------
# (config, the field the error names); YAML's "\ud800" escape and a command-line byte that is not
# UTF-8 (os.fsdecode gives "\udcff") both arrive as lone surrogates.
SURROGATES = [
    ({"model": "\ud800"}, "field 'model': not valid UTF-8 (character U+D800"),
    ({"model": "pcm_like", "\udc00": 1.0}, "field '\\udc00': not valid UTF-8 (character U+DC00"),
    ({"model": "pcm_like", "drift_reference": "\ud800"}, "field 'drift_reference': not valid UTF-8"),
    ({"model": "pcm_like", "converter": "\udcff"}, "field 'converter': not valid UTF-8 (byte 0xff"),
]
IDS = ["model", "key", "drift_reference", "converter"]


@pytest.mark.parametrize("config, message", SURROGATES, ids=IDS)
def test_a_lone_surrogate_in_a_noise_config_is_named_from_python(config, message):
    with pytest.raises(aimcemu.FormatError, match="^noise config: " + _re(message)):
        noise_model_from_dict(config)
    with pytest.raises(aimcemu.FormatError, match="^<config>: field 'noise': noise config: " + _re(message)):
        mapping.resolve_noise_model(config)
    with pytest.raises(aimcemu.FormatError, match="field 'model': not valid UTF-8"):
        mapping.resolve_noise_model("\ud800")
    with pytest.raises(aimcemu.FormatError, match="field 'drift_reference': not valid UTF-8"):
        PCMLikeNoiseModel(drift_reference="\ud800")


def _re(text: str) -> str:
    import re
    return re.escape(text)


@pytest.mark.parametrize("config, message", SURROGATES, ids=IDS)
def test_a_lone_surrogate_in_a_noise_config_is_named_from_the_command_line(folder, capsys, config, message):
    noise = yaml.safe_dump(config, allow_unicode=False, default_flow_style=True).strip()
    assert_refused(["run", folder / "model.h5", "--noise", noise, "-o", folder / "out.h5"], folder, capsys,
                   "--noise: field 'noise': noise config: " + message)
    (folder / "run.yaml").write_text(yaml.safe_dump({"noise": config}, allow_unicode=False))
    assert_refused(["run", folder / "model.h5", "--config", folder / "run.yaml", "-o", folder / "out.h5"], folder,
                   capsys, "run.yaml", "noise config: " + message)
    # a mapping file's noise, and a sweep's noise and grid
    (folder / "map.yaml").write_text(yaml.safe_dump({"default": "aimc", "layers": {"conv": {"device": "aimc", "noise": config}}},
                                                  allow_unicode=False))
    assert_refused(["run", folder / "model.h5", "--mapping", folder / "map.yaml", "-o", folder / "out.h5"], folder,
                   capsys, "map.yaml", "noise config: " + message)
    sweep = {"output": str(folder / "sw"), "model": str(folder / "model.h5"), "mapping": "all", "t": [0.0]}
    (folder / "sweep.yaml").write_text(yaml.safe_dump({**sweep, "noise": config}, allow_unicode=False))
    assert_refused(["sweep", "--config", folder / "sweep.yaml", "--check"], folder, capsys, "noise config: " + message)
    (folder / "sweep.yaml").write_text(yaml.safe_dump({**sweep, "noise": "pcm_like", "grid": {"noise": [config]}},
                                                      allow_unicode=False))
    assert_refused(["sweep", "--config", folder / "sweep.yaml", "--check"], folder, capsys, "field 'grid.noise[0]",
                   "noise config: " + message)


def test_a_lone_surrogate_as_a_grid_parameter_is_named(tmp_path):
    config = {"output": str(tmp_path / "sw"), "noise": {"model": "pcm_like"}, "mapping": "all", "t": [0.0]}
    for grid, message in [({"noise.\udc00": [1.0]}, "field '\\udc00': not valid UTF-8"),
                          ({"noise.drift_reference": ["\ud800"]}, "field 'drift_reference': not valid UTF-8")]:
        with pytest.raises(aimcemu.FormatError, match=_re(message)):
            sweeps.plan({**config, "grid": grid})


# --- 2. grid values that are not plain ----------------------------------------------------------
def _sweep(tmp_path, **changes) -> dict:
    return {"output": str(tmp_path / "sw"), "noise": {"model": "pcm_like"}, "mapping": "all", "t": [0.0], **changes}


@pytest.mark.parametrize("text, field", [
    ("noise.prog_noise_scale: [2001-12-14]", "grid.noise.prog_noise_scale[0]"),
    ("noise.prog_noise_scale: [1.0, !!binary aGVsbG8=]", "grid.noise.prog_noise_scale[1]"),
    ("noise.prog_noise_scale: [!!set {a, b}]", "grid.noise.prog_noise_scale[0]"),
    ("noise.prog_noise_scale: {early: 2001-12-14}", "grid.noise.prog_noise_scale[early]"),
    ("noise: [{model: pcm_like, prog_noise_scale: 2001-12-14}]", "grid.noise[0].prog_noise_scale"),
    ("noise: [{model: pcm_like, drift_scale: [!!binary aGVsbG8=]}]", "grid.noise[0].drift_scale[0]"),
], ids=["date", "binary", "set", "labelled_date", "noise_axis_date", "noise_axis_nested_binary"])
def test_a_grid_value_yaml_gives_as_a_date_binary_or_set_is_named(folder, capsys, text, field):
    config = folder / "g.yaml"
    config.write_text(f"output: {folder / 'sw'}\nmodel: {folder / 'model.h5'}\nnoise: pcm_like\nmapping: all\n"
                      f"t: [0.0]\ngrid:\n  {text}\n")
    message = assert_refused(["sweep", "-c", config, "--check"], folder, capsys, f"g.yaml: field '{field}': ")
    assert "expected a number, a string, a list or a mapping" in message


def test_numpy_grid_values_are_their_python_values(tmp_path):
    plain = sweeps.plan(_sweep(tmp_path, grid={"noise.prog_noise_scale": [1, 2, 3], "noise.read_noise_scale": [1, 2],
                                               "noise.drift_scale": [0.5, 1.0]}))
    for scales, seeds, drifts in [(list(np.arange(1, 4)), [np.uint8(1), np.int64(2)], [np.float32(0.5), np.float64(1.0)]),
                                  (np.arange(1, 4).tolist(), np.array([1, 2]), np.array([0.5, 1.0], dtype=np.float32))]:
        planned = sweeps.plan(_sweep(tmp_path, grid={"noise.prog_noise_scale": scales, "noise.read_noise_scale": list(seeds),
                                                     "noise.drift_scale": list(drifts)}))
        assert planned.axes == plain.axes and planned.config == plain.config
        assert [t.to_dict() for t in planned.tasks] == [t.to_dict() for t in plain.tasks]
        assert all(type(label) in (int, float) for labels in planned.axes.values() for label in labels)
    labelled = sweeps.plan(_sweep(tmp_path, grid={"noise.prog_noise_scale": {"low": np.float32(0.5), "high": np.int16(2)}}))
    assert labelled.config["grid"]["noise.prog_noise_scale"] == [["low", 0.5], ["high", 2]]


@pytest.mark.parametrize("value, field", [
    (b"bytes", "grid.noise.prog_noise_scale[1]"), ({1, 2}, "grid.noise.prog_noise_scale[1]"),
    (np.datetime64("2001-12-14"), "grid.noise.prog_noise_scale[1]"), (object(), "grid.noise.prog_noise_scale[1]"),
    (np.complex64(1), "grid.noise.prog_noise_scale[1]")])
def test_other_grid_value_types_are_refused_from_python(tmp_path, value, field):
    with pytest.raises(aimcemu.FormatError, match=_re(f"<sweep>: field '{field}': expected a number, a string")):
        sweeps.plan(_sweep(tmp_path, grid={"noise.prog_noise_scale": [1.0, value]}))


# --- 3. a huge base-60 integer -------------------------------------------------------------------
def test_a_huge_base_60_integer_is_refused_before_it_is_built(folder, capsys):
    """PyYAML builds a YAML 1.1 sexagesimal int (1:59:59:...) in quadratic time: 1 MiB took about
    40 s of CPU before its size was refused.  Its length is now checked first."""
    import time
    from aimcemu import yamlfile

    config = folder / "sexa.yaml"
    config.write_text("seed: 1" + ":59" * 170_000 + "\n")   # 510 KB: about 7 s before the fix
    start = time.process_time()
    assert_refused(["sweep", "-c", config, "--check"], folder, capsys, "sexa.yaml: field '<yaml>': an integer of 510001 "
                   "characters (line 1)")
    assert time.process_time() - start < 2.5
    # the largest integers still read, in every spelling, underscores aside
    big = 2**yamlfile.YAML_MAX_INT_BITS - 1
    digits = []
    rest = big
    while rest:
        rest, digit = divmod(rest, 60)
        digits.append(str(digit))
    for spelling in (f"-0b{big:b}", f"0x{big:x}", f"0{big:o}", f"+{big}", ":".join(reversed(digits)), f"0b_{'1_' * 4095}1"):
        assert yamlfile.parse_yaml(f"seed: {spelling}\n", "<test>")["seed"] in (big, -big)


# --- 4. a full disk names the file ---------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_during_an_atomic_write_names_the_file(folder, capsys, monkeypatch):
    """write and fsync raise OSError without a file name ("[Errno 28] No space left on device"):
    the error names the file being written (index.json, a report page, a perf table)."""
    from aimcemu import files
    from hostile import temporaries

    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(OSError, match=_re(f"No space left on device: '{folder / 'x.json'}'")) as info:
        files.atomic_write_json(folder / "x.json", {"a": 1})
    assert info.value.errno == errno.ENOSPC
    code, err = cli_run(["perf", "--model", folder / "model.h5", "--output", folder / "p.json"], capsys)
    assert code == 2 and f"No space left on device: '{folder / 'p.json'}'" in err and "Traceback" not in err, err
    assert not (folder / "p.json").exists() and temporaries(folder) == []


def test_a_full_disk_when_the_lock_is_written_names_it_and_leaves_no_lock_file(folder, capsys, monkeypatch):
    from aimcemu import files

    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", _no_space)
    sweep = folder / "new"
    sweep.mkdir()
    with pytest.raises(aimcemu.FormatError, match=_re(f"{sweep / '.aimcemu.lock'}: field 'file': cannot write the lock "
                                                      "file: No space left on device")):
        files.FolderLock(sweep)
    assert list(sweep.iterdir()) == []
    # a lock file that was there already (another sweep's) is left as it was
    (sweep / ".aimcemu.lock").write_text('{"host": "h", "pid": 1, "since": "then"}')
    with pytest.raises(aimcemu.FormatError, match="cannot write the lock file"):
        files.FolderLock(sweep)
    assert (sweep / ".aimcemu.lock").is_file()   # not removed: this call did not create it
    (sweep / ".aimcemu.lock").unlink()
    sweep.rmdir()
    config = {"output": str(sweep), "model": str(folder / "model.h5"), "noise": "pcm_like", "mapping": "all", "t": [0.0]}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(config))
    code, err = cli_run(["sweep", "-c", folder / "sweep.yaml"], capsys)
    assert code == 2 and "new/.aimcemu.lock: field 'file': cannot write the lock file: No space left" in err, err
    assert not (sweep / ".aimcemu.lock").exists()
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    with files.FolderLock(folder):   # (a sanity check that the lock still works)
        assert "pid" in (folder / ".aimcemu.lock").read_text()


# --- 5. a task file that is a link ---------------------------------------------------------------
def _small_sweep(folder) -> Path:
    """A finished 2-task sweep, run in this process (no pool)."""
    config = {"output": str(folder / "sweep"), "model": str(folder / "model.h5"), "noise": {"model": "pcm_like"},
              "mapping": "all", "t": [0.0, 3600.0], "chips": 2, "grid": {"noise.prog_noise_scale": [0.5, 3.0]}}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(config))
    return sweep_in_process(config)


def test_a_task_file_that_is_a_link_to_another_task_is_refused_by_open_sweep_and_report(folder, capsys):
    from aimcemu import results

    sweep_folder = _small_sweep(folder)
    first, second = sorted((sweep_folder / "tasks").iterdir())
    true_accuracy = results.open_sweep(sweep_folder).accuracy.values[0].copy()
    first.unlink()
    first.symlink_to(second.name)
    for lazy in (False, True):
        with pytest.raises(aimcemu.FormatError, match=_re(f"{first}: field 'file': is a symbolic link")):
            results.open_sweep(sweep_folder, lazy=lazy)
    assert_refused(["report", sweep_folder, "-o", folder / "pages/"], folder, capsys, f"{first}: field 'file': is a "
                   "symbolic link", "rerun the sweep")
    # a dangling link too; resuming removes the link and runs the task again
    first.unlink()
    first.symlink_to("missing.h5")
    with pytest.raises(aimcemu.FormatError, match="is a symbolic link"):
        results.open_sweep(sweep_folder)
    code, err = cli_run(["sweep", "-c", folder / "sweep.yaml"], capsys)
    assert code == 0, err
    assert not first.is_symlink() and np.array_equal(results.open_sweep(sweep_folder).accuracy.values[0], true_accuracy)


# --- 6. a sweep folder whose tasks/ is not a folder ----------------------------------------------
@pytest.mark.parametrize("plant", ["file", "fifo", "dangling_link", "link_to_a_file"])
def test_a_tasks_entry_that_is_not_a_folder_is_named(folder, capsys, plant):
    sweep_folder = folder / "sweep"
    sweep_folder.mkdir()
    tasks = sweep_folder / "tasks"
    if plant == "file":
        tasks.write_text("x")
    elif plant == "fifo":
        os.mkfifo(tasks)
    elif plant == "dangling_link":
        tasks.symlink_to("nowhere")
    else:
        (folder / "data.txt").write_text("x")
        tasks.symlink_to(folder / "data.txt")
    config = {"output": str(sweep_folder), "model": str(folder / "model.h5"), "noise": "pcm_like", "mapping": "all",
              "t": [0.0]}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(config))
    kind = "a dangling symbolic link" if plant == "dangling_link" else "not a folder"
    code, err = cli_run(["sweep", "-c", folder / "sweep.yaml"], capsys)
    assert code == 2 and f"{tasks}: field 'file': exists and is {kind}" in err and "Traceback" not in err, err
    with pytest.raises(aimcemu.FormatError, match=_re(f"{tasks}: field 'file': exists and is {kind}")):
        sweeps.sweep(config, progress=False)
    assert tasks.is_symlink() or tasks.exists()   # left as it was


@pytest.mark.parametrize("key", ["\x80", "é", "\u2713"])
def test_a_parameter_name_outside_ascii_but_valid_is_an_unknown_parameter(key):
    """The escape for lone surrogates decoded the name as ASCII, so any valid non-ASCII name
    ("\\x80", "é") raised UnicodeDecodeError (test_fuzz_config found it)."""
    with pytest.raises(aimcemu.FormatError, match="unknown parameter"):
        noise_model_from_dict({"model": "pcm_like", key: 1})
