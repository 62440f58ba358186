#!/usr/bin/env python3
"""Prints the GPU scoring table of issue 3 from gpu_score_bench's --json output and, when given,
dropkv_peers.py's --json output of the same run: per model, dropkv w=8, dropkv w=32 and
obcache_vk w=16 + pool at every n, each as 'ms (x ratio to the one-read floor)', then the peers'
times on the same shapes and the speed-up of the CUDA path over each.

  gpu_table.py bench.json [peers.json]
"""
import json
import os
import re
import sys

ROWS = [("dropkv w=8", "dropkv w=8 n="), ("dropkv w=32", "dropkv w=32 n="),
        ("obcache_vk w=16 + pool", "obcache_vk w=16 pool n=")]
PEERS = [("naive dropkv w=8", "naive dropkv w=8", "dropkv w=8"),
         ("kvpress dropkv w=8", "kvpress dropkv w=8", "dropkv w=8"),
         ("kvpress dropkv w=32", "kvpress dropkv w=32", "dropkv w=32"),
         ("obcache_vk w=16 + pool (PyTorch)", "obcache_vk pool w=16", "obcache_vk w=16 pool")]


def n_key(name):
    m = re.search(r"n=(\d+)K", name)
    return int(m.group(1)) if m else None


def main():
    bench = json.load(open(sys.argv[1]))
    peers = []
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        peers = json.load(open(sys.argv[2]))
    print(f"\ndevice {bench['device']}, copy {bench['copy_gbps']:.0f} GB/s; ms (x floor)")
    models = sorted({r["name"].split()[0] for r in bench["results"]}, reverse=False)
    for model in models:
        res = {r["name"]: r for r in bench["results"] if r["name"].startswith(model + " ")}
        ns = sorted({n_key(k) for k in res if n_key(k) is not None and " forward" not in k
                     and "select" not in k and "h2o" not in k})
        print(f"\n| {model} | " + " | ".join(f"{n}K" for n in ns) + " |")
        print("|---" * (len(ns) + 1) + "|")
        cuda = {}
        for label, prefix in ROWS:
            cells = []
            for n in ns:
                r = res.get(f"{model} {prefix}{n}K")
                if r is None:
                    cells.append("")
                    continue
                cuda[(prefix.split(" n=")[0], n)] = r["ms"]
                ratio = r["ms"] / r["floor_ms"] if r["floor_ms"] else 0
                cells.append(f"{r['ms']:.3f} (x{ratio:.2f})")
            print(f"| {label} | " + " | ".join(cells) + " |")
        for label, peer_key, cuda_key in PEERS:
            cells = []
            for n in ns:
                p = next((x for x in peers if x["name"] == f"{model} {peer_key} n={n}K"), None)
                if p is None:
                    cells.append("")
                elif p["ms"] is None:
                    cells.append("OOM")
                else:
                    c = cuda.get((cuda_key, n))
                    cells.append(f"{p['ms']:.2f}" + (f" ({p['ms'] / c:.0f}x)" if c else ""))
            if any(cells):
                print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
