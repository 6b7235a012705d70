#!/usr/bin/env python3
"""Runs one libFuzzer harness, sorts what it found, and reports executions and coverage.

    run_fuzzer.py BINARY --seeds DIR --work DIR (--seconds S | --runs N) [--jobs J] [--json OUT]

libFuzzer runs in fork mode with crashes, leaks, timeouts and out-of-memory inputs recorded and
fuzzing continuing past them, because Debian's HDF5 1.10 crashes on corrupt metadata far more
often than our code has bugs: stopping at the first finding would stop at a libhdf5 bug within
seconds.  Every finding is then replayed on its own and sorted by the stack of its report:

  ours    the first frames of the report are in aimcemu's code (or an uncaught exception, or a
          failed property check of the harness): a bug to fix, and the script exits 1;
  hdf5    the report's top frames are inside libhdf5 before any aimcemu frame: a bug of the HDF5
          library.  aimcemu reads user files in a checking process first
          (formats/untrusted_file.hpp), so such a file is refused, not fatal; the inputs are
          kept in tests/fuzz/hdf5_crashes/ as regression inputs for that path.
  unreproduced  the input runs cleanly when replayed on its own, or its report names no code
          at all (an out-of-memory whose live allocations are all the fuzzer's own): libhdf5
          keeps global state across the inputs of one fork-mode worker, so some of its failures
          need the history.  Counted and kept with --keep-hdf5 for a look, not a failure.

Prints one summary line per harness (executions, edge coverage "cov", features "ft", findings
by kind) and writes it as JSON with --json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATUS = re.compile(r"#(\d+):?\s+.*?cov: (\d+) ft: (\d+)")
FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+\s+(?:in (?P<function>.+?)\s+)?(?P<where>[(/].*)$")
# Frames of the sanitizer and fuzzer runtimes, the allocator and the C/C++ runtime: skipped
# when looking for the code that failed.
RUNTIME_PREFIXES = ("__asan", "__interceptor", "__sanitizer", "__lsan", "__ubsan", "__msan", "fuzzer::",
                    "__libc", "__GI_", "__gnu_cxx::", "__cxxabiv1::", "__cxa_", "std::terminate", "_Unwind")
RUNTIME_NAMES = {"malloc", "calloc", "realloc", "free", "abort", "raise", "gsignal", "operator new", "operator delete",
                 "operator new[]", "operator delete[]", "_start", "main",
                 # C library functions that ASan intercepts: the frame is in the fuzz binary, but
                 # the caller one frame down is the code at fault.
                 "strdup", "strndup", "strlen", "strnlen", "strcpy", "strncpy", "strcat", "strncat", "strcmp",
                 "strncmp", "strchr", "strrchr", "strstr", "memcpy", "memmove", "memset", "memcmp", "memchr",
                 "printf", "sprintf", "snprintf", "vsnprintf", "fprintf", "vfprintf", "sscanf", "vsscanf", "atoi",
                 "strtol", "strtoul", "strtod"}
# A replay that found nothing: libFuzzer's own closing note when the input ran cleanly.
CLEAN_REPLAY = re.compile(r"^Executed .* in \d+ ms$", re.M)
FAILURE = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|"
                     r"ALARM: working on the last Unit|terminate called|uncaught exception|SUMMARY:")
SYSTEM_LIBRARIES = ("libc.so", "libstdc++", "libgcc", "ld-linux", "libclang_rt", "libpthread", "libm.so")


def classify(report: str) -> str:
    """'hdf5' when the first frame of the first stack that is not runtime is inside libhdf5,
    'unreproduced' when the replay ran cleanly or its report names no code, else 'ours' (a
    failed property check of a harness aborts from the harness: 'ours')."""
    if CLEAN_REPLAY.search(report) and not FAILURE.search(report):
        return "unreproduced"
    for line in report.splitlines():
        match = FRAME.match(line)
        if not match:
            continue
        function = (match.group("function") or "").split("(")[0].strip()
        where = match.group("where")
        if "libhdf5" in where:
            return "hdf5"
        if function in RUNTIME_NAMES or function.startswith(RUNTIME_PREFIXES) or \
                any(lib in where for lib in SYSTEM_LIBRARIES):
            continue
        return "ours"
    # No frame outside the runtimes: an out-of-memory report that lists only libFuzzer's buffers.
    return "unreproduced" if "out-of-memory" in report else "ours"


def replay(binary: str, artifact: Path, timeout_s: int = 5) -> str:
    env = {**os.environ, "ASAN_OPTIONS": "symbolize=1:detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    done = subprocess.run([binary, f"-timeout={timeout_s}", "-rss_limit_mb=2048", os.fspath(artifact)], env=env,
                          capture_output=True, text=True, errors="replace", timeout=600)
    return done.stdout + done.stderr


@contextlib.contextmanager
def scratch_for_harnesses():
    """A folder for the harnesses' scratch files (AIMCEMU_FUZZ_SCRATCH, tests/fuzz/fuzz_input.hpp),
    in /dev/shm where there is one, removed at the end: a harness process that crashes (every
    finding does, and libFuzzer's fork mode starts many processes) cannot remove its own."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    folder = tempfile.mkdtemp(prefix="aimcemu-fuzz-run-", dir=base)
    os.environ["AIMCEMU_FUZZ_SCRATCH"] = folder  # this script's children inherit it
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # ctest's timeout: clean up first
    with scratch_for_harnesses():
        return fuzz(parse_arguments())


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--seeds", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path, help="writable corpus and artifact folder")
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0, help="stop after this many executions (in total)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=5,
                        help="seconds one input may take (a hang in libhdf5 would otherwise cost this each time)")
    parser.add_argument("--keep-hdf5", type=Path, default=None, help="copy libhdf5 findings here")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


