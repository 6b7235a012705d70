"""Bad input to ``aimcemu run``: options, paths, outputs and files.

Every case runs the command in this process and asserts the exit code (2), that the message
names the option, file or field at fault, and that nothing in the folder appeared, changed or
was left behind (hostile.Snapshot).  The cases cover each class of the reliability review
(docs/reliability.md): runaway counts, seeds, options a digital run would ignore, paths that are
not files, outputs that are inputs or not files, files that lie about their contents.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import pytest

import aimcemu
from hostile import assert_refused, cli_run, temporaries, tiny_files

CORPUS = Path(__file__).resolve().parent.parent / "fuzz" / "corpus"


@pytest.fixture
def files(tmp_path):
    """(folder, model, data): the tiny model and its data set in a fresh folder."""
    folder = tmp_path / "study"
    model, data = tiny_files(folder)
    return folder, model, data


def refused(argv, folder, capsys, *expected: str) -> str:
    """`aimcemu run ARGV` must be refused (hostile.assert_refused)."""
    return assert_refused(["run", *argv], folder, capsys, *expected)

# --- counts, seeds and times: checked at parse time, before any allocation ----------------------
COUNTS = [
    (["--mapping", "all", "--chips", "0"], "field 'chips': must be an integer >= 1"),
    (["--mapping", "all", "--chips", "1000000000"], "field 'chips': must be an integer >= 1 and <= 2^20, got 1000000000"),
    (["--mapping", "all", "--chips", str(2**63)], "field 'chips'"),
    (["--mapping", "all", "--rounds", "1000000000"], "field 'rounds': must be an integer >= 1 and <= 2^20"),
    (["--mapping", "all", "--chips", "2000", "--rounds", "1000"], "field 'chips': 2000 chips x 1 t x 1000 rounds"),
    (["--mapping", "all", "--seed", str(2**64)], "field 'seed': must be an integer >= 0 and <= 2^64 - 1"),
    (["--mapping", "all", "--seed", "-1"], "field 'seed'"),
    (["--threads", "-1"], "field 'threads'"),
    (["--threads", "1000000"], "field 'threads'"),
    (["--mapping", "all", "--t", "1,nan"], "field 't': cannot read 'nan' as a time"),
    (["--mapping", "all", "--t", "1e400"], "field 't': times must be finite and >= 0"),
    (["--mapping", "all", "--t", "5,1"], "field 't': times must be strictly increasing"),
    (["--mapping", "all", "--t", ",".join(str(k) for k in range(5000))], "field 't': 5000 times; at most 4096"),
]


@pytest.mark.parametrize("argv, message", COUNTS, ids=[" ".join(a)[:40] for a, _ in COUNTS])
def test_counts_seeds_and_times_are_bounded(files, capsys, argv, message):
    folder, model, _ = files
    flag = "--" + message.split("'")[1]   # the option came from the command line: errors name its flag
    refused([model, "-o", folder / "out.h5", *argv], folder, capsys, f"{flag}: {message}")


def test_the_largest_seed_is_a_valid_run(files, capsys):
    folder, model, _ = files
    out = folder / "out.h5"
    code, err = cli_run(["run", model, "-o", out, "--mapping", "all", "--seed", str(2**64 - 1)], capsys)
    assert code == 0, err
    import json

    with h5py.File(out) as f:
        assert json.loads(f.attrs["config"])["seed"] == 2**64 - 1


# --- options that a digital run would silently ignore ---------------------------------------------
@pytest.mark.parametrize("option, value", [("--t", "0,1h"), ("--drift-compensation", "global"), ("--chips", "4"),
                                           ("--rounds", "2"), ("--seed", "7")])
def test_noisy_options_on_a_digital_run_are_refused(files, capsys, option, value):
    folder, model, _ = files
    field = option.lstrip("-").replace("-", "_")
    refused([model, "-o", folder / "out.h5", option, value], folder, capsys,
            f"field '{field}': this run is digital (no mapping and no noise)")


def test_layer_selections_that_name_nothing_are_refused(files, capsys):
    folder, model, _ = files
    for value in (",", " , ,", "conv,nope"):
        refused([model, "-o", folder / "out.h5", "--layers", value], folder, capsys, "layers")


@pytest.mark.parametrize("option, expected", [
    ("layers: [nope]", "field 'layers': no layer named 'nope' in the model"),
    ("backend: turbo", "field 'backend': unknown backend 'turbo' (expected fast, reference, cycle_sa)"),
], ids=["layers", "backend"])
def test_an_option_the_model_or_the_pu_refuses_names_the_config_file(files, capsys, option, expected):
    """Review rev_kill: the results writer's refusal of a layer said '<config>' and the binding's of a
    backend '<memory>', whatever the option came from."""
    folder, model, _ = files
    config = folder / "study.yaml"
    config.write_text(option + "\n")
    refused([model, "-o", folder / "out.h5", "--config", config], folder, capsys, f"{config}: {expected}")
    key, value = option.split(": ")
    refused([model, "-o", folder / "out.h5", f"--{key}", value.strip("[]")], folder, capsys, f"--{key}: {expected}")


def test_invalid_utf8_in_an_argument_names_the_option(files, capsys):
    folder, model, _ = files
    bad = os.fsdecode(b"conv\xff")  # how Python hands over argv bytes that are not UTF-8
    refused([model, "-o", folder / "out.h5", "--layers", bad], folder, capsys,
            "field 'layers': not valid UTF-8 (byte 0xff at position 4)")


def test_a_nested_list_where_a_number_belongs(files, capsys):
    folder, model, _ = files
    refused([model, "-o", folder / "out.h5", "--noise", "{model: pcm_like, prog_noise_scale: [1, 2]}"], folder, capsys,
            "field 'prog_noise_scale': expected a number, got a list")
    refused([model, "-o", folder / "out.h5", "--noise", "{model: [pcm_like]}"], folder, capsys,
            "field 'noise.model': expected a noise model name")
    # A list whose elements are not numbers (found by test_fuzz_config: a bare TypeError before).
    for element, shown in (("null", "None"), ("true", "True"), ("abc", "'abc'"), ("[1]", "[1]")):
        refused([model, "-o", folder / "out.h5", "--noise", f"{{model: pcm_like, prog_noise_scale: [{element}]}}"],
                folder, capsys, f"field 'prog_noise_scale': expected a list of numbers, got an element {shown}")


# --- inputs that are not regular files -----------------------------------------------------------
def test_a_missing_model_is_named_as_the_model(files, capsys):
    folder, _, _ = files
    refused([folder / "absent" / "model.h5", "-o", folder / "out.h5"], folder, capsys,
            "field 'model': model file not found")


@pytest.mark.parametrize("which", ["model", "data"])
def test_fifos_folders_and_devices_as_inputs_are_refused_without_blocking(files, capsys, which):
    folder, model, data = files
    fifo = folder / "fifo.h5"
    os.mkfifo(fifo)
    for bad, what in ((fifo, "is not a regular file"), (folder, "is a folder"), (Path("/dev/zero"), "not a regular file")):
        argv = [bad, "-d", data] if which == "model" else [model, "-d", bad]
        refused([*argv, "-o", folder / "out.h5"], folder, capsys, f"field '{which}'", what)


# --- outputs that must never replace an input or a non-file ---------------------------------------
def test_the_output_may_not_be_an_input_by_any_name(files, capsys, tmp_path):
    folder, model, data = files
    os.link(model, folder / "hardlink.h5")
    os.symlink(data, folder / "symlink.h5")
    config = folder / "study.yaml"
    config.write_text(f"model: {model}\n")
    for output, input_name in ((model, "model"), (folder / "hardlink.h5", "model"), (folder / "symlink.h5", "data"),
                               (folder / "." / "test_set.h5", "data")):
        refused([model, "-o", output], folder, capsys, "field 'output'", f"is the {input_name} of this run")
    refused(["--config", config, "-o", config], folder, capsys, "field 'output'", "is the config of this run")


def test_devices_fifos_and_folders_are_never_replaced(files, capsys):
    folder, model, _ = files
    os.mkfifo(folder / "fifo")
    (folder / "existing").mkdir()
    refused([model, "-o", "/dev/null"], folder, capsys, "field 'output'", "not a regular file")
    refused([model, "-o", folder / "fifo"], folder, capsys, "field 'output'", "not a regular file")
    refused([model, "-o", folder / "existing"], folder, capsys, "field 'output'", "is a folder")
    assert Path("/dev/null").is_char_device()


def test_an_empty_output_is_refused_as_empty_not_as_the_current_folder(files, capsys):
    folder, model, _ = files
    refused([model, "-o", ""], folder, capsys, "field 'output'", "empty; give a file name")
    with pytest.raises(aimcemu.FormatError, match="field 'output': empty"):
        aimcemu.run(model, output="")


def test_a_name_without_room_for_its_temporary_file_is_refused_before_the_run(files, capsys):
    """Review rev_C: a 250-byte name (legal: the limit is 255) failed with "File name too long" only
    after the whole run, when its temporary file (the name plus ".tmp-HOST-PID-N") was created."""
    folder, model, _ = files
    # ".", ".tmp-", this host's tag, "-", a 7-digit PID, "-", a 10-digit counter: the longest it adds
    fits = os.pathconf(folder, "PC_NAME_MAX") - (1 + 5 + len(aimcemu._core.files.host_tag()) + 1 + 7 + 1 + 10)
    long_name = "r" * 247 + ".h5"
    refused([model, "-o", str(folder / long_name)], folder, capsys, "field 'output'",
            "the file name is 250 bytes", f"at most {fits} bytes fit")
    refused([model, "-o", str(folder / ("r" * (fits - 2) + ".h5"))], folder, capsys, "field 'output'",
            f"the file name is {fits + 1} bytes")
    code, err = cli_run(["run", model, "-o", str(folder / ("r" * (fits - 3) + ".h5"))], capsys)
    assert code == 0, err


def test_a_trailing_slash_names_a_folder_for_the_default_file_name(files, capsys):
    folder, model, _ = files
    code, err = cli_run(["run", model, "-o", f"{folder / 'new'}/"], capsys)
    assert code == 0, err
    written = list((folder / "new").iterdir())
    assert len(written) == 1 and written[0].name.startswith("tiny_") and written[0].suffix == ".h5"
    assert not (folder / "new").is_file()


# --- files that lie about their contents (seeds of the fuzz corpora) -------------------------------
BAD_FILES = [
    ("model", "fuzz_model_file/bad-class_names_count.h5", "field 'class_names': 2 names for the 3 outputs"),
    ("model", "fuzz_model_file/bad-name_not_utf8.h5", "field 'name': not valid UTF-8"),
    ("model", "fuzz_model_file/bad-weights_claim_huge.h5", "field 'layers/conv/weights': shape"),
    ("model", "fuzz_model_file/bad-external_link.h5", "is an external link"),
    ("model", "fuzz_model_file/bad-truncated_half.h5", "field 'file': not a readable HDF5 file"),
    ("model", "fuzz_model_file/bad-not_hdf5.h5", "field 'file'"),
    ("data", "fuzz_dataset_file/bad-images_claim_1e9.h5", "needs 8000000000 bytes but the file stores"),
    ("data", "fuzz_dataset_file/bad-zero_images.h5", "field 'images': the data set holds no images"),
    ("data", "fuzz_dataset_file/bad-source_not_utf8.h5", "field 'source': not valid UTF-8"),
]


@pytest.mark.parametrize("which, seed, message", BAD_FILES, ids=[s.split("/")[1] for _, s, _ in BAD_FILES])
def test_bad_model_and_data_files_are_named(files, capsys, which, seed, message):
    folder, model, data = files
    bad = folder / Path(seed).name
    shutil.copy(CORPUS / seed, bad)
    argv = [bad, "-d", data] if which == "model" else [model, "-d", bad]
    refused([*argv, "-o", folder / "out.h5"], folder, capsys, f"{bad}: ", message)


def test_a_data_set_for_another_model_is_named(files, capsys, tmp_path):
    folder, model, _ = files
    shutil.copy(CORPUS / "fuzz_dataset_file" / "tiny.h5", folder / "other.h5")  # 6x6x2 images for a 6x6x1 model
    refused([model, "-d", folder / "other.h5", "-o", folder / "out.h5"], folder, capsys,
            "other.h5: field 'images': image shape [6, 6, 2] differs")


def test_no_temporary_file_is_left_by_any_refusal(files, capsys):
    folder, model, _ = files
    for argv in (["--chips", "0", "--mapping", "all"], ["--layers", ","], ["-o", "/dev/null"]):
        cli_run(["run", model, *argv], capsys)
    assert temporaries(folder) == []


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_starts(files, capsys, monkeypatch):
    """The check compares the run's arrays with physical memory, shown on machines that pretend to
    have 64 KiB and 1 KiB: 12 images of 6x6x4 + 3x3x4 + 4 activations, twice, take 4.3 KiB; 4096
    noisy rounds of 12 images' predictions and logits take 624 KiB."""
    from aimcemu import validate

    folder, model, data = files
    monkeypatch.setattr(validate, "physical_memory", lambda: 64 * 1024)
    refused([model, "-o", folder / "out.h5", "--mapping", "all", "--chips", "4096"], folder, capsys,
            "field 'chips': 4096 noisy rounds x 12 images need")
    monkeypatch.setattr(validate, "physical_memory", lambda: 1024)
    refused([model, "-o", folder / "out.h5"], folder, capsys, f"{data}: field 'images': 12 images need")


