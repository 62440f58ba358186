#!/usr/bin/env python3
"""PyTorch peers of the CUDA scores (SPEC section 8), timed on the same shapes as
benchmarks/gpu_score_bench.cpp: one layer, bf16 inputs, median ms of many reps with L2 flushed.

  naive      DropKV with the difference tensor a_t - v_j materialized ([Hq, w, n, d] in bf16).
  kvpress    DropKV the way kvpress scorers are written: repeat_kv to Hq heads, float32 attention
             weights [Hq, w, n], then the norm identity ||a||^2 + ||v||^2 - 2 <a, v>, mean over G.
  obcache    obcache_vk written from the SPEC formulas in the same kvpress style (w = 16, max-pool 7).

Every peer computes the same scores as the kernels (checked against each other on a small shape
when --check is given). Prints one line per run; out-of-memory runs print OOM.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F


def repeat_kv(x, g):
    # [Hkv, n, d] -> [Hkv * g, n, d], as transformers' repeat_kv does for GQA.
    return x[:, None].expand(x.shape[0], g, *x.shape[1:]).reshape(-1, *x.shape[1:])


def window_attention(q, k_rep, w, scale):
    """q [Hq, w, d], k_rep [Hq, n, d] -> logits z [Hq, w, n] f32 with the causal window mask."""
    n = k_rep.shape[1]
    z = torch.matmul(q, k_rep.transpose(1, 2)).float() * scale
    t = torch.arange(w, device=q.device)[:, None]
    j = torch.arange(n, device=q.device)[None, :]
    z = z.masked_fill(j > (n - w + t), float("-inf"))
    return z


def dropkv_kvpress(q, k, v, g, w, scale, floor=1e-12):
    k_rep, v_rep = repeat_kv(k, g), repeat_kv(v, g)
    z = window_attention(q, k_rep, w, scale)
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    p = torch.exp(z - lse)
    one_minus = (-torch.expm1(z - lse)).clamp_min(floor)
    a = torch.matmul(p.to(v.dtype), v_rep).float()  # [Hq, w, d]
    a2 = (a * a).sum(-1, keepdim=True)
    vf = v_rep.float()
    v2 = (vf * vf).sum(-1)[:, None, :]
    av = torch.matmul(a, vf.transpose(1, 2))
    term = (p / one_minus) ** 2 * (a2 + v2 - 2 * av).clamp_min(0)
    s = term.sum(1)  # [Hq, n]
    return s.view(k.shape[0], g, -1).mean(1)


def dropkv_naive(q, k, v, g, w, scale, floor=1e-12):
    k_rep, v_rep = repeat_kv(k, g), repeat_kv(v, g)
    z = window_attention(q, k_rep, w, scale)
    p = torch.softmax(z, dim=-1)
    a = torch.matmul(p.to(v.dtype), v_rep)  # [Hq, w, d]
    diff = a[:, :, None, :] - v_rep[:, None, :, :]  # [Hq, w, n, d] materialized
    dist = diff.float().pow(2).sum(-1)
    r = p / (1 - p).clamp_min(floor)
    s = (r * r * dist).sum(1)
    return s.view(k.shape[0], g, -1).mean(1)


def obcache_vk(q, k, v, g, w, scale, pool=7):
    k_rep, v_rep = repeat_kv(k, g), repeat_kv(v, g)
    z = window_attention(q, k_rep, w, scale)
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    p = torch.exp(z - lse)
    zf = torch.nan_to_num(z, neginf=0.0)
    a = torch.matmul(p.to(v.dtype), v_rep).float()
    a2 = (a * a).sum(-1, keepdim=True)
    vf = v_rep.float()
    v2 = (vf * vf).sum(-1)[:, None, :]
    av = torch.matmul(a, vf.transpose(1, 2))
    dist = (a2 + v2 - 2 * av).clamp_min(0)
    term = p * p * v2 + (p * zf) ** 2 * dist + 2 * p * p * zf * (v2 - av)
    s = term.sum(1).view(k.shape[0], g, -1).mean(1)
    return F.max_pool1d(s[:, None, :], pool, stride=1, padding=pool // 2)[:, 0, :]


def median_ms(fn, reps, flush):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")

    if args.check:  # the three formulations agree on a small shape
        hq, hkv, d, n, w = 8, 2, 128, 777, 8
        q = (torch.randn(hq, w, d, device=dev) * 2).bfloat16()
        k = torch.randn(hkv, n, d, device=dev).bfloat16()
        v = torch.randn(hkv, n, d, device=dev).bfloat16()
        s1 = dropkv_kvpress(q, k, v, hq // hkv, w, d ** -0.5)
        s2 = dropkv_naive(q, k, v, hq // hkv, w, d ** -0.5)
        rel = ((s1 - s2).abs().max() / s1.abs().max()).item()
        print(f"check kvpress vs naive dropkv: max rel diff {rel:.2e}")

    ns = [4096, 131072] if args.quick else [4096, 32768, 131072, 524288]
    models = [("llama3.1-8b", 32, 8), ("qwen2.5-7b", 28, 4)]
    rows = []
    for name, hq, hkv in models:
        g = hq // hkv
        d = 128
        for n in ns:
            k = torch.randn(hkv, n, d, device=dev).bfloat16()
            v = torch.randn(hkv, n, d, device=dev).bfloat16()
            reps = 10 if n >= 524288 else 20
            runs = [("naive dropkv", dropkv_naive, 8), ("kvpress dropkv", dropkv_kvpress, 8),
                    ("kvpress dropkv", dropkv_kvpress, 32), ("obcache_vk pool", obcache_vk, 16)]
            for label, fn, w in runs:
                q = (torch.randn(hq, w, d, device=dev) * 2).bfloat16()
                try:
                    ms = median_ms(lambda: fn(q, k, v, g, w, d ** -0.5), reps, flush)
                    peak = torch.cuda.max_memory_allocated() / 2**20
                    line = f"peer {name} {label} w={w} n={n // 1024}K: {ms:9.4f} ms"
                    rows.append({"name": f"{name} {label} w={w} n={n // 1024}K", "ms": ms})
                except torch.OutOfMemoryError:
                    line = f"peer {name} {label} w={w} n={n // 1024}K: OOM"
                    rows.append({"name": f"{name} {label} w={w} n={n // 1024}K", "ms": None})
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                print(line, flush=True)
            del k, v
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
