#!/usr/bin/env python3
"""Reference dequantization values from gguf-py (the Python package of the ggml project), an
implementation independent of kvevict's C++ decoder.

Writes tests/io/data/gguf_dequant_golden.json:
  blocks: for every supported type, a few blocks of random bytes (scale fields set to finite fp16
          values) and the floats gguf-py decodes them to;
  models: when the embedded checkpoints are present, a few rows of several tensors of each model
          (row index, first 32 values, row sum and sum of squares), decoded by gguf-py.

Usage: python tools/golden/gguf_dequant_golden.py [models_dir]   (needs: pip install gguf numpy)
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "io", "data", "gguf_dequant_golden.json")

# byte offsets of the fp16 scale fields inside one block
SCALES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def random_blocks(rng, qtype, n_blocks):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        return rng.standard_normal(n_blocks * 7).astype(np.float32).view(np.uint8)
    if qtype == T.F16:
        return rng.uniform(-60000, 60000, n_blocks * 7).astype(np.float16).view(np.uint8)
    if qtype == T.BF16:
        v = rng.standard_normal(n_blocks * 7).astype(np.float32) * 1e3
        return (v.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for b in range(n_blocks):
        for off in SCALES[qtype]:
            s = np.array([rng.uniform(-2, 2) * 10.0 ** rng.integers(-4, 1)], dtype=np.float16)
            raw[b, off:off + 2] = s.view(np.uint8)
    return raw.reshape(-1)


def main():
    rng = np.random.default_rng(20261129)
    blocks = []
    for qtype in [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K,
                  T.Q6_K]:
        data = random_blocks(rng, qtype, 3)
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        if qtype in (T.F32, T.F16, T.BF16):
            vals = dequantize(data, qtype)
        else:
            vals = dequantize(data.reshape(-1, block_bytes), qtype)
        vals = np.asarray(vals, dtype=np.float32).reshape(-1)
        blocks.append({"type": qtype.name, "code": int(qtype), "hex": data.tobytes().hex(),
                       "values": [float(x) for x in vals]})

    models = []
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "KVEVICT_MODEL_DIR", os.path.join(ROOT, "models"))
    for fname in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]:
        path = os.path.join(models_dir, fname)
        if not os.path.exists(path):
            print("skipping absent", path)
            continue
        reader = gguf.GGUFReader(path)
        seen = set()
        picks = []
        for t in reader.tensors:  # the first tensor of every type, plus two named ones
            if t.tensor_type not in seen or t.name in ("blk.1.attn_v.weight", "output_norm.weight"):
                seen.add(t.tensor_type)
                picks.append(t)
        rows = []
        for t in picks:
            full = dequantize(t.data, t.tensor_type).astype(np.float32)
            n = int(t.shape[0])  # ne[0], the row length
            full = full.reshape(-1, n)
            for r in sorted({0, full.shape[0] // 2, full.shape[0] - 1}):
                row = full[r].astype(np.float64)
                rows.append({"tensor": t.name, "type": t.tensor_type.name, "row": r,
                             "first": [float(x) for x in full[r][:32]],
                             "sum": float(row.sum()), "sum_sq": float((row * row).sum())})
        models.append({"file": fname, "rows": rows})

    with open(OUT, "w") as f:
        json.dump({"generator": "tools/golden/gguf_dequant_golden.py",
                   "versions": {"gguf": gguf.__version__ if hasattr(gguf, "__version__") else
                                "0.19.0", "numpy": np.__version__},
                   "blocks": blocks, "models": models}, f, indent=0)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
