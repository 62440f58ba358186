#!/usr/bin/env bash
# Installs everything kvevict needs to build, test and evaluate, from Debian's packages and PyPI.
# Idempotent: packages already present are skipped. Run as root (or with sudo available).
#   scripts/install_deps.sh           build + test dependencies
#   scripts/install_deps.sh --eval    also the evaluation corpora (Austen novels, WordNet) and plotting
#   --no-venv / --venv-only           everything but .venv / only .venv (scripts/test.sh installs
#                                     .venv in the background while the C++ builds run)
# Also creates .venv, the Python package's environment (README "Python"); KVEVICT_PY_TORCH=0 leaves
# torch, transformers and kvpress out of it (the numpy path is tested either way).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WITH_EVAL=0
SYSTEM=1
VENV_STEP=1
for arg in "$@"; do
  case "$arg" in
    --eval) WITH_EVAL=1 ;;
    --no-venv) VENV_STEP=0 ;;
    --venv-only) SYSTEM=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$arg'; expected --eval, --no-venv, --venv-only" \
            "or --help" >&2
       exit 2 ;;
  esac
done
if [ "$SYSTEM" = 0 ] && [ "$VENV_STEP" = 0 ]; then
  echo "install_deps.sh: --no-venv and --venv-only leave nothing to install" >&2
  exit 2
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PKGS=(build-essential cmake git python3 python3-pip python3-venv ninja-build ccache
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
      libopenblas-dev libomp-dev clang libclang-rt-14-dev pkg-config
      clang-format clang-tidy)  # the format and lint guards (tools/check_format.sh, check_tidy.sh)
if [ "$WITH_EVAL" = 1 ]; then PKGS+=(r-cran-janeaustenr wordnet-base); fi

if [ "$SYSTEM" = 1 ]; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "install_deps: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi

  PY=python3
  if [ "$WITH_EVAL" = 1 ]; then
    $PY -c "import matplotlib" 2>/dev/null || $PY -m pip install -q matplotlib numpy
  fi
fi
[ "$VENV_STEP" = 1 ] || { echo "install_deps: done (without .venv)"; exit 0; }
# The Python package: build backend + tests in .venv. torch from PyPI brings its CUDA libraries
# (about 3 GB; 5m23s to download and install on the 2-core machine with an empty pip cache, see
# docs/RESULTS.md); transformers is pinned to 5.2 because kvpress 0.5.5 requires < 5.3 (the code
# is also tested on 5.17 and 5.24).
VENV="$ROOT/.venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY_PKGS=("numpy>=1.22" "pytest>=7" "nanobind>=2.4" "scikit-build-core>=0.10")
if [ "${KVEVICT_PY_TORCH:-1}" != 0 ]; then
  PY_PKGS+=("torch>=2.3" "transformers==5.2.0" "kvpress==0.5.5")
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
echo "install_deps: done"
