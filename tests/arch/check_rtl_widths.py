#!/usr/bin/env python3
"""Fails when a literal width in rtl/*.sv duplicates a width the hardware description generates.

Every width of the NIU (conductance, normal, table fields, AXI fields, beat, lanes ...) is a
constant of rtl/niu_gen.py (generated/niu_constants.json, "widths"); the RTL must name it
(niu_constants_pkg::NIU_G_BITS, or a localparam derived from it), never type its value.  This
checker finds, outside comments and strings:

  - ranges with literal bounds, [15:0] or [N-1:0] with N a number, and +:/-: widths;
  - sized numbers and casts: 16'd5, 8'hFF, 4'sd3, 32'(x);
  - replications {16{...}};
  - localparam/parameter declarations whose name says width (...Bits, ...W, ...Width) with a
    literal value;

and reports each whose width equals a generated width constant (1-bit things are never flagged).

Usage: check_rtl_widths.py --rtl DIR --constants niu_constants.json
       check_rtl_widths.py --self-test
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

RANGE = re.compile(r"\[\s*(\d+)\s*(?:-\s*1\s*)?:\s*(\d+)\s*\]")
PART = re.compile(r"[+-]:\s*(\d+)\s*\]")
SIZED = re.compile(r"(?<![\w'])(\d+)\s*'(?:s?[dhbo]|\()", re.I)
REPL = re.compile(r"\{\s*(\d+)\s*\{")
PARAM = re.compile(r"\b(?:localparam|parameter)\s+(?:int\s+)?(\w*(?:Bits|W|Width))\s*=\s*(\d+)\s*(?:[;,)]|$)")


def strip(text: str) -> str:
    """Removes comments and string literals, keeping line breaks (so line numbers stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            block = text[i:(n if j < 0 else j + 2)]
            out.append("\n" * block.count("\n"))
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def literal_widths(text: str):
    """(line, width, snippet) of every literal width in SystemVerilog source text."""
    clean = strip(text)
    for lineno, line in enumerate(clean.splitlines(), 1):
        for m in RANGE.finditer(line):
            hi, lo = int(m.group(1)), int(m.group(2))
            minus_one = "-" in m.group(0).split(":")[0]
            width = (hi - 1 if minus_one else hi) - lo + 1
            yield lineno, width, m.group(0)
        for m in PART.finditer(line):
            yield lineno, int(m.group(1)), m.group(0)
        for m in SIZED.finditer(line):
            yield lineno, int(m.group(1)), m.group(0)
        for m in REPL.finditer(line):
            yield lineno, int(m.group(1)), m.group(0)
        for m in PARAM.finditer(line):
            yield lineno, int(m.group(2)), m.group(0)


def check(files: list[pathlib.Path], widths: dict[int, list[str]]) -> list[str]:
    problems = []
    for path in files:
        for lineno, width, snippet in literal_widths(path.read_text(encoding="utf-8")):
            if width > 1 and width in widths:
                problems.append(f"{path.name}:{lineno}: literal width {width} in '{snippet.strip()}' duplicates "
                                f"{', '.join(widths[width][:3])}: name the generated constant")
    return problems


def self_test() -> int:
    widths = {15: ["NIU_G_BITS"], 8: ["NIU_CODE_BITS"], 3: ["NIU_AXI_SIZE_BITS"]}
    bad = ("logic [14:0] g;\nlogic [8-1:0] c;\nx = 15'd3;\ny = 8'(z);\nw = {15{1'b0}};\n"
           "localparam int SizeBits = 3;\nv = a[7 -: 8];\n")
    good = ("// logic [14:0] in a comment\nlogic [niu_constants_pkg::NIU_G_BITS-1:0] g;\nb = 1'b0;\n"
            "s = \"[14:0]\";\nlocalparam int Stages = 15;\n")
    found_bad = [w for _l, w, _s in literal_widths(bad) if w in widths]
    found_good = [w for _l, w, _s in literal_widths(good) if w > 1 and w in widths]
    expected = [15, 8, 15, 8, 15, 3, 8]
    if found_bad != expected or found_good:
        print(f"self-test failed: bad -> {found_bad} (want {expected}), good -> {found_good} (want [])")
        return 1
    print("self-test passed")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtl")
    parser.add_argument("--constants")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.rtl or not args.constants:
        parser.error("--rtl and --constants are required")
    data = json.loads(pathlib.Path(args.constants).read_text(encoding="utf-8"))
    widths: dict[int, list[str]] = {}
    for name in data["widths"]:
        widths.setdefault(int(data["constants"][name]), []).append(name)
    files = sorted(pathlib.Path(args.rtl).glob("*.sv"))
    if not files:
        print(f"no .sv files in {args.rtl}")
        return 1
    problems = check(files, widths)
    for p in problems:
        print(p)
    print(f"{len(files)} files, {len(problems)} literal widths that duplicate generated constants")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
