#!/usr/bin/env bash
# Session-5 tree (key-major pass) on the H200: every GPU test binary, the full benchmark + PyTorch peers, and
# compute-sanitizer memcheck/racecheck on the window, score and decode-step test binaries.
B=$(cd "$(dirname "$0")" && pwd); R=$(cd "$B/.." && pwd); G=/tmp/g5
mkdir -p $G/tests $G/benchmarks && xz -dc $B/bins.tar.xz | tar xf - -C $G
mv $G/bin/test_cuda_* $G/tests/ && mv $G/bin/gpu_score_bench $G/benchmarks/
cp -r $B/lib $G/lib
for p in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -e $p/libcublas.so.13 ] && export LD_LIBRARY_PATH=$p:${LD_LIBRARY_PATH:-} && break; done
export PATH=/usr/local/cuda/bin:$PATH
GPU_PREBUILT=$G GPU_SANITIZERS="${GPU_SANITIZERS:-memcheck racecheck}" \
  GPU_SANITIZE_TESTS="${GPU_SANITIZE_TESTS:-*window* *score_test *decode_step*}" \
  OUT=${OUT:-/tmp/gfout} bash $R/tools/gpu_check.sh
