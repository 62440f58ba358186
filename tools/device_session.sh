#!/usr/bin/env bash
# On the lent GPU machine, from the repository root, one verb a device call: the steps of a device
# session in the order the calls carry them (tools/device_bundle.sh lays out one folder a call:
# c0 = the binaries and the first model part, c1.. = the other parts, the last with the corpus).
# Everything lands under /tmp/kv (kept while the machine stays warm between calls); each verb
# packs its logs into $OUT (one .tar.xz) and prints a short summary last.
#
#   tools/device_session.sh first DIR         unpack DIR/bins.tar.xz and DIR's model part; the
#                                             top-key A/B (gpu_score_bench --top-ab, medians per
#                                             mode), gpu_score_bench --small-n, then every
#                                             test_cuda_* binary (the decode NaN test again under
#                                             KVEVICT_DECODE_SIMT=1); FIRST_BENCH=0 skips the
#                                             benches (FIRST_TOPAB=0 the top-key A/B alone),
#                                             FIRST_TESTS (a glob) picks the tests
#   tools/device_session.sh part DIR [TOOL:TEST ...]
#                                             DIR's model part; meanwhile compute-sanitizer TOOL
#                                             (memcheck, racecheck, ...) on each test binary TEST
#   tools/device_session.sh score-lib-ab DIR [BENCH_FLAG]
#                                             gpu_score_bench BENCH_FLAG (default --select; e.g.
#                                             --small-n) with this build's libkvevict_cuda and with
#                                             DIR/lib_base.tar.xz's (an earlier build), interleaved
#                                             A B A B, medians side by side (select-ab: its old name)
#   tools/device_session.sh models DIR        the last part and the corpus: both checkpoints
#                                             assembled and checked by sha256, then every
#                                             test_model_cuda_* binary and test_eval_sweep_test (MODELS_MEMCHECK="NAME
#                                             ...": those under memcheck, side by side)
#   tools/device_session.sh fused-ab          gpu_gemv_bench (the GEMV alone against cuBLAS, model
#                                             shapes), then route-ab's runs for the fused step on
#                                             every batch (route small) and the unfused step
#   tools/device_session.sh route-ab          the fused step's GEMV routes (KVEVICT_GEMV_ROUTE: off =
#                                             the unfused step, small, cores, all; ROUTES picks),
#                                             the model tests on the fused step, then A B A B
#                                             decode tok/s of SmolLM2 / Gemma 3 shapes at batches
#                                             1, 4, 8 and the 8B at 32K against its floor
#   tools/device_session.sh default-ab        the default decode step (fused at batch 1) against
#                                             KVEVICT_DECODE_FUSED=0: real SmolLM2 / Gemma 3 at
#                                             batches 1, 8, 64; the 8B at 1 and 4 over 32K and its
#                                             floor shares (ROUNDS: of the real models, default
#                                             2; LLAMA_MODES: default "auto 0")
#   tools/device_session.sh preload-ab        the fused step's GEMV weights in registers (default)
#                                             against the L2 prefetch, A B A B: SmolLM2 and Gemma 3
#                                             shapes, batch 1, contexts 256 and 4K
#                                             (AB_CONTEXTS, ROUNDS); gpu_gemv_bench --sync-cost
#   tools/device_session.sh folds-ab DIR      gemma3's batch-1 folds (KVEVICT_GEMV_FOLDS=1) against
#                                             their own launches: the decode GEMV / graph tests,
#                                             the session tests with the folds on, then A B A B
#                                             as preload-ab
#   tools/device_session.sh prefill-lib-ab DIR
#                                             this build's prefill attention against DIR's
#                                             lib_base.tar.xz (device_bundle.sh BASE_LIB=...: an
#                                             earlier libkvevict_cuda), A B A B in one start: the
#                                             forward's tests, then gpu_attention_bench (Llama
#                                             heads, 4K chunks; AB_LENGTHS) and the 8B's 32K
#                                             prefill with each library (unpacks DIR's binaries
#                                             when `first` has not)
#   tools/device_session.sh decode-lib-ab DIR
#                                             this build's decode step against DIR's
#                                             lib_base.tar.xz (and any lib_NAME.tar.xz of
#                                             LIB_VARIANTS), A B A B in one start: the decode
#                                             tests, then graph decode tok/s of AB_PRESETS
#                                             (default the SmolLM2 and Gemma 3 shapes) at
#                                             AB_BATCHES, AB_CONTEXTS, ROUNDS
#   tools/device_session.sh prefill-ab        the 8B's prefill at 32K / 128K with each wgmma loop
#                                             (gpu_e2e_bench --forward-loop; PREFILL_LOOPS, default
#                                             "tma-wide wide-overlap wide-pingpong")
#   tools/device_session.sh decode-profile    a decode step's kernels by time (ncu durations,
#                                             tools/kernel_breakdown.py): SmolLM2 and 8B shapes
#                                             at batch 1, default and fused step (PROFILE_SPECS)
#   tools/device_session.sh decode-source-profile
#                                             a batch-1 decode step's kernels per SASS instruction
#                                             (ncu source page, warm caches; DECODE_KERNELS,
#                                             NCU_CACHE)
#   tools/device_session.sh forward-profile   dropkv w = 8's forward, merge and pass under ncu's
#                                             full set (FORWARD_PROFILE_N: n, default 32K)
#   tools/device_session.sh source-profile    one scoring kernel's SASS lines under ncu (source
#                                             page, CSV: stall samples and excessive sectors per
#                                             instruction; tools/ncu_source_top.py sums them up);
#                                             SOURCE_KERNELS (default score_pass_kernel), n =
#                                             FORWARD_PROFILE_N (default 32K), dropkv w = 8
#   tools/device_session.sh score-profile     gpu_score_bench --small-n's first launches under ncu,
#                                             by kernel (tools/kernel_breakdown.py; PROFILE_LAUNCHES)
#   tools/device_session.sh attention         gpu_attention_bench (one layer's chunked causal prefill
#                                             attention, ms and TFLOP/s) beside PyTorch SDPA's
#                                             (tools/peers/sdpa_prefill.py), Llama and Gemma 3 shapes
#   tools/device_session.sh coverage "MODEL:LENGTH:SAMPLES[:FIRST] ..." BOX_S
#                                             issue 20's coverage group on TEST seeds: one process
#                                             a (model, task), side by side, running kvevict eval
#                                             on chunks of COVERAGE_CHUNK (10) samples until BOX_S
#                                             seconds, merged per model and length by kvevict
#                                             merge (MODEL: smollm2 or gemma3; FIRST: the first
#                                             sample, --first-sample, so that a later call of the
#                                             same build adds samples FIRST.. and the merge takes
#                                             every shard); MEMCHECK_MODEL_TESTS=1
#                                             runs memcheck over the test_model_cuda_* binaries
#                                             beside it
# Environment: KVEVICT_SANITIZER=1 is set for the sanitizer runs (the tests then shrink their
# largest cases); TASKS (default: the 11 RULER tasks) for coverage.
set -u
verb="${1:-}"
K=/tmp/kv
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KVEVICT_CORPUS_DIR=$K/corpus KVEVICT_MODEL_DIR=$K/models
OUT="${OUT:-$K/out}"
mkdir -p $K/parts $K/logs $K/models "$OUT"

