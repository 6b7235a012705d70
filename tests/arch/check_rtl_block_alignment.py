#!/usr/bin/env python3
"""The program layout's beat alignment is a checked invariant, in the generator and in the RTL.

rtl/niu.sv reads the header and every layer block as whole AXI beats from the block's first word
(niu_word_unpack.sv has no word skip): that is right only while PROG_ADDR is beat-aligned (the NIU
checks it at CTRL.start) and the header and a layer block are whole beats.  This test shows both
guards of the second condition fire:

  1. rtl/niu_gen.py refuses a header or a layer block that is not a whole number of beats (and
     accepts the layout it has);
  2. niu.sv's elaboration check stops Verilator when the generated constants break it: the lint
     passes on the generated package and fails, naming the constants, on copies of it with
     NIU_LAYER_WORDS or NIU_PROG_HEADER_WORDS moved off a beat.

Usage: check_rtl_block_alignment.py --rtl DIR --gen-dir DIR
"""
from __future__ import annotations

import pathlib
import re
import sys
import tempfile

from rtl_checks import generator_refuses, lint_niu, load_generator, run_checks

MESSAGE = "must be multiples of NIU_WORDS_PER_BEAT"


def check_generator(rtl: pathlib.Path) -> list[str]:
    gen = load_generator(rtl)
    failures = []
    if generator_refuses(gen, gen.check_block_alignment):
        failures.append("niu_gen.py refuses its own layout")
    words_per_beat = gen.AXI_DATA_BITS // gen.WORD_BITS
    if not generator_refuses(gen, gen.check_block_alignment, PROG_HEADER_WORDS=gen.PROG_HEADER_WORDS + words_per_beat // 2):
        failures.append("niu_gen.py accepts a header that is not whole beats")
    fields = gen.layer_fields()
    padded = fields + [("PAD", 1, "one word more")]
    if not generator_refuses(gen, gen.check_block_alignment, layer_fields=lambda: padded):
        failures.append("niu_gen.py accepts a layer block that is not whole beats")
    return failures


def with_constant(text: str, name: str, delta: int) -> str:
    pattern = re.compile(rf"(localparam int {name} = )(\d+);")
    match = pattern.search(text)
    if match is None:
        raise SystemExit(f"check_rtl_block_alignment: {name} not found in niu_constants.svh")
    return pattern.sub(lambda m: f"{m[1]}{int(m[2]) + delta};", text, count=1)


def check_rtl(rtl: pathlib.Path, gen_dir: pathlib.Path) -> list[str]:
    failures = []
    svh = gen_dir / "niu_constants.svh"
    good = lint_niu(rtl, gen_dir, constants=svh)
    if good.returncode != 0:
        failures.append("the lint fails on the generated constants:\n" + good.stderr[-2000:])
    text = svh.read_text()
    for name in ("NIU_LAYER_WORDS", "NIU_PROG_HEADER_WORDS"):
        with tempfile.TemporaryDirectory() as tmp:
            bad = pathlib.Path(tmp) / "niu_constants.svh"
            bad.write_text(with_constant(text, name, 4))
            result = lint_niu(rtl, gen_dir, constants=bad)
            if result.returncode == 0 or MESSAGE not in result.stderr:
                failures.append(f"niu.sv elaborates with {name} off a beat (rc {result.returncode})")
    return failures


def main(argv: list[str]) -> int:
    return run_checks(__doc__, argv, lambda rtl, gen_dir: check_generator(rtl) + check_rtl(rtl, gen_dir),
                      lambda: "block alignment: generator and RTL checks both fire")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
