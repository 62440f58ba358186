"""The kernels on tensors: score, select, compact, attention (SPEC sections 2-4).

Inputs are numpy arrays (host) or torch tensors (CPU or CUDA), read in place through DLPack.
Outputs come back in the same framework on the same device. Backends:

- ``"cpu"``: the multithreaded float path (the default for host arrays);
- ``"reference"``: the double-precision ground truth (host arrays; slow, for checks);
- ``"cuda"``: the sm_90a kernels (the default for CUDA tensors), on torch's current stream.

Shapes, for one layer of one sequence: ``q [Hq, m, d]`` (the last m prompt queries, after RoPE),
``k, v [Hkv, n, d]``. ``Hq`` must be a multiple of ``Hkv`` (GQA).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from kvevict import _checks as C
from kvevict import _options
from kvevict import _tensors as T
from kvevict._ext import ext

Array = Any  # numpy.ndarray | torch.Tensor


def _backend_for(x: Array, backend: Optional[str]) -> str:
    if backend is None:
        return "cuda" if T.is_cuda(x) else "cpu"
    if backend not in ("cpu", "reference", "cuda"):
        raise ValueError(f"backend is {backend!r}; expected 'cpu', 'reference' or 'cuda'")
    if (backend == "cuda") != T.is_cuda(x):
        raise ValueError(
            f"backend {backend!r} cannot read {T.where(x)} arrays; expected "
            + ("CUDA tensors" if backend == "cuda" else "host arrays (numpy or torch CPU)"))
    if backend == "cuda" and not ext.cuda_built:
        raise ValueError("this kvevict build has no CUDA backend; reinstall with a CUDA toolkit "
                         "present (and without -C cmake.define.KVEVICT_CUDA=OFF)")
    return backend


# ----------------------------------------------------------------------------------------------
# score


def score(q: Optional[Array], k: Array, v: Array, method: str = "dropkv", *,
          window: Optional[int] = None, pool: Optional[str] = None,
          aggregate: Optional[str] = None, scale: Optional[float] = None,
          wo: Optional[Array] = None, h2o_normalize: bool = False, seed: int = 0,
          return_aux: bool = False, backend: Optional[str] = None, check_finite: bool = True):
    """Token scores of one layer (SPEC section 2), higher = keep.

    Args:
        q: ``[Hq, m, d]`` the last m prompt queries after RoPE (``m >= window``; all n for h2o;
            None for query-free methods: knorm, keydiff, random, streamingllm), or with a leading
            batch dim ``[B, Hq, m, d]``.
        k, v: ``[Hkv, n, d]`` keys (after RoPE) and values, or ``[B, Hkv, n, d]``.
        method: any name of ``kvevict.method_names()`` (dropkv, obcache_vk, snapkv, h2o, ...).
        window, pool, aggregate: override the method's defaults (``pool="max:7"``,
            ``aggregate="snapkv" | "h2o" | "tova"``).
        scale: logit scale; None = 1/sqrt(d).
        wo: ``[D, Hq * d]`` output projection (o_proj.weight), criticalkv only.
        return_aux: also return criticalkv's stage-1 (snapkv) score.
        backend: "cpu", "reference" or "cuda"; None picks by where k lives.
        check_finite: CUDA only: raise when a score is NaN (from NaN or Inf in q, k or v) or
            infinite (from Inf in them, or a score that overflows float32). The check reads the
            scores' flags back, a host synchronization; pass False in a pipeline that must not
            wait (such scores then come back as they are). The host paths always
            reject non-finite inputs while they stream them, and scores that overflow float32
            from finite inputs (an error naming the head, row and method).

    Returns:
        scores ``[Hkv, n]`` float32 (``[B, Hkv, n]`` for batched inputs), in k's framework and
        device; ``(scores, aux)`` with ``return_aux``.
    """
    opts = _options.score_options(method, window=window, pool=pool, aggregate=aggregate,
                                  h2o_normalize=h2o_normalize, seed=seed, scale=scale)
    return_aux = C.flag("return_aux", return_aux)
    check_finite = C.flag("check_finite", check_finite)
    C.no_unread_wo(wo, opts.method)
    C.array("k", k)
    if k.ndim == 4:
        C.shape("v", v, T.shape_of(k), "[B, Hkv, n, d] (the shape of k)")
        if q is not None:
            C.shape("q", q, (k.shape[0], None, None, k.shape[3]), "[B, Hq, m, d]")
        # One output for the batch; every row is scored into its own slice (no concatenation).
        bsz, hkv, n = int(k.shape[0]), int(k.shape[1]), int(k.shape[2])
        scores = T.empty(k, (bsz, hkv, n), "float32")
        aux = T.empty(k, (bsz, hkv, n), "float32") if opts.method == "criticalkv" else None
        for b in range(bsz):
            _score_one(None if q is None else q[b], k[b], v[b], wo, scale, opts, backend,
                       scores[b], None if aux is None else aux[b], check_finite)
    else:
        scores, aux = _score_one(q, k, v, wo, scale, opts, backend, None, None, check_finite)
    return (scores, aux) if return_aux else scores


def _score_one(q, k, v, wo, scale, opts, backend, scores=None, aux=None, check_finite=True):
    C.qkv(q, k, v, opts.needs_queries)
    be = _backend_for(k, backend)
    q, k, v = (None if q is None else T.for_kernel(q)), T.for_kernel(k), T.for_kernel(v)
    wo = None if wo is None else T.for_kernel(wo)
    if scores is None:
        hkv, n, _ = T.shape_of(k)
        scores = T.empty(k, (hkv, n), "float32")
        aux = T.empty(k, (hkv, n), "float32") if opts.method == "criticalkv" else None
    s = float(scale or 0.0)
    if be == "cuda":
        for name, x in (("q", q), ("k", k), ("v", v), ("wo", wo)):
            if x is not None:
                C.inner_contiguous(name, x)
        if not _cuda_score_supported(opts.method):
            raise ValueError(f"method {opts.method!r} has no CUDA scoring kernel; score host "
                             "copies with backend='cpu'")
        _cuda_call(ext.cuda_score, k, q, k, v, wo, s, opts, scores, aux)
        # The host paths reject NaN/Inf inputs while they stream them; the device kernels do
        # not, and NaN would then rank first in the selection: check the (small) output.
        if check_finite:
            for name, out in (("score", scores), ("aux score", aux)):
                # One read-back when every score is finite; the cause only where one is not.
                if out is not None and not T.all_finite(out):
                    C.no_nan(f"{name}s (from NaN or Inf in q, k or v)", out)
                    C.scores_fit_float32(opts.method, name, out)
    else:
        ws = T.workspace(k, ext.score_workspace_bytes(q, k, v, wo, s, opts)) if be == "cpu" else None
        # Raises on non-finite inputs and on scores that overflow float32 from finite ones
        # (kvevict::check_scores_finite), whatever check_finite says.
        ext.score(be, q, k, v, wo, s, opts, scores, aux, ws)
    return scores, aux


@functools.lru_cache(maxsize=64)
def _cuda_score_supported(method: str) -> bool:
    return bool(ext.cuda_score_supported(method))


def _cuda_call(fn, like: Array, *args) -> None:
    """Calls a CUDA binding ``fn(*args, workspace, stream)`` on torch's current stream of
    ``like``'s device with the scratch cached for that stream (``_tensors.scratch``). The binding
    returns 0 once its kernels are queued, or, launching nothing, the bytes it needs when the
    scratch is smaller: then the scratch grows and the call is repeated (once per new size)."""
    stream = T.stream_handle(like)
    need = fn(*args, T._SCRATCH.get(T.scratch_key(like, stream)), stream)
    if need:
        need = fn(*args, T.scratch(like, stream, need), stream)
        if need:  # pragma: no cover - the binding asked for more than it was just given
            raise RuntimeError(f"{fn.__name__}: workspace of {need} bytes still too small")


# ----------------------------------------------------------------------------------------------
# select


@dataclass
class Selection:
    """The kept rows of every KV head (SPEC section 3): head h keeps
    ``index[offsets[h]:offsets[h+1]]``, row indices within its own segment, ascending.

    ``index`` int32 ``[total]`` and ``offsets`` int64 ``[Hkv + 1]`` live where the scores did
    (numpy, torch CPU or torch CUDA). ``warning`` is non-empty when the budget fell below the
    protected tokens (then only those are kept).
    """

    index: Array
    offsets: Array
    warning: str = ""
    _offsets_host: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def num_kv_heads(self) -> int:
        # Read before _to_cpp's checks (compact compares it with the cache's heads): a 2-D
        # offsets array must be named as such, not counted by its first dim.
        C.ndim("selection.offsets", self.offsets, 1, "[Hkv + 1]")
        return int(self.offsets.shape[0]) - 1

    @property
    def total(self) -> int:
        return int(self.index.shape[0])

    def offsets_host(self) -> np.ndarray:
        """offsets as a host int64 numpy array (a device-to-host copy once, for CUDA)."""
        if self._offsets_host is None:
            self._offsets_host = np.ascontiguousarray(T.to_host(self.offsets), dtype=np.int64)
        return self._offsets_host

    def counts(self) -> np.ndarray:
        """Kept rows per head, int64 [Hkv] (host)."""
        return np.diff(self.offsets_host())

    def head(self, h: int) -> Array:
        off = self.offsets_host()
        return self.index[int(off[h]):int(off[h + 1])]

    def mask(self, n: int) -> Array:
        """bool [Hkv, n]: True where a row is kept (for masking a full cache in tests)."""
        hkv = self.num_kv_heads
        off = self.offsets_host()
        heads = np.repeat(np.arange(hkv), np.diff(off))
        if T.is_torch(self.index):
            import torch

            m = torch.zeros((hkv, n), dtype=torch.bool, device=self.index.device)
            m[torch.from_numpy(heads).to(self.index.device), self.index.long()] = True
            return m
        m = np.zeros((hkv, n), dtype=bool)
        m[heads, self.index] = True
        return m

    def _to_cpp(self):
        C.array("selection.index", self.index)
        C.array("selection.offsets", self.offsets)
        for name, x in (("selection.index", self.index), ("selection.offsets", self.offsets)):
            if x.ndim != 1 or T.dtype_name(x) not in C.INT_DTYPES:
                raise ValueError(f"{name} has shape {T.shape_of(x)} and dtype {T.dtype_name(x)}; "
                                 "expected a 1-D integer array")
        off = self.offsets_host()
        if len(off) < 2 or off[0] != 0 or (np.diff(off) < 0).any() or off[-1] != self.total:
            raise ValueError(f"selection.offsets is {off.tolist()[:8]}; expected [Hkv + 1] "
                             f"non-decreasing offsets from 0 to the {self.total} kept rows")
        index = T.to_host(self.index)
        C.int32_rows("selection.index", index, "row indices")
        return ext.Selection.from_arrays(np.ascontiguousarray(index, dtype=np.int32), off)

    @staticmethod
    def _from_cpp(sel, like: Array) -> "Selection":
        host = np.empty((sel.total,), dtype=np.int32)
        off = np.empty((sel.num_kv_heads + 1,), dtype=np.int64)
        sel.copy_into(host, off)
        return Selection(T.from_host(like, host), T.from_host(like, off), sel.warning, off)

    @staticmethod
    def concat(parts: Sequence["Selection"]) -> "Selection":
        """One selection over the heads of all parts in order (e.g. the B rows of a batch)."""
        if len(parts) == 1:
            return parts[0]
        offs, base = [], 0
        for p in parts:
            offs.append(p.offsets_host()[:-1] + base)
            base += p.total
        off = np.concatenate(offs + [np.array([base], dtype=np.int64)])
        like = parts[0].index
        warning = "; ".join(p.warning for p in parts if p.warning)
        return Selection(T.cat([p.index for p in parts]), T.from_host(like, off), warning, off)


def select(scores: Array, budget: Optional[_options.BudgetLike] = None, *,
           policy: str = "uniform", window: int = 0, sink: int = 0, alpha: Optional[float] = None,
           aux: Optional[Array] = None, compression_ratio: Optional[float] = None,
           backend: Optional[str] = None, check_finite: bool = True) -> Selection:
    """Which rows every KV head keeps (SPEC section 3).

    Args:
        scores: ``[Hkv, n]`` float32, higher = keep (what ``score`` returns).
        budget: kept fraction (<= 1), token count (> 1) or a string ("10%", "2048"); or pass
            ``compression_ratio`` (kvpress's spelling, the evicted fraction) instead.
        policy: "uniform" (every head keeps the same count) or "adakv" (per-head budgets).
        window, sink: the last ``window`` and first ``sink`` tokens are always kept (they count
            inside the budget).
        alpha: adakv's safeguard, ``B_h = f_h (1 - alpha) + alpha B`` (None: 0.2); an error with
            the uniform policy, which does not read it.
        aux: criticalkv's stage-1 scores ``[Hkv, n]`` (two-stage selection), else None.
        check_finite: CUDA only: raise on NaN scores (one host synchronization); see ``score``.

    Returns:
        a Selection whose ``index`` / ``offsets`` live where ``scores`` does. Ties break toward
        the lower position; deterministic.
    """
    C.ndim("scores", scores, 2, "[Hkv, n]")
    if T.dtype_name(scores) != "float32":
        raise ValueError(f"scores has dtype {T.dtype_name(scores)}; expected float32")
    if scores.shape[0] < 1 or scores.shape[1] < 1:
        raise ValueError(f"scores has shape {T.shape_of(scores)}; expected [Hkv, n] with at least "
                         "one head and one token")
    check_finite = C.flag("check_finite", check_finite)
    if aux is not None:
        C.shape("aux", aux, T.shape_of(scores), "[Hkv, n] (the shape of scores)")
        C.same_place(("scores", "aux"), (scores, aux))
    opts = _options.select_options(policy, budget, compression_ratio, alpha, sink, window)
    be = _backend_for(scores, backend)
    scores = T.contiguous(T.for_kernel(scores))
    aux = None if aux is None else T.contiguous(T.for_kernel(aux))
    if be != "cuda":
        return Selection._from_cpp(ext.select(be, scores, aux, opts), scores)
    if check_finite:
        C.no_nan("scores", scores)
        if aux is not None:
            C.no_nan("aux", aux)
    return _select_cuda(scores, aux, opts)


def _select_cuda(scores: Array, aux: Optional[Array], opts,
                 nan_status: Optional[Tuple[Array, int]] = None) -> Selection:
    """select() on CUDA tensors (checked by the caller) with parsed SelectOptions; nothing waits.
    ``nan_status (status, slot)``: fold the first NaN element of scores (and aux) into
    ``status[slot]`` on the device instead of checking on the host (``_nan_scan``). Uniform
    budgets give the offsets on the host too (every head keeps n_keep): no download later."""
    hkv, n = T.shape_of(scores)
    n_keep = opts.keep_count(n)  # raises naming a count above n
    protected = ext.cuda_protected_count(n, opts.sink, opts.window)
    warning = ""
    if n_keep < protected:
        warning = (f"budget of {n_keep} tokens is below the {protected} protected tokens (sink "
                   f"{opts.sink}, window {opts.window}); keeping just the protected tokens")
        n_keep = protected
    if nan_status is not None:
        _nan_scan(scores, *nan_status)
        if aux is not None:
            _nan_scan(aux, *nan_status)
    kept = T.empty(scores, (hkv * n_keep,), "int32")
    offsets = T.empty(scores, (hkv + 1,), "int64")
    _cuda_call(ext.cuda_select, scores, scores, aux, n_keep, opts, kept, offsets)
    host = None
    if opts.policy == "uniform":
        host = np.arange(hkv + 1, dtype=np.int64) * n_keep
    return Selection(kept, offsets, warning, host)


def _nan_scan(x: Array, status: Array, slot: int) -> None:
    """status[slot] = min(status[slot], first NaN element of x) as unsigned 64-bit, on the device
    (one kernel, no read back; status starts at -1 = none)."""
    ext.cuda_find_nan(x, status, int(slot), T.stream_handle(x))


# ----------------------------------------------------------------------------------------------
# the compacted cache


@dataclass
class KVCache:
    """One layer's cache in the per-head segment layout (SPEC section 4).

    Head h owns rows ``offsets[h] .. offsets[h] + lens[h]`` of ``k``, ``v`` and ``pos``; rows up
    to ``offsets[h+1]`` are spare capacity for decode appends. Equal segments are the plain
    ``[Hkv, n, d]`` layout; prefix-sum offsets are AdaKV's flattened varlen layout.

    Fields:
        k, v: ``[rows, d]`` keys (after RoPE) and values, float32 / float16 / bfloat16.
        pos: ``[rows]`` int32 original position of every row (masking uses it).
        offsets: ``[Hkv + 1]`` int64 host numpy, segment starts; ``offsets[-1] = rows``.
        lens: ``[Hkv]`` int64 host numpy, rows in use per head.
        score_acc: ``[rows]`` float32 decode-time running score, or None.
    """

    k: Array
    v: Array
    pos: Array
    offsets: np.ndarray
    lens: np.ndarray
    score_acc: Optional[Array] = None
    _index: Optional["_DeviceIndex"] = field(default=None, repr=False, compare=False)

    @property
    def num_kv_heads(self) -> int:
        # Read before the library sees the cache (attention divides Hq by it): a cache built
        # by hand with offsets [0] has no head.
        if self.offsets.shape[0] < 2:
            raise ValueError(f"cache offsets has shape {T.shape_of(self.offsets)}; expected "
                             "[Hkv + 1] with at least 1 KV head")
        return int(self.offsets.shape[0]) - 1

    @property
    def head_dim(self) -> int:
        return int(self.k.shape[1])

    @property
    def capacity(self) -> int:
        return int(self.offsets[-1])

    def total_len(self) -> int:
        return int(self.lens.sum())

    def nbytes(self) -> int:
        """Bytes of K and V held (capacity, not just the rows in use)."""
        return T.nbytes(self.k) + T.nbytes(self.v)

    def head(self, h: int) -> Tuple[Array, Array, Array]:
        """(k [len_h, d], v [len_h, d], pos [len_h]) of head h."""
        a, b = int(self.offsets[h]), int(self.offsets[h] + self.lens[h])
        return self.k[a:b], self.v[a:b], self.pos[a:b]

    @staticmethod
    def from_dense(k: Array, v: Array, pos: Optional[Array] = None, slack: int = 0,
                   score_acc: bool = False) -> "KVCache":
        """A full cache from ``[Hkv, n, d]`` keys and values (positions 0..n-1 unless given
        ``pos [Hkv, n]`` or ``[n]``), with ``slack`` spare rows per head."""
        C.ndim("k", k, 3, "[Hkv, n, d]")
        C.kv_heads("k", k)
        hkv, n, d = T.shape_of(k)
        C.shape("v", v, (hkv, n, d), "[Hkv, n, d] (the shape of k)")
        C.same_place(("k", "v"), (k, v))
        slack = C.integer("slack", slack, 0, C.MAX_TOKENS)
        score_acc = C.flag("score_acc", score_acc)
        p = _positions(k, hkv, n, pos)
        full = KVCache(T.reshape(T.contiguous(k), (hkv * n, d)),
                       T.reshape(T.contiguous(v), (hkv * n, d)), p,
                       np.arange(hkv + 1, dtype=np.int64) * n, np.full(hkv, n, dtype=np.int64),
                       T.zeros(k, (hkv * n,), "float32") if score_acc else None)
        return full.with_slack(slack) if slack else full

    @staticmethod
    def allocate_for(like: "KVCache", selection: "Selection", slack: int = 0) -> "KVCache":
        """An empty cache (lens 0) shaped for `selection` plus `slack` rows per head, in the
        framework, device and dtype of `like` (score_acc when `like` has one)."""
        slack = C.integer("slack", slack, 0, C.MAX_TOKENS)
        offsets = np.concatenate([[0], np.cumsum(selection.counts() + slack)]).astype(np.int64)
        rows, d = int(offsets[-1]), like.head_dim
        return KVCache(T.empty(like.k, (rows, d), T.dtype_name(like.k)),
                       T.empty(like.v, (rows, d), T.dtype_name(like.v)),
                       T.zeros(like.pos, (rows,), "int32"), offsets,
                       np.zeros(like.num_kv_heads, dtype=np.int64),
                       None if like.score_acc is None else T.zeros(like.k, (rows,), "float32"))

    def _arrays(self):
        return self.k, self.v, self.pos, self.score_acc, self.offsets, self.lens

    def with_slack(self, slack: int) -> "KVCache":
        """A copy whose segments have ``slack`` spare rows each past their rows in use."""
        slack = C.integer("slack", slack, 0, C.MAX_TOKENS)
        lens = self.lens.copy()
        offsets = np.concatenate([[0], np.cumsum(lens + slack)]).astype(np.int64)
        src = _segment_rows(self.offsets[:-1], lens)
        dst = _segment_rows(offsets[:-1], lens)
        rows = int(offsets[-1])
        out = KVCache(T.empty(self.k, (rows, self.head_dim), T.dtype_name(self.k)),
                      T.empty(self.v, (rows, self.head_dim), T.dtype_name(self.v)),
                      T.zeros(self.pos, (rows,), "int32"), offsets, lens,
                      None if self.score_acc is None else T.zeros(self.score_acc, (rows,),
                                                                  "float32"))
        si, di = T.from_host(self.k, src), T.from_host(self.k, dst)
        out.k[di] = self.k[si]
        out.v[di] = self.v[si]
        out.pos[di] = self.pos[si]
        if self.score_acc is not None:
            out.score_acc[di] = self.score_acc[si]
        return out

    def free_rows(self) -> np.ndarray:
        """Spare capacity per head, int64 [Hkv]."""
        return np.diff(self.offsets) - self.lens

    def device_index(self) -> "_DeviceIndex":
        """The segment table (offsets, lens) mirrored in k's framework and device, for
        appends and decode attention that run without a host round trip. Built once and kept in
        step by ``append``; rebuilt (one small host-to-device copy) whenever ``offsets`` or
        ``lens`` were changed by anything else."""
        ix = self._index
        if ix is None or ix.offsets is not self.offsets or not np.array_equal(ix.lens, self.lens):
            ix = self._index = _DeviceIndex.build(self)
        return ix

    def append(self, k_row: Array, v_row: Array, pos: int, grow: int = 0) -> "KVCache":
        """Decode append of one row per head: ``k_row, v_row [Hkv, d]`` at original position
        ``pos``. A full segment raises, unless ``grow > 0``: then the cache is re-spaced with
        ``grow`` spare rows per head first (one copy every ``grow`` steps) and the new cache is
        returned. Returns the cache that holds the rows (self when nothing moved).

        Torch caches write the rows with one ``index_copy_`` per tensor; on CUDA at rows computed
        on the device (``device_index``): no host-to-device copy, no synchronization."""
        hkv, d = self.num_kv_heads, self.head_dim
        C.shape("k_row", k_row, (hkv, d), "[Hkv, d]")
        C.shape("v_row", v_row, (hkv, d), "[Hkv, d]")
        C.float_dtype("k_row", k_row)
        C.float_dtype("v_row", v_row)
        pos = C.integer("pos", pos, 0, C.MAX_POSITION)
        grow = C.integer("grow", grow, 0, C.MAX_TOKENS)
        cache = self
        ix = self._index
        full = self.lens >= (ix.caps if ix is not None and ix.offsets is self.offsets else
                             np.diff(self.offsets))
        if full.any():
            if grow <= 0:
                h = int(np.argmax(full))
                raise ValueError(f"cannot append to KV head {h}: its segment is full "
                                 f"({int(self.lens[h])} rows); expected spare capacity (slack)")
            cache = self.with_slack(grow)
        if T.is_torch(cache.k):
            if not T.is_torch(k_row) or not T.is_torch(v_row):
                raise ValueError(f"k_row, v_row are {T.where(k_row)}, {T.where(v_row)}; expected "
                                 f"torch tensors on the cache's device ({T.where(cache.k)})")
            if T.is_cuda(cache.k):
                ix = cache.device_index()
                rows = ix.starts + ix.lens64
            else:  # host rows, read in place by torch (no copy)
                ix, rows = None, T._torch().from_numpy(cache.offsets[:-1] + cache.lens)
            cache.k.index_copy_(0, rows, k_row.to(cache.k.dtype))
            cache.v.index_copy_(0, rows, v_row.to(cache.v.dtype))
            cache.pos.index_fill_(0, rows, int(pos))
            if cache.score_acc is not None:
                cache.score_acc.index_fill_(0, rows.to(cache.score_acc.device), 0)
            if ix is not None:
                ix.advance()
            cache.lens += 1
            return cache
        rows = cache.offsets[:-1] + cache.lens
        cache.k[rows] = k_row
        cache.v[rows] = v_row
        cache.pos[rows] = int(pos)
        if cache.score_acc is not None:
            cache.score_acc[rows] = 0
        cache.lens += 1
        return cache


@dataclass
class _DeviceIndex:
    """A KVCache's segment table where its k lives (torch): ``starts`` int64 ``[S]`` (the
    segment starts), ``off`` int64 ``[S + 1]``, ``lens64`` / ``lens32`` ``[S]`` the rows in use;
    ``offsets`` is the host array it was built from (by identity), ``lens`` a host copy kept equal
    to the cache's, ``caps`` the host capacities."""

    offsets: np.ndarray
    lens: np.ndarray
    caps: np.ndarray
    off: Array
    starts: Array
    lens64: Array
    lens32: Array
    scratch: Any = None  # decode attention's workspace, reused while large enough

    @staticmethod
    def build(cache: KVCache) -> "_DeviceIndex":
        off = T.from_host(cache.k, np.ascontiguousarray(cache.offsets, dtype=np.int64))
        lens64 = T.from_host(cache.k, np.ascontiguousarray(cache.lens, dtype=np.int64))
        return _DeviceIndex(cache.offsets, cache.lens.copy(), np.diff(cache.offsets), off,
                            off[:-1], lens64, lens64.to(T._torch().int32))

    def advance(self) -> None:
        self.lens64 += 1
        self.lens32 += 1
        self.lens += 1


