#!/usr/bin/env python3
"""Plots kvevict results JSON files (see src/eval/report.h for the layout).

  tools/plot_results.py results.json [more.json ...] --out plots/

Each input may be a full results document ({"aggregate": ..., "ppl": ..., "diagnostics": ...}),
the bare array that `kvevict ppl` wrote before version 2 (rows with "ppl"), or a diagnostics document
({"cone": [...]} or {"diagnostics": {"cone": [...]}}). Sections that are missing are skipped with a
note; nothing is required. Figures written:
  accuracy_vs_budget_<length>_<mode>.png   score (task average, or --task) per method vs budget
  accuracy_vs_length_<mode>_<budget>.png   score per method vs context length
  ppl_vs_budget.png                        perplexity per method vs decode budget
  ppl_ratio_vs_budget.png                  each method's ppl / streamingllm's, paired by chunk,
                                           with its 95% interval (runs of >= 2 chunks)
  accuracy_heatmap_<length>_<mode>_<budget>.png  score per setting (rows) and task (columns)
  cone_constant_hist.png                   histogram of the cone constant c* per layer
  cone_per_layer.png                       median c*, share c* > 0, F(J^)/F(J*) per layer
Scores are drawn with their 95% bootstrap interval as a band. One model per figure set: inputs
of several models need --model.
Rows of the DEV split (tuning samples, issue 20) are left out unless --split dev.
"""
import argparse
import json
import math
import os
import re
import sys
from collections import defaultdict


KNOWN_KEYS = ("kind", "meta", "aggregate", "ppl", "diagnostics", "cone")


def short_model(name):
    return re.sub(r"\.gguf$", "", os.path.basename(str(name))) if name else None


def load_inputs(paths, split="test", model=None):
    """Merges every input into {"meta": [...], "aggregate": [...], "ppl": [...], "cone": [...],
    "layers": [...]}; each row carries "_model" (its file's model). Aggregate rows of another
    split are dropped (rows without a split, version 1, are kept); rows repeated across files
    (the full cache in every budget's run of a sweep) are kept once. A file that is not a kvevict
    results document is an error naming it."""
    merged = {"meta": [], "aggregate": [], "ppl": [], "cone": [], "layers": []}
    seen = set()
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"plot_results.py: cannot read '{path}': {e}; expected a kvevict results JSON")
        if isinstance(doc, list):  # bare ppl array
            rows = [r for r in doc if isinstance(r, dict) and "ppl" in r]
            if doc and not rows:
                sys.exit(f"plot_results.py: '{path}' is an array without ppl rows; expected a "
                         "kvevict results JSON (eval / ppl / analyze -m --out)")
            for r in rows:
                r["_model"] = short_model(r.get("model"))
            merged["ppl"].extend(rows)
            continue
        if not isinstance(doc, dict) or not any(k in doc for k in KNOWN_KEYS):
            what = type(doc).__name__ if not isinstance(doc, dict) else \
                "an object with keys " + ", ".join(sorted(doc)[:6])
            sys.exit(f"plot_results.py: '{path}' is {what}; expected a kvevict results JSON "
                     "(eval / ppl / analyze -m --out)")
        meta = doc["meta"] if isinstance(doc.get("meta"), dict) else {}
        if meta:
            merged["meta"].append(meta)
        file_model = short_model(meta.get("model"))
        for r in doc.get("aggregate") or []:
            if not isinstance(r, dict) or r.get("split") not in (None, "", split):
                continue
            key = (file_model, json.dumps(r, sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            merged["aggregate"].append(dict(r, _model=file_model))
        for r in doc.get("ppl") or []:
            if isinstance(r, dict):
                merged["ppl"].append(dict(r, _model=short_model(r.get("model")) or file_model))
        diag = doc.get("diagnostics") if isinstance(doc.get("diagnostics"), dict) else doc
        tokens = meta.get("prompt_tokens")
        for key in ("cone", "layers"):
            merged[key].extend(dict(r, _model=file_model, _tokens=tokens)
                               for r in diag.get(key) or [] if isinstance(r, dict))
    # One model per section (the ppl rows name the model by its config name, the others by its
    # file name): --model picks it in every section that has it.
    found = False
    for k in ("aggregate", "ppl", "cone"):
        names = sorted({r["_model"] for r in merged[k] if r["_model"]})
        if model is not None and model in names:
            found = True
            merged[k] = [r for r in merged[k] if r["_model"] == model]
            if k == "cone":
                merged["layers"] = [r for r in merged["layers"] if r["_model"] == model]
        elif len(names) > 1:
            sys.exit(f"plot_results.py: the inputs' {k} rows hold {len(names)} models (" +
                     ", ".join(names) + "); plot one at a time with --model NAME")
    if model is not None and not found:
        sys.exit(f"plot_results.py: no rows of model '{model}' in the inputs")
    return merged


def budget_value(b):
    try:
        return float(b)
    except (TypeError, ValueError):
        return None


def model_name(merged):
    # Runs name the model by its GGUF name or by its file path: one short name per model.
    names = sorted({r["_model"] for k in ("aggregate", "ppl", "cone") for r in merged[k]
                    if r.get("_model")})
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
    """A line with its 95% interval as a band (a single point: error bars)."""
    pts = sorted(set(pts))
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if len(pts) == 1:
        ax.errorbar(xs, ys, yerr=[[pts[0][2]], [pts[0][3]]], marker="o", capsize=3, label=label,
                    **style)
        return
    (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=label, **style)
    if any(p[2] or p[3] for p in pts):
        ax.fill_between(xs, [y - p[2] for y, p in zip(ys, pts)], [y + p[3] for y, p in zip(ys, pts)],
                        color=line.get_color(), alpha=0.12, linewidth=0)


def line_axes(plt):
    """A line plot's axes: 10 colours x 3 line styles, so up to 30 settings stay apart."""
    from cycler import cycler
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    ax.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=plt.cm.tab10.colors))
    return fig, ax


