#!/usr/bin/env bash
# The test command: installs every dependency, fetches the two small checkpoints, builds
# everything (CUDA code too when a toolkit is present) and runs the CPU test suite.
# GPU tests carry the label `gpu` and run through tools/gpu_check.sh on a GPU machine; tests
# labelled `slow` (the 1000-call leak check) run with `ctest --preset slow`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# Each stage prints its wall time ("ci: <stage>: N s"), so a CI log says where the minutes go.
ci_start=$(date +%s)
stage_start=$ci_start
stage_done() {
  local now
  now=$(date +%s)
  echo "ci: $1: $((now - stage_start)) s (total $((now - ci_start)) s)"
  stage_start=$now
}
scripts/install_deps.sh --eval --no-venv
# .venv (numpy, pytest, the build backend, torch with its CUDA libraries, transformers, kvpress:
# about 5.6 GB to download and unpack, 424 s on an empty pip cache, docs/RESULTS.md) is network and
# disk work: it installs in the background while the guards and the release build use the cores,
# and the Python step waits for it. Its log is printed if it fails.
venv_log="$(mktemp "${TMPDIR:-/tmp}/kvevict-venv.XXXXXX")"
scripts/install_deps.sh --venv-only >"$venv_log" 2>&1 &
venv_pid=$!
trap 'kill "$venv_pid" 2>/dev/null || true; rm -f "$venv_log"' EXIT
stage_done "system dependencies (apt)"
# ccache for every C++ compile of the run, set before the first configure (CMake reads the
# launcher then). On a fresh machine every compile misses, except the Python package's build of
# the core library, which compiles exactly the release build's command lines (same flags, no
# <target>_EXPORTS define, the same paths relative to CCACHE_BASEDIR: see the Python step) and so
# takes its objects instead of compiling them again. Depend mode (CCACHE_DEPEND): a miss costs no
# extra preprocessor run; the compiler's own -MD output records the headers. The sloppiness is the
# one precompiled headers need (KVEVICT_FAST_BUILD: the asan preset's test headers).
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$ROOT" CCACHE_DEPEND=1
  sloppy=pch_defines,time_macros,include_file_mtime,include_file_ctime
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-$sloppy}"
fi
# Guards first, cheap and before the build: the C++ / CUDA files the last commit changed must be
# clang-format clean (tools/check_format.sh) and clang-tidy clean (tools/check_tidy.sh, .clang-tidy;
# it needs only the release preset's compile commands, configured here, nothing compiled).
tools/check_format.sh
tools/check_tidy.sh
stage_done "format and tidy guards"
scripts/setup.sh --no-venv
stage_done "models, corpus, release build"
# ptxas must not serialize the wgmma kernels' tensor-core work (tools/check_wgmma.sh: it says so
# only as an info line; about 30 s on 2 cores; nothing to check without a CUDA build).
tools/check_wgmma.sh build/release
stage_done "wgmma serialization guard"
# ctest runs tests side by side; idle OpenMP workers must sleep, not spin, or they starve each other.
export OMP_WAIT_POLICY=PASSIVE
ctest --preset release -j "$(nproc)"
stage_done "release tests"
# kvevict as a package (README "Use kvevict from your project"): install into a temporary prefix,
# build and run examples/ with find_package(kvevict) and with pkg-config (C++ and the C API from C),
# and configure it under a parent project. Measured on the 2-core machine from the release build:
# 94 s with the CUDA library (docs/RESULTS.md).
scripts/check_package.sh build/release
stage_done "check_package"
wait "$venv_pid" || { cat "$venv_log"; echo "test.sh: installing .venv failed" >&2; exit 1; }
stage_done "waiting for .venv"
# The Python package (pyproject.toml): built CPU-only here (no GPU in CI, and the CUDA kernels
# would double the build on 2 cores; tools/python_gpu_check.sh builds and tests the CUDA path),
# then its pytest suite (tests/python: numpy, torch CPU, Hugging Face, kvpress). Measured from a
# fresh clone on the 2-core machine, empty caches: build 292 s, tests 43 s (+ 424 s for .venv in
# install_deps.sh), docs/RESULTS.md.
# Built the way the release build compiles, so that ccache serves the core library from it: the
# same compiler name (ccache hashes it), Unix Makefiles (each target compiles in its own folder)
# in a folder as deep as build/release (the same relative paths), on every core (make's default
# is one job).
py_start=$(date +%s)
py_cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/release/CMakeCache.txt)"
CXX="${py_cxx:-c++}" CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation . \
  -C cmake.define.KVEVICT_CUDA=OFF -C build-dir=build/python-ci
py_built=$(date +%s)
.venv/bin/python -m pytest -q tests/python
echo "python: build $((py_built - py_start)) s, tests $(($(date +%s) - py_built)) s"
stage_done "python package and tests"
# The CPU test suite again under AddressSanitizer + UBSan (labels gpu and slow excluded): every
# bad-input test must fail cleanly and never touch memory it should not; LeakSanitizer checks leaks.
scripts/test_asan.sh
stage_done "asan build and tests"
