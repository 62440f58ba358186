"""Loads the compiled extension ``kvevict._kvevict``.

A wheel built with the CUDA backend links the CUDA runtime (libcudart.so.13) dynamically. When
the system loader cannot find it (no toolkit in the library path), the copy that PyTorch's CUDA
wheels install (``nvidia/cu13/lib`` or ``nvidia/cuda_runtime/lib`` in site-packages) is loaded
first, the way torch itself finds its CUDA libraries.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys


def _preload_cudart() -> bool:
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libcudart.so.*", "nvidia/cuda_runtime/lib/libcudart.so.*"):
            for lib in sorted(glob.glob(os.path.join(base, pattern))):
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    return True
                except OSError:
                    continue
    return False


try:
    from kvevict import _kvevict as ext
except ImportError as first_error:  # pragma: no cover - depends on the machine's CUDA setup
    if "libcudart" not in str(first_error) or not _preload_cudart():
        raise
    from kvevict import _kvevict as ext

Error = ext.Error
Error.__module__ = "kvevict"

__all__ = ["ext", "Error"]
