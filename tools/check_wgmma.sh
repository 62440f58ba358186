#!/usr/bin/env bash
# Guard (CI: scripts/test.sh, after the release build): ptxas must not serialize the warpgroup MMA of
# the wgmma kernels. When registers run short or a non-wgmma instruction touches an in-flight
# accumulator, ptxas keeps the kernel correct but waits after every wgmma and says so only as an
# info line ("(C7510)" .. "(C7515) Potential Performance Loss: wgmma.mma_async instructions are
# serialized"): a silent 2x on the tensor cores (2026-12-06 (d): the TMA + pipelined forward at
# 288 threads hit it). Compiles each wgmma translation unit once more with the release build's
# command and -Xptxas -v (about 20 s a file on one core), two at a time.
#   tools/check_wgmma.sh [BUILD_DIR]     default build/release; exit 0 clean (or no CUDA build),
#                                        1 when a kernel is serialized (the lines are printed)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$ROOT/build/release}"
db="$build/compile_commands.json"
if [[ ! -f "$db" ]] || ! grep -q 'window_forward_wgmma.cu' "$db"; then
  echo "check_wgmma: no CUDA build in $build (nothing to check)"
  exit 0
fi
out="$(mktemp -d "${TMPDIR:-/tmp}/kvevict-wgmma.XXXXXX")"
trap 'rm -rf "$out"' EXIT
files=(window_forward_wgmma.cu score_pass_wgmma.cu score_pass_keymajor.cu)
# The command of each file from the compilation database, its output sent to a scratch object.
python3 - "$db" "$out" "${files[@]}" <<'PY'
import json, shlex, sys
db, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
for entry in json.load(open(db)):
    for name in names:
        if entry["file"].endswith("/src/cuda/" + name):
            args = shlex.split(entry["command"])
            i = args.index("-o")
            args[i + 1] = f"{out}/{name}.o"
            with open(f"{out}/{name}.cmd", "w") as f:
                f.write(f"cd {shlex.quote(entry['directory'])} && {shlex.join(args)} -Xptxas -v\n")
PY
status=0
pids=()
for f in "${files[@]}"; do
  [[ -f "$out/$f.cmd" ]] || { echo "check_wgmma: $f is not in $db"; status=1; continue; }
  bash "$out/$f.cmd" >"$out/$f.log" 2>&1 &
  pids+=($!)
  if (( ${#pids[@]} == 2 )); then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for f in "${files[@]}"; do
  [[ -f "$out/$f.log" ]] || continue
  if grep -q '(C75' "$out/$f.log"; then
    echo "check_wgmma: $f: wgmma serialized:"
    grep '(C75' "$out/$f.log" | sed 's/^/    /'
    status=1
  fi
done
if (( status == 0 )); then echo "check_wgmma: ${#files[@]} files, no serialized wgmma"; fi
exit "$status"
