#!/usr/bin/env python3
"""Plots kvevict results JSON files (see include/kvevict/eval/report.h for the layout).

  tools/plot_results.py results.json [more.json ...] --out plots/

Each input may be a full results document ({"aggregate": ..., "ppl": ..., "diagnostics": ...}),
the bare array that `kvevict ppl` writes (rows with "ppl"), or a diagnostics document
({"cone": [...]} or {"diagnostics": {"cone": [...]}}). Sections that are missing are skipped with a
note; nothing is required. Figures written:
  accuracy_vs_budget_<length>_<mode>.png   score (task average, or --task) per method vs budget
  accuracy_vs_length_<mode>_<budget>.png   score per method vs context length
  ppl_vs_budget.png                        perplexity per method vs decode budget
  accuracy_heatmap_<length>_<mode>.png     score per setting (rows) and task (columns)
  cone_constant_hist.png                   histogram of the cone constant c* per layer
Scores carry their 95% bootstrap interval as error bars where the file has one (version 2).
Rows of the DEV split (tuning samples, issue 20) are left out unless --split dev.
"""
import argparse
import json
import math
import os
import re
import sys
from collections import defaultdict


def load_inputs(paths, split="test"):
    """Merges every input into {"meta": [...], "aggregate": [...], "ppl": [...], "cone": [...]}.
    Aggregate rows of another split are dropped (rows without a split, version 1, are kept)."""
    merged = {"meta": [], "aggregate": [], "ppl": [], "cone": []}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"plot_results.py: cannot read '{path}': {e}; expected a kvevict results JSON")
        if isinstance(doc, list):  # bare ppl array
            merged["ppl"].extend(r for r in doc if isinstance(r, dict) and "ppl" in r)
            continue
        if not isinstance(doc, dict):
            print(f"note: {path}: top level is {type(doc).__name__}; expected an object or array",
                  file=sys.stderr)
            continue
        if isinstance(doc.get("meta"), dict):
            merged["meta"].append(doc["meta"])
        merged["aggregate"].extend(r for r in doc.get("aggregate") or []
                                   if isinstance(r, dict) and r.get("split") in (None, "", split))
        merged["ppl"].extend(r for r in doc.get("ppl") or [] if isinstance(r, dict))
        diag = doc.get("diagnostics") if isinstance(doc.get("diagnostics"), dict) else doc
        merged["cone"].extend(r for r in diag.get("cone") or [] if isinstance(r, dict))
    return merged


def budget_value(b):
    try:
        return float(b)
    except (TypeError, ValueError):
        return None


def model_name(merged):
    # Runs name the model by its GGUF name or by its file path: one short name per model.
    names = sorted({re.sub(r"\.gguf$", "", os.path.basename(m["model"]))
                    for m in merged["meta"] if m.get("model")})
    return ", ".join(names) if names else "model ?"


def setting_label(row):
    """Method label with the settings every plot must name (window, pooling, policy)."""
    if row.get("method") == "full":
        return "full cache"
    parts = [str(row.get("method", "?"))]
    if row.get("window_is_question") or row.get("window") == "question":
        parts.append("w=question")
    elif row.get("window"):
        parts.append(f"w={row['window']}")
    if row.get("pooling") not in (None, "", "none"):
        parts.append(f"pool={row['pooling']}")
    if row.get("policy") not in (None, "", "uniform", "none"):
        parts.append(str(row["policy"]))
    return " ".join(parts)


def point(x, row):
    """(x, score, lower error, upper error) of a row; no interval: zero error bars."""
    y = row.get("score", float("nan"))
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return (x, y, max(0.0, y - lo), max(0.0, hi - y))
    return (x, y, 0.0, 0.0)


def draw_line(ax, pts, label, **style):
    pts.sort()
    ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                yerr=[[p[2] for p in pts], [p[3] for p in pts]], marker="o", capsize=3,
                label=label, **style)


def safe(s):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))


