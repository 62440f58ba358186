#!/usr/bin/env bash
# kvevict's CPU runtime beside llama.cpp on the same GGUF file and the same prompt.
#
#   tools/cpu_vs_llamacpp.sh [--build-only] [MODELS] [LENGTHS] [THREADS] [REPEATS]
#     MODELS   comma-separated: smollm2, gemma3-270m or .gguf paths (default smollm2,gemma3-270m)
#     LENGTHS  prompt lengths in tokens (default 512,2048,4096)
#     THREADS  thread counts (default 1,2)
#     REPEATS  A B pairs per row (default 3); the median of each side is printed
#
# llama.cpp is built ONCE from the vendored source of the llama-cpp-python sdist (pip download
# --no-binary :all: --no-deps llama-cpp-python==$LLAMACPP_PY_VERSION), with GGML_NATIVE=ON, into
# $LLAMACPP_CACHE (default ~/.cache/kvevict/llama.cpp-<version>): nothing of it lands in the repo
# (and once more without AMX where its AMX build crashes: see build_llamacpp). llama.cpp runs with
# flash attention on and off, and each of its numbers is the better of the two (run_llama).
#
# Each row runs kvevict and llama.cpp in turn, A B A B ..., on a prompt of at most N tokens
# (Austen prose cut at a word by the GGUF's tokenizer) and decodes up to 64 tokens (llama.cpp
# with EOS ignored; kvevict generate stops at an end-of-generation token, which prose prompts
# do not reach in 64 tokens). Prefill tok/s = N / prompt time, decode tok/s = tokens after the
# first / their time (both sides report it so: llama.cpp's "eval time", kvevict's decode stats).
# Both run under the caller's OpenMP settings (none by default: libgomp spins briefly between
# parallel regions; OMP_WAIT_POLICY=PASSIVE would put kvevict's threads to sleep between its
# per-projection regions while llama.cpp keeps one region a token and its own spin barriers).
# Peak RSS is the maximum resident set size from GNU time. The ratio is llama.cpp / kvevict
# (<= 1 means kvevict is at least as fast; for RSS kvevict / llama.cpp). The load average
# before each row is printed beside it: the numbers of a busy machine are noisy.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; shift; fi
MODELS="${1:-smollm2,gemma3-270m}"
LENGTHS="${2:-512,2048,4096}"
THREADS="${3:-1,2}"
REPEATS="${4:-3}"
NEW=64
VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
CACHE="${LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/llama.cpp-$VERSION}"
KV="${KVEVICT_BIN:-$ROOT/build/release/kvevict}"
KV_DTYPE="${KV_DTYPE:-f16}"  # llama.cpp's default cache type
OUT="${OUT:-$ROOT/out/cpu_vs_llamacpp}"

# A model name of kvevict's (smollm2, gemma3-270m) as its file; a path stays itself.
resolve_model() {
  case "$1" in
    smollm2) echo "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3-270m | gemma3) echo "$ROOT/models/gemma-3-270m-q4_k_m.gguf" ;;
    *) echo "$1" ;;
  esac
}

# llama.cpp's own build of this CPU (GGML_NATIVE=ON) into $CACHE/$1, with extra compiler flags $2.
build_llamacpp_in() {  # build_dir extra_flags
  echo "cpu_vs_llamacpp: building llama.cpp (GGML_NATIVE=ON${2:+ $2}) in $CACHE/$1" >&2
  cmake -S "$CACHE/src" -B "$CACHE/$1" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=ON -DCMAKE_C_FLAGS="$2" -DCMAKE_CXX_FLAGS="$2" >&2
  cmake --build "$CACHE/$1" -j"${JOBS:-2}" --target llama-completion llama-tokenize llama-bench >&2
}

# Two tokens after a 30-word prompt on the first model (a prompt batch: what the AMX kernels run
# on; a one-token prompt does not reach them): does this build run on this machine?
llamacpp_runs() {  # bin_dir
  local model
  model="$(resolve_model "${MODELS%%,*}")"
  [ -r "$model" ] || return 0  # nothing to try it on: assume it runs
  "$1/llama-completion" -m "$model" -p "$(printf 'the river runs to the sea %.0s' 1 2 3 4 5)" \
    -n 2 -no-cnv -t 1 -c 128 --temp 0 --no-warmup \
    >/dev/null 2>&1 </dev/null
}

