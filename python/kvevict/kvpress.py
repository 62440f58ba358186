"""Presses for NVIDIA's kvpress whose scores come from kvevict's fused kernels.

    from kvpress import AdaKVPress
    from kvevict.kvpress import DropKVPress, OBCachePress
    press = DropKVPress(compression_ratio=0.9)               # or OBCachePress(score="vk")
    press = DropKVPress(compression_ratio=0.9, window_size=8, pool="none")  # SPEC section 2's
    with AdaKVPress(press)(model):                           # per-head budgets (AdaDropKV)
        model(input_ids, past_key_values=cache)

Both are kvpress ``ScorerPress``es: kvpress's pipeline, ``AdaKVPress`` and its other wrappers use
them unchanged. ``score()`` rebuilds the window queries from the layer's hidden states (after
RoPE, as kvpress's SnapKVPress does) and calls ``kvevict.score`` on the cache's keys and values in
place: on CUDA tensors that is the flash-style window forward plus one streaming pass, never the
``[B, H, w, n]`` attention matrix, and nothing waits for the device (no NaN check: NaN inputs give
NaN scores, as kvpress's own scorers do). The observation window is protected (its scores are set above
every other, as SnapKVPress does), which is SPEC section 3's protected window. ``window_size`` and
``pool`` left None take kvevict's defaults for the method (``kvevict.method_defaults``): measured
for dropkv and obcache_vk (32 queries, max-pooling 11; docs/RESULTS.md), SPEC section 2's for
obcache_v / obcache_k (16, max:7).

kvpress is optional (``pip install kvevict[kvpress]``); tested with kvpress 0.5.5 on transformers
5.2 (kvpress 0.5.5 requires transformers < 5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

try:
    from kvpress import ScorerPress
    from kvpress.utils import get_prerope_query_states
except ImportError as e:  # pragma: no cover - exercised only without kvpress
    raise ImportError("kvevict.kvpress needs kvpress (pip install kvpress); kvevict.hf.press "
                      "works without it") from e

import kvevict
from kvevict import _checks as C
from kvevict import _options


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def window_queries(module, hidden_states: torch.Tensor, window: int, kwargs) -> torch.Tensor:
    """The last ``window`` queries of the layer after RoPE: ``[B, Hq, window, d]``."""
    q = get_prerope_query_states(module, hidden_states[:, -window:])
    cos, sin = kwargs["position_embeddings"]
    cos, sin = cos[:, -window:].unsqueeze(1), sin[:, -window:].unsqueeze(1)
    return q * cos + _rotate_half(q) * sin


@dataclass
class KVEvictScorerPress(ScorerPress):
    """A ScorerPress computing ``method``'s SPEC scores with kvevict (the base of the two below).

    Fields: compression_ratio (kvpress's evicted fraction), window_size (queries scored and
    protected; None: the method's default), pool ("none", "max:7", "avg:5"; None: the method's
    default), aggregate ("snapkv" window sums, "tova" last query), protect_window (give the window
    the top scores, as SnapKVPress does).
    """

    compression_ratio: float = 0.0
    window_size: Optional[int] = None
    pool: Optional[str] = None
    aggregate: Optional[str] = None
    protect_window: bool = True
    method: str = "dropkv"

    def __post_init__(self):
        self._check()
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        object.__setattr__(self, "_checked", True)

    def __setattr__(self, name, value):
        # A field assigned after construction (press.compression_ratio = 1.5, press.pool =
        # "max:4") is checked as the constructor checks it, and refused without a change:
        # otherwise the error came from inside a model's forward.
        if not getattr(self, "_checked", False) or name not in self.__dataclass_fields__:
            object.__setattr__(self, name, value)
            return
        old = getattr(self, name)
        object.__setattr__(self, name, value)
        try:
            self._check()
        except ValueError:
            object.__setattr__(self, name, old)
            raise

    def _check(self):
        # kvpress asserts 0 <= r < 1 (an AssertionError naming no value, and "'<=' not supported"
        # for a string): checked here first, a ValueError naming the field and the value.
        r = C.number("compression_ratio", self.compression_ratio)
        if not 0.0 <= r < 1.0:
            raise ValueError(f"compression_ratio is {self.compression_ratio!r}; expected "
                             "0 <= r < 1 (the fraction evicted)")
        C.optional_integer("window_size", self.window_size, 1, C.MAX_TOKENS)
        C.flag("protect_window", self.protect_window)
        # method, pool and aggregate as score() will pass them: the library names a bad one
        # (unknown, or a combination it refuses) now, not at the first forward.
        _options.score_options(C.text("method", self.method, optional=False),
                               window=self.window_size, pool=C.text("pool", self.pool),
                               aggregate=C.text("aggregate", self.aggregate))

    def score(self, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
        """keys, values ``[B, Hkv, n, d]`` -> scores ``[B, Hkv, n]`` (higher = keep)."""
        b, _, n, _ = keys.shape
        defaults = kvevict.method_defaults(self.method)[0]
        window = defaults.window if self.window_size is None else self.window_size
        pool = defaults.pool if self.pool is None else self.pool
        w = min(window, n)
        q = window_queries(module, hidden_states, w, kwargs).to(keys.dtype)
        scores = kvevict.score(q.contiguous(), keys, values, self.method, window=w,
                               pool=pool, aggregate=self.aggregate,
                               scale=getattr(module, "scaling", None), check_finite=False)
        if self.protect_window and w > 0:
            top = scores.amax() + 1
            scores[..., n - w:] = top
        return scores


@dataclass
class DropKVPress(KVEvictScorerPress):
    """DropKV: ``sum_t (p/(1-p))^2 ||a_t - v||^2`` over the window (SPEC section 2)."""

    method: str = "dropkv"


@dataclass  # keeps the __init__ below (it takes `score=`, the name of ScorerPress's method)
class OBCachePress(KVEvictScorerPress):
    """OBCache's Optimal-Brain-Damage scores: ``score="v"`` (value), ``"k"`` (key) or ``"vk"``
    (joint); window_size / pool None: the method's defaults (see the module's note)."""

    score_kind: str = "vk"

    def __init__(self, compression_ratio: float = 0.0, score: str = "vk",
                 window_size: Optional[int] = None, pool: Optional[str] = None,
                 aggregate: Optional[str] = None,
                 protect_window: bool = True):
        if score not in ("v", "k", "vk"):
            raise ValueError(f"score is {score!r}; expected 'v', 'k' or 'vk'")
        super().__init__(compression_ratio=compression_ratio, window_size=window_size, pool=pool,
                         aggregate=aggregate, protect_window=protect_window,
                         method=f"obcache_{score}")
        self.score_kind = score


__all__ = ["DropKVPress", "KVEvictScorerPress", "OBCachePress", "window_queries"]
