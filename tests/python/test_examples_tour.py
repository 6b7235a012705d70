"""examples/tour.ipynb runs from top to bottom on the embedded model (nbclient, a fresh kernel).

The kernel inherits this process's environment (PYTHONPATH, AIMCEMU_CORE_DIR), so it tests the
same aimcemu as the rest of the suite.  It runs in a temporary folder, where the notebook writes
results/tour.h5.
"""
from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("xarray")
pytest.importorskip("matplotlib")

TOUR = Path(__file__).resolve().parents[2] / "examples" / "tour.ipynb"


def test_tour_notebook_runs(tmp_path):
    from aimcemu import analysis, modelfile

    try:
        modelfile.embedded_paths()
    except FileNotFoundError:
        pytest.skip("the embedded model is not shipped in this checkout")
    notebook = nbformat.read(TOUR, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "commit the tour without outputs"
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()   # raises CellExecutionError, with the cell and traceback, on any error
    results = tmp_path / "results" / "tour.h5"
    run = analysis.open_run(results)
    assert sorted(set(run["drift_compensation"].values)) == ["global", "none"]
    assert len(run["round"]) == 3 * 4 * 2          # chips x t x compensations
    pictures = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
                if "image/png" in o.get("data", {})]
    assert len(pictures) == 2                       # activation drift and accuracy against t
