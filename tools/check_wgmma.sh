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
# The wide forward's FA3 loops (set_window_wide_loop 1 / 2) overlap the softmax with P V only if
# the exponentials stay between the two waits (WARPGROUP.DEPBAR.LE 1 .. 0); ptxas once hoisted
# the second wait above them, legally and silently (2026-12-06 (e)). Checked where a cuobjdump
# is at hand (the CUDA toolkit's, or the one torch's triton wheel ships).
cuobjdump="$(command -v cuobjdump || true)"
for c in /usr/local/cuda/bin/cuobjdump "$ROOT"/.venv/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump; do
  [[ -z "$cuobjdump" && -x "$c" ]] && cuobjdump="$c"
done
obj="$out/window_forward_wgmma.cu.o"
if [[ -n "$cuobjdump" && -f "$obj" ]]; then
  "$cuobjdump" -sass "$obj" >"$out/forward.sass" 2>/dev/null || true
  python3 - "$out/forward.sass" <<'PY' || status=1
import re, sys
text = open(sys.argv[1]).read()
checked, bad = 0, []
for part in re.split(r"\n\s*Function : ", text)[1:]:
    name, body = part.split("\n", 1)
    # kOverlap, the kernel's last template argument: ...ELi1EEEvNS1_13ForwardParams...
    m = re.search(r"EL(?:b[01]E)+Li([12])EEEv", name)
    if "window_forward_wgmma_kernel" not in name or not m:
        continue
    checked += 1
    lines = body.split("\n")
    first = next((i for i, l in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in l), None)
    if first is None:
        bad.append((name, "no wait for all but one group"))
        continue
    second = next((i for i in range(first + 1, len(lines))
                   if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in lines[i]), len(lines))
    exps = sum("MUFU.EX2" in l for l in lines[first:second])
    if exps < 32:
        bad.append((name, f"{exps} exponentials between the waits"))
for name, why in bad:
    print(f"check_wgmma: overlap lost in ...{name.strip()[-90:]}: {why}")
if checked == 0:
    print("check_wgmma: no FA3-loop kernels found in the SASS")
    sys.exit(1)
if bad:
    sys.exit(1)
print(f"check_wgmma: {checked} FA3-loop kernels keep their softmax between the two waits")
PY
else
  echo "check_wgmma: no cuobjdump here: the FA3 loops' wait order is not checked"
fi
exit "$status"
