"""examples/cpp/noisy_rounds reads --seed, --rounds and --threads as whole numbers: a fraction, a
sign, an exponent or a value out of range is refused with a message naming the flag (exit 2),
never rounded, wrapped or cast.  Read through a double, seeds above 2^53 merged with their
neighbours, --rounds 1.9 ran one round, --seed -1 wrapped to 2^64 - 1, --seed 1e30 was undefined
behaviour and --rounds 1e12 said "must be >= 1".  The example is looked for in build/ (what
scripts/test.sh builds) or build-mine/ (a developer's own build folder, docs/DEVELOPING.md)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import aimcemu

ROOT = Path(__file__).resolve().parents[2]
BUILT = [ROOT / folder / "examples" / "cpp" / "noisy_rounds" for folder in ("build", "build-mine")]
EXAMPLE = next((path for path in BUILT if path.is_file()), BUILT[0])
MODEL, DATA = ROOT / "models" / "digits" / "model.h5", ROOT / "models" / "digits" / "test_set.h5"

pytestmark = pytest.mark.skipif(not EXAMPLE.is_file(), reason=f"{EXAMPLE} not built (scripts/test.sh builds it)")


def example(*flags) -> subprocess.CompletedProcess:
    return subprocess.run([EXAMPLE, MODEL, DATA, *map(str, flags)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flag, value", [
    ("--rounds", "1.9"), ("--rounds", "1e12"), ("--rounds", "0"), ("--rounds", "-1"), ("--rounds", str(2**20 + 1)),
    ("--rounds", "2.0"), ("--seed", "1e30"), ("--seed", "-1"), ("--seed", "+3"), ("--seed", str(2**64)),
    ("--seed", "0x10"), ("--seed", " 5"), ("--seed", ""), ("--seed", "1.5"), ("--threads", "4097"),
    ("--threads", "-2"), ("--t", "nan"), ("--t", "inf"),
])
def test_a_number_that_is_not_a_whole_number_in_range_is_refused(flag, value):
    result = example(flag, value)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"noisy_rounds: {flag} expects a " in result.stderr
    assert f"got '{value}'" in result.stderr
    assert "round 0" not in result.stdout  # refused before any work


@pytest.mark.parametrize("seed", [2**53 + 1, 2**64 - 1])
def test_a_seed_above_2_to_the_53_reaches_the_noise_exactly(seed, tmp_path):
    """The rounds of the example with a seed a double cannot hold are those of aimcemu.run with the
    same seed (read through a double, 2^53 + 1 ran as 2^53 and 2^64 - 1 as an undefined cast)."""
    result = example("--rounds", 2, "--t", 3600, "--seed", seed, "--threads", 2)
    assert result.returncode == 0, result.stderr
    rounds = [int(c) for c in re.findall(r"round \d+ .*accuracy [0-9.]+ \((\d+)/\d+\)", result.stdout)]
    summary = aimcemu.run(MODEL, DATA, mapping="all", noise="pcm_like", t=[3600], rounds=2, seed=seed,
                          layers="none", output=tmp_path / "run.h5")
    assert rounds == [round(a * summary.images) for a in summary.round_accuracy]
    assert len(rounds) == 2


def test_the_largest_round_count_and_seed_are_taken():
    """The bounds themselves parse (the run is not started: --t is refused after the numbers)."""
    result = example("--rounds", 2**20, "--seed", 2**64 - 1, "--threads", 4096, "--t", -1)
    assert result.returncode == 2
    assert "--t must be >= 0" in result.stderr
