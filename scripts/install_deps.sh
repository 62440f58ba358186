#!/usr/bin/env bash
# Installs everything kvevict needs to build, test and evaluate, from Debian's packages and PyPI.
# Idempotent: packages already present are skipped. Run as root (or with sudo available).
#   scripts/install_deps.sh           build + test dependencies
#   scripts/install_deps.sh --eval    also the evaluation corpora (Austen novels, WordNet) and plotting
set -euo pipefail
WITH_EVAL=0
for arg in "$@"; do
  case "$arg" in
    --eval) WITH_EVAL=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$arg'; expected --eval or --help" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PKGS=(build-essential cmake git python3 python3-pip
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
      libopenblas-dev libomp-dev clang libclang-rt-14-dev)
if [ "$WITH_EVAL" = 1 ]; then PKGS+=(r-cran-janeaustenr wordnet-base); fi

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
echo "install_deps: done"