copy_part() {
  cp "$1"/models.part-* $K/parts/ 2>/dev/null
  cp "$1"/models.sha256 "$1"/models.sizes $K/ 2>/dev/null
  echo "parts here: $(ls $K/parts | tr '\n' ' ')"
}
# Medians of a gpu_score_bench log's rows by name; with BASE (e.g. 'top mode 2'), each row's
# change against it (tools/bench_medians.py).
bench_medians() {  # LOG [BASE]
  python3 tools/bench_medians.py "$@"
}
pack() { tar -C $K/logs -cJf "$OUT/$1.tar.xz" . && echo "logs: $OUT/$1.tar.xz"; }
# A 0 / 1 environment switch VAR of the decode step, 1 then 0 each round (ROUNDS, default 2):
# graph decode device tok/s at batch 1 on the SmolLM2 and Gemma 3 shapes (random weights) at
# AB_CONTEXTS tokens of context (default 256 and 4K).
switch_ab() {
  local var=$1 round v ctx p
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for v in 1 0; do
      for ctx in ${AB_CONTEXTS:-256 4096}; do
        for p in smollm2-135m gemma3-270m; do
          echo "== $p context $ctx $var=$v round $round"
          env "$var=$v" timeout 90 $K/bin/gpu_e2e_bench --preset $p --decode-ab \
            --batches 1 --prompt-tokens "$ctx" 2>&1 | grep -E "^[0-9]+ +graph"
        done
      done
    done
  done
}
# DIR's lib_base.tar.xz (device_bundle.sh BASE_LIB=: an earlier build's libraries) into $K/lib_base.
# Also every other DIR/lib_NAME.tar.xz (device_bundle.sh LIB_VARIANTS) into $K/lib_NAME; prints
# their names.
unpack_base() {
  local f name
  for f in "$1"/lib_*.tar.xz; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .tar.xz)
    rm -rf "${K:?}/${name:?}" && mkdir -p "$K/$name" && xz -dc "$f" | tar -xf - -C "$K/$name" || return 1
    [ "$name" = lib_base ] || echo "${name#lib_}"
  done
  [ -d $K/lib_base ]
}
# The LD_LIBRARY_PATH that runs the binaries with library `new` (this build's), `base` (lib_base's)
# or a variant NAME (lib_NAME's).
lib_path() {
  if [ "$1" = new ]; then
    echo $K/lib:/usr/local/cuda/lib64
  else
    echo $K/lib_$1:$K/lib:/usr/local/cuda/lib64
  fi
}
# Benchmark PROG of library set $1: its build's own (lib_NAME/bin, device_bundle.sh BASE_LIB or
# LIB_VARIANTS given a build directory), else this build's.
bench_of() {
  if [ "$1" != new ] && [ -x "$K/lib_$1/bin/$2" ]; then echo "$K/lib_$1/bin/$2"; else echo "$K/bin/$2"; fi
}
# Runs a test binary, one line: name, exit code, seconds, gtest's verdict.
run_test() {
  local t=$1 n s rc
  n=$(basename "$t")
  s=$(date +%s)
  timeout 300 "$t" --gtest_brief=1 >"$K/logs/$n.log" 2>&1
  rc=$?
  echo "$n rc=$rc $(($(date +%s) - s)) s $(grep -E '^\[  (PASSED|FAILED)' "$K/logs/$n.log" | tr '\n' ' ')"
}
sanitize() {  # TOOL TEST [BOX_S]
  local s rc
  s=$(date +%s)
  KVEVICT_SANITIZER=1 timeout "${3:-420}" compute-sanitizer --tool "$1" --error-exitcode 9 \
    "$K/bin/$2" --gtest_brief=1 >"$K/logs/$1_$2.log" 2>&1
  rc=$?
  echo "$1 $2 rc=$rc $(($(date +%s) - s)) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' "$K/logs/$1_$2.log" | tr '\n' ' ')"
}

