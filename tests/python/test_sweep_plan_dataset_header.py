"""A sweep's plan checks each data set from its header and labels, not its images.

Planning (aimcemu.sweep, `aimcemu sweep --check`, a Dask client) checks that a data set's images
fit the network (shape, dtype, count, input_frac_bits) and that its labels fit the network's
outputs, as the run would, but leaves the images' values unread (load_dataset_header): an
ImageNet-sized set would otherwise be read whole, 7.5 GB, before any task runs.  The checking
process reads the file in the same header-only mode (so a hostile header is still refused there
first); the run then reads and checks the images themselves.  Here: a data set with a damaged
image chunk plans and its task fails naming the file and 'images'; a bad header or bad labels
is refused while planning with the same message as before; the header read agrees with the
whole read on every file of the data set fuzz corpus."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

import aimcemu
from aimcemu import _core, cli, modelfile
from conftest import digits_subset

sweeps = __import__("importlib").import_module("aimcemu.sweeps")

CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "fuzz_dataset_file"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """(model path, data set path, network, images, labels): 60 images of the embedded test set."""
    return digits_subset(tmp_path_factory, 60)


def sweep_config(folder, data) -> dict:
    return {"output": str(folder), "data": str(data), "noise": {"model": "pcm_like"}, "mapping": "all",
            "t": [1.0], "chips": 1, "seed": 3, "grid": {"noise.prog_noise_scale": [1.0]}}


def damage_first_image_chunk(path) -> None:
    """Overwrites the middle of the images' first stored chunk (deflated) with 0xFF bytes: the
    header and labels stay sound, inflating that chunk fails."""
    with h5py.File(path, "r") as f:
        info = f["images"].id.get_chunk_info(0)
    assert info.size > 16
    with open(path, "r+b") as f:
        f.seek(info.byte_offset + 4)
        f.write(b"\xff" * (info.size - 8))


def write_dataset(path, images, labels, input_frac_bits, labels_dtype=np.int64, images_dtype=np.int8):
    """A data set file written with h5py, for headers save_dataset refuses to write."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "aimcemu-dataset"
        f.attrs["format_version"] = np.int32(1)
        f.attrs["source"] = "test"
        f.attrs["description"] = ""
        f.attrs["input_frac_bits"] = np.int32(input_frac_bits)
        f.create_dataset("images", data=np.asarray(images).astype(images_dtype))
        f.create_dataset("labels", data=np.asarray(labels).astype(labels_dtype))


def test_a_data_set_with_a_damaged_image_chunk_plans_and_its_task_fails_naming_file_and_field(tmp_path, digits, capsys):
    # Was: the plan read every image (and so did its checking process), and refused the sweep.
    _, data, _, _, _ = digits
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(Path(data).read_bytes())
    damage_first_image_chunk(damaged)
    with pytest.raises(aimcemu.FormatError, match=f"^{damaged}: field 'images': "):
        modelfile.load_dataset(damaged)   # the damage is real: the whole read refuses it
    cfg = sweep_config(tmp_path / "s", damaged)
    assert len(sweeps.plan(cfg).tasks) == 1
    config_file = tmp_path / "sweep.yaml"
    config_file.write_text(yaml.safe_dump(cfg))
    assert cli.main(["sweep", "-c", str(config_file), "--check"]) == 0
    assert "1 tasks" in capsys.readouterr().out
    with pytest.raises(aimcemu.FormatError, match=f"^{damaged}: field 'images': cannot be read"):
        aimcemu.sweep(cfg, workers=1, progress=False)


def bad_headers(tmp_path, images, labels, frac_bits):
    """(name, data set file, the message its load_dataset + check_dataset_fits gives today)."""
    outputs = 10
    cases = []
    too_big = labels.copy()
    too_big[3] = outputs
    path = tmp_path / "label_too_big.h5"
    modelfile.save_dataset(images, too_big, path, input_frac_bits=frac_bits)
    cases.append(("label_too_big", path, f"{path}: field 'labels': label {outputs} of image 3 is not below "
                                         f"the model's {outputs} outputs"))
    path = tmp_path / "negative_label.h5"
    negative = labels.copy()
    negative[5] = -2
    write_dataset(path, images, negative, frac_bits)
    cases.append(("negative_label", path, f"{path}: field 'labels': negative label -2"))
    path = tmp_path / "label_beyond_int64.h5"  # was clipped by HDF5 and named as 9223372036854775807
    huge = labels.astype(np.uint64)
    huge[2] = 2**63 + 5
    write_dataset(path, images, huge, frac_bits, labels_dtype=np.uint64)
    cases.append(("label_beyond_int64", path, f"{path}: field 'labels': label {2**63 + 5} of image 2 is beyond "
                                              "any class index"))
    path = tmp_path / "labels_short.h5"
    write_dataset(path, images, labels[:-1], frac_bits)
    cases.append(("labels_short", path, f"{path}: field 'labels': expected shape [{len(labels)}] (one per image)"))
    path = tmp_path / "labels_float.h5"
    write_dataset(path, images, labels, frac_bits, labels_dtype=np.float32)
    cases.append(("labels_float", path, f"{path}: field 'labels': expected an integer type"))
    path = tmp_path / "frac_bits.h5"
    write_dataset(path, images, labels, frac_bits + 1)
    cases.append(("frac_bits", path, f"{path}: field 'input_frac_bits': images were quantized with {frac_bits + 1}"))
    path = tmp_path / "images_int16.h5"
    write_dataset(path, images, labels, frac_bits, images_dtype=np.int16)
    cases.append(("images_int16", path, f"{path}: field 'images': expected int8"))
    path = tmp_path / "images_shape.h5"
    write_dataset(path, images[:, :7], labels, frac_bits)
    cases.append(("images_shape", path, f"{path}: field 'images': image shape [7, 8, 1] differs from the model's input"))
    return cases


