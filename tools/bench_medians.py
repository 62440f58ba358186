#!/usr/bin/env python3
"""Medians of a gpu_score_bench log's rows by name, in first-seen order (rounds of one run).

    tools/bench_medians.py LOG [BASE]

With BASE (e.g. 'top mode 2'), each row's change against the row whose "top mode N" reads BASE,
with the row's own variant kept (", 64-row blocks", ...) and, for a variant row, against BASE's
default kernels too (the bound of issue 13 is against those). tools/device_session.sh prints its
benches' summaries with it.
"""
import collections
import re
import statistics
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: bench_medians.py LOG [BASE]")
    base_name = sys.argv[2] if len(sys.argv) == 3 else ""
    rows = collections.defaultdict(list)
    with open(sys.argv[1]) as log:
        for line in log:
            m = re.match(r"(.*?)\s+(\d+\.\d+) ms\s+floor", line)
            if m:
                rows[m.group(1).strip()].append(float(m.group(2)))
    med = {k: statistics.median(v) for k, v in rows.items()}
    for k, value in med.items():
        line = f"{k:72s} {value:.4f} ms ({len(rows[k])} rounds)"
        if base_name:
            for base in dict.fromkeys([re.sub(r"top mode \d", base_name, k),
                                       re.sub(r"top mode \d[^)]*", base_name, k)]):
                r = value / med[base] - 1 if base in med else float("nan")
                tail = base[base.rfind("(") + 1:-1] if base.endswith(")") else base_name
                line += f", vs {tail} {100 * r:+.1f}%"
        print(line)


if __name__ == "__main__":
    main()
