"""Results files whose layout is sound but whose values are not: the core's reader refuses values
the layout forbids (docs/hdf5_layout.md, "Reading"), open_sweep refuses a task file whose rounds
do not fit the sweep's grid, and a damaged activations chunk (which the check does not read) is
named when it is read.  Every refusal is a FormatError naming the file and the field; `aimcemu
report` turns it into exit status 2 and one line, without a traceback."""
from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import analysis, cli, results
from aimcemu.report import report

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


def noisy_copy(target, edit=None):
    """The corpus' noisy.h5 (5 layers, conv and fc stored; 2 compensations x 2 chips x 2 t, 4
    images, 3 classes) copied to `target`, then edit(h5py file) applied."""
    shutil.copyfile(os.path.join(CORPUS, "noisy.h5"), target)
    if edit is not None:
        with h5py.File(target, "r+") as f:
            edit(f)
    return target


def replaced(name, values):
    def edit(f):
        f[name][...] = values(f[name][()]) if callable(values) else values
    return edit


def at(name, index, value):
    """Element `index` of dataset `name` set to `value`."""
    def edit(f):
        f[name][index] = value
    return edit


def both(*edits):
    def edit(f):
        for one in edits:
            one(f)
    return edit


def in_every_group(name, change):
    """The round coordinate `name` changed the same way at the root and in every layer group (a
    file whose coordinates agree with each other, but not with a sweep)."""
    def edit(f):
        for group in [f] + [f["layers"][n] for n in f["layers"]]:
            values = group[name].asstr()[()] if name == "drift_compensation" else group[name][()]
            values = change(values.copy())
            if name == "drift_compensation":
                del group[name]
                group.create_dataset(name, data=values.astype(object), dtype=h5py.string_dtype())
            else:
                group[name][...] = values
    return edit


def first(value):
    def change(values):
        values[0] = value
        return values
    return change


FORBIDDEN = {
    "cosine_above_one": (replaced("layers/conv/cosine", 7.0), "layers/conv/cosine", "values must be in -1..1"),
    "cosine_nan": (replaced("layers/fc/cosine", np.nan), "layers/fc/cosine", "values must be in -1..1"),
    "snr_nan": (replaced("layers/pool/snr_db", np.nan), "layers/pool/snr_db", "NaN"),
    # The metrics of a round derive from the same sums: +inf dB exactly when no element differs,
    # then cosine 1; -inf dB (all-zero reference) with cosine 0.
    "snr_inf_with_mismatches": (at("layers/conv/snr_db", 0, np.inf), "layers/conv/snr_db",
                                "round 0: inf dB contradicts mismatch_rate 0.30"),
    "no_mismatch_with_finite_snr": (at("layers/fc/mismatch_rate", 2, 0.0), "layers/fc/snr_db",
                                    "round 2: 8.07.* dB contradicts mismatch_rate 0.000"),
    "no_mismatch_cosine_below_one": (both(at("layers/pool/mismatch_rate", 1, 0.0), at("layers/pool/snr_db", 1, np.inf)),
                                     "layers/pool/cosine", "round 1: 0.99.* where no element differs"),
    "snr_minus_inf_cosine_nonzero": (at("layers/mix/snr_db", 3, -np.inf), "layers/mix/cosine",
                                     "round 3: 0.88.* where snr_db is -inf"),
    "label_of_no_class": (replaced("labels", [2, 1, 99, 0]), "labels", "label 99 outside 0..2"),
    "accuracy_of_other_predictions": (replaced("accuracy", lambda a: a[::-1]), "accuracy",
                                      "round 0: stored 0.5.*predictions match 1 of 4 labels"),
    "predictions_of_other_accuracy": (replaced("predictions", 0), "accuracy", "round 3: stored 0.5.*match 1 of 4"),
    "prediction_of_no_class": (replaced("predictions", lambda p: np.where(p == 2, 5, p)), "predictions",
                               "class index 5 outside 0..2"),
    "reference_accuracy_of_other_predictions": (replaced("reference_accuracy", 0.75), "reference_accuracy",
                                                "stored 0.75.*reference_predictions match 1 of 4"),
    "layer_t_differs": (replaced("layers/conv/t", 123.0), "layers/conv/t", "t at round 0 differs from the root.s"),
    "layer_chip_differs": (replaced("layers/fc/chip", 1), "layers/fc/chip", "chip at round 0 differs"),
    "layer_niu_round_differs": (replaced("layers/mix/niu_round", 3), "layers/mix/niu_round", "niu_round at round 0 differs"),
}