def test_a_bad_header_or_bad_labels_is_refused_while_planning_with_todays_message(tmp_path, digits, capsys):
    model, _, net, images, labels = digits
    frac_bits = net.input_frac_bits
    for name, path, message in bad_headers(tmp_path, images, labels, frac_bits):
        with pytest.raises(aimcemu.FormatError) as whole:   # today's message: the whole read and check
            modelfile.load_dataset(path, net)
        assert str(whole.value).startswith(message), name
        with pytest.raises(aimcemu.FormatError) as planned:
            sweeps.plan(sweep_config(tmp_path / "s", path))
        assert str(planned.value) == str(whole.value), name
        config_file = tmp_path / "sweep.yaml"
        config_file.write_text(yaml.safe_dump(sweep_config(tmp_path / "s", path)))
        assert cli.main(["sweep", "-c", str(config_file), "--check"]) == 2
        assert str(whole.value) in capsys.readouterr().err, name
        assert not (tmp_path / "s").exists()


def test_the_header_read_gives_what_the_whole_read_gives_but_the_images(digits):
    _, data, net, images, labels = digits
    header = modelfile.load_dataset_header(data, net)
    whole = modelfile.load_dataset(data, net)
    assert "images" not in header
    assert header["image_shape"] == tuple(images.shape[1:]) and header["count"] == len(labels)
    np.testing.assert_array_equal(header["labels"], whole["labels"])
    for key in ("source", "description", "input_frac_bits"):
        assert header[key] == whole[key]


@pytest.mark.parametrize("corpus_file", sorted(p.name for p in CORPUS.glob("*.h5")))
def test_the_header_read_refuses_what_the_whole_read_refuses_but_image_values(corpus_file):
    # Every hostile data set of the fuzz corpus: the same error both ways, unless the whole read's is
    # about the images' values (then the header read passes and the run finds it).
    path = os.fspath(CORPUS / corpus_file)
    try:
        modelfile.load_dataset(path)
        whole = None
    except aimcemu.FormatError as exc:
        whole = str(exc)
    try:
        modelfile.load_dataset_header(path)
        header = None
    except aimcemu.FormatError as exc:
        header = str(exc)
    if whole is not None and header is None:
        assert whole.startswith(f"{path}: field 'images': cannot be read"), whole
    else:
        assert header == whole


def run_helper(*args, weights_file=None) -> list[tuple[str, str]]:
    """Runs aimcemu-check-file (with `weights_file` open read-write on its descriptor 3, where a
    model-weights request hands the weights over); each file's report as (status, detail), the
    NULs between source, field and message shown as ' | '."""
    helper = _core.files.check_helper()
    if not helper:
        pytest.skip("this build has no checking process")
    command = [helper, *args]
    if weights_file is not None:
        command = ["bash", "-c", 'exec "$@" 3<>"$WEIGHTS"', "bash", *command]
    env = {**os.environ, "WEIGHTS": os.fspath(weights_file or "")}
    out = subprocess.run(command, capture_output=True, check=True, env=env).stdout.decode()
    reports = []
    while out:
        length, rest = out.split(":", 1)
        record, out = rest[:int(length)], rest[int(length) + 1:]
        status, _, detail = record.partition("\n")
        reports.append((status, detail.replace("\0", " | ")))
    return reports


def test_the_checking_process_reads_a_data_set_header_only_in_header_mode_and_still_checks_it(tmp_path, digits):
    model, data, net, images, labels = digits
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(Path(data).read_bytes())
    damage_first_image_chunk(damaged)
    assert run_helper("dataset-header", str(damaged)) == [("ok", "")]
    [(status, detail)] = run_helper("dataset", str(damaged))
    assert status == "format-error" and detail.startswith(f"{damaged} | images | cannot be read")
    bad_label = tmp_path / "bad_label.h5"
    write_dataset(bad_label, images, np.where(np.arange(len(labels)) == 2, -1, labels), net.input_frac_bits)
    assert run_helper("dataset-header", str(bad_label)) == [
        ("format-error", f"{bad_label} | labels | negative label -1")]
    # Beside a model (the request a plan's model load sends): the weights go to descriptor 3.
    weights = tmp_path / "weights.bin"
    reports = run_helper("model-weights+dataset-header", str(model), str(damaged), weights_file=weights)
    assert [r[0] for r in reports] == ["ok", "ok"] and reports[0][1].startswith("weights ")
    reports = run_helper("model-weights+dataset-header", str(model), str(bad_label), weights_file=weights)
    assert reports[1] == ("format-error", f"{bad_label} | labels | negative label -1")
    reports = run_helper("model-weights", str(model), str(damaged), weights_file=weights)
    assert reports[1][0] == "format-error" and reports[1][1].startswith(f"{damaged} | images | ")


def test_load_dataset_after_a_header_only_check_checks_the_images(tmp_path, digits):
    model, data, net, _, _ = digits
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(Path(data).read_bytes())
    damage_first_image_chunk(damaged)
    _, check = modelfile.load_model_and_check_dataset(model, damaged, header_only=True)
    with pytest.raises(aimcemu.FormatError, match=f"^{damaged}: field 'images': cannot be read"):
        modelfile.load_dataset(damaged, net, check)
    _, check = modelfile.load_model_and_check_dataset(model, data, header_only=True)
    assert modelfile.load_dataset(data, net, check)["images"].shape == (60, 8, 8, 1)