def log2_ticks(ax, xs):
    """A log-2 x axis labelled with the values themselves (2048 -> 2K)."""
    xs = sorted(set(xs))
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x / 1024:g}K" if x >= 1024 and x % 256 == 0 else f"{x:g}" for x in xs])
    ax.minorticks_off()


def safe(s):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))


def finish_axes(ax, ylabel, title, score_axis=False):
    """The styling every line plot shares."""
    ax.set_ylabel(ylabel)
    if score_axis:
        ax.set_ylim(-2, 102)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2 if len(ax.get_lines()) > 12 else 1)


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
        fig, ax = line_axes(plt)
        for label, pts in sorted(lines.items()):
            draw_line(ax, pts, label)
        if full is not None:
            ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
        budgets = [p[0] for pts in lines.values() for p in pts]
        if budgets and max(budgets) > 1:
            log2_ticks(ax, budgets)
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
        fig, ax = line_axes(plt)
        for label, pts in sorted(lines.items()):
            style = dict(color="black", linestyle="--") if label == "full cache" else {}
            draw_line(ax, pts, label, **style)
        log2_ticks(ax, [p[0] for pts in lines.values() for p in pts])
        ax.set_xlabel("context length (tokens)")
        finish_axes(ax, f"score ({task}, 0-100)",
                    f"{model_name(merged)} | budget {budget} | {mode}", True)
        save_figure(plt, fig,
                    os.path.join(out_dir, f"accuracy_vs_length_{safe(mode)}_{safe(budget)}.png"),
                    written)


