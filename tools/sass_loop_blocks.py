#!/usr/bin/env python3
"""Basic blocks of a kernel's main loop in cuobjdump SASS, to count a path's instructions.

  cuobjdump -sass OBJ > k.sass      (a cuobjdump ships in Triton's wheel: .../triton/backends/nvidia/bin)
  tools/sass_loop_blocks.py k.sass NAME_PART [NAME_PART ...]

For each function whose mangled name contains NAME_PART: the longest loop holding an HGMMA (the
tile loop of the wgmma kernels), its static instruction count and opcode histogram, and its basic
blocks in address order (start, instructions, the ending instruction, MUFU.EX2 / HGMMA / SHFL /
VOTE / LDG counts). Follow the branches of the path you care about and add the blocks' counts: on
2026-12-04 the no-record tile of the bf16 d = 128 64-row forward was 406 instructions plain and
462 with the top key held apart (docs/GPU_NOTES.md "v12 measured").
"""
import collections
import re
import sys


def functions(path):
    cur, out = None, {}
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            out[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]


def branch_target(ins):
    m = re.search(r"BRA\s+.*?0x([0-9a-f]+)", ins)
    return int(m.group(1), 16) if "BRA" in ins and m else None


def main_loop(ins):
    best = None
    for a, t in ins:
        tgt = branch_target(t)
        if tgt is not None and tgt < a:
            body = [x for x in ins if tgt <= x[0] <= a]
            if any("HGMMA" in x[1] for x in body) and (best is None or len(body) > len(best)):
                best = body
    return best


def blocks(body):
    lo, hi = body[0][0], body[-1][0]
    addrs = [a for a, _ in body]
    leaders = {lo}
    for i, (a, t) in enumerate(body):
        tgt = branch_target(t)
        if tgt is not None:
            if lo <= tgt <= hi:
                leaders.add(tgt)
            if i + 1 < len(body):
                leaders.add(addrs[i + 1])
    leaders = sorted(leaders)
    for i, start in enumerate(leaders):
        end = leaders[i + 1] if i + 1 < len(leaders) else hi + 1
        yield start, [(a, t) for a, t in body if start <= a < end]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    funcs = functions(sys.argv[1])
    for part in sys.argv[2:]:
        for name in [f for f in funcs if part in f]:
            body = main_loop(funcs[name])
            if body is None:
                print(f"{name}: no loop with an HGMMA")
                continue
            hist = collections.Counter(opcode(t) for _, t in body)
            print(f"{name}\n  loop: {len(body)} instructions; " +
                  " ".join(f"{o}:{c}" for o, c in hist.most_common(12)))
            for start, b in blocks(body):
                ops = [opcode(t) for _, t in b]
                tags = {k: sum(k in o for o in ops) for k in ("MUFU.EX2", "HGMMA", "SHFL", "VOTE", "LDG")}
                tag = " ".join(f"{k}={v}" for k, v in tags.items() if v)
                print(f"  {start:6x} {len(b):4d}  {b[-1][1][:44]:44s} {tag}")


if __name__ == "__main__":
    main()
