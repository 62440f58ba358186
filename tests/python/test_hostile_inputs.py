"""Inputs a hostile caller can build cheaply: sizes past what the library indexes (zero-stride
views, no big allocation), integers that do not fit int32, budgets that keep nothing, NaN in a
decode step, arrays of another kind than the usual one. Each is a ValueError naming the argument,
never a crash, a hang or a silent wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

import kvevict
from conftest import qkv, torch


def huge(shape):
    """A float32 array of `shape` over one element (every stride 0): sizes past 2^31 for free."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape,
                                           strides=(0,) * len(shape))


@pytest.mark.parametrize("shape, dim", [
    ((1, 2, 2**32), 2), ((1, 2, 2**31), 2), ((1, 2, 2**32 + 16), 2), ((2**32, 1, 4), 0)])
@pytest.mark.parametrize("method", ["knorm", "keydiff", "streamingllm", "random"])
def test_dims_past_int32_are_refused_naming_the_tensor_and_dim(shape, dim, method):
    # d = 2^32 became 0 in ScoreProblem::head_dim(): segfaults, and a hang in LayerEvictor.plan.
    k = huge(shape)
    with pytest.raises(ValueError, match=rf"k has shape .*: dim {dim} is {shape[dim]}; "
                                         r"expected at most 2147483647"):
        kvevict.score(None, k, k, method)
    with pytest.raises(ValueError, match=rf"dim {dim} is {shape[dim]}"):
        kvevict.LayerEvictor(method, 0.5).plan(None, k, k)


def test_query_dims_past_int32_are_refused():
    k = huge((1, 2, 2**31))
    with pytest.raises(ValueError, match=r"dim 2 is 2147483648"):
        kvevict.score(k[:, :1], k, k, "dropkv", window=1)


@pytest.mark.parametrize("bad", [2**32 + 5, -2**32 + 3, 2**31])
def test_selection_indices_that_do_not_fit_int32_are_refused_not_wrapped(bad):
    rng = np.random.default_rng(0)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    for make in [np.array] + ([torch.tensor] if torch is not None else []):
        sel = kvevict.Selection(make([0, bad]), make([0, 1, 2]))
        with pytest.raises(ValueError, match=rf"selection.index holds {bad}; expected row"):
            kvevict.compact(k, v, sel)


def test_selection_offsets_must_be_one_dimensional():
    rng = np.random.default_rng(0)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    sel = kvevict.Selection(np.array([0, 1, 2], np.int32), np.array([[0, 2, 3]]))
    with pytest.raises(ValueError, match=r"selection.offsets has shape \(1, 3\); expected"):
        kvevict.compact(k, v, sel)


def test_a_budget_that_keeps_no_token_names_the_budget_and_n():
    rng = np.random.default_rng(1)
    s = rng.random((2, 20)).astype(np.float32)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    with pytest.raises(ValueError, match=r"budget 0\.04 keeps 0 of 20 tokens"):
        kvevict.select(s, 0.04)
    with pytest.raises(ValueError, match=r"keeps 0 of 20 tokens"):
        kvevict.select(s, compression_ratio=0.999)
    with pytest.raises(ValueError, match=r"budget 0\.04 keeps 0 of 20 tokens"):
        kvevict.LayerEvictor("knorm", 0.04).evict(None, k, v)
    # One token is a budget: floor(0.05 * 20) = 1.
    assert kvevict.select(s, 0.05).total == 2


def test_empty_arrays_are_contiguous():
    # A 0-element array was refused as non-contiguous (its strides are the producer's choice).
    rng = np.random.default_rng(2)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    sel = kvevict.Selection(np.array([], np.int32), np.array([0, 0, 0], np.int64))
    out = kvevict.compact(k, v, sel)
    assert out.total_len() == 0
    cache = kvevict.KVCache.from_dense(k[:, :0], v[:, :0], slack=1)
    assert cache.total_len() == 0


def decode_setup(seed=3):
    rng = np.random.default_rng(seed)
    _, k, v = qkv(rng, 4, 2, 20, 1, 16)
    cache = kvevict.KVCache.from_dense(k, v, slack=4, score_acc=True)
    q = rng.standard_normal((4, 16)).astype(np.float32)
    a, lse = kvevict.attention(q[:, None], cache, q_pos=20, return_lse=True)
    return cache, q, a[:, 0], lse[:, 0]


@pytest.mark.parametrize("what", ["q", "a", "lse"])
@pytest.mark.parametrize("score", ["h2o", "tova", "dropkv", "obcache_vk"])
def test_decode_step_refuses_nan_and_leaves_the_cache_as_it_was(what, score):
    cache, q, a, lse = decode_setup()
    dec = kvevict.DecodeEvictor(score, budget=4, recent=0)
    step = {"q": q, "a": a, "lse": lse}
    step[what] = step[what].copy()
    step[what][0] = np.nan
    acc, pos = cache.score_acc.copy(), cache.pos.copy()
    with pytest.raises(ValueError, match=rf"step {what} holds a non-finite value \(nan\) at \[0"):
        dec.step(cache, step["q"], step["a"], step["lse"])
    np.testing.assert_array_equal(cache.score_acc, acc)
    np.testing.assert_array_equal(cache.pos, pos)


def test_decode_step_checks_lse_against_the_cache():
    # lse was never read: any value (an lse of another cache, or of another scale) passed.
    cache, q, a, lse = decode_setup()
    dec = kvevict.DecodeEvictor("h2o", budget=4, recent=0)
    acc = cache.score_acc.copy()
    with pytest.raises(ValueError, match=r"step lse\[1\] is .* but q and the cache give"):
        dec.step(cache, q, a, lse + np.array([0, 1, 0, 0], np.float32))
    np.testing.assert_array_equal(cache.score_acc, acc)
    assert dec.step(cache, q, a, lse) == 2 * (20 - 4)


def test_read_only_cache_is_named():
    cache, q, a, lse = decode_setup()
    cache.k.flags.writeable = False
    with pytest.raises(ValueError, match="cache.k is read-only; expected a writable array"):
        kvevict.DecodeEvictor("h2o", budget=4, recent=0).evict(cache)


def test_memmap_inputs_are_numpy_arrays(tmp_path):
    rng = np.random.default_rng(4)
    _, k, v = qkv(rng, 4, 2, 20, 8, 16)
    np.save(tmp_path / "k.npy", k)
    km = np.load(tmp_path / "k.npy", mmap_mode="r")
    np.testing.assert_array_equal(kvevict.score(None, km, v, "knorm"),
                                  kvevict.score(None, k, v, "knorm"))


def test_zero_kv_heads_are_a_value_error():
    z = np.zeros((0, 20, 16), np.float32)
    with pytest.raises(ValueError, match=r"k has shape \(0, 20, 16\); expected .* at least 1 KV"):
        kvevict.score(np.zeros((0, 8, 16), np.float32), z, z, window=8)
    with pytest.raises(ValueError, match=r"at least 1 KV head"):
        kvevict.KVCache.from_dense(z, z)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_tensors_on_devices_kvevict_cannot_read_are_named():
    # A meta tensor was "not an array; expected a numpy array, a torch tensor or None".
    q, k, v = (torch.from_numpy(x).to("meta") for x in qkv(np.random.default_rng(3)))
    with pytest.raises(ValueError, match=r"lives on device meta; expected a CPU or CUDA tensor"):
        kvevict.score(q, k, v, "dropkv", window=8)
    with pytest.raises(ValueError, match=r"lives on device meta"):
        kvevict.score(None, k, v, "knorm")
