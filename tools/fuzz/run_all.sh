#!/usr/bin/env bash
# Runs fuzz targets concurrently (one libFuzzer process each) on a machine with spare cores, for
# long campaigns; scripts/fuzz.sh runs them one after another. Build first (scripts/fuzz.sh 0).
#   tools/fuzz/run_all.sh BUILD_DIR SECONDS OUT_DIR TARGET...
# OUT_DIR/<target>.log holds each run's output (final stats: execs, exec/s); crash inputs land in
# OUT_DIR/crashes/. Exits 1 if any target found a crash.
set -uo pipefail
BUILD="$1"; SECS="$2"; OUT="$3"; shift 3
mkdir -p "$OUT/crashes"
pids=()
for t in "$@"; do
  kind="${t%_fuzzer}"
  corpus="$BUILD/corpus/$t"
  mkdir -p "$corpus"
  seeds="$BUILD/seeds/$kind"
  [ -d "$seeds" ] || seeds=""
  opts=""
  [ -f "$(dirname "$0")/../../fuzz/$t.options" ] && opts="$(cat "$(dirname "$0")/../../fuzz/$t.options")"
  # shellcheck disable=SC2086
  "$BUILD/fuzz/$t" -max_total_time="$SECS" -rss_limit_mb=4096 -print_final_stats=1 $opts \
    -artifact_prefix="$OUT/crashes/${t}-" "$corpus" $seeds >"$OUT/$t.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for t in "$@"; do
  echo "== $t: $(grep -E '^stat::number_of_executed_units' "$OUT/$t.log" | awk '{print $2}') execs," \
       "$(grep -E '^stat::average_exec_per_sec' "$OUT/$t.log" | awk '{print $2}') exec/s," \
       "$(grep -cE '^==[0-9]+==ERROR|deadly signal|SUMMARY' "$OUT/$t.log") error lines"
done
exit $status
