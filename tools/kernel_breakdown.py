#!/usr/bin/env python3
"""Where a GPU program's time goes, kernel by kernel, from Nsight Compute's CSV.

Reads the output of
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw PROGRAM ...
(one row a profiled launch) and prints, per kernel name, the launches, the total and mean
microseconds and the share of the total, largest first; with --per N also the microseconds per
unit of work (e.g. N decode steps profiled: the time a step spends in each kernel). ncu runs the
launches one at a time, so the sum is kernel time without overlap or launch gaps: set it beside the
program's own wall time to see what the gaps cost.

    python3 tools/kernel_breakdown.py ncu.csv [--per STEPS | --per-kernel NAME] [--top 25] [--short]
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    """The kernel's own name without namespaces, template arguments and parameters."""
    base = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
    base = re.sub(r"\(.*$", "", base)
    depth, out = 0, []
    for ch in base:  # drop <...> at any depth
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    return base.split("::")[-1] or name


UNITS_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}


def read_rows(path):
    """(kernel name, microseconds) of every profiled launch; the unit from ncu's units row."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu prints its own lines before the CSV
    rows, to_us = [], None
    for row in csv.DictReader(lines):
        value = (row.get("gpu__time_duration.sum") or "").replace(",", "")
        if value in UNITS_US:
            to_us = UNITS_US[value]
            continue
        try:
            t = float(value)
        except ValueError:
            continue  # a launch without the metric
        if to_us is None:
            raise ValueError("no units row before the first launch (expected ncu --csv --page raw)")
        rows.append((row.get("Kernel Name", "?"), t * to_us))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", help="ncu --csv --page raw output with gpu__time_duration.sum")
    p.add_argument("--per", type=float, default=0,
                   help="units of work the profiled launches cover (e.g. decode steps)")
    p.add_argument("--per-kernel", default="",
                   help="the units are the launches of the kernel whose name contains this (e.g. "
                        "embed_kernel: one a decode step)")
    p.add_argument("--top", type=int, default=25, help="kernels to list (default 25)")
    p.add_argument("--short", action="store_true", help="group by the short kernel name")
    a = p.parse_args()
    try:
        rows = read_rows(a.csv)
    except OSError as e:
        print(f"kernel_breakdown: {a.csv}: {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"kernel_breakdown: {a.csv}: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"kernel_breakdown: {a.csv}: no row with gpu__time_duration.sum; expected ncu's "
              "--csv --page raw output", file=sys.stderr)
        return 2
    total = defaultdict(float)
    count = defaultdict(int)
    for name, t in rows:
        key = short_name(name) if a.short else name
        total[key] += t
        count[key] += 1
    grand = sum(total.values())
    if a.per_kernel:
        a.per = float(sum(c for k, c in count.items() if a.per_kernel in k))
        if a.per == 0:
            print(f"kernel_breakdown: no launch of a kernel named *{a.per_kernel}*",
                  file=sys.stderr)
            return 2
    per = f"{'us / unit':>11}" if a.per > 0 else ""
    print(f"{len(rows)} launches, {grand:.1f} us of kernel time"
          + (f", {grand / a.per:.1f} us per unit ({a.per:g} units)" if a.per > 0 else ""))
    print(f"{'share':>6} {'us':>10} {'launches':>8} {'us each':>9} {per} kernel")
    for key in sorted(total, key=total.get, reverse=True)[:a.top]:
        line = (f"{100 * total[key] / grand:5.1f}% {total[key]:10.1f} {count[key]:8d} "
                f"{total[key] / count[key]:9.2f} ")
        if a.per > 0:
            line += f"{total[key] / a.per:11.2f} "
        print(line + key[:110])
    return 0


if __name__ == "__main__":
    sys.exit(main())
