"""analysis.prediction_ties against plain loops over images written from the definitions (tied:
the largest logit shared by 2+ classes; accuracy_low: every tie broken against the label;
accuracy_high: the label wins whenever it is among the maxima; accuracy_expected: 1/k when the
label is among k maxima), on a real noisy run of the embedded model and on a hand-built file
whose ties are known in closed form; and its refusals (predictions that are not the first
maximum of their logits, a file without logits, a damaged logits chunk); and the report's
"tied logits" column, present only for a run with ties."""
from __future__ import annotations

import itertools
import os
import re
import shutil
from fractions import Fraction

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, analysis
from aimcemu.report import report
from hostile import one_linear_layer_network
from test_analysis_docs import code_blocks, run_example

pytest.importorskip("xarray")


def ties_by_loops(logits, labels) -> dict:
    """The definitions, one image at a time, in exact arithmetic."""
    tied = low = high = 0
    expected = Fraction(0)
    for image_logits, label in zip(logits, labels):
        largest = max(int(v) for v in image_logits)
        maxima = [c for c, v in enumerate(image_logits) if int(v) == largest]
        tied += len(maxima) > 1
        if int(label) in maxima:
            high += 1
            expected += Fraction(1, len(maxima))
            low += len(maxima) == 1
    n = len(labels)
    return {"tied": tied / n, "accuracy_low": low / n, "accuracy_high": high / n,
            "accuracy_expected": float(expected / n)}


# --- a real run ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory):
    """The embedded model on its whole test set (450 images), every layer on pcm_like, each round
    without and with global drift compensation: without, at 1 h and 1 d, the output layer
    saturates and logits tie in every round; with, they tie in a few."""
    try:
        aimcemu.modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    out = tmp_path_factory.mktemp("ties") / "run.h5"
    return aimcemu.run(output=str(out), mapping="all", noise={"model": "pcm_like"}, t=(3600.0, 86400.0), chips=3,
                       rounds=2, seed=5, drift_compensation=["none", "global"], layers="none").path


def test_a_real_run_equals_the_loops_bit_for_bit(noisy_run):
    ties = analysis.prediction_ties(noisy_run)
    with h5py.File(noisy_run) as f:
        labels, logits = f["labels"][()], f["logits"][()]
        np.testing.assert_array_equal(ties["accuracy"].values, f["accuracy"][()])
        np.testing.assert_array_equal(ties["t"].values, f["t"][()])
        np.testing.assert_array_equal(ties["chip"].values, f["chip"][()])
        reference = ties_by_loops(f["reference_logits"][()], labels)
        assert ties["reference_accuracy"].item() == f["reference_accuracy"][()]
    assert ties.sizes["round"] == 24 and ties.attrs["images"] == 450
    for r in range(len(logits)):
        for name, value in ties_by_loops(logits[r], labels).items():
            assert ties[name].values[r] == value, (name, r)
    for name, value in reference.items():
        assert ties[f"reference_{name}"].item() == value, name
    # The run is a real test of ties: some round has them and they move its accuracy.
    uncompensated = ties.where(ties["drift_compensation"] == "none", drop=True)
    assert (uncompensated["tied"] > 0).all() and (ties["accuracy_high"] > ties["accuracy_low"]).any()
    assert ((ties["accuracy_low"] <= ties["accuracy"]) & (ties["accuracy"] <= ties["accuracy_high"])).all()
    assert ((ties["accuracy_low"] <= ties["accuracy_expected"])
            & (ties["accuracy_expected"] <= ties["accuracy_high"])).all()


def test_the_example_of_the_docs_gives_the_loops_means(noisy_run):
    """docs/analysis.md's example, run as written on the real run: per compensation and t the
    mean of each variable over its rounds, and the reference's tied share."""
    (block,) = [b for b in code_blocks("analysis.md", "python") if "prediction_ties" in b]
    table, reference_tied = run_example(block, noisy_run)[-2:]
    with h5py.File(noisy_run) as f:
        labels, logits, times, accuracy = f["labels"][()], f["logits"][()], f["t"][()], f["accuracy"][()]
        compensations = f["drift_compensation"].asstr()[()]
        assert reference_tied == ties_by_loops(f["reference_logits"][()], labels)["tied"]
    assert len(table) == 4
    for (compensation, t), row in table.iterrows():
        rounds = np.flatnonzero((times == t) & (compensations == compensation))
        counted = [ties_by_loops(logits[r], labels) for r in rounds]
        for name in ("tied", "accuracy_low", "accuracy_expected", "accuracy_high"):
            assert row[name] == pytest.approx(np.mean([c[name] for c in counted]), rel=1e-12), name
        assert row["accuracy"] == pytest.approx(accuracy[rounds].mean(), rel=1e-12)


