#!/usr/bin/env bash
# Lint guard (CI: scripts/test.sh): clang-tidy with the checks of .clang-tidy (its top comment
# says which and why) over C++ files, using the compile commands of the release build
# (build/release/compile_commands.json; configured here when missing, nothing is compiled).
#   tools/check_tidy.sh                the files changed by the last commit (HEAD~1; every file
#                                      when HEAD has no parent)
#   tools/check_tidy.sh --base REV     the files changed since REV
#   tools/check_tidy.sh --all          every file (about 4 s a file on one core; see .clang-tidy)
#   tools/check_tidy.sh FILE...        these files
# A changed header is checked through its own .cpp (src/x/y.h -> src/x/y.cpp) when it has one:
# the checks report in our headers (HeaderFilterRegex) as they are compiled from a source file.
# Left out, and said so: CUDA translation units (.cu, and the src/cuda, src/model_cuda .cpp files
# nvcc compiles): their compile commands are nvcc's, which clang does not take, and clang 14
# parses neither the sm_90a inline PTX (wgmma) nor CUDA 12's headers; files in no compile command
# of the build (python/src: built only by the Python package; tools/).
# Exit 0 clean, 1 with findings (each file's clang-tidy output), 2 on bad usage or no clang-tidy.
# KVEVICT_TIDY_BUILD=dir picks another configured build; KVEVICT_TIDY_JOBS the parallel runs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/guard_files.sh
source tools/guard_files.sh
CLANG_TIDY="${CLANG_TIDY:-clang-tidy}"
guard_tool "$CLANG_TIDY" check_tidy
BUILD="${KVEVICT_TIDY_BUILD:-build/release}"
JOBS="${KVEVICT_TIDY_JOBS:-$(nproc)}"

list="$(guard_files "$@")" || exit 2
mapfile -t files < <([ -z "$list" ] || printf '%s\n' "$list")
if [ "${#files[@]}" -eq 0 ]; then
  echo "check_tidy: no C++ files to check"
  exit 0
fi
if [ ! -f "$BUILD/compile_commands.json" ]; then
  [ "$BUILD" = build/release ] ||
    { echo "check_tidy: $BUILD has no compile_commands.json" >&2; exit 2; }
  echo "check_tidy: configuring the release preset for its compile commands"
  cmake --preset release >/dev/null
fi
# The one header generated at build time (build/*/generated/build_info.h: src/eval/provenance.cpp).
cmake --build "$BUILD" --target kvevict_build_info >/dev/null 2>&1 || true

# Which of the files are translation units clang can check: print them, and what is left out.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvevict-tidy.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
printf '%s\n' "${files[@]}" | python3 -c '
import json, os, sys
root, db_path, out, skipped = sys.argv[1:5]
units = {}
for e in json.load(open(db_path)):
    cmd = e.get("command") or " ".join(e.get("arguments", []))
    units[os.path.realpath(os.path.join(e["directory"], e["file"]))] = cmd.split()[0]
chosen, left = [], []
for rel in sys.stdin.read().split():
    path = os.path.realpath(os.path.join(root, rel))
    base, ext = os.path.splitext(path)
    if ext in (".h", ".hpp", ".cuh"):
        source = next((base + e for e in (".cpp", ".cc") if base + e in units), None)
        if source is None:
            left.append(f"{rel} (a header; checked through the sources that include it)")
            continue
        path, rel = source, os.path.relpath(source, root)
    if path not in units:
        left.append(f"{rel} (in no compile command of the build)")
    elif os.path.basename(units[path]) == "nvcc" or ext in (".cu", ".cuh"):
        left.append(f"{rel} (compiled by nvcc)")
    elif rel not in chosen:
        chosen.append(rel)
open(out, "w").write("".join(r + "\n" for r in chosen))
open(skipped, "w").write("".join(r + "\n" for r in left))
' "$ROOT" "$BUILD/compile_commands.json" "$WORK/units" "$WORK/skipped"
while read -r s; do echo "check_tidy: not checked: $s"; done <"$WORK/skipped"
mapfile -t units <"$WORK/units"
if [ "${#units[@]}" -eq 0 ]; then
  echo "check_tidy: nothing to check"
  exit 0
fi

start=$(date +%s)
export CLANG_TIDY BUILD WORK
# One clang-tidy a file, JOBS at a time; each writes its output and its seconds under $WORK.
# -Wno-unknown-warning-option: the commands are GCC's, whose warning flags clang may not know.
# --extra-arg-before=-std=gnu++17: CMake leaves -std out where GCC's default (gnu++17) already
# meets cxx_std_17, and clang 14's default is gnu++14 (no std::variant); a command's own -std,
# later on the line, still wins.
# shellcheck disable=SC2016
printf '%s\n' "${units[@]}" | xargs -P "$JOBS" -I{} sh -c '
  f="{}"; key="$(echo "$f" | tr / _)"; t0=$(date +%s%N)
  if "$CLANG_TIDY" -p "$BUILD" --quiet --extra-arg-before=-std=gnu++17 \
       --extra-arg=-Wno-unknown-warning-option "$f" \
       >"$WORK/$key.out" 2>"$WORK/$key.err"; then rc=0; else rc=1; fi
  echo "$rc $((($(date +%s%N) - t0) / 1000000)) $f" >"$WORK/$key.rc"' || true
failed=0
total=0
for f in "${units[@]}"; do
  key="$(echo "$f" | tr / _)"
  read -r rc ms _ <"$WORK/$key.rc"
  total=$((total + ms))
  if [ "$rc" != 0 ]; then
    echo "check_tidy: $f: findings ($((ms / 1000)) s):"
    grep -v '^[0-9]* warnings\? generated\.$' "$WORK/$key.out" "$WORK/$key.err" -h | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "check_tidy: ${#units[@]} files in $(($(date +%s) - start)) s ($JOBS at a time;" \
     "$(awk -v t="$total" -v n="${#units[@]}" 'BEGIN { printf "%.1f", t / n / 1000 }') s a file)"
if [ "$failed" -gt 0 ]; then
  echo "check_tidy: FAILED: $failed of ${#units[@]} files have findings"
  exit 1
fi
echo "check_tidy: clean"
