#!/usr/bin/env bash
# After the refactor: every GPU test binary, then the profile shapes (30 reps) for a timing check.
B=$(cd "$(dirname "$0")" && pwd); R=$(cd "$B/.." && pwd); G=/tmp/gf
mkdir -p $G/tests $G/benchmarks && xz -dc $B/bins.tar.xz | tar xf - -C $G
mv $G/bin/test_cuda_* $G/tests/ && mv $G/bin/gpu_score_bench $G/benchmarks/ && cp -r $B/lib $G/lib
export LD_LIBRARY_PATH=$G/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/vout}; mkdir -p $OUT
for t in $G/tests/test_cuda_*; do n=$(basename $t); timeout 300 $t --gtest_brief=1 > $OUT/$n.log 2>&1; echo "$n rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " $OUT/$n.log; done
$G/benchmarks/gpu_score_bench --profile --reps 30 2>&1 | grep -E 'ms|device' | tee $OUT/profile.txt
