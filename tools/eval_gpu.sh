#!/usr/bin/env bash
# A reduced evaluation sweep of issue 20 on the GPU (a few minutes of an H200): SmolLM2 and
# Gemma 3 270M, the 11 RULER tasks at 2K and 4K, the main methods at 10% in both query modes, with
# bootstrap intervals, the paired comparisons and the cost table; then a check that the batched
# decode (every setting of a prefill one row of one batch) gives the answers of each setting alone.
# The full protocol of issue 20 (length survey, DEV ablation, TEST sweep, ppl, diagnostics) is
# tools/eval_protocol.py; this script stays the quick check.
#
#   tools/eval_gpu.sh BIN_DIR MODELS_DIR CORPUS_DIR [OUT_DIR]
#     BIN_DIR     holds the kvevict tool (and libkvevict_cuda for --device cuda)
#     MODELS_DIR  holds SmolLM2-135M-Instruct.Q4_1.gguf and gemma-3-270m-q4_k_m.gguf
#     CORPUS_DIR  scripts/prepare_corpus.sh's output (austen/, words_*.txt)
#     OUT_DIR     default $OUT (the device tool's output folder), else ./eval_gpu_out
#   Environment (defaults in brackets): DEVICE [cuda], SAMPLES [12] per task and length, LENGTHS
#   [2048,4096], TASKS [all], BUDGETS [0.1], METHODS [the list below], MAX_NEW [32] new tokens per
#   answer, MODELS [smollm2 gemma3] (names below), CHECK_SAMPLES [2] per task of the batch check
#   (0 = no check), CHECK_TASKS [niah_single_1,vt], RUN_TIMEOUT [200] seconds per kvevict run,
#   TOTAL_S [540] seconds for all runs (a run gets what is left of it; the summary always runs).
#
# Writes OUT_DIR/<model>_<length>.json + .md (one run per model and length, so a run cut by the
# time limit loses one file, not the sweep), batch_check_<model>.json, summary.md, and prints the
# short table last. Expected on one H200: ~2 minutes per model at the defaults (prefill a few
# ms, decode ~2-3 ms a step for a batch of every setting); CPU test: DEVICE=cpu SAMPLES=1
# TASKS=niah_single_1,vt LENGTHS=1024 CHECK_SAMPLES=1 (a few minutes on 2 cores).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n 2,22p "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
BIN="$(cd "$1" && pwd)"
MODELS_DIR="$(cd "$2" && pwd)"
CORPUS="$(cd "$3" && pwd)"
OUTD="${4:-${OUT:-./eval_gpu_out}}"
mkdir -p "$OUTD"
OUTD="$(cd "$OUTD" && pwd)"
KV="$BIN/kvevict"
[ -x "$KV" ] || { echo "eval_gpu.sh: no kvevict tool at $KV; expected BIN_DIR to hold it" >&2; exit 2; }
[ -d "$CORPUS/austen" ] || { echo "eval_gpu.sh: $CORPUS has no austen/; expected scripts/prepare_corpus.sh's output" >&2; exit 2; }
export KVEVICT_CORPUS_DIR="$CORPUS"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

DEVICE="${DEVICE:-cuda}"
SAMPLES="${SAMPLES:-12}"
LENGTHS="${LENGTHS:-2048,4096}"
TASKS="${TASKS:-all}"
BUDGETS="${BUDGETS:-0.1}"
MAX_NEW="${MAX_NEW:-32}"
METHODS="${METHODS:-full,dropkv,adadropkv,obcache_vk,obcache_v,obcache_k,snapkv,adakv,h2o,tova,streamingllm,knorm,snapkv:kvpress,h2o:norm,tova:keep_last}"
MODELS="${MODELS:-smollm2 gemma3}"
CHECK_SAMPLES="${CHECK_SAMPLES:-2}"
CHECK_TASKS="${CHECK_TASKS:-niah_single_1,vt}"
RUN_TIMEOUT="${RUN_TIMEOUT:-200}"
TOTAL_S="${TOTAL_S:-540}"

model_file() {
  case "$1" in
    smollm2) echo "$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3) echo "$MODELS_DIR/gemma-3-270m-q4_k_m.gguf" ;;
    *) echo "$MODELS_DIR/$1" ;;
  esac
}

run() {
  local left=$((TOTAL_S - SECONDS)) t0=$SECONDS rc=0
  [ "$left" -gt 5 ] || { echo "eval_gpu.sh: TOTAL_S=$TOTAL_S spent; skipping: $*" >&2; return 1; }
  [ "$left" -lt "$RUN_TIMEOUT" ] || left=$RUN_TIMEOUT
  echo "+ (limit ${left}s) $*" >&2
  timeout "$left" "$@" || rc=$?
  echo "  ($((SECONDS - t0)) s, exit $rc)" >&2
  return $rc
}

common=(--device "$DEVICE" --budgets "$BUDGETS" --modes aware,agnostic --max-new "$MAX_NEW"
        --skip-unfit --progress-every 15)