def _segment_rows(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Row indices of every segment's used rows, in order: [sum(lens)] int64."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    head_of = np.repeat(np.arange(len(lens)), lens)
    first = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return (starts[head_of] + np.arange(total) - first[head_of]).astype(np.int64)


def _positions(like: Array, hkv: int, n: int, pos: Optional[Array]) -> Array:
    """int32 [Hkv * n] positions: 0..n-1 per head unless given [n] or [Hkv, n]."""
    if pos is None:
        return T.from_host(like, np.tile(np.arange(n, dtype=np.int32), hkv))
    C.array("pos", pos)
    C.positions("pos", pos)
    if T.shape_of(pos) == (n,):
        pos = pos[None].expand(hkv, n) if T.is_torch(pos) else np.broadcast_to(pos, (hkv, n))
    C.shape("pos", pos, (hkv, n), "[Hkv, n] or [n]")
    return T.reshape(T.contiguous(T.astype(pos, "int32")), (hkv * n,))


# ----------------------------------------------------------------------------------------------
# compact


def compact(k: Union[Array, KVCache], v: Optional[Array], selection: Selection, *,
            pos: Optional[Array] = None, slack: int = 0) -> KVCache:
    """Real compaction (SPEC section 4): copies the kept rows into a new, smaller cache.

    Args:
        k, v: ``[Hkv, n, d]`` the full layer (or pass a KVCache as ``k`` and None as ``v``).
        selection: what ``select`` returned for these heads.
        pos: original positions ``[Hkv, n]`` or ``[n]``; None = 0..n-1.
        slack: spare rows per head for decode appends.

    Returns:
        a KVCache in the flattened varlen layout (per-head lengths, offsets, positions) on the
        device of k; its memory is the kept rows (+ slack) only.
    """
    C.instance("selection", selection, Selection, "a kvevict.Selection (what select returns)")
    slack = C.integer("slack", slack, 0, C.MAX_TOKENS)
    if isinstance(k, KVCache):
        full = k
    else:
        C.ndim("k", k, 3, "[Hkv, n, d]")
        if T.is_cuda(k):
            return _compact_cuda(k, v, selection, pos, slack)
        full = KVCache.from_dense(k, v, pos)
    if T.is_cuda(full.k):
        raise ValueError("compacting a KVCache on a CUDA device is not bound yet; pass the "
                         "dense [Hkv, n, d] tensors")
    if selection.num_kv_heads != full.num_kv_heads:
        raise ValueError(f"selection covers {selection.num_kv_heads} KV heads; expected "
                         f"{full.num_kv_heads} (the cache's)")
    out = KVCache.allocate_for(full, selection, slack)
    ext.compact(*full._arrays(), selection._to_cpp(), *out._arrays())
    return out


def _compact_cuda(k, v, selection: Selection, pos, slack: int) -> KVCache:
    hkv, n, d = T.shape_of(k)
    C.shape("v", v, (hkv, n, d), "[Hkv, n, d] (the shape of k)")
    C.same_place(("k", "v", "selection.index"), (k, v, selection.index))
    C.inner_contiguous("k", k)
    C.inner_contiguous("v", v)
    if selection.num_kv_heads != hkv:
        raise ValueError(f"selection covers {selection.num_kv_heads} KV heads; expected {hkv}")
    if slack < 0:
        raise ValueError(f"slack is {slack}; expected >= 0")
    p = None if pos is None else T.reshape(_positions(k, hkv, n, pos), (hkv, n))
    return _compact_rows_cuda([(k, v, selection)], slack, [p])


def _compact_rows_cuda(rows: Sequence[Tuple[Array, Array, Selection]], slack: int,
                       pos: Optional[Sequence[Optional[Array]]] = None) -> KVCache:
    """Compacts several layers' worth of heads (e.g. the B rows of a batch: ``(k [Hkv, n, d],
    v, selection)`` each, any head / row strides) into ONE packed KVCache whose segments follow
    in order, with ``slack`` spare rows after every head: one row-gather launch per part, no
    copy of the dense K/V, no host round trip when the selections carry host offsets (uniform
    budgets; otherwise their offsets are read back once each)."""
    counts = np.concatenate([np.diff(sel.offsets_host()) for _, _, sel in rows])
    out = _compact_out(rows[0][0], counts, slack)
    stream = T.stream_handle(rows[0][0])
    head = 0
    for i, (k, v, sel) in enumerate(rows):
        k, v = T.for_kernel(k), T.for_kernel(v)
        if tuple(v.stride()) != tuple(k.stride()):  # the row gather reads k and v alike
            k, v = k.contiguous(), v.contiguous()
        lo, hi = int(out.offsets[head]), int(out.offsets[head + sel.num_kv_heads])
        ext.cuda_compact(k, v, None if pos is None else pos[i], sel.index, sel.offsets,
                         int(slack), out.k[lo:hi], out.v[lo:hi], out.pos[lo:hi], stream)
        head += sel.num_kv_heads
    return out


def _compact_out(k: Array, counts: np.ndarray, slack: int) -> KVCache:
    """The empty packed cache that compaction of ``counts[h]`` rows per head fills: offsets
    with ``slack`` spare rows after every head, lens = counts, spare positions 0."""
    d = int(k.shape[-1])
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts + slack, out=offsets[1:])
    rows = int(offsets[-1])
    return KVCache(T.empty(k, (rows, d), T.dtype_name(k)), T.empty(k, (rows, d), T.dtype_name(k)),
                   T.zeros(k, (rows,), "int32"), offsets, counts.astype(np.int64))


