#!/usr/bin/env bash
# Installs everything aimcemu needs on Debian 12 (idempotent), builds the C++ core and the
# Python package.  Safe to run again: installed packages are skipped, builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake pkg-config libpcg-cpp-dev libeigen3-dev libhdf5-dev libgtest-dev
              libbenchmark-dev libdnnl-dev verilator iverilog yosys chromium
              clang-14 libfuzzer-14-dev libclang-rt-14-dev)  # clang/libFuzzer: tests/fuzz
PIP_PACKAGES=(numpy h5py pyyaml tqdm xarray h5netcdf matplotlib "dask[distributed]" pytest hypothesis
              scikit-learn pybind11 scikit-build-core ninja "torch==2.13.0")

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

echo "setup: installing Python packages"
python3 -m pip install -q "${PIP_PACKAGES[@]}"

echo "setup: building the Python package (aimcemu._core)"
python3 -m pip install -q --no-build-isolation -e .

# pyenv installs console scripts behind shims; make `aimcemu` visible at once.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi

echo "setup: building the C++ core, tests and benchmarks"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: done"
