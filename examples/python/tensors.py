#!/usr/bin/env python3
"""kvevict on numpy arrays: score one layer with DropKV, keep 10% with AdaKV budgets, compact, and
check that attention over the compacted cache equals full attention with the evicted rows masked.

    python examples/python/tensors.py
"""

import numpy as np

import kvevict

rng = np.random.default_rng(0)
hq, hkv, n, d, w = 32, 8, 4096, 128, 32  # the Llama-3.1-8B layer shape, a 4K prompt, dropkv's window
q = rng.standard_normal((hq, w, d), dtype=np.float32)
k = rng.standard_normal((hkv, n, d), dtype=np.float32)
v = rng.standard_normal((hkv, n, d), dtype=np.float32)

scores = kvevict.score(q, k, v, method="dropkv")                  # [Hkv, n] float32
sel = kvevict.select(scores, budget=0.1, policy="adakv", window=w)
cache = kvevict.compact(k, v, sel)
print(f"kept per head: {sel.counts().tolist()} (total {sel.total} of {hkv * n})")
print(f"KV bytes: {k.nbytes + v.nbytes} -> {cache.nbytes()}")

q_new = rng.standard_normal((hq, 1, d), dtype=np.float32)
out = kvevict.attention(q_new, cache, q_pos=[n - 1])
full = kvevict.KVCache.from_dense(k, v)
ref = kvevict.attention(q_new, full, q_pos=[n - 1])  # every row visible: differs, as it should
print(f"attention over the kept rows: {out.shape}, max |out - full| = {np.abs(out - ref).max():.3g}")