def finish_axes(ax, ylabel, title, score_axis=False):
    """The styling every line plot shares."""
    ax.set_ylabel(ylabel)
    if score_axis:
        ax.set_ylim(-2, 102)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def save_figure(plt, fig, path, written):
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    written.append(path)


def plot_accuracy_vs_budget(plt, merged, task, out_dir, written):
    rows = [r for r in merged["aggregate"] if r.get("task") == task]
    if not rows:
        print(f"note: no aggregate rows for task '{task}'; skipping accuracy plots", file=sys.stderr)
        return
    groups = defaultdict(list)
    for r in rows:
        groups[(r.get("target_length", 0), r.get("mode", "?"))].append(r)
    for (length, mode), grp in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        lines = defaultdict(list)
        full = None
        for r in grp:
            if r.get("method") == "full":
                full = r.get("score")
                continue
            b = budget_value(r.get("budget"))
            if b is not None:
                lines[setting_label(r)].append(point(b, r))
        if not lines and full is None:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for label, pts in sorted(lines.items()):
            draw_line(ax, pts, label)
        if full is not None:
            ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
        budgets = [p[0] for pts in lines.values() for p in pts]
        if budgets and max(budgets) > 1:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("budget (tokens per head)")
        else:
            ax.set_xlabel("budget (fraction of the prompt kept)")
        finish_axes(ax, f"score ({task}, 0-100)",
                    f"{model_name(merged)} | length {length or 'external'} | {mode}", True)
        save_figure(plt, fig,
                    os.path.join(out_dir, f"accuracy_vs_budget_{safe(length)}_{safe(mode)}.png"),
                    written)


def plot_accuracy_vs_length(plt, merged, task, out_dir, written):
    rows = [r for r in merged["aggregate"] if r.get("task") == task and r.get("target_length")]
    lengths = sorted({r["target_length"] for r in rows})
    if len(lengths) < 2:
        print("note: fewer than two context lengths; skipping accuracy-vs-length", file=sys.stderr)
        return
    groups = defaultdict(list)
    for r in rows:
        key_budget = "full" if r.get("method") == "full" else r.get("budget")
        groups[(r.get("mode", "?"), key_budget)].append(r)
    fulls = {mode: [r for r in grp] for (mode, b), grp in groups.items() if b == "full"}
    for (mode, budget), grp in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        if budget == "full" or len({r["target_length"] for r in grp}) < 2:
            continue  # a line needs two lengths
        lines = defaultdict(list)
        for r in grp:
            lines[setting_label(r)].append(point(r["target_length"], r))
        for r in fulls.get(mode, []):
            lines["full cache"].append(point(r["target_length"], r))
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for label, pts in sorted(lines.items()):
            style = dict(color="black", linestyle="--") if label == "full cache" else {}
            draw_line(ax, pts, label, **style)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
        finish_axes(ax, f"score ({task}, 0-100)",
                    f"{model_name(merged)} | budget {budget} | {mode}", True)
        save_figure(plt, fig,
                    os.path.join(out_dir, f"accuracy_vs_length_{safe(mode)}_{safe(budget)}.png"),
                    written)


def plot_task_heatmap(plt, merged, out_dir, written):
    rows = [r for r in merged["aggregate"] if r.get("task") and r.get("task") != "average"]
    groups = defaultdict(list)
    for r in rows:
        groups[(r.get("target_length", 0), r.get("mode", "?"))].append(r)
    for (length, mode), grp in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        tasks = sorted({r["task"] for r in grp})
        settings = sorted({(setting_label(r), str(r.get("budget"))) for r in grp})
        if len(tasks) < 2 or not settings:
            continue
        cell = {(setting_label(r), str(r.get("budget")), r["task"]): r.get("score") for r in grp}
        grid = [[cell.get((s, b, t), float("nan")) for t in tasks] for s, b in settings]
        fig, ax = plt.subplots(figsize=(max(5.0, 3.0 + 0.6 * len(tasks)), 1.5 + 0.3 * len(settings)))
        im = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(tasks)))
        ax.set_xticklabels(tasks, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(settings)))
        ax.set_yticklabels([s if s == "full cache" else f"{s} @{b}" for s, b in settings],
                           fontsize=7)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:  # not NaN
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6,
                            color="white" if v < 50 else "black")
        fig.colorbar(im, ax=ax, label="score (0-100)")
        ax.set_title(f"{model_name(merged)} | length {length or 'external'} | {mode}", fontsize=9)
        save_figure(plt, fig,
                    os.path.join(out_dir, f"accuracy_heatmap_{safe(length)}_{safe(mode)}.png"),
                    written)


