"""rtl/niu_gen.py, the NIU's one hardware description: the C++ header, the SystemVerilog package,
the ROM initialisation and the JSON carry the same constants; the Gaussian ROMs hold the
conditional means of |Z| over each cell (scipy's quadrature as the independent reference); the
2^-f ROM is the exponential; docs/niu_generated.md is what the generator writes now."""
import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEN = ROOT / "rtl" / "niu_gen.py"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("niu_gen")
    docs = out / "niu_generated.md"
    subprocess.run([sys.executable, str(GEN), "--out-dir", str(out), "--docs", str(docs)], check=True)
    hpp = (out / "niu_constants.hpp").read_text()
    svh = (out / "niu_constants.svh").read_text()
    rom_svh = (out / "niu_gauss_rom.svh").read_text()
    data = json.loads((out / "niu_constants.json").read_text())
    return {"hpp": hpp, "svh": svh, "rom_svh": rom_svh, "json": data, "docs": docs.read_text()}


def cpp_array(hpp, name):
    body = re.search(rf"{name} = \{{(.*?)\}};", hpp, re.S)[1]
    return [int(v) for v in body.replace("\n", "").split(",") if v.strip()]


def test_cpp_sv_and_json_carry_the_same_constants(generated):
    cpp = {m[1]: int(m[2], 0) for m in re.finditer(r"constexpr \S+ (NIU_\w+) = (0x[0-9a-f]+|\d+)", generated["hpp"])}
    sv = {}
    for m in re.finditer(r"localparam (?:int|logic \[63:0\]) (NIU_\w+) = (64'h[0-9a-f]+|\d+);", generated["svh"]):
        sv[m[1]] = int(m[2][4:], 16) if m[2].startswith("64'h") else int(m[2])
    assert cpp == sv == generated["json"]["constants"]
    assert len(cpp) > 100
    # Every width the literal-width check knows is a generated constant.
    assert set(generated["json"]["widths"]) <= set(cpp)
    # The layer block tiles LAYER_WORDS with the documented field sizes.
    fields = generated["json"]["layer_fields"]
    assert sum(f["words"] for f in fields) == cpp["NIU_LAYER_WORDS"]
    assert cpp["NIU_LAYER_RNG_STATES"] + cpp["NIU_RNG_GENS"] * cpp["NIU_BEAT_LANES"] * 4 == cpp["NIU_LAYER_WORDS"]
    # Register offsets are distinct and word aligned; error codes distinct.
    offsets = [r["offset"] for r in generated["json"]["registers"]]
    assert len(set(offsets)) == len(offsets) and all(o % 4 == 0 for o in offsets)
    codes = [e["code"] for e in generated["json"]["errors"]]
    assert len(set(codes)) == len(codes)


def test_rom_init_and_cpp_tables_agree(generated):
    data = generated["json"]
    for name, key, branch in (("NIU_GAUSS_CHIP_ROM", "gauss_chip_rom", 0), ("NIU_GAUSS_READ_ROM", "gauss_read_rom", 1)):
        assert cpp_array(generated["hpp"], name) == data[key]
        block = re.split(r"^(?:else )?if .*begin$", generated["rom_svh"], flags=re.M)[branch + 1]
        sv = {int(m[1]): int(m[2], 16) for m in re.finditer(r"rom\[(\d+)\] = 16'h([0-9a-f]{4});", block)}
        assert [((v + (1 << 15)) % (1 << 16)) - (1 << 15) for _k, v in sorted(sv.items())] == data[key]


def cell_counts(u_bits):
    """Number of magnitudes v in each {group, window} cell, by enumeration with NumPy."""
    vbits = u_bits - 1
    offset = (vbits - 1) % 3
    v = np.arange(1 << vbits, dtype=np.int64)
    lead = np.where(v > 0, np.floor(np.log2(np.maximum(v, 1))).astype(np.int64), -1)
    group = np.maximum(lead - offset + 2, 0) // 3
    shift = 3 * group + offset - 5
    window = np.where(shift >= 0, v >> np.maximum(shift, 0), v << np.maximum(-shift, 0)) & 63
    cell = (group << 6) | window
    first = np.full(512, -1, np.int64)
    order = np.unique(cell, return_index=True)
    first[order[0]] = order[1]
    return first, np.bincount(cell, minlength=512)


@pytest.mark.parametrize("u_bits,key", [(24, "gauss_chip_rom"), (16, "gauss_read_rom")])
def test_gaussian_rom_cells_are_conditional_means(generated, u_bits, key):
    rom = np.array(generated["json"][key])
    assert np.array_equal(rom[512:], -rom[:512])
    first, count = cell_counts(u_bits)
    scale = 2.0 ** (u_bits - 1)
    assert (rom[:512][count == 0] == 0).all()
    for c in np.flatnonzero(count):
        q_lo, q_hi = first[c] / scale, (first[c] + count[c]) / scale
        z_lo, z_hi = norm.isf(q_hi / 2), (np.inf if q_lo == 0 else norm.isf(q_lo / 2))
        mean = integrate.quad(lambda z: 2 * z * norm.pdf(z), z_lo, z_hi, epsabs=1e-14)[0] / (q_hi - q_lo)
        assert abs(rom[c] / 4096 - mean) <= 0.5 / 4096 + 1e-9, f"cell {c}"


def test_exp_rom_is_two_to_the_minus_f(generated):
    data = generated["json"]
    e, d = np.array(data["exp_value"]), np.array(data["exp_slope"])
    k = np.arange(len(e))
    assert np.all(np.abs(e - 32768 * 2.0 ** (-k / 32)) <= 0.5)
    assert np.array_equal(d, e - np.append(e[1:], round(32768 * 2.0 ** -1)))


def test_generated_docs_are_current(generated):
    committed = (ROOT / "docs" / "niu_generated.md").read_text()
    assert committed == generated["docs"], "docs/niu_generated.md is stale: run rtl/niu_gen.py --docs docs/niu_generated.md"


def test_literal_width_checker_passes_and_can_fail(generated, tmp_path):
    check = ROOT / "tests" / "arch" / "check_rtl_widths.py"
    constants = tmp_path / "c.json"
    constants.write_text(json.dumps(generated["json"]))
    ok = subprocess.run([sys.executable, str(check), "--rtl", str(ROOT / "rtl"), "--constants", str(constants)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout
    (tmp_path / "bad.sv").write_text("module bad; logic [14:0] g; endmodule\n")
    bad = subprocess.run([sys.executable, str(check), "--rtl", str(tmp_path), "--constants", str(constants)],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "NIU_G_BITS" in bad.stdout
