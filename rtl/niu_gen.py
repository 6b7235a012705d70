#!/usr/bin/env python3
"""The NIU hardware description: one source for every constant the RTL, the C++ model, Python
and the docs share (docs/niu_datapath.md is the prose of this file).

Writes, into --out-dir:
  niu_constants.hpp     C++ (namespace aimcemu::niu::gen): scalars, ROM tables, register map,
                        and NIU_NAMED_CONSTANTS for the Python binding
  niu_constants.svh     SystemVerilog package niu_constants_pkg (localparams, the small ROMs)
  niu_gauss_rom.svh     initial-block body of the Gaussian ROM (included by rtl/niu_gauss_rom.sv,
                        so that synthesis maps it to block RAM)
  niu_constants.json    everything above, for tests (tests/python/test_niu_generator.py) and tools
With --docs FILE it also writes the generated reference (docs/niu_generated.md).

Usage: niu_gen.py --out-dir DIR [--docs FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

# ================================================================================================
# The datapath (docs/niu_datapath.md).  Every quantity is an integer; widths are in bits.
# ================================================================================================

# ---- beat, lanes, weights -----------------------------------------------------------------------
BEAT_LANES = 32            # INT8 weights per 256-bit AXI beat; also the number of RNG streams
CODE_BITS = 8              # clean and noisy weight codes
LANES_SUPPORTED = (1, 2, 4, 8, 16, 32)   # physical lanes: divisors of BEAT_LANES
LANES_BUILT = (1, 2, 4, 8, 16, 32)       # lane counts linted and co-simulated in ctest (synthesized: rtl/synth/)
LANES_FULL_RATE = 32                     # >= 24 weights/cycle: one HBM channel's read-modify-write

# ---- random numbers (section 4) -----------------------------------------------------------------
RNG_WORD_BITS = 32         # xoshiro128++ output
RNG_STATE_WORDS = 4        # xoshiro128++ state: 4 x 32 bits
RNG_CHIP_GENS = 3          # generators per stream for the chip draws (four 24-bit uniforms from 96 bits)
RNG_READ_GENS = 1          # generators per stream for the read draws (two 16-bit uniforms)
RNG_SHIFT_A = 9            # xoshiro128: t = s1 << 9
RNG_ROT_B = 11             # s3 = rotl(s3, 11)
RNG_ROT_OUT = 7            # ++ scrambler: rotl(s0 + s3, 7) + s0
PURPOSE_CHIP = 0x4E495543  # "NIUC": programming noise and drift exponents (fixed per chip)
PURPOSE_READ = 0x4E495552  # "NIUR": read noise (fresh per round)

# ---- Gaussian (section 4.3): uniform -> cell of the |z| inverse CDF -> Q3.12 --------------------
# A uniform of U bits is a sign and a magnitude v of U-1 bits.  v is cut into groups of three bits
# aligned at its top bit; the cell is {group of v's leading one, the 6-bit window that starts at
# the group's top bit} (v = 0: group 0, window 0, the deepest tail on its own).  The chip draws
# use 24-bit uniforms (reach 5.5 sigma), the read draws 16-bit ones (reach 4.4 sigma): one
# generator output gives two read normals.
GAUSS_CHIP_U_BITS = 24
GAUSS_READ_U_BITS = 16
GAUSS_GROUP_SPAN = 3       # bits per group
GAUSS_GROUP_BITS = 3       # up to 8 groups
GAUSS_WINDOW_BITS = 6      # the leading one sits in the window's top 3 bits: window 8..63
GAUSS_INDEX_BITS = 1 + GAUSS_GROUP_BITS + GAUSS_WINDOW_BITS   # {sign, group, window}
Z_BITS = 16                # standard normal, signed
Z_FRAC = 12                # Q3.12

# ---- conductances and device tables (section 3) ------------------------------------------------
G_BITS = 15                # conductance / g_max, unsigned Q1.14: [0, 2) g_max
G_FRAC = 14
SP_BITS = 15               # programming sigma / g_max, unsigned Q1.14
NU_BITS = 15               # drift exponent, unsigned Q0.15
NU_FRAC = 15
TABLE_FIELD_BITS = 16      # each per-code field sits in a 16-bit half word of the program
CODE_TABLE = 128           # per-code table entries: a = min(|c|, 127)

# ---- drift: (t/t0)^-nu = 2^-(nu * LT), LT = log2(t_total / t0) ----------------------------------
LT_BITS = 16               # unsigned Q5.11
LT_FRAC = 11
X_BITS = 15                # x = nu * LT, unsigned Q4.11, saturates below 16 (factor >= 2^-16)
X_FRAC = LT_FRAC
EXP_SEG_BITS = 5           # 2^-f, f in [0, 1): 32 segments ...
EXP_FRAC_BITS = X_FRAC - EXP_SEG_BITS   # ... interpolated with the 6 bits below
EXP_ONE_BITS = 15          # 2^-f in Q1.15 (1.0 = 32768)
EXP_VALUE_BITS = 16
EXP_SLOPE_BITS = 10        # E[k] - E[k+1] <= 710

# ---- read noise: relative sigma by log-segments of gp, per layer --------------------------------
RT_OCTAVES = G_BITS        # leading-one position of max(gp, 1): 0..14
RT_SEG_BITS = 3            # 8 segments per octave
RT_FRAC_BITS = 8           # interpolation bits below the segment bits
RT_SEGMENTS = RT_OCTAVES << RT_SEG_BITS      # 120 (knot 120 is x = 2 g_max)
RT_ADDR_BITS = 7
RT_VALUE_BITS = 16         # relative sigma, unsigned Q2.14
RT_ONE_BITS = 14
RT_SLOPE_BITS = 16         # RT[j+1] - RT[j], signed

# ---- back-conversion ----------------------------------------------------------------------------
K_BITS = 15                # code = rshr((g_on - g_off) * K, K_SHIFT), K unsigned
K_SHIFT = 19
OUT_BITS_MIN, OUT_BITS_MAX = 2, 8
OUT_BITS_FIELD = 4         # OUT_BITS register width

# ---- pipeline (rtl/niu_lane.sv and its blocks; the C++ beat model needs no timing) ---------------
STAGES_RNG = 1             # uniform words registered out of the generators
STAGES_GAUSS = 2           # index, ROM read
STAGES_DEVICE = 15         # niu_device.sv, programmed -> read conductance
STAGES_BACK = 3            # product, rounding, sign + saturation
PIPE_STAGES = STAGES_RNG + STAGES_GAUSS + STAGES_DEVICE + STAGES_BACK

# ---- analog tile peripherals in the PU's post-processing (rtl/pu_periph.sv, docs/peripherals.md)
# Output noise, bound and ADC between the SA's accumulators and requantisation, R_g results per
# cycle; its normals come from the NIU's generator design (niu_xoshiro + niu_gauss, 24-bit ROM).
PERIPH_LANES = 8           # results per cycle: R_g, the WRB read rate of the paper's PUs
PURPOSE_PERIPH = 0x50455249  # "PERI": output noise of the peripherals (fresh per round and image)
PERIPH_ACC_BITS = 32       # accumulator in (DAC codes' GEMM, bias excluded) and result out
PERIPH_SIGMA_BITS = 32     # output-noise std in accumulator units, unsigned Q24.8
PERIPH_SIGMA_FRAC = 8
PERIPH_BOUND_BITS = 31     # clipping bound in accumulator units, unsigned (< 2^31)
PERIPH_MANT_BITS = 31      # DAC step (SCALE), 1 / ADC step and ADC step as 31-bit mantissas with a shift:
PERIPH_SHIFT_BITS = 6      # value = mantissa / 2^shift, so every step size keeps 31 significant bits
PERIPH_SCALE_SHIFT_MIN = 16  # the largest DAC step the settings allow (inp_bound 64, s_x 128, 1 step: 2^14)
                             # is 2^30 / 2^16, so |rshr(acc * SCALE, SCALE_SHIFT)| <= 2^46
PERIPH_CODE_BITS = 21      # ADC code, signed (|code| <= 2^19: at most 2^20 steps)
PERIPH_PIPE_STAGES = 8     # a result enters, its digitised value leaves this many cycles later


# ---- AXI (the PU's HBM port and an AXI4-Lite control port) --------------------------------------
AXI_DATA_BITS = BEAT_LANES * CODE_BITS   # 256
AXI_STRB_BITS = AXI_DATA_BITS // 8
# The address space is the memory, not more: every range check (niu.sv ERR_ADDR_RANGE, the C++
# compiler and image reader) compares against 2^AXI_ADDR_BITS, and a wider space would pass
# addresses that a narrower HBM port drops the top bits of, aliasing them into low memory (the
# wrap the checks exist to stop).  33 bits = 8 GiB, the U50's HBM; its AXI ports carry [32:0].
AXI_ADDR_BITS = 33
AXI_LEN_BITS = 8
AXI_SIZE_BITS = 3
AXI_BURST_BITS = 2
AXI_RESP_BITS = 2
AXI_PAGE_BYTES = 4096
AXIL_DATA_BITS = 32
AXIL_ADDR_BITS = 8
AXIL_PROT_BITS = 3
AXI_XFER_BITS = 32         # length of one transfer in bytes (a layer's COUNT)
WORD_BITS = 32             # program words
WORD_INDEX_BITS = 16       # word offsets inside a program block
LAYER_COUNT_BITS = 16      # LAYERS_DONE
COUNTER_BITS = 32          # cycle and beat counters
MAX_BURST_DEFAULT = 127    # AxLEN limit after reset (one 4 KiB page of 32-byte beats)

# ---- program image (section 5) ------------------------------------------------------------------
PROG_MAGIC_VALUE = 0x3255494E   # "NIU2"
PROG_VERSION_VALUE = 2
PROG_HEADER_WORDS = 8

REGISTERS = [  # (name, offset, access, meaning)
    ("CTRL", 0x00, "W", "bit 0: start the program at PROG_ADDR (ignored while busy)"),
    ("STATUS", 0x04, "R/W1C", "bit 0 busy, bit 1 done (write 1 to clear), bits 11:8 error code"),
    ("PROG_ADDR_LO", 0x08, "RW", "program image base, bits 31:0 (32-byte aligned)"),
    ("PROG_ADDR_HI", 0x0C, "RW", "program image base, bits 63:32"),
    ("MAX_BURST", 0x10, "RW", "AXI AxLEN limit 0..255 (bursts also stop at 4 KiB)"),
    ("LAYERS_DONE", 0x14, "R", "layers of the current or last program streamed and written without an error response (a failed layer is not counted)"),
    ("STREAM_CYCLES", 0x18, "R", "cycles spent streaming weights (all layers)"),
    ("STREAM_BEATS", 0x1C, "R", "beats that entered the noise pipeline (all layers)"),
    ("CONFIG", 0x20, "R", "bits 7:0 lanes the RTL was built for, bits 15:8 beat lanes, bits 31:16 program version"),
    ("ID", 0x24, "R", "the program magic, to identify the block"),
]
STATUS_BUSY_BIT, STATUS_DONE_BIT, STATUS_ERROR_LSB, STATUS_ERROR_BITS = 0, 1, 8, 4
ERRORS = [  # (name, code, meaning)
    ("NONE", 0, "the program ran to the end"),
    ("BAD_HEADER", 1, "magic, version or layer block size differ from this NIU, or more layers than LAYERS_DONE counts"),
    ("ALIGNMENT", 2, "program, source or destination not 32-byte aligned"),
    ("BAD_LAYER", 3, "a layer field out of range: OUT_BITS (2..8), BACK_K, DRIFT_LT, a read-table segment's end"),
    ("READ_RESP", 4, "an R beat came back with an error response"),
    ("WRITE_RESP", 5, "a B response was an error"),
    ("ADDR_RANGE", 6, "an address, or the end of a layer's source or destination, beyond the AXI address width"),
]


def layer_fields() -> list[tuple[str, int, str]]:
    """(name, words, meaning) of one layer block, in order."""
    rng_words = (RNG_CHIP_GENS + RNG_READ_GENS) * BEAT_LANES * RNG_STATE_WORDS
    return [
        ("SRC_ADDR", 2, "byte address of the clean weights (32-byte aligned)"),
        ("DST_ADDR", 2, "byte address of the PU weight region of the layer (32-byte aligned)"),
        ("COUNT", 1, "weights N*M"),
        ("OUT_BITS", 1, "output code width B, 2..8"),
        ("BACK_K", 1, "back-conversion scale K (u15)"),
        ("DRIFT_LT", 1, "log2(t_total/t0) in Q5.11 (u16); 0 for t_total <= t0"),
        ("CODE_TABLE", 2 * CODE_TABLE, "per code a: word 2a = GT | SP << 16, word 2a+1 = MU | SN << 16"),
        ("READ_TABLE", RT_SEGMENTS, "per segment j: RT[j] | (RT[j+1] - RT[j]) << 16 (signed)"),
        ("RNG_STATES", rng_words, "xoshiro128++ states: generator g, stream k, words s0..s3"),
    ]


# ================================================================================================
# Derived tables
# ================================================================================================

def gauss_layout(u_bits: int) -> tuple[int, int, int]:
    """(magnitude bits V, groups, offset o): group g holds bits 3g+o .. 3g+o-2 of v."""
    v_bits = u_bits - 1
    return v_bits, -(-v_bits // GAUSS_GROUP_SPAN), (v_bits - 1) % GAUSS_GROUP_SPAN


def gauss_cell_of(v: int, u_bits: int) -> int:
    """{group, window} of a magnitude v (section 4.3)."""
    _v_bits, _groups, offset = gauss_layout(u_bits)
    lead = v.bit_length() - 1
    group = max(lead - offset + GAUSS_GROUP_SPAN - 1, 0) // GAUSS_GROUP_SPAN
    shift = GAUSS_GROUP_SPAN * group + offset - (GAUSS_WINDOW_BITS - 1)
    window = (v >> shift if shift >= 0 else v << -shift) & ((1 << GAUSS_WINDOW_BITS) - 1)
    return (group << GAUSS_WINDOW_BITS) | window


def gauss_cells(u_bits: int) -> list[tuple[int, int, int]]:
    """(cell, first v, number of v) of every non-empty cell; the v of a cell are consecutive."""
    v_bits, groups, offset = gauss_layout(u_bits)
    cells: dict[int, list[int]] = {}
    for group in range(groups):
        top = GAUSS_GROUP_SPAN * group + offset
        shift = top - (GAUSS_WINDOW_BITS - 1)
        lo = 0 if group == 0 else 1 << (top - GAUSS_GROUP_SPAN + 1)
        hi = min(1 << (top + 1), 1 << v_bits)
        step = 1 << shift if shift > 0 else 1
        for v in range(lo, hi, step):
            c = gauss_cell_of(v, u_bits)
            if c in cells:  # consecutive v of one cell
                cells[c][1] += step
            else:
                cells[c] = [v, step]
    out = [(c, v, n) for c, (v, n) in sorted(cells.items())]
    assert sum(n for _c, _v, n in out) == 1 << v_bits
    return out


def gauss_table(u_bits: int) -> list[int]:
    """Q3.12 normal of each {sign, group, window} cell: the conditional mean of |Z| over the
    cell's share of the two-sided tail probability q (section 4.3), negated for sign = 1.

    The magnitude v with q = (v + U) / 2^V maps to |z| = PhiBar^-1(q/2); a cell collects the v
    with the same group and window, and holds
    E[|Z| | q in cell] = 2 (phi(z(q_hi)) - phi(z(q_lo))) / (q_hi - q_lo), so E|Z| is exact."""
    normal = statistics.NormalDist()
    scale = 1 << (u_bits - 1)

    def z_of_q(q: float) -> float:
        return math.inf if q <= 0.0 else -normal.inv_cdf(q / 2.0)

    def pdf(z: float) -> float:
        return 0.0 if math.isinf(z) else math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)

    half = [0] * (1 << (GAUSS_GROUP_BITS + GAUSS_WINDOW_BITS))
    for cell, v_min, n in gauss_cells(u_bits):
        q_lo, q_hi = v_min / scale, (v_min + n) / scale
        mean = 2.0 * (pdf(z_of_q(q_hi)) - pdf(z_of_q(q_lo))) / (q_hi - q_lo)
        half[cell] = round(mean * (1 << Z_FRAC))
    return half + [-v for v in half]


def gauss_moments(table: list[int], u_bits: int) -> dict:
    """Exact moments of the Gaussian the table produces (over all 2^U uniforms)."""
    scale = 1 << (u_bits - 1)
    z = lambda cell: table[cell] / (1 << Z_FRAC)  # noqa: E731
    cells = gauss_cells(u_bits)
    var = sum(n * z(c) ** 2 for c, _v, n in cells) / scale
    m4 = sum(n * z(c) ** 4 for c, _v, n in cells) / scale
    widest = max(n / (v + n) for _c, v, n in cells if v > 0 and n > 1)
    return {"variance": var, "fourth_moment": m4, "max_abs": max(table) / (1 << Z_FRAC), "widest_cell": widest}


def exp2_table() -> tuple[list[int], list[int]]:
    """E[k] = round(2^15 * 2^(-k/32)), k = 0..32, and the slopes D[k] = E[k] - E[k+1]."""
    segs = 1 << EXP_SEG_BITS
    e = [round((1 << EXP_ONE_BITS) * 2.0 ** (-k / segs)) for k in range(segs + 1)]
    return e[:segs], [e[k] - e[k + 1] for k in range(segs)]


def check_block_alignment() -> None:
    """The header and every layer block are whole AXI beats.  The program base is beat-aligned
    (the NIU checks it at CTRL.start), so every block then starts on a beat and rtl/niu.sv reads
    it as whole beats from its first word (niu_word_unpack.sv has no word skip)."""
    words_per_beat = AXI_DATA_BITS // WORD_BITS
    layer_words = sum(words for _name, words, _comment in layer_fields())
    for name, words in (("PROG_HEADER_WORDS", PROG_HEADER_WORDS), ("LAYER_WORDS", layer_words)):
        if AXI_DATA_BITS % WORD_BITS or words % words_per_beat:
            raise SystemExit(f"niu_gen: {name} = {words} is not a whole number of {AXI_DATA_BITS}-bit beats")
    # rtl/niu.sv reads the header as one beat and takes its fields from it.
    if PROG_HEADER_WORDS != words_per_beat:
        raise SystemExit(f"niu_gen: PROG_HEADER_WORDS = {PROG_HEADER_WORDS} must be one {AXI_DATA_BITS}-bit beat "
                         f"({words_per_beat} words): the NIU reads the header as one")


def check_lanes_supported() -> None:
    """LANES_SUPPORTED is exactly the divisors of BEAT_LANES: the rule rtl/niu.sv checks at
    elaboration (NIU_BEAT_LANES % Lanes == 0) and niu_model.cpp's check_lanes() applies to this
    list must name the same lane counts."""
    divisors = tuple(n for n in range(1, BEAT_LANES + 1) if BEAT_LANES % n == 0)
    if tuple(LANES_SUPPORTED) != divisors:
        raise SystemExit(f"niu_gen: LANES_SUPPORTED = {LANES_SUPPORTED} must be the divisors of BEAT_LANES = "
                         f"{BEAT_LANES}: {divisors}")
    if not set(LANES_BUILT) <= set(LANES_SUPPORTED):
        raise SystemExit(f"niu_gen: LANES_BUILT = {LANES_BUILT} names lane counts outside LANES_SUPPORTED")


def check_int32_headroom() -> None:
    """Every product plus its rounding constant fits a signed 32-bit lane (the AVX2 model)."""
    z_max = 1 << (Z_BITS - 1)
    g_max = (1 << G_BITS) - 1
    bound = (1 << 31) - 1
    checks = {
        "SP*z": ((1 << SP_BITS) - 1) * z_max + (1 << (Z_FRAC - 1)),
        "nu*LT": ((1 << NU_BITS) - 1) * ((1 << LT_BITS) - 1) + (1 << (NU_FRAC - 1)),
        "gp*E": g_max * (1 << EXP_ONE_BITS) + (1 << 30),
        "gd*sr": g_max * ((1 << RT_VALUE_BITS) - 1) + (1 << (RT_ONE_BITS - 1)),
        "sa*z": g_max * z_max + (1 << (Z_FRAC - 1)),
        "w*K": g_max * ((1 << K_BITS) - 1) + (1 << (K_SHIFT - 1)),
    }
    for name, value in checks.items():
        if value > bound:
            raise SystemExit(f"niu_gen: {name} overflows 32 bits ({value})")


# ================================================================================================
# Constants list
# ================================================================================================

def constants() -> list[tuple[str, int, str, str]]:
    """(name, value, kind, comment); kind 'width' marks bit widths (tests/python/
    test_niu_rtl_literals.py fails on an RTL literal that duplicates one)."""
    c: list[tuple[str, int, str, str]] = []

    def w(name, value, comment):
        c.append((name, value, "width", comment))

    def v(name, value, comment):
        c.append((name, value, "value", comment))

    v("NIU_BEAT_LANES", BEAT_LANES, "INT8 weights per 256-bit beat = RNG streams per layer")
    v("NIU_LANES_FULL_RATE", LANES_FULL_RATE, "lanes of the full-rate NIU (one HBM channel's read-modify-write)")
    v("NIU_LANES_DEFAULT", 8, "lanes of the default build (rtl/niu.sv parameter Lanes)")
    w("NIU_CODE_BITS", CODE_BITS, "clean and noisy weight codes")
    v("NIU_CODE_TABLE", CODE_TABLE, "per-code table entries (a = min(|c|, 127))")
    w("NIU_CODE_INDEX_BITS", 7, "per-code table index")
    w("NIU_RNG_WORD_BITS", RNG_WORD_BITS, "xoshiro128++ output")
    v("NIU_RNG_STATE_WORDS", RNG_STATE_WORDS, "xoshiro128++ state words")
    w("NIU_RNG_STATE_BITS", RNG_STATE_WORDS * RNG_WORD_BITS, "xoshiro128++ state")
    v("NIU_RNG_CHIP_GENS", RNG_CHIP_GENS, "generators per stream for the chip draws")
    v("NIU_RNG_READ_GENS", RNG_READ_GENS, "generators per stream for the read draws")
    v("NIU_RNG_GENS", RNG_CHIP_GENS + RNG_READ_GENS, "generators per stream")
    v("NIU_RNG_SHIFT_A", RNG_SHIFT_A, "xoshiro128 shift")
    v("NIU_RNG_ROT_B", RNG_ROT_B, "xoshiro128 rotation")
    v("NIU_RNG_ROT_OUT", RNG_ROT_OUT, "++ scrambler rotation")
    v("NIU_PURPOSE_CHIP", PURPOSE_CHIP, "stream key purpose: programming + drift exponent")
    v("NIU_PURPOSE_READ", PURPOSE_READ, "stream key purpose: read noise")
    w("NIU_GAUSS_CHIP_U_BITS", GAUSS_CHIP_U_BITS, "uniform bits per chip normal (programming, drift exponent)")
    w("NIU_GAUSS_READ_U_BITS", GAUSS_READ_U_BITS, "uniform bits per read normal")
    v("NIU_GAUSS_GROUP_SPAN", GAUSS_GROUP_SPAN, "magnitude bits per group")
    w("NIU_GAUSS_GROUP_BITS", GAUSS_GROUP_BITS, "group field of the Gaussian ROM index")
    w("NIU_GAUSS_WINDOW_BITS", GAUSS_WINDOW_BITS, "window field of the Gaussian ROM index")
    w("NIU_GAUSS_INDEX_BITS", GAUSS_INDEX_BITS, "Gaussian ROM address {sign, group, window}")
    v("NIU_GAUSS_ENTRIES", 1 << GAUSS_INDEX_BITS, "Gaussian ROM entries")
    w("NIU_Z_BITS", Z_BITS, "standard normal (signed)")
    v("NIU_Z_FRAC", Z_FRAC, "standard normal fraction bits")
    w("NIU_G_BITS", G_BITS, "conductance / g_max (unsigned)")
    v("NIU_G_FRAC", G_FRAC, "conductance fraction bits")
    v("NIU_G_MAX", (1 << G_BITS) - 1, "conductance saturation (2 g_max)")
    w("NIU_SP_BITS", SP_BITS, "programming sigma (unsigned, conductance scale)")
    w("NIU_NU_BITS", NU_BITS, "drift exponent (unsigned)")
    v("NIU_NU_FRAC", NU_FRAC, "drift exponent fraction bits")
    v("NIU_NU_MAX", (1 << NU_BITS) - 1, "drift exponent saturation")
    w("NIU_TABLE_FIELD_BITS", TABLE_FIELD_BITS, "half word of a table program word")
    w("NIU_LT_BITS", LT_BITS, "log2(t_total/t0) (unsigned)")
    v("NIU_LT_FRAC", LT_FRAC, "log2(t_total/t0) fraction bits")
    w("NIU_X_BITS", X_BITS, "nu * LT (unsigned, saturating)")
    v("NIU_X_FRAC", X_FRAC, "nu * LT fraction bits")
    v("NIU_X_MAX", (1 << X_BITS) - 1, "nu * LT saturation (drift factor >= 2^-16)")
    w("NIU_X_INT_BITS", X_BITS - X_FRAC, "integer bits of nu * LT (drift shift)")
    w("NIU_EXP_SEG_BITS", EXP_SEG_BITS, "2^-f segment index bits")
    w("NIU_EXP_FRAC_BITS", EXP_FRAC_BITS, "2^-f interpolation bits")
    v("NIU_EXP_ONE_BITS", EXP_ONE_BITS, "2^-f fraction bits (1.0 = 2^15)")
    w("NIU_EXP_VALUE_BITS", EXP_VALUE_BITS, "2^-f ROM value")
    w("NIU_EXP_SLOPE_BITS", EXP_SLOPE_BITS, "2^-f ROM slope")
    v("NIU_EXP_ENTRIES", 1 << EXP_SEG_BITS, "2^-f ROM entries")
    v("NIU_RT_OCTAVES", RT_OCTAVES, "read table octaves (leading one of gp)")
    w("NIU_RT_SEG_BITS", RT_SEG_BITS, "read table segment bits per octave")
    w("NIU_RT_FRAC_BITS", RT_FRAC_BITS, "read table interpolation bits")
    v("NIU_RT_SEGMENTS", RT_SEGMENTS, "read table segments")
    w("NIU_RT_ADDR_BITS", RT_ADDR_BITS, "read table address")
    w("NIU_RT_VALUE_BITS", RT_VALUE_BITS, "relative read sigma (unsigned)")
    v("NIU_RT_ONE_BITS", RT_ONE_BITS, "relative read sigma fraction bits")
    w("NIU_RT_SLOPE_BITS", RT_SLOPE_BITS, "read table slope (signed)")
    w("NIU_K_BITS", K_BITS, "back-conversion scale (unsigned)")
    v("NIU_K_SHIFT", K_SHIFT, "back-conversion shift")
    v("NIU_OUT_BITS_MIN", OUT_BITS_MIN, "smallest output code width")
    v("NIU_OUT_BITS_MAX", OUT_BITS_MAX, "largest output code width")
    w("NIU_OUT_BITS_FIELD", OUT_BITS_FIELD, "OUT_BITS as the datapath holds it")
    v("NIU_STAGES_RNG", STAGES_RNG, "pipeline: generator outputs registered")
    v("NIU_STAGES_GAUSS", STAGES_GAUSS, "pipeline: Gaussian index + ROM")
    v("NIU_STAGES_DEVICE", STAGES_DEVICE, "pipeline: one device, table entries to read conductance")
    v("NIU_STAGES_BACK", STAGES_BACK, "pipeline: back-conversion")
    v("NIU_PIPE_STAGES", PIPE_STAGES, "pipeline: a group enters, its codes leave this many cycles later")
    v("NIU_PERIPH_LANES", PERIPH_LANES, "peripherals: results per cycle (R_g)")
    v("NIU_PURPOSE_PERIPH", PURPOSE_PERIPH, "stream key purpose: peripherals' output noise")
    w("NIU_PERIPH_ACC_BITS", PERIPH_ACC_BITS, "peripherals: accumulator in and result out (signed)")
    w("NIU_PERIPH_SIGMA_BITS", PERIPH_SIGMA_BITS, "peripherals: output-noise std (unsigned)")
    v("NIU_PERIPH_SIGMA_FRAC", PERIPH_SIGMA_FRAC, "peripherals: output-noise std fraction bits")
    w("NIU_PERIPH_BOUND_BITS", PERIPH_BOUND_BITS, "peripherals: clipping bound (unsigned)")
    w("NIU_PERIPH_MANT_BITS", PERIPH_MANT_BITS, "peripherals: DAC step, 1 / ADC step and ADC step mantissas (unsigned)")
    w("NIU_PERIPH_SHIFT_BITS", PERIPH_SHIFT_BITS, "peripherals: their shifts")
    v("NIU_PERIPH_SCALE_SHIFT_MIN", PERIPH_SCALE_SHIFT_MIN, "peripherals: smallest DAC step shift (largest DAC step)")
    w("NIU_PERIPH_CODE_BITS", PERIPH_CODE_BITS, "peripherals: ADC code (signed)")
    v("NIU_PERIPH_PIPE_STAGES", PERIPH_PIPE_STAGES, "peripherals: pipeline latency in cycles")
    w("NIU_AXI_DATA_BITS", AXI_DATA_BITS, "AXI4 data (one beat)")
    w("NIU_AXI_STRB_BITS", AXI_STRB_BITS, "AXI4 write strobes")
    w("NIU_AXI_ADDR_BITS", AXI_ADDR_BITS, "AXI4 address = the memory size (8 GiB, the U50 HBM)")
    w("NIU_AXI_LEN_BITS", AXI_LEN_BITS, "AXI4 AxLEN")
    w("NIU_AXI_SIZE_BITS", AXI_SIZE_BITS, "AXI4 AxSIZE")
    w("NIU_AXI_BURST_BITS", AXI_BURST_BITS, "AXI4 AxBURST")
    w("NIU_AXI_RESP_BITS", AXI_RESP_BITS, "AXI4 xRESP")
    v("NIU_AXI_BEAT_BYTES", AXI_DATA_BITS // 8, "bytes per beat")
    v("NIU_AXI_BEAT_SHIFT", (AXI_DATA_BITS // 8).bit_length() - 1, "log2(bytes per beat)")
    v("NIU_AXI_PAGE_BYTES", AXI_PAGE_BYTES, "AXI4 bursts never cross this boundary")
    v("NIU_AXI_SIZE_BEAT", (AXI_DATA_BITS // 8).bit_length() - 1, "AxSIZE of a full beat")
    v("NIU_AXI_BURST_INCR", 1, "AxBURST INCR")
    v("NIU_AXI_RESP_OKAY", 0, "xRESP OKAY")
    v("NIU_AXI_RESP_SLVERR", 2, "xRESP SLVERR")
    w("NIU_AXIL_DATA_BITS", AXIL_DATA_BITS, "AXI4-Lite data")
    w("NIU_AXIL_ADDR_BITS", AXIL_ADDR_BITS, "AXI4-Lite address")
    w("NIU_AXIL_STRB_BITS", AXIL_DATA_BITS // 8, "AXI4-Lite write strobes")
    w("NIU_AXIL_PROT_BITS", AXIL_PROT_BITS, "AXI4-Lite AxPROT")
    w("NIU_XFER_BITS", AXI_XFER_BITS, "bytes of one transfer")
    w("NIU_WORD_BITS", WORD_BITS, "program word")
    w("NIU_WORD_INDEX_BITS", WORD_INDEX_BITS, "word offset inside a program block")
    v("NIU_WORDS_PER_BEAT", AXI_DATA_BITS // WORD_BITS, "program words per beat")
    w("NIU_LAYER_COUNT_BITS", LAYER_COUNT_BITS, "LAYERS_DONE counter")
    w("NIU_COUNTER_BITS", COUNTER_BITS, "cycle and beat counters")
    v("NIU_MAX_BURST_DEFAULT", MAX_BURST_DEFAULT, "MAX_BURST after reset")
    v("NIU_PROG_MAGIC_VALUE", PROG_MAGIC_VALUE, "program word 0 (\"NIU2\")")
    v("NIU_PROG_VERSION_VALUE", PROG_VERSION_VALUE, "program word 1")
    v("NIU_PROG_MAGIC", 0, "header word: magic")
    v("NIU_PROG_VERSION", 1, "header word: version")
    v("NIU_PROG_NUM_LAYERS", 2, "header word: layers")
    v("NIU_PROG_LAYER_WORDS", 3, "header word: words per layer block")
    v("NIU_PROG_HEADER_WORDS", PROG_HEADER_WORDS, "first layer block")
    offset = 0
    for name, words, comment in layer_fields():
        v(f"NIU_LAYER_{name}", offset, f"layer block: {comment} ({words} words)")
        offset += words
    v("NIU_LAYER_WORDS", offset, "words per layer block")
    for name, addr, _access, comment in REGISTERS:
        v(f"NIU_REG_{name}", addr, f"AXI4-Lite register: {comment}")
    v("NIU_STATUS_BUSY_BIT", STATUS_BUSY_BIT, "STATUS bit")
    v("NIU_STATUS_DONE_BIT", STATUS_DONE_BIT, "STATUS bit")
    v("NIU_STATUS_ERROR_LSB", STATUS_ERROR_LSB, "STATUS error field")
    w("NIU_STATUS_ERROR_BITS", STATUS_ERROR_BITS, "STATUS error field")
    for name, code, comment in ERRORS:
        v(f"NIU_ERR_{name}", code, f"error: {comment}")
    return c


SYNTH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "synth")


def synthesis_results() -> list[dict]:
    """The committed outputs of scripts/synth_niu.sh --lanes N --json rtl/synth/niu_lanesN.json
    (measured resources and co-simulated weights per cycle), in lane order."""
    out = []
    if os.path.isdir(SYNTH_DIR):
        for name in sorted(os.listdir(SYNTH_DIR)):
            if name.startswith("niu_lanes") and name.endswith(".json"):
                with open(os.path.join(SYNTH_DIR, name), encoding="utf-8") as f:
                    data = json.load(f)
                out.append({k: data[k] for k in ("lanes", "LUT", "FF", "DSP", "BRAM36", "URAM", "weights_per_cycle")})
    return sorted(out, key=lambda r: r["lanes"])


def is_wide(value: int) -> bool:
    return value >= (1 << 31)


# ================================================================================================
# Emitters
# ================================================================================================

HEADER = "GENERATED by rtl/niu_gen.py -- do not edit.  Spec: docs/niu_datapath.md."


def cpp_array(name: str, ctype: str, values: list[int], comment: str) -> list[str]:
    lines = [f"// {comment}", f"inline constexpr std::array<{ctype}, {len(values)}> {name} = {{"]
    for start in range(0, len(values), 16):
        lines.append("    " + ", ".join(str(x) for x in values[start:start + 16]) + ",")
    return lines + ["};", ""]


def write_cpp(path: str, consts, gauss, exp_e, exp_d, synth) -> None:
    lines = [f"// {HEADER}", "#pragma once", "#include <array>", "#include <cstdint>", "",
             "namespace aimcemu::niu::gen {", ""]
    for name, value, _kind, comment in consts:
        ctype = "std::uint64_t" if is_wide(value) else "int"
        literal = f"0x{value:016x}ULL" if is_wide(value) else str(value)
        lines.append(f"inline constexpr {ctype} {name} = {literal};  // {comment}")
    lines.append("")
    lines.append(f"inline constexpr std::array<int, {len(LANES_SUPPORTED)}> NIU_LANES_SUPPORTED = {{"
                 + ", ".join(map(str, LANES_SUPPORTED)) + "};")
    lines.append(f"inline constexpr std::array<int, {len(LANES_BUILT)}> NIU_LANES_BUILT = {{"
                 + ", ".join(map(str, LANES_BUILT)) + "};")
    lines.append("")
    lines += cpp_array("NIU_GAUSS_CHIP_ROM", "std::int16_t", gauss[0], "Gaussian ROM of 24-bit uniforms, Q3.12, index {sign, group, window} (section 4.3).")
    lines += cpp_array("NIU_GAUSS_READ_ROM", "std::int16_t", gauss[1], "Gaussian ROM of 16-bit uniforms, Q3.12, index {sign, group, window}.")
    lines += cpp_array("NIU_EXP_VALUE", "std::int32_t", exp_e, "2^-(k/32) in Q1.15 (section 3).")
    lines += cpp_array("NIU_EXP_SLOPE", "std::int32_t", exp_d, "E[k] - E[k+1].")
    lines.append("// Synthesis of the RTL per lane count (rtl/synth/, scripts/synth_niu.sh): Yosys resources and")
    lines.append("// the weights per cycle measured in co-simulation on an ideal bus.")
    lines.append("struct SynthesisResult {")
    lines.append("    int lanes;")
    lines.append("    double lut, ff, dsp, bram36, uram, weights_per_cycle;")
    lines.append("};")
    rows = ", ".join(f"{{{r['lanes']}, {r['LUT']}, {r['FF']}, {r['DSP']}, {float(r['BRAM36'])}, {r['URAM']}, "
                     f"{r['weights_per_cycle'] if r['weights_per_cycle'] is not None else 0.0}}}" for r in synth)
    lines.append(f"inline constexpr std::array<SynthesisResult, {len(synth)}> NIU_SYNTHESIS = {{{{{rows}}}}};")
    lines.append("")
    lines.append("struct NamedConstant {")
    lines.append("    const char* name;")
    lines.append("    std::uint64_t value;")
    lines.append("};")
    lines.append(f"inline constexpr NamedConstant NIU_NAMED_CONSTANTS[] = {{")
    for name, _value, _kind, _comment in consts:
        lines.append(f"    {{\"{name}\", std::uint64_t({name})}},")
    lines += ["};", "", "}  // namespace aimcemu::niu::gen", ""]
    write_if_changed(path, "\n".join(lines))


def sv_rom_function(name: str, index_bits: int, value_bits: int, values: list[int], signed: bool) -> list[str]:
    sign = " signed" if signed else ""
    lines = [f"  function automatic logic{sign} [{value_bits - 1}:0] {name}(input logic [{index_bits - 1}:0] idx);",
             "    case (idx)"]
    for k, val in enumerate(values):
        lit = f"-{value_bits}'sd{-val}" if val < 0 else (f"{value_bits}'sd{val}" if signed else f"{value_bits}'d{val}")
        lines.append(f"      {index_bits}'d{k}: {name} = {lit};")
    lines += [f"      default: {name} = '0;", "    endcase", "  endfunction", ""]
    return lines


def write_svh(path: str, consts, exp_e, exp_d) -> None:
    lines = [f"// {HEADER}", "`ifndef NIU_CONSTANTS_SVH", "`define NIU_CONSTANTS_SVH",
             "// Every design uses only some of these constants; the file name is not the package name.",
             "/* verilator lint_off UNUSEDPARAM */", "/* verilator lint_off DECLFILENAME */",
             "package niu_constants_pkg;", ""]
    for name, value, _kind, comment in consts:
        if is_wide(value):
            lines.append(f"  localparam logic [63:0] {name} = 64'h{value:016x};  // {comment}")
        else:
            lines.append(f"  localparam int {name} = {value};  // {comment}")
    lines.append("")
    lines += sv_rom_function("niu_exp_value", EXP_SEG_BITS, EXP_VALUE_BITS, exp_e, False)
    lines += sv_rom_function("niu_exp_slope", EXP_SEG_BITS, EXP_SLOPE_BITS, exp_d, False)
    lines += ["endpackage", "/* verilator lint_on DECLFILENAME */", "/* verilator lint_on UNUSEDPARAM */", "`endif", ""]
    write_if_changed(path, "\n".join(lines))


def write_rom_init(path: str, gauss: tuple[list[int], list[int]]) -> None:
    """Body of an initial block of rtl/niu_gauss_rom.sv: rom[k] = value for the ROM of UBits-bit
    uniforms (the module's parameter)."""
    lines = [f"// {HEADER}", "// Gaussian ROM contents (Q3.12), one assignment per entry."]
    for branch, (table, u_bits) in enumerate(((gauss[0], "NIU_GAUSS_CHIP_U_BITS"), (gauss[1], "NIU_GAUSS_READ_U_BITS"))):
        lines.append(("if" if branch == 0 else "else if") + f" (UBits == niu_constants_pkg::{u_bits}) begin")
        for k, val in enumerate(table):
            lines.append(f"  rom[{k}] = {Z_BITS}'h{val & ((1 << Z_BITS) - 1):04x};")
        lines.append("end")
    write_if_changed(path, "\n".join(lines) + "\n")


def write_json(path: str, consts, gauss, exp_e, exp_d, moments, synth) -> None:
    data = {
        "synthesis": synth,
        "constants": {name: value for name, value, _k, _c in consts},
        "widths": sorted({name for name, _v, kind, _c in consts if kind == "width"}),
        "lanes_supported": list(LANES_SUPPORTED),
        "lanes_built": list(LANES_BUILT),
        "gauss_chip_rom": gauss[0],
        "gauss_read_rom": gauss[1],
        "gauss_moments": moments,
        "exp_value": exp_e,
        "exp_slope": exp_d,
        "registers": [{"name": n, "offset": o, "access": a, "meaning": m} for n, o, a, m in REGISTERS],
        "errors": [{"name": n, "code": c, "meaning": m} for n, c, m in ERRORS],
        "layer_fields": [{"name": n, "words": w, "meaning": m} for n, w, m in layer_fields()],
    }
    write_if_changed(path, json.dumps(data, indent=1) + "\n")


def docs_text(consts, moments, synth) -> str:
    """docs/niu_generated.md: the register map, error codes, program layout and constants."""
    out = [
        "# NIU: generated reference",
        "",
        f"<!-- {HEADER} -->",
        "",
        "Written by `rtl/niu_gen.py --docs docs/niu_generated.md`; `tests/python/test_niu_generator.py`",
        "fails when this file and the generator disagree.  The prose is in `docs/niu_datapath.md`",
        "(datapath) and `docs/niu_rtl.md` (hardware).",
        "",
        "## AXI4-Lite registers",
        "",
        "| offset | name | access | meaning |",
        "|---|---|---|---|",
    ]
    for name, addr, access, meaning in REGISTERS:
        out.append(f"| 0x{addr:02X} | {name} | {access} | {meaning} |")
    out += ["", "## Error codes (STATUS bits 11:8)", "", "| code | name | meaning |", "|---|---|---|"]
    for name, code, meaning in ERRORS:
        out.append(f"| {code} | {name} | {meaning} |")
    out += ["", "## Program layer block", "",
            f"Header: {PROG_HEADER_WORDS} words (MAGIC 0x{PROG_MAGIC_VALUE:08X} \"NIU2\", VERSION {PROG_VERSION_VALUE}, "
            "NUM_LAYERS, LAYER_WORDS, then zeros).  Each layer block:", "",
            "| field | offset | words | meaning |", "|---|---|---|---|"]
    offset = 0
    for name, words, meaning in layer_fields():
        out.append(f"| {name} | {offset} | {words} | {meaning} |")
        offset += words
    out += ["", f"Words per layer block: {offset}.", "",
            "## Lanes", "",
            f"Supported lane counts: {', '.join(map(str, LANES_SUPPORTED))} (divisors of the {BEAT_LANES} lanes of a beat); "
            f"linted and co-simulated: {', '.join(map(str, LANES_BUILT))}; synthesized (rtl/synth/): "
            f"{', '.join(str(r['lanes']) for r in synth)}; full rate: {LANES_FULL_RATE}.", "",
            "## Gaussian ROMs", "",
            f"{1 << GAUSS_INDEX_BITS} entries each, Q3.12.  Exact moments over all uniforms (normal: variance 1, "
            "fourth moment 3):", "",
            "| uniform bits | used for | variance | fourth moment | largest abs z | widest cell (share of its tail) |",
            "|---|---|---|---|---|---|"]
    for key, use in (("chip", "programming noise, drift exponent"), ("read", "read noise")):
        m = moments[key]
        out.append(f"| {m['u_bits']} | {use} | {m['variance']:.6f} | {m['fourth_moment']:.5f} | {m['max_abs']:.3f} | "
                   f"{m['widest_cell']:.4f} |")
    out += ["",
            "## Synthesis (rtl/synth/)", "",
            "`scripts/synth_niu.sh --lanes N --json rtl/synth/niu_lanesN.json` (Yosys `synth_xilinx -family xcup`; "
            "weights per cycle measured by the co-simulation on a 64 000-weight layer with an ideal bus):", "",
            "| lanes | LUT | FF | DSP | BRAM36 | URAM | weights/cycle |", "|---|---|---|---|---|---|---|"]
    for r in synth:
        out.append(f"| {r['lanes']} | {r['LUT']} | {r['FF']} | {r['DSP']} | {r['BRAM36']:g} | {r['URAM']} | {r['weights_per_cycle']} |")
    out += ["", "## Constants", "", "| name | value | kind | meaning |", "|---|---|---|---|"]
    for name, value, kind, comment in consts:
        shown = f"0x{value:X}" if value >= 1 << 20 else str(value)
        out.append(f"| `{name}` | {shown} | {kind} | {comment} |")
    return "\n".join(out) + "\n"


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
    parser.add_argument("--docs", help="also write the generated reference (docs/niu_generated.md)")
    args = parser.parse_args(argv)
    check_int32_headroom()
    check_block_alignment()
    check_lanes_supported()
    os.makedirs(args.out_dir, exist_ok=True)
    consts = constants()
    gauss = (gauss_table(GAUSS_CHIP_U_BITS), gauss_table(GAUSS_READ_U_BITS))
    exp_e, exp_d = exp2_table()
    moments = {"chip": {"u_bits": GAUSS_CHIP_U_BITS, **gauss_moments(gauss[0], GAUSS_CHIP_U_BITS)},
               "read": {"u_bits": GAUSS_READ_U_BITS, **gauss_moments(gauss[1], GAUSS_READ_U_BITS)}}
    synth = synthesis_results()
    write_cpp(os.path.join(args.out_dir, "niu_constants.hpp"), consts, gauss, exp_e, exp_d, synth)
    write_svh(os.path.join(args.out_dir, "niu_constants.svh"), consts, exp_e, exp_d)
    write_rom_init(os.path.join(args.out_dir, "niu_gauss_rom.svh"), gauss)
    write_json(os.path.join(args.out_dir, "niu_constants.json"), consts, gauss, exp_e, exp_d, moments, synth)
    if args.docs:
        write_if_changed(args.docs, docs_text(consts, moments, synth))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
