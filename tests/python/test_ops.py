"""kvevict.score / select / compact / attention on numpy and torch inputs against the C++
double-precision reference (backend="reference") on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

import kvevict
from conftest import WANT_CUDA, Framework, assert_close, assert_same_kept, kept_sets, qkv, torch

# (method, extra keyword arguments): every SPEC method, and the aggregations OBCache and
# DropKV take (SPEC section 2).
CASES = [
    ("dropkv", {}),
    ("dropkv", {"aggregate": "h2o"}),
    ("dropkv", {"aggregate": "tova"}),
    ("dropkv", {"pool": "max:7"}),
    ("adadropkv", {}),
    ("obcache_v", {}),
    ("obcache_k", {}),
    ("obcache_vk", {}),
    ("obcache_vk", {"aggregate": "h2o"}),
    ("obcache_k", {"pool": "avg:5", "window": 5}),
    ("snapkv", {}),
    ("adakv", {}),
    ("h2o", {}),
    ("h2o", {"h2o_normalize": True}),
    ("tova", {}),
    ("knorm", {}),
    ("keydiff", {}),
    ("vatp", {}),
    ("criticalkv", {}),
    ("streamingllm", {}),
    ("random", {"seed": 7}),
]


def case_id(c):
    return c[0] + "".join(f"-{k}={v}" for k, v in c[1].items())


def inputs(rng, method, kw, hq=6, hkv=2, n=79, d=16):
    # h2o needs every prompt query; the windowed scores read the last `window` of 32 given.
    all_queries = method == "h2o" or kw.get("aggregate") == "h2o"
    q, k, v = qkv(rng, hq, hkv, n, n if all_queries else 32, d)
    wo = rng.standard_normal((24, hq * d)).astype(np.float32) if method == "criticalkv" else None
    return q, k, v, wo


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_scores_and_kept_sets_match_reference(fw, case):
    method, kw = case
    rng = np.random.default_rng(sum(map(ord, case_id(case))))
    # The CUDA kernels take 16-bit inputs and head dims 64, 128 or 256.
    q, k, v, wo = inputs(rng, method, kw, d=64 if fw.is_cuda else 16)
    dtype = "bfloat16" if fw.is_cuda else None
    qd, kd, vd = fw.put(q, dtype), fw.put(k, dtype), fw.put(v, dtype)
    wod = None if wo is None else fw.put(wo, dtype)
    scores, aux = kvevict.score(qd, kd, vd, method, wo=wod, return_aux=True, **kw)
    # Reference on host copies of exactly the inputs the fast path read (rounded to bf16).
    hq_, hk, hv = (Framework.host(x) for x in (qd, kd, vd))
    hwo = None if wo is None else Framework.host(wod)
    ref, ref_aux = kvevict.score(hq_, hk, hv, method, wo=hwo, return_aux=True,
                                 backend="reference", **kw)
    assert type(scores) is type(kd) and tuple(scores.shape) == (2, 79)
    if fw.name != "numpy":
        assert scores.device == kd.device
    tol = 2e-2 if fw.is_cuda else 1e-4
    span = float(np.abs(ref).max())
    assert_close(Framework.host(scores), ref, atol=tol * span, rtol=tol, what=f"{method} scores")
    if method == "criticalkv":
        assert_close(Framework.host(aux), ref_aux, atol=tol * float(np.abs(ref_aux).max()),
                     rtol=tol, what="criticalkv aux")
    _, policy, sink = kvevict.ext.method_defaults(method)
    window = kvevict.ext.score_options(method, kw.get("aggregate"), kw.get("window"),
                                       kw.get("pool")).window
    sel_kw = dict(budget=0.3, policy=policy, window=window, sink=sink)
    got = kvevict.select(scores, aux=aux, **sel_kw)
    want = kvevict.select(ref.astype(np.float32), aux=None if ref_aux is None else
                          ref_aux.astype(np.float32), backend="reference", **sel_kw)
    assert got.total == want.total
    assert type(got.index) is type(kd)
    assert_same_kept(got, want, ref, tol=4 * tol, what=f"{method} kept set")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_inputs_match_reference(dtype):
    if dtype == "bfloat16" and torch is None:
        pytest.skip("bfloat16 host arrays need torch")
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, 8, 2, 300, 8, 32)
    fw = Framework("torch" if dtype == "bfloat16" else "numpy")
    qd, kd, vd = fw.put(q, dtype), fw.put(k, dtype), fw.put(v, dtype)
    s = kvevict.score(qd, kd, vd, "dropkv:spec")
    ref = kvevict.score(*(Framework.host(x) for x in (qd, kd, vd)), "dropkv:spec", backend="reference")
    assert_close(Framework.host(s), ref, atol=1e-4 * np.abs(ref).max(), rtol=1e-3, what=dtype)


def test_batched_scores_equal_per_row(fw):
    rng = np.random.default_rng(4)
    rows = [qkv(rng, 4, 2, 50, 8, 64 if fw.is_cuda else 16) for _ in range(3)]
    dtype = "bfloat16" if fw.is_cuda else None
    qs, ks, vs = (fw.put(np.stack([r[i] for r in rows]), dtype) for i in range(3))
    batched = Framework.host(kvevict.score(qs, ks, vs, "dropkv:spec"))
    for b in range(3):
        one = Framework.host(kvevict.score(qs[b], ks[b], vs[b], "dropkv:spec"))
        np.testing.assert_array_equal(batched[b], one)


def test_non_contiguous_host_inputs_give_the_same_scores():
    if torch is None:
        pytest.skip("needs torch")
    rng = np.random.default_rng(5)
    q, k, v = qkv(rng, 4, 2, 64, 16, 16)
    # [n, H, d] storage viewed as [H, n, d]: what transformers' .transpose(1, 2) produces.
    qt = torch.from_numpy(np.ascontiguousarray(q.transpose(1, 0, 2))).transpose(0, 1)
    kt = torch.from_numpy(np.ascontiguousarray(k.transpose(1, 0, 2))).transpose(0, 1)
    vt = torch.from_numpy(np.ascontiguousarray(v.transpose(1, 0, 2))).transpose(0, 1)
    assert not kt.is_contiguous()
    a = kvevict.score(qt, kt, vt, "obcache_vk:spec").numpy()
    b = kvevict.score(q, k, v, "obcache_vk:spec")
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())


def masked_attention_reference(q, k, v, keep, q_pos, scale):
    """Double-precision attention of q [Hq, m, d] over the FULL k, v [Hkv, n, d] with the evicted
    rows masked out (keep [Hkv, n] bool) and causal by position (rows 0..n-1)."""
    hq, m, d = q.shape
    hkv, n, _ = k.shape
    g = hq // hkv
    out = np.zeros((hq, m, d))
    for h in range(hq):
        kh, vh = k[h // g].astype(np.float64), v[h // g].astype(np.float64)
        for t in range(m):
            visible = keep[h // g] & (np.arange(n) <= q_pos[t])
            z = kh[visible] @ q[h, t].astype(np.float64) * scale
            p = np.exp(z - z.max())
            out[h, t] = (p / p.sum()) @ vh[visible]
    return out


@pytest.mark.parametrize("policy", ["uniform", "adakv"])
def test_attention_over_compacted_cache_equals_masked_full_attention(fw, policy):
    """SPEC section 4: attention over exactly the kept rows == full attention, evicted masked."""
    rng = np.random.default_rng(6)
    hq, hkv, n, d = 8, 2, 97, 64 if fw.is_cuda else 16
    q, k, v = qkv(rng, hq, hkv, n, 8, d)
    dtype = "bfloat16" if fw.is_cuda else None
    qd, kd, vd = fw.put(q, dtype), fw.put(k, dtype), fw.put(v, dtype)
    scores = kvevict.score(qd, kd, vd, "dropkv:spec")
    sel = kvevict.select(scores, 0.25, policy=policy, window=8)
    cache = kvevict.compact(kd, vd, sel, slack=3)
    assert cache.total_len() == sel.total == hkv * int(0.25 * n)
    assert cache.capacity == sel.total + 3 * hkv
    keep = Framework.host(sel.mask(n))
    q_pos = np.arange(n - 8, n)
    out = kvevict.attention(qd, cache, q_pos)
    assert type(out) is type(kd)
    hk, hv, hqq = (Framework.host(x) for x in (kd, vd, qd))
    want = masked_attention_reference(hqq, hk, hv, keep, q_pos, d ** -0.5)
    tol = 2e-2 if fw.is_cuda else 1e-5
    assert_close(Framework.host(out), want, atol=tol, rtol=tol, what="attention")
    if not fw.is_cuda:
        ref = kvevict.attention(hqq, _host_cache(cache), q_pos, backend="reference")
        assert_close(ref, want, atol=1e-6, rtol=1e-6, what="reference attention")


def _host_cache(c):
    return kvevict.KVCache(*(Framework.host(x) for x in (c.k, c.v, c.pos)), c.offsets.copy(),
                           c.lens.copy())


def test_append_after_compaction_attends_by_original_position(fw):
    rng = np.random.default_rng(7)
    hq, hkv, n, d = 4, 2, 40, 64 if fw.is_cuda else 16
    q, k, v = qkv(rng, hq, hkv, n, 8, d)
    dtype = "bfloat16" if fw.is_cuda else None
    kd, vd = fw.put(k, dtype), fw.put(v, dtype)
    sel = kvevict.select(kvevict.score(fw.put(q, dtype), kd, vd, "snapkv", window=8), 0.5,
                         window=8)
    cache = kvevict.compact(kd, vd, sel, slack=1)
    k_new, v_new = (rng.standard_normal((hkv, d)).astype(np.float32) for _ in range(2))
    cache = cache.append(fw.put(k_new, dtype), fw.put(v_new, dtype), pos=n)
    with pytest.raises(ValueError, match="segment is full"):
        cache.append(fw.put(k_new, dtype), fw.put(v_new, dtype), pos=n + 1)
    grown = cache.append(fw.put(k_new, dtype), fw.put(v_new, dtype), pos=n + 1, grow=4)
    assert (grown.lens == sel.counts() + 2).all() and (grown.free_rows() == 3).all()
    q1 = rng.standard_normal((hq, 1, d)).astype(np.float32)
    out = Framework.host(kvevict.attention(fw.put(q1, dtype), grown, [n + 1]))
    full_k = np.concatenate([Framework.host(kd), Framework.host(fw.put(k_new, dtype))[:, None],
                             Framework.host(fw.put(k_new, dtype))[:, None]], 1)
    full_v = np.concatenate([Framework.host(vd), Framework.host(fw.put(v_new, dtype))[:, None],
                             Framework.host(fw.put(v_new, dtype))[:, None]], 1)
    keep = np.concatenate([Framework.host(sel.mask(n)), np.ones((hkv, 2), bool)], 1)
    want = masked_attention_reference(Framework.host(fw.put(q1, dtype)), full_k, full_v, keep,
                                      [n + 1], d ** -0.5)
    tol = 2e-2 if fw.is_cuda else 1e-5
    assert_close(out, want, atol=tol, rtol=tol, what="attention after appends")


def test_layer_evictor_equals_the_functional_pipeline(fw):
    rng = np.random.default_rng(8)
    q, k, v = qkv(rng, 8, 4, 200, 8, 64 if fw.is_cuda else 32)
    dtype = "bfloat16" if fw.is_cuda else None
    qd, kd, vd = fw.put(q, dtype), fw.put(k, dtype), fw.put(v, dtype)
    ev = kvevict.LayerEvictor("adadropkv:spec", budget=0.1, backend="cuda" if fw.is_cuda else "cpu")
    assert "policy=adakv" in ev.describe()
    cache = ev.evict(qd, kd, vd)
    sel = kvevict.select(kvevict.score(qd, kd, vd, "dropkv:spec"), 0.1, policy="adakv", window=8)
    assert kvevict_sets(ev.plan(qd, kd, vd)) == kvevict_sets(sel)
    assert cache.total_len() == sel.total == 4 * 20
    for h in range(4):
        kh, _, ph = cache.head(h)
        rows = Framework.host(sel.head(h))
        np.testing.assert_array_equal(Framework.host(ph), rows)
        np.testing.assert_array_equal(Framework.host(kh), Framework.host(kd)[h][rows])


@pytest.mark.parametrize("threads", [2, 4])
def test_one_layer_evictor_shared_by_threads_gives_the_single_threaded_results(threads):
    # plan() and apply() run without the GIL and the evictor reuses its score buffers and
    # workspace: threads sharing one evictor must take turns, not overwrite each other's scores.
    import threading

    rng = np.random.default_rng(21)
    problems = [qkv(rng, 4, 2, 20, 8, 16), qkv(rng, 8, 4, 300, 8, 32)]
    ev = kvevict.LayerEvictor("dropkv", 0.5, window=8)
    want = [(kvevict_sets(ev.plan(*p)), Framework.host(ev.evict(*p).k)) for p in problems]
    got, errors = [], []

    def work(i):
        p = problems[i % 2]
        try:
            for _ in range(40):
                got.append((i % 2, kvevict_sets(ev.plan(*p)), Framework.host(ev.evict(*p).k)))
        except Exception as e:  # noqa: BLE001 -- reported below, with the thread's problem
            errors.append(f"problem {i % 2}: {e}")

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors[:3]
    assert len(got) == 40 * threads
    for i, sets, k in got:
        assert sets == want[i][0], f"problem {i}: kept sets differ from the single-threaded run"
        np.testing.assert_array_equal(k, want[i][1])


def kvevict_sets(sel):
    off, idx = sel.offsets_host(), Framework.host(sel.index)
    return [tuple(idx[off[h]:off[h + 1]]) for h in range(len(off) - 1)]


def test_decode_evictor_bounds_heads_and_keeps_recent_rows():
    rng = np.random.default_rng(9)
    hq, hkv, n, d = 4, 2, 30, 16
    _, k, v = qkv(rng, hq, hkv, n, 1, d)
    dec = kvevict.DecodeEvictor("h2o", budget=24, slack=4, recent=8)
    cache = kvevict.KVCache.from_dense(k, v, slack=dec.capacity_per_head, score_acc=True)
    evicted = 0
    for step in range(20):
        pos = n + step
        cache = cache.append(rng.standard_normal((hkv, d)).astype(np.float32),
                             rng.standard_normal((hkv, d)).astype(np.float32), pos, grow=8)
        q = rng.standard_normal((hq, 1, d)).astype(np.float32)
        out, lse = kvevict.attention(q, cache, [pos], return_lse=True)
        if step == 0:
            # h2o adds p averaged over the G query heads of each KV head (SPEC section 5).
            acc_before = cache.score_acc.copy()
            dec.accumulate(cache, q[:, 0], out[:, 0], lse[:, 0])
            kh, _, _ = cache.head(0)
            z = kh @ q[:2, 0].T * d ** -0.5  # [len, G]
            p = np.exp(z - lse[:2, 0])
            a0, b0 = int(cache.offsets[0]), int(cache.offsets[0] + cache.lens[0])
            np.testing.assert_allclose(cache.score_acc[a0:b0] - acc_before[a0:b0],
                                       p.mean(1), rtol=1e-5, atol=1e-7)
            evicted += dec.evict(cache)
        else:
            evicted += dec.step(cache, q[:, 0], out[:, 0], lse[:, 0])
        assert (cache.lens <= 24 + 4).all()
        for h in range(hkv):
            _, _, ph = cache.head(h)
            assert set(range(max(0, pos - 7), pos + 1)) <= set(ph.tolist())  # recent kept
            assert (np.diff(ph) > 0).all()  # still sorted by position
    assert evicted > 0


# ------------------------------------------------------------------------------------------
# errors: a ValueError naming the argument, never a crash


def test_shape_errors_name_the_argument():
    rng = np.random.default_rng(10)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    with pytest.raises(ValueError, match=r"v has shape \(2, 19, 16\); expected \[Hkv, n, d\]"):
        kvevict.score(q, k, v[:, :19])
    with pytest.raises(ValueError, match="q has 3 heads; expected a multiple of the 2 KV heads"):
        kvevict.score(q[:3], k, v)
    with pytest.raises(ValueError, match=r"k has shape \(2, 20\); expected \[Hkv, n, d\]"):
        kvevict.score(q, k[:, :, 0], v)
    with pytest.raises(ValueError, match="k has dtype int32"):
        kvevict.score(q, k.astype(np.int32), v)
    with pytest.raises(ValueError, match="q is a list"):
        kvevict.score(q.tolist(), k, v)
    with pytest.raises(ValueError, match=r"scores has shape \(20,\); expected \[Hkv, n\]"):
        kvevict.select(np.zeros(20, np.float32), 0.5)
    with pytest.raises(ValueError, match="q_pos has shape"):
        kvevict.attention(q, kvevict.KVCache.from_dense(k, v), [1, 2])


def test_library_errors_keep_the_cpp_message():
    rng = np.random.default_rng(11)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    s = kvevict.score(q, k, v, window=8)
    with pytest.raises(kvevict.Error, match="budget of 40 tokens exceeds the 20 tokens"):
        kvevict.select(s, 40)
    with pytest.raises(ValueError, match="unknown method|expected one of"):
        kvevict.score(q, k, v, "fastkv")
    with pytest.raises(ValueError, match="snapkv aggregation needs 20"):
        kvevict.score(q, k, v, "snapkv")
    with pytest.raises(ValueError, match="compression ratio 1.5 is out of range"):
        kvevict.select(s, compression_ratio=1.5)
    sel = kvevict.select(s, 2, window=8)
    assert "below the 8 protected tokens" in sel.warning and sel.total == 16
    assert issubclass(kvevict.Error, ValueError)


def test_nan_inputs_raise_instead_of_ranking_first():
    rng = np.random.default_rng(12)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    k[1, 5, 3] = np.nan
    with pytest.raises(ValueError, match="NaN|finite"):
        kvevict.score(q, k, v, window=8)
    s = np.ones((2, 20), np.float32)
    s[0, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kvevict.select(s, 0.5)


# Hostile input, round 2 (docs/RELIABILITY.md): scalars were converted instead of checked
# (window=2.7 was 2, seed=1.5 was 1, budget=True kept everything, h2o_normalize="false" was True,
# q_pos=[40.7] was 40 and 2**40 wrapped to int32), some reached nanobind as std::bad_cast or
# "incompatible function arguments", and None where an object belongs was an AttributeError.


@pytest.mark.parametrize("call,match", [
    (lambda q, k, v, s: kvevict.score(q, k, v, window=2.5),
     r"window is 2\.5 \(float\); expected an integer"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=True), r"window is True \(bool\)"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window="8"), r"window is '8' \(str\)"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=2**40), r"window is 1099511627776; expected"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=8, pool=5), r"pool is 5 \(int\)"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=8, pool=""), "pool is empty"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=8, scale="0.5"), r"scale is '0.5' \(str\)"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=8, scale=1e39), "float32 can hold"),
    (lambda q, k, v, s: kvevict.score(q, k, v, "random", seed=1.5), r"seed is 1\.5 \(float\)"),
    (lambda q, k, v, s: kvevict.score(q, k, v, "random", seed=-1), "seed is -1; expected"),
    (lambda q, k, v, s: kvevict.score(q, k, v, "h2o", h2o_normalize="false"),
     "h2o_normalize is 'false'"),
    (lambda q, k, v, s: kvevict.score(q, k, v, window=8, wo=np.zeros((4, 96), np.float32)),
     "wo is given but method 'dropkv' does not read it"),
    (lambda q, k, v, s: kvevict.score(None, k, v, "knorm", aggregate="h2o"),
     "h2o aggregation was requested for the query-free method knorm"),
    (lambda q, k, v, s: kvevict.select(s, True), r"budget is True \(bool\)"),
    (lambda q, k, v, s: kvevict.select(s, [0.5]), r"budget is \[0\.5\] \(list\)"),
    (lambda q, k, v, s: kvevict.select(s, compression_ratio="0.5"), "compression_ratio is '0.5'"),
    (lambda q, k, v, s: kvevict.select(s, 0.5, window=2.7), r"window is 2\.7 \(float\)"),
    (lambda q, k, v, s: kvevict.select(s, 0.5, sink=2.9), r"sink is 2\.9 \(float\)"),
    (lambda q, k, v, s: kvevict.select(s, 0.5, policy=None), "policy is None"),
    (lambda q, k, v, s: kvevict.select(s[:, :0], 0.5), r"scores has shape \(2, 0\)"),
    (lambda q, k, v, s: kvevict.compact(k, v, None), "selection is None"),
    (lambda q, k, v, s: kvevict.compact(k, v, kvevict.select(s, 0.5), slack=2.5),
     r"slack is 2\.5 \(float\)"),
    (lambda q, k, v, s: kvevict.compact(k, v, kvevict.select(s, 0.5), slack=2**40),
     "slack is 1099511627776"),
    (lambda q, k, v, s: kvevict.attention(q, None, q_pos=list(range(8))), "cache is None"),
    (lambda q, k, v, s: kvevict.LayerEvictor("dropkv", 0.5, sink=True), r"sink is True \(bool\)"),
    (lambda q, k, v, s: kvevict.LayerEvictor("dropkv", 0.5, backend=None), "backend is None"),
    (lambda q, k, v, s: kvevict.DecodeEvictor("h2o", 2.5), r"budget is 2\.5 \(float\)"),
    (lambda q, k, v, s: kvevict.DecodeEvictor("h2o", 2**62, slack=2**62),
     "budget is 4611686018427387904"),
])
def test_scalar_arguments_are_checked_not_converted(call, match):
    rng = np.random.default_rng(20)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    s = kvevict.score(q, k, v, window=8)
    with pytest.raises(ValueError, match=match):
        call(q, k, v, s)


def test_alpha_is_refused_where_the_uniform_policy_would_ignore_it():
    # As `kvevict score --alpha` with the uniform policy: an alpha given is one the caller meant.
    rng = np.random.default_rng(22)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    s = kvevict.score(q, k, v, window=8)
    with pytest.raises(ValueError, match=r"alpha=0\.5 has no effect with the uniform policy"):
        kvevict.select(s, 0.5, alpha=0.5)
    with pytest.raises(ValueError, match="has no effect with the uniform policy"):
        kvevict.LayerEvictor("dropkv", budget=0.5, alpha=0.3)
    # adakv reads it: different safeguards give different per-head budgets on skewed heads.
    skewed = s.copy()
    skewed[0] *= 100.0
    lo = kvevict.select(skewed, 0.5, policy="adakv", alpha=0.0)
    hi = kvevict.select(skewed, 0.5, policy="adakv", alpha=1.0)
    assert list(np.diff(hi.offsets)) == [10, 10]  # alpha = 1: the uniform split
    assert list(np.diff(lo.offsets)) != list(np.diff(hi.offsets))
    # Left out, adakv takes the default 0.2, as the evictor's settings say.
    assert kvevict.LayerEvictor("adadropkv", budget=0.5).settings.select.alpha == 0.2


def test_positions_and_selections_are_checked_not_cast():
    rng = np.random.default_rng(21)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    cache = kvevict.KVCache.from_dense(k, v, slack=2)
    one = q[:, -1:]
    with pytest.raises(ValueError, match=r"q_pos element is 20\.7 \(float\)"):
        kvevict.attention(one, cache, q_pos=[20.7])
    with pytest.raises(ValueError, match="q_pos holds 1099511627776; expected positions"):
        kvevict.attention(one, cache, q_pos=np.array([2**40]))
    with pytest.raises(ValueError, match="q_pos has dtype float64"):
        kvevict.attention(one, cache, q_pos=np.array([np.nan]))
    with pytest.raises(ValueError, match="q_pos holds -1"):
        kvevict.attention(one, cache, q_pos=[-1])
    with pytest.raises(ValueError, match=r"q has shape \(4, 0, 16\); expected .* m >= 1"):
        kvevict.attention(q[:, :0], cache, q_pos=np.zeros(0, np.int32))
    with pytest.raises(ValueError, match="pos has dtype float64; expected integer positions"):
        kvevict.KVCache.from_dense(k, v, pos=np.arange(20) * 1.5)
    with pytest.raises(ValueError, match="pos holds -19"):
        kvevict.KVCache.from_dense(k, v, pos=-np.arange(20))
    with pytest.raises(ValueError, match=r"pos is 20\.5 \(float\)"):
        cache.append(k[:, 0], v[:, 0], pos=20.5)
    with pytest.raises(ValueError, match="k_row has dtype int32"):
        cache.append(k[:, 0].astype(np.int32), v[:, 0], pos=20)
    decreasing = kvevict.Selection(np.array([0, 1, 0, 1], np.int32), np.array([0, 3, 2], np.int64))
    with pytest.raises(ValueError, match=r"selection.offsets is \[0, 3, 2\]; expected"):
        kvevict.compact(k, v, decreasing)
    floats = kvevict.Selection(np.array([0, 1, 0, 1.5]), np.array([0, 2, 4], np.int64))
    with pytest.raises(ValueError, match="selection.index has shape .* dtype float64"):
        kvevict.compact(k, v, floats)


def test_host_scores_that_overflow_raise_like_the_cuda_check():
    """Finite inputs whose logits overflow float32 gave NaN scores back without a word on the
    host paths (the CUDA path raised). check_finite is the CUDA path's switch: a host score
    that cannot be computed in float32 is always an error naming the overflow."""
    rng = np.random.default_rng(22)
    q, k, v = qkv(rng, 4, 2, 20, 8, 16)
    for check in (True, False):
        with pytest.raises(ValueError, match="dropkv score of head 0 row .* overflows float32"):
            kvevict.score(np.full_like(q, 3e38), k, v, window=8, check_finite=check)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_huge_finite_keys_score_like_the_reference_or_raise_naming_the_overflow(backend):
    # knorm summed squares in float on the cpu backend: keys of ~1e20 (norms float32 holds)
    # scored -inf everywhere and the selection kept the first tokens.
    rng = np.random.default_rng(23)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    big = k * np.float32(1e20)
    s = kvevict.score(None, big, v, "knorm", backend=backend)
    want = -np.linalg.norm(big.astype(np.float64), axis=-1)
    assert_close(s, want, atol=0, rtol=1e-6, what="knorm of 1e20 keys")
    ev = kvevict.LayerEvictor("knorm", 0.5, backend=backend)
    assert kvevict_sets(ev.plan(None, big, v)) == kvevict_sets(ev.plan(None, k, v))
    # Scores past float32 are an error naming the cause, never inf scores selected by ties.
    with pytest.raises(ValueError, match="knorm score of head 0 row 0 is -inf .*overflows"):
        kvevict.score(None, np.full_like(k, 3e38), v, "knorm", backend=backend)
    with pytest.raises(ValueError, match="obcache_v score of head .* overflows float32"):
        kvevict.score(np.ones((4, 8, 16), np.float32), k, v * np.float32(1e20), "obcache_v",
                      window=8, backend=backend)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_wrong_backend_for_the_device_is_an_error():
    rng = np.random.default_rng(13)
    q, k, v = (torch.from_numpy(x) for x in qkv(rng, 4, 2, 20, 8, 16))
    with pytest.raises(ValueError, match="backend 'cuda' cannot read torch cpu"):
        kvevict.score(q, k, v, backend="cuda", window=8)
    with pytest.raises(ValueError, match="k is a torch cpu array but q is numpy"):
        kvevict.score(q.numpy(), k, v, window=8)
    qg = q.clone().requires_grad_(True)  # detached for the kernel, no copy
    assert kvevict.score(qg, k, v, window=8).shape == (2, 20)


def test_appends_past_the_slack_keep_rows_positions_and_the_device_table(fw):
    """Many appends with a small slack (several re-spacings), batch-major segments of 2 rows
    x 2 KV heads: every head holds its kept prompt rows then the appended rows in order, the
    device segment table (torch) stays equal to the host's, and attention over the result equals
    the masked full reference."""
    rng = np.random.default_rng(21)
    hq, hkv, n, d, steps = 8, 4, 33, 64 if fw.is_cuda else 16, 11
    q, k, v = qkv(rng, hq, hkv, n, 8, d)
    dtype = "bfloat16" if fw.is_cuda else None
    kd, vd = fw.put(k, dtype), fw.put(v, dtype)
    sel = kvevict.select(kvevict.score(fw.put(q, dtype), kd, vd, "dropkv", window=8), 0.4,
                         policy="adakv", window=8)
    cache = kvevict.compact(kd, vd, sel, slack=2)
    new_k = rng.standard_normal((steps, hkv, d)).astype(np.float32)
    new_v = rng.standard_normal((steps, hkv, d)).astype(np.float32)
    caps = []
    for t in range(steps):
        cache = cache.append(fw.put(new_k[t], dtype), fw.put(new_v[t], dtype), pos=n + t, grow=3)
        caps.append(cache.capacity)
        if fw.name != "numpy":
            ix = cache.device_index()
            assert (Framework.host(ix.lens64) == cache.lens).all()
            assert (Framework.host(ix.off) == cache.offsets).all()
    assert len(set(caps)) > 2  # re-spaced more than once
    assert (cache.lens == sel.counts() + steps).all()
    kept = kept_sets(sel)
    for h in range(hkv):
        hk, _, hp = (Framework.host(x) for x in cache.head(h))
        assert hp.tolist() == sorted(kept[h]) + list(range(n, n + steps))
        assert_close(hk[-steps:], Framework.host(fw.put(new_k[:, h], dtype)), 0, 0, "rows")
    q1 = rng.standard_normal((hq, 1, d)).astype(np.float32)
    out = Framework.host(kvevict.attention(fw.put(q1, dtype), cache, [n + steps - 1]))
    full_k = np.concatenate([Framework.host(kd), Framework.host(fw.put(new_k, dtype)).transpose(
        1, 0, 2)], 1)
    full_v = np.concatenate([Framework.host(vd), Framework.host(fw.put(new_v, dtype)).transpose(
        1, 0, 2)], 1)
    keep = np.concatenate([Framework.host(sel.mask(n)), np.ones((hkv, steps), bool)], 1)
    want = masked_attention_reference(Framework.host(fw.put(q1, dtype)), full_k, full_v, keep,
                                      [n + steps - 1], d ** -0.5)
    tol = 2e-2 if fw.is_cuda else 1e-5
    assert_close(out, want, atol=tol, rtol=tol, what="attention after appends past the slack")


def test_decode_attention_equals_attention_on_cuda(fw):
    """kvevict.decode_attention (the flash-decoding kernel, all on the device) == attention over
    the same compacted cache, for a batch of 3 rows x 2 KV heads with per-head lengths, before
    and after appends; and it refuses what it does not cover."""
    if not fw.is_cuda:
        rng = np.random.default_rng(22)
        _, k, v = qkv(rng, 4, 2, 10, 8, 16)
        cache = kvevict.KVCache.from_dense(fw.put(k), fw.put(v))
        assert not kvevict.ops.decode_attention_supported(fw.put(np.zeros((4, 16), np.float32)),
                                                          cache)
        with pytest.raises(ValueError, match="decode_attention needs bfloat16 CUDA"):
            kvevict.decode_attention(fw.put(np.zeros((4, 16), np.float32)), cache)
        return
    rng = np.random.default_rng(22)
    b, hq, hkv, n, d = 3, 8, 2, 300, 128
    q, k, v = qkv(rng, b * hq, b * hkv, n, 8, d)
    qd, kd, vd = (fw.put(x, "bfloat16") for x in (q, k, v))
    sel = kvevict.select(kvevict.score(qd, kd, vd, "dropkv", window=8), 0.3, policy="adakv",
                         window=8)
    cache = kvevict.compact(kd, vd, sel, slack=4)
    for t in range(6):  # past the slack: re-spaced once
        q1 = fw.put(rng.standard_normal((b * hq, d)).astype(np.float32), "bfloat16")
        got = kvevict.decode_attention(q1.view(b, hq, d), cache, batch=b)
        assert got.shape == (b, hq, d) and got.dtype == torch.bfloat16
        want = kvevict.attention(q1[:, None], cache, [n + t + 10])[:, 0]
        assert_close(Framework.host(got).reshape(b * hq, d), Framework.host(want), 2e-2, 2e-2,
                     f"decode attention, step {t}")
        rows = [fw.put(rng.standard_normal((b * hkv, d)).astype(np.float32), "bfloat16")
                for _ in range(2)]
        cache = cache.append(rows[0], rows[1], pos=n + t, grow=4)


@pytest.mark.skipif(not (torch is not None and WANT_CUDA), reason="needs KVEVICT_TEST_CUDA=1")
def test_cuda_nan_check_can_be_left_to_the_caller():
    # A NaN in one bf16 key gave finite CUDA dropkv scores on the H200 (2026-12-01 night), so
    # neither check saw it; the kernels now carry it (tests/cuda/nan_scores_test.cpp).
    rng = np.random.default_rng(23)
    q, k, v = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in qkv(rng, 4, 2, 40, 8, 64))
    k[1, 5, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        kvevict.score(q, k, v, "dropkv:spec")
    s = kvevict.score(q, k, v, "dropkv:spec", check_finite=False)  # no host synchronization
    assert bool(torch.isnan(s).any())


@pytest.mark.skipif(not (torch is not None and WANT_CUDA), reason="needs KVEVICT_TEST_CUDA=1")
def test_cuda_scores_past_float32_are_computed_like_the_host_or_refused():
    # Rows scaled by 2^66 and 2^-84 (exact in bf16): knorm's and keydiff's float sums of squares
    # pass FLT_MAX or underflow, and the kernels redo them in double, like the host's double sums.
    rng = np.random.default_rng(24)
    k = rng.standard_normal((2, 60, 64)).astype(np.float32)
    k[:, 1::3] *= 2.0 ** 66
    k[:, 2::3] *= 2.0 ** -84
    kd = torch.from_numpy(k).cuda().to(torch.bfloat16)
    kh = kd.float().cpu().numpy()
    got = kvevict.score(None, kd, kd, "knorm").cpu().numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, kvevict.score(None, kh, kh, "knorm"), rtol=1e-6)
    # keydiff's cosines: the scaled rows keep their directions (float sums gave them none).
    got = kvevict.score(None, kd, kd, "keydiff").cpu().numpy()
    np.testing.assert_allclose(got, kvevict.score(None, kh, kh, "keydiff"), atol=1e-5)
    # A key row of 2^127: its norm passes FLT_MAX. The host refuses it; so does CUDA, naming the
    # same head and row, unless the caller leaves the check to itself.
    k[1, 7] = 2.0 ** 127
    kd = torch.from_numpy(k).cuda().to(torch.bfloat16)
    with pytest.raises(ValueError, match="head 1 row 7 is -inf"):
        kvevict.score(None, kd.float().cpu().numpy(), kd.float().cpu().numpy(), "knorm")
    with pytest.raises(ValueError, match="knorm score of head 1 row 7 is -inf.*overflows float32"):
        kvevict.score(None, kd, kd, "knorm")
    s = kvevict.score(None, kd, kd, "knorm", check_finite=False)
    assert float(s[1, 7]) == -float("inf")


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_the_cuda_score_checks_name_the_first_non_finite_score(fw):
    """The checks the CUDA path runs on its scores (ops._score_one, check_finite) are framework
    code: here on host arrays, so that CI runs what a GPU runs. One read-back says whether every
    score is finite; only then are the NaN and the first infinite score looked for, named by
    method, head, row and value (the host backends' check_scores_finite message)."""
    if fw == "torch" and torch is None:
        pytest.skip("needs torch")
    from kvevict import _checks as C
    from kvevict import _tensors as T

    s = np.zeros((3, 50), np.float32)
    if fw == "torch":
        s = torch.from_numpy(s)
    assert T.all_finite(s) and T.first_inf(s) is None
    C.scores_fit_float32("knorm", "score", s)
    s[2, 4] = -np.inf
    s[1, 9] = np.inf
    assert not T.all_finite(s) and T.first_inf(s) == (1, 9)  # row-major: head 1 first
    with pytest.raises(ValueError, match=r"obcache_v aux score of head 1 row 9 is inf: .*"
                                         r"overflows float32"):
        C.scores_fit_float32("obcache_v", "aux score", s)
    s[0, 0] = np.nan
    with pytest.raises(ValueError, match="holds NaN"):
        C.no_nan("scores", s)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_torch_tensors_read_without_dlpack_equal_the_dlpack_path():
    """Exact torch.Tensor objects reach C++ through their attributes (no DLPack); subclasses
    (nn.Parameter), numpy and views whose memory does not hold their values as they read
    (negative-bit views) take nanobind's DLPack path or are refused, never read wrongly."""
    rng = np.random.default_rng(31)
    q, k, v = qkv(rng, 4, 2, 40, 16, 16)
    want = kvevict.score(q, k, v, "obcache_vk:spec")
    qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
    np.testing.assert_array_equal(kvevict.score(qt, kt, vt, "obcache_vk:spec").numpy(), want)
    kp = torch.nn.Parameter(kt.clone())  # a subclass: the DLPack path (after detach)
    np.testing.assert_array_equal(kvevict.score(qt, kp, vt, "obcache_vk:spec").numpy(), want)
    # A negative-bit view holds -k in memory for the values k: kvevict reads k (the extension
    # itself refuses the raw view rather than read -k).
    neg = torch._neg_view(torch.from_numpy(-k))
    assert neg.is_neg()
    np.testing.assert_array_equal(kvevict.score(qt, neg, vt, "obcache_vk:spec").numpy(), want)
    opts = kvevict.ext.score_options("obcache_vk:spec", None, None, None)
    with pytest.raises(ValueError, match="k is a negative-bit torch view"):
        kvevict.ext.score_workspace_bytes(qt, neg, vt, None, 0.0, opts)
    # Offsets into shared storage (a slice) and strides (a transpose) as torch reports them.
    big = torch.from_numpy(np.concatenate([np.zeros((1, 40, 16), np.float32), k]))
    np.testing.assert_array_equal(kvevict.score(qt, big[1:], vt, "obcache_vk:spec").numpy(), want)
    with pytest.raises(ValueError, match="dims; expected at most"):
        kvevict.ext.score_workspace_bytes(qt, kt[None, None, None, None], vt, None, 0.0, opts)


@pytest.mark.skipif(not (torch is not None and WANT_CUDA), reason="needs KVEVICT_TEST_CUDA=1")
def test_cuda_scratch_is_cached_per_stream_and_results_do_not_depend_on_it():
    from kvevict import _tensors as T

    rng = np.random.default_rng(32)
    q, k, v = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in qkv(rng, 8, 2, 300, 32, 64))
    T.release_scratch()
    a = kvevict.score(q, k, v, "snapkv", pool="max:7")
    assert len(T._SCRATCH) == 1
    buf = next(iter(T._SCRATCH.values()))
    b = kvevict.score(q, k, v, "snapkv", pool="max:7")
    assert next(iter(T._SCRATCH.values())) is buf  # reused, not reallocated
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.current_stream())
        c = kvevict.score(q, k, v, "snapkv", pool="max:7")
    torch.cuda.current_stream().wait_stream(side)
    assert len(T._SCRATCH) == 2  # one scratch per stream
    # (row blocks may accumulate with atomics: equal up to the order of float additions)
    span = float(a.abs().max())
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * span)
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5 * span)
    # A larger problem grows the scratch and still equals the reference ordering of kept sets.
    q2, k2, v2 = (torch.from_numpy(x).cuda().to(torch.bfloat16)
                  for x in qkv(rng, 8, 2, 5000, 32, 64))
    s2 = kvevict.score(q2, k2, v2, "snapkv", pool="max:7")
    assert T._SCRATCH[T.scratch_key(k2, T.stream_handle(k2))].numel() >= buf.numel()
    ref = kvevict.score(*(x.float().cpu().numpy() for x in (q2, k2, v2)), "snapkv",
                        pool="max:7", backend="reference")
    assert_close(s2.cpu().numpy(), ref, atol=2e-2 * float(np.abs(ref).max()), rtol=2e-2,
                 what="snapkv scores after the scratch grew")


