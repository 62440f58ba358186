#!/usr/bin/env python3
"""Small .npy files written by NumPy itself (format versions 1.0, 2.0, 3.0, several dtypes), for
tests/io/npy_test.cpp to read. Values are arange-based so the test can recompute them.

Usage: python tools/golden/npy_golden.py   (needs: pip install numpy)
"""
import os

import numpy as np
from numpy.lib import format as npf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "io", "data")


def write(name, arr, version):
    with open(os.path.join(OUT, name), "wb") as f:
        npf.write_array(f, arr, version=version)


def main():
    os.makedirs(OUT, exist_ok=True)
    base = np.arange(2 * 3 * 5).reshape(2, 3, 5)
    write("f4_v1.npy", (base * 0.5 - 3).astype("<f4"), (1, 0))
    write("f8_v2.npy", (base * 0.25).astype("<f8"), (2, 0))
    write("f2_v3.npy", (base - 7).astype("<f2"), (3, 0))
    write("i8_v1.npy", (base * -1000003).astype("<i8"), (1, 0))
    write("i4_v1.npy", (np.arange(7) - 3).astype("<i4"), (1, 0))
    write("u1_v1.npy", np.arange(250, 256, dtype=np.uint8), (1, 0))
    write("scalar_v1.npy", np.array(2.5, dtype="<f4"), (1, 0))
    bf16_bits = (np.array([1.0, -2.0, 0.5], dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
    write("bf16_as_u2_v1.npy", bf16_bits, (1, 0))
    write("fortran_v1.npy", np.asfortranarray(base.astype("<f4")), (1, 0))
    write("big_endian_v1.npy", base.astype(">f4"), (1, 0))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
