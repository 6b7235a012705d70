#!/usr/bin/env python3
"""Generates the NIU's fixed constants and tables for C++ and SystemVerilog from one place.

The datapath is specified in docs/niu_datapath.md.  This script is the only place where its
widths, the Gaussian inverse-CDF table, the PCG jump constants and the program word offsets are
written down; the build runs it into ${AIMCEMU_GEN_DIR} and both the C++ model
(generated/niu_constants.hpp) and the RTL (generated/niu_constants.svh) include the result.

Usage: gen_niu_tables.py --out-dir DIR [--rng-pipe P]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

MASK64 = (1 << 64) - 1

# ---- datapath widths (docs/niu_datapath.md sections 2-3) -------------------------------------
LANES = 32                  # INT8 lanes per 256-bit beat
CODE_TABLE = 128            # per-layer tables are indexed by min(|c|, 127)
G_FRAC = 16                 # conductance / g_max in Q1.16
G_BITS = 17
Z_FRAC = 12                 # standard normal in Q3.12, s16
Z_BITS = 16
NU_FRAC = 16                # drift exponent in Q0.16, u16
DF_FRAC_BITS = 8            # nu >> 8 indexes the drift table, low 8 bits interpolate
DF_ONE_BITS = 16            # drift factor 1.0 = 2^16
RT_OCTAVES = 17             # read table: leading-zero count of the 17-bit gp
RT_SEG_BITS = 4             # 16 segments per octave
RT_FRAC_BITS = 12           # interpolation fraction below the segment bits
RT_ONE_BITS = 16            # relative read sigma 1.0 = 2^16
K_SHIFT = 24                # back-conversion: code = rshr(w * K, 24)
K_BITS = 18

# ---- Gaussian inverse CDF (section 4.3) ------------------------------------------------------
GAUSS_OCTAVES = 31          # lzc of the 31-bit magnitude field
GAUSS_SEG_BITS = 4
GAUSS_FRAC_BITS = 26        # 30 - GAUSS_SEG_BITS

# ---- RNG (section 4) -------------------------------------------------------------------------
PCG_MULT = 6364136223846793005
CHIP_DRAWS = 4              # z1+, z1-, z2+, z2- per weight
READ_DRAWS = 2              # z3+, z3- per weight
PURPOSE_CHIP = 0x4E495543   # "NIUC"
PURPOSE_READ = 0x4E495552   # "NIUR"
STREAM_SALT = 0x9E6C63D0676A9A99

# ---- program image (section 5) ---------------------------------------------------------------
PROG_MAGIC_VALUE = 0x3155494E  # "NIU1"
PROG_VERSION_VALUE = 1
PROG_HEADER_WORDS = 8


def gauss_knots() -> list[int]:
    """Z[j] = round(2^Z_FRAC * Phi^-1(1 - q_j/2)), q_j = (16 + s) * 2^-(o+5), j = (30-o)*16 + s."""
    normal = statistics.NormalDist()
    segs = 1 << GAUSS_SEG_BITS
    knots = []
    for j in range(GAUSS_OCTAVES * segs):
        octave = GAUSS_OCTAVES - 1 - j // segs
        seg = j % segs
        q = (segs + seg) / 2.0 ** (octave + GAUSS_SEG_BITS + 1)
        knots.append(round(-normal.inv_cdf(q / 2.0) * (1 << Z_FRAC)))
    knots.append(0)  # q = 1: the median of |Z| side, z = 0
    return knots


def lcg_jump(steps: int) -> tuple[int, int]:
    """(A^steps, A^(steps-1) + ... + A + 1) mod 2^64: s_{n+steps} = s_n*A^steps + inc*sum."""
    total, power = 0, 1
    for _ in range(steps):
        total = (total + power) & MASK64
        power = (power * PCG_MULT) & MASK64
    return power, total


def constants(rng_pipe: int) -> list[tuple[str, int, str]]:
    """(name, value, comment) of every scalar constant, in output order."""
    chip_slots = LANES * CHIP_DRAWS
    read_slots = LANES * READ_DRAWS
    chip_mult, chip_sum = lcg_jump(chip_slots * rng_pipe)
    read_mult, read_sum = lcg_jump(read_slots * rng_pipe)
    gauss_entries = GAUSS_OCTAVES * (1 << GAUSS_SEG_BITS) + 1
    rt_entries = RT_OCTAVES * (1 << RT_SEG_BITS) + 1
    df_entries = (1 << (NU_FRAC - DF_FRAC_BITS)) + 1

    layer_fields = [  # (name, words)
        ("SRC_ADDR", 2), ("DST_ADDR", 2), ("COUNT", 1), ("OUT_BITS", 1), ("BACK_K", 1), ("RESERVED", 1),
        ("CHIP_INC", 2), ("CHIP_JUMP_C", 2), ("READ_INC", 2), ("READ_JUMP_C", 2),
        ("CHIP_STATES", 2 * rng_pipe * chip_slots), ("READ_STATES", 2 * rng_pipe * read_slots),
        ("GT", CODE_TABLE), ("SP", CODE_TABLE), ("MU", CODE_TABLE), ("SN", CODE_TABLE),
        ("DF", df_entries), ("RT", rt_entries),
    ]
    out = [
        ("NIU_LANES", LANES, "INT8 lanes per 256-bit beat"),
        ("NIU_BEAT_BITS", LANES * 8, "bits per beat"),
        ("NIU_CODE_TABLE", CODE_TABLE, "entries of the per-code tables GT, SP, MU, SN"),
        ("NIU_G_FRAC", G_FRAC, "conductance/g_max fraction bits"),
        ("NIU_G_BITS", G_BITS, "conductance width (unsigned)"),
        ("NIU_G_MAX", (1 << G_BITS) - 1, "conductance saturation (2 g_max)"),
        ("NIU_Z_FRAC", Z_FRAC, "standard normal fraction bits"),
        ("NIU_Z_BITS", Z_BITS, "standard normal width (signed)"),
        ("NIU_NU_FRAC", NU_FRAC, "drift exponent fraction bits"),
        ("NIU_NU_MAX", (1 << NU_FRAC) - 1, "drift exponent saturation"),
        ("NIU_DF_FRAC_BITS", DF_FRAC_BITS, "nu bits below the drift table index"),
        ("NIU_DF_ONE_BITS", DF_ONE_BITS, "drift factor 1.0 = 2^this"),
        ("NIU_DF_ENTRIES", df_entries, "drift table knots"),
        ("NIU_RT_OCTAVES", RT_OCTAVES, "read table octaves (lzc of gp)"),
        ("NIU_RT_SEG_BITS", RT_SEG_BITS, "read table segment bits per octave"),
        ("NIU_RT_FRAC_BITS", RT_FRAC_BITS, "read table interpolation bits"),
        ("NIU_RT_ONE_BITS", RT_ONE_BITS, "relative read sigma 1.0 = 2^this"),
        ("NIU_RT_ENTRIES", rt_entries, "read table knots"),
        ("NIU_K_SHIFT", K_SHIFT, "back-conversion shift"),
        ("NIU_K_BITS", K_BITS, "back-conversion scale width (unsigned)"),
        ("NIU_GAUSS_OCTAVES", GAUSS_OCTAVES, "Gaussian table octaves"),
        ("NIU_GAUSS_SEG_BITS", GAUSS_SEG_BITS, "Gaussian table segment bits per octave"),
        ("NIU_GAUSS_FRAC_BITS", GAUSS_FRAC_BITS, "Gaussian interpolation bits"),
        ("NIU_GAUSS_ENTRIES", gauss_entries, "Gaussian table knots"),
        ("NIU_RNG_PIPE", rng_pipe, "sub-states per RNG unit (multiplier pipeline depth)"),
        ("NIU_CHIP_DRAWS", CHIP_DRAWS, "chip-stream outputs per weight"),
        ("NIU_READ_DRAWS", READ_DRAWS, "read-stream outputs per weight"),
        ("NIU_CHIP_SLOTS", chip_slots, "chip RNG units (outputs per beat)"),
        ("NIU_READ_SLOTS", read_slots, "read RNG units (outputs per beat)"),
        ("NIU_PCG_MULT", PCG_MULT, "pcg32 LCG multiplier"),
        ("NIU_CHIP_JUMP_MULT", chip_mult, "A^(CHIP_SLOTS*RNG_PIPE)"),
        ("NIU_CHIP_JUMP_SUM", chip_sum, "sum_{k<CHIP_SLOTS*RNG_PIPE} A^k; CJ = inc*this"),
        ("NIU_READ_JUMP_MULT", read_mult, "A^(READ_SLOTS*RNG_PIPE)"),
        ("NIU_READ_JUMP_SUM", read_sum, "sum_{k<READ_SLOTS*RNG_PIPE} A^k; CJ = inc*this"),
        ("NIU_PURPOSE_CHIP", PURPOSE_CHIP, "stream key purpose: programming + drift exponent"),
        ("NIU_PURPOSE_READ", PURPOSE_READ, "stream key purpose: read noise"),
        ("NIU_STREAM_SALT", STREAM_SALT, "stream id = splitmix64(state_seed ^ salt)"),
        ("NIU_PROG_MAGIC_VALUE", PROG_MAGIC_VALUE, "program word 0"),
        ("NIU_PROG_VERSION_VALUE", PROG_VERSION_VALUE, "program word 1"),
        ("NIU_PROG_MAGIC", 0, "header word offsets"),
        ("NIU_PROG_VERSION", 1, ""),
        ("NIU_PROG_NUM_LAYERS", 2, ""),
        ("NIU_PROG_LAYER_WORDS", 3, ""),
        ("NIU_PROG_HEADER_WORDS", PROG_HEADER_WORDS, "first layer block"),
    ]
    offset = 0
    for name, words in layer_fields:
        out.append((f"NIU_LAYER_{name}", offset, f"{words} words"))
        offset += words
    out.append(("NIU_LAYER_WORDS", offset, "words per layer block"))
    return out


def is_wide(value: int) -> bool:
    return value >= (1 << 31)


def write_cpp(path: str, consts, knots) -> None:
    lines = [
        "// GENERATED by scripts/gen_niu_tables.py -- do not edit.  Spec: docs/niu_datapath.md.",
        "#pragma once",
        "#include <array>",
        "#include <cstdint>",
        "",
        "namespace aimcemu::niu::gen {",
        "",
    ]
    for name, value, comment in consts:
        ctype = "std::uint64_t" if is_wide(value) else "int"
        literal = f"0x{value:016x}ULL" if is_wide(value) else str(value)
        tail = f"  // {comment}" if comment else ""
        lines.append(f"inline constexpr {ctype} {name} = {literal};{tail}")
    lines.append("")
    lines.append("// Gaussian inverse-CDF knots, Q3.12 (section 4.3).")
    lines.append(f"inline constexpr std::array<std::int16_t, {len(knots)}> NIU_GAUSS_Z = {{")
    for start in range(0, len(knots), 12):
        lines.append("    " + ", ".join(str(k) for k in knots[start:start + 12]) + ",")
    lines.append("};")
    lines.append("")
    lines.append("}  // namespace aimcemu::niu::gen")
    write_if_changed(path, "\n".join(lines) + "\n")


def write_svh(path: str, consts, knots) -> None:
    lines = [
        "// GENERATED by scripts/gen_niu_tables.py -- do not edit.  Spec: docs/niu_datapath.md.",
        "`ifndef NIU_CONSTANTS_SVH",
        "`define NIU_CONSTANTS_SVH",
        "// Every design uses only some of these constants; the file name is not the package name.",
        "/* verilator lint_off UNUSEDPARAM */",
        "/* verilator lint_off DECLFILENAME */",
        "package niu_constants_pkg;",
        "",
    ]
    for name, value, comment in consts:
        tail = f"  // {comment}" if comment else ""
        if is_wide(value):
            lines.append(f"  localparam logic [63:0] {name} = 64'h{value:016x};{tail}")
        else:
            lines.append(f"  localparam int {name} = {value};{tail}")
    lines += [
        "",
        "  // Gaussian inverse-CDF knots, Q3.12 (docs/niu_datapath.md section 4.3).",
        "  function automatic logic signed [15:0] niu_gauss_z(input logic [8:0] idx);",
        "    case (idx)",
    ]
    for j, k in enumerate(knots):
        sign = "-" if k < 0 else ""
        lines.append(f"      9'd{j}: niu_gauss_z = {sign}16'sd{abs(k)};")
    lines += [
        "      default: niu_gauss_z = 16'sd0;",
        "    endcase",
        "  endfunction",
        "",
        "endpackage",
        "/* verilator lint_on DECLFILENAME */",
        "/* verilator lint_on UNUSEDPARAM */",
        "`endif",
    ]
    write_if_changed(path, "\n".join(lines) + "\n")


def write_if_changed(path: str, text: str) -> None:
    """Leaves an identical file untouched so that dependents are not rebuilt."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--rng-pipe", type=int, default=4, help="sub-states per RNG unit (P)")
    args = parser.parse_args(argv)
    if not 1 <= args.rng_pipe <= 16:
        parser.error("--rng-pipe must be in 1..16")
    os.makedirs(args.out_dir, exist_ok=True)
    consts = constants(args.rng_pipe)
    knots = gauss_knots()
    write_cpp(os.path.join(args.out_dir, "niu_constants.hpp"), consts, knots)
    write_svh(os.path.join(args.out_dir, "niu_constants.svh"), consts, knots)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
