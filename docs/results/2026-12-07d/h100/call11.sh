#!/usr/bin/env bash
# Call 11: at head dim 64 the one-split decode attention takes up to 12 tiles (12 stages, all in
# flight; the other kernels SASS-identical to a259e70): its tests, then base a259e70 (one split up
# to 6 tiles) against new, A B A B: the SmolLM2 shape at batch 1, contexts 256-768 (6-14 tiles).
set -u
K=/tmp/kv; d=.gpu/c0; mkdir -p $K/logs $K/lib $K/lib_base
xz -dc $d/bins.tar.xz | tar -xf - -C $K
xz -dc $d/lib_base.tar.xz | tar -xf - -C $K/lib_base
nvidia-smi --query-gpu=name --format=csv,noheader
NEW=$K/lib:/usr/local/cuda/lib64; BASE=$K/lib_base:$K/lib:/usr/local/cuda/lib64
for t in test_cuda_decode_merge_in_launch_test test_model_cuda_decode_graph_test test_model_cuda_gpu_session_test; do
  s=$(date +%s); LD_LIBRARY_PATH=$NEW timeout 200 $K/bin/$t --gtest_brief=1 > $K/logs/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s )) s $(grep -E '^\[  (PASSED|FAILED)' $K/logs/$t.log | tr '\n' ' ')"
done
s=$(date +%s); KVEVICT_DECODE_SPLIT_KEYS=65536 LD_LIBRARY_PATH=$NEW timeout 200 $K/bin/test_model_cuda_gpu_session_test --gtest_brief=1 > $K/logs/gpu_session.onesplit.log 2>&1; rc=$?
echo "test_model_cuda_gpu_session_test (one split everywhere) rc=$rc $(( $(date +%s) - s )) s $(grep -E '^\[  (PASSED|FAILED)' $K/logs/gpu_session.onesplit.log | tr '\n' ' ')"
for round in 1 2; do
  for v in base new; do
    lp=$NEW; [ $v = base ] && lp=$BASE
    for ctx in 256 384 512 640 768; do
      echo "== $v smollm2-135m context $ctx round $round"
      LD_LIBRARY_PATH=$lp timeout 90 $K/bin/gpu_e2e_bench --preset smollm2-135m --decode-ab --batches 1 \
        --prompt-tokens $ctx 2>&1 | grep -E "^[0-9]+ +graph"
    done
  done
done 2>&1 | tee $K/logs/decode_stages12_ab.txt
tar -C $K/logs -cJf $OUT/decode_stages12_ab_logs.tar.xz .
