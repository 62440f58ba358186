"""Hugging Face transformers integration with real compaction (needs torch and transformers 5.x).

- ``press(model, method=..., budget=..., policy=..., query_aware=...)``: a context manager that
  evicts every layer after its prefill attention (and optionally while decoding);
- ``KVEvictCache``: the transformers ``Cache`` holding each layer's compacted per-head
  variable-length K/V on the model's device;
- ``register()``: registers the ``kvevict_sdpa`` / ``kvevict_eager`` attention functions.
"""

from kvevict.hf.attention import NAMES, register
from kvevict.hf.cache import EvictConfig, KVEvictCache, KVEvictLayer
from kvevict.hf.press import Press, press

__all__ = ["EvictConfig", "KVEvictCache", "KVEvictLayer", "NAMES", "Press", "press", "register"]
