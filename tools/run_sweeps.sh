#!/usr/bin/env bash
# Reproduces the evaluation tables and plots of docs/RESULTS.md on the CPU with the real checkpoints:
# RULER-style accuracy (methods x budgets, query-aware), perplexity under decode-time eviction, and the
# near-optimality diagnostics. Writes JSON, markdown and PNG plots under docs/results/<date>/.
#   tools/run_sweeps.sh [quick|full]      quick: SmolLM2 only, 2K, 4 tasks x 2 samples (~1 h on 2 cores)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODE="${1:-quick}"
KV="${KVEVICT_BIN:-$ROOT/build/release/kvevict}"
OUT="${OUT_DIR:-$ROOT/docs/results/$(date +%Y-%m-%d)}"
mkdir -p "$OUT"
. "$ROOT/scripts/openblas_env.sh"
METHODS="full,dropkv,adadropkv,obcache_vk,snapkv,adakv,h2o,tova,knorm,streamingllm,random"
BUDGETS="0.05,0.1,0.2,0.3,0.5"
TASKS="niah_single_1,niah_single_2,niah_multikey_1,vt"
run() { echo "+ $*" >&2; "$@"; }

models=(smollm2)
lengths=2048
samples=2
if [ "$MODE" = full ]; then models=(smollm2 gemma3-270m); lengths=2048,4096; samples=5; TASKS=all; fi

for m in "${models[@]}"; do
  run "$KV" analyze -m "$m" --length 1024 --pool-size 16 --evict 4 --queries 4 \
    --out "$OUT/analyze_$m.json" > "$OUT/analyze_$m.txt"
  run "$KV" eval -m "$m" --tasks "$TASKS" --lengths "$lengths" --samples "$samples" \
    --methods "$METHODS" --budgets "$BUDGETS" --modes aware \
    --out "$OUT/eval_$m.json" --markdown "$OUT/eval_$m.md" > /dev/null
  run "$KV" ppl -m "$m" --methods full,h2o,tova,dropkv,obcache_vk,streamingllm --budgets 128,256 \
    --chunk 1024 --chunks 1 --out "$OUT/ppl_$m.json" --markdown "$OUT/ppl_$m.md" > /dev/null
  python3 "$ROOT/tools/plot_results.py" "$OUT/eval_$m.json" "$OUT/ppl_$m.json" "$OUT/analyze_$m.json" \
    --out "$OUT/plots_$m"
done
echo "sweeps: results in $OUT"