# LLAMA_BIN: the build used. A CPU that lists AMX but whose VM does not let a process use the tile
# registers crashes llama.cpp's AMX kernels (SIGSEGV in ggml_backend_amx_mul_mat, seen on an
# AMX-listing 2-vCPU VM, 2026-12-03): then llama.cpp is rebuilt without AMX (-mno-amx-*), and the
# tool says so. kvevict uses no AMX either.
build_llamacpp() {
  if [ ! -d "$CACHE/src" ]; then
    mkdir -p "$CACHE"
    echo "cpu_vs_llamacpp: fetching the llama-cpp-python $VERSION sdist into $CACHE" >&2
    python3 -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" \
      -d "$CACHE/dl" >&2
    mkdir -p "$CACHE/src.tmp"
    tar xzf "$CACHE/dl/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src.tmp"
    mv "$CACHE/src.tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$CACHE/src"
    rm -rf "$CACHE/src.tmp"
  fi
  LLAMA_BIN="$CACHE/build/bin"
  [ -x "$LLAMA_BIN/llama-completion" ] && [ -x "$LLAMA_BIN/llama-tokenize" ] ||
    build_llamacpp_in build ""
  if ! llamacpp_runs "$LLAMA_BIN" && grep -qw amx_tile /proc/cpuinfo; then
    LLAMA_BIN="$CACHE/build-noamx/bin"
    [ -x "$LLAMA_BIN/llama-completion" ] && [ -x "$LLAMA_BIN/llama-tokenize" ] ||
      build_llamacpp_in build-noamx "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    echo "cpu_vs_llamacpp: llama.cpp's AMX build crashes on this machine; using the build without AMX" >&2
  fi
  llamacpp_runs "$LLAMA_BIN" || { echo "cpu_vs_llamacpp: llama.cpp in $LLAMA_BIN does not run" >&2; exit 2; }
}
build_llamacpp
[ "$BUILD_ONLY" = 1 ] && exit 0

LLAMA="$LLAMA_BIN/llama-completion"
TOKENIZE="$LLAMA_BIN/llama-tokenize"
[ -x "$KV" ] || { echo "cpu_vs_llamacpp: $KV not built (scripts/build.sh release)" >&2; exit 2; }
BOOK="$ROOT/data/corpus/austen/emma.txt"
[ -r "$BOOK" ] || { echo "cpu_vs_llamacpp: $BOOK missing (scripts/prepare_corpus.sh)" >&2; exit 2; }
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "cpu_vs_llamacpp: GNU time missing (apt-get install time)" >&2; exit 2; }
mkdir -p "$OUT"

# One run of kvevict: prints "prefill_tok_s decode_tok_s peak_kib".
run_kvevict() {  # model prompt threads tag
  local log="$OUT/$4.kv"
  "$TIME" -f 'PEAK_KIB %M' "$KV" generate -m "$1" -f "$2" -n "$NEW" --json \
    --threads "$3" --kv-dtype "$KV_DTYPE" >"$log.json" 2>"$log.err"
  python3 - "$log.json" "$log.err" <<'EOF'
import json, re, sys
j = json.load(open(sys.argv[1]))
peak = re.findall(r"PEAK_KIB (\d+)", open(sys.argv[2]).read())[-1]
print(j["prefill_tokens_per_s"], j["decode_tokens_per_s"], peak, j["prompt_tokens"])
EOF
}