@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_the_reader_refuses_values_the_layout_forbids(case, tmp_path):
    edit, field, what = FORBIDDEN[case]
    path = noisy_copy(tmp_path / f"{case}.h5", edit)
    with pytest.raises(aimcemu.FormatError, match=rf"{case}\.h5: field '{field}': {what}"):
        results.open_run(path)


def test_a_layer_group_with_other_compensations_than_the_root_is_refused(tmp_path):
    def edit(f):
        group = f["layers/fc"]
        names = group["drift_compensation"].asstr()[()][::-1].copy()
        del group["drift_compensation"]
        group.create_dataset("drift_compensation", data=names.astype(object), dtype=h5py.string_dtype())
    path = noisy_copy(tmp_path / "comp.h5", edit)
    with pytest.raises(aimcemu.FormatError,
                       match=r"comp\.h5: field 'layers/fc/drift_compensation': drift_compensation at round 0 differs"):
        results.open_run(path)


def test_the_values_the_layout_allows_still_read(tmp_path):
    """+-inf SNR (exact round, lost signal), cosine -1..1 (to rounding), every corpus file the writer
    made."""
    def edit(f):
        # Round 0 exact (no element differs: +inf dB, cosine 1), round 1 a lost signal (all-zero
        # reference: -inf dB, cosine 0); the metrics of a round agree with each other.
        f["layers/conv/snr_db"][:2] = [np.inf, -np.inf]
        f["layers/conv/mismatch_rate"][0] = 0.0
        # 1 + 1 ulp: the writer's sum / sqrt(product) can round past 1 for a round proportional
        # to the reference
        f["layers/conv/cosine"][:4] = [1.0, 0.0, -1.0, np.nextafter(1.0, 2.0)]
    ds = results.open_run(noisy_copy(tmp_path / "edges.h5", edit))
    assert ds["snr_db"].sel(layer="conv").values[:2].tolist() == [np.inf, -np.inf]
    for name in ("noisy.h5", "digital.h5"):
        results.open_run(os.path.join(CORPUS, name))


# --- a sweep's task files ------------------------------------------------------------------------
def sweep_of_noisy_copies(folder, edit_second):
    """A sweep folder of two task files, copies of noisy.h5 (whose config: 2 chips, t 0 and 3600,
    1 round, drift compensations none and global), the second edited."""
    (folder / "tasks").mkdir(parents=True)
    with h5py.File(os.path.join(CORPUS, "noisy.h5")) as f:
        config = json.loads(f.attrs["config"])
    tasks = []
    for i in range(2):
        name = f"tasks/{i}-p{i}.h5"
        noisy_copy(folder / name, edit_second if i == 1 else None)
        tasks.append({"id": f"p{i}", "file": name, "point": {"p": i}, "run": {}})
    index = {"format": results.FORMAT, "format_version": results.FORMAT_VERSION, "config": config,
             "axes": {"p": [0, 1]}, "tasks": tasks}
    (folder / results.INDEX_FILE).write_text(json.dumps(index))
    return folder


