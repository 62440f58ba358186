#!/usr/bin/env bash
# The quantized CPU kernels under each instruction set (scalar, AVX2, AVX-512 VNNI) on a machine
# that has them all (the lent GPU machine's Sapphire Rapids host; this dev VM has no AVX-512).
#
#   tools/cpu_isa_check.sh --pack BUILD_DIR OUT_DIR
#       here: strips and xz-packs the quant tests, cpu_quant_bench, kvevict and every shared
#       library they load that is not glibc's (ldd), into OUT_DIR/cpu_isa.tar.xz, and copies this
#       script to OUT_DIR. BUILD_DIR: a `cpu` preset build with -DKVEVICT_NATIVE=OFF (a
#       -march=native build of this Zen 3 could use instructions another CPU lacks).
#   bash OUT_DIR/cpu_isa_check.sh OUT_DIR
#       there: unpacks into /tmp/kvisa and runs, each under KVEVICT_QUANT_ISA=scalar|avx2|avx512:
#       the quant tests (KVEVICT_EXPECT_ISA=avx512 turns the AVX-512 skip into a failure), the
#       kernel benchmarks on 1 and 4 threads, and `kvevict generate` (32 new tokens) on both
#       checkpoints on 1 thread (AVX-512 also on 2 and 4); prints one table last. Checkpoints from
#       $KVEVICT_MODEL_DIR (default /tmp/kv/models, where tools/device_session.sh puts them);
#       without them the generate rows and the real-weights test are skipped, saying so.
#       Logs in ${OUT:-/tmp/kvisa/out} (the device tool's $OUT when set).
set -uo pipefail

if [[ "${1:-}" == --pack ]]; then
  set -e
  build="${2:?usage: cpu_isa_check.sh --pack BUILD_DIR OUT_DIR}"
  out="${3:?usage: cpu_isa_check.sh --pack BUILD_DIR OUT_DIR}"
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$out"
  progs=()
  for f in "$build"/tests/test_quant_* "$build"/benchmarks/cpu_quant_bench "$build"/kvevict; do
    [[ -f "$f" && -x "$f" ]] && { cp "$f" "$stage/bin/"; progs+=("$f"); }
  done
  [[ -x "$stage/bin/kvevict" && -x "$stage/bin/cpu_quant_bench" ]] ||
    { echo "cpu_isa_check: $build lacks kvevict or cpu_quant_bench" >&2; exit 2; }
  # Every library the programs load but glibc's own (the device image may lack OpenBLAS,
  # libgomp, libbenchmark; kvevict's own are found through the build's RPATH): under the name
  # the loader asks for. ldd reads the build's programs, whose RPATH points at its libraries.
  if ldd "${progs[@]}" | grep -q 'not found'; then
    ldd "${progs[@]}" | grep 'not found' >&2
    echo "cpu_isa_check: a library is missing here" >&2
    exit 2
  fi
  ldd "${progs[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name path; do
      case "$name" in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
      esac
      cp -L "$path" "$stage/lib/$name"
    done
  strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
  tar -C "$stage" -cf - bin lib | xz -T2 -6 >"$out/cpu_isa.tar.xz"
  cp "$0" "$out/cpu_isa_check.sh"
  echo "cpu_isa_check: $out/cpu_isa.tar.xz $(du -h "$out/cpu_isa.tar.xz" | cut -f1)" \
       "($(ls "$stage/bin" | tr '\n' ' '); libs: $(ls "$stage/lib" | tr '\n' ' '))"
  exit 0
fi

dir="${1:?usage: cpu_isa_check.sh PACK_DIR (or --pack BUILD_DIR OUT_DIR)}"
kv=/tmp/kvisa
rm -rf "$kv/bin" "$kv/lib"
mkdir -p "$kv"
xz -dc "$dir/cpu_isa.tar.xz" | tar -xf - -C "$kv" || { echo "cpu_isa_check: unpack failed" >&2; exit 2; }
export LD_LIBRARY_PATH="$kv/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export KVEVICT_MODEL_DIR="${KVEVICT_MODEL_DIR:-/tmp/kv/models}"
export KVEVICT_EXPECT_ISA="${KVEVICT_EXPECT_ISA:-avx512}"
log="${OUT:-$kv/out}"
mkdir -p "$log"
ISAS=(scalar avx2 avx512)
summary="$log/summary.md"
: >"$summary"
row() { echo "$*" >>"$summary"; }

