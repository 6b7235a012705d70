#!/usr/bin/env python3
"""Fails on a C++ include that points up a floor (docs/architecture.md).

The floors and what each may use come from the table in the top-level CMakeLists.txt, which
CMake writes to <build>/floors.json; this script reads that file, so the table exists once.
Every `#include "dir/file.hpp"` in a floor's folder must name the floor itself or a floor it
uses.  Generated headers belong to the floor that generates them (GENERATED below).

    check_floors.py --table build/floors.json --root .     # exit 1 and a list of violations
    check_floors.py --self-test                            # shows that a violation is caught
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
GENERATED = {"niu_constants.hpp": "niu"}  # generated header -> the floor that owns it


def violations(table: dict, root: Path) -> list[str]:
    floor_of_dir = {entry["dir"]: name for name, entry in table.items()}
    found = []
    for floor, entry in table.items():
        allowed = {floor, *entry["uses"]}
        for path in sorted((root / entry["dir"]).glob("*.[ch]pp")):
            for target in INCLUDE.findall(path.read_text(encoding="utf-8")):
                owner = GENERATED.get(target) or floor_of_dir.get(target.split("/")[0])
                if owner is not None and owner not in allowed:
                    found.append(f"{path.relative_to(root)}: includes \"{target}\" from floor '{owner}', "
                                 f"but floor '{floor}' may use only {sorted(allowed)}")
    return found


def self_test() -> int:
    """A tree whose lowest floor includes a header of a higher one must be reported."""
    table = {"low": {"dir": "low", "uses": []}, "high": {"dir": "high", "uses": ["low"]}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "low").mkdir()
        (root / "high").mkdir()
        (root / "high" / "h.hpp").write_text('#include "low/l.hpp"\n')
        (root / "low" / "l.hpp").write_text("#pragma once\n")
        if violations(table, root):
            print("self-test: a downward include was reported", file=sys.stderr)
            return 1
        (root / "low" / "l.cpp").write_text('#include "low/l.hpp"\n#include "high/h.hpp"\n')
        found = violations(table, root)
        if len(found) != 1 or "low/l.cpp" not in found[0] or "'high'" not in found[0]:
            print(f"self-test: the upward include was not reported: {found}", file=sys.stderr)
            return 1
    print("self-test: an upward include is reported, a downward one is not")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", type=Path, help="floors.json written by CMake")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.table is None:
        parser.error("--table is required")
    table = json.loads(args.table.read_text(encoding="utf-8"))
    found = violations(table, args.root)
    for line in found:
        print(line, file=sys.stderr)
    print(f"{len(table)} floors checked, {len(found)} upward include(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
