#!/usr/bin/env bash
# Key-major pass: score GPU tests, dropkv w = 32 timing A/B, memcheck + racecheck on the wgmma tests.
B=$(cd "$(dirname "$0")" && pwd); W=/tmp/kk; mkdir -p $W
for f in test_cuda_score_test gpu_score_bench; do xz -dc $B/$f.xz > $W/$f; chmod +x $W/$f; done
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 200 $W/test_cuda_score_test --gtest_brief=1 2>&1 | tail -30
timeout 120 $W/gpu_score_bench --profile --reps 50 2>&1 | tail -20
if [ "${SAN:-1}" = 1 ]; then
for t in memcheck racecheck; do
KVEVICT_SANITIZER=1 timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool $t --error-exitcode 9 $W/test_cuda_score_test --gtest_brief=1 --gtest_filter='*Wgmma*:*Dominant*' 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" | head -5
done
fi