echo "== machine"
grep -m1 'model name' /proc/cpuinfo
echo "cores $(nproc); flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512dq|avx512_vnni|avx512_bf16|avx_vnni|amx_int8)$' | tr '\n' ' ')"
uptime
for b in "$kv"/bin/*; do ldd "$b" | grep -q 'not found' && { echo "MISSING LIBRARY for $b:"; ldd "$b" | grep 'not found'; }; done

echo "== tests (KVEVICT_EXPECT_ISA=$KVEVICT_EXPECT_ISA)"
row "| tests | ISA | result |"
row "|---|---|---|"
for isa in "${ISAS[@]}"; do
  for t in "$kv"/bin/test_quant_*; do
    name=$(basename "$t")
    KVEVICT_QUANT_ISA=$isa timeout 90 "$t" --gtest_brief=1 >"$log/$name.$isa.log" 2>&1
    rc=$?
    pass=$(grep -o '\[  PASSED  \] [0-9]* test' "$log/$name.$isa.log" | grep -o '[0-9]*' | head -1)
    skip=$(grep -o '\[  SKIPPED \] [0-9]* test' "$log/$name.$isa.log" | grep -o '[0-9]*' | head -1)
    res="rc $rc, ${pass:-0} passed, ${skip:-0} skipped"
    [[ $rc != 0 ]] && { res="**FAIL** ($res)"; tail -30 "$log/$name.$isa.log"; }
    grep -A1 ': Skipped$' "$log/$name.$isa.log" | grep -v -e ': Skipped$' -e '^--$' |
      sed "s/^/  $isa skip: /"
    echo "$name $isa: $res"
    row "| ${name#test_quant_} | $isa | $res |"
  done
done

echo "== kernel benchmarks"
bench_filter='BM_Project/3/576/576/(1|64)/[01]$|BM_Project/6/2048/640/64/0$|BM_Gemv'
row ""
row "| cpu_quant_bench | ISA | threads | wall time | rate (wall) |"
row "|---|---|---|---|---|"
for threads in 1 4; do
  for isa in "${ISAS[@]}"; do
    f="$log/bench.$isa.$threads.json"
    KVEVICT_QUANT_ISA=$isa KVEVICT_BENCH_THREADS=$threads timeout 60 "$kv/bin/cpu_quant_bench" \
      --benchmark_filter="$bench_filter" --benchmark_min_time=0.2 --benchmark_format=json \
      >"$f" 2>"$f.err" || { echo "bench $isa x$threads failed"; tail -5 "$f.err"; continue; }
    python3 - "$f" "$isa" "$threads" >>"$summary" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
for b in j["benchmarks"]:
    # The library's rates divide by the main thread's CPU time; with N threads the wall time
    # is the one that counts.
    wall = b["cpu_time"] / b["real_time"]
    rate = (f"{b['items_per_second'] * wall / 1e9:.2f} GMAC/s" if "items_per_second" in b
            else f"{b.get('bytes_per_second', 0) * wall / 1e9:.2f} GB/s")
    print(f"| {b['name']} ({b.get('label', '')}) | {sys.argv[2]} | {sys.argv[3]} | "
          f"{b['real_time']:.1f} {b['time_unit']} | {rate} |")
EOF
  done
done
grep -c '^| BM_' "$summary" | sed 's/^/benchmark rows: /'

echo "== kvevict generate (KVEVICT_MODEL_DIR=$KVEVICT_MODEL_DIR)"
row ""
row "| generate | ISA | threads | prompt tokens | prefill tok/s | decode tok/s (tokens) | runtime |"
row "|---|---|---|---|---|---|---|"
prompt="It is a truth universally acknowledged, that a single man in possession of a good fortune, \
must be in want of a wife. However little known the feelings or views of such a man may be on his \
first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, \
that he is considered the rightful property of some one or other of their daughters. Tell me a story \
about the family that lived in the house at the end of the lane."
for model in smollm2 gemma3-270m; do
  runs=()
  for isa in "${ISAS[@]}"; do runs+=("$isa 1"); done
  runs+=("avx512 2" "avx512 4")
  for r in "${runs[@]}"; do
    read -r isa threads <<<"$r"
    f="$log/gen.$model.$isa.$threads.json"
    KVEVICT_QUANT_ISA=$isa timeout 75 "$kv/bin/kvevict" generate -m "$model" -p "$prompt" \
      -n 32 --threads "$threads" --json >"$f" 2>"$f.err"
    rc=$?
    if [[ $rc != 0 ]]; then
      [[ $rc == 124 ]] && echo "timed out after 75 s" >>"$f.err"
      echo "generate $model $isa x$threads failed (rc $rc): $(tail -2 "$f.err")"
      row "| $model | $isa | $threads | - | - | failed: $(tail -1 "$f.err" | cut -c1-80) | |"
      continue
    fi
    python3 - "$f" "$model" "$isa" "$threads" >>"$summary" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {j['prompt_tokens']} | "
      f"{j['prefill_tokens_per_s']:.1f} | {j['decode_tokens_per_s']:.1f} ({j['generated_tokens']}) | "
      f"{j['runtime']} |")
EOF
  done
done

echo
echo "== summary"
cat "$summary"
