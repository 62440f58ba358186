#!/usr/bin/env bash
# Builds the CUDA backend (sm_90a: sm_90 plus wgmma), runs the gpu-labelled tests, the scoring benchmark, the PyTorch
# peers, the decode GEMV against cuBLAS, the small models' batch-1 decode, the prefill attention beside SDPA, and
# compute-sanitizer (memcheck, racecheck) on the test binaries; prints a short table LAST.
#
#   tools/gpu_check.sh                 configure + build with CMake in build/gpu, then check
#   GPU_PREBUILT=DIR tools/gpu_check.sh  use test/bench binaries already built for sm_90a in DIR
#                                      (DIR/tests/test_cuda_*, DIR/tests/test_model_cuda_*,
#                                      DIR/benchmarks/gpu_score_bench, the shared libraries in DIR/lib
#                                      on LD_LIBRARY_PATH)
#   GPU_QUICK=1                        fewer benchmark sizes; GPU_SKIP_SANITIZER=1 skips sanitizers
#   GPU_TESTS='*select*'               only the test binaries matching the glob (default: all)
#   GPU_SKIP_BENCH=1                   no benchmark, no peers
#   GPU_SANITIZERS='memcheck initcheck' which compute-sanitizer tools (default: memcheck
#                                      racecheck initcheck)
#   GPU_SANITIZE_TESTS='*score* *window*'  only test binaries matching one of these globs under the
#                                      sanitizers (default: all that ran)
#   GPU_PEERS_DIR=DIR                  where dropkv_peers.py and gpu_table.py are (default
#                                      tools/peers of this checkout)
# Full logs go to $OUT (or out/gpu_check when OUT is unset). On a lent machine reached one call at a
# time, tools/device_bundle.sh + tools/device_session.sh split the same work across calls.
set -u -o pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/out/gpu_check}"
mkdir -p "$out"
summary=()
note() { summary+=("$1"); }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  2>&1 | tee "$out/nvidia_smi.txt"

if [[ -n "${GPU_PREBUILT:-}" ]]; then
  bin="$GPU_PREBUILT"
  [[ -d "$bin/lib" ]] && export LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}"
  note "build: prebuilt binaries from $bin"
else
  bin="$root/build/gpu"
  t0=$(date +%s)
  if cmake -S "$root" -B "$bin" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES=90a >"$out/build.log" 2>&1 &&
     cmake --build "$bin" -j"$(nproc)" --target gpu_score_bench gpu_gemv_bench gpu_attention_bench \
       $(cd "$root/tests/cuda" && ls *_test.cpp | sed 's/\.cpp$//; s/^/test_cuda_/') \
       $(cd "$root/tests/model_cuda" && ls *_test.cpp | sed 's/\.cpp$//; s/^/test_model_cuda_/') \
       test_eval_sweep_test >>"$out/build.log" 2>&1; then
    note "build: ok ($(( $(date +%s) - t0 )) s, sm_90a)"
  else
    note "build: FAILED (see build.log)"; tail -30 "$out/build.log"
  fi
fi

# test_eval_sweep_test: the sweep's CUDA cases (the batched sweep against each setting alone).
tests=$(ls "$bin"/tests/test_cuda_* "$bin"/tests/test_model_cuda_* "$bin"/tests/test_eval_sweep_test 2>/dev/null |
  grep -v '\.cmake$' || true)
if [[ -n "${GPU_TESTS:-}" ]]; then
  sel=""; for t in $tests; do case "$(basename "$t")" in $GPU_TESTS) sel="$sel $t" ;; esac; done
  tests=$sel
fi
pass=0; fail=0
for t in $tests; do
  name=$(basename "$t")
  if timeout 300 "$t" --gtest_brief=1 >"$out/$name.log" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); note "test FAILED: $name"; tail -40 "$out/$name.log"; fi
done
# The decode attention's NaN test again on the CUDA-core kernel (KVEVICT_DECODE_SIMT is read once a
# process, so a second process).
for t in $tests; do
  [[ "$(basename "$t")" == test_cuda_decode_attention_nan_test ]] || continue
  if KVEVICT_DECODE_SIMT=1 timeout 300 "$t" --gtest_brief=1 >"$out/$(basename "$t").simt.log" 2>&1
  then pass=$((pass + 1)); else
    fail=$((fail + 1)); note "test FAILED: $(basename "$t") (KVEVICT_DECODE_SIMT=1)"
    tail -40 "$out/$(basename "$t").simt.log"; fi
