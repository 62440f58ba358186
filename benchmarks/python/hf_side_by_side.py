#!/usr/bin/env python3
r"""Side by side on the Llama-3.1-8B shape (random bf16 weights, 32K prompt), one command:

  1. HF without eviction (DynamicCache, sdpa);
  2. HF + kvpress SnapKVPress(compression_ratio=0.9) (kvpress's defaults: window 64, avg pool 5);
  3. HF + kvevict.hf.press(method="dropkv", budget=0.1) (real compaction).

For each: prefill time (median of --repeats), peak GPU memory during prefill
(torch.cuda.max_memory_allocated), the KV bytes held after prefill, and decode tokens/s at the
largest batch that fits (the batch's cache is one prefilled row replicated, then --decode-steps
greedy steps). Prefill: each configuration is warmed up once, then --repeats rounds alternate the
configurations (A B C A B C ...); the eviction overhead is the per-round paired difference
(median [min, max]). Scorers: CUDA events over back-to-back calls after a warm-up, median of
samples, and the latency of one synchronous call. Then the scorers alone on one layer's tensors: kvevict.score (snapkv with
kvpress's settings, and dropkv) against SnapKVPress.score, plus the press interfaces
(kvevict.kvpress.DropKVPress.score vs SnapKVPress.score, both rebuilding the window queries).
Goals (issue 15): eviction overhead <= 3% of the HF prefill, peak KV = the kept fraction,
scoring >= 20x faster than kvpress's scorer.

Run it through tools/python_gpu_check.sh (it installs the wheels below and prints the table).

Preparing the wheels HERE (the development machine; the device has Python 3.12, torch 2.11,
transformers 5.17, no kvpress, no network):

  # the kvevict wheel, cp312 (abi3), CUDA backend for sm_90a, no -march=native:
  /root/.pyenv/versions/3.12.1/bin/python -m venv /tmp/kvwheel312
  /tmp/kvwheel312/bin/pip install nanobind scikit-build-core
  CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache \
    /tmp/kvwheel312/bin/pip wheel --no-build-isolation --no-deps -w .whl . \
      -C cmake.define.KVEVICT_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a \
      -C cmake.define.KVEVICT_NATIVE=OFF -C build-dir=build/python/cp312-cuda
  # kvpress 0.5.5 and the transformers it supports (< 5.3), for cp312 (the device's notes;
  # .whl/ is git-ignored). fire 0.6 has no wheel: 0.7.1 imports the same way. tokenizers 0.22.2
  # because transformers 5.2 checks <= 0.23.0 at import (the device's 5.17 brought 0.23.x).
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux1_x86_64 -d .whl kvpress==0.5.5 transformers==5.2.0 \
      tokenizers==0.22.2 cachetools==5.5.2 fire==0.7.1 termcolor requests urllib3 idna \
      charset_normalizer certifi
  # (21 MiB with the kvevict wheel.) kvpress imports `datasets` at import time for presses not
  # used here; the check script gives it an empty stand-in instead of carrying pyarrow + pandas.
  # huggingface-hub, safetensors, regex, tqdm, pyyaml come from the device's transformers 5.17.

Smoke test without a GPU (tiny shapes, CPU, no timing goals):
  python benchmarks/python/hf_side_by_side.py --tiny --device cpu
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time

import numpy as np
import torch
import transformers
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import kvevict
import kvevict.hf
from kvevict.hf.press import cache_kwarg

try:
    import kvpress
    from kvevict.kvpress import DropKVPress
except ImportError:  # kvpress rows are skipped
    kvpress = None

GiB = 1024 ** 3


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def llama_31_8b(tiny: bool) -> LlamaConfig:
    if tiny:
        return LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                           num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                           head_dim=64, max_position_embeddings=8192, rope_theta=500000.0)
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=131072, rope_theta=500000.0,
                       rms_norm_eps=1e-5)


def build_model(cfg, device, dtype):
    torch.manual_seed(0)
    with torch.device(device):
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = LlamaForCausalLM(cfg)
        finally:
            torch.set_default_dtype(old)
    model.set_attn_implementation("sdpa")
    return model.eval()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def kv_bytes(cache) -> int:
    if isinstance(cache, kvevict.hf.KVEvictCache):
        return cache.kv_bytes()
    return sum(2 * layer.keys.numel() * layer.keys.element_size() for layer in cache.layers)


def prefill(model, ids, make_cache, context, device):
    """One prefill; returns (seconds, peak bytes during it, cache)."""
    cache = make_cache()
    kw = cache_kwarg(model)
    sync(device)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with context():
        model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: cache})
    sync(device)
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return dt, peak, cache


def replicate(cache, batch: int):
    """A batch of `batch` identical rows from a batch-1 cache (decode throughput only)."""
    if isinstance(cache, kvevict.hf.KVEvictCache):
        for layer in cache.layers:
            c = layer.compacted
            starts = c.offsets[:-1][None, :] + c.capacity * np.arange(batch)[:, None]
            c.offsets = np.concatenate([starts.reshape(-1), [batch * c.capacity]]).astype(np.int64)
            c.lens = np.tile(c.lens, batch)
            c.k, c.v, c.pos = c.k.repeat(batch, 1), c.v.repeat(batch, 1), c.pos.repeat(batch)
            layer.batch = batch
        return cache
    for layer in cache.layers:
        layer.keys = layer.keys.expand(batch, -1, -1, -1).contiguous()
        layer.values = layer.values.expand(batch, -1, -1, -1).contiguous()
    return cache


def decode_rate(model, cache, batch, steps, device, context):
    kw = cache_kwarg(model)
    tok = torch.zeros((batch, 1), dtype=torch.long, device=device)
    with context():
        model(input_ids=tok, use_cache=True, **{kw: cache})  # warm-up step
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=tok, use_cache=True, **{kw: cache})
            tok = out.logits[:, -1:].argmax(-1)
        sync(device)
    return batch * steps / (time.perf_counter() - t0)


def largest_batch(model, make_row_cache, per_row_bytes, device, steps, context, cap):
    """Decode tokens/s at the largest batch whose replicated cache + decode step fit."""
    if device != "cuda":
        batch = 2
    else:
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        batch = max(1, min(cap, int(0.85 * free / max(per_row_bytes, 1))))
    while batch >= 1:
        try:
            cache = replicate(make_row_cache(), batch)
            rate = decode_rate(model, cache, batch, steps, device, context)
            del cache
            return batch, rate
        except torch.OutOfMemoryError:
            cache = None
            torch.cuda.empty_cache()
            batch = int(batch * 0.85)
    return 0, 0.0


def time_cuda(fn, repeats, device, calls=50, warmup=10):
    """Per-call seconds of fn: `warmup` calls, then `repeats` samples of `calls` back-to-back calls
    timed with CUDA events (the device's time for a stream of calls, what a pipeline sees; the
    host's launch overhead counts only where it exceeds the device's work). Returns (median, min,
    max) over the samples, and the synchronous latency (median of single calls, each followed
    by a synchronization) as a 4th value."""
    for _ in range(warmup):
        fn()
    sync(device)
    per_call, host = [], []
    for _ in range(repeats):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            host.append((time.perf_counter() - t0) / calls)
            b.record()
            b.synchronize()
            per_call.append(a.elapsed_time(b) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call.append((time.perf_counter() - t0) / calls)
            host.append(per_call[-1])
    lat = []
    for _ in range(max(5, repeats)):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        lat.append(time.perf_counter() - t0)
    return (statistics.median(per_call), min(per_call), max(per_call), statistics.median(lat),
            statistics.median(host))


def scorer_times(model, n, device, repeats):
    """kvevict's scorers vs kvpress's on one layer's tensors of a 32K prompt: the scorers alone
    (score()) and the whole press step (compress(): score + top-k + gather of the kept rows)."""
    cfg = model.config
    attn = model.model.layers[0].self_attn
    g = torch.Generator(device=device).manual_seed(1)
    hs = torch.randn((1, n, cfg.hidden_size), generator=g, device=device, dtype=model.dtype)
    keys = torch.randn((1, cfg.num_key_value_heads, n, cfg.head_dim), generator=g,
                       device=device, dtype=model.dtype)
    values = torch.randn_like(keys)
    pos = torch.arange(n, device=device)[None]
    kwargs = {"position_embeddings": model.model.rotary_emb(hs, pos), "hidden_states": hs}
    q64 = torch.randn((cfg.num_attention_heads, 64, cfg.head_dim), generator=g, device=device,
                      dtype=model.dtype)
    q8 = q64[:, -8:].contiguous()
    k0, v0 = keys[0], values[0]
    rows = {}
    with torch.no_grad():
        rows["kvevict.score snapkv w=64 avg:5 (kernel)"] = time_cuda(
            lambda: kvevict.score(q64, k0, v0, "snapkv", window=64, pool="avg:5",
                                  check_finite=False), repeats, device)
        rows["kvevict.score dropkv w=8 (kernel)"] = time_cuda(
            lambda: kvevict.score(q8, k0, v0, "dropkv", check_finite=False), repeats, device)
        rows["kvevict.score dropkv w=8, NaN check (syncs)"] = time_cuda(
            lambda: kvevict.score(q8, k0, v0, "dropkv"), repeats, device)
        if kvpress is not None:
            from kvevict.kvpress import OBCachePress

            snap = kvpress.SnapKVPress(compression_ratio=0.9)
            drop = DropKVPress(compression_ratio=0.9)
            obc = OBCachePress(compression_ratio=0.9, score="vk")
            rows["kvpress SnapKVPress.score (w=64, avg 5)"] = time_cuda(
                lambda: snap.score(attn, hs, keys, values, None, kwargs), repeats, device)
            rows["kvevict.kvpress DropKVPress.score (w=8, queries rebuilt)"] = time_cuda(
                lambda: drop.score(attn, hs, keys, values, None, kwargs), repeats, device)
            rows["kvevict.kvpress OBCachePress.score vk (w=16, max:7)"] = time_cuda(
                lambda: obc.score(attn, hs, keys, values, None, kwargs), repeats, device)
            for label, press in (("kvpress SnapKVPress", snap), ("kvevict.kvpress DropKVPress",
                                                                  drop),
                                 ("kvevict.kvpress OBCachePress vk", obc)):
                rows[f"{label}.compress (whole hook: score + top-k + gather)"] = time_cuda(
                    lambda p=press: p.compress(attn, hs, keys, values, None, kwargs), repeats,
                    device)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    device = args.device
    n = min(args.prompt, 1024) if args.tiny else args.prompt
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(llama_31_8b(args.tiny), device, dtype)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"# HF side by side: Llama-3.1-8B shape{' (tiny)' if args.tiny else ''}, random "
          f"{str(dtype).replace('torch.', '')} weights, prompt {n}, {name}; torch "
          f"{torch.__version__}, transformers {transformers.__version__}, kvpress "
          f"{_version('kvpress') if kvpress else 'absent'}, kvevict {kvevict.__version__}",
          flush=True)
    ids = torch.randint(1, model.config.vocab_size, (1, n), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))

    nothing = contextlib.nullcontext
    runs = [("HF, no eviction", DynamicCache, nothing, nothing)]
    if kvpress is not None:
        snap = kvpress.SnapKVPress(compression_ratio=0.9)
        runs.append(("HF + kvpress SnapKVPress 0.9", DynamicCache, lambda: snap(model), nothing))
    else:
        print("kvpress is not installed: its row is skipped", file=sys.stderr)
    p_holder = {}

    def kv_press():
        cm = kvevict.hf.press(model, method="dropkv", budget=0.1, slack=32)
        return _Enter(cm, p_holder)

    runs.append(("HF + kvevict dropkv 10%", lambda: None, kv_press, kv_press))

    # Prefill: every configuration warmed up once (untimed), then rounds A B C A B C ... so drift
    # (clocks, allocator state) hits every configuration alike; per-round paired differences give
    # the eviction overhead with its spread.
    results = []
    with torch.no_grad():
        times = {label: [] for label, *_ in runs}
        peaks = {label: [] for label, *_ in runs}
        for rnd in range(args.repeats + 1):
            for label, make_cache, ctx, _ in runs:
                dt, peak, cache = prefill(model, ids, make_cache, ctx, device)
                if rnd > 0:  # round 0 is the warm-up
                    times[label].append(dt)
                    peaks[label].append(peak)
                del cache  # nothing of one configuration stays while another is measured
                p_holder.pop("press", None)
                if device == "cuda":
                    torch.cuda.empty_cache()
        for label, make_cache, ctx, decode_ctx in runs:
            _, _, row_cache = prefill(model, ids, make_cache, ctx, device)  # for decoding
            if row_cache is None:
                row_cache = p_holder.pop("press").cache
            kvb = kv_bytes(row_cache)

            def make_row(rc=row_cache):
                return _clone_cache(rc)

            batch, rate = largest_batch(model, make_row, kvb * 1.3 + 64 * 2 ** 20, device,
                                        args.decode_steps, decode_ctx, args.max_batch)
            t = times[label]
            results.append(dict(run=label, prefill_s=statistics.median(t), prefill_min_s=min(t),
                                prefill_max_s=max(t), prefill_all_s=t,
                                peak_gib=max(peaks[label]) / GiB, kv_gib=kvb / GiB, batch=batch,
                                decode_tok_s=rate))
            print(json.dumps(results[-1]), flush=True)
            del row_cache
            if device == "cuda":
                torch.cuda.empty_cache()
        breakdown = hook_breakdown(model, ids, device, kv_press) if device == "cuda" else None
        p_holder.pop("press", None)
        if device == "cuda":
            torch.cuda.empty_cache()
        scorers = scorer_times(model, n, device, max(7, args.repeats))

    base = results[0]
    print("\n| run | prefill s (median [min, max]) | vs HF | peak GiB | KV GiB after prefill | "
          "KV vs HF | largest decode batch | decode tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['run']} | {r['prefill_s']:.3f} [{r['prefill_min_s']:.3f}, "
              f"{r['prefill_max_s']:.3f}] | {100 * (r['prefill_s'] / base['prefill_s'] - 1):+.2f}% | "
              f"{r['peak_gib']:.2f} | {r['kv_gib']:.3f} | {r['kv_gib'] / base['kv_gib']:.3f} | "
              f"{r['batch']} | {r['decode_tok_s']:.0f} |")
    overhead = {}
    for r in results[1:]:
        d = [100 * (a / b - 1) for a, b in zip(r["prefill_all_s"], base["prefill_all_s"])]
        overhead[r["run"]] = d
        print(f"prefill vs HF, paired by round ({len(d)} rounds, A B A B after a warm-up): "
              f"{r['run']}: median {statistics.median(d):+.2f}% [min {min(d):+.2f}%, max "
              f"{max(d):+.2f}%]")
    print("\n| scorer (one layer, n = %d) | ms per call, back to back (median [min, max]) | "
          "ms, one call + sync | host ms per call (issuing) |" % n)
    print("|---|---|---|---|")
    for k, (med, lo, hi, lat, host) in scorers.items():
        print(f"| {k} | {1e3 * med:.3f} [{1e3 * lo:.3f}, {1e3 * hi:.3f}] | {1e3 * lat:.3f} | "
              f"{1e3 * host:.3f} |")
    if breakdown:
        print_breakdown(breakdown, base["prefill_s"])
    ref = scorers.get("kvpress SnapKVPress.score (w=64, avg 5)")
    if ref:
        for k, v in scorers.items():
            if "kvevict" in k and ".compress" not in k:
                print(f"speed-up of {k} over kvpress SnapKVPress.score: {ref[0] / v[0]:.1f}x "
                      f"(synchronous: {ref[3] / v[3]:.1f}x)")
    hook = scorers.get("kvpress SnapKVPress.compress (whole hook: score + top-k + gather)")
    if hook:
        for k, v in scorers.items():
            if ".compress" in k and "kvevict" in k:
                print(f"speed-up of {k} over kvpress SnapKVPress.compress: {hook[0] / v[0]:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": results, "scorers_s": scorers, "prefill_overhead_pct": overhead,
                       "hook_breakdown": breakdown, "prompt": n, "device": name}, f,
                      indent=1)


def hook_breakdown(model, ids, device, kv_press):
    """Where the eviction hook's time goes: one more kvevict prefill (after the timed rounds)
    with CUDA events and host clock reads between the stages of every layer's eviction
    (kvevict.hf.cache.hook_timer): score, select (with the device NaN scan), compact (into the
    packed layout with slack), finish (stats, the deferred NaN check's bookkeeping). Also the
    whole forward's host time, and the end-of-pass NaN read (one synchronization)."""
    from kvevict.hf.cache import hook_timer

    with hook_timer() as timer:
        prefill(model, ids, lambda: None, kv_press, device)
    sync(device)
    return timer.summary()


def print_breakdown(rows, hf_prefill_s):
    layers = max((r["count"] for r in rows.values()), default=0)
    print(f"\n| eviction hook stage ({layers} layers) | device ms per layer | host ms per layer | "
          "device ms, all layers | % of the HF prefill |")
    print("|---|---|---|---|---|")
    total_dev = total_host = 0.0
    for name, r in rows.items():
        total_dev += r["device_ms"]
        total_host += r["host_ms"]
        print(f"| {name} | {r['device_ms_per_call']:.3f} | {r['host_ms_per_call']:.3f} | "
              f"{r['device_ms']:.2f} | {100 * r['device_ms'] / 1e3 / hf_prefill_s:.2f}% |")
    per = max(1, layers)
    print(f"| whole hook | {total_dev / per:.3f} | {total_host / per:.3f} | {total_dev:.2f} | "
          f"{100 * total_dev / 1e3 / hf_prefill_s:.2f}% |")
    print(f"hook: device {total_dev:.2f} ms and host {total_host:.2f} ms over {layers} layers "
          f"({100 * total_dev / 1e3 / hf_prefill_s:.2f}% of the HF prefill in device time); the "
          "host time overlaps the device's unless a stage synchronizes")


class _Enter:
    """Enters a kvevict press and remembers the Press object (its latest cache)."""

    def __init__(self, cm, holder):
        self.cm, self.holder = cm, holder

    def __enter__(self):
        self.holder["press"] = self.cm.__enter__()
        return self.holder["press"]

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def _clone_cache(cache):
    """A deep copy of a prefilled cache (each decode run starts from the same state)."""
    if isinstance(cache, kvevict.hf.KVEvictCache):
        out = kvevict.hf.KVEvictCache(cache.evict_config)
        for layer in cache.layers:
            new = copy.copy(layer)
            c = layer.compacted
            new.compacted = kvevict.KVCache(c.k.clone(), c.v.clone(), c.pos.clone(),
                                            c.offsets.copy(), c.lens.copy())
            out.layers.append(new)
        return out
    out = DynamicCache()
    for i, layer in enumerate(cache.layers):
        out.update(layer.keys.clone(), layer.values.clone(), i)
    return out


if __name__ == "__main__":
    main()