def test_the_memory_check_counts_only_the_activations_a_run_holds(files, capsys, monkeypatch):
    """Per image the tiny network has 144 + 36 + 4 activations (4: the output).  A run without
    noisy rounds holds only its stored layers and the output, once (the reference the PU's pass
    fills and the writer shares): with --layers none that is 4 x 12 = 48 bytes, so a 48-byte
    machine runs it and a 47-byte one refuses it.  With AIMC rounds the writer holds the whole reference (184 x 12) and at most two
    rounds' stored layers and output: 2304 bytes with --layers none, 6624 with --layers all."""
    from aimcemu import validate

    folder, model, _ = files
    monkeypatch.setattr(validate, "physical_memory", lambda: 48)
    code, err = cli_run(["run", model, "-o", folder / "digital.h5", "--layers", "none"], capsys)
    assert code == 0, err
    monkeypatch.setattr(validate, "physical_memory", lambda: 47)
    refused([model, "-o", folder / "out.h5", "--layers", "none"], folder, capsys, "field 'images': 12 images need")

    monkeypatch.setattr(validate, "physical_memory", lambda: 4096)
    code, err = cli_run(["run", model, "-o", folder / "aimc.h5", "--mapping", "all", "--layers", "none"], capsys)
    assert code == 0, err
    refused([model, "-o", folder / "out.h5", "--mapping", "all", "--layers", "all"], folder, capsys,
            "field 'images': 12 images need")


