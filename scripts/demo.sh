#!/usr/bin/env bash
# The main job: installs every dependency, fetches the default model, builds, and runs
# `kvevict demo`: a long needle-in-a-haystack prompt answered with the full cache and with DropKV
# at the smallest measured budget within 10 points of the full cache (10% for the default model),
# printing both answers, their measured accuracy and the KV memory saved. Extra arguments go to `kvevict demo`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
. scripts/openblas_env.sh
exec build/release/kvevict demo "$@"
