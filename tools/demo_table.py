#!/usr/bin/env python3
"""Builds the table `kvevict demo` reads: measured accuracy per (model, task, length, query mode,
setting, budget) from kvevict eval results files, each row naming the run it comes from.

  tools/demo_table.py RESULTS.json [...] --out docs/results/demo_table.json [--tasks a,b]

Only TEST rows (or rows of files without splits) are taken. Where several files measure the same
cell, the row with more samples wins (then the later run). For each (model, task, length, mode)
and setting the table also records the demo's default budget by the rule of docs/EVAL.md
("Demo"): the smallest measured budget at which the setting (dropkv: the demo's default) scores
within 10 points of the full cache of the same run (the same samples); null when none does.

Settings are named as the library names them now: dropkv, adadropkv and obcache_vk default to the
measured w=32 pinned + max-pooling 11 (kvevict/method.h), so rows of earlier runs are renamed by
their recorded options: "dropkv:w=32:pool=max:11" -> "dropkv", and "dropkv" with SPEC pooling
(none; obcache_vk max:7) -> "dropkv:spec".
"""
import argparse
import json
import os
import sys

RULE_POINTS = 10.0
MEASURED = "w=32:pool=max:11"  # kvevict's measured default (kvevict/method.h)
SPEC_POOLING = {"dropkv": "none", "adadropkv": "none", "obcache_vk": "max:7"}


def canonical_setting(row):
    """The row's setting under today's names (see the module's note); others unchanged."""
    name = row["method"]
    base = name.split(":", 1)[0]
    if base not in SPEC_POOLING:
        return name
    if name == f"{base}:{MEASURED}":
        return base
    if name == base and row.get("pooling") == SPEC_POOLING[base]:
        return f"{base}:spec"
    return name


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"demo_table.py: cannot read '{path}': {e}; expected a kvevict eval results JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("aggregate"), list):
        sys.exit(f"demo_table.py: '{path}' has no aggregate section; expected `kvevict eval --out` "
                 "results")
    return doc


def source_of(path, meta):
    rel = os.path.relpath(os.path.abspath(path), os.getcwd())
    return {"file": rel, "commit": (meta.get("git_commit") or "")[:12] or None,
            "date_utc": meta.get("date_utc"), "device": meta.get("device") or
            next((n for n in meta.get("notes") or [] if n.startswith("device ")), None)}


def default_budget(runs, model, task, length, mode, method):
    """The rule over the runs that measured the full cache and the method on the same samples
    (one file) with the most samples (a 2-sample run does not outvote a 100-sample one); None
    when no run measured the full cache here."""
    best, full_seen = None, None
    measured = [c for c in runs if (model, task, length, mode, "full", "1") in c and
                any(k[:5] == (model, task, length, mode, method) for k in c)]
    most = max((c[(model, task, length, mode, "full", "1")]["samples"] for c in measured),
               default=0)
    for cells in runs:
        full = cells.get((model, task, length, mode, "full", "1"))
        if not full or (measured and (cells not in measured or full["samples"] < most)):
            continue
        full_seen = full_seen or full
        for (m, t, L, md, s, b), row in cells.items():
            if (m, t, L, md, s) == (model, task, length, mode, method) and \
                    row["score"] >= full["score"] - RULE_POINTS:
                cand = (float(b), -row["samples"], b, row, full)
                best = cand if best is None or cand[:2] < best[:2] else best
    if full_seen is None:
        return None
    if best is None:
        return {"budget": None, "full": full_seen["score"], "full_samples": full_seen["samples"]}
    _, _, b, row, full = best
    return {"budget": b, "full": full["score"], "full_samples": full["samples"],
            "score": row["score"], "samples": row["samples"], "source": row["source"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="kvevict eval results JSON files")
    ap.add_argument("--out", required=True, help="the table to write")
    ap.add_argument("--tasks", default="", help="keep only these tasks (comma-separated)")
    args = ap.parse_args(argv)
    keep = set(t for t in args.tasks.split(",") if t)
    cells, runs, sources = {}, [], []
    for path in args.inputs:
        run = {}
        runs.append(run)
        doc = load(path)
        meta = doc.get("meta") or {}
        model = os.path.basename(meta.get("model") or "?")
        sources.append(source_of(path, meta))
        src = len(sources) - 1
        for a in doc["aggregate"]:
            if a.get("split") not in (None, "", "test") or a.get("task") == "average":
                continue
            if keep and a["task"] not in keep:
                continue
            key = (model, a["task"], a["target_length"], a["mode"], canonical_setting(a),
                   str(a["budget"]))
            row = {"score": a["score"], "ci_low": a.get("ci_low"), "ci_high": a.get("ci_high"),
                   "samples": a["samples"], "source": src}
            run[key] = row
            old = cells.get(key)
            if old is None or (row["samples"], sources[src]["date_utc"] or "") > \
                    (old["samples"], sources[old["source"]]["date_utc"] or ""):
                cells[key] = row
    rows = [dict(zip(("model", "task", "target_length", "mode", "setting", "budget"), k), **v)
            for k, v in sorted(cells.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]
    defaults = []
    for key in sorted({k[:5] for k in cells if k[4] != "full"}, key=lambda k: tuple(str(x) for x in k)):
        d = default_budget(runs, *key)
        if d is not None:
            defaults.append(dict(zip(("model", "task", "target_length", "mode", "setting"), key), **d))
    doc = {"rule": f"the smallest measured budget at which the setting scores within {RULE_POINTS:g} "
                   "points of the full cache of the same run, on the same task, length and mode",
           }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    line = lambda items: ",\n".join("  " + json.dumps(x, sort_keys=True) for x in items)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write('{"kind": "kvevict-demo-table", "version": 1,\n "rule": ' + json.dumps(doc["rule"]) +
                ',\n "sources": [\n' + line(sources) + '\n ],\n "rows": [\n' + line(rows) +
                '\n ],\n "defaults": [\n' + line(defaults) + "\n ]}\n")
    print(f"{len(rows)} rows, {sum(1 for d in defaults if d['budget'])} of {len(defaults)} "
          f"(model, task, length, mode, setting) cells with a measured budget within "
          f"{RULE_POINTS:g} points -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
