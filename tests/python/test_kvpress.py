"""kvevict.kvpress inside kvpress's own pipeline (skipped when kvpress is not installed).

The cross-check: kvpress with ``DropKVPress`` (queries rebuilt from hidden states, kvpress's top-k
and gather) keeps, in every layer and head, the rows ``kvevict.hf.press`` keeps with the same
settings (post-RoPE queries taken from the attention itself, kvevict's selection)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
kvpress = pytest.importorskip("kvpress")

import kvevict.hf  # noqa: E402
from conftest import assert_same_kept  # noqa: E402
from kvevict.kvpress import DropKVPress, KVEvictScorerPress, OBCachePress  # noqa: E402
from kvevict.ops import Selection  # noqa: E402
from test_hf import tiny_model  # noqa: E402
from transformers import DynamicCache  # noqa: E402


def kept_rows(full_keys: torch.Tensor, kept_keys: torch.Tensor) -> Selection:
    """Which rows of full_keys [1, Hkv, n, d] the press kept (kept_keys [1, Hkv, k, d])."""
    hkv = full_keys.shape[1]
    index, offsets = [], [0]
    for h in range(hkv):
        eq = (kept_keys[0, h][:, None, :] == full_keys[0, h][None, :, :]).all(-1)  # [k, n]
        rows = sorted(int(eq[i].nonzero()[0, 0]) for i in range(eq.shape[0]))
        index += rows
        offsets.append(offsets[-1] + len(rows))
    off = np.array(offsets, dtype=np.int64)
    return Selection(np.array(index, dtype=np.int32), off, "", off)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("press_cls,method", [(DropKVPress, "dropkv"),
                                              (lambda **kw: OBCachePress(score="vk", **kw),
                                               "obcache_vk")])
@torch.no_grad()
def test_kvpress_keeps_what_kvevict_hf_keeps(family, press_cls, method):
    model = tiny_model(family)
    if model.device.type == "cuda":
        pytest.skip("the cross-check compares host float32 runs")
    ids = torch.randint(1, 96, (1, 64), generator=torch.Generator().manual_seed(7))
    full = DynamicCache()
    model(ids, past_key_values=full, use_cache=True)
    kw = dict(compression_ratio=0.5, window_size=16, pool="max:7")
    cache = DynamicCache()
    with press_cls(**kw)(model):
        model(ids, past_key_values=cache, use_cache=True)
    with kvevict.hf.press(model, method=method, compression_ratio=0.5, window=16,
                          pool="max:7") as p:
        model(ids)
    for i, layer in enumerate(p.cache.layers):
        assert cache.layers[i].keys.shape[2] == 32
        got = kept_rows(full.layers[i].keys, cache.layers[i].keys)
        scores = kvevict.score(layer_queries(model, i, ids), full.layers[i].keys[0],
                               full.layers[i].values[0], method, window=16, pool="max:7",
                               scale=model.model.layers[i].self_attn.scaling)
        assert_same_kept(got, layer.selection, scores.numpy(), 1e-4, f"layer {i}")


@pytest.mark.parametrize("press_cls,method", [(DropKVPress, "dropkv"),
                                              (lambda **kw: OBCachePress(score="vk", **kw),
                                               "obcache_vk")])
@torch.no_grad()
def test_press_defaults_are_the_librarys_measured_ones(press_cls, method):
    """window_size / pool left None: the method's defaults (32 queries, max-pooling 11), the
    same rows as kvevict.hf.press with its defaults."""
    defaults = kvevict.method_defaults(method)[0]
    assert (defaults.window, defaults.pool) == (32, "max:11")
    assert kvevict.method_defaults(method + ":spec")[0].window in (8, 16)
    model = tiny_model("llama")
    if model.device.type == "cuda":
        pytest.skip("the cross-check compares host float32 runs")
    ids = torch.randint(1, 96, (1, 80), generator=torch.Generator().manual_seed(9))
    full = DynamicCache()
    model(ids, past_key_values=full, use_cache=True)
    cache = DynamicCache()
    with press_cls(compression_ratio=0.5)(model):
        model(ids, past_key_values=cache, use_cache=True)
    with kvevict.hf.press(model, method=method, compression_ratio=0.5) as p:
        model(ids)
    for i, layer in enumerate(p.cache.layers):
        assert cache.layers[i].keys.shape[2] == 40
        got = kept_rows(full.layers[i].keys, cache.layers[i].keys)
        scores = kvevict.score(layer_queries(model, i, ids)[:, -32:], full.layers[i].keys[0],
                               full.layers[i].values[0], method,
                               scale=model.model.layers[i].self_attn.scaling)
        assert_same_kept(got, layer.selection, scores.numpy(), 1e-4, f"layer {i}")


def layer_queries(model, i, ids):
    """Post-RoPE queries of layer i for the prompt, captured from the attention call."""
    seen = {}

    def grab(module, query, key, value, attention_mask, *args, **kw):
        if module.layer_idx == i:
            seen["q"] = query[0]
        return kvevict.hf.attention._make(
            kvevict.hf.attention.sdpa_attention_forward)(module, query, key, value,
                                                         attention_mask, *args, **kw)

    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("kvevict_test_grab", grab)
    AttentionMaskInterface.register("kvevict_test_grab", sdpa_mask)
    model.set_attn_implementation("kvevict_test_grab")
    try:
        model(ids)
    finally:
        model.set_attn_implementation("sdpa")
    return seen["q"]


@pytest.mark.parametrize("inner", [lambda: DropKVPress(compression_ratio=0.6),
                                   lambda: OBCachePress(compression_ratio=0.6, score="k")])
@torch.no_grad()
def test_adakv_press_runs_kvevict_scorers(inner):
    model = tiny_model("llama")
    ids = torch.randint(1, 96, (1, 80), generator=torch.Generator().manual_seed(8))
    press = kvpress.AdaKVPress(inner())
    cache = DynamicCache()
    with press(model):
        model(ids, past_key_values=cache, use_cache=True)
    # AdaKV masks per head instead of shrinking: the evicted rows are recorded on each layer.
    for layer in model.model.layers:
        b, h, s = layer.self_attn.masked_key_indices
        assert len(s) == 2 * (80 - int(80 * 0.4))
    # A decode step through kvpress's patched attention (fake keys at the evicted rows).
    logits = model(torch.tensor([[5]]), past_key_values=cache, use_cache=True).logits
    assert logits.shape == (1, 1, 96) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("ratio,match", [(1.0, "compression_ratio is 1.0; expected 0 <= r < 1"),
                                         (-0.1, "compression_ratio is -0.1"),
                                         (float("nan"), "compression_ratio is nan"),
                                         ("0.5", r"compression_ratio is '0.5' \(str\)")])
def test_press_compression_ratio_is_a_value_error_naming_it(ratio, match):
    """kvpress's own check is an assert (AssertionError, no value named; a TypeError for a
    string)."""
    with pytest.raises(ValueError, match=match):
        DropKVPress(compression_ratio=ratio)
    with pytest.raises(ValueError, match=match):
        OBCachePress(compression_ratio=ratio, score="v")


@pytest.mark.parametrize("kwargs, match", [
    ({"pool": "max:4"}, "max:4"),
    ({"aggregate": "nope"}, "nope"),
    ({"method": "nope"}, "nope"),
])
def test_press_fields_are_checked_at_construction(kwargs, match):
    # They were accepted and failed inside the first model forward.
    with pytest.raises(ValueError, match=match):
        KVEvictScorerPress(compression_ratio=0.5, **kwargs)


@pytest.mark.parametrize("field, value, match", [
    ("compression_ratio", 1.5, "compression_ratio is 1.5"),
    ("pool", "max:4", "max:4"),
    ("window_size", 0, "window_size is 0"),
])
def test_press_fields_assigned_later_are_checked_and_left_unchanged(field, value, match):
    press = DropKVPress(compression_ratio=0.5)
    before = getattr(press, field)
    with pytest.raises(ValueError, match=match):
        setattr(press, field, value)
    assert getattr(press, field) == before
    press.compression_ratio = 0.25
    assert press.compression_ratio == 0.25
