"""scripts/tour_results.py compare: what it reports and what it must ignore."""
import importlib.util
import json
from pathlib import Path

import numpy as np

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tour_results.py"


def _tour_results():
    spec = importlib.util.spec_from_file_location("tour_results", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tour_folder(root: Path, holder: str, values) -> Path:
    (root / "sweep").mkdir(parents=True)
    (root / "tour.json").write_text(json.dumps({"repo": "/checkout/" + root.name, "out": str(root)}))
    (root / "sweep" / ".aimcemu.lock").write_text(holder)
    np.save(root / "activations.npy", np.asarray(values, dtype=np.int8))
    (root / "models.txt").write_text("resnet18\n")
    return root


def test_lock_files_of_two_runs_are_not_a_difference(tmp_path):
    tour = _tour_results()
    a = _tour_folder(tmp_path / "a", "host-a pid 101 started 2026-12-01T10:00:00", [1, 2, 3])
    b = _tour_folder(tmp_path / "b", "host-b pid 202 started 2026-12-01T11:30:00", [1, 2, 3])
    assert tour.compare(a, b) == []


def test_a_changed_array_is_reported(tmp_path):
    tour = _tour_results()
    a = _tour_folder(tmp_path / "a", "pid 1", [1, 2, 3])
    b = _tour_folder(tmp_path / "b", "pid 1", [1, 2, 4])
    assert tour.compare(a, b) == ["activations.npy: arrays differ"]


def test_a_file_only_in_one_run_is_reported(tmp_path):
    tour = _tour_results()
    a = _tour_folder(tmp_path / "a", "pid 1", [1])
    b = _tour_folder(tmp_path / "b", "pid 1", [1])
    (b / "extra.txt").write_text("x")
    [difference] = tour.compare(a, b)
    assert "only in B ['extra.txt']" in difference
