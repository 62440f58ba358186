#!/usr/bin/env bash
# compute-sanitizer memcheck + racecheck on the wgmma window kernels and the fused decode scores.
B=$(cd "$(dirname "$0")" && pwd); G=/tmp/gf
if [ ! -d $G/tests ]; then mkdir -p $G && xz -dc $B/bins.tar.xz | tar xf - -C $G && mkdir -p $G/tests && mv $G/bin/test_cuda_* $G/tests/; fi
for p in /usr/local/cuda/lib64; do export LD_LIBRARY_PATH=$B/lib:$p:${LD_LIBRARY_PATH:-}; done
CS=/usr/local/cuda/bin/compute-sanitizer; OUT=${OUT:-/tmp/sout}; mkdir -p $OUT
san() { tool=$1; t=$2; f=$3; KVEVICT_SANITIZER=1 timeout 200 $CS --tool $tool --error-exitcode 9 $G/tests/$t --gtest_brief=1 ${f:+--gtest_filter=$f} > $OUT/${tool}_$t.log 2>&1; echo "$tool $t ${f:-all}: rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/${tool}_$t.log | head -3; }
san memcheck test_cuda_window_forward_test
san racecheck test_cuda_window_forward_test
san memcheck test_cuda_score_test '*Wgmma*:*WindowMethods*:*Pooling*'
san racecheck test_cuda_score_test '*Wgmma*'
san memcheck test_cuda_decode_step_scores_test
san racecheck test_cuda_decode_step_scores_test
