#!/usr/bin/env bash
# CPU end-to-end speed of a real model: prefill and decode tokens/s at several prompt lengths, with the
# full cache and with prefill eviction, through `kvevict generate --json` (Austen prose as the prompt).
#   tools/cpu_model_bench.sh [MODEL] [LENGTHS] [SETTINGS] [DECODE_TOKENS]
#     MODEL     smollm2 (default), gemma3-270m or a .gguf path
#     LENGTHS   prompt lengths in words, comma-separated (default 760,3050: ~1K and ~4K tokens)
#     SETTINGS  method@budget list, comma-separated (default full,dropkv@0.1,snapkv@0.1)
#     DECODE_TOKENS tokens generated per run (default 32)
# Prints a markdown table; writes every run's JSON to $OUT (default out/cpu_model_bench/).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:-smollm2}"
LENGTHS="${2:-760,3050}"
SETTINGS="${3:-full,dropkv@0.1,snapkv@0.1}"
NEW="${4:-32}"
KV="${KVEVICT_BIN:-$ROOT/build/release/kvevict}"
OUT="${OUT:-$ROOT/out/cpu_model_bench}"
mkdir -p "$OUT"
. "$ROOT/scripts/openblas_env.sh"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
[ -x "$KV" ] || { echo "cpu_model_bench: $KV not built (scripts/build.sh release)" >&2; exit 2; }
BOOK="$ROOT/data/corpus/austen/emma.txt"
[ -r "$BOOK" ] || { echo "cpu_model_bench: $BOOK missing (scripts/prepare_corpus.sh)" >&2; exit 2; }

echo "| model | prompt tokens | setting | prefill tok/s | decode tok/s | KV before | KV after |"
echo "|---|---|---|---|---|---|---|"
IFS=, read -ra lengths <<<"$LENGTHS"
IFS=, read -ra settings <<<"$SETTINGS"
for words in "${lengths[@]}"; do
  prompt="$OUT/prompt_$words.txt"
  tr -s '[:space:]' ' ' <"$BOOK" | cut -d' ' -f1-"$words" >"$prompt"
  for s in "${settings[@]}"; do
    method="${s%@*}"; budget=1
    [ "$method" != "$s" ] && budget="${s#*@}"
    json="$OUT/${words}_${method}_${budget}.json"
    "$KV" generate -m "$MODEL" -f "$prompt" -n "$NEW" --method "$method" --budget "$budget" --json \
      >"$json" 2>"$OUT/${words}_${method}_${budget}.err"
    python3 - "$json" "$MODEL" "$s" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
mib = lambda b: f"{b / 2**20:.2f} MiB"
before = j["kv_bytes_before"] or j["kv_bytes_now"]
after = j["kv_bytes_after"] or j["kv_bytes_now"]
print(f"| {sys.argv[2]} | {j['prompt_tokens']} | {sys.argv[3]} | {j['prefill_tokens_per_s']:.1f} | "
      f"{j['decode_tokens_per_s']:.1f} | {mib(before)} | {mib(after)} |")
EOF
  done
done
