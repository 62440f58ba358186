"""A transformers ``Cache`` whose layers hold real compacted KV caches.

Each ``KVEvictLayer`` starts dense (``[B, Hkv, n, d]``, like ``DynamicLayer``). Right after its
prefill attention (SPEC section 5; ``kvevict.hf.attention`` calls ``evict_prefill``), it scores
with that layer's own post-RoPE window queries, selects, and compacts into one ``kvevict.KVCache``
of ``B * Hkv`` per-head variable-length segments (batch row b's head h is segment ``b * Hkv + h``,
so query head ``b * Hq + h`` reads segment ``(b * Hq + h) // G``, GQA unchanged). The dense tensors
are dropped: memory shrinks to the kept rows plus decode slack. Later tokens are appended to their
segments and attended with ``kvevict.attention`` by original positions; positions continue at the
original length, so ``get_seq_length()`` is the number of tokens seen, not the rows kept.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import kvevict
from kvevict import _options, distributed
from kvevict.ops import KVCache, Selection

# The attribute that carries a layer on the key tensor update() returns, so the registered
# attention function (which transformers calls without the cache) finds the layer.
LAYER_TAG = "_kvevict_layer"

# Decode steps on CUDA through kvevict.decode_attention (True) or the general kvevict.attention
# (False: the path before it, kept for A/B measurements; benchmarks/python/decode_steps.py).
FAST_DECODE = True


class HookTimer:
    """Where the prefill eviction's time goes: CUDA events (device time) and the host clock
    between the stages of every CUDA layer's eviction (score, select, compact, finish), for
    benchmarks (``benchmarks/python/hf_side_by_side.py`` prints it on CUDA). Enable with
    ``with kvevict.hf.cache.hook_timer() as t: ...``; ``t.summary()`` after a synchronization."""

    class _Mark:
        def __init__(self, timer: "HookTimer", layer: int):
            self.timer, self.layer = timer, layer
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()
            self.host = time.perf_counter()

        def stage(self, name: str) -> None:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            now = time.perf_counter()
            self.timer.records.append((self.layer, name, self.event, ev, now - self.host))
            self.event, self.host = ev, now

    def __init__(self):
        self.records: List[tuple] = []

    def start(self, layer: int) -> "HookTimer._Mark":
        return HookTimer._Mark(self, layer)

    def summary(self) -> Dict[str, Dict[str, float]]:
        """Per stage: device ms and host ms summed over every recorded layer, the number of
        layers, and the per-layer means (call after torch.cuda.synchronize())."""
        out: Dict[str, Dict[str, float]] = {}
        layers = set()
        for layer, name, a, b, host in self.records:
            layers.add(layer)
            row = out.setdefault(name, {"device_ms": 0.0, "host_ms": 0.0, "count": 0})
            row["device_ms"] += a.elapsed_time(b)
            row["host_ms"] += 1e3 * host
            row["count"] += 1
        for row in out.values():
            row["device_ms_per_call"] = row["device_ms"] / max(1, row["count"])
            row["host_ms_per_call"] = row["host_ms"] / max(1, row["count"])
        return out


_TIMER: Optional[HookTimer] = None


@contextlib.contextmanager
def hook_timer() -> Iterator[HookTimer]:
    """Records HookTimer marks for every CUDA prefill eviction while open (adds events and a
    clock read per stage; off, the hook pays one global lookup)."""
    global _TIMER
    outer, _TIMER = _TIMER, HookTimer()
    try:
        yield _TIMER
    finally:
        _TIMER = outer


@dataclass
class EvictConfig:
    """What the press does; see ``kvevict.hf.press`` for the meaning of each field."""

    method: str = "dropkv"
    budget: Optional[_options.BudgetLike] = 0.1
    compression_ratio: Optional[float] = None
    policy: Optional[str] = None
    window: Optional[int] = None
    pool: Optional[str] = None
    aggregate: Optional[str] = None
    sink: Optional[int] = None
    alpha: Optional[float] = None
    prefill: bool = True
    decode_budget: Optional[int] = None
    decode_score: str = "h2o"
    decode_slack: int = 0
    decode_recent: int = 32
    slack: int = 64
    min_prompt: int = 0
    settings: Any = field(default=None, repr=False)

    def __post_init__(self):
        budget = None if self.compression_ratio is not None else self.budget
        self.settings = _options.settings(
            self.method, budget, compression_ratio=self.compression_ratio, policy=self.policy,
            window=self.window, pool=self.pool, aggregate=self.aggregate, sink=self.sink,
            alpha=self.alpha)
        if self.decode_budget is not None:
            # Validates the decode options now; layers build their own with the model's scale.
            self.make_decoder(None, None)

    def make_decoder(self, scale: Optional[float], softcap: Optional[float]):
        """The DecodeEvictor of one layer, with the layer's logit scale and softcap (its p must
        be the attention's)."""
        return kvevict.DecodeEvictor(
            self.decode_score, int(self.decode_budget), slack=int(self.decode_slack),
            recent=int(self.decode_recent), sink=int(self.settings.select.sink), scale=scale,
            softcap=float(softcap or 0.0))