# ----------------------------------------------------------------------------------------------
# attention


def attention(q: Array, cache: KVCache, q_pos: Union[int, Sequence[int], Array], *,
              scale: Optional[float] = None, sliding_window: int = 0, softcap: float = 0.0,
              return_lse: bool = False, backend: Optional[str] = None):
    """Attention of queries over a (compacted) cache.

    A row is visible to a query iff ``pos_row <= q_pos`` by original positions (and, with a
    sliding window, ``q_pos - pos_row < sliding_window``), so the same call serves prefill,
    decode and a question appended after eviction. Query head hq reads KV head ``hq // G``.

    Args:
        q: ``[Hq, m, d]`` queries after RoPE (``Hq`` a multiple of the cache's heads).
        cache: the KVCache (same framework and device as q).
        q_pos: ``[m]`` original positions of the queries (an int for m = 1).
        scale: logit scale; None = 1/sqrt(d). softcap: Gemma-style logit soft-capping.

    Returns:
        out ``[Hq, m, d]`` float32 (a query that sees no row gets zeros); with ``return_lse``
        also lse ``[Hq, m]`` float32.
    """
    C.instance("cache", cache, KVCache, "a kvevict.KVCache (what compact returns)")
    C.ndim("q", q, 3, "[Hq, m, d]")
    C.float_dtype("q", q)
    hq, m, d = T.shape_of(q)
    if m < 1:
        raise ValueError(f"q has shape {T.shape_of(q)}; expected [Hq, m, d] with m >= 1 queries")
    sliding_window = C.integer("sliding_window", sliding_window, 0, C.MAX_POSITION)
    softcap = C.number("softcap", softcap, float32=True)
    scale = C.optional_number("scale", scale, float32=True)
    return_lse = C.flag("return_lse", return_lse)
    if d != cache.head_dim:
        raise ValueError(f"q has shape {T.shape_of(q)}; expected [Hq, m, d] with d = "
                         f"{cache.head_dim} (the cache's)")
    if hq % cache.num_kv_heads != 0:
        raise ValueError(f"q has {hq} heads; expected a multiple of the cache's "
                         f"{cache.num_kv_heads} KV heads")
    C.same_place(("q", "cache.k"), (q, cache.k))
    if T.is_array(q_pos):
        qp = T.to_host(q_pos)
    elif isinstance(q_pos, (list, tuple)):
        qp = np.array([C.integer("q_pos element", p) for p in q_pos], dtype=np.int64)
    else:
        qp = np.array(C.integer("q_pos", q_pos), dtype=np.int64)
    C.positions("q_pos", qp)
    qp = np.ascontiguousarray(np.atleast_1d(qp), dtype=np.int32)
    if qp.shape != (m,):
        raise ValueError(f"q_pos has shape {qp.shape}; expected [m] = ({m},), one per query")
    be = _backend_for(q, backend)
    out = T.empty(q, (hq, m, d), "float32")
    lse = T.empty(q, (hq, m), "float32") if return_lse else None
    s = float(scale or 0.0)
    if be == "cuda":
        C.inner_contiguous("q", q)
        qk = q if T.dtype_name(q) in ("float32", T.dtype_name(cache.k)) else T.astype(q, "float32")
        arrays = (T.for_kernel(qk), qp, cache.k, cache.v, cache.pos, cache.offsets, cache.lens)
        ws = T.workspace(q, ext.cuda_attention_workspace_bytes(*arrays))
        ext.cuda_attention(*arrays, s, int(sliding_window), float(softcap), out, lse, ws,
                           T.stream_handle(q))
    else:
        ext.attention(be, T.for_kernel(T.astype(q, "float32")), qp, cache.k, cache.v, cache.pos,
                      cache.offsets, cache.lens, s, int(sliding_window), float(softcap), out, lse)
    return (out, lse) if return_lse else out


