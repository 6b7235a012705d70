#!/usr/bin/env python3
"""Size and coupling of the code at a git commit: the largest files, and the #includes between
top-level C++ folders (and the imports between Python modules).

    python3 scripts/arch_stats.py                  # the working tree's HEAD
    python3 scripts/arch_stats.py --commit 7a70639 # an earlier commit (read from git, no checkout)

"Cross-folder includes" counts `#include "dir/file.hpp"` lines whose dir differs from the
including file's folder; with the floors of CMakeLists.txt (docs/architecture.md) every such
include points down a floor, which tests/arch/check_floors.py enforces.
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"', re.M)
CODE = (".cpp", ".hpp", ".py", ".sv")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def files_at(commit: str) -> dict[str, str]:
    """Path -> text of every code file at `commit` (tests, benchmarks and the RTL included)."""
    paths = [p for p in git("ls-tree", "-r", "--name-only", commit).splitlines() if p.endswith(CODE)]
    return {p: git("show", f"{commit}:{p}") for p in paths}


def largest(files: dict[str, str], count: int) -> list[tuple[int, str]]:
    return sorted(((text.count("\n"), path) for path, text in files.items()), reverse=True)[:count]


def cross_folder_includes(files: dict[str, str]) -> collections.Counter:
    """(from folder, to folder) -> number of #include lines, C++ sources outside tests/bench/python."""
    folders = {p.split("/")[0] for p in files if "/" in p}
    counts: collections.Counter = collections.Counter()
    for path, text in files.items():
        top = path.split("/")[0]
        if not path.endswith((".cpp", ".hpp")) or top in ("tests", "bench", "python", "rtl"):
            continue
        for target in INCLUDE.findall(text):
            if target in folders and target != top:
                counts[(top, target)] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--top", type=int, default=12, help="how many of the largest files to list")
    args = parser.parse_args()
    files = files_at(args.commit)
    print(f"## {git('rev-parse', '--short', args.commit).strip()}: {len(files)} code files, "
          f"{sum(t.count(chr(10)) for t in files.values())} lines\n")
    print("largest files (lines):")
    for lines, path in largest(files, args.top):
        print(f"  {lines:6d}  {path}")
    counts = cross_folder_includes(files)
    print(f"\ncross-folder #includes in the C++ core: {sum(counts.values())} lines between {len(counts)} folder pairs")
    for (source, target), n in sorted(counts.items()):
        back = counts.get((target, source), 0)
        print(f"  {source:>13} -> {target:<13} {n:4d}" + (f"   (and {back} back: a cycle)" if back else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
