"""kvevict.hf on tiny randomly initialised transformers models (built from configs, nothing is
downloaded): Llama, Qwen2 and Gemma 3.

The SPEC section 4 test through Hugging Face: after ``kvevict.hf.press`` evicted every layer at
prefill, the logits of the following tokens equal those of the same model attending over the FULL
cache with eager attention and the evicted keys of each layer and head masked out.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import kvevict  # noqa: E402
import kvevict.hf  # noqa: E402
from kvevict.hf.press import cache_kwarg  # noqa: E402
from transformers import AttentionInterface, DynamicCache  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, eager_mask  # noqa: E402

DEVICE = "cuda" if os.environ.get("KVEVICT_TEST_CUDA") == "1" else "cpu"
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
# CUDA kernels need d in {64, 128, 256}; the CPU runs use d = 16 to stay fast.
HEAD_DIM = 64 if DEVICE == "cuda" else 16
TOL = 3e-2 if DEVICE == "cuda" else 2e-4


def tiny_model(family: str):
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=512)
    torch.manual_seed(0)
    if family == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=2, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(num_hidden_layers=2, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.Gemma3TextConfig(
            num_hidden_layers=3, sliding_window=24, query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], **common)
        model = transformers.Gemma3ForCausalLM(cfg)
    model.set_attn_implementation("sdpa")
    return model.to(device=DEVICE, dtype=DTYPE).eval()


# The reference: eager attention over the full cache, evicted keys masked per layer and KV head.
KEEP = {}  # layer_idx -> bool [B, Hkv, n_prompt] of the kept prompt rows


def masked_eager(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                 **kwargs):
    b, hq, m, d = query.shape
    hkv, n_all = key.shape[1], key.shape[2]
    g = hq // hkv
    k = key.repeat_interleave(g, dim=1).float()
    v = value.repeat_interleave(g, dim=1).float()
    z = torch.matmul(query.float(), k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        z = z + attention_mask[..., :n_all].float()
    keep = KEEP.get(module.layer_idx)
    if keep is not None:
        n = keep.shape[-1]
        visible = torch.ones((b, hkv, n_all), dtype=torch.bool, device=key.device)
        visible[..., :n] = keep
        z = z.masked_fill(~visible.repeat_interleave(g, dim=1)[:, :, None, :], float("-inf"))
    p = torch.softmax(z, dim=-1)
    return torch.matmul(p, v).to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register("kvevict_test_masked", masked_eager)
AttentionMaskInterface.register("kvevict_test_masked", eager_mask)

FAMILIES = ["llama", "qwen2", "gemma3"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method,policy", [("dropkv", "adakv"), ("obcache_vk", "uniform"),
                                           ("snapkv", "adakv")])
@torch.no_grad()
def test_logits_equal_masked_full_attention(family, method, policy):
    model = tiny_model(family)
    kw = cache_kwarg(model)
    ids = torch.randint(1, 96, (2, 48), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    nxt = torch.randint(1, 96, (2, 3), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    window = 8 if method != "obcache_vk" else 16
    with kvevict.hf.press(model, method=method, budget=0.5, policy=policy, window=window) as p:
        pre = model(ids).logits
        cache = p.cache
        steps = [model(nxt[:, i:i + 1], **{kw: cache}).logits for i in range(3)]
    assert isinstance(cache, kvevict.hf.KVEvictCache)
    assert model.config._attn_implementation == "sdpa"  # restored
    for layer in cache.layers:
        assert layer.compacted is not None and layer.keys is None
        assert layer.selection.total == 2 * 2 * 24  # B * Hkv * floor(0.5 * 48)
        assert layer.seen == 51

    # Reference: full prefill (no eviction), then the same three tokens with masked attention.
    ref_cache = DynamicCache()  # full layers: the reference keeps every row
    ref_pre = model(ids, **{kw: ref_cache}, use_cache=True).logits
    torch.testing.assert_close(pre, ref_pre, atol=TOL, rtol=TOL)  # prefill attends in full
    KEEP.clear()
    for i, layer in enumerate(cache.layers):
        KEEP[i] = layer.selection.mask(48).reshape(2, 2, 48)
    model.set_attn_implementation("kvevict_test_masked")
    try:
        for i in range(3):
            ref = model(nxt[:, i:i + 1], **{kw: ref_cache}, use_cache=True).logits
            torch.testing.assert_close(steps[i], ref, atol=TOL, rtol=TOL)
    finally:
        model.set_attn_implementation("sdpa")
        KEEP.clear()


@pytest.mark.parametrize("family", FAMILIES)
@torch.no_grad()
def test_generate_runs_and_memory_shrinks(family):
    model = tiny_model(family)
    ids = torch.randint(1, 96, (1, 200), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with kvevict.hf.press(model, method="dropkv", budget=0.1, policy="adakv", slack=8,
                          window=8) as p:
        out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 206)
    d = HEAD_DIM * torch.empty((), dtype=DTYPE).element_size()
    full = model.config.num_hidden_layers * 2 * 2 * 205 * d  # layers * K,V * Hkv * tokens
    kept = p.cache.kv_bytes()
    # 10% of 200 tokens (+ 8 slack rows, 5 of them used by the appended tokens) per head.
    assert kept == model.config.num_hidden_layers * 2 * 2 * (20 + 8) * d
    assert kept < 0.15 * full
    for s in p.cache.stats():
        assert s.rows_before == 2 * 200 and s.rows_kept == 2 * 20


@torch.no_grad()
def test_query_agnostic_question_attends_over_the_compacted_context():
    model = tiny_model("llama")
    kw = cache_kwarg(model)
    ctx = torch.randint(1, 96, (1, 64), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    question = torch.randint(1, 96, (1, 5), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with kvevict.hf.press(model, method="snapkv", budget=0.25, query_aware=False,
                          window=8) as p:
        cache = p.prefill(ctx)
        got = model(question, **{kw: cache}).logits  # 5 tokens appended, causal by position
        out = p.generate(ctx, question, max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 73)
    ref_cache = DynamicCache()  # full layers: the reference keeps every row
    model(ctx, **{kw: ref_cache}, use_cache=True)
    KEEP.clear()
    for i, layer in enumerate(cache.layers):
        KEEP[i] = layer.selection.mask(64).reshape(1, 2, 64)
    model.set_attn_implementation("kvevict_test_masked")
    try:
        ref = model(question, **{kw: ref_cache}, use_cache=True).logits
    finally:
        model.set_attn_implementation("sdpa")
        KEEP.clear()
    torch.testing.assert_close(got, ref, atol=TOL, rtol=TOL)


@pytest.mark.skipif(DEVICE == "cuda", reason="decode-time eviction runs on host caches")
@torch.no_grad()
def test_decode_time_eviction_bounds_every_layer():
    model = tiny_model("qwen2")
    ids = torch.randint(1, 96, (1, 40), generator=torch.Generator().manual_seed(6))
    with kvevict.hf.press(model, prefill=False, decode_budget=32, decode_slack=4,
                          decode_recent=8, decode_score="dropkv") as p:
        out = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert out.shape == (1, 60)
    for layer in p.cache.layers:
        assert (layer.compacted.lens <= 32 + 4).all()
        assert layer.seen == 59


@torch.no_grad()
def test_padding_and_nested_presses_are_refused():
    model = tiny_model("llama")
    ids = torch.randint(1, 96, (2, 10)).to(DEVICE)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with kvevict.hf.press(model, budget=0.5):
        with pytest.raises(ValueError, match="attention_mask has padding"):
            model.generate(ids, attention_mask=mask, max_new_tokens=2)
        with pytest.raises(ValueError, match="already inside a kvevict.hf.press"):
            with kvevict.hf.press(model):
                pass
    with pytest.raises(ValueError, match="budget"):
        with kvevict.hf.press(model, budget=0):
            pass


def test_bad_settings_raise_before_the_model_runs():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="unknown method|expected one of"):
        with kvevict.hf.press(model, method="nope"):
            pass
    assert np.isfinite(0)  # the model was left untouched
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@torch.no_grad()
def test_long_decode_equals_masked_reference_past_the_slack(family):
    """Batch 2, 24 decode steps with slack 5 (the compacted layers are re-spaced four times):
    every step's logits equal eager attention over the full cache with the evicted prompt rows
    masked. On CUDA (bf16, d = 64) the llama layers decode through kvevict.decode_attention (the
    device segment table, no host copy); gemma3's sliding layers take kvevict.attention."""
    model = tiny_model(family)
    kw = cache_kwarg(model)
    n, steps = 40, 24
    ids = torch.randint(1, 96, (2, n), generator=torch.Generator().manual_seed(11)).to(DEVICE)
    nxt = torch.randint(1, 96, (2, steps), generator=torch.Generator().manual_seed(12)).to(DEVICE)
    with kvevict.hf.press(model, method="dropkv", budget=0.25, policy="adakv", window=8,
                          slack=5) as p:
        model(ids)
        cache = p.cache
        got = [model(nxt[:, i:i + 1], **{kw: cache}).logits for i in range(steps)]
    for layer in cache.layers:
        assert layer.seen == n + steps
        assert (layer.compacted.lens == layer.selection.counts() + steps).all()
        assert layer.compacted.capacity == layer.selection.total + 2 * 2 * 5 * 5
    ref_cache = DynamicCache()
    model(ids, **{kw: ref_cache}, use_cache=True)
    KEEP.clear()
    for i, layer in enumerate(cache.layers):
        KEEP[i] = layer.selection.mask(n).reshape(2, 2, n)
    model.set_attn_implementation("kvevict_test_masked")
    try:
        for i in range(steps):
            ref = model(nxt[:, i:i + 1], **{kw: ref_cache}, use_cache=True).logits
            torch.testing.assert_close(got[i], ref, atol=TOL, rtol=TOL)
    finally:
        model.set_attn_implementation("sdpa")
        KEEP.clear()


@torch.no_grad()
def test_nan_scores_raise_from_the_forward_pass(monkeypatch):
    """A NaN score in any layer's prefill eviction raises from the forward pass that evicted
    (on CUDA the check is read once at the end of the pass, naming the layer; on the host
    select raises at once), and a clean pass after it works."""
    model = tiny_model("llama")
    ids = torch.randint(1, 96, (1, 40)).to(DEVICE)
    real = kvevict.score
    calls = []

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:  # layer 1 of the first pass
            scores = out[0] if isinstance(out, tuple) else out
            scores[1, 3] = float("nan")
        return out

    with kvevict.hf.press(model, budget=0.5) as p:
        monkeypatch.setattr(kvevict, "score", poisoned)
        where = r"layer 1: .*NaN \(head 1 row 3" if DEVICE == "cuda" else "NaN"
        with pytest.raises(ValueError, match=where):
            model(input_ids=ids, use_cache=True)
        monkeypatch.setattr(kvevict, "score", real)
        model(input_ids=ids, use_cache=True)
        assert all(layer.compacted is not None for layer in p.cache.layers)
        assert p.cache._pending == []