_SM_COUNT = {}


def decode_attention_supported(q: Array, cache: KVCache) -> bool:
    """Whether ``decode_attention`` runs these: CUDA bfloat16 q and cache, d in {64, 128, 256},
    GQA group <= 16, and a CUDA build."""
    if not (ext.cuda_built and hasattr(ext, "cuda_decode_attention") and T.is_cuda(q)
            and T.is_cuda(cache.k)):
        return False
    hs = int(q.shape[0]) if q.ndim == 2 else int(q.shape[0]) * int(q.shape[1])
    g, rem = divmod(hs, cache.num_kv_heads)
    return (T.dtype_name(q) == "bfloat16" and T.dtype_name(cache.k) == "bfloat16" and rem == 0
            and 1 <= g <= 16 and cache.head_dim in (64, 128, 256))


def decode_attention(q: Array, cache: KVCache, *, scale: Optional[float] = None,
                     batch: int = 1) -> Array:
    """One decode step over a compacted cache on the GPU, entirely on the device.

    Every row in use is visible (decode: the query follows every cached position); for masking
    by positions, sliding windows or soft-capping use ``attention``. The segment table comes from
    ``cache.device_index()``, so no host-to-device copy and no synchronization happen; the
    longest segment is read from the host ``lens``.

    Args:
        q: ``[B * Hq, d]`` or ``[B, Hq, d]`` bfloat16 CUDA, the step's queries after RoPE: query
            head ``b * Hq + h`` reads segment ``(b * Hq + h) // G`` (the layout ``compact``
            gives ``B * Hkv`` segments, batch-major).
        cache: a bfloat16 CUDA KVCache.
        batch: B (sizes the kernel's key splits; any value gives the same result).

    Returns:
        out ``[B * Hq, d]`` (or ``[B, Hq, d]``) bfloat16 on q's device.
    """
    if not decode_attention_supported(q, cache):
        raise ValueError(f"decode_attention needs bfloat16 CUDA q and cache with d in 64/128/256 "
                         f"and <= 16 query heads per KV head; got q {T.dtype_name(q)} "
                         f"{T.shape_of(q)} on {T.where(q)}, cache {T.dtype_name(cache.k)} "
                         f"{cache.num_kv_heads} heads x d {cache.head_dim} on {T.where(cache.k)}")
    shape = T.shape_of(q)
    d = cache.head_dim
    if shape[-1] != d:
        raise ValueError(f"q has shape {shape}; expected [..., d] with d = {d} (the cache's)")
    hs = int(np.prod(shape[:-1]))
    batch = C.integer("batch", batch, 1)
    if cache.num_kv_heads % batch:
        raise ValueError(f"batch is {batch}; expected a divisor of the cache's "
                         f"{cache.num_kv_heads} segments")
    ix = cache.device_index()
    max_len = int(cache.lens.max()) if cache.lens.size else 0
    out = T.empty(q, shape, "bfloat16")
    if max_len == 0:
        out.zero_()
        return out
    dev = q.device.index if q.device.index is not None else T._torch().cuda.current_device()
    sm = _SM_COUNT.get(dev)
    if sm is None:
        sm = _SM_COUNT[dev] = int(T._torch().cuda.get_device_properties(dev).multi_processor_count)
    hq, hkv = hs // batch, cache.num_kv_heads // batch
    need = ext.cuda_decode_attention_scratch_bytes(batch, hq, hkv, d, max_len, sm)
    if ix.scratch is None or ix.scratch.numel() < need:
        ix.scratch = T.empty(q, (max(need, 2 * (ix.scratch.numel() if ix.scratch is not None
                                                  else 0)),), "uint8")
    ext.cuda_decode_attention(T.contiguous(T.for_kernel(q)), cache.k, cache.v, ix.off, ix.lens32,
                              batch, hq, hkv, max_len, float(scale or 0.0), out, None, ix.scratch,
                              sm, T.stream_handle(q))
    return out


def method_names() -> List[str]:
    """Every method name ``score`` / ``LayerEvictor`` accept."""
    return list(ext.method_names())


def method_defaults(method: str):
    """``(ScoreOptions, policy, sink)`` a method name stands for, as the CLI parses it: kvevict's
    measured defaults for dropkv, adadropkv and obcache_vk (window 32, max-pooling 11),
    ``"METHOD:spec"`` for SPEC section 2's. ``ScoreOptions`` has ``window``, ``pool`` and
    ``aggregate``."""
    return ext.method_defaults(method)
