#!/usr/bin/env python3
"""Golden logits + greedy continuations from an independent implementation (llama.cpp through
llama-cpp-python) for the model runtime tests (tests/model/golden_test.cpp).

For each model and each fixed prompt it records: the prompt token ids (llama.cpp's tokenizer,
so the C++ test does not depend on ours), the last-position logits as top-50 ids/values plus
full-vector statistics, and 32 greedy tokens. The KV cache is kept in f32 (type_k/type_v = 0).

Two references per model:
  "cases":           llama.cpp on an F32 copy of the file (model_dequantize_gguf.py): plain f32
                     matmuls on the same dequantized weights kvevict uses -> float-rounding
                     agreement is expected.
  "quantized_cases": llama.cpp on the original quantized file: it quantizes activations to 8 bits
                     for quantized matmuls, so ~1e-2 relative logit differences and greedy
                     divergence at near-ties are expected.

  pip install llama-cpp-python
  KVEVICT_MODEL_DIR=/path/to/models python3 tools/golden/model_golden.py
writes tests/data/golden/<model>.json.
"""
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp
import llama_cpp.llama_cpp as llama_lowlevel
from llama_cpp import Llama

# ggml's "extra buffer types" repack weights for AMX/AVX-512 kernels; on this (virtualized) CPU
# the AMX tile instructions fault, so load the plain CPU buffers (same math, no repacking).
_default_model_params = llama_lowlevel.llama_model_default_params


def _model_params_without_extra_buffers():
    params = _default_model_params()
    params.use_extra_bufts = False
    return params


llama_lowlevel.llama_model_default_params = _model_params_without_extra_buffers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.environ.get("KVEVICT_MODEL_DIR") or os.path.join(ROOT, "models")
OUT_DIR = os.path.join(ROOT, "tests", "data", "golden")

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village at the edge of a great forest, there lived a",
]
TOP = 50
GREEDY = 32


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def last_logits(llm):
    return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)


def run_cases(path):
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                type_k=0, type_v=0, verbose=False, seed=0)
    cases = []
    for prompt in PROMPTS:
        llm.reset()
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        llm.eval(ids)
        logits = last_logits(llm)
        order = np.argsort(-logits, kind="stable")[:TOP]
        greedy = []
        for _ in range(GREEDY):
            nxt = int(np.argmax(last_logits(llm)))
            greedy.append(nxt)
            llm.eval([nxt])
        cases.append({
            "prompt": prompt,
            "tokens": [int(t) for t in ids],
            "top_ids": [int(i) for i in order],
            "top_logits": [float(logits[i]) for i in order],
            "logit_mean": float(logits.mean()),
            "logit_std": float(logits.std()),
            "logit_min": float(logits.min()),
            "logit_max": float(logits.max()),
            "greedy": greedy,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace"),
        })
    del llm
    return cases


def run_model(name, file):
    path = os.path.join(MODEL_DIR, file)
    f32_path = os.path.join(tempfile.gettempdir(), "kvevict-golden-%s-f32.gguf" % name)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "model_dequantize_gguf.py"),
                    path, f32_path], check=True)
    try:
        cases = run_cases(f32_path)
    finally:
        os.remove(f32_path)
    quantized = run_cases(path)
    return {
        "model": name,
        "file": file,
        "sha256": sha256(path),
        "reference": ("llama.cpp via llama-cpp-python %s (f32 KV cache, n_threads=2, "
                      "no extra buffer types)" % llama_cpp.__version__),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "top": TOP,
        "gguf_py": _gguf_version(),
        "cases": cases,
        "quantized_cases": quantized,
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        data = run_model(name, MODELS[name])
        out = os.path.join(OUT_DIR, name + ".json")
        with open(out, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print("wrote", out)


if __name__ == "__main__":
    main()
