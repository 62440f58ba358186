#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each on its seed corpus.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every *_fuzzer)
# Corpora grow under build/fuzz/corpus/<target>; crashes (and UBSan reports, made fatal so that
# the input is kept) land in build/fuzz/crashes/ and make the script exit 1. A crash found becomes a regression test under tests/reliability/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_PER="${1:-60}"
shift || true
BUILD="$ROOT/build/fuzz"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DKVEVICT_CUDA=OFF -DKVEVICT_BUILD_TESTS=OFF -DKVEVICT_BUILD_BENCHMARKS=OFF \
  -DKVEVICT_BUILD_CLI=OFF -DKVEVICT_BUILD_FUZZERS=ON -DKVEVICT_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" >/dev/null
TARGETS=("$@")
if [ "${#TARGETS[@]}" -eq 0 ]; then
  for f in "$ROOT"/fuzz/*_fuzzer.cpp; do TARGETS+=("$(basename "${f%.cpp}")"); done
fi
cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}"
python3 "$ROOT/tools/fuzz/make_seeds.py" "$BUILD/seeds"
mkdir -p "$BUILD/crashes"
status=0
for t in "${TARGETS[@]}"; do
  kind="${t%_fuzzer}"
  seeds="$BUILD/seeds/$kind"
  corpus="$BUILD/corpus/$t"
  mkdir -p "$corpus"
  [ -d "$seeds" ] || seeds=""
  opts=""
  [ -f "$ROOT/fuzz/$t.options" ] && opts="$(cat "$ROOT/fuzz/$t.options")"
  echo "== $t for ${SECONDS_PER}s"
  # shellcheck disable=SC2086
  if ! "$BUILD/fuzz/$t" -max_total_time="$SECONDS_PER" -rss_limit_mb=4096 -print_final_stats=1 $opts \
       -artifact_prefix="$BUILD/crashes/${t}-" "$corpus" $seeds 2>&1 | tail -n 12; then
    status=1
  fi
done
exit $status
