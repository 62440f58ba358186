#!/usr/bin/env bash
# Configures and builds a preset (default: release). Usage: scripts/build.sh [preset]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PRESET="${1:-release}"
cd "$ROOT"
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j "$(nproc)"