OFF_GRID = {
    "chip": (in_every_group("chip", first(7)), "round 0: chip 7 outside 0..1"),
    "t": (in_every_group("t", first(5.0)), "round 0: t = 5 s is not among the sweep's times"),
    "drift_compensation": (in_every_group("drift_compensation", first("other")),
                           "round 0: 'other' is not among the sweep's drift compensations"),
    "round": (in_every_group("chip", lambda chips: np.zeros_like(chips)), "more than 1 rounds for chip 0"),
}


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("field", sorted(OFF_GRID))
def test_a_task_file_off_the_sweeps_grid_is_refused_naming_it_and_the_field(field, lazy, tmp_path):
    """Such a file passes the file's own check (its coordinates agree with each other); it used
    to give an IndexError (chip 7 of 2) or a bare KeyError '5.0' (t)."""
    edit, what = OFF_GRID[field]
    folder = sweep_of_noisy_copies(tmp_path / "sweep", edit)
    task = os.fspath(folder / "tasks" / "1-p1.h5")
    with pytest.raises(aimcemu.FormatError, match=rf"{task}: field '{field}': .*{what}"):
        analysis.open_sweep(folder, lazy=lazy)["accuracy"].values


def test_report_names_a_task_file_off_the_grid_without_a_traceback(tmp_path, capsys):
    folder = sweep_of_noisy_copies(tmp_path / "sweep", OFF_GRID["chip"][0])
    assert cli.main(["report", str(folder), "--no-niu"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{folder / 'tasks' / '1-p1.h5'}: field 'chip': round 0: chip 7 outside 0..1" in err


# --- a damaged activations chunk -----------------------------------------------------------------
def damage_first_chunk(f, layer="conv"):
    """Overwrites the middle of the first deflated chunk of a layer's activations: the metadata
    stays sound (the file passes its check), the chunk no longer inflates."""
    info = f[f"layers/{layer}/activations"].id.get_chunk_info(0)
    return info.byte_offset + info.size // 4, info.size // 2


@pytest.fixture
def damaged(tmp_path):
    path = noisy_copy(tmp_path / "damaged.h5")
    with h5py.File(path) as f:
        offset, size = damage_first_chunk(f)
    with open(path, "r+b") as raw:
        raw.seek(offset)
        raw.write(b"\xff" * size)
    results.open_run(path)  # the check reads no activations: the file is accepted
    return path


@pytest.mark.parametrize("view", ["error_stats", "activation_histograms", "open_layer", "report"])
def test_a_damaged_activations_chunk_is_named_by_every_view_that_reads_it(view, damaged, tmp_path):
    """h5py's bare OSError ("filter returned failure during read") named neither file nor field."""
    read = {"error_stats": lambda: analysis.error_stats(damaged, ["conv"]),
            "activation_histograms": lambda: analysis.activation_histograms(damaged, ["conv"]),
            "open_layer": lambda: analysis.open_layer(damaged, "conv").load(),
            "report": lambda: report(damaged, tmp_path / "page.html", layers=["conv"], niu=False)}[view]
    with pytest.raises(aimcemu.FormatError, match=rf"{damaged}: field 'layers/conv/activations': cannot be read"):
        read()


def test_open_layer_reads_the_sound_parts_of_a_damaged_file(damaged):
    """Only the damaged block fails; the reference and the other rounds read as h5py reads them."""
    ds = analysis.open_layer(damaged, "conv")
    with h5py.File(damaged) as f:
        np.testing.assert_array_equal(ds["reference"].values, f["layers/conv/reference"][()])
        np.testing.assert_array_equal(ds["activations"].isel(round=slice(1, None)).values,
                                      f["layers/conv/activations"][1:])
    assert ds["activations"].chunks[0] == (1,) * 8
    assert ds["activations"].dims == ("round", "image", "y", "x", "channel")
    assert ds["activations"].dtype == np.int8


@pytest.mark.parametrize("view", ["error_stats", "activation_histograms", "open_layer"])
def test_a_layer_that_is_not_in_the_file_is_named_with_the_file(view, tmp_path):
    """The KeyError said "this results file", which in a loop over files names none."""
    path = noisy_copy(tmp_path / "run.h5")
    read = {"error_stats": lambda: analysis.error_stats(path, ["nope"]),
            "activation_histograms": lambda: analysis.activation_histograms(path, ["nope"]),
            "open_layer": lambda: analysis.open_layer(path, "nope")}[view]
    with pytest.raises(KeyError, match=rf"'nope' is not a layer of {path} \(layers: conv, pool, mix, avg, fc\)"):
        read()
