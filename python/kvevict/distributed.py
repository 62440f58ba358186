"""Eviction over KV heads sharded across ranks (tensor parallelism, torch.distributed).

Under tensor parallelism (transformers' ``tp_plan``: q/k/v projections colwise, o_proj rowwise)
rank r of a TP group of size P holds the contiguous block of a layer's KV heads
``[r * Hkv / P, (r + 1) * Hkv / P)`` and their query heads (a GQA group never straddles ranks).
Every rank scores, selects and compacts its own heads with kvevict's kernels:

- per-head scores (every method except the last-query / tova aggregation) and the uniform
  policy read only the rank's heads: no communication;
- adakv (AdaKV, AdaDropKV) allocates the layer's ``Hkv * B`` rows over ALL heads: ONE
  all-gather of the per-head float32 scores (``B * Hkv * n * 4`` bytes per layer, twice that
  with criticalkv's stage-1 scores), then every rank runs the same selection over the gathered
  ``[Hkv, n]`` scores and keeps its heads' part: the kept sets are those of one process (same
  scores, same ties rule: the lower position, then the lower head);
- the last-query (tova) aggregation averages over ALL query heads of the layer: ONE all-gather
  of the per-KV-head partial rows (``B * Hkv * n * 4`` bytes per layer), reduced on every rank
  in the order and precision of the single-process kernel, so the score is bit-identical;
- ``random`` scores depend on the global head index: every rank scores the global shape (they
  read no k or v), no communication.

Decode-time eviction (``kvevict.DecodeEvictor``) cuts every head by its own accumulator: it
runs per rank on the local heads with no communication, and equals the single-process run.

Every rank of the group must evict the same layers in the same order (as TP forward passes do).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

import kvevict
from kvevict import _options
from kvevict.ops import Selection

_TRACE: Optional[List[Tuple[int, float]]] = None


@contextlib.contextmanager
def trace():
    """Records every all-gather of the eviction (``plan_layer``) while open, as
    ``(bytes gathered, seconds)`` in the yielded list (the device is synchronised around each
    gather, so the time is the collective's own)."""
    global _TRACE
    outer, _TRACE = _TRACE, []
    try:
        yield _TRACE
    finally:
        _TRACE = outer


def _sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize(x.device)


@dataclass(frozen=True)
class HeadShard:
    """Where this rank's KV heads sit in the layer: rank ``rank`` of ``size`` in ``group``
    (a torch.distributed ProcessGroup; None = the default group) holds heads
    ``[rank * local, (rank + 1) * local)`` of ``size * local``."""

    group: Any
    rank: int
    size: int

    @staticmethod
    def of_group(group: Any = None) -> "HeadShard":
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("torch.distributed is not initialized; call "
                             "torch.distributed.init_process_group first")
        return HeadShard(group, dist.get_rank(group), dist.get_world_size(group))

    @staticmethod
    def of_model(model) -> Optional["HeadShard"]:
        """The TP shard of a transformers model loaded with ``tp_plan`` (None when the model is
        not tensor-parallel or its TP size is 1)."""
        size = getattr(model, "_tp_size", None)
        mesh = getattr(model, "_device_mesh", None)
        if not size or int(size) <= 1 or mesh is None:
            return None
        plan = getattr(model, "tp_plan", None) or {}
        styles = {k.rsplit(".", 1)[-1]: v for k, v in plan.items()}
        for proj in ("q_proj", "k_proj", "v_proj"):
            if styles.get(proj, "colwise") != "colwise":
                raise ValueError(f"the model's tp_plan shards {proj} as {styles[proj]!r}; "
                                 "kvevict evicts the contiguous head blocks of a 'colwise' plan")
        group = mesh.get_group()
        shard = HeadShard(group, int(mesh.get_local_rank()), int(size))
        hkv = getattr(model.config, "num_key_value_heads", None) or \
            getattr(model.config, "num_attention_heads", None)
        if hkv is not None and int(hkv) % shard.size != 0:
            raise ValueError(f"the model has {hkv} KV heads over a TP group of {shard.size}; "
                             "expected a multiple (every rank holds whole heads)")
        return shard

    def head_range(self, local: int) -> Tuple[int, int]:
        """[start, stop) of this rank's heads among the layer's ``size * local``."""
        return self.rank * local, (self.rank + 1) * local

    def gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's ``x`` concatenated along ``dim`` in rank order (one all-gather)."""
        moved = x.movedim(dim, 0).contiguous()
        out = torch.empty((self.size * moved.shape[0],) + tuple(moved.shape[1:]),
                          dtype=moved.dtype, device=moved.device)
        if _TRACE is None:
            dist.all_gather_into_tensor(out, moved, group=self.group)
        else:
            _sync(moved)
            t0 = time.perf_counter()
            dist.all_gather_into_tensor(out, moved, group=self.group)
            _sync(out)
            _TRACE.append((out.numel() * out.element_size(), time.perf_counter() - t0))
        return out.movedim(0, dim)

    def gather_objects(self, obj: Any) -> List[Any]:
        """Every rank's picklable ``obj``, in rank order (for reports and tests, not the hot
        path)."""
        out: List[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out


def _score_kwargs(s) -> dict:
    return dict(window=s.window, pool=s.pool, aggregate=s.aggregate)


def _last_query_parts(q, k, v, s, scale, wo) -> torch.Tensor:
    """The per-KV-head rows that the single-process last-query (tova) aggregation reduces over
    heads: the CPU kernel sums the G query heads' terms of a group (in head order) and divides
    the sum over groups by Hq; the CUDA kernel averages each group, then multiplies the sum
    over groups by 1/Hkv. Scoring one query head (CPU) or one group (CUDA) at a time returns
    those rows exactly (a mean over one row is the row)."""
    hq, hkv = int(q.shape[0]), int(k.shape[0])
    g = hq // hkv
    kw = _score_kwargs(s)
    rows = []
    for h in range(hkv):
        if k.is_cuda:
            rows.append(kvevict.score(q[h * g:(h + 1) * g], k[h:h + 1], v[h:h + 1], s.method,
                                      scale=scale, **kw)[0])
            continue
        acc = torch.zeros(k.shape[1], dtype=torch.float32, device=k.device)
        for i in range(h * g, (h + 1) * g):
            acc = acc + kvevict.score(q[i:i + 1], k[h:h + 1], v[h:h + 1], s.method,
                                      scale=scale, **kw)[0]
        rows.append(acc)
    return torch.stack(rows)


def last_query_mean(parts: torch.Tensor, num_q_heads: int) -> torch.Tensor:
    """The layer's last-query score ``[n]`` from every KV head's part ``[Hkv, n]`` (what
    ``_last_query_parts`` returns, gathered over ranks), bit-identical to the kernel's."""
    total = torch.zeros(parts.shape[1], dtype=torch.float32, device=parts.device)
    for h in range(parts.shape[0]):
        total = total + parts[h]
    if parts.is_cuda:  # acc *= 1.0f / Hkv
        one = torch.ones((), dtype=torch.float32)
        return total * (one / float(parts.shape[0])).to(parts.device)
    return total / float(num_q_heads)  # total /= Hq


def _check_supported(s) -> None:
    if s.score.aggregate == "tova" and (s.score.pool != "none" or
                                        s.score.method in ("vatp", "criticalkv")):
        raise ValueError(
            f"method {s.score.method} with the last-query (tova) aggregation and pool "
            f"{s.score.pool}: under tensor parallelism the layer-wide mean is supported without "
            "pooling and without vatp / criticalkv weights; pass pool='none'")


def slice_heads(sel: Selection, start: int, stop: int) -> Selection:
    """The part of ``sel`` covering heads [start, stop) (offsets rebased to 0)."""
    off = sel.offsets_host()
    a, b = int(off[start]), int(off[stop])
    sub = (off[start:stop + 1] - a).astype(np.int64)
    offsets = torch.from_numpy(sub).to(sel.index.device) if isinstance(sel.index, torch.Tensor) \
        else sub
    return Selection(sel.index[a:b], offsets, sel.warning, sub)


def plan_layer(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               settings: _options.Settings, *, scale: Optional[float] = None,
               wo: Optional[torch.Tensor] = None,
               shard: Optional[HeadShard] = None) -> Selection:
    """Scores and selects one layer of a batch: ``query [B, Hq, m, d]``, ``keys, values
    [B, Hkv, n, d]`` (this rank's heads under TP); returns the Selection over the ``B * Hkv``
    local heads, batch row b's head h being head ``b * Hkv + h``. At most one collective (an
    all-gather over ``shard.group``) per call; none for shard None or of size 1."""
    s = settings
    b, hkv, n, _ = keys.shape
    # NaN scores are caught once, by select (its check reads one flag back); the scorer's own
    # check would add a second host synchronization per layer.
    sc = dict(scale=scale, wo=wo, return_aux=True, check_finite=False, **_score_kwargs(s.score))
    sel_kw = dict(policy=s.select.policy, window=s.select.window, sink=s.select.sink,
                  alpha=s.select.alpha if s.select.policy == "adakv" else None)

    def select(scores, aux):
        return kvevict.select(scores, s.select.budget, aux=aux, **sel_kw)

    if shard is None or shard.size == 1:
        parts = []
        for row in range(b):
            scores, aux = kvevict.score(query[row], keys[row], values[row], s.score.method, **sc)
            parts.append(select(scores, aux))
        return Selection.concat(parts)

    _check_supported(s)
    start, stop = shard.head_range(hkv)
    total_heads = shard.size * hkv
    if s.score.aggregate == "tova":
        local = torch.stack([_last_query_parts(query[r], keys[r], values[r], s.score, scale, wo)
                             for r in range(b)])
        parts = shard.gather(local, 1)  # [B, Hkv_total, n]: the one collective
        hq_total = shard.size * int(query.shape[1])
        rows = [last_query_mean(parts[r], hq_total)[None].expand(total_heads, n).contiguous()
                for r in range(b)]
        if s.select.policy == "adakv":
            return Selection.concat([slice_heads(select(x, None), start, stop) for x in rows])
        return Selection.concat([select(x[start:stop].contiguous(), None) for x in rows])
    if s.score.method == "random":  # scores depend on the global head index, not on k or v
        shape = (total_heads, n, 1)
        dummy = torch.zeros(shape, dtype=torch.float32, device=keys.device)
        full = kvevict.score(None, dummy, dummy, "random", **_score_kwargs(s.score))
        if s.select.policy == "adakv":  # every rank holds the layer's scores: no gather
            return Selection.concat([slice_heads(select(full, None), start, stop)] * b)
        local_rows = [(full[start:stop].contiguous(), None)] * b
    else:
        local_rows = [kvevict.score(query[r], keys[r], values[r], s.score.method, **sc)
                      for r in range(b)]
    if s.select.policy != "adakv":
        return Selection.concat([select(x, aux) for x, aux in local_rows])
    has_aux = local_rows[0][1] is not None
    stacked = torch.stack([torch.stack([x, aux]) if has_aux else x[None]
                           for x, aux in local_rows])  # [B, 1 or 2, Hkv, n]
    full = shard.gather(stacked, 2)  # [B, 1 or 2, Hkv_total, n]: the one collective
    return Selection.concat([
        slice_heads(select(full[r, 0].contiguous(), full[r, 1].contiguous() if has_aux else None),
                    start, stop) for r in range(b)])


def collective_bytes(settings: _options.Settings, batch: int, num_kv_heads: int, n: int) -> int:
    """Bytes one layer's eviction all-gathers in total (0: no collective): ``num_kv_heads`` is
    the layer's total (all ranks)."""
    s = settings
    if s.score.aggregate == "tova":
        return 4 * batch * num_kv_heads * n
    if s.select.policy == "adakv":
        return 4 * batch * num_kv_heads * n * (2 if s.score.method == "criticalkv" else 1)
    return 0


def gather_kept(rows: Sequence[np.ndarray], shard: Optional[HeadShard], batch: int) -> List[np.ndarray]:
    """The kept original positions of every head of a layer in global order (batch-major:
    ``b * Hkv_total + h``) from this rank's ``rows`` (one array per local head, batch-major).
    Collective over the shard's group (all ranks get the result); no communication without."""
    if shard is None or shard.size == 1:
        return [np.asarray(r) for r in rows]
    local = len(rows) // batch
    every = shard.gather_objects([np.asarray(r) for r in rows])
    out = []
    for row in range(batch):
        for rank in range(shard.size):
            out.extend(every[rank][row * local:(row + 1) * local])
    return out
