"""examples/cpp/noisy_rounds (the emulation loop from C++, no Python) gives exactly the round
accuracies of `aimcemu.run` with the same study: the C++ API and the Python front end drive the
same NIU programs and the same PU.  The example is built with the C++ core in build/
(scripts/test.sh builds it before running pytest)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import aimcemu

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "build" / "examples" / "cpp" / "noisy_rounds"
MODEL, DATA = ROOT / "models" / "digits" / "model.h5", ROOT / "models" / "digits" / "test_set.h5"

pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason=f"{EXAMPLE} not built (scripts/test.sh builds it)")


def example_counts(*flags) -> tuple[int, list[int], str]:
    """(digital correct count, [correct count of each round], the output) of one example run."""
    result = subprocess.run([EXAMPLE, MODEL, DATA, *map(str, flags)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    counts = [int(c) for c in re.findall(r"accuracy [0-9.]+ \((\d+)/\d+\)", result.stdout)]
    return counts[0], counts[1:], result.stdout


def test_the_cpp_example_matches_aimcemu_run_round_for_round(tmp_path):
    digital, rounds, _ = example_counts("--t", 86400, "--rounds", 3, "--seed", 5)
    summary = aimcemu.run(MODEL, DATA, mapping="all", noise="pcm_like", t=[86400], rounds=3, chips=1, seed=5,
                          drift_compensation="none", layers="none", output=tmp_path / "run.h5", progress=False)
    images = summary.images
    assert digital == round(summary.accuracy * images)
    assert rounds == [round(a * images) for a in summary.round_accuracy]
    assert len(set(rounds)) > 1  # fresh read noise each round: the rounds are not one round repeated


def test_the_cpp_example_gives_the_same_bytes_for_any_thread_count():
    _, _, one = example_counts("--rounds", 2, "--seed", 9, "--threads", 1)
    _, _, three = example_counts("--rounds", 2, "--seed", 9, "--threads", 3)
    assert one == three


def test_the_cpp_example_names_a_bad_file():
    result = subprocess.run([EXAMPLE, MODEL, MODEL], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert str(MODEL) in result.stderr
