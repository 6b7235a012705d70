#!/usr/bin/env python3
"""The lane count is a checked parameter: niu.sv refuses, at elaboration, a Lanes that does not
divide a beat.

rtl/niu.sv processes a beat's NIU_BEAT_LANES weights as groups of Lanes (niu_beat_split.sv,
niu_beat_join.sv).  A lane count that does not divide the beat used to verilate without a word
and co-simulate with almost every byte wrong (Lanes = 3: the last partial group of each beat
dropped).  This test shows the guards agree on one rule:

  1. rtl/niu_gen.py's LANES_SUPPORTED (which niu_model.cpp's check_lanes() applies) is exactly
     the divisors of BEAT_LANES, and the generator refuses a list that is not;
  2. `verilator --lint-only` fails, naming the rule, for Lanes = 3, 0 and 2 * NIU_BEAT_LANES (the
     supported lane counts lint clean in the niu_rtl_lint_l<N> tests).

Usage: check_rtl_lanes.py --rtl DIR --gen-dir DIR
"""
from __future__ import annotations

import pathlib
import sys

from rtl_checks import generator_refuses, lint_niu, load_generator, run_checks

MESSAGE = "Lanes must divide NIU_BEAT_LANES"


def check_generator(rtl: pathlib.Path) -> list[str]:
    gen = load_generator(rtl)
    failures = []
    divisors = tuple(n for n in range(1, gen.BEAT_LANES + 1) if gen.BEAT_LANES % n == 0)
    if tuple(gen.LANES_SUPPORTED) != divisors:
        failures.append(f"LANES_SUPPORTED {gen.LANES_SUPPORTED} is not the divisors of {gen.BEAT_LANES}")
    if generator_refuses(gen, gen.check_lanes_supported):
        failures.append("niu_gen.py refuses its own LANES_SUPPORTED")
    if not generator_refuses(gen, gen.check_lanes_supported, LANES_SUPPORTED=tuple(gen.LANES_SUPPORTED) + (3,)):
        failures.append("niu_gen.py accepts LANES_SUPPORTED with 3 (not a divisor of a beat)")
    return failures


def check_rtl(rtl: pathlib.Path, gen_dir: pathlib.Path, beat_lanes: int) -> list[str]:
    failures = []
    for lanes in (3, 0, 2 * beat_lanes):
        result = lint_niu(rtl, gen_dir, lanes)
        if result.returncode == 0 or MESSAGE not in result.stderr:
            failures.append(f"niu.sv elaborates with Lanes = {lanes} without naming the rule "
                            f"(rc {result.returncode}):\n{result.stderr[-1500:]}")
    return failures


def main(argv: list[str]) -> int:
    def checks(rtl: pathlib.Path, gen_dir: pathlib.Path) -> list[str]:
        return check_generator(rtl) + check_rtl(rtl, gen_dir, load_generator(rtl).BEAT_LANES)

    return run_checks(__doc__, argv, checks,
                      lambda: "lane count: generator and RTL refuse lane counts that do not divide a beat")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
