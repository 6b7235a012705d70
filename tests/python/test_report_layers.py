"""``aimcemu report --layers``: a name that is no layer of the results, and layers asked for where
no file stores activations (or the run is digital), each get their own message and exit status 2;
`--layers stem` on a file without stored activations used to be ignored without a word, and
`--layers nope` said "has no stored activations" of a name that is no layer at all."""
from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest

from aimcemu import cli
from aimcemu.report import report

CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


@pytest.fixture
def noisy(tmp_path):
    """noisy.h5: layers conv, pool, mix, avg, fc; activations of conv and fc stored."""
    return shutil.copyfile(os.path.join(CORPUS, "noisy.h5"), tmp_path / "noisy.h5")


@pytest.fixture
def unstored(tmp_path):
    """noisy.h5 with no layer's activations stored (as a run with layers="none" writes it: the flag
    says so, and the reader no longer looks for the arrays)."""
    path = shutil.copyfile(os.path.join(CORPUS, "noisy.h5"), tmp_path / "unstored.h5")
    with h5py.File(path, "r+") as f:
        for group in f["layers"].values():
            group.attrs["activations_stored"] = np.int8(0)  # the writer's type
    return path


def report_cli(capsys, *args) -> tuple[int, str]:
    code = cli.main(["report", *map(str, args), "--no-niu"])
    return code, capsys.readouterr().err


def test_a_name_that_is_no_layer_is_refused_as_such(noisy, capsys, tmp_path):
    code, err = report_cli(capsys, noisy, "--layers", "conv,nope", "-o", tmp_path / "page.html")
    assert code == 2 and "Traceback" not in err
    assert f"'nope' is not a layer of {noisy} (layers: conv, pool, mix, avg, fc)" in err
    assert not (tmp_path / "page.html").exists()


def test_layers_asked_of_a_file_without_stored_activations_are_refused(unstored, capsys, tmp_path):
    code, err = report_cli(capsys, unstored, "--layers", "conv", "-o", tmp_path / "page.html")
    assert code == 2
    assert f"histograms of conv asked for, but {unstored} stores no activations" in err
    assert not (tmp_path / "page.html").exists()


def test_layers_asked_of_a_digital_run_are_refused(capsys, tmp_path):
    digital = shutil.copyfile(os.path.join(CORPUS, "digital.h5"), tmp_path / "digital.h5")
    code, err = report_cli(capsys, digital, "--layers", "fc", "-o", tmp_path / "page.html")
    assert code == 2
    assert f"histograms of fc asked for, but {digital} has no noisy rounds (a digital run)" in err


def test_a_layer_that_is_not_stored_keeps_its_own_message(noisy, tmp_path):
    with pytest.raises(ValueError, match=rf"layer 'pool' has no stored activations in {noisy} \(stored: conv, fc\)"):
        report(noisy, tmp_path / "page.html", layers=["pool"], niu=False)


def test_stored_layers_and_no_layers_still_make_a_page(noisy, unstored, tmp_path):
    page = report(noisy, tmp_path / "a.html", layers=["fc", "conv"], niu=False).read_text()
    assert "Activation histograms" in page
    page = report(unstored, tmp_path / "b.html", niu=False).read_text()
    assert "No activations stored" in page