status=0
for m in $MODELS; do
  f="$(model_file "$m")"
  [ -f "$f" ] || { echo "eval_gpu.sh: no model file $f for '$m'" >&2; status=2; continue; }
  for len in ${LENGTHS//,/ }; do
    run "$KV" eval -m "$f" "${common[@]}" --tasks "$TASKS" --lengths "$len" --samples "$SAMPLES" \
      --methods "$METHODS" --out "$OUTD/${m}_${len}.json" --markdown "$OUTD/${m}_${len}.md" \
      > /dev/null || status=1
  done
  if [ "$CHECK_SAMPLES" -gt 0 ]; then
    len="${LENGTHS%%,*}"
    for how in batched alone; do
      extra=()
      [ "$how" = alone ] && extra=(--one-at-a-time)
      run "$KV" eval -m "$f" "${common[@]}" --tasks "$CHECK_TASKS" --lengths "$len" \
        --samples "$CHECK_SAMPLES" --methods "$METHODS" --bootstrap 0 "${extra[@]}" \
        --out "$OUTD/batch_check_${m}_${how}.json" > /dev/null || status=1
    done
  fi
done

# Plots per model (accuracy vs budget / length with intervals, per-task heatmaps), where
# matplotlib is installed (on the CPU machine afterwards: tools/plot_results.py OUT/<model>_*.json).
if python3 -c 'import matplotlib' 2>/dev/null; then
  for m in $MODELS; do
    ls "$OUTD/${m}"_[0-9]*.json > /dev/null 2>&1 &&
      python3 "$(dirname "$0")/plot_results.py" "$OUTD/${m}"_[0-9]*.json --out "$OUTD/plots_$m" \
        > /dev/null || true
  done
fi

python3 - "$OUTD" <<'EOF' || status=1
import glob, json, os, sys
out = sys.argv[1]
lines = []
def p(s=""):
    lines.append(s)
for path in sorted(glob.glob(os.path.join(out, "*_[0-9]*.json"))):
    if os.path.basename(path).startswith("batch_check_"):
        continue
    doc = json.load(open(path))
    meta = doc["meta"]
    p(f"## {os.path.basename(path)}: {meta['model']} on {meta['device']}")
    p(f"commit {meta['git_commit'][:12]}{' (modified)' if meta['git_modified'] else ''}, "
      f"{meta['date_utc']}, model sha256 {meta['model_sha256'][:16]}...")
    p("")
    p("| length | mode | method | budget | average [95% CI] | n |")
    p("|---|---|---|---|---|---|")
    for a in doc["aggregate"]:
        if a["task"] != "average":
            continue
        ci = f" [{a['ci_low']:.1f}, {a['ci_high']:.1f}]" if a["ci_low"] is not None else ""
        p(f"| {a['target_length']} | {a['mode']} | {a['method']} | {a['budget']} | "
          f"{a['score']:.1f}{ci} | {a['samples']} |")
    p("")
    p("| length | mode | A - B | diff [95% CI] | A/=/B better |")
    p("|---|---|---|---|---|")
    for c in doc["comparisons"]:
        if c["task"] != "average":
            continue
        ci = (f" [{c['diff_ci_low']:+.1f}, {c['diff_ci_high']:+.1f}]"
              if c["diff_ci_low"] is not None else "")
        p(f"| {c['target_length']} | {c['mode']} | {c['a']} - {c['b']} @{c['budget']} | "
          f"{c['diff']:+.1f}{ci} | {c['a_better']}/{c['equal']}/{c['b_better']} |")
    p("")
    p("| length | mode | prefill s | evict s / setting | decode s / batch | steps / batch | total s |")
    p("|---|---|---|---|---|---|---|")
    f = lambda x, d: "-" if x is None else f"{x:.{d}f}"
    for c in doc["cost"]:
        p(f"| {c['target_length'] if c['target_length'] >= 0 else 'all'} | {c['mode']} | {f(c['prefill_s'], 4)} | "
          f"{f(c['evict_s_per_setting'], 5)} | {f(c['decode_s_per_batch'], 4)} | "
          f"{f(c['decode_steps_per_batch'], 1)} | {f(c['total_s'], 1)} |")
    p("")
# The batch check: the same samples answered as one batch and one setting at a time.
bad = 0
for path in sorted(glob.glob(os.path.join(out, "batch_check_*_batched.json"))):
    alone_path = path.replace("_batched.json", "_alone.json")
    if not os.path.exists(alone_path):
        p(f"batch check {os.path.basename(path)}: no one-at-a-time run"); bad += 1; continue
    key = lambda r: (r["task"], r["target_length"], r["sample_index"], r["mode"], r["method"],
                     r["budget"])
    a = {key(r): r for r in json.load(open(path))["records"]}
    b = {key(r): r for r in json.load(open(alone_path))["records"]}
    same = sum(1 for k in a if k in b and a[k]["prediction"] == b[k]["prediction"])
    score_same = sum(1 for k in a if k in b and a[k]["score"] == b[k]["score"])
    diffs = [k for k in a if k in b and a[k]["prediction"] != b[k]["prediction"]]
    name = os.path.basename(path)[len("batch_check_"):-len("_batched.json")]
    p(f"batch check {name}: {same}/{len(a)} answers identical, {score_same}/{len(a)} scores equal"
      + (f"; first differences: {diffs[:3]}" if diffs else ""))
    if len(a) != len(b) or score_same != len(a):
        bad += 1
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
EOF
exit $status
