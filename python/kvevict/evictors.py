"""The library's eviction objects: ``LayerEvictor`` (score -> select -> compact over a backend,
kvevict/evict.h) and ``DecodeEvictor`` (decode-time eviction, kvevict/decode_evict.h)."""

from __future__ import annotations

from typing import Any, Optional

from kvevict import _checks as C
from kvevict import _options
from kvevict import _tensors as T
from kvevict._ext import ext
from kvevict.ops import KVCache, Selection

Array = Any


class LayerEvictor:
    """One layer's prefill eviction with the library's pipeline (``kvevict::LayerEvictor``).

    ``LayerEvictor("adadropkv", budget=0.1).evict(q, k, v)`` scores with the window queries,
    selects (SPEC section 3) and compacts into a smaller ``KVCache``. The settings and their
    defaults are those of ``kvevict score`` (``describe()`` prints them).

    Args:
        method: a name of ``kvevict.method_names()``; "adadropkv" / "adakv" imply the adakv
            policy, "streamingllm" 4 sinks.
        budget / compression_ratio: the kept fraction (<= 1) or count (> 1) / the evicted
            fraction.
        policy, window, pool, aggregate, sink, alpha, h2o_normalize, seed: overrides of the
            method's defaults.
        backend: "cpu" (float), "reference" (double) or "cuda" (device tensors).
    """

    def __init__(self, method: str = "dropkv", budget: Optional[_options.BudgetLike] = None, *,
                 compression_ratio: Optional[float] = None, policy: Optional[str] = None,
                 window: Optional[int] = None, pool: Optional[str] = None,
                 aggregate: Optional[str] = None, sink: Optional[int] = None,
                 alpha: Optional[float] = None, h2o_normalize: bool = False, seed: int = 0,
                 backend: str = "cpu"):
        self.settings = _options.settings(
            method, budget, compression_ratio=compression_ratio, policy=policy, window=window,
            pool=pool, aggregate=aggregate, sink=sink, alpha=alpha,
            h2o_normalize=h2o_normalize, seed=seed)
        self._evictor = ext.LayerEvictor(C.text("backend", backend, optional=False),
                                         self.settings.score, self.settings.select)
        self.backend = backend

    def describe(self) -> str:
        return self._evictor.describe()

    def _sync(self, x: Array) -> None:
        # The cuda Backend runs on the legacy default stream (kvevict/cuda/backend.h): let torch's
        # current stream finish producing the inputs first.
        if T.is_cuda(x):
            import torch

            torch.cuda.current_stream(x.device).synchronize()

    def plan(self, q: Optional[Array], k: Array, v: Array, *, wo: Optional[Array] = None,
             scale: Optional[float] = None) -> Selection:
        """Scores and selects: ``q [Hq, m, d]`` (None for query-free methods), ``k, v
        [Hkv, n, d]`` -> a Selection in k's framework and device."""
        C.qkv(q, k, v, self.settings.score.needs_queries)
        scale = C.optional_number("scale", scale, float32=True)
        C.no_unread_wo(wo, self.settings.score.method)
        self._sync(k)
        sel = self._evictor.plan(None if q is None else T.for_kernel(q), T.for_kernel(k),
                                 T.for_kernel(v), None if wo is None else T.for_kernel(wo),
                                 float(scale or 0.0))
        return Selection._from_cpp(sel, k)

    def evict(self, q: Optional[Array], k: Array, v: Array, *, wo: Optional[Array] = None,
              scale: Optional[float] = None, slack: int = 0) -> KVCache:
        """plan() then compaction into a new KVCache (the kept rows + ``slack`` per head)."""
        slack = C.integer("slack", slack, 0, C.MAX_TOKENS)
        sel = self.plan(q, k, v, wo=wo, scale=scale)
        full = KVCache.from_dense(k, v)
        out = KVCache.allocate_for(full, sel, slack)
        self._evictor.apply(full.k, full.v, full.pos, full.offsets, full.lens, sel._to_cpp(),
                            out.k, out.v, out.pos, out.offsets, out.lens)
        return out


class DecodeEvictor:
    """Decode-time eviction (SPEC section 5, OBCache / H2O style) on a host ``KVCache``.

    Every step: append the new k, v (``KVCache.append``), attend (``kvevict.attention`` with
    ``return_lse=True``), then ``step(cache, q, a, lse)`` adds the step's per-row score to
    ``cache.score_acc`` (tova replaces it) and cuts any head longer than ``budget + slack`` down
    to ``budget`` rows in place, never touching the ``sink`` first or ``recent`` last rows.

    Args:
        score: "h2o", "tova", "dropkv", "obcache_v", "obcache_k" or "obcache_vk".
        budget: rows per head after an eviction (> 0); slack: evict when a head exceeds
            budget + slack (0 = every step).
    """

    def __init__(self, score: str = "h2o", budget: int = 256, *, slack: int = 0,
                 recent: int = 32, sink: int = 0, scale: Optional[float] = None,
                 softcap: float = 0.0):
        self.options = ext.DecodeEvictOptions(
            C.text("score", score, optional=False), C.integer("budget", budget, 1, C.MAX_TOKENS),
            C.integer("slack", slack, 0, C.MAX_TOKENS),
            C.integer("recent", recent, 0, C.MAX_TOKENS), C.integer("sink", sink, 0, C.MAX_TOKENS),
            C.optional_number("scale", scale, float32=True) or 0.0,
            C.number("softcap", softcap, float32=True))
        self._evictor = ext.DecodeEvictor(self.options)

    @property
    def capacity_per_head(self) -> int:
        """Segment capacity a cache needs: budget + slack + 1."""
        return int(self.options.capacity_per_head)

    def describe(self) -> str:
        return self.options.describe()

    @staticmethod
    def _check(cache: KVCache) -> None:
        C.instance("cache", cache, KVCache, "a kvevict.KVCache")
        if T.is_cuda(cache.k):
            raise ValueError("DecodeEvictor works on host caches (numpy or torch CPU); this "
                             "cache is on a CUDA device")
        if cache.score_acc is None:
            raise ValueError("the cache has no score_acc; build it with "
                             "KVCache.from_dense(..., score_acc=True)")
        # Eviction moves rows in place and accumulation writes score_acc.
        for name in ("k", "v", "pos", "score_acc", "lens"):
            C.writable(f"cache.{name}", getattr(cache, name))

    def accumulate(self, cache: KVCache, q: Array, a: Array, lse: Array) -> None:
        """Adds the step's scores: q, a ``[Hq, d]`` float32 (the query after RoPE and its
        attention output over the cache), lse ``[Hq]`` float32."""
        self._check(cache)
        self._evictor.accumulate(cache.k, cache.v, cache.pos, cache.score_acc, cache.offsets,
                                 cache.lens, q, a, lse)

    def evict(self, cache: KVCache) -> int:
        """Cuts over-long heads down to the budget in place; returns the rows evicted."""
        self._check(cache)
        return int(self._evictor.evict(cache.k, cache.v, cache.pos, cache.score_acc,
                                       cache.offsets, cache.lens))

    def step(self, cache: KVCache, q: Array, a: Array, lse: Array) -> int:
        """accumulate() then evict()."""
        self.accumulate(cache, q, a, lse)
        return self.evict(cache)
