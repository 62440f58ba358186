#!/usr/bin/env bash
# A copy of a build's CUDA library with some of its source files as they were at an earlier
# revision: the base of a device A/B (tools/device_bundle.sh BASE_LIB=OUT_DIR/libkvevict_cuda.so.*,
# tools/device_session.sh score-lib-ab) for a change confined to those files, without building
# the earlier revision (on 2 cores, a full CUDA build is ~20 minutes; one file is one to two).
#
#   tools/lib_with_files_at.sh BUILD_DIR REV OUT_DIR FILE...
#
# Each FILE (a source of the kvevict_cuda target, e.g. src/cuda/key_scores.cu) is taken from REV
# (git show) and compiled with BUILD_DIR's own command line for it (compile_commands.json), so it
# sees TODAY's headers: only for changes that leave every header the file includes alone. The
# library is then linked with BUILD_DIR's link line, those objects swapped in, into OUT_DIR.
set -euo pipefail
build="${1:?usage: lib_with_files_at.sh BUILD_DIR REV OUT_DIR FILE...}"
rev="${2:?usage: lib_with_files_at.sh BUILD_DIR REV OUT_DIR FILE...}"
out="${3:?usage: lib_with_files_at.sh BUILD_DIR REV OUT_DIR FILE...}"
shift 3
[[ $# -gt 0 ]] || { echo "lib_with_files_at: name at least one FILE" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$build" && pwd)"
link="$build/src/CMakeFiles/kvevict_cuda.dir/link.txt"
[[ -f "$link" && -f "$build/compile_commands.json" ]] ||
  { echo "lib_with_files_at: $build has no kvevict_cuda link line or compile commands" >&2; exit 2; }
git -C "$root" rev-parse --verify -q "$rev^{commit}" >/dev/null ||
  { echo "lib_with_files_at: '$rev' is not a revision of $root" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
link_line="$(cat "$link")"
for file in "$@"; do
  src="$out/$(basename "$file")"
  git -C "$root" show "$rev:$file" >"$src" ||
    { echo "lib_with_files_at: $file is not in $rev" >&2; exit 2; }
  # The build's command for FILE, in its directory, reading the old source and writing OUT_DIR's
  # object (never the build's own).
  new_obj="$out/$(basename "$file").o"
  IFS=$'\t' read -r dir obj cmd < <(python3 - "$build/compile_commands.json" "$root/$file" "$src" \
    "$new_obj" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        args = shlex.split(e["command"])
        at = args.index("-o")
        obj = args[at + 1]
        args[at + 1] = sys.argv[4]
        args = [sys.argv[3] if a == sys.argv[2] else a for a in args]
        print(e["directory"], obj, shlex.join(args), sep="\t")
        break
else:
    sys.exit(f"lib_with_files_at: {sys.argv[2]} has no compile command in the build")
PY
  )
  [[ "$link_line" == *" $obj "* ]] ||
    { echo "lib_with_files_at: $file is not linked into libkvevict_cuda" >&2; exit 2; }
  echo "lib_with_files_at: compiling $file at $rev"
  (cd "$dir" && eval "$cmd")
  link_line="${link_line/ $obj / $new_obj }"
done
lib="$(sed -n 's/.* -o \([^ ]*\) .*/\1/p' <<<"$link_line")"
link_line="${link_line/ -o $lib / -o $out/$lib }"
(cd "$build/src" && eval "$link_line")
echo "lib_with_files_at: $out/$lib"
