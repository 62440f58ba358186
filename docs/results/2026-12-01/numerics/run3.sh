#!/usr/bin/env bash
# Issue 13 numerics, third call (v10c = v10b + the plain forward where no top keys are asked for:
# the model's attention and cuda::window_forward): OLD (282a498) and NEW gpu_score_bench side by
# side, then the forward / score tests and memcheck on the forward's dominant-key test.
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
for run in "old --quick" "new --quick" "new --profile --reps 60" "old --profile --reps 60"; do
  set -- $run
  bin=gpu_score_bench_$1; shift
  echo "===== $bin $*" >> "$O/bench.txt"
  timeout 100 ./$bin "$@" >> "$O/bench.txt" 2>&1
  note "$bin $* rc=$?"
done
for t in test_cuda_window_forward_test test_cuda_score_test test_cuda_backend_test; do
  [ $(( $(date +%s) - t0 )) -gt 70 ] && { note "$t skipped (time)"; continue; }
  echo "===== $t" >> "$O/tests.log"
  timeout 60 ./$t --gtest_brief=1 >> "$O/tests.log" 2>&1
  note "$t rc=$?"
done
echo "===== memcheck window_forward Dominant" >> "$O/memcheck.log"
KVEVICT_SANITIZER=1 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 \
  ./test_cuda_window_forward_test --gtest_brief=1 "--gtest_filter=*Dominant*" >> "$O/memcheck.log" 2>&1
note "memcheck rc=$?"
grep -E "ERROR SUMMARY" "$O/memcheck.log" >> "$S"
note done
