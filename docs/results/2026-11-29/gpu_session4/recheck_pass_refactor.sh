#!/usr/bin/env bash
# Re-check of the scoring-pass refactor (shared row staging and row constants): the score and
# window-forward GPU tests, plus memcheck on the wgmma score test.
B=$(cd "$(dirname "$0")" && pwd); W=/tmp/vv; mkdir -p $W
for f in test_cuda_score_test test_cuda_window_forward_test; do xz -dc $B/$f.xz > $W/$f; chmod +x $W/$f; done
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in test_cuda_score_test test_cuda_window_forward_test; do timeout 200 $W/$f --gtest_brief=1 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure"; done
KVEVICT_SANITIZER=1 timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 $W/test_cuda_score_test --gtest_brief=1 --gtest_filter='*Wgmma*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED"
