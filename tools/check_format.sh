#!/usr/bin/env bash
# Formatting guard (CI: scripts/test.sh): every C++ / CUDA file it is given must be exactly what
# clang-format makes of it (.clang-format; `clang-format --dry-run -Werror`), and no line may be
# longer than the style's 100 columns after formatting: what is left long then is what clang-format
# cannot break (an #include, a long word or URL in a comment, a token), which a person must fix.
#   tools/check_format.sh                the files changed by the last commit (HEAD~1; every
#                                        tracked file when HEAD has no parent)
#   tools/check_format.sh --base REV     the files changed since REV
#   tools/check_format.sh --all          every tracked file
#   tools/check_format.sh FILE...        these files
# Exit 0 when all are clean, 1 naming each file that is not (and its first differences), 2 on bad
# usage or no clang-format. tools/format_all.sh rewrites files in place.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/guard_files.sh
source tools/guard_files.sh
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
guard_tool "$CLANG_FORMAT" check_format
COLUMNS_MAX=100

list="$(guard_files "$@")" || exit 2
mapfile -t files < <([ -z "$list" ] || printf '%s\n' "$list")
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_format: no C++ / CUDA files to check"
  exit 0
fi
bad=0
long=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "check_format: $f: no such file" >&2; bad=$((bad + 1)); continue; }
  if ! out="$("$CLANG_FORMAT" --style=file --dry-run -Werror "$f" 2>&1)"; then
    n="$(grep -c ': error: code should be clang-formatted' <<<"$out" || true)"
    echo "check_format: $f: not clang-format clean ($n places; first ones below)"
    grep -A2 ': error: code should be clang-formatted' <<<"$out" | head -9 | sed 's/^/    /'
    bad=$((bad + 1))
  fi
  # Lines still too long once formatted (line numbers of the formatted file: of this one when it
  # is clean). Columns are characters, as clang-format counts them, not bytes.
  if l="$("$CLANG_FORMAT" --style=file "$f" | python3 -c '
import sys
for i, line in enumerate(sys.stdin.buffer.read().decode("utf-8", "replace").splitlines(), 1):
    if len(line) > int(sys.argv[1]):
        print(f"{sys.argv[2]}:{i}: {len(line)} columns: {line.strip()[:80]}")
' "$COLUMNS_MAX" "$f")" && [ -n "$l" ]; then
    echo "check_format: $f: lines longer than $COLUMNS_MAX columns that clang-format cannot break:"
    sed 's/^/    /' <<<"$l"
    long=$((long + 1))
  fi
done
if [ "$bad" -gt 0 ] || [ "$long" -gt 0 ]; then
  echo "check_format: FAILED: $bad of ${#files[@]} files not clang-format clean, $long with" \
       "long lines (fix: tools/format_all.sh FILE..., then shorten what is left long)"
  exit 1
fi
echo "check_format: ${#files[@]} files clean"
