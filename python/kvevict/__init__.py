"""kvevict: KV-cache eviction kernels on numpy arrays and torch tensors.

    import kvevict
    s = kvevict.score(q, k, v, method="dropkv")            # q [Hq, w, d], k/v [Hkv, n, d]
    sel = kvevict.select(s, budget=0.1, policy="adakv", window=8)
    cache = kvevict.compact(k, v, sel)                      # per-head varlen, memory shrinks
    out = kvevict.attention(q_new, cache, q_pos=[n])        # over exactly the kept rows

Hugging Face transformers: ``kvevict.hf.press(model, ...)``; kvpress: ``kvevict.kvpress``.
Errors from the library are ``kvevict.Error`` (a ValueError) with the C++ message.
"""

from kvevict._ext import Error, ext
from kvevict.evictors import DecodeEvictor, LayerEvictor
from kvevict.ops import (KVCache, Selection, attention, compact, decode_attention,
                         method_defaults, method_names, score, select)

__version__ = "0.1.0"


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a device is visible."""
    return bool(ext.cuda_built) and bool(ext.cuda_device_available())


__all__ = [
    "DecodeEvictor",
    "Error",
    "KVCache",
    "LayerEvictor",
    "Selection",
    "attention",
    "compact",
    "cuda_available",
    "decode_attention",
    "method_defaults",
    "method_names",
    "score",
    "select",
]
