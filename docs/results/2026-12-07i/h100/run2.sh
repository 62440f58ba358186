#!/usr/bin/env bash
# Device call 2 (2026-12-07 (i)): w = 32's forward as 64-row one-warpgroup blocks
# (set_window_forward_row_blocks) and in the overlapped split loop (set_window_split_overlap):
# --top-ab, their tests, then pytest on CUDA.
set -u
K=/tmp/kv
mkdir -p $K "$OUT"
xz -dc .gpu/c0/bins.tar.xz | tar -xf - -C $K || exit 3
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
s=$(date +%s); timeout 60 $K/bin/gpu_score_bench --top-ab >"$OUT/topab.txt" 2>&1
echo "top-ab rc=$? $(($(date +%s) - s)) s"
python3 tools/bench_medians.py "$OUT/topab.txt" 'top mode 2'
s=$(date +%s); timeout 110 $K/bin/test_cuda_score_test --gtest_filter='*TopKeys*:*SplitOverlap*' >"$OUT/score_tests.txt" 2>&1
echo "score tests rc=$? $(($(date +%s) - s)) s: $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' "$OUT/score_tests.txt" | tr '\n' ' ')"
s=$(date +%s); timeout 90 bash tools/python_gpu_check.sh --tests > "$OUT/python_gpu_tests.txt" 2>&1
echo "python_gpu_check --tests rc=$? $(($(date +%s) - s)) s"; tail -4 "$OUT/python_gpu_tests.txt"
