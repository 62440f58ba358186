"""The CUDA path's Python plumbing on the host: kvevict.hf's prefill eviction as it runs on a GPU
(``_evict_prefill_cuda``: score -> ``ops._select_cuda`` with the device NaN word ->
``ops._compact_rows_cuda`` into the packed layout with slack, the NaN words read at the end of
the forward pass), with the four device bindings it calls emulated by the host kernels. CI has no
GPU: this checks the layouts, offsets, positions and the deferred check the device run relies
on; the kernels themselves are checked on the H200 (KVEVICT_TEST_CUDA=1)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import kvevict  # noqa: E402
import kvevict.hf.cache as hc  # noqa: E402
import test_hf  # noqa: E402
from kvevict import _tensors as T  # noqa: E402
from kvevict import ops  # noqa: E402
from kvevict._ext import ext  # noqa: E402


def _score(q, k, v, wo, s, opts, scores, aux, ws, stream):
    if ws is None or ws.numel() < 4096:  # the binding's "grow the scratch" answer
        return 4096
    host_ws = T.workspace(k, ext.score_workspace_bytes(q, k, v, wo, s, opts))
    ext.score("cpu", q, k, v, wo, s, opts, scores, aux, host_ws)
    return 0


def _select(scores, aux, n_keep, opts, kept, offsets, ws, stream):
    # The device select does not check NaN (they rank first); the host one would raise.
    sel = ext.select("cpu", torch.nan_to_num(scores).contiguous(), aux, opts)
    idx, off = np.empty(sel.total, np.int32), np.empty(sel.num_kv_heads + 1, np.int64)
    sel.copy_into(idx, off)
    assert sel.total == kept.numel() == n_keep * (len(off) - 1)
    kept.copy_(torch.from_numpy(idx))
    offsets.copy_(torch.from_numpy(off))
    return 0


def _find_nan(x, status, slot, stream):
    bad = torch.nonzero(torch.isnan(x.reshape(-1)))
    if bad.numel() and (int(status[slot]) == -1 or int(bad[0, 0]) < int(status[slot])):
        status[slot] = int(bad[0, 0])


def _compact(k, v, pos, kept, offsets, slack, out_k, out_v, out_pos, stream):
    off = offsets.tolist()
    assert out_k.shape[0] == kept.numel() + k.shape[0] * slack
    for h in range(k.shape[0]):
        idx = kept[off[h]:off[h + 1]].long()
        dst = off[h] + h * slack
        out_k[dst:dst + len(idx)] = k[h, idx]
        out_v[dst:dst + len(idx)] = v[h, idx]
        out_pos[dst:dst + len(idx)] = (idx if pos is None else pos[h, idx]).to(torch.int32)


@pytest.fixture
def emulated_cuda(monkeypatch):
    if test_hf.DEVICE == "cuda":
        pytest.skip("the real kernels run on this machine")
    for name, fn in dict(cuda_score=_score, cuda_select=_select, cuda_find_nan=_find_nan,
                         cuda_compact=_compact, cuda_score_supported=lambda m: True,
                         cuda_protected_count=lambda n, sink, w: min(n, sink + w)).items():
        monkeypatch.setattr(ext, name, fn, raising=False)
    monkeypatch.setattr(ext, "cuda_built", True)
    monkeypatch.setattr(T, "stream_handle", lambda x: 0)
    ops._cuda_score_supported.cache_clear()
    on = [False]
    real_backend = ops._backend_for
    monkeypatch.setattr(ops, "_backend_for", lambda x, b: "cuda" if on[0] else real_backend(x, b))

    def evict(self, query, scaling, module=None):
        on[0] = True
        try:
            self._evict_prefill_cuda(query, scaling, None)
        finally:
            on[0] = False

    monkeypatch.setattr(hc.KVEvictLayer, "evict_prefill", evict)
    yield
    ops._cuda_score_supported.cache_clear()
    T.release_scratch()  # host tensors the emulation cached under the CUDA key


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("method,policy", [("dropkv", "adakv"), ("obcache_vk", "uniform")])
def test_cuda_hook_logits_equal_masked_full_attention(emulated_cuda, family, method, policy):
    test_hf.test_logits_equal_masked_full_attention.__wrapped__(family, method, policy)


def test_cuda_hook_long_decode_past_the_slack(emulated_cuda):
    test_hf.test_long_decode_equals_masked_reference_past_the_slack.__wrapped__("llama")


@torch.no_grad()
def test_cuda_hook_nan_raises_at_the_end_of_the_pass_naming_the_layer(emulated_cuda,
                                                                       monkeypatch):
    model = test_hf.tiny_model("llama")
    ids = torch.randint(1, 96, (1, 40))
    real, calls = kvevict.score, []

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            out[0][1, 3] = float("nan")
        return out

    with kvevict.hf.press(model, budget=0.5) as p:
        monkeypatch.setattr(kvevict, "score", poisoned)
        with pytest.raises(ValueError, match=r"layer 1: .*NaN \(head 1 row 3"):
            model(input_ids=ids, use_cache=True)
        assert all(layer.compacted is not None for layer in p.cache.layers)  # it evicted on
        monkeypatch.setattr(kvevict, "score", real)
        model(input_ids=ids, use_cache=True)
        assert p.cache._pending == []