def fuzz(args: argparse.Namespace) -> int:
    name = Path(args.binary).name
    corpus, artifacts = args.work / "corpus", args.work / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    command = [args.binary, f"-fork={args.jobs}", "-ignore_crashes=1", "-ignore_ooms=1", "-ignore_timeouts=1",
               "-rss_limit_mb=2048", f"-timeout={args.timeout}", "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
    if args.seconds:
        command.append(f"-max_total_time={args.seconds}")
    if args.runs:
        command.append(f"-runs={args.runs}")
    command += [os.fspath(corpus), os.fspath(args.seeds)]
    start = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, errors="replace")
    log = run.stdout + run.stderr
    (args.work / "fuzzer.log").write_text(log)
    statuses = STATUS.findall(log)
    executions, cov, ft = (int(v) for v in statuses[-1]) if statuses else (0, 0, 0)

    findings = {"ours": [], "hdf5": [], "unreproduced": []}
    for artifact in sorted(artifacts.iterdir()):
        kind = classify(replay(args.binary, artifact, args.timeout))
        findings[kind].append(artifact.name)
        if kind != "ours" and args.keep_hdf5:
            args.keep_hdf5.mkdir(parents=True, exist_ok=True)
            shutil.copy(artifact, args.keep_hdf5 / artifact.name)
    summary = {"harness": name, "executions": executions, "seconds": round(time.monotonic() - start, 1),
               "cov": cov, "ft": ft, "corpus": len(list(corpus.iterdir())),
               "findings_ours": findings["ours"], "findings_hdf5": len(findings["hdf5"]),
               "findings_unreproduced": len(findings["unreproduced"]), "fuzzer_exit": run.returncode}
    print(f"{name}: {executions} executions in {summary['seconds']} s, cov {cov}, ft {ft}, corpus "
          f"{summary['corpus']}; findings: {len(findings['ours'])} in aimcemu, {len(findings['hdf5'])} inside libhdf5, "
          f"{len(findings['unreproduced'])} not reproduced on replay")
    for artifact in findings["ours"]:
        print(f"  aimcemu bug: {artifacts / artifact}\n" + "\n".join("    " + l for l in
              replay(args.binary, artifacts / artifact, args.timeout).splitlines()[:40]))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if executions == 0:
        print(log[-3000:], file=sys.stderr)
        return 1
    return 1 if findings["ours"] else 0


if __name__ == "__main__":
    sys.exit(main())
