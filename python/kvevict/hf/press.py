"""``with kvevict.hf.press(model, ...)``: real KV-cache eviction inside a transformers model.

    with kvevict.hf.press(model, method="dropkv", budget=0.1, policy="adakv") as p:
        out = model.generate(input_ids, max_new_tokens=32)   # evicts each layer after prefill
    print(p.cache.kv_bytes())                                # the compacted cache's bytes

Inside the context the model attends through ``kvevict_sdpa`` / ``kvevict_eager`` (the model's
own sdpa or eager attention for the prompt, ``kvevict.attention`` over compacted layers) and any
``generate`` / forward call that brings no cache gets a fresh ``KVEvictCache``. On exit the
model is as before.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Iterator, Optional

import torch

from kvevict import _options, distributed
from kvevict.hf import attention as _attention
from kvevict.hf.cache import EvictConfig, KVEvictCache


def cache_kwarg(model) -> str:
    """The keyword a model's forward takes its cache by: "cache" (newer transformers 5.x) or
    "past_key_values" (5.0 - 5.2x)."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else \
        "past_key_values"


def given_cache(kwargs):
    return kwargs.get("cache") if kwargs.get("cache") is not None else \
        kwargs.get("past_key_values")


class Press:
    """What ``press()`` yields: its settings, a cache factory and the last cache used."""

    def __init__(self, model, config: EvictConfig, query_aware: bool,
                 shard: Optional[distributed.HeadShard] = None):
        self.model = model
        self.config = config
        self.query_aware = query_aware
        self.shard = shard  # this rank's KV heads under tensor parallelism, else None
        self.cache: Optional[KVEvictCache] = None
        self.kwarg = cache_kwarg(model)

    def new_cache(self) -> KVEvictCache:
        self.cache = KVEvictCache(self.config, self.shard)
        return self.cache

    def describe(self) -> str:
        mode = "query-aware" if self.query_aware else "query-agnostic"
        tp = f" tp={self.shard.size}" if self.shard is not None else ""
        return f"{self.config.settings.describe()} {mode}{tp}"

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, **kwargs) -> KVEvictCache:
        """Runs the prompt through the model, evicting each layer after its attention; returns
        the compacted cache (pass it to ``generate(..., past_key_values=cache)``)."""
        cache = self.new_cache()
        self.model(input_ids=input_ids, use_cache=True, **{self.kwarg: cache}, **kwargs)
        return cache

    @torch.no_grad()
    def generate(self, context_ids: torch.Tensor, question_ids: Optional[torch.Tensor] = None,
                 **kwargs) -> torch.Tensor:
        """Answers a question about a context (SPEC section 5's two modes).

        query-aware: one prompt ``context + question``, evicted with the question as the
        observation window. query-agnostic: the context alone is prefilled and evicted, then the
        question is appended to the compacted cache and attended in full.
        Returns what ``model.generate`` returns for ``context + question``.
        """
        ids = context_ids if question_ids is None else torch.cat([context_ids, question_ids], 1)
        if self.query_aware or question_ids is None:
            return self.model.generate(ids, **{self.kwarg: self.new_cache()}, **kwargs)
        cache = self.prefill(context_ids)
        return self.model.generate(ids, **{self.kwarg: cache}, **kwargs)


def _base_attention(model) -> str:
    impl = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if impl in _attention.NAMES.values():
        raise ValueError("this model is already inside a kvevict.hf.press")
    # flash / flex attention have no mask builder kvevict reuses: the prompt runs on sdpa.
    return "eager" if impl == "eager" else "sdpa"


def _set_attention(model, name: str) -> None:
    try:
        model.set_attn_implementation(name)
    except Exception:  # older 5.x releases check names more strictly: set the field directly
        for module in model.modules():
            cfg = getattr(module, "config", None)
            if cfg is not None and hasattr(cfg, "_attn_implementation_internal"):
                cfg._attn_implementation_internal = name


def _check_unpadded(kwargs) -> None:
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.ndim == 2 and not bool(mask.all()):
        raise ValueError("attention_mask has padding; kvevict.hf.press supports batches of "
                         "equal-length prompts only (evicted layers attend by original positions "
                         "without a padding mask)")