done
note "gpu tests: $pass binaries passed, $fail failed"

if [[ -z "${GPU_SKIP_BENCH:-}" && -x "$bin/benchmarks/gpu_score_bench" ]]; then
  timeout 400 "$bin/benchmarks/gpu_score_bench" ${GPU_QUICK:+--quick} --json "$out/bench.json" \
    2>&1 | tee "$out/bench.txt"
fi
if [[ -z "${GPU_SKIP_BENCH:-}" && -x "$bin/benchmarks/gpu_gemv_bench" ]]; then
  timeout 200 "$bin/benchmarks/gpu_gemv_bench" ${GPU_QUICK:+--batches 1,8} 2>&1 | tee "$out/gemv.txt"
fi
# Batch-1 decode of the small models' shapes (random weights, the default fused step, CUDA graph):
# issue 16's 2,500 tokens/s.
if [[ -z "${GPU_SKIP_BENCH:-}" && -x "$bin/benchmarks/gpu_e2e_bench" ]]; then
  for p in smollm2-135m gemma3-270m; do
    timeout 120 "$bin/benchmarks/gpu_e2e_bench" --preset "$p" --decode-ab --batches 1 2>&1 |
      grep -E "^[0-9]+ +graph" | sed "s/^/$p batch /"
  done | tee "$out/decode.txt"
fi
if [[ -z "${GPU_SKIP_BENCH:-}" && -x "$bin/benchmarks/gpu_attention_bench" ]]; then
  timeout 200 "$bin/benchmarks/gpu_attention_bench" 2>&1 | tee "$out/attention.txt"
fi
peers="${GPU_PEERS_DIR:-$root/tools/peers}"
if [[ -z "${GPU_SKIP_BENCH:-}" ]] && python3 -c 'import torch' 2>/dev/null; then
  PYTHONUNBUFFERED=1 timeout 300 python3 "$peers/dropkv_peers.py" --check ${GPU_QUICK:+--quick} \
    --json "$out/peers.json" 2>&1 | tee "$out/peers.txt"
  timeout 200 python3 "$peers/sdpa_prefill.py" 2>&1 | tee -a "$out/attention.txt"
fi

if [[ -z "${GPU_SKIP_SANITIZER:-}" ]] && command -v compute-sanitizer >/dev/null; then
  for tool in ${GPU_SANITIZERS:-memcheck racecheck initcheck}; do
    for t in $tests; do
      name=$(basename "$t")
      if [[ -n "${GPU_SANITIZE_TESTS:-}" ]]; then
        keep=""; set -f
        for pat in $GPU_SANITIZE_TESTS; do [[ "$name" == $pat ]] && keep=1; done
        set +f
        [[ -z "$keep" ]] && continue
      fi
      # racecheck looks at shared memory; the compaction kernels use none.
      [[ "$tool" == racecheck && "$name" == *compact* ]] && continue
      if KVEVICT_SANITIZER=1 timeout 180 compute-sanitizer --tool "$tool" --error-exitcode 9 \
           "$t" --gtest_brief=1 >"$out/${tool}_$name.log" 2>&1; then
        note "$tool $name: clean"
      else
        note "$tool $name: ERRORS"; tail -20 "$out/${tool}_$name.log"
      fi
    done
  done
fi

echo
echo "==================== gpu_check summary ===================="
for s in "${summary[@]}"; do echo "$s"; done
[[ -f "$out/bench.txt" ]] && grep -E "^(device|d2d)|ms " "$out/bench.txt" | cut -c1-120
[[ -f "$out/peers.txt" ]] && grep -E "^peer .*n=128K|check" "$out/peers.txt"
[[ -f "$out/attention.txt" ]] && cat "$out/attention.txt"
if [[ -s "$out/decode.txt" ]]; then
  echo "batch-1 decode, graph replay (columns: device ms a step, device tok/s, host ms, host tok/s):"
  cat "$out/decode.txt"
fi
# The issue's table: every model and n, ratio to the floor, and the peers of the same run.
[[ -f "$out/bench.json" ]] && python3 "$peers/gpu_table.py" "$out/bench.json" "$out/peers.json"
