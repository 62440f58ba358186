#!/usr/bin/env python3
"""PyTorch SDPA's causal prefill attention on the shapes of benchmarks/gpu_attention_bench.cpp
(issue 16: kvevict's prefill attention against SDPA, beside it on the same card).

One layer, bf16, the whole prompt in one causal call as Hugging Face runs it
(torch.nn.functional.scaled_dot_product_attention with is_causal=True; GQA by enable_gqa where
the installed torch has it, else K / V repeated to the query heads outside the timed region).
Prints, per length, the median milliseconds and the causal TFLOP/s counted as the C++ benchmark
counts them (4 d FLOPs a head and visible query-key pair), and which SDPA backend ran.

  python3 tools/peers/sdpa_prefill.py [--shape llama|gemma3] [--lengths 4096,32768,131072]
"""
import argparse
import sys

SHAPES = {"llama": ("llama-3.1-8b", 32, 8, 128), "gemma3": ("gemma3-270m", 4, 1, 256)}


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama")
    p.add_argument("--lengths", default="4096,32768,131072",
                   help="comma-separated prompt lengths (default 4096,32768,131072)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions, median (default 5)")
    a = p.parse_args()
    try:
        a.lengths = [int(x) for x in a.lengths.split(",")]
    except ValueError:
        p.error(f"--lengths {a.lengths!r}: expected comma-separated integers")
    if any(n < 1 for n in a.lengths) or a.reps < 1:
        p.error("--lengths and --reps must be >= 1")
    return a


def main():
    a = parse()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa_prefill: torch is not installed; nothing to compare", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sdpa_prefill: no CUDA device", file=sys.stderr)
        return 2
    name, hq, hkv, d = SHAPES[a.shape]
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}; torch {torch.__version__}; shape {name} "
          f"(Hq {hq}, Hkv {hkv}, d {d})")
    print(f"{'length':<10} {'ms (1 layer)':>12} {'TFLOP/s':>10}  gqa")
    for n in a.lengths:
        g = torch.Generator(device=dev).manual_seed(n)
        q = torch.randn(1, hq, n, d, device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, hkv, n, d, device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, hkv, n, d, device=dev, dtype=torch.bfloat16, generator=g)
        try:
            F.scaled_dot_product_attention(q[:, :, :8], k[:, :, :8], v[:, :, :8], is_causal=True,
                                           enable_gqa=True)
            gqa = "enable_gqa"

            def call():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except (TypeError, RuntimeError):
            kr = k.repeat_interleave(hq // hkv, dim=1)
            vr = v.repeat_interleave(hq // hkv, dim=1)
            gqa = "repeated K/V"

            def call():
                return F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        try:
            call()
            torch.cuda.synchronize()
            times = []
            for _ in range(a.reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                call()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
        except torch.cuda.OutOfMemoryError:
            print(f"{n:<10} {'OOM':>12}")
            continue
        ms = sorted(times)[len(times) // 2]
        flops = 4.0 * d * hq * (n * (n + 1) / 2)
        print(f"{n:<10} {ms:12.3f} {flops / (ms * 1e-3) / 1e12:10.1f}  {gqa}")
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