def plot_task_heatmap(plt, merged, out_dir, written):
    """Score per setting (rows) and task (columns), one figure per (length, mode, budget), the
    full cache's row first."""
    rows = [r for r in merged["aggregate"] if r.get("task") and r.get("task") != "average"]
    groups = defaultdict(list)
    fulls = defaultdict(list)
    for r in rows:
        key = (r.get("target_length", 0), r.get("mode", "?"))
        if r.get("method") == "full":
            fulls[key].append(r)
        else:
            groups[key + (str(r.get("budget")),)].append(r)
    if not groups:
        groups = {k + ("full",): [] for k in fulls}
    for (length, mode, budget), grp in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))):
        grp = fulls.get((length, mode), []) + grp
        tasks = sorted({r["task"] for r in grp})
        settings = sorted({setting_label(r) for r in grp}, key=lambda s: (s != "full cache", s))
        if len(tasks) < 2 or not settings:
            continue
        cell = {(setting_label(r), r["task"]): r.get("score") for r in grp}
        grid = [[cell.get((s, t), float("nan")) for t in tasks] for s in settings]
        fig, ax = plt.subplots(figsize=(max(5.0, 3.0 + 0.6 * len(tasks)), 1.5 + 0.3 * len(settings)))
        im = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(tasks)))
        ax.set_xticklabels(tasks, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(settings)))
        ax.set_yticklabels(settings, fontsize=7)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:  # not NaN
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6,
                            color="white" if v < 50 else "black")
        fig.colorbar(im, ax=ax, label="score (0-100)")
        ax.set_title(f"{model_name(merged)} | length {length or 'external'} | {mode} | "
                     f"budget {budget}", fontsize=9)
        save_figure(plt, fig, os.path.join(
            out_dir, f"accuracy_heatmap_{safe(length)}_{safe(mode)}_{safe(budget)}.png"), written)


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
            lines[setting_label(r)].append((b, r["ppl"], r.get("ppl_low"), r.get("ppl_high")))
    fig, ax = line_axes(plt)
    for label, pts in sorted(lines.items()):
        pts.sort(key=lambda p: p[0])
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        # The 95% interval over chunks, where the run had more than one chunk.
        band = [p for p in pts if p[2] is not None and p[3] is not None]
        if len(band) == len(pts) and len(pts) > 1:
            ax.fill_between([p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts],
                            color=line.get_color(), alpha=0.12, linewidth=0)
    if full is not None:
        ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
    budgets = [p[0] for pts in lines.values() for p in pts]
    if budgets and max(budgets) > 1:
        log2_ticks(ax, budgets)
    ax.set_xlabel("decode budget (tokens per head)")
    r0 = rows[0]
    model = r0.get("model") or model_name(merged)
    bands = any(r.get("ppl_low") is not None for r in rows)
    finish_axes(ax, "perplexity",
                f"{model} | {r0.get('chunks', '?')} chunks of {r0.get('chunk_tokens', '?')} tokens | "
                f"recent {r0.get('recent', '?')} slack {r0.get('slack', '?')}"
                + (" | bands: 95% over chunks" if bands else ""))
    save_figure(plt, fig, os.path.join(out_dir, "ppl_vs_budget.png"), written)


def plot_ppl_ratio(plt, merged, out_dir, written):
    """The paired view: a method's ppl over the baseline's on the same chunks. Chunk-to-chunk
    spread makes the unpaired bands overlap; the pairing removes it."""
    lines = defaultdict(list)
    for r in merged["ppl"]:
        pr = r.get("paired") or {}
        b = budget_value(r.get("budget"))
        if b is not None and pr.get("low") is not None and pr.get("high") is not None:
            lines[(setting_label(r), pr.get("baseline"))].append(
                (b, pr["ppl_ratio"], pr["low"], pr["high"]))
    if not lines:
        print("note: no paired ppl rows (one chunk, or no streamingllm); skipping ppl ratio",
              file=sys.stderr)
        return
    fig, ax = line_axes(plt)
    for (label, _), pts in sorted(lines.items()):
        pts.sort(key=lambda p: p[0])
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        if len(pts) > 1:
            ax.fill_between([p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts],
                            color=line.get_color(), alpha=0.15, linewidth=0)
        else:
            ax.errorbar([pts[0][0]], [pts[0][1]], yerr=[[pts[0][1] - pts[0][2]],
                        [pts[0][3] - pts[0][1]]], color=line.get_color(), capsize=3)
    baseline = sorted(lines)[0][1]
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label=baseline)
    budgets = [p[0] for pts in lines.values() for p in pts]
    if budgets and max(budgets) > 1:
        log2_ticks(ax, budgets)
    ax.set_xlabel("decode budget (tokens per head)")
    r0 = merged["ppl"][0]
    model = r0.get("model") or model_name(merged)
    finish_axes(ax, f"ppl / {baseline} ppl (paired by chunk; < 1: better)",
                f"{model} | {r0.get('chunks', '?')} chunks of {r0.get('chunk_tokens', '?')} "
                "tokens | bands: 95% paired bootstrap")
    save_figure(plt, fig, os.path.join(out_dir, "ppl_ratio_vs_budget.png"), written)


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


