#!/usr/bin/env bash
# The test command: installs every dependency, fetches the two small checkpoints, builds
# everything (CUDA code too when a toolkit is present) and runs the CPU test suite.
# GPU tests carry the label `gpu` and run through tools/gpu_check.sh on a GPU machine; tests
# labelled `slow` (the 1000-call leak check) run with `ctest --preset slow`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# Guards first, cheap and before the build: the C++ / CUDA files the last commit changed must be
# clang-format clean (tools/check_format.sh) and clang-tidy clean (tools/check_tidy.sh, .clang-tidy;
# it needs only the release preset's compile commands, configured here, nothing compiled).
scripts/install_deps.sh --eval
tools/check_format.sh
tools/check_tidy.sh
scripts/setup.sh
# ctest runs tests side by side; idle OpenMP workers must sleep, not spin, or they starve each other.
export OMP_WAIT_POLICY=PASSIVE
ctest --preset release -j "$(nproc)"
# kvevict as a package (README "Use kvevict from your project"): install into a temporary prefix,
# build and run examples/ with find_package(kvevict) and with pkg-config (C++ and the C API from C),
# and configure it under a parent project. Measured on the 2-core machine from the release build:
# 94 s with the CUDA library (docs/RESULTS.md).
scripts/check_package.sh build/release
# The Python package (pyproject.toml): built CPU-only here (no GPU in CI, and the CUDA kernels
# would double the build on 2 cores; tools/python_gpu_check.sh builds and tests the CUDA path),
# then its pytest suite (tests/python: numpy, torch CPU, Hugging Face, kvpress). Measured from a
# fresh clone on the 2-core machine, empty caches: build 292 s, tests 43 s (+ 424 s for .venv in
# install_deps.sh), docs/RESULTS.md.
py_start=$(date +%s)
# ccache with paths relative to the clone, so CI runs from fresh clones in new folders hit it.
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$ROOT"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation . \
  -C cmake.define.KVEVICT_CUDA=OFF
py_built=$(date +%s)
.venv/bin/python -m pytest -q tests/python
echo "python: build $((py_built - py_start)) s, tests $(($(date +%s) - py_built)) s"
# The CPU test suite again under AddressSanitizer + UBSan (labels gpu and slow excluded): every
# bad-input test must fail cleanly and never touch memory it should not; LeakSanitizer checks leaks.
scripts/test_asan.sh
