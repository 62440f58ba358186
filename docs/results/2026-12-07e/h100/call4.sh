#!/usr/bin/env bash
# Call 4 (2026-12-07 (e)): libraries main = bb75252, pdl = dense-pdl e4698f5 (row kernels and
# rope_append as programmatic dependents), foldpdl = fold-pdl a088b9d (+ gemma3 post-norms folded
# into the next GEMV), new = gemma-qk-fold ce91bf4 (+ q/k norms in the q|k|v GEMV); each with its
# own CUDA and model libraries. New's decode tests, then graph decode tok/s A B C D x 2 at batch 1, context 256.
set -u
K=/tmp/kv; d=.gpu/c0; mkdir -p $K/logs $K/lib
xz -dc $d/bins.tar.xz | tar -xf - -C $K
for n in main pdl foldpdl; do rm -rf $K/lib_$n; mkdir -p $K/lib_$n; xz -dc $d/lib_$n.tar.xz | tar -xf - -C $K/lib_$n; done
nvidia-smi --query-gpu=name --format=csv,noheader
lp() { if [ $1 = new ]; then echo $K/lib:/usr/local/cuda/lib64; else echo $K/lib_$1:$K/lib:/usr/local/cuda/lib64; fi; }
for t in test_model_cuda_decode_gemv_test test_model_cuda_decode_graph_test test_model_cuda_gpu_session_test; do
  s=$(date +%s); LD_LIBRARY_PATH=$(lp new) timeout 200 $K/bin/$t --gtest_brief=1 > $K/logs/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s )) s $(grep -E '^\[  (PASSED|FAILED)' $K/logs/$t.log | tr '\n' ' ')"
  [ $rc = 0 ] || grep -E -A4 "Failure" $K/logs/$t.log | head -24
done
for round in 1 2; do
  for v in main pdl foldpdl new; do
    for ctx in 256; do
      for p in smollm2-135m gemma3-270m; do
        echo "== $v $p context $ctx round $round"
        LD_LIBRARY_PATH=$(lp $v) timeout 90 $K/bin/gpu_e2e_bench --preset $p --decode-ab --batches 1 \
          --prompt-tokens $ctx 2>&1 | grep -E "^[0-9]+ +graph"
      done
    done
  done
done 2>&1 | tee $K/logs/decode_fold_pdl_ab.txt
tar -C $K/logs -cJf $OUT/call4_logs.tar.xz .
