#!/usr/bin/env bash
# The long fuzzing campaign: every harness in tests/fuzz for RUNS executions (default 10^7), with
# ASan/UBSan, and a report of executions, coverage and findings per harness.
#
#   bench/fuzz_long.sh                       # 10^7 executions per harness, one job per core
#   RUNS=1000000 JOBS=2 bench/fuzz_long.sh   # a shorter campaign
#   SECONDS_CAP=600 bench/fuzz_long.sh       # stop each harness after 10 min even if RUNS is not reached
#
# Builds build-fuzz (clang-14, libFuzzer, -DAIMCEMU_SANITIZE=ON -DAIMCEMU_FUZZ=ON) when needed.
# Each harness runs through tests/fuzz/run_fuzzer.py: libFuzzer in fork mode, every finding
# replayed and sorted into bugs of aimcemu (the script then exits 1) and crashes inside libhdf5
# (copied to build-fuzz/fuzz_long/hdf5_findings/<harness>/; add the interesting ones to
# tests/fuzz/hdf5_crashes/, where test_io_hostile_files checks that the checked loaders survive
# them).  The corpus grows in build-fuzz/fuzz_long/<harness>/corpus across campaigns.
# Reports: build-fuzz/fuzz_long/<harness>.json and the table printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-10000000}"
JOBS="${JOBS:-$(nproc)}"
SECONDS_CAP="${SECONDS_CAP:-0}"
BUILD=build-fuzz
OUT="$BUILD/fuzz_long"

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAIMCEMU_SANITIZE=ON \
    -DAIMCEMU_FUZZ=ON -DAIMCEMU_BUILD_BENCH=OFF -DAIMCEMU_BUILD_RTL=OFF -DAIMCEMU_USE_DNNL=OFF >/dev/null
fi
cmake --build "$BUILD" -j"$JOBS" --target fuzz_all
mkdir -p "$OUT"

status=0
for binary in "$BUILD"/tests/fuzz/fuzz_*; do
  [ -x "$binary" ] || continue
  name="$(basename "$binary")"
  limit=(--runs "$RUNS")
  [ "$SECONDS_CAP" != 0 ] && limit+=(--seconds "$SECONDS_CAP")
  python3 tests/fuzz/run_fuzzer.py "$binary" --seeds "tests/fuzz/corpus/$name" --work "$OUT/$name" \
    --jobs "$JOBS" "${limit[@]}" --keep-hdf5 "$OUT/hdf5_findings/$name" --json "$OUT/$name.json" || status=1
done

python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
rows = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("fuzz_*.json"))]
print(f"\n{'harness':<20} {'executions':>12} {'seconds':>9} {'exec/s':>8} {'cov':>6} {'ft':>6} {'ours':>5} {'libhdf5':>8} "
      f"{'unrepro':>8}")
for r in rows:
    rate = r["executions"] / max(r["seconds"], 1e-9)
    print(f"{r['harness']:<20} {r['executions']:>12} {r['seconds']:>9.0f} {rate:>8.0f} {r['cov']:>6} {r['ft']:>6} "
          f"{len(r['findings_ours']):>5} {r['findings_hdf5']:>8} {r.get('findings_unreproduced', 0):>8}")
PY
exit $status
