#!/usr/bin/env python3
"""A small .safetensors file written by the safetensors package itself, for
tests/io/safetensors_test.cpp: tensors of F32/F16/BF16(as raw bits)/I32/I64 with arange-based
values the test recomputes, plus __metadata__.

Usage: python tools/golden/safetensors_golden.py   (needs: pip install safetensors numpy)
"""
import os

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "io", "data")


def main():
    os.makedirs(OUT, exist_ok=True)
    tensors = {
        "f32": (np.arange(3 * 7, dtype=np.float32) * 0.5 - 2).reshape(3, 7),
        "f16": (np.arange(5, dtype=np.float16) - 2),
        "i32": np.arange(4, dtype=np.int32) * -3,
        "i64": np.arange(2 * 2, dtype=np.int64).reshape(2, 2) * 1000000007,
        "scalar": np.array(1.25, dtype=np.float32),
    }
    save_file(tensors, os.path.join(OUT, "sample.safetensors"), metadata={"origin": "kvevict-test"})
    save_file({"only": np.arange(6, dtype=np.float32).reshape(2, 3)},
              os.path.join(OUT, "single.safetensors"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
