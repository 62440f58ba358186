#!/usr/bin/env bash
# decode-fused (session 4): fused decode-step scores. Tests, then the benchmark (fused vs separate,
# same command), then compute-sanitizer memcheck + racecheck on the tests.
B=$(cd "$(dirname "$0")" && pwd); W=/tmp/dfw; mkdir -p $W
for f in test_cuda_decode_step_scores_test test_cuda_model_runtime_test gpu_e2e_bench; do
  gunzip -c $B/$f.gz > $W/$f; chmod +x $W/$f
done
source $B/env.sh; OUT=${OUT:-/tmp/dfout}; mkdir -p $OUT
T=$OUT/tests.log; L=$OUT/bench.log; S=$OUT/sanitizer.log
nvidia-smi -L | tee $T
echo "== decode step scores test" >> $T
timeout 60 $W/test_cuda_decode_step_scores_test --gtest_brief=1 >> $T 2>&1; echo "rc=$?" >> $T
echo "== model runtime decode tests" >> $T
timeout 120 $W/test_cuda_model_runtime_test --gtest_brief=1 \
  --gtest_filter='GpuRuntimeDecodeEviction.*:GpuGemma.DecodeEviction*:GpuGemma.BatchedDecode*:Archs/GpuRuntime.BatchedDecode*:Archs/GpuRuntime.PrefillAndDecode*' >> $T 2>&1
echo "rc=$?" >> $T
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|rc=" $T | head -30
E="$W/gpu_e2e_bench --lengths '' --budgets 0.05 --decode-steps 16 --decode-slack 64"
run() { echo "== $*" >> $L; eval timeout 60 "$@" >> $L 2>&1; echo "rc=$?" >> $L; }
run $E --no-b1
for s in h2o dropkv; do
  run $E --decode-score $s --fuse-min-segments 1
  run $E --decode-score $s --separate-scores
done
run $E --decode-score obcache_vk --no-b1 --fuse-min-segments 1
run $E --decode-score obcache_vk --no-b1 --separate-scores
E2="$W/gpu_e2e_bench --lengths '' --budgets 0.5 --decode-steps 16 --decode-slack 64 --max-batch 1 --no-b1 --decode-score dropkv"
run $E2 --fuse-min-segments 1
run $E2 --separate-scores
grep -E "^==|step ms|ms/token|@|rc=" $L | head -60
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: $CS" > $S
for tool in memcheck racecheck; do
  echo "== $tool decode step scores" >> $S
  F='*'; [ $tool = racecheck ] && F='Cases/GpuDecodeStepScores.*/0:Cases/GpuDecodeStepScores.*/1:Cases/GpuDecodeStepScores.*/5'
  timeout 80 $CS --tool $tool --error-exitcode 9 $W/test_cuda_decode_step_scores_test --gtest_brief=1 --gtest_filter="$F" >> $S 2>&1; echo "rc=$?" >> $S
done
echo "== memcheck FusedScoresEqualUnfused" >> $S
timeout 80 $CS --tool memcheck --error-exitcode 9 $W/test_cuda_model_runtime_test --gtest_brief=1 --gtest_filter='GpuRuntimeDecodeEviction.FusedScoresEqualUnfused' >> $S 2>&1; echo "rc=$?" >> $S
grep -E "^==|ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|rc=" $S | head -30
