#!/usr/bin/env bash
# Rewrites C++ / CUDA files in place with clang-format (.clang-format), the fix for what
# tools/check_format.sh reports. Default: every tracked file (the one formatting commit of
# issue 18); otherwise the same selection as the check (--base REV, or FILE...). Prints how many
# files changed. Lines that stay over 100 columns are then listed by tools/check_format.sh.
#   tools/format_all.sh [--base REV | FILE...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/guard_files.sh
source tools/guard_files.sh
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
guard_tool "$CLANG_FORMAT" format_all
[ $# -gt 0 ] || set -- --all
list="$(guard_files "$@")" || exit 2
mapfile -t files < <([ -z "$list" ] || printf '%s\n' "$list")
changed=0
for f in "${files[@]}"; do
  before="$(md5sum <"$f")"
  "$CLANG_FORMAT" --style=file -i "$f"
  [ "$(md5sum <"$f")" = "$before" ] || { echo "formatted $f"; changed=$((changed + 1)); }
done
echo "format_all: $changed of ${#files[@]} files changed"
