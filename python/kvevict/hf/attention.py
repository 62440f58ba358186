"""The attention function kvevict registers in transformers' ``AttentionInterface``.

transformers calls ``fn(module, query, key, value, attention_mask, scaling=..., **kwargs)`` with
``query [B, Hq, m, d]`` after RoPE and whatever the cache's ``update()`` returned as key/value.
A ``KVEvictLayer`` tags its key tensor (``cache.LAYER_TAG``), so this function knows the layer:

- dense layer (the prompt's first pass): the model's own attention (sdpa or eager) over the full
  K/V, then the layer evicts with this very query (SPEC section 5: hidden states of later
  layers come from full attention);
- compacted layer: ``kvevict.attention`` over exactly the kept rows, by original positions
  (the mask transformers built for the full length is not needed and not read).

Two names are registered, one per dense attention and its mask builder: ``kvevict_sdpa`` and
``kvevict_eager``. ``kvevict.hf.press`` switches a model to one of them and back.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from kvevict.hf.cache import LAYER_TAG

NAMES = {"sdpa": "kvevict_sdpa", "eager": "kvevict_eager"}


def _eager_of(module: torch.nn.Module) -> Callable:
    """The model's own eager attention (modeling_<model>.eager_attention_forward)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise ValueError(f"{type(module).__name__} has no eager_attention_forward; use sdpa")
    return fn


def _make(dense: Optional[Callable]) -> Callable:
    def kvevict_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                          **kwargs):
        layer = getattr(key, LAYER_TAG, None)
        if layer is not None and layer.compacted is not None and key is layer.compacted.k:
            out = layer.attend(query, scaling, kwargs.get("sliding_window"), kwargs.get("softcap"))
            return out, None
        fn = dense or _eager_of(module)
        out, weights = fn(module, query, key, value, attention_mask, scaling=scaling,
                          dropout=dropout, **kwargs)
        if layer is not None:
            layer.after_prefill(query, scaling, module)
        return out, weights

    return kvevict_attention


def register() -> None:
    """Registers kvevict_sdpa / kvevict_eager (idempotent)."""
    AttentionInterface.register(NAMES["sdpa"], _make(sdpa_attention_forward))
    AttentionInterface.register(NAMES["eager"], _make(None))
    AttentionMaskInterface.register(NAMES["sdpa"], sdpa_mask)
    AttentionMaskInterface.register(NAMES["eager"], eager_mask)
