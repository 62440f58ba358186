#!/usr/bin/env python3
"""Sums up one kernel's ncu source page (SASS, CSV): where its warps stall and which instructions
fetch sectors they do not use.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > page.csv
    python3 tools/ncu_source_top.py page.csv [--top N] [--json]

Prints the page's totals of every numeric column, then the N instructions with the most stall
samples (all, and not issued), excessive global sectors and excessive shared-memory wavefronts,
each with its address, share and SASS.
The column names are matched loosely ("Warp Stall Sampling (All Samples)", "L2 Theoretical Sectors
Global Excessive", ...), since they vary between ncu versions; a page without them says so."""

import argparse
import csv
import json
import re
import sys


def number(text):
    """A cell as a float, or None (ncu writes thousands separators and sometimes units)."""
    t = text.strip().replace(",", "")
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


def read_page(path):
    """(header, rows) of the first table in the CSV whose header names an address or a source."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = list(csv.reader(f))
    for i, row in enumerate(lines):
        if any(c.strip() in ("Address", "Source") for c in row):
            header = [c.strip() for c in row]
            body = [r for r in lines[i + 1:] if len(r) == len(header)]
            return header, body
    raise SystemExit(f"{path}: no header row with an 'Address' or 'Source' column "
                     f"({len(lines)} lines read); is it ncu's --page source --csv output?")


def find(header, pattern):
    """Index of the first column whose name matches `pattern` (case-insensitive), or None."""
    rx = re.compile(pattern, re.I)
    for i, name in enumerate(header):
        if rx.search(name):
            return i
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=20, help="instructions listed per ranking (20)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    args = ap.parse_args()
    if args.top < 1:
        print(f"error: --top {args.top}: expected a positive count", file=sys.stderr)
        return 2
    header, rows = read_page(args.csv)
    src = find(header, r"^source$")
    addr = find(header, r"^address$")
    # Each numeric column parsed once: column index -> its values (0 for an empty cell).
    values = {}
    for i in range(len(header)):
        if i in (src, addr):
            continue
        cells = [number(r[i]) for r in rows]
        if rows and sum(v is not None for v in cells) >= len(rows) // 2:
            values[i] = [v or 0.0 for v in cells]
    totals = {header[i]: sum(v) for i, v in values.items()}
    rankings = {}
    for label, pattern in (("stall samples", r"warp stall sampling \(all"),
                           ("not-issued stall samples", r"warp stall sampling \(not"),
                           ("excessive global sectors", r"sectors global excessive"),
                           ("excessive shared wavefronts", r"wavefronts shared excessive")):
        col = find(header, pattern)
        if col not in values:
            continue
        col_values = values[col]
        total = totals[header[col]]
        ranked = sorted(range(len(rows)), key=lambda k: -col_values[k])[:args.top]
        rankings[label] = {
            "column": header[col],
            "total": total,
            "top": [{"address": rows[k][addr] if addr is not None else "",
                     "value": col_values[k],
                     "share": col_values[k] / total if total else 0.0,
                     "sass": rows[k][src].strip() if src is not None else ""}
                    for k in ranked if col_values[k] > 0]}
    if args.json:
        json.dump({"instructions": len(rows), "totals": totals, "rankings": rankings}, sys.stdout,
                  indent=1)
        print()
        return 0
    print(f"{len(rows)} SASS lines, {len(values)} numeric columns")
    for name, total in totals.items():
        if total:
            print(f"  total {name}: {total:,.0f}")
    if not rankings:
        print("no stall-sampling or excessive-sector columns on this page")
    for label, r in rankings.items():
        print(f"\n== top instructions by {label} ({r['column']}, total {r['total']:,.0f})")
        for e in r["top"]:
            print(f"  {e['address']:>8} {e['value']:>12,.0f} {100 * e['share']:5.1f}%  {e['sass']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
