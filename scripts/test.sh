#!/usr/bin/env bash
# Runs every test: C++ (ctest, Release and an ASan/UBSan build), then Python (pytest, slow tests
# included).  Pass --fast to skip the sanitizer build and the slow tests.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
[ "${1:-}" = "--fast" ] && FAST=1
JOBS="$(nproc)"

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$JOBS"
(cd build && ctest --output-on-failure -j"$JOBS")

if [ "$FAST" = 0 ]; then
  # Sanitizers: the C++ tests only (no RTL, no benchmarks), a debug-ish optimised build.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAIMCEMU_SANITIZE=ON \
        -DAIMCEMU_BUILD_BENCH=OFF -DAIMCEMU_BUILD_RTL=OFF -DAIMCEMU_USE_DNNL=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$JOBS" -L cpp)

  # Fuzzing: each libFuzzer harness for 30 s under ASan/UBSan (clang; docs/reliability.md).
  if command -v clang++-14 >/dev/null 2>&1; then
    CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAIMCEMU_SANITIZE=ON \
          -DAIMCEMU_FUZZ=ON -DAIMCEMU_BUILD_BENCH=OFF -DAIMCEMU_BUILD_RTL=OFF -DAIMCEMU_USE_DNNL=OFF >/dev/null
    cmake --build build-fuzz -j"$JOBS" --target fuzz_all
    (cd build-fuzz && ctest --output-on-failure -j"$JOBS" -L fuzz)
  else
    echo "test.sh: clang-14 not found: fuzzing skipped (the seed corpora were replayed above)"
  fi
fi

# The Python extension is rebuilt if C++ changed (editable install, incremental build dir).
python3 -m pip install -q --no-build-isolation -e .
if [ "$FAST" = 0 ]; then
  python3 -m pytest -q -m "slow or not slow" tests/python
else
  python3 -m pytest -q -m "not slow" tests/python
fi
