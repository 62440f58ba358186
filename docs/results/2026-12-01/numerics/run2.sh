#!/usr/bin/env bash
# Issue 13 numerics, second call (v10b: strong records apart from the add-back of a former top;
# the passes' top-key staging without extra barriers): the OLD (282a498) and NEW gpu_score_bench
# side by side, twice in alternating order, then the changed kernels' tests and memcheck.
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
for run in "old --quick" "new --quick" "new --profile --reps 60" "old --profile --reps 60" \
           "new --quick" "old --quick"; do
  set -- $run
  bin=gpu_score_bench_$1; shift
  echo "===== $bin $*" >> "$O/bench.txt"
  timeout 120 ./$bin "$@" >> "$O/bench.txt" 2>&1
  note "$bin $* rc=$?"
done
for t in test_cuda_window_forward_test test_cuda_score_test test_cuda_backend_test; do
  echo "===== $t" >> "$O/tests.log"
  timeout 150 ./$t --gtest_brief=1 >> "$O/tests.log" 2>&1
  note "$t rc=$?"
done
for spec in "test_cuda_window_forward_test *Dominant*:*WgmmaAndMmaSync*" "test_cuda_score_test *TopKeys*:*DominantKeys*"; do
  set -f; set -- $spec; set +f
  echo "===== memcheck $1 $2" >> "$O/memcheck.log"
  KVEVICT_SANITIZER=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./$1 --gtest_brief=1 "--gtest_filter=$2" >> "$O/memcheck.log" 2>&1
  note "memcheck $1 rc=$?"
done
grep -E "ERROR SUMMARY" "$O/memcheck.log" >> "$S"
note done