# The fused step's projection routes (KVEVICT_GEMV_ROUTE, src/model_cuda/fused_step_policy.h) on
# every batch (KVEVICT_DECODE_FUSED=1) against the unfused step ("off"), after `models`: the model
# tests on the fused step, then A B A B gpu_e2e_bench --decode-ab on random SmolLM2 / Gemma 3 weights
# (batches 1, 4, 8) and the Llama-3.1-8B batch-1 decode at 32K against its floor, each route.
route_ab() {  # ROUTES LOG_TAG
  local routes="$1" tag="$2" t r p round fused
  for t in test_model_cuda_gpu_session_test test_model_cuda_runtime_equivalence_test \
           test_model_cuda_decode_graph_test; do
    KVEVICT_DECODE_FUSED=1 timeout 300 $K/bin/$t --gtest_brief=1 >$K/logs/${tag}_$t.log 2>&1
    echo "$t (KVEVICT_DECODE_FUSED=1) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $K/logs/${tag}_$t.log | tr '\n' ' ')"
  done
  for round in 1 2; do
    for r in $routes; do
      for p in smollm2-135m gemma3-270m; do
        echo "== $p route=$r round $round"
        fused=1; [ "$r" = off ] && fused=0
        KVEVICT_DECODE_FUSED=$fused KVEVICT_GEMV_ROUTE=${r/off/} timeout 90 $K/bin/gpu_e2e_bench \
          --preset $p --decode-ab --batches 1,4,8 2>&1 | grep -E "^[0-9]+ +graph"
      done
    done
  done | tee $K/logs/${tag}_ab.txt
  for r in $routes; do
    echo "== llama-3.1-8b route=$r"
    fused=1; [ "$r" = off ] && fused=0
    KVEVICT_DECODE_FUSED=$fused KVEVICT_GEMV_ROUTE=${r/off/} timeout 120 $K/bin/gpu_e2e_bench \
      --preset llama-3.1-8b --lengths 32768 --pair-max 0 --budgets 0.1 2>&1 | tail -3
  done | tee $K/logs/${tag}_llama.txt
}