# One run of llama.cpp on the same prompt text (the same GGUF tokenizer gives the same N tokens),
# once per flash-attention mode of LLAMA_FA (default "on off"): each metric is llama.cpp's best of
# them, its peak RSS the smaller. Its default (auto = on) is not always its fastest: on an
# AVX512-BF16 VM (2026-12-03) SmolLM2's decode at 4096 tokens ran 12.6 tok/s with -fa on and 32.0
# with -fa off, while its prefill was faster with it on (183 vs 151 tok/s).
run_llama() {  # model_path prompt threads tag prompt_tokens
  local log="$OUT/$4.ll" fa
  for fa in ${LLAMA_FA:-on off}; do
    # The context holds the prompt and the new tokens (a larger -c would allocate more KV cache).
    "$TIME" -f 'PEAK_KIB %M' "$LLAMA" -m "$1" -f "$2" -n "$NEW" --ignore-eos -no-cnv -t "$3" \
      -tb "$3" -c "$(($5 + NEW + 8))" --temp 0 --no-warmup --no-display-prompt -s 0 -fa "$fa" \
      >"$log.$fa.out" 2>"$log.$fa.err" </dev/null
  done
  python3 - "$log" ${LLAMA_FA:-on off} <<'EOF'
import re, sys
rows = []
for fa in sys.argv[2:]:
    t = open(f"{sys.argv[1]}.{fa}.err").read()
    p = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", t)
    e = re.search(r"\s eval time =\s*([\d.]+) ms /\s*(\d+) runs", t)
    peak = re.findall(r"PEAK_KIB (\d+)", t)[-1]
    rows.append((1000 * int(p.group(2)) / float(p.group(1)),
                 1000 * int(e.group(2)) / float(e.group(1)), int(peak), p.group(2)))
print(max(r[0] for r in rows), max(r[1] for r in rows), min(r[2] for r in rows), rows[0][3])
EOF
}

# The longest prefix of the book, in whole words, that the GGUF's tokenizer turns into at most N
# tokens (BOS included): found by bisection with llama.cpp's tokenizer.
make_prompt() {  # model_path n out
  python3 - "$1" "$2" "$3" "$TOKENIZE" "$BOOK" <<'EOF'
import re, subprocess, sys
model, n, out, tok, book = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
words = open(book, encoding="utf-8").read().split()
def count(k):
    open(out, "w").write(" ".join(words[:k]))
    r = subprocess.run([tok, "-m", model, "-f", out, "--show-count", "--log-disable"],
                       capture_output=True, text=True, check=True)
    return int(re.findall(r"Total number of tokens: (\d+)", r.stdout + r.stderr)[-1])
lo, hi = 1, 2 * n  # a word is at least one token
while lo < hi:
    mid = (lo + hi + 1) // 2
    lo, hi = (mid, hi) if count(mid) <= n else (lo, mid - 1)
count(lo)
EOF
}

echo "| model | threads | prompt | kvevict prefill / decode tok/s | llama.cpp prefill / decode tok/s | llama.cpp / kvevict prefill / decode | peak RSS kvevict / llama.cpp MiB (ratio) | load |"
echo "|---|---|---|---|---|---|---|---|"
IFS=, read -ra models <<<"$MODELS"
IFS=, read -ra lengths <<<"$LENGTHS"
IFS=, read -ra threads <<<"$THREADS"
for model in "${models[@]}"; do
  path="$(resolve_model "$model")"
  for n in "${lengths[@]}"; do
    prompt="$OUT/$(basename "$path" .gguf)_$n.txt"
    [ -s "$prompt" ] || make_prompt "$path" "$n" "$prompt"
    for t in "${threads[@]}"; do
      load="$(cut -d' ' -f1-3 /proc/loadavg)"
      : >"$OUT/rows.kv"; : >"$OUT/rows.ll"
      for r in $(seq 1 "$REPEATS"); do
        run_kvevict "$path" "$prompt" "$t" "${n}_${t}_$r" >>"$OUT/rows.kv"
        run_llama "$path" "$prompt" "$t" "${n}_${t}_$r" "$n" >>"$OUT/rows.ll"
      done
      python3 - "$OUT/rows.kv" "$OUT/rows.ll" "$model" "$t" "$n" "$load" <<'EOF'
import statistics as st, sys
kv = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
ll = [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
med = lambda rows, i: st.median(r[i] for r in rows)
kp, kd, km = med(kv, 0), med(kv, 1), med(kv, 2) / 1024
lp, ld, lm = med(ll, 0), med(ll, 1), med(ll, 2) / 1024
toks = f"{int(kv[0][3])}" + ("" if int(kv[0][3]) == int(ll[0][3]) else f" (llama.cpp {int(ll[0][3])})")
print(f"| {sys.argv[3]} | {sys.argv[4]} | {toks} | {kp:.1f} / {kd:.1f} | {lp:.1f} / {ld:.1f} | "
      f"{lp / kp:.2f} / {ld / kd:.2f} | {km:.0f} / {lm:.0f} ({km / lm:.2f}) | {sys.argv[6]} |")
EOF
    done
  done
done