def plot_cone_per_layer(plt, merged, out_dir, written):
    """Per layer: the median c* and the share of heads with c* > 0, and the F(J^)/F(J*) median
    and p95 (the paper's Fig. 1 b/c), one line per prompt length."""
    layers = [r for r in merged["layers"] if isinstance(r.get("layer"), int)]
    if not layers:
        print("note: no diagnostics.layers section; skipping c* per layer", file=sys.stderr)
        return
    share = {}
    for r in merged["cone"]:
        vals = [v for v in r.get("c_star") or [] if isinstance(v, (int, float)) and math.isfinite(v)]
        if vals:
            share[(r.get("_tokens"), r.get("layer"))] = 100.0 * sum(1 for v in vals if v > 0) / len(vals)
    by_len = defaultdict(list)
    for r in layers:
        by_len[r.get("_tokens")].append(r)
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.6))
    for tokens, rs in sorted(by_len.items(), key=lambda kv: kv[0] or 0):
        rs.sort(key=lambda r: r["layer"])
        xs = [r["layer"] for r in rs]
        label = f"{tokens} tokens" if tokens else "prompt"
        num = lambda v: v if isinstance(v, (int, float)) else float("nan")
        axes[0].plot(xs, [num(r.get("c_star_median")) for r in rs], marker="o", markersize=3, label=label)
        axes[1].plot(xs, [share.get((tokens, x), float("nan")) for x in xs], marker="o", markersize=3,
                     label=label)
        (line,) = axes[2].plot(xs, [num(r.get("ratio_median")) for r in rs], marker="o", markersize=3,
                               label=f"{label}, median")
        axes[2].plot(xs, [num(r.get("ratio_p95")) for r in rs], linestyle="--", color=line.get_color(),
                     label=f"{label}, p95")
    axes[0].axhline(0, color="black", linewidth=0.8)
    axes[0].set_ylabel("median c*")
    axes[1].set_ylabel("heads x queries with c* > 0 (%)")
    axes[1].set_ylim(-2, 102)
    axes[2].set_ylabel("F(J^) / F(J*)")
    for ax in axes:
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"near-optimality diagnostics per layer ({model_name(merged)})", fontsize=10)
    save_figure(plt, fig, os.path.join(out_dir, "cone_per_layer.png"), written)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Inputs: kvevict eval --out, kvevict ppl --out and kvevict analyze -m --out files, "
               "of one model (or name it with --model). tools/eval_protocol.py summary draws them "
               "for a whole protocol run.")
    ap.add_argument("inputs", nargs="+", help="results JSON files")
    ap.add_argument("--out", default="plots", help="output directory (created)")
    ap.add_argument("--task", default="average",
                    help="task whose score is plotted (default: the average over tasks)")
    ap.add_argument("--split", default="test", choices=["test", "dev"],
                    help="which seed split's rows to plot (default test: the reported numbers)")
    ap.add_argument("--model", default=None,
                    help="plot only this model's rows (its GGUF name without .gguf); needed when "
                         "the inputs hold several models")
    args = ap.parse_args(argv)
    merged = load_inputs(args.inputs, args.split, args.model)
    os.makedirs(args.out, exist_ok=True)
    written = []
    if not any(merged[k] for k in ("aggregate", "ppl", "cone", "layers")):
        print("note: no aggregate, ppl or diagnostics section in the inputs; nothing to plot",
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
    plot_ppl_ratio(plt, merged, args.out, written)
    plot_cone_hist(plt, merged, args.out, written)
    plot_cone_per_layer(plt, merged, args.out, written)
    for p in written:
        print(p)
    if not written:
        print("note: nothing to plot in the inputs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
