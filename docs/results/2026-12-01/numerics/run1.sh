#!/usr/bin/env bash
# Issue 13 numerics on one H200 (one device call): the scoring benchmark of the OLD binary (commit
# 282a498) and the NEW one side by side, the changed kernels' GPU tests, compute-sanitizer
# memcheck on them once. Logs under $OUT (at most 8 files come back).
set -u
B=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
cd "$B"
for p in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e $p/libcudart.so.13 ] && export LD_LIBRARY_PATH=$p:${LD_LIBRARY_PATH:-} && break
done
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
S=$O/summary.txt
t0=$(date +%s)
note() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >> "$S" 2>&1
# 1. benchmark: old, new (--quick: Llama + Qwen at 4K and 128K, every target of the table), then
#    the 128K targets again (--profile) in the order new, old.
for run in "old --quick" "new --quick" "new --profile --reps 40" "old --profile --reps 40"; do
  set -- $run
  bin=gpu_score_bench_$1; shift
  echo "===== $bin $*" >> "$O/bench.txt"
  timeout 120 ./$bin "$@" >> "$O/bench.txt" 2>&1
  note "$bin $* rc=$?"
done
# 2. tests
for t in test_cuda_window_forward_test test_cuda_score_test test_cuda_decode_step_scores_test \
         test_cuda_backend_test test_cuda_model_runtime_test; do
  echo "===== $t" >> "$O/tests.log"
  timeout 200 ./$t --gtest_brief=1 >> "$O/tests.log" 2>&1
  note "$t rc=$?"
done
# 3. memcheck on the changed kernels' tests (KVEVICT_SANITIZER trims the large cases), while the
#    call's time allows
for spec in "test_cuda_window_forward_test *Dominant*:*WgmmaAndMmaSync*" "test_cuda_score_test *TopKeys*:*DominantKeys*" \
            "test_cuda_decode_step_scores_test *TopRow*:*Cases/GpuDecodeStepScores.FusedMatchesDoubleReference/1"; do
  set -f; set -- $spec; set +f
  [ $(( $(date +%s) - t0 )) -gt 190 ] && { note "memcheck $1 skipped (time)"; continue; }
  echo "===== memcheck $1 $2" >> "$O/memcheck.log"
  KVEVICT_SANITIZER=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./$1 --gtest_brief=1 "--gtest_filter=$2" >> "$O/memcheck.log" 2>&1
  note "memcheck $1 rc=$?"
done
grep -E "ERROR SUMMARY" "$O/memcheck.log" >> "$S"
note done
