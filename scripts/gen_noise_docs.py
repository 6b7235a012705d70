#!/usr/bin/env python3
"""Writes the noise models' parameter tables into docs/noise_models.md, from the core's tables.

Each noise model declares its parameters once, in C++ (noise_models/params.hpp); this script
replaces the section between the markers in docs/noise_models.md with the tables the core
reports (aimcemu.noise.parameters.documentation()).  tests/python/test_noise_params.py fails
when the document and the core disagree.

    python3 scripts/gen_noise_docs.py           # rewrite the section
    python3 scripts/gen_noise_docs.py --check   # exit 1 if it is out of date
"""
from __future__ import annotations

import sys
from pathlib import Path

from aimcemu.noise import parameters

DOC = Path(__file__).resolve().parents[1] / "docs" / "noise_models.md"


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    begin, end = text.find(parameters.DOC_BEGIN), text.find(parameters.DOC_END)
    if begin < 0 or end < begin:
        print(f"{DOC}: the markers of the generated section are missing:\n{parameters.DOC_BEGIN}\n{parameters.DOC_END}",
              file=sys.stderr)
        return 1
    updated = text[:begin] + parameters.documentation() + text[end + len(parameters.DOC_END):]
    if "--check" in argv:
        print(f"{DOC}: " + ("up to date" if updated == text else "out of date (run scripts/gen_noise_docs.py)"))
        return 0 if updated == text else 1
    DOC.write_text(updated, encoding="utf-8")
    print(f"wrote the parameter tables of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
