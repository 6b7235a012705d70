"""What the RTL architecture checks (check_rtl_*.py, check_synth_fresh.py) share: the generator
loaded as a module, rtl/sources.f's file list, a Verilator lint of niu.sv, and the command line
(--rtl DIR --gen-dir DIR, FAIL lines, exit status 1 on any failure)."""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess
from typing import Callable


def load_generator(rtl: pathlib.Path):
    """rtl/niu_gen.py as a module (its checks and constants, without generating anything)."""
    spec = importlib.util.spec_from_file_location("niu_gen", rtl / "niu_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generator_refuses(gen, check: Callable[[], None], **overrides) -> bool:
    """Whether `check` (one of the generator's checks, which exit on a bad layout) refuses with
    the generator's attributes `overrides` in place; the attributes are restored afterwards."""
    saved = {name: getattr(gen, name) for name in overrides}
    try:
        for name, value in overrides.items():
            setattr(gen, name, value)
        check()
        return False
    except SystemExit:
        return True
    finally:
        for name, value in saved.items():
            setattr(gen, name, value)


def rtl_sources(rtl: pathlib.Path) -> list[pathlib.Path]:
    """The SystemVerilog files rtl/sources.f lists, in its order."""
    return [rtl / line.strip() for line in (rtl / "sources.f").read_text().splitlines()
            if line.strip().endswith(".sv") and not line.startswith("#")]


def lint_niu(rtl: pathlib.Path, gen_dir: pathlib.Path, lanes: int = 1,
             constants: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    """`verilator --lint-only -Wall` of niu.sv with `lanes` lanes, on the generated constants or on
    a modified copy of them (`constants`)."""
    svh = constants or gen_dir / "niu_constants.svh"
    cmd = ["verilator", "--lint-only", "-Wall", f"-I{svh.parent}", f"-I{gen_dir}", "--top-module", "niu",
           f"-GLanes={lanes}", str(rtl / "niu.vlt"), str(svh), *map(str, rtl_sources(rtl))]
    return subprocess.run(cmd, capture_output=True, text=True)


def run_checks(doc: str, argv: list[str], checks: Callable[[pathlib.Path, pathlib.Path], list[str]],
               passed: Callable[[], str]) -> int:
    """Parses --rtl and --gen-dir, runs `checks(rtl, gen_dir)`, prints each failure or `passed()`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rtl", required=True, type=pathlib.Path)
    parser.add_argument("--gen-dir", required=True, type=pathlib.Path)
    args = parser.parse_args(argv)
    failures = checks(args.rtl, args.gen_dir)
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(passed())
    return 1 if failures else 0
