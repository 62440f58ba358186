"""Loads the compiled extension ``kvevict._kvevict``.

A wheel built with the CUDA backend links the CUDA runtime (libcudart.so.13) and OpenMP
(libgomp.so.1) dynamically. When the system loader cannot find one of them, the copy that
PyTorch's wheels install (``nvidia/cu13/lib``, ``nvidia/cuda_runtime/lib``, ``torch/lib``) is
loaded first and the import retried, the way torch itself finds its CUDA libraries.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys

_SEARCH = ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "torch/lib")


def _preload(missing: str) -> bool:
    for base in sys.path:
        for folder in _SEARCH:
            for lib in sorted(glob.glob(os.path.join(base, folder, missing + "*"))):
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    return True
                except OSError:
                    continue
    return False


def _load():
    tried = set()
    while True:
        try:
            from kvevict import _kvevict

            return _kvevict
        except ImportError as e:  # pragma: no cover - depends on the machine's libraries
            m = re.search(r"(lib[\w.+-]+?\.so)(\.\d+)*: cannot open shared object", str(e))
            if not m or m.group(1) in tried or not _preload(m.group(1)):
                raise
            tried.add(m.group(1))


ext = _load()
Error = ext.Error
Error.__module__ = "kvevict"

__all__ = ["ext", "Error"]
