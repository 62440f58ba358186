#!/usr/bin/env bash
# Reproduces the evaluation tables and plots of docs/RESULTS.md on the CPU with the real checkpoints:
# RULER-style accuracy (methods x budgets, query-aware), perplexity under decode-time eviction, and the
# near-optimality diagnostics. Writes JSON, markdown and PNG plots under docs/results/<date>/.
#   tools/run_sweeps.sh [quick|report|full] [model...]
#     quick:  SmolLM2, 2K, 4 tasks x 2 samples (~6 min on an idle 2-core machine)
#     report: the docs/RESULTS.md sweep: 6 NIAH/VT tasks x 3 samples at 2K and 4K (~40 min for SmolLM2)
#     full:   all 11 tasks x 5 samples at 2K and 4K (hours on 2 cores)
#   Models default to smollm2 and gemma3-270m (quick: smollm2 only); name them to run a subset.
#   SWEEP_LENGTHS / SWEEP_SAMPLES override the mode's lengths and samples per task; SWEEP_MAX_NEW caps
#   answers (default 32 new tokens; 0 = RULER's per-task limits).
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

shift || true
models=(smollm2 gemma3-270m)
lengths=2048,4096
case "$MODE" in
  quick) models=(smollm2); lengths=2048; samples=2 ;;
  report) samples=3; TASKS="niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,vt" ;;
  full) samples=5; TASKS=all ;;
  *) echo "run_sweeps.sh: unknown mode '$MODE' (expected quick, report or full)" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then models=("$@"); fi
lengths="${SWEEP_LENGTHS:-$lengths}"    # e.g. SWEEP_LENGTHS=2048 for a shorter run
samples="${SWEEP_SAMPLES:-$samples}"

for m in "${models[@]}"; do
  run "$KV" analyze -m "$m" --length 1024 --pool-size 16 --evict 4 --queries 4 \
    --out "$OUT/analyze_$m.json" > "$OUT/analyze_$m.txt"
  run "$KV" eval -m "$m" --tasks "$TASKS" --lengths "$lengths" --samples "$samples" \
    --methods "$METHODS" --budgets "$BUDGETS" --modes aware --max-new "${SWEEP_MAX_NEW:-32}" \
    --out "$OUT/eval_$m.json" --markdown "$OUT/eval_$m.md" > /dev/null
  run "$KV" ppl -m "$m" --methods full,h2o,tova,dropkv,obcache_vk,streamingllm --budgets 128,256 \
    --chunk 1024 --chunks 1 --out "$OUT/ppl_$m.json" --markdown "$OUT/ppl_$m.md" > /dev/null
  python3 "$ROOT/tools/plot_results.py" "$OUT/eval_$m.json" "$OUT/ppl_$m.json" "$OUT/analyze_$m.json" \
    --out "$OUT/plots_$m"
done
echo "sweeps: results in $OUT"