HDF5_CRASHES = Path(__file__).resolve().parent.parent / "fuzz" / "hdf5_crashes" / "fuzz_model_file"


@pytest.mark.parametrize("name", ["global-heap-read-segv.h5", "metadata-accumulator-null-read.h5",
                                  "free-invalid-pointer-abort.h5"])
def test_a_model_file_that_crashes_libhdf5_is_refused(files, capsys, name):
    """Found by fuzzing: files on which Debian's libhdf5 1.10.8 itself segfaults or aborts.
    Read in this process they kill it (shown in a child process first, so this test would fail
    without the checking process); through `aimcemu run` they are refused by name."""
    import subprocess
    import sys

    folder, _, data = files
    bad = folder / name
    shutil.copy(HDF5_CRASHES / name, bad)
    in_process = subprocess.run([sys.executable, "-c", "import sys; from aimcemu import _core; "
                                 "_core.files.set_check_helper(''); _core.load_model(sys.argv[1])", bad],
                                capture_output=True, text=True)
    if in_process.returncode >= 0:
        pytest.skip(f"this libhdf5 reads {name} without crashing (rc {in_process.returncode})")
    refused([bad, "-d", data, "-o", folder / "out.h5"], folder, capsys,
            f"{bad}: field 'file': corrupt: reading it crashed the HDF5 library in the checking process")


def test_a_relative_model_path_names_the_file_in_the_current_directory_after_a_chdir(tmp_path, monkeypatch):
    """Two folders hold a model.h5 of the same structure with other weights: a load after
    os.chdir reads the new folder's file, not the one where the (kept) checking process started."""
    from aimcemu import _core, modelfile

    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        modelfile.save_model(_core.zoo.resnet18(seed, 32, 10), tmp_path / folder / "model.h5")
    weights_of = {folder: modelfile.load_model(tmp_path / folder / "model.h5").layers[0].weights
                  for folder in ("a", "b")}
    assert not (weights_of["a"] == weights_of["b"]).all()
    for folder in ("a", "b", "a"):
        monkeypatch.chdir(tmp_path / folder)
        assert (modelfile.load_model("model.h5").layers[0].weights == weights_of[folder]).all(), folder