@dataclass
class LayerStats:
    tokens_seen: int = 0
    rows_before: int = 0  # K/V rows of the dense layer at eviction (B * Hkv * n)
    rows_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


class KVEvictLayer(CacheLayerMixin):
    """One decoder layer's cache: dense until its prefill eviction, then a compacted
    ``kvevict.KVCache`` (``self.compacted``)."""

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, config: EvictConfig, layer_idx: int = 0,
                 shard: Optional["distributed.HeadShard"] = None, **kwargs):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.shard = shard  # this rank's heads under tensor parallelism, else None
        self.compacted: Optional[KVCache] = None
        self.seen = 0  # tokens seen = next original position
        self.batch = 0
        self.num_kv_heads = 0
        self._selection: Optional[Selection] = None  # of the prefill eviction, B * Hkv heads
        self._selection_rows: Optional[List[Selection]] = None  # the same, per batch row
        self.stats = LayerStats()
        self._decoder = None  # DecodeEvictor, built at the first decode step
        self._nan: Optional[torch.Tensor] = None  # device NaN word of a deferred check
        self.cache: Optional["KVEvictCache"] = None  # the cache holding this layer

    @property
    def selection(self) -> Optional[Selection]:
        """The prefill eviction's Selection over the ``B * Hkv`` heads (batch-major)."""
        if self._selection is None and self._selection_rows is not None:
            self._selection = Selection.concat(self._selection_rows)
        return self._selection

    @selection.setter
    def selection(self, sel: Optional[Selection]) -> None:
        self._selection, self._selection_rows = sel, None

    # -- CacheLayerMixin ---------------------------------------------------------------------

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch, self.num_kv_heads = int(key_states.shape[0]), int(key_states.shape[1])
        self.keys = key_states[:, :, :0]
        self.values = value_states[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states: ``[B, Hkv, m, d]`` of the m new tokens (after RoPE)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        m = int(key_states.shape[2])
        if self.compacted is None:
            if self.keys.shape[-2] == 0:
                # The prompt's first chunk is held as given (the dense layer lives only until its
                # eviction): no copy of K and V per layer.
                self.keys, self.values = key_states, value_states
            else:
                self.keys = torch.cat([self.keys, key_states], dim=-2)
                self.values = torch.cat([self.values, value_states], dim=-2)
            self.seen += m
            keys = self.keys
        else:
            b, hkv, _, d = key_states.shape
            grow = max(1, self.config.slack)
            for t in range(m):  # one index_copy_ per tensor per token (decode: m = 1)
                self.compacted = self.compacted.append(
                    key_states[:, :, t].reshape(b * hkv, d),
                    value_states[:, :, t].reshape(b * hkv, d), self.seen, grow=grow)
                self.seen += 1
            keys = self.compacted.k
        setattr(keys, LAYER_TAG, self)
        return keys, (self.values if self.compacted is None else self.compacted.v)

    def get_mask_sizes(self, query) -> tuple[int, int]:
        # transformers >= 5.3 passes the query length, 5.0 - 5.2 the cache_position tensor.
        m = int(query.shape[0]) if isinstance(query, torch.Tensor) else int(query)
        return self.seen + m, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def get_max_cache_shape(self) -> int:  # the transformers 5.0 - 5.2 name of get_max_length
        return -1

    def reset(self) -> None:
        self.keys = self.values = None
        self.compacted = None
        self.selection = None
        self.seen = 0
        self.is_initialized = False

    def offload(self):  # pragma: no cover - offloading is not supported with compaction
        raise NotImplementedError("kvevict's cache does not offload layers")

    def prefetch(self):  # pragma: no cover
        pass

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError(
            "beam search reorders batch rows; kvevict's compacted layers do not support it yet")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("num_return_sequences / beams > 1 repeat batch rows; kvevict's "
                                  "compacted layers do not support it yet")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("selecting batch rows of a compacted cache is not supported")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a compacted cache cannot be cropped (assisted decoding)")

    # -- eviction ----------------------------------------------------------------------------

    def after_prefill(self, query: torch.Tensor, scaling: Optional[float],
                      module: Optional[torch.nn.Module] = None) -> None:
        """Called by the attention function after the dense attention of a forward pass: the
        first pass over the prompt evicts (prefill eviction), or, with decode-time eviction
        only, moves the full prompt into the compacted layout the decode evictor works on."""
        first_pass = self.compacted is None and self.seen == query.shape[2]
        if not first_pass or self.seen <= self.config.min_prompt:
            return
        if self.config.prefill and query.shape[2] > 1:
            self.evict_prefill(query, scaling, module)
        elif self.config.decode_budget is not None:
            b, hkv, n = self.keys.shape[:3]
            self.evict_mask(torch.ones((b, hkv, n), dtype=torch.bool, device=self.keys.device))

    def evict_prefill(self, query: torch.Tensor, scaling: Optional[float],
                      module: Optional[torch.nn.Module] = None) -> None:
        """Scores with ``query [B, Hq, n, d]`` (this layer's prompt queries after RoPE),
        selects per batch row, and compacts the dense layer into a KVCache. Under tensor
        parallelism (``self.shard``) the tensors are this rank's heads and the selection is the
        single-process one restricted to them (``kvevict.distributed.plan_layer``)."""
        s = self.config.settings
        wo = None
        if s.score.method == "criticalkv":
            if module is None or not hasattr(module, "o_proj"):
                raise ValueError("criticalkv needs the layer's o_proj weight")
            wo = module.o_proj.weight  # under TP: rowwise, the columns of this rank's heads
        if self.keys.is_cuda and (self.shard is None or self.shard.size == 1):
            self._evict_prefill_cuda(query, scaling, wo)
            return
        self.selection = distributed.plan_layer(query, self.keys, self.values, s, scale=scaling,
                                                wo=wo, shard=self.shard)
        self._compact_dense(self.selection)

    def _evict_prefill_cuda(self, query: torch.Tensor, scaling: Optional[float],
                            wo: Optional[torch.Tensor]) -> None:
        """evict_prefill on one GPU without a host synchronization (uniform budgets; adakv
        reads its per-head counts back once): per batch row one score, one select and one
        compaction straight into the packed layout with decode slack, from the dense K/V as they
        are (any strides). The NaN check of the scores folds into a device word that the press
        reads once per forward pass (``KVEvictCache.check_finite``), or right here when no press
        defers it."""
        s = self.config.settings
        b, hkv, n, _ = self.keys.shape
        sc = s.score
        kw = dict(window=sc.window, pool=sc.pool, aggregate=sc.aggregate, scale=scaling, wo=wo,
                  return_aux=True, check_finite=False)
        timer = _TIMER
        mark = timer.start(self.layer_idx) if timer is not None else None
        self._nan = torch.full((1,), -1, dtype=torch.int64, device=self.keys.device)
        parts = []
        for row in range(b):
            scores, aux = kvevict.score(query[row], self.keys[row], self.values[row], sc.method,
                                        **kw)
            if mark is not None:
                mark.stage("score")
            parts.append(kvevict.ops._select_cuda(scores, aux, s.select, (self._nan, 0)))
            if mark is not None:
                mark.stage("select")
        cache = kvevict.ops._compact_rows_cuda(
            [(self.keys[r], self.values[r], parts[r]) for r in range(b)],
            max(0, self.config.slack))
        if mark is not None:
            mark.stage("compact")
        self._selection_rows, self._selection = parts, (parts[0] if b == 1 else None)
        self._finish_compaction(cache, b * hkv * n, sum(p.total for p in parts))
        deferred = self.cache is not None and self.cache._defer_checks
        if deferred:
            self.cache._pending.append(self)
        else:
            self.check_finite()
        if mark is not None:
            mark.stage("finish")

    def check_finite(self) -> None:
        """Raises if the scores of this layer's prefill eviction held a NaN (reads the device
        word of the deferred check: one synchronization)."""
        word, self._nan = self._nan, None
        if word is not None:
            self._raise_if_nan(int(word.item()))

    def _raise_if_nan(self, first: int) -> None:
        """first: the word of the device NaN check (-1: no NaN)."""
        if first != -1:
            n = max(1, int(self.stats.tokens_seen))
            raise ValueError(
                f"layer {self.layer_idx}: a score of the prefill eviction was NaN (head "
                f"{first // n} row {first % n} of a batch row's [Hkv, n] scores, from NaN or Inf "
                "in q, k or v); expected numbers")

    def evict_mask(self, keep: torch.Tensor) -> None:
        """Compacts the dense layer to the rows where ``keep [B, Hkv, n]`` (bool) is True (for
        callers that select themselves, e.g. kvpress presses)."""
        b, hkv, n = keep.shape
        flat = keep.reshape(b * hkv, n)
        counts = flat.sum(-1).cpu().numpy().astype(np.int64)
        index = torch.nonzero(flat)[:, 1].to(torch.int32)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        sel = Selection(index, torch.from_numpy(offsets).to(keep.device), "", offsets)
        self.selection = sel
        self._compact_dense(sel)

    def _compact_dense(self, sel: Selection) -> None:
        b, hkv, n, d = self.keys.shape
        k = self.keys.reshape(b * hkv, n, d)
        v = self.values.reshape(b * hkv, n, d)
        cache = kvevict.compact(k, v, sel, slack=max(0, self.config.slack))
        if self.config.decode_budget is not None:
            cache = self._with_score_acc(cache)
        self._finish_compaction(cache, b * hkv * n, sel.total)

    def _finish_compaction(self, cache: KVCache, rows_before: int, rows_kept: int) -> None:
        d = int(self.keys.shape[-1])
        self.stats = LayerStats(self.seen, rows_before, rows_kept,
                                2 * rows_before * d * self.keys.element_size(), cache.nbytes())
        self.compacted = cache
        self.keys = self.values = None  # the dense layer is freed here

    def _with_score_acc(self, cache: KVCache) -> KVCache:
        if cache.k.is_cuda:
            raise ValueError("decode-time eviction (decode_budget) runs on host caches; this "
                             "model is on a CUDA device")
        cache.score_acc = torch.zeros(cache.k.shape[0], dtype=torch.float32)
        return cache

    def positions(self) -> List[np.ndarray]:
        """The original positions each local head (batch-major) holds, ascending."""
        if self.compacted is None:
            n = 0 if self.keys is None else int(self.keys.shape[2])
            return [np.arange(n, dtype=np.int32)] * (self.batch * self.num_kv_heads)
        c = self.compacted
        pos = c.pos.cpu().numpy() if isinstance(c.pos, torch.Tensor) else np.asarray(c.pos)
        return [np.sort(pos[int(c.offsets[h]):int(c.offsets[h] + c.lens[h])])
                for h in range(c.num_kv_heads)]

    def attend(self, query: torch.Tensor, scaling: Optional[float], sliding_window: Optional[int],
               softcap: Optional[float]) -> torch.Tensor:
        """Attention of ``query [B, Hq, m, d]`` (the m newest tokens) over the compacted layer;
        returns ``[B, m, Hq, d]`` in query's dtype (what transformers' attention functions
        return)."""
        b, hq, m, d = query.shape
        if (FAST_DECODE and m == 1 and self.config.decode_budget is None and not sliding_window
                and not softcap and kvevict.ops.decode_attention_supported(query, self.compacted)):
            # The decode fast path: one flash-decoding launch over all heads of the layer, the
            # segment table on the device (no host copy, no sync), bf16 out as transformers
            # wants it ([B, 1, Hq, d]).
            out = kvevict.ops.decode_attention(query.reshape(b, hq, d), self.compacted,
                                               scale=scaling, batch=b)
            return out.view(b, 1, hq, d)
        q = query.reshape(b * hq, m, d)
        q_pos = np.arange(self.seen - m, self.seen, dtype=np.int32)
        kw = dict(scale=scaling, sliding_window=int(sliding_window or 0),
                  softcap=float(softcap or 0.0))
        if self.config.decode_budget is None or m != 1:
            out = kvevict.attention(q, self.compacted, q_pos, **kw)
        else:
            out, lse = kvevict.attention(q, self.compacted, q_pos, return_lse=True, **kw)
            if self._decoder is None:
                self._decoder = self.config.make_decoder(scaling, softcap)
            self._decoder.step(self.compacted, q[:, 0].float().contiguous(),
                               out[:, 0].contiguous(), lse[:, 0].contiguous())
        return out.reshape(b, hq, m, d).transpose(1, 2).to(query.dtype).contiguous()


class KVEvictCache(Cache):
    """A transformers Cache of ``KVEvictLayer``s (one per decoder layer, created lazily).

    Args:
        config: the EvictConfig (``kvevict.hf.press`` builds it from its arguments).
    """

    def __init__(self, config: Optional[EvictConfig] = None,
                 shard: Optional["distributed.HeadShard"] = None, **kwargs):
        self.evict_config = config or EvictConfig(**kwargs)
        self.shard = shard
        self._defer_checks = False
        self._pending: List[KVEvictLayer] = []
        super().__init__(layers=[])

    def _layer(self, layer_idx: int) -> KVEvictLayer:
        while len(self.layers) <= layer_idx:
            layer = KVEvictLayer(self.evict_config, len(self.layers), self.shard)
            layer.cache = self
            self.layers.append(layer)
        return self.layers[layer_idx]

    @contextlib.contextmanager
    def deferred_checks(self) -> Iterator[None]:
        """While open, CUDA layers evict without reading their NaN check back; on a normal exit
        the checks of every layer evicted meanwhile are read at once (one synchronization) and
        the first NaN raises. ``kvevict.hf.press`` wraps each forward pass in it."""
        outer, self._defer_checks = self._defer_checks, True
        try:
            yield
        finally:
            self._defer_checks = outer
        if not outer:
            self.check_finite()

    def check_finite(self) -> None:
        """Reads the pending NaN checks of CUDA prefill evictions (one synchronization when any
        is pending) and raises on the first layer whose scores held a NaN."""
        pending, self._pending = self._pending, []
        live = [layer for layer in pending if layer._nan is not None]
        if not live:
            return
        words = torch.cat([layer._nan for layer in live]).cpu().tolist()
        for layer in live:
            layer._nan = None
        for layer, word in zip(live, words):
            layer._raise_if_nan(word)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        return self._layer(layer_idx).update(key_states, value_states, *args, **kwargs)

    def kv_bytes(self) -> int:
        """Bytes of K and V held by all layers now (compacted layers count their capacity)."""
        total = 0
        for layer in self.layers:
            if layer.compacted is not None:
                total += layer.compacted.nbytes()
            elif layer.keys is not None:
                total += 2 * layer.keys.numel() * layer.keys.element_size()
        return total

    def stats(self) -> List[LayerStats]:
        return [layer.stats for layer in self.layers]

    def kept_positions(self) -> List[List[np.ndarray]]:
        """Per layer, the original positions every head holds now (prompt rows kept plus the
        tokens appended since), one int32 array per head in batch-major order over ALL heads:
        under tensor parallelism it is collective (every rank of the group must call it) and
        returns the whole layer on every rank."""
        out = []
        for layer in self.layers:
            rows = layer.positions()
            out.append(distributed.gather_kept(rows, self.shard, layer.batch))
        return out
