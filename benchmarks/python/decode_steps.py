#!/usr/bin/env python3
"""Decode steps/s through Hugging Face: DynamicCache (no eviction) vs kvevict's compacted cache.

A randomly initialised Llama (built from a config, nothing downloaded): the prompt is prefilled,
then --steps greedy decode steps are timed (after --warmup steps), alternating the two caches
over --repeats rounds, median reported. On the CPU it measures the per-step Python overhead of
kvevict.hf (the Cache subclass, the registered attention function, the appends); --profile
prints cProfile's top functions of kvevict's decode steps.

  python benchmarks/python/decode_steps.py                       # CPU, small Llama
  python benchmarks/python/decode_steps.py --device cuda --layers 32 --hidden 4096 ...
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import kvevict
import kvevict.hf
from kvevict.hf.press import cache_kwarg


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--budget", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slack", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dev = args.device
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    cfg = LlamaConfig(vocab_size=256, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                      max_position_embeddings=args.prompt + 4096)
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):  # initialised where it runs (no host copy of the weights)
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    model.set_attn_implementation("sdpa")
    kw = cache_kwarg(model)
    ids = torch.randint(1, 256, (args.batch, args.prompt),
                        generator=torch.Generator().manual_seed(0)).to(dev)

    def run(which, profile=None):
        """Prefill, warm-up steps, then the timed steps; returns steps/s."""
        kvevict.hf.cache.FAST_DECODE = which != "kvevict-general"
        if which.startswith("kvevict"):
            ctx = kvevict.hf.press(model, method="dropkv", budget=args.budget, slack=args.slack)
        else:
            ctx = _Null()
        with torch.no_grad(), ctx as p:
            cache = p.new_cache() if which.startswith("kvevict") else DynamicCache()
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: cache})
            tok = out.logits[:, -1:].argmax(-1)
            for _ in range(args.warmup):
                tok = model(input_ids=tok, use_cache=True, **{kw: cache}).logits[:, -1:].argmax(-1)
            sync(dev)
            if profile is not None:
                profile.enable()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                tok = model(input_ids=tok, use_cache=True, **{kw: cache}).logits[:, -1:].argmax(-1)
            sync(dev)
            dt = time.perf_counter() - t0
            if profile is not None:
                profile.disable()
        return args.steps / dt

    runs = {"HF DynamicCache": "hf", "kvevict compacted": "kvevict"}
    if dev == "cuda":  # the general attention path (what decoding ran before decode_attention)
        runs["kvevict compacted, kvevict.attention (general path)"] = "kvevict-general"
    rates = {k: [] for k in runs}
    for _ in range(args.repeats):  # A B A B ...
        for label, which in runs.items():
            rates[label].append(run(which))
    print(f"# decode steps/s: Llama {args.layers} layers, hidden {args.hidden}, heads "
          f"{args.heads}/{args.kv_heads}, d {args.head_dim}, prompt {args.prompt}, batch "
          f"{args.batch}, dropkv {args.budget}, {args.steps} steps x {args.repeats} rounds, {dev}, "
          f"torch {torch.__version__}")
    print("| cache | steps/s median | min | max |\n|---|---|---|---|")
    for k, v in rates.items():
        print(f"| {k} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
    if args.profile:
        pr = cProfile.Profile()
        run("kvevict", pr)
        pstats.Stats(pr).sort_stats("tottime").print_stats(18)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "steps_per_s": rates}, f, indent=1)


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