case "$verb" in
  first)
    dir="${2:?usage: device_session.sh first DIR}"
    if [ ! -f "$dir/bins.tar.xz" ]; then
      echo "first: $dir/bins.tar.xz is missing (the bundle folder is git-ignored: carry it)" >&2
      exit 3
    fi
    xz -dc "$dir/bins.tar.xz" | tar -xf - -C $K || exit 3
    copy_part "$dir"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
    # FIRST_TESTS (a glob, default test_cuda_*): the test binaries to run; FIRST_BENCH=0 skips
    # the score benches (a rerun after a change that leaves the scoring kernels alone).
    if [ "${FIRST_BENCH:-1}" != 0 ] && [ "${FIRST_TOPAB:-1}" != 0 ]; then
    s=$(date +%s)
    timeout 240 $K/bin/gpu_score_bench --top-ab >$K/logs/topab.txt 2>&1
    echo "top-ab rc=$? $(($(date +%s) - s)) s"
    bench_medians $K/logs/topab.txt 'top mode 2' | tee $K/logs/topab_medians.txt
    fi
    if [ "${FIRST_BENCH:-1}" != 0 ]; then
    timeout 200 $K/bin/gpu_score_bench --small-n >$K/logs/small_n.txt 2>&1
    echo "small-n rc=$? (logs/small_n.txt: dropkv w=8 on the mma.sync / key-major pass, dropkv w=8, obcache_vk w=16 + pool, the forward, top mode 2, knorm; 4K-128K)"
    bench_medians $K/logs/small_n.txt | tee $K/logs/small_n_medians.txt
    fi
    for t in $K/bin/${FIRST_TESTS:-test_cuda_*}; do run_test "$t"; done
    KVEVICT_DECODE_SIMT=1 timeout 300 $K/bin/test_cuda_decode_attention_nan_test --gtest_brief=1 \
      >$K/logs/nan_simt.log 2>&1
    echo "decode NaN test under KVEVICT_DECODE_SIMT=1 rc=$?"
    pack first_logs
    ;;
  part)
    dir="${2:?usage: device_session.sh part DIR [TOOL:TEST ...]}"
    copy_part "$dir"
    shift 2
    for job in "$@"; do sanitize "${job%%:*}" "${job#*:}"; done
    pack "part_logs_$(basename "$dir")"
    ;;
  select-ab | score-lib-ab)
    dir="${2:?usage: device_session.sh score-lib-ab DIR [BENCH_FLAG]}"
    flag="${3:---select}"
    [ -x $K/bin/gpu_score_bench ] || { xz -dc "$dir/bins.tar.xz" | tar -xf - -C $K || exit 3; }
    unpack_base "$dir" >/dev/null || exit 3
    for round in 1 2; do
      for v in new base; do
        LD_LIBRARY_PATH=$(lib_path $v) timeout 200 "$(bench_of $v gpu_score_bench)" "$flag" \
          >$K/logs/score_${v}_$round.txt 2>&1
        echo "gpu_score_bench $flag $v round $round rc=$?"
      done
    done
    python3 - $K/logs <<'PY' | tee $K/logs/score_lib_ab.txt
import collections, glob, re, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + "/score_*_[12].txt")):
    v = re.search(r"score_(new|base)_", f).group(1)
    for line in open(f):
        m = re.match(r"(.*?)\s+(\d+\.\d+) ms", line)
        if m:
            rows[m.group(1).strip()][v].append(float(m.group(2)))
for k, d in rows.items():
    if d["new"] and d["base"]:
        a, b = statistics.median(d["new"]), statistics.median(d["base"])
        print(f"{k:58s} new {a:.4f} ms  base {b:.4f} ms  {100 * (a / b - 1):+.1f}%")