@contextlib.contextmanager
def press(model, method: str = "dropkv", budget: Optional[_options.BudgetLike] = 0.1, *,
          compression_ratio: Optional[float] = None, policy: Optional[str] = None,
          query_aware: bool = True, window: Optional[int] = None, pool: Optional[str] = None,
          aggregate: Optional[str] = None, sink: Optional[int] = None,
          alpha: Optional[float] = None,
          prefill: bool = True, decode_budget: Optional[int] = None, decode_score: str = "h2o",
          decode_slack: int = 0, decode_recent: int = 32, slack: int = 64,
          shard: Optional[distributed.HeadShard] = None) -> Iterator[Press]:
    """Evicts a transformers model's KV cache with kvevict while the context is open.

    Args:
        model: a causal LM of the Llama, Qwen2 or Gemma 3 families (any model whose attention
            goes through transformers' AttentionInterface should work).
        method, budget, compression_ratio, policy, window, pool, aggregate, sink, alpha: as in
            ``kvevict.LayerEvictor`` (``budget`` kept fraction or count; ``compression_ratio`` the
            evicted fraction; ``policy="adakv"`` per-head budgets).
        query_aware: the default mode of ``Press.generate`` (SPEC section 5).
        prefill: evict each layer right after its prompt attention.
        decode_budget: also evict while decoding, down to this many rows per head
            (``decode_score``: h2o, tova, dropkv, obcache_*; ``decode_slack``, ``decode_recent``
            as in ``kvevict.DecodeEvictor``). Host (CPU) models only for now.
        slack: spare rows per head after compaction, so decode appends do not copy the cache
            (it is re-spaced with this many more rows whenever a head fills up).
        shard: this rank's KV heads under tensor parallelism; None reads it from a model loaded
            with ``tp_plan`` (``kvevict.distributed.HeadShard.of_model``). Each rank evicts its
            own heads; adakv and tova add one all-gather per layer (``kvevict.distributed``),
            so the kept sets are those of the single-process run.

    Yields:
        a Press; ``press.cache`` is the KVEvictCache of the latest call.
    """
    config = EvictConfig(method=method, budget=budget, compression_ratio=compression_ratio,
                         policy=policy, window=window, pool=pool, aggregate=aggregate,
                         sink=sink, alpha=alpha, prefill=prefill, decode_budget=decode_budget,
                         decode_score=decode_score, decode_slack=decode_slack,
                         decode_recent=decode_recent, slack=slack)
    if decode_budget is not None and any(t.is_cuda for t in model.parameters()):
        raise ValueError("decode_budget: decode-time eviction runs on host caches (the "
                         "DecodeEvictor); this model is on a CUDA device")
    if shard is None:
        shard = distributed.HeadShard.of_model(model)
    p = Press(model, config, query_aware, shard)
    _attention.register()
    base = _base_attention(model)
    original_impl = model.config._attn_implementation
    original_generate = model.__dict__.get("generate")
    original_forward = model.__dict__.get("forward")
    generate, forward = model.generate, model.forward

    @functools.wraps(generate)
    def generate_with_cache(*args, **kwargs):
        _check_unpadded(kwargs)
        if given_cache(kwargs) is None:
            kwargs[p.kwarg] = p.new_cache()
        elif isinstance(given_cache(kwargs), KVEvictCache):
            p.cache = given_cache(kwargs)
        return generate(*args, **kwargs)

    @functools.wraps(forward)
    def forward_with_cache(*args, **kwargs):
        _check_unpadded(kwargs)
        if given_cache(kwargs) is None and kwargs.get("use_cache", True) is not False:
            kwargs[p.kwarg] = p.new_cache()
        cache = given_cache(kwargs)
        if not isinstance(cache, KVEvictCache):
            return forward(*args, **kwargs)
        # CUDA layers evict without waiting on their NaN checks; they are read once, at the end
        # of the pass (one synchronization when a layer evicted), and raise before it returns.
        with cache.deferred_checks():
            return forward(*args, **kwargs)

    _set_attention(model, _attention.NAMES[base])
    model.generate = generate_with_cache
    model.forward = forward_with_cache
    try:
        yield p
    finally:
        for name, original in (("generate", original_generate), ("forward", original_forward)):
            if original is None:
                model.__dict__.pop(name, None)
            else:
                setattr(model, name, original)
        _set_attention(model, original_impl)
