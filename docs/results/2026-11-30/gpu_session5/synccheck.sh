#!/usr/bin/env bash
B=$(cd "$(dirname "$0")" && pwd); W=/tmp/kk; mkdir -p $W
xz -dc $B/test_cuda_score_test.xz > $W/t; chmod +x $W/t
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
KVEVICT_SANITIZER=1 timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool synccheck --error-exitcode 9 $W/t --gtest_brief=1 --gtest_filter='*Wgmma*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED|Barrier|error" | head -8