@pytest.mark.skipif(not (torch is not None and WANT_CUDA), reason="needs KVEVICT_TEST_CUDA=1")
def test_cuda_select_folds_nan_into_a_device_word_without_reading_it():
    from kvevict import ops

    s = torch.rand((3, 50), device="cuda")
    opts = kvevict.ext.select_options("uniform", 0.5, None, 0.2, 0, 4)
    status = torch.full((2,), -1, dtype=torch.int64, device="cuda")
    clean = ops._select_cuda(s, None, opts, (status, 0))
    assert status.tolist() == [-1, -1]
    s[2, 7] = float("nan")
    s[1, 9] = float("nan")
    ops._select_cuda(s, None, opts, (status, 1))
    assert status.tolist() == [-1, 1 * 50 + 9]  # the first NaN element, row-major
    # Uniform selections carry their offsets on the host: compaction reads nothing back.
    assert clean._offsets_host is not None and list(clean.offsets_host()) == [0, 25, 50, 75]
    with pytest.raises(ValueError, match="NaN"):
        kvevict.select(s, 0.5, window=4)  # the public select still checks at once


@pytest.mark.skipif(not (torch is not None and WANT_CUDA), reason="needs KVEVICT_TEST_CUDA=1")
@pytest.mark.parametrize("policy", ["uniform", "adakv"])
def test_cuda_compaction_with_slack_equals_the_host_compaction(policy):
    """Compaction straight into the packed layout with slack (one row gather) == the host path:
    the same rows, positions and segment table, from strided [Hkv, n, d] views."""
    rng = np.random.default_rng(33)
    q, k, v = qkv(rng, 8, 4, 120, 8, 64)
    # [n, Hkv, d] storage viewed as [Hkv, n, d], as transformers' projections give it.
    kd = torch.from_numpy(np.ascontiguousarray(k.transpose(1, 0, 2))).cuda().to(
        torch.bfloat16).transpose(0, 1)
    vd = torch.from_numpy(np.ascontiguousarray(v.transpose(1, 0, 2))).cuda().to(
        torch.bfloat16).transpose(0, 1)
    qd = torch.from_numpy(q).cuda().to(torch.bfloat16)
    assert not kd.is_contiguous()
    sel = kvevict.select(kvevict.score(qd, kd, vd, "dropkv:spec"), 0.3, policy=policy, window=8)
    got = kvevict.compact(kd, vd, sel, slack=5)
    hsel = kvevict.Selection(sel.index.cpu().numpy(), sel.offsets.cpu().numpy())
    want = kvevict.compact(kd.float().cpu().numpy(), vd.float().cpu().numpy(), hsel, slack=5)
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.lens, want.lens)
    for h in range(4):
        gk, gv, gp = got.head(h)
        wk, wv, wp = want.head(h)
        np.testing.assert_array_equal(gp.cpu().numpy(), wp)
        np.testing.assert_array_equal(gk.float().cpu().numpy(), wk)
        np.testing.assert_array_equal(gv.float().cpu().numpy(), wv)