def plot_ppl_vs_budget(plt, merged, out_dir, written):
    rows = merged["ppl"]
    if not rows:
        print("note: no ppl section; skipping ppl-vs-budget", file=sys.stderr)
        return
    lines = defaultdict(list)
    full = None
    for r in rows:
        if r.get("method") == "full":
            full = r.get("ppl")
            continue
        b = budget_value(r.get("budget"))
        if b is not None and r.get("ppl") is not None:
            lines[setting_label(r)].append((b, r["ppl"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if full is not None:
        ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
    budgets = [p[0] for pts in lines.values() for p in pts]
    if budgets and max(budgets) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("decode budget (tokens per head)")
    r0 = rows[0]
    model = r0.get("model") or model_name(merged)
    finish_axes(ax, "perplexity",
                f"{model} | chunk {r0.get('chunk_tokens', '?')} tokens | "
                f"recent {r0.get('recent', '?')} slack {r0.get('slack', '?')}")
    save_figure(plt, fig, os.path.join(out_dir, "ppl_vs_budget.png"), written)


def plot_cone_hist(plt, merged, out_dir, written):
    layers = [r for r in merged["cone"] if isinstance(r.get("c_star"), list) and r["c_star"]]
    if not layers:
        print("note: no diagnostics.cone section; skipping the c* histogram", file=sys.stderr)
        return
    layers.sort(key=lambda r: r.get("layer", 0))
    n = len(layers)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False,
                             sharex=True)
    for i, r in enumerate(layers):
        ax = axes[i // cols][i % cols]
        vals = [v for v in r["c_star"] if isinstance(v, (int, float)) and math.isfinite(v)]
        ax.hist(vals, bins=30, range=(-1, 1), color="tab:blue", alpha=0.8)
        ax.axvline(0, color="black", linewidth=0.8)
        pos = sum(1 for v in vals if v > 0)
        ax.set_title(f"layer {r.get('layer', i)}: {pos}/{len(vals)} > 0", fontsize=8)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"cone constant c* per layer ({model_name(merged)})", fontsize=10)
    fig.supxlabel("c* = min cos(a - v_i, a - v_j)", fontsize=9)
    save_figure(plt, fig, os.path.join(out_dir, "cone_constant_hist.png"), written)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="results JSON files")
    ap.add_argument("--out", default="plots", help="output directory (created)")
    ap.add_argument("--task", default="average",
                    help="task whose score is plotted (default: the average over tasks)")
    ap.add_argument("--split", default="test", choices=["test", "dev"],
                    help="which seed split's rows to plot (default test: the reported numbers)")
    args = ap.parse_args(argv)
    merged = load_inputs(args.inputs, args.split)
    os.makedirs(args.out, exist_ok=True)
    written = []
    if not any(merged[k] for k in ("aggregate", "ppl", "cone")):
        print("note: no aggregate, ppl or diagnostics.cone section in the inputs; nothing to plot",
              file=sys.stderr)
        return 0
    try:  # imported only when there is something to draw: it is the slow part
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_results.py: matplotlib is missing; run scripts/install_deps.sh --eval")
    plot_accuracy_vs_budget(plt, merged, args.task, args.out, written)
    plot_accuracy_vs_length(plt, merged, args.task, args.out, written)
    plot_task_heatmap(plt, merged, args.out, written)
    plot_ppl_vs_budget(plt, merged, args.out, written)
    plot_cone_hist(plt, merged, args.out, written)
    for p in written:
        print(p)
    if not written:
        print("note: nothing to plot in the inputs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
