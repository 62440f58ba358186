#!/usr/bin/env bash
# Peak resident set of `kvevict generate` on a ~4K-token prompt with SmolLM2: full cache versus
# a 10% prefill budget (dropkv), measured by /usr/bin/time -v (Maximum resident set size).
#   tests/reliability/peak_rss.sh [KVEVICT_BINARY] [MAX_NEW]
# Defaults: build/cpu/kvevict (scripts/build.sh cpu), 32 new tokens. Prints one line per run:
#   config  prompt_tokens  peak_rss_MiB  kv_MiB before/after eviction and now  wall
# The prompt is deterministic (generated from a seed), so reruns compare like with like.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${1:-$ROOT/build/cpu/kvevict}"
MAX_NEW="${2:-32}"
[ -x "$BIN" ] || { echo "peak_rss.sh: $BIN not built (scripts/build.sh cpu)" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# 300 sentences of English-like filler with a needle: 3671 SmolLM2 tokens with the question.
python3 - "$TMP/prompt.txt" <<'PY'
import random, sys
rng = random.Random(1234)
words = ("the river city market green old stone bridge winter light north road small house "
         "people morning music paper window story garden silver train evening quiet field "
         "number letter summer mountain village harbor journey careful bright").split()
out = []
for i in range(300):
    n = rng.randint(8, 14)
    s = " ".join(rng.choice(words) for _ in range(n))
    out.append(s[0].upper() + s[1:] + ".")
    if i == 150:
        out.append("The special magic number is 48213.")
open(sys.argv[1], "w").write(" ".join(out) + "\n")
PY
run() {
  local name="$1"; shift
  /usr/bin/time -v -o "$TMP/time.txt" "$BIN" generate -m smollm2 -f "$TMP/prompt.txt" \
    --question "What is the special magic number?" -n "$MAX_NEW" --json "$@" >"$TMP/out.json"
  python3 - "$name" "$TMP/out.json" "$TMP/time.txt" <<'PY'
import json, re, sys
name, out, timing = sys.argv[1:4]
j = json.load(open(out))
t = open(timing).read()
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
wall = re.search(r"Elapsed \(wall clock\) time.*: (.+)", t).group(1).strip()
# kv_bytes_before/after are 0 without prefill eviction; kv_bytes_now is the cache after decoding.
print("%-9s prompt_tokens=%d peak_rss_MiB=%.1f kv_MiB_before=%.1f kv_MiB_after=%.1f "
      "kv_MiB_now=%.1f wall=%s" % (
    name, j["prompt_tokens"], rss_kb / 1024.0, j["kv_bytes_before"] / 2**20,
    j["kv_bytes_after"] / 2**20, j["kv_bytes_now"] / 2**20, wall))
PY
}
run full --method full
run dropkv10 --method dropkv --budget 0.1
