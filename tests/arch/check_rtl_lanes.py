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

import argparse
import importlib.util
import pathlib
import subprocess
import sys

MESSAGE = "Lanes must divide NIU_BEAT_LANES"


def load_generator(rtl: pathlib.Path):
    spec = importlib.util.spec_from_file_location("niu_gen", rtl / "niu_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generator_refuses(gen, lanes_supported) -> bool:
    saved = gen.LANES_SUPPORTED
    try:
        gen.LANES_SUPPORTED = lanes_supported
        gen.check_lanes_supported()
        return False
    except SystemExit:
        return True
    finally:
        gen.LANES_SUPPORTED = saved


def check_generator(rtl: pathlib.Path) -> list[str]:
    gen = load_generator(rtl)
    failures = []
    divisors = tuple(n for n in range(1, gen.BEAT_LANES + 1) if gen.BEAT_LANES % n == 0)
    if tuple(gen.LANES_SUPPORTED) != divisors:
        failures.append(f"LANES_SUPPORTED {gen.LANES_SUPPORTED} is not the divisors of {gen.BEAT_LANES}")
    if generator_refuses(gen, gen.LANES_SUPPORTED):
        failures.append("niu_gen.py refuses its own LANES_SUPPORTED")
    if not generator_refuses(gen, tuple(gen.LANES_SUPPORTED) + (3,)):
        failures.append("niu_gen.py accepts LANES_SUPPORTED with 3 (not a divisor of a beat)")
    return failures


def lint(rtl: pathlib.Path, gen_dir: pathlib.Path, lanes: int) -> subprocess.CompletedProcess:
    sources = [rtl / line.strip() for line in (rtl / "sources.f").read_text().splitlines()
               if line.strip().endswith(".sv") and not line.startswith("#")]
    cmd = ["verilator", "--lint-only", "-Wall", f"-I{gen_dir}", "--top-module", "niu", f"-GLanes={lanes}",
           str(rtl / "niu.vlt"), str(gen_dir / "niu_constants.svh"), *map(str, sources)]
    return subprocess.run(cmd, capture_output=True, text=True)


def check_rtl(rtl: pathlib.Path, gen_dir: pathlib.Path, beat_lanes: int) -> list[str]:
    failures = []
    for lanes in (3, 0, 2 * beat_lanes):
        result = lint(rtl, gen_dir, lanes)
        if result.returncode == 0 or MESSAGE not in result.stderr:
            failures.append(f"niu.sv elaborates with Lanes = {lanes} without naming the rule "
                            f"(rc {result.returncode}):\n{result.stderr[-1500:]}")
    return failures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtl", required=True, type=pathlib.Path)
    parser.add_argument("--gen-dir", required=True, type=pathlib.Path)
    args = parser.parse_args(argv)
    gen = load_generator(args.rtl)
    failures = check_generator(args.rtl) + check_rtl(args.rtl, args.gen_dir, gen.BEAT_LANES)
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("lane count: generator and RTL refuse lane counts that do not divide a beat")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
