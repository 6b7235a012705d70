#!/usr/bin/env python3
"""The committed synthesis results (rtl/synth/niu_lanesN.json) are of the RTL as it is.

The JSON files feed the generated constants, `aimcemu perf` and the resource tables of
docs/niu_rtl.md; scripts/synth_niu.sh stores in each the digest of the RTL it synthesized
(rtl_sha256: the generated constants and ROM contents, then rtl/sources.f's files, comments and
blank lines left out; scripts/yosys_resources.py rtl_digest).  This test recomputes the digest
and fails, naming the file and the command that refreshes it, when the RTL changed since (no
Yosys needed).  A self-test shows the digest moves with a code edit and not with a comment edit.

Usage: check_synth_fresh.py --rtl DIR --gen-dir DIR
"""
from __future__ import annotations

import json
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from yosys_resources import rtl_digest  # noqa: E402

from rtl_checks import rtl_sources, run_checks  # noqa: E402


def rtl_files(rtl: pathlib.Path, gen_dir: pathlib.Path) -> list[pathlib.Path]:
    """The files scripts/synth_niu.sh digests, in its order."""
    return [gen_dir / "niu_constants.svh", gen_dir / "niu_gauss_rom.svh", *rtl_sources(rtl)]


def self_test(files: list[pathlib.Path]) -> list[str]:
    failures = []
    base = rtl_digest(files)
    with tempfile.TemporaryDirectory() as tmp:
        copy = [pathlib.Path(tmp) / f.name for f in files]
        for src, dst in zip(files, copy):
            shutil.copyfile(src, dst)
        target = copy[-1]
        text = target.read_text()
        target.write_text(text + "\n// a comment\n\n")
        if rtl_digest(copy) != base:
            failures.append("a comment edit changes the digest")
        target.write_text(text.replace("endmodule", "  logic extra_unused;\nendmodule", 1))
        if rtl_digest(copy) == base:
            failures.append("a code edit leaves the digest unchanged")
    return failures


def check_results(rtl: pathlib.Path, gen_dir: pathlib.Path) -> list[str]:
    files = rtl_files(rtl, gen_dir)
    current = rtl_digest(files)
    failures = self_test(files)
    results = sorted((rtl / "synth").glob("niu_lanes*.json"))
    if not results:
        failures.append(f"no synthesis results in {rtl / 'synth'}")
    for path in results:
        data = json.loads(path.read_text())
        stored = data.get("rtl_sha256")
        if stored != current:
            failures.append(f"{path}: rtl_sha256 {stored} is not the RTL's {current}: the results predate an RTL "
                            f"change; re-run scripts/synth_niu.sh --lanes {data.get('lanes')} --json {path} "
                            f"(and update docs/niu_rtl.md)")
    return failures


def main(argv: list[str]) -> int:
    return run_checks(__doc__, argv, check_results,
                      lambda: "synthesis results fresh: every rtl/synth/niu_lanes*.json is of the current RTL")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
