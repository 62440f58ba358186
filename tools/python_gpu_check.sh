#!/usr/bin/env bash
# The Python package on an H200 (the device machine: Python 3.12, torch 2.11 cu130, transformers
# 5.17, no kvpress, no network). From the repository root, with the wheels of .whl/ carried:
#   tools/python_gpu_check.sh             1. pytest tests/python on CUDA tensors (KVEVICT_TEST_CUDA=1,
#                                            the device's transformers 5.17);
#                                         2. the kvpress tests and the HF side by side
#                                            (benchmarks/python/hf_side_by_side.py) with kvpress 0.5.5
#                                            on transformers 5.2 (kvpress 0.5.5 requires < 5.3).
#                                         3. benchmarks/python/decode_steps.py on CUDA: decode
#                                            steps/s at one batch, A B C rounds: DynamicCache,
#                                            kvevict (kvevict.decode_attention), kvevict through
#                                            the general kvevict.attention (the path before).
#   tools/python_gpu_check.sh --tests     step 1 only;   --bench   steps 2 and 3 only.
# Every step has a time cap (the whole run stays under 6 minutes); the last lines printed are a
# short summary (pytest results, the side by side's tables, the decode table).
# Logs and the JSON of the side by side go to $OUT (the device tool's folder) or out/python_gpu.
#
# .whl/ must hold (build and download them on the development machine; the exact commands are in
# the header of benchmarks/python/hf_side_by_side.py):
#   kvevict-0.1.0-cp312-abi3-*.whl (CUDA backend, sm_90a), kvpress-0.5.5, transformers-5.2.0,
#   tokenizers-0.22.2, cachetools, fire, termcolor, requests, urllib3, idna, charset_normalizer,
#   certifi.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-all}"
OUTDIR="${OUT:-out/python_gpu}"
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
PIP=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
export OMP_WAIT_POLICY=PASSIVE

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
shopt -s nullglob
wheel=(.whl/kvevict-*.whl)
[ "${#wheel[@]}" = 1 ] || { echo "python_gpu_check: expected one .whl/kvevict-*.whl, found ${#wheel[@]}" >&2; exit 2; }
"${PIP[@]}" --target /tmp/kvsite "${wheel[0]}"
PYTHONPATH=/tmp/kvsite "$PY" -c "import kvevict, torch; print('kvevict', kvevict.__version__, \
'cuda backend', kvevict.cuda_available(), 'torch', torch.__version__)"

if [ "$MODE" = all ] || [ "$MODE" = --tests ]; then
  echo "== 1. pytest tests/python on CUDA tensors"
  # test_distributed runs 2-process CPU jobs (gloo): skipped here, CI runs them.
  PYTHONPATH=/tmp/kvsite KVEVICT_TEST_CUDA=1 timeout 100 "$PY" -m pytest -q -p no:cacheprovider \
    tests/python --ignore=tests/python/test_distributed.py 2>&1 | tee "$OUTDIR/pytest_cuda.log" \
    || true
fi

if [ "$MODE" = all ] || [ "$MODE" = --bench ]; then
  echo "== 2. kvpress 0.5.5 on transformers 5.2: its tests, then the side by side"
  others=()
  for w in .whl/*.whl; do
    case "$w" in .whl/kvevict-*) ;; *) others+=("$w") ;; esac
  done
  [ "${#others[@]}" -gt 0 ] || { echo "python_gpu_check: no kvpress wheels in .whl/" >&2; exit 2; }
  "${PIP[@]}" --target /tmp/kvpsite "${others[@]}"
  # kvpress imports `datasets` at import time for presses this check does not use: an empty
  # stand-in instead of carrying pyarrow and pandas (64 MiB carry limit).
  mkdir -p /tmp/kvpstub/datasets
  echo 'def load_dataset(*a, **k): raise RuntimeError("datasets is a stand-in here")' \
    > /tmp/kvpstub/datasets/__init__.py
  export PYTHONPATH=/tmp/kvpsite:/tmp/kvsite:/tmp/kvpstub
  "$PY" -c "import kvpress, transformers; print('kvpress', kvpress.__name__, 'transformers', transformers.__version__)"
  timeout 40 "$PY" -m pytest -q -p no:cacheprovider tests/python/test_kvpress.py \
    2>&1 | tee "$OUTDIR/pytest_kvpress.log" || true
  PYTHONUNBUFFERED=1 timeout 150 "$PY" benchmarks/python/hf_side_by_side.py --repeats 3 \
    --json "$OUTDIR/hf_side_by_side.json" 2>&1 | tee "$OUTDIR/hf_side_by_side.log" || true
  echo "== 3. decode steps/s on CUDA: DynamicCache vs kvevict (Llama-3.1-8B heads, 8 layers)"
  PYTHONPATH=/tmp/kvsite PYTHONUNBUFFERED=1 timeout 60 "$PY" benchmarks/python/decode_steps.py \
    --device cuda --layers 8 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
    --prompt 4096 --batch 64 --budget 0.1 --steps 24 --repeats 2 --slack 16 \
    --json "$OUTDIR/decode_steps.json" 2>&1 | tee "$OUTDIR/decode_steps.log" || true
fi

echo
echo "================ summary"
for f in pytest_cuda pytest_kvpress; do
  if [ -f "$OUTDIR/$f.log" ]; then
    echo "$f: $(grep -E '(passed|failed|error)' "$OUTDIR/$f.log" | tail -1 || true)"
  fi
done
if [ -f "$OUTDIR/hf_side_by_side.log" ]; then
  grep -E '^\||^prefill vs HF|^speed-up|^hook:' "$OUTDIR/hf_side_by_side.log" || tail -5 "$OUTDIR/hf_side_by_side.log"
fi
if [ -f "$OUTDIR/decode_steps.log" ]; then
  grep -E '^\|' "$OUTDIR/decode_steps.log" || tail -5 "$OUTDIR/decode_steps.log"
fi
exit 0
