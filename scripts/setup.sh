#!/usr/bin/env bash
# Installs everything aimcemu needs on Debian 12 (idempotent), builds the C++ core and the
# Python package.  Safe to run again: installed packages are skipped, builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake pkg-config libpcg-cpp-dev libeigen3-dev libhdf5-dev libgtest-dev
              libbenchmark-dev libdnnl-dev verilator iverilog yosys chromium)
PIP_PACKAGES=(numpy h5py pyyaml tqdm xarray h5netcdf matplotlib "dask[distributed]" scipy pandas pytest
              scikit-learn pybind11 scikit-build-core ninja "torch==2.13.0" onnx onnxruntime
              nbclient nbformat ipykernel scikit-build)
# aihwkit's pure-Python inference package (noise models, converters) for the interop tests: its
# source distribution, unpacked, not installed (building it compiles the whole simulator).
# `pip download` of an sdist prepares its metadata, which needs scikit-build (listed above);
# --no-build-isolation skips installing aihwkit's build requirements (cmake, mypy, ...).
AIHWKIT_VERSION=1.2.0
AIHWKIT_DIR=.deps/aihwkit-$AIHWKIT_VERSION

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

if [ ! -f "$AIHWKIT_DIR/src/aihwkit/inference/__init__.py" ]; then
  echo "setup: fetching aihwkit $AIHWKIT_VERSION's source into $AIHWKIT_DIR (git-ignored)"
  tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
       "aihwkit==$AIHWKIT_VERSION" -d "$tmp"; then
    mkdir -p .deps && tar -xzf "$tmp/aihwkit-$AIHWKIT_VERSION.tar.gz" -C .deps
  else
    echo "setup: WARNING: could not fetch aihwkit; tests/python/test_noise_aihwkit.py will skip" >&2
  fi
  rm -rf "$tmp"
fi

echo "setup: building the Python package (aimcemu._core)"
python3 -m pip install -q --no-build-isolation -e .

# pyenv installs console scripts behind shims; make `aimcemu` visible at once.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi

echo "setup: building the C++ core, tests and benchmarks"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: done"