PY
    pack score_lib_ab_logs
    ;;
  models)
    dir="${2:?usage: device_session.sh models DIR}"
    copy_part "$dir"
    [ -f "$dir/corpus.tar.xz" ] && tar -C $K -xJf "$dir/corpus.tar.xz"
    cat $K/parts/models.part-* >$K/models.stream
    off=0
    # dd, not tail | head: head closing the pipe early fails tail (SIGPIPE) under pipefail.
    while read -r name size; do
      dd if=$K/models.stream of="$K/models/$name" bs=4M iflag=skip_bytes,count_bytes skip=$off \
        count="$size" status=none
      off=$((off + size))
    done <$K/models.sizes
    rm -f $K/models.stream
    (cd $K/models && sha256sum -c $K/models.sha256) || exit 3
    # MODELS_MEMCHECK="NAME ...": those test binaries run under memcheck instead, side by side
    # with the others (each its own process on the one GPU).
    for name in ${MODELS_MEMCHECK:-}; do sanitize memcheck "$name" 540 & done
    for t in $K/bin/test_model_cuda_* $K/bin/test_eval_sweep_test; do
      [ -x "$t" ] || continue
      case " ${MODELS_MEMCHECK:-} " in *" $(basename "$t") "*) continue ;; esac
      run_test "$t"
    done
    wait
    pack models_logs
    ;;
  fused-ab)
    # The GEMV alone against cuBLAS on every model's projection shapes at batches 1, 2, 4, 8, then
    # the fused step (default route) against the unfused one.
    timeout 150 $K/bin/gpu_gemv_bench >$K/logs/gemv_bench.txt 2>&1
    echo "gemv_bench rc=$?"; cat $K/logs/gemv_bench.txt
    route_ab "small off" fused
    pack fused_ab_logs
    ;;
  route-ab)
    route_ab "${ROUTES:-off small cores all}" route
    pack route_ab_logs
    ;;
  default-ab)
    # The default decode step (fused at batch 1: fused_step_policy.h) against the unfused one
    # (KVEVICT_DECODE_FUSED=0), A B A B: the real SmolLM2 and Gemma 3 checkpoints (graph decode
    # at batches 1, 8, 64), the Llama-3.1-8B shape at batches 1 and 4 over a 32K context, and the
    # 8B's batch-1 floor shares (after models).
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for v in auto 0; do
        for g in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
          echo "== $g fused=$v round $round"
          KVEVICT_DECODE_FUSED=$v timeout 120 $K/bin/gpu_e2e_bench --model $K/models/$g --decode-ab \
            --batches 1,8,64 2>&1 | grep -E "^[0-9]+ +graph"
        done
      done
    done | tee $K/logs/default_ab.txt
    for v in ${LLAMA_MODES:-auto 0}; do
      echo "== llama-3.1-8b fused=$v, 32K context"
      KVEVICT_DECODE_FUSED=$v timeout 200 $K/bin/gpu_e2e_bench --preset llama-3.1-8b --decode-ab \
        --batches 1,4 --prompt-tokens 32768 2>&1 | grep -E "^[0-9]+ +graph"
      KVEVICT_DECODE_FUSED=$v timeout 120 $K/bin/gpu_e2e_bench --preset llama-3.1-8b --lengths 32768 \
        --pair-max 0 --budgets 0.05,0.1 2>&1 | tail -4
    done | tee $K/logs/default_llama.txt
    pack default_ab_logs
    ;;
  preload-ab)
    # The fused step's batch-1 GEMVs with their weights in registers before the dependency wait
    # (KVEVICT_GEMV_PRELOAD=1, the default) against the L2 prefetch alone (0); then what a
    # grid-wide dependency costs (gpu_gemv_bench --sync-cost).
    switch_ab KVEVICT_GEMV_PRELOAD | tee $K/logs/preload_ab.txt
    timeout 100 $K/bin/gpu_gemv_bench --sync-cost 2>&1 | tee $K/logs/sync_cost.txt
    pack preload_ab_logs
    ;;
  folds-ab)
    # gemma3's folds (KVEVICT_GEMV_FOLDS=1: the post-norm adds and q / k head norms inside the
    # batch-1 GEMVs, five launches a layer) against their own launches (0, the default): the GEMV
    # and graph tests (which check the folds' bits against the launches they replace), the session
    # tests with the folds on, then the A B rounds (SmolLM2 never folds: its numbers must not
    # move).
    dir="${2:?usage: device_session.sh folds-ab DIR}"
    [ -x $K/bin/gpu_e2e_bench ] || { xz -dc "$dir/bins.tar.xz" | tar -xf - -C $K || exit 3; }
    for t in test_model_cuda_decode_gemv_test test_model_cuda_decode_graph_test; do
      run_test $K/bin/$t
    done
    KVEVICT_GEMV_FOLDS=1 run_test $K/bin/test_model_cuda_gpu_session_test
    switch_ab KVEVICT_GEMV_FOLDS | tee $K/logs/folds_ab.txt
    pack folds_ab_logs
    ;;
  prefill-lib-ab)
    # A change to the prefill attention against the library before it, on one card in one start
    # (the card's clocks drift between starts): the libraries alternate, base first each round.
    dir="${2:?usage: device_session.sh prefill-lib-ab DIR}"
    [ -x $K/bin/gpu_attention_bench ] || { xz -dc "$dir/bins.tar.xz" | tar -xf - -C $K || exit 3; }
    unpack_base "$dir" >/dev/null || exit 3
    for t in test_cuda_window_forward_test test_model_cuda_gpu_session_test; do run_test $K/bin/$t; done
    for round in 1 2; do
      for v in base new; do
        echo "== $v round $round"
        LD_LIBRARY_PATH=$(lib_path $v) timeout 100 "$(bench_of $v gpu_attention_bench)" \
          --shape llama --lengths ${AB_LENGTHS:-4096,32768,131072} --chunk 4096 --reps 3 2>&1 | grep -E "wide"
        LD_LIBRARY_PATH=$(lib_path $v) timeout 100 "$(bench_of $v gpu_e2e_bench)" \
          --preset llama-3.1-8b --lengths 32768 --pair-max 0 --prefill-only 2>&1 | grep -E "^32768"
      done
    done | tee $K/logs/prefill_lib_ab.txt
    pack prefill_lib_ab_logs
    ;;
  decode-lib-ab)
    # A change to the decode step against the library before it, on one card in one start: the
    # decode tests, then graph decode device tok/s of AB_PRESETS (default the SmolLM2 and Gemma 3
    # shapes; random weights) at AB_BATCHES (default 1) and AB_CONTEXTS tokens of context, base,
    # DIR's other lib_NAME variants (device_bundle.sh LIB_VARIANTS) and new in turn, ROUNDS times.
    dir="${2:?usage: device_session.sh decode-lib-ab DIR}"
    [ -x $K/bin/gpu_e2e_bench ] || { xz -dc "$dir/bins.tar.xz" | tar -xf - -C $K || exit 3; }
    variants=$(unpack_base "$dir") || exit 3
    for t in test_model_cuda_decode_gemv_test test_model_cuda_decode_graph_test \
             test_model_cuda_gpu_session_test test_cuda_decode_merge_in_launch_test \
             test_cuda_decode_attention_nan_test; do run_test $K/bin/$t; done
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for v in base $variants new; do
        for ctx in ${AB_CONTEXTS:-256 4096}; do
          for p in ${AB_PRESETS:-smollm2-135m gemma3-270m}; do
            echo "== $v $p context $ctx round $round"
            LD_LIBRARY_PATH=$(lib_path $v) timeout 150 "$(bench_of $v gpu_e2e_bench)" --preset $p \
              --decode-ab --batches "${AB_BATCHES:-1}" --prompt-tokens $ctx 2>&1 |
              grep -E "^[0-9]+ +graph"
          done
        done
      done
    done | tee $K/logs/decode_lib_ab.txt
    pack decode_lib_ab_logs
    ;;
  prefill-ab)
    # The prefill attention's wgmma loops end to end (gpu_e2e_bench --forward-loop, A B A B): the
    # Llama-3.1-8B shape's prefill at 32K and 128K (no decode runs; issue 16's prefill targets).
    for round in 1 2; do
      for loop in ${PREFILL_LOOPS:-tma-wide wide-overlap wide-pingpong}; do
        echo "== llama-3.1-8b prefill, loop $loop, round $round"
        timeout 200 $K/bin/gpu_e2e_bench --preset llama-3.1-8b --lengths ${PREFILL_LENGTHS:-32768,131072} \
          --pair-max 0 --prefill-only --forward-loop $loop 2>&1 | grep -ivE "^weights|^$"
      done
    done | tee $K/logs/prefill_ab.txt
    pack prefill_ab_logs
    ;;
  decode-profile)
    # Where a decode step's time goes, kernel by kernel (ncu's durations, launches serialized):
    # eager steps (KVEVICT_DECODE_GRAPH=0) of random-weight presets at batch 1, the default step
    # and the fused one; the prompt's prefill launches are skipped.
    # PROFILE_SPECS: PRESET:CONTEXT:LAUNCHES_TO_SKIP ... (gemma3-270m:256:400 is another).
    for spec in ${PROFILE_SPECS:-smollm2-135m:256:600 llama-3.1-8b:32768:3600}; do
      IFS=: read -r preset ctx skip <<<"$spec"
      for v in 0 1; do
        csv=$K/logs/ncu_${preset}_fused$v.csv
        KVEVICT_DECODE_GRAPH=0 KVEVICT_DECODE_FUSED=$v timeout 120 ncu --clock-control none \
          --metrics gpu__time_duration.sum --csv --page raw --launch-skip $skip --launch-count 1200 \
          $K/bin/gpu_e2e_bench --preset $preset --decode-ab --batches 1 --prompt-tokens $ctx \
          >$csv 2>$K/logs/ncu_${preset}_fused$v.err
        echo "== $preset, context $ctx, batch 1, fused=$v (ncu rc=$?)"
        python3 tools/kernel_breakdown.py $csv --per-kernel embed_kernel --top 14 --short
      done
    done | tee $K/logs/decode_profile.txt
    pack decode_profile_logs
    ;;
  decode-source-profile)
    # Where a batch-1 decode step's kernels wait, per SASS instruction: one launch of each of
    # DECODE_KERNELS (default gemv_kernel decode_attention_mma_kernel) in an eager fused step of
    # the SmolLM2 shape (random weights, context 256), ncu's full set; NCU_CACHE (default none:
    # warm caches, as a replayed step sees them; `all` flushes them first).
    for kernel in ${DECODE_KERNELS:-gemv_kernel decode_attention_mma_kernel}; do
      rep=$K/logs/decode_src_$kernel
      KVEVICT_DECODE_GRAPH=0 KVEVICT_DECODE_FUSED=1 timeout 150 ncu --clock-control none \
        --cache-control ${NCU_CACHE:-none} --set full --import-source yes -k regex:$kernel \
        --launch-skip 200 --launch-count 1 -o $rep $K/bin/gpu_e2e_bench --preset smollm2-135m \
        --decode-ab --batches 1 --prompt-tokens 256 >$rep.log 2>&1
      echo "== $kernel (ncu rc=$?)"
      ncu -i $rep.ncu-rep --page details 2>/dev/null |
        grep -E "Duration|Registers Per|Issue Slots|Eligible Warps|Warp Cycles Per Issued" | head -8
      ncu -i $rep.ncu-rep --page source --csv --print-source sass >$rep.csv 2>/dev/null
      python3 tools/ncu_source_top.py $rep.csv --top 25 | tee $rep.top.txt | head -45
      xz -9f $rep.csv
      rm -f $rep.ncu-rep
    done
    pack decode_source_profile_logs
    ;;
  forward-profile)
    # The scoring forward of dropkv w = 8 (one-warpgroup split blocks), its merge and its pass at
    # n = FORWARD_PROFILE_N (default 32768) under ncu's full section set: the first timed launch
    # of each (after 3 warm-ups and an L2 flush).
    n=${FORWARD_PROFILE_N:-32768}
    for kernel in window_forward_wgmma_kernel window_merge_kernel score_pass_kernel; do
      rep=$K/logs/ncu_${kernel}_n$n.txt
      timeout 240 ncu --clock-control none --set full -k regex:$kernel --launch-skip 3 \
        --launch-count 1 $K/bin/gpu_score_bench --profile --n $n --reps 1 >$rep 2>&1
      echo "== $kernel (dropkv w = 8), n = $n (ncu rc=$?)"
      grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Dynamic Shared Memory Per Block|L2 Hit Rate|Executed Ipc Active) " $rep | head -12
    done | tee $K/logs/forward_profile.txt
    pack forward_profile_logs
    ;;
  source-profile)
    # Where one kernel's instructions stall and which of its loads fetch sectors they do not use:
    # ncu's source page per SASS instruction (the first timed launch after 3 warm-ups, full set
    # with source counters), exported as CSV for tools/ncu_source_top.py.
    n=${FORWARD_PROFILE_N:-32768}
    for kernel in ${SOURCE_KERNELS:-score_pass_kernel}; do
      rep=$K/logs/src_${kernel}_n$n
      timeout 300 ncu --clock-control none --set full --import-source yes -k regex:$kernel \
        --launch-skip 3 --launch-count 1 -f -o $rep $K/bin/gpu_score_bench --profile --n $n \
        --reps 1 >$rep.log 2>&1
      echo "== $kernel, n = $n (ncu rc=$?)"
      ncu -i $rep.ncu-rep --page source --csv --print-source sass >$rep.csv 2>$rep.err
      echo "source page rc=$? ($(wc -l <$rep.csv) lines)"
      python3 tools/ncu_source_top.py $rep.csv --top 25 | tee $rep.top.txt
      rm -f $rep.ncu-rep
    done
    pack source_profile_logs
    ;;
  score-profile)
    # Where small-n scoring time goes (issue 16's 4K / 32K targets), kernel by kernel: ncu's
    # durations of gpu_score_bench --small-n's first launches (n = 4K's first rows: dropkv w = 8 on
    # the two passes; the L2-flushing memsets are kernels too), beside the bench's own wall times.
    csv=$K/logs/ncu_small_n.csv
    timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      --launch-count ${PROFILE_LAUNCHES:-700} $K/bin/gpu_score_bench --small-n >$csv 2>$K/logs/ncu_small_n.err
    echo "== gpu_score_bench --small-n under ncu (rc=$?), first ${PROFILE_LAUNCHES:-700} launches"
    python3 tools/kernel_breakdown.py $csv --top 12 --short | tee $K/logs/score_profile.txt
    pack score_profile_logs
    ;;
  attention)
    # The prefill attention alone (one layer, chunked as the runtime runs it) beside PyTorch SDPA's
    # causal attention on the same shapes and card (issue 16).
    for shape in llama gemma3; do
      timeout 200 $K/bin/gpu_attention_bench --shape $shape 2>&1 | tee -a $K/logs/attention.txt
      timeout 200 python3 tools/peers/sdpa_prefill.py --shape $shape 2>&1 | tee -a $K/logs/attention.txt
    done
    pack attention_logs
    ;;
  coverage)
    specs="${2:?usage: device_session.sh coverage \"MODEL:LENGTH:SAMPLES[:FIRST] ...\" BOX_S}"
    box="${3:?usage: device_session.sh coverage \"MODEL:LENGTH:SAMPLES[:FIRST] ...\" BOX_S}"
    tasks="${TASKS:-cwe fwe niah_multikey_1 niah_multikey_2 niah_multikey_3 niah_multiquery niah_multivalue niah_single_1 niah_single_2 niah_single_3 vt}"
    # The coverage group of tools/eval_protocol.py (its sweep_methods), with the measured window
    # for obcache_v / obcache_k beside SPEC's, and its paired comparisons.
    methods=full,snapkv,h2o,tova,obcache_v,obcache_k,keydiff,vatp,criticalkv,random,aggregations,kvpress,adakv-variants,obcache_v:w=32:pool=max:11,obcache_k:w=32:pool=max:11
    compare=obcache_vk:h2o/h2o,obcache_vk:tova/tova,dropkv:h2o/h2o,dropkv:tova/tova,obcache_vk:adakv/adakv,snapkv:kvpress/snapkv,h2o:kvpress/h2o,tova:kvpress/tova
    mkdir -p $K/cov
    t0=$(date +%s)
    if [ "${MEMCHECK_MODEL_TESTS:-0}" = 1 ]; then
      (for t in $K/bin/test_model_cuda_*; do sanitize memcheck "$(basename "$t")" "$box"; done \
         >$K/logs/memcheck_summary.txt) &
    fi
    # One process a (model, length, task), evaluating CHUNK samples an eval (COVERAGE_CHUNK, default
    # 10), each chunk saved on its own: a call stopped by BOX_S loses at most the chunk under way,
    # and the next call of the same build goes on from the first missing chunk.
    chunk="${COVERAGE_CHUNK:-10}"
    deadline=$((t0 + box))
    for spec in $specs; do
      IFS=: read -r m L N F <<<"$spec"
      F=${F:-0}
      case $m in
        smollm2) f=$K/models/SmolLM2-135M-Instruct.Q4_1.gguf ;;
        gemma3) f=$K/models/gemma-3-270m-q4_k_m.gguf ;;
        *) echo "device_session: unknown model '$m'; expected smollm2 or gemma3" >&2; exit 2 ;;
      esac
      for t in $tasks; do
        (
          last=20  # seconds the previous chunk took: the next starts only if that much is left
          for ((s = F; s < F + N; s += chunk)); do
            n=$((F + N - s < chunk ? F + N - s : chunk))
            out="$K/cov/${m}_${L}_${t}_from$s.json"
            [ -f "$out" ] && continue
            start=$(date +%s)
            left=$((deadline - start))
            [ "$left" -gt $((last + last / 10 + 10)) ] || break
            timeout "$left" $K/bin/kvevict eval -m "$f" --device cuda --tasks "$t" --lengths "$L" \
              --samples "$n" --first-sample "$s" --methods $methods --budgets 0.05,0.1,0.2,0.3 \
              --modes aware,agnostic --split test --max-new 32 --bootstrap 2000 --compare $compare \
              --out "$out" >"${out%.json}.log" 2>&1 || break
            last=$(($(date +%s) - start))
          done
        ) &
      done
    done
    wait
    echo "eval: $(($(date +%s) - t0)) s"
    cat $K/logs/memcheck_summary.txt 2>/dev/null
    merged_keys=" "
    for spec in $specs; do
      IFS=: read -r m L N F <<<"$spec"
      case "$merged_keys" in *" ${m}_$L "*) continue ;; esac  # shards of one model and length
      merged_keys="$merged_keys${m}_$L "
      # Every chunk of every spec of this model and length must be there before the merge.
      want=0 have=0
      for spec2 in $specs; do
        IFS=: read -r m2 L2 N2 F2 <<<"$spec2"
        [ "$m2" = "$m" ] && [ "$L2" = "$L" ] || continue
        F2=${F2:-0}
        for t in $tasks; do
          for ((s = F2; s < F2 + N2; s += chunk)); do
            want=$((want + 1))
            [ -f "$K/cov/${m}_${L}_${t}_from$s.json" ] && have=$((have + 1))
          done
        done
      done
      files=$(ls $K/cov/${m}_${L}_*.json 2>/dev/null)
      echo "$m $L: $have of $want chunks of $chunk samples ($(echo "$files" | grep -c json) files here)"
      [ "$have" -eq "$want" ] || continue
      name="${m}_${L}_coverage"
      # shellcheck disable=SC2086
      $K/bin/kvevict merge --out "$OUT/$name.json" --markdown "$OUT/$name.md" $files \
        >$K/logs/merge_$name.log 2>&1 && xz -T4 -f "$OUT/$name.json"
      echo "merged: $OUT/$name.md"
    done
    (cd $K/cov && tar -cJf "$OUT/coverage_logs.tar.xz" ./*.log)
    pack coverage_logs_session
    ;;
  *)
    sed -n 2,40p "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
