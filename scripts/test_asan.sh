#!/usr/bin/env bash
# Builds the `asan` preset (CPU only; -O1 -g1, which compiles in half the time of RelWithDebInfo's
# -O2 -g: 55 vs 112 s of CPU for src/cli/eval_command.cpp; -fsanitize=address,undefined with UBSan
# errors fatal) and runs the CPU test suite under it. Excluded: label `gpu` (no CUDA in this
# build) and label `slow` (tests/reliability/*_slow_test: 1000 model calls, minutes in a release
# build and several times that under ASan; LeakSanitizer already covers leaks in the rest).
#   scripts/test_asan.sh [CTEST_ARGS...]     e.g. scripts/test_asan.sh -R Tokenizer
#   scripts/test_asan.sh --library           only the library's own tests (core, io, tokenizer,
#                                            score, select, cache, attention, evict, diagnostics,
#                                            reliability regressions): a few minutes. CI (scripts/test.sh)
#                                            runs the whole CPU suite (no argument).
# Wall time on the shared 2-core machine: see docs/RELIABILITY.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
start=$(date +%s)
cmake --preset asan >/dev/null
if [ "${1:-}" = "--library" ]; then
  folders='core\|io\|quant\|tokenizer\|score\|select\|cache\|attention\|evict\|diagnostics'
  targets=$(cmake --build --preset asan --target help |
            sed -n 's/^\.\.\. \(test_\('"$folders"'\)_[a-z0-9_]*\).*/\1/p')
  # shellcheck disable=SC2086
  cmake --build --preset asan -j "$(nproc)" --target $targets
  built=$(date +%s)
  for t in $targets; do
    "build/asan/tests/$t" --gtest_brief=1 || { echo "asan: $t failed" >&2; exit 1; }
  done
  done_at=$(date +%s)
  echo "asan (library): $(echo $targets | wc -w) test binaries, build $((built - start)) s, tests $((done_at - built)) s"
  exit 0
fi
cmake --build --preset asan -j "$(nproc)"
built=$(date +%s)
ctest --preset asan -j "$(nproc)" "$@"
done_at=$(date +%s)
echo "asan: build $((built - start)) s, tests $((done_at - built)) s"