def test_the_report_shows_each_rows_ties_and_tie_break_range(noisy_run, tmp_path):
    """Per compensation and t: the mean over its rounds of the loops' tied share, low and high,
    as the row's accuracy is the mean over its rounds."""
    page = report(noisy_run, tmp_path / "run.html", niu=False).read_text()
    assert "<th>chips</th><th>tied logits</th></tr>" in page
    with h5py.File(noisy_run) as f:
        labels, logits, times = f["labels"][()], f["logits"][()], f["t"][()]
        compensations = f["drift_compensation"].asstr()[()]
    for compensation, t in itertools.product(("none", "global"), (3600.0, 86400.0)):
        rounds = np.flatnonzero((times == t) & (compensations == compensation))
        counted = [ties_by_loops(logits[r], labels) for r in rounds]
        tied, low, high = (np.mean([c[name] for c in counted]) for name in ("tied", "accuracy_low", "accuracy_high"))
        assert len(rounds) == 6
        cell = f"<td>{100 * tied:.2g} % of images; any tie-break gives {low:.4f}-{high:.4f}</td>" if tied else "<td></td>"
        assert re.search(rf"<tr><td>{compensation}</td><td>{t:g}</td>(<td>[^<]*</td>){{3}}{cell}</tr>", page), \
            (compensation, t, cell)


def test_the_report_of_a_run_without_ties_is_unchanged(tmp_path):
    """The corpus's noisy run has no tied logits: no column, the table as before."""
    corpus = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file", "noisy.h5")
    path = shutil.copyfile(corpus, tmp_path / "noisy.h5")
    assert not analysis.prediction_ties(path)["tied"].any()
    page = report(path, tmp_path / "noisy.html", niu=False).read_text()
    assert "tied" not in page and "tie-break" not in page
    assert "<th>mean</th><th>95 % CI</th><th>chips</th></tr>" in page


# --- a file with known ties ---------------------------------------------------------------------
LABELS = np.array([0, 1, 2, 3])
# Per round the output layer's logits [image, class]: unique maxima and 2-, 3- and 4-way ties,
# the label among the tied classes or not, first among them or not.
ROUND_LOGITS = np.array([
    [[5, 1, 0, -3],            # label 0 the only maximum
     [7, 7, 0, 0],             # 2-way tie with label 1, class 0 first
     [127, 127, 127, 0],       # 3-way tie with label 2, class 0 first
     [127, 127, 3, 2]],        # 2-way tie without label 3
    [[-128, -128, -128, -128],  # 4-way tie, label 0 first
     [0, 7, 7, 0],             # 2-way tie, label 1 first
     [1, 2, 3, 4],             # label 2 not the maximum
     [0, 0, 0, 9]],            # label 3 the only maximum
], dtype=np.int8)
REFERENCE_LOGITS = np.array([[9, 0, 0, 0], [0, 9, 0, 0], [0, 0, 9, 0], [9, 0, 0, 8]], dtype=np.int8)
# The closed forms of ROUND_LOGITS: tied, low, high, expected, and the first-maximum accuracy.
KNOWN = [{"tied": 3 / 4, "accuracy_low": 1 / 4, "accuracy_high": 3 / 4,
          "accuracy_expected": float(Fraction(1 + Fraction(1, 2) + Fraction(1, 3), 4)), "accuracy": 1 / 4},
         {"tied": 2 / 4, "accuracy_low": 1 / 4, "accuracy_high": 3 / 4,
          "accuracy_expected": float(Fraction(Fraction(1, 4) + Fraction(1, 2) + 1, 4)), "accuracy": 3 / 4}]
REFERENCE_KNOWN = {"tied": 0.0, "accuracy_low": 3 / 4, "accuracy_high": 3 / 4, "accuracy_expected": 3 / 4,
                   "accuracy": 3 / 4}


def classifier():
    """One linear layer with 4 outputs: its activations are the logits the file stores."""
    return one_linear_layer_network("ties", 4)


