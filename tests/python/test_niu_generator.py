"""scripts/gen_niu_tables.py: the C++ header and the SystemVerilog package carry the same
constants, the PCG jump constants are A^(S*P) and the geometric sum for any P, and the Gaussian
knots are the normal inverse CDF (scipy as the independent reference)."""
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import norm

ROOT = pathlib.Path(__file__).resolve().parents[2]
MULT = 6364136223846793005
MASK = (1 << 64) - 1


def generate(tmp_path, pipe):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_niu_tables.py"), "--out-dir", str(tmp_path),
                    "--rng-pipe", str(pipe)], check=True)
    hpp = (tmp_path / "niu_constants.hpp").read_text()
    svh = (tmp_path / "niu_constants.svh").read_text()
    cpp = {m[1]: int(m[2], 0) for m in re.finditer(r"constexpr \S+ (NIU_\w+) = (0x[0-9a-f]+|\d+)", hpp)}
    sv = {}
    for m in re.finditer(r"localparam (?:int|logic \[63:0\]) (NIU_\w+) = (64'h[0-9a-f]+|\d+);", svh):
        sv[m[1]] = int(m[2][4:], 16) if m[2].startswith("64'h") else int(m[2])
    knots_cpp = [int(v) for v in re.search(r"NIU_GAUSS_Z = \{(.*?)\};", hpp, re.S)[1].replace("\n", "").split(",") if v.strip()]
    knots_sv = {int(m[1]): (-1 if m[2] else 1) * int(m[3]) for m in re.finditer(r"9'd(\d+): niu_gauss_z = (-?)16'sd(\d+);", svh)}
    return cpp, sv, knots_cpp, knots_sv


@pytest.mark.parametrize("pipe", [1, 4, 8])
def test_cpp_and_sv_agree_and_jumps_are_exact(tmp_path, pipe):
    cpp, sv, knots_cpp, knots_sv = generate(tmp_path, pipe)
    assert cpp == sv and len(cpp) > 40
    assert knots_cpp == [knots_sv[j] for j in range(len(knots_cpp))]
    for kind in ("CHIP", "READ"):
        steps = cpp[f"NIU_{kind}_SLOTS"] * pipe
        assert cpp[f"NIU_{kind}_JUMP_MULT"] == pow(MULT, steps, 1 << 64)
        assert cpp[f"NIU_{kind}_JUMP_SUM"] == sum(pow(MULT, k, 1 << 64) for k in range(steps)) & MASK
    # Layer block: the field offsets tile LAYER_WORDS with the documented sizes.
    assert cpp["NIU_LAYER_READ_STATES"] - cpp["NIU_LAYER_CHIP_STATES"] == 2 * pipe * cpp["NIU_CHIP_SLOTS"]
    assert cpp["NIU_LAYER_WORDS"] - cpp["NIU_LAYER_RT"] == cpp["NIU_RT_ENTRIES"]


def test_gaussian_knots_are_the_inverse_cdf(tmp_path):
    cpp, _, knots, _ = generate(tmp_path, 4)
    j = np.arange(len(knots) - 1)
    octave = cpp["NIU_GAUSS_OCTAVES"] - 1 - j // 16
    q = (16 + j % 16) / 2.0 ** (octave + 5)
    expected = norm.isf(q / 2) * 2 ** cpp["NIU_Z_FRAC"]
    assert np.all(np.abs(np.array(knots[:-1]) - expected) <= 0.5 + 1e-6)
    assert knots[-1] == 0
