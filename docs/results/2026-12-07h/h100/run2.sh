#!/usr/bin/env bash
# Device call (2026-12-07 (h)): what landed unrun: the CUDA inf refusal and key scores, knorm base / new,
# gemma3's folds (bit tests, then KVEVICT_GEMV_FOLDS A / B).
set -u
K=/tmp/kv
mkdir -p $K/lib_base $K/logs "$OUT"
xz -dc .gpu/c0/bins.tar.xz | tar -xf - -C $K || exit 3
xz -dc .gpu/c0/lib_base.tar.xz | tar -xf - -C $K/lib_base || exit 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64
run_test() {
  local t=$1; shift
  local s; s=$(date +%s)
  timeout 240 $K/bin/$t --gtest_brief=1 "$@" >"$OUT/$t.log" 2>&1
  echo "$t rc=$? $(($(date +%s) - s)) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
}
run_test test_cuda_backend_test
run_test test_cuda_nan_scores_test
run_test test_cuda_score_test --gtest_filter='*KeyOnly*:*QueryFree*'
run_test test_model_cuda_gemv_support_test
run_test test_model_cuda_decode_gemv_test
run_test test_model_cuda_decode_graph_test
for r in 1 2; do
  for v in base new; do
    lib=$K/lib; [ $v = base ] && lib=$K/lib_base:$K/lib
    s=$(date +%s)
    LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64 timeout 150 $K/bin/gpu_score_bench --small-n \
      >"$OUT/smalln_${v}_$r.txt" 2>&1
    echo "small-n $v $r rc=$? $(($(date +%s) - s)) s"
  done
done
for r in 1 2; do
  for v in 1 0; do
    for ctx in 256 4096; do
      for p in smollm2-135m gemma3-270m; do
        echo "== $p context $ctx KVEVICT_GEMV_FOLDS=$v round $r"
        KVEVICT_GEMV_FOLDS=$v timeout 60 $K/bin/gpu_e2e_bench --preset $p --decode-ab --batches 1 \
          --prompt-tokens $ctx 2>&1 | grep -E "^[0-9]+ +graph"
      done
    done
  done
done | tee "$OUT/folds_ab.txt"
echo "== knorm (ms), base / new =="
for f in "$OUT"/smalln_*.txt; do
  echo "$(basename "$f"): $(grep 'knorm' "$f" | awk '{print $4"="$5}' | awk -F= '!seen[$1]++' | tr '\n' ' ')"
done