def write_logits(path, round_logits=ROUND_LOGITS):
    """A results file (the core's writer, which stores the first-maximum predictions) whose
    reference and rounds have the given logits."""
    rounds = [(0, chip, 3600.0) for chip in range(len(round_logits))]
    writer = _core.ResultsWriter(os.fspath(path), classifier(), LABELS, rounds, "{}", "all", 1)
    writer.set_reference(0, REFERENCE_LOGITS.reshape(4, 1, 1, 4))
    for r, logits in enumerate(round_logits):
        writer.set_round(r, 0, logits.reshape(4, 1, 1, 4))
    writer.commit()
    return path


def test_known_ties_give_their_closed_forms(tmp_path):
    ties = analysis.prediction_ties(write_logits(tmp_path / "known.h5"))
    for r, known in enumerate(KNOWN):
        assert {name: ties[name].values[r] for name in known} == known, r
        assert ties_by_loops(ROUND_LOGITS[r], LABELS) == {k: v for k, v in known.items() if k != "accuracy"}
    assert {name: ties[f"reference_{name}"].item() for name in REFERENCE_KNOWN} == REFERENCE_KNOWN
    np.testing.assert_array_equal(ties["chip"].values, [0, 1])
    np.testing.assert_array_equal(ties["round"].values, [0, 1])


def test_a_digital_run_gives_the_reference_only(tmp_path):
    ties = analysis.prediction_ties(write_logits(tmp_path / "digital.h5", ROUND_LOGITS[:0]))
    assert ties.sizes["round"] == 0 and ties["tied"].shape == (0,)
    assert {name: ties[f"reference_{name}"].item() for name in REFERENCE_KNOWN} == REFERENCE_KNOWN


# --- refusals -----------------------------------------------------------------------------------
def test_predictions_that_are_not_the_first_maximum_are_refused(tmp_path):
    """Image 3 of round 0 ties classes 0 and 1 (label 3): predicting 1 instead of 0 keeps the
    accuracy, so the file passes its check (which reads no logits), but it is not the argmax
    with the first maximum winning that every count here assumes."""
    path = write_logits(tmp_path / "edited.h5")
    with h5py.File(path, "r+") as f:
        f["predictions"][0, 3] = 1
    analysis.open_run(path)  # the file's own check accepts it
    with pytest.raises(aimcemu.FormatError, match=rf"^{path}: field 'predictions': predictions\[0, 3\] is class 1, "
                                                  r"but the first maximum of logits\[0, 3\] is class 0"):
        analysis.prediction_ties(path)


def test_reference_predictions_that_are_not_the_first_maximum_are_refused(tmp_path):
    path = write_logits(tmp_path / "edited.h5")
    with h5py.File(path, "r+") as f:
        f["reference_logits"][1] = [0, 9, 9, 0]  # still class 1 first; now class 1 and 2 tie
        f["reference_logits"][3] = [0, 0, 8, 9]  # stored prediction 0, the first maximum is 3
    with pytest.raises(aimcemu.FormatError, match=rf"^{path}: field 'reference_predictions': "
                                                  r"reference_predictions\[3\] is class 0, but the first maximum of "
                                                  r"reference_logits\[3\] is class 3 \(1 image\(s\) disagree\)"):
        analysis.prediction_ties(path)


def test_a_file_without_logits_is_refused_by_name(tmp_path):
    path = write_logits(tmp_path / "no_logits.h5")
    with h5py.File(path, "r+") as f:
        del f["logits"]
    with pytest.raises(aimcemu.FormatError, match=rf"^{path}: field 'logits'"):
        analysis.prediction_ties(path)


def test_a_damaged_logits_chunk_is_named(noisy_run, tmp_path):
    """The check reads no logits: a chunk that does not inflate is h5py's bare OSError unless
    named."""
    path = shutil.copyfile(noisy_run, tmp_path / "damaged.h5")
    with h5py.File(path) as f:
        chunk = f["logits"].id.get_chunk_info(1)
    with open(path, "r+b") as raw:
        raw.seek(chunk.byte_offset + chunk.size // 4)
        raw.write(b"\xff" * (chunk.size // 2))
    with pytest.raises(aimcemu.FormatError, match=rf"^{path}: field 'logits': cannot be read"):
        analysis.prediction_ties(path)
