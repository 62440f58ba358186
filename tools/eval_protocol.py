#!/usr/bin/env python3
"""Issue 20's evaluation protocol, step by step, each step time-boxed to one device call.

  tools/eval_protocol.py STEPS BIN_DIR MODELS_DIR CORPUS_DIR [STATE_DIR]

STEPS is a comma-separated list run in order (each step's runs are skipped when their results
file already exists in STATE_DIR, so a step cut by its time box continues where it stopped when
it is called again):
  survey   full cache only, the 11 tasks, both models, SURVEY_LENGTHS, DEV seeds; prints the
           full cache's niah accuracy per length and chooses per model the useful lengths: the
           lengths up to the longest at which the niah average is still >= NIAH_MIN (ascending
           scan, stops at the first length below it; eviction lengths at most EVICT_MAX_LENGTH)
  ablate   the window x pooling ablation of ABLATE_METHODS on DEV seeds (kvevict eval --ablate),
           at the longest useful length; prints each model's grid and the chosen setting
  sweep    the TEST sweep at the useful lengths: group core (kvevict's measured defaults, the
           SPEC defaults as METHOD:spec, a model's own DEV choice where it differs, and the main
           baselines) and group coverage
           (every other method of SPEC 2, the h2o / tova aggregations, kvpress's variants, the
           adakv variants), BUDGETS, both query modes, paired comparisons; the full cache alone
           at the survey lengths beyond the useful ones
  ppl      perplexity under decode-time eviction on Austen's prose (kvevict ppl) per model and
           method, PPL_BUDGETS tokens per head
  analyze  the near-optimality diagnostics on real attention (kvevict analyze -m) per model and
           ANALYZE_LENGTHS
  summary  prints every step's tables again, draws the figures (tools/plot_results.py) and
           writes the demo's table (tools/demo_table.py) into STATE_DIR
  plan     prints what the next steps would run, with estimated seconds; runs nothing
  all      survey,ablate,sweep,ppl,analyze,summary

STATE_DIR (default ./protocol_out) holds one folder per step (JSON + markdown + log per run),
decisions.json (the survey's lengths, the ablation's choices, the sweep's sample counts) and
summary_<step>.md. After the steps, STATE_DIR is packed into $OUT/protocol.tar.xz (PACK=path
elsewhere, PACK=0 not at all), cut into 15 MiB parts when larger (cat the parts to rejoin).
STATE_TAR=path unpacks an earlier pack into STATE_DIR first (a fresh machine: carry it).
DECISIONS='{...}' (JSON, as a step prints it) overrides decisions.json's entries.

Environment (defaults in brackets): DEVICE [cuda]; MODELS [smollm2 gemma3]; TASKS [all];
MAX_NEW [32]; BUDGETS [0.05,0.1,0.2,0.3]; BOOTSTRAP [2000]; TOTAL_S [540] seconds this call
may take (runs that would not end in time are not started; a run is stopped at the box);
JOBS [2] kvevict processes at a time (<STEP>_JOBS for one step; PPL_JOBS [24 on cuda, 4]);
<STEP>_S seconds of the call for that step [the call's time left, shared by weight among the
steps still to run]; SURVEY_LENGTHS [2048,4096,8192,16384]; NIAH_MIN [40];
EVICT_MAX_LENGTH [8192]; SURVEY_SAMPLES [auto, at most 100]; ABLATE_METHODS
[dropkv,obcache_vk]; ABLATE_WINDOWS [8,16,32]; ABLATE_POOLS [none,max:7,max:11,avg:7];
ABLATE_LENGTHS [longest: the longest useful length; or useful, or a list]; ABLATE_SAMPLES
[auto, at most 50]; SWEEP_SAMPLES / SWEEP_COVERAGE_SAMPLES [auto, at most SWEEP_MAX_SAMPLES
= 100]; SWEEP_GROUPS [core,coverage]; SWEEP_SHARD [task: one kvevict process a task,
merged by `kvevict merge`; none: one a run]; SWEEP_CALLS [1] device calls the sweep is sized for
(call the step that many times); CORE_SHARE [0.65] of the sweep's time for group core;
PPL_MODELS [gemma3]; PPL_METHODS [full,dropkv,obcache_v,obcache_k,obcache_vk,h2o,tova,
streamingllm]; PPL_BUDGETS [128,256,512,1024,2048]; PPL_CHUNK [8192, at most the model's
context]; PPL_CHUNKS [16 on cuda: one batch; 1 on cpu]; ANALYZE_LENGTHS [1024,2048,4096,8192]; ANALYZE_QUERIES [4].
"auto" sample counts are sized from the costs measured by the earlier steps of this state
(the results' cost tables and each run's wall time), else from the first GPU sweep's costs.
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ["survey", "ablate", "sweep", "ppl", "analyze", "summary"]
KNOWN_MODELS = {  # key: (file, context tokens)
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", 8192),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", 32768),
}
# The first GPU sweep (docs/RESULTS.md, SmolLM2 at 4K on the H200): used until this state has
# measured costs of its own.
DEFAULT_COST = {"prefill_s": 0.011, "evict_s_per_setting": 0.0034, "decode_s_per_batch": 0.061,
                "append_s_per_batch": 0.08, "settings": 15.0, "target_length": 4096}
PPL_SETTING_S = 17.5  # GPU seconds a ppl setting of 16 x 8192 tokens (H200, step_ppl)
DEFAULT_OVERHEAD_S = 10.0  # model load, samples, tokenization, bootstrap: per run
PACK_RESERVE_S = 25.0
PART_BYTES = 15 * 1024 * 1024


def env(name, default):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def env_int(name, default):
    v = env(name, str(default))
    try:
        return int(v)
    except ValueError:
        sys.exit(f"eval_protocol.py: {name}={v!r} is not an integer")


def env_list(name, default):
    return [x for x in env(name, default).replace(" ", ",").split(",") if x]


def die(msg):
    sys.exit(f"eval_protocol.py: {msg}")


class Protocol:
    def __init__(self, bin_dir, models_dir, corpus, state):
        self.bin = os.path.abspath(bin_dir)
        self.kv = os.path.join(self.bin, "kvevict")
        if not os.access(self.kv, os.X_OK):
            die(f"no kvevict tool at {self.kv}; expected BIN_DIR to hold it")
        self.models_dir = os.path.abspath(models_dir)
        self.corpus = os.path.abspath(corpus)
        if not os.path.isdir(os.path.join(self.corpus, "austen")):
            die(f"{self.corpus} has no austen/; expected scripts/prepare_corpus.sh's output")
        self.state = os.path.abspath(state)
        os.makedirs(self.state, exist_ok=True)
        self.start = time.time()
        self.total_s = float(env("TOTAL_S", "540"))
        self.jobs = max(1, env_int("JOBS", 2))
        self.device = env("DEVICE", "cuda")
        self.models = env_list("MODELS", "smollm2 gemma3")
        self.tasks = env("TASKS", "all")
        self.n_tasks = 11 if self.tasks == "all" else len(self.tasks.split(","))
        self.max_new = env("MAX_NEW", "32")
        self.budgets = env("BUDGETS", "0.05,0.1,0.2,0.3")
        self.bootstrap = env("BOOTSTRAP", "2000")
        self.decisions = self.load_json(os.path.join(self.state, "decisions.json")) or {}
        if env("DECISIONS", ""):
            try:
                self.decisions.update(json.loads(os.environ["DECISIONS"]))
            except json.JSONDecodeError as e:
                die(f"DECISIONS is not JSON ({e}); expected what a step printed")
        self.timings = self.load_json(os.path.join(self.state, "timings.json")) or {}
        self.environ = dict(os.environ)
        lib = os.path.join(os.path.dirname(self.bin), "lib")
        paths = [self.bin] + ([lib] if os.path.isdir(lib) else [])
        if self.environ.get("LD_LIBRARY_PATH"):
            paths.append(self.environ["LD_LIBRARY_PATH"])
        self.environ["LD_LIBRARY_PATH"] = ":".join(paths)
        self.environ["KVEVICT_CORPUS_DIR"] = self.corpus
        self.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    # ---- state -------------------------------------------------------------------------------
    @staticmethod
    def load_json(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, json.JSONDecodeError):
            return None

    def save_state(self):
        for name, obj in (("decisions.json", self.decisions), ("timings.json", self.timings)):
            tmp = os.path.join(self.state, name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=1, sort_keys=True)
            os.replace(tmp, os.path.join(self.state, name))

    def left(self):
        return self.total_s - (time.time() - self.start) - PACK_RESERVE_S

    def model_file(self, key):
        f = KNOWN_MODELS.get(key, (key, 0))[0]
        return f if os.path.isabs(f) else os.path.join(self.models_dir, f)

    def context(self, key):
        return KNOWN_MODELS.get(key, ("", 1 << 30))[1]

    # ---- costs -------------------------------------------------------------------------------
    def measured_cost(self, model, length):
        """This model's costs measured at (or nearest to) this length, scaled to it: the cost
        rows of one results file at one length (both modes: the question append is the
        query-agnostic row's), preferring runs that evicted (more than one setting)."""
        cands = []
        for path in glob.glob(os.path.join(self.state, "*", f"{model}_*.json")):
            doc = self.load_json(path)
            if not isinstance(doc, dict):
                continue
            rows = [c for c in doc.get("cost") or []
                    if c.get("target_length", -1) > 0 and c.get("mode") != "all" and c.get("samples")]
            for L in {c["target_length"] for c in rows}:
                at = [c for c in rows if c["target_length"] == L]
                settings = max(c.get("settings") or 1 for c in at)
                cands.append(((settings <= 1, abs(math.log(L / length)), -sum(c["samples"] for c in at)),
                              L, at))
        if not cands:
            c = dict(DEFAULT_COST, measured=False)
        else:
            _, L, at = min(cands, key=lambda x: x[0])
            mean = lambda k: sum(c.get(k) or 0 for c in at) / len(at)
            c = {"prefill_s": mean("prefill_s"), "evict_s_per_setting": mean("evict_s_per_setting"),
                 "decode_s_per_batch": mean("decode_s_per_batch"),
                 "append_s_per_batch": max(c.get("append_s_per_batch") or 0 for c in at),
                 "settings": max(c.get("settings") or 1 for c in at), "target_length": L,
                 "measured": True}
            if c["settings"] <= 1:  # a full-cache run measures no eviction
                c["evict_s_per_setting"] = DEFAULT_COST["evict_s_per_setting"] * L / DEFAULT_COST["target_length"]
                c["append_s_per_batch"] = c["append_s_per_batch"] or DEFAULT_COST["append_s_per_batch"] / DEFAULT_COST["settings"]
        scale = length / c["target_length"]
        c["prefill_s"] *= scale
        c["evict_s_per_setting"] *= scale
        return c

    def overhead(self, model):
        vals = [t["wall_s"] - t.get("busy_s", 0) for k, t in self.timings.items()
                if k.split("/")[-1].startswith(model + "_") and t.get("wall_s")]
        return max(5.0, sum(vals) / len(vals)) if vals else DEFAULT_OVERHEAD_S

    def parallel_factor(self):
        """Measured speed-up of JOBS processes at a time (busy seconds / wall seconds)."""
        f = self.decisions.get("parallel_factor")
        return max(1.0, min(float(self.jobs), float(f))) if f else 1.0

    def per_sample_s(self, model, length, settings, modes):
        """Seconds of one sample (one task) in all its query modes: prefill, evictions, decode."""
        c = self.measured_cost(model, length)
        rows = max(1, settings)
        ratio = rows / max(1.0, c.get("settings") or 1.0)
        decode = (c.get("decode_s_per_batch") or DEFAULT_COST["decode_s_per_batch"]) * max(1.0, ratio) ** 0.5
        append = (c.get("append_s_per_batch") or 0) * ratio
        one = c["prefill_s"] + rows * c["evict_s_per_setting"] + decode
        return modes * one + (append if modes > 1 else 0)

    def size_samples(self, key, name, runs, budget_s, cap, floor=2):
        """The sample count per task that fits `runs` [(model, length, settings, modes)] into
        budget_s seconds of this machine; an integer env NAME overrides it. Fixed in
        decisions.json["samples"][key] once chosen, so a resumed step keeps it."""
        fixed = env(name, "auto")
        samples = self.decisions.setdefault("samples", {})
        if fixed != "auto":
            try:
                samples[key] = int(fixed)
            except ValueError:
                die(f"{name}={fixed!r}: expected an integer or auto")
        if key in samples:
            return samples[key]
        samples[key] = self.estimate_samples(runs, budget_s, cap, floor)
        return samples[key]

    def estimate_samples(self, runs, budget_s, cap, floor):
        if not runs:
            return floor
        par = self.parallel_factor()
        over = sum(self.overhead(m) for m, _, _, _ in runs) / min(self.jobs, len(runs))
        per_n = sum(self.n_tasks * self.per_sample_s(m, L, s, md) for m, L, s, md in runs) / par
        n = int((budget_s * 0.85 - over) / per_n) if per_n > 0 else cap
        return max(floor, min(cap, n))

    # ---- running -----------------------------------------------------------------------------
    def run_all(self, step, runs, default_jobs=None):
        """runs: [(name, argv, estimate_s)]; results go to STATE/step/name.json. Runs whose JSON
        exists are skipped; at most JOBS at a time; a run is started only when its estimate fits
        the time left and is stopped at the time box."""
        d = os.path.join(self.state, step)
        os.makedirs(d, exist_ok=True)
        todo = [r for r in runs if self.load_json(os.path.join(d, r[0] + ".json")) is None]
        done_before = len(runs) - len(todo)
        if done_before:
            print(f"[{step}] {done_before} of {len(runs)} runs already done (resumed)", flush=True)
        todo.sort(key=lambda r: -r[2])
        jobs = max(1, env_int(step.upper() + "_JOBS", default_jobs or self.jobs))
        active, status, t_step = [], {}, time.time()
        busy_total = 0.0
        while todo or active:
            while todo and len(active) < jobs:
                name, argv, est = todo[0]
                left = self.left()
                if est * 1.1 > left:
                    # The largest that fits goes first; the others wait for the next call.
                    fits = [r for r in todo if r[2] * 1.1 <= left]
                    if not fits:
                        for r in todo:
                            status[r[0]] = f"not started: needs ~{r[2]:.0f} s, {max(0, left):.0f} s left"
                        todo = []
                        break
                    name, argv, est = fits[0]
                todo = [r for r in todo if r[0] != name]
                log = open(os.path.join(d, name + ".log"), "w", encoding="utf-8")
                log.write("+ " + " ".join(argv) + "\n")
                log.flush()
                print(f"[{step}] start {name} (~{est:.0f} s)", flush=True)
                p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=self.environ)
                active.append((name, p, time.time(), log))
            time.sleep(0.5)
            for a in list(active):
                name, p, t0, log = a
                rc = p.poll()
                if rc is None and self.left() + PACK_RESERVE_S * 0.5 > 0:
                    continue
                if rc is None:
                    p.terminate()
                    try:
                        rc = p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        rc = p.wait()
                    status[name] = "stopped at the time box (run the step again to redo it)"
                wall = time.time() - t0
                log.close()
                active.remove(a)
                doc = self.load_json(os.path.join(d, name + ".json"))
                busy = 0.0
                if isinstance(doc, dict):
                    busy = sum(c.get("total_s") or 0 for c in doc.get("cost") or []
                               if c.get("mode") == "all")
                if rc == 0 and doc is not None:
                    status[name] = f"done in {wall:.0f} s"
                    self.timings[f"{step}/{name}"] = {"wall_s": wall, "busy_s": busy}
                    busy_total += wall
                elif name not in status:
                    tail = open(os.path.join(d, name + ".log"), encoding="utf-8",
                                errors="replace").read().strip().splitlines()[-2:]
                    status[name] = f"FAILED (exit {rc}): " + " | ".join(tail)
                print(f"[{step}] {name}: {status[name]}", flush=True)
        wall_step = time.time() - t_step
        if busy_total > 0 and wall_step > 1 and jobs > 1:
            self.decisions["parallel_factor"] = round(busy_total / wall_step, 2)
        self.save_state()
        missing = [r[0] for r in runs if self.load_json(os.path.join(d, r[0] + ".json")) is None]
        return missing, status

    def eval_argv(self, model, out, lengths, samples, methods, modes="aware,agnostic",
                  split="test", budgets=None, extra=()):
        return [self.kv, "eval", "-m", self.model_file(model), "--device", self.device,
                "--tasks", self.tasks, "--lengths", ",".join(str(x) for x in lengths),
                "--samples", str(samples), "--methods", methods,
                "--budgets", budgets or self.budgets, "--modes", modes, "--split", split,
                "--max-new", self.max_new, "--skip-unfit", "--bootstrap", self.bootstrap,
                "--progress-every", "30", "--out", out + ".json", "--markdown", out + ".md",
                *extra]

    # ---- steps -------------------------------------------------------------------------------
    def step_survey(self):
        lengths = [int(x) for x in env_list("SURVEY_LENGTHS", "2048,4096,8192,16384")]
        plan = [(m, L) for m in self.models for L in lengths if L <= self.context(m)]
        for m in self.models:
            for L in lengths:
                if L > self.context(m):
                    print(f"[survey] {m}: {L} tokens exceed its {self.context(m)}-token context; "
                          "not measured", flush=True)
        n = self.size_samples("survey", "SURVEY_SAMPLES", [(m, L, 1, 1) for m, L in plan],
                              self.step_budget, cap=100)
        d = os.path.join(self.state, "survey")
        runs = [(f"{m}_{L}", self.eval_argv(m, os.path.join(d, f"{m}_{L}"), [L], n, "full",
                                            modes="aware", split="dev", extra=["--compare", ""]),
                 self.overhead(m) + n * self.n_tasks * self.per_sample_s(m, L, 1, 1))
                for m, L in plan]
        print(f"[survey] {len(runs)} runs, {n} DEV samples a task, full cache, query-aware", flush=True)
        missing, status = self.run_all("survey", runs)
        self.choose_lengths()
        return missing, status

    def niah_by_length(self, model):
        """{length: (niah average, task average, its CI, samples)} from the survey's files."""
        out = {}
        for path in glob.glob(os.path.join(self.state, "survey", f"{model}_*.json")):
            doc = self.load_json(path)
            for a in (doc or {}).get("aggregate") or []:
                if a.get("method") != "full":
                    continue
                L = a["target_length"]
                e = out.setdefault(L, {"niah": [], "avg": None, "n": 0})
                if a["task"].startswith("niah"):
                    e["niah"].append(a["score"])
                    e["n"] += a["samples"]
                elif a["task"] == "average":
                    e["avg"] = a
        return out

    def choose_lengths(self):
        nmin = float(env("NIAH_MIN", "40"))
        emax = int(env("EVICT_MAX_LENGTH", "8192"))
        chosen = self.decisions.setdefault("useful_lengths", {})
        lines = [f"## Survey: full cache, DEV seeds (niah = mean of the niah tasks; rule: "
                 f"lengths up to the longest with niah >= {nmin:g}, eviction at most {emax})", "",
                 "| model | length | niah avg | task avg [95% CI] | niah samples |",
                 "|---|---|---|---|---|"]
        for m in self.models:
            rows = self.niah_by_length(m)
            useful = []
            stopped = False
            for L in sorted(rows):
                e = rows[L]
                niah = sum(e["niah"]) / len(e["niah"]) if e["niah"] else float("nan")
                a = e["avg"]
                avg = (f"{a['score']:.1f} [{a['ci_low']:.1f}, {a['ci_high']:.1f}]"
                       if a and a.get("ci_low") is not None else (f"{a['score']:.1f}" if a else "-"))
                lines.append(f"| {m} | {L} | {niah:.1f} | {avg} | {e['n']} |")
                if not stopped and niah >= nmin and L <= emax:
                    useful.append(L)
                elif niah < nmin:
                    stopped = True
            if rows:
                if not useful:
                    useful = [min(rows)]
                    lines.append(f"| {m} | no length reaches niah {nmin:g}: the shortest, {useful[0]}, "
                                 "is used and the tables must say so | | | |")
                chosen[m] = useful
        lines += ["", "useful lengths: " + json.dumps(chosen)]
        self.write_summary("survey", lines)
        self.save_state()

    def chosen_settings(self, model):
        return self.decisions.get("chosen", {}).get(model, {})

    def step_ablate(self):
        methods = env("ABLATE_METHODS", "dropkv,obcache_vk")
        windows = env("ABLATE_WINDOWS", "8,16,32")
        pools = env("ABLATE_POOLS", "none,max:7,max:11,avg:7")
        which = env("ABLATE_LENGTHS", "longest")
        runs_spec = []
        for m in self.models:
            useful = self.decisions.get("useful_lengths", {}).get(m)
            if not useful:
                print(f"[ablate] {m}: no useful lengths (run survey first, or DECISIONS="
                      f"'{{\"useful_lengths\": {{\"{m}\": [4096]}}}}'); skipped", flush=True)
                continue
            Ls = ([max(useful)] if which == "longest" else useful if which == "useful"
                  else [int(x) for x in which.split(",")])
            runs_spec.append((m, Ls))
        nb = len(self.budgets.split(","))
        grid = len(methods.split(",")) * (len(windows.split(",")) * len(pools.split(",")) + 1)
        dev_settings, test_settings = 1 + grid * nb, 1 + 2 * len(methods.split(",")) * nb
        cost_spec = [(m, L, dev_settings + test_settings, 2) for m, Ls in runs_spec for L in Ls]
        n = self.size_samples("ablate", "ABLATE_SAMPLES", cost_spec, self.step_budget, cap=50)
        d = os.path.join(self.state, "ablate")
        runs = []
        for m, Ls in runs_spec:
            est = self.overhead(m) + n * self.n_tasks * sum(
                self.per_sample_s(m, L, dev_settings, 2) + self.per_sample_s(m, L, test_settings, 2)
                for L in Ls)
            runs.append((f"{m}_ablation", self.eval_argv(
                m, os.path.join(d, f"{m}_ablation"), Ls, n, "full",
                extra=["--ablate", methods, "--ablate-windows", windows, "--ablate-pools", pools]),
                est))
        print(f"[ablate] {len(runs)} runs, {n} DEV (and as many TEST) samples a task, "
              f"{dev_settings} DEV settings a sample", flush=True)
        missing, status = self.run_all("ablate", runs)
        self.record_choices()
        return missing, status

    def record_choices(self):
        chosen = self.decisions.setdefault("chosen", {})
        lines = ["## Ablation on DEV seeds: mean DEV task average over (length, mode, budget) cells", ""]
        grid_scores = {}
        for m in self.models:
            doc = self.load_json(os.path.join(self.state, "ablate", f"{m}_ablation.json"))
            if not isinstance(doc, dict):
                continue
            cells = {}
            for a in doc.get("aggregate") or []:
                if a.get("split") == "dev" and a["task"] == "average" and a["method"] != "full":
                    cells.setdefault(a["method"], []).append(a["score"])
            lines += [f"### {m}", "", "| setting | DEV mean | cells |", "|---|---|---|"]
            for s, v in sorted(cells.items(), key=lambda kv: -sum(kv[1]) / len(kv[1])):
                lines.append(f"| {s} | {sum(v) / len(v):.2f} | {len(v)} |")
                grid_scores.setdefault(s, {})[m] = sum(v) / len(v)
            for c in doc.get("ablation") or []:
                chosen.setdefault(m, {})[c["method"]] = c["chosen"]
                lines.append(f"\nchosen for {c['method']}: **{c['chosen']}** (DEV {c['dev_score']:.2f} "
                             f"over {c['cells']} cells; SPEC default {c['default_dev_score']:.2f})")
            for cmp in doc.get("comparisons") or []:
                if cmp["task"] == "average" and cmp.get("split") == "test" and \
                        any(cmp["a"] == v for v in chosen.get(m, {}).values()):
                    ci = (f" [{cmp['diff_ci_low']:+.1f}, {cmp['diff_ci_high']:+.1f}]"
                          if cmp.get("diff_ci_low") is not None else "")
                    lines.append(f"- TEST {cmp['target_length']} {cmp['mode']} @{cmp['budget']}: "
                                 f"{cmp['a']} - {cmp['b']} = {cmp['diff']:+.1f}{ci}")
            lines.append("")
        # One library default for both models: the grid setting with the best mean over the
        # models of their DEV means (measured on every model; ties: the earlier grid setting, as
        # the C++ choice breaks them).
        pooled = {}
        n_models = len([m for m in self.models if m in chosen])
        for base in env("ABLATE_METHODS", "dropkv,obcache_vk").split(","):
            for w in env("ABLATE_WINDOWS", "8,16,32").split(","):
                for pool in env("ABLATE_POOLS", "none,max:7,max:11,avg:7").split(","):
                    s = f"{base}:w={w}:pool={pool}"
                    per = grid_scores.get(s, {})
                    if n_models and len(per) == n_models:
                        mean = sum(per.values()) / len(per)
                        if base not in pooled or mean > pooled[base][1]:
                            pooled[base] = (s, mean)
        self.decisions["library_default_candidate"] = {b: s for b, (s, _) in pooled.items()}
        lines.append("library default candidate (best mean over the models' DEV means): " +
                     json.dumps(self.decisions["library_default_candidate"]))
        lines.append("DECISIONS for a fresh machine: " + json.dumps(
            {k: self.decisions[k] for k in ("useful_lengths", "chosen") if k in self.decisions}))
        self.write_summary("ablate", lines)
        self.save_state()

    def sweep_methods(self, model):
        """Group core and group coverage for this model, with the chosen settings passed
        explicitly (their modifiers applied to the methods that share their score)."""
        ch = self.chosen_settings(model)
        def mods(base):
            s = ch.get(base, "")
            return s[len(base):] if s.startswith(base + ":") else ""
        # kvevict's measured defaults (kvevict/method.h) are the plain names; the SPEC ones are
        # METHOD:spec; a model's own DEV choice is added where it differs from the library's.
        lib = ":w=32:pool=max:11"
        dk, ob = mods("dropkv"), mods("obcache_vk")
        dk, ob = ("" if dk == lib else dk), ("" if ob == lib else ob)
        core = ["full", "dropkv", "adadropkv", "obcache_vk", "dropkv:spec", "adadropkv:spec",
                "obcache_vk:spec", "snapkv", "adakv", "h2o", "tova", "streamingllm", "knorm"]
        extra_core, extra_cov = [], []
        if dk:
            extra_core += ["dropkv" + dk, "adadropkv" + dk]
        if ob:
            extra_core += ["obcache_vk" + ob]
        extra_cov += ["obcache_v" + (ob or lib), "obcache_k" + (ob or lib)]
        coverage = ["full", "snapkv", "h2o", "tova", "obcache_v", "obcache_k", "keydiff", "vatp",
                    "criticalkv", "random", "aggregations", "kvpress", "adakv-variants"]
        compare_core = ["dropkv/snapkv", "adadropkv/adakv", "obcache_vk/snapkv",
                        "dropkv:spec/snapkv", "dropkv/dropkv:spec", "obcache_vk/obcache_vk:spec"]
        if dk:
            compare_core += [f"dropkv{dk}/snapkv", f"adadropkv{dk}/adakv", f"dropkv{dk}/dropkv"]
        if ob:
            compare_core += [f"obcache_vk{ob}/snapkv", f"obcache_vk{ob}/obcache_vk"]
        compare_cov = ["obcache_vk:h2o/h2o", "obcache_vk:tova/tova", "dropkv:h2o/h2o",
                       "dropkv:tova/tova", "obcache_vk:adakv/adakv", "snapkv:kvpress/snapkv",
                       "h2o:kvpress/h2o", "tova:kvpress/tova"]
        # settings per budget (groups expand in kvevict: 8 aggregations, 3 kvpress, 7 adakv variants)
        return {"core": (core + extra_core, compare_core, len(core) - 1 + len(extra_core)),
                "coverage": (coverage + extra_cov, compare_cov, len(coverage) - 4 + 18 + len(extra_cov))}

    def step_sweep(self):
        groups = env_list("SWEEP_GROUPS", "core,coverage")
        nb = len(self.budgets.split(","))
        cap = env_int("SWEEP_MAX_SAMPLES", 100)
        budget_s = self.step_budget + (float(env("SWEEP_CALLS", "1")) - 1) * (self.total_s - PACK_RESERVE_S)
        share = {"core": float(env("CORE_SHARE", "0.65"))}
        share["coverage"] = 1.0 - share["core"] if "core" in groups else 1.0
        if "coverage" not in groups:
            share["core"] = 1.0
        survey_lengths = [int(x) for x in env_list("SURVEY_LENGTHS", "2048,4096,8192,16384")]
        d = os.path.join(self.state, "sweep")
        runs = []
        for g in groups:
            if g not in ("core", "coverage"):
                die(f"SWEEP_GROUPS has '{g}'; expected core and/or coverage")
            spec = []  # one run per (model, length, group): every budget, both modes
            for m in self.models:
                useful = self.decisions.get("useful_lengths", {}).get(m)
                if not useful:
                    print(f"[sweep] {m}: no useful lengths (run survey first); skipped", flush=True)
                    continue
                if not self.chosen_settings(m):
                    print(f"[sweep] {m}: no ablation choice: the SPEC defaults only", flush=True)
                spec += [(m, L, self.sweep_methods(m)[g][2] * nb + 1, 2) for L in useful]
                if g == "core":  # the full cache alone beyond the useful lengths
                    spec += [(m, L, 1, 2) for L in survey_lengths
                             if L > max(useful) and L <= self.context(m)]
            n = self.size_samples("sweep_" + g,
                                  "SWEEP_SAMPLES" if g == "core" else "SWEEP_COVERAGE_SAMPLES",
                                  spec, budget_s * share[g], cap=cap)
            for m, L, nset, modes in spec:
                methods, compare, _ = self.sweep_methods(m)[g]
                full_only = nset == 1
                name = f"{m}_{L}_" + ("fullonly" if full_only else g)
                runs.append((name, self.eval_argv(
                    m, os.path.join(d, name), [L], n, "full" if full_only else ",".join(methods),
                    extra=["--compare", "" if full_only else ",".join(compare)]),
                    self.overhead(m) + n * self.n_tasks * self.per_sample_s(m, L, nset, modes)))
        self.save_state()
        samples = self.decisions.get("samples", {})
        print(f"[sweep] {len(runs)} runs; TEST samples a task: " +
              ", ".join(f"{g} {samples.get('sweep_' + g)}" for g in groups), flush=True)
        if env("SWEEP_SHARD", "task") == "task":
            shards = self.shard_by_task(runs)
            missing, status = self.run_all("sweep", [r for rs in shards.values() for r in rs])
            missing, merged = self.merge_shards("sweep", shards)
            status.update(merged)
        else:
            missing, status = self.run_all("sweep", runs)
        self.summarize_sweep()
        return missing, status

    # One kvevict process per (run, task), side by side (JOBS), merged back into the run's file
    # by `kvevict merge` (the same cells, intervals and paired comparisons as one process:
    # tests/eval/results_merge_test.cpp). One process leaves most of the GPU idle (host work
    # between launches), and a run of 11 x 100 samples would not fit one device call.
    def task_names(self):
        """The tasks of a run: TASKS, or every task `kvevict eval --list-tasks` prints (the C++
        task table is the one list)."""
        if self.tasks != "all":
            return self.tasks.split(",")
        if not hasattr(self, "_all_tasks"):
            p = subprocess.run([self.kv, "eval", "--list-tasks"], capture_output=True, text=True,
                               env=self.environ)
            if p.returncode != 0:
                die(f"'{self.kv} eval --list-tasks' failed: {p.stderr.strip()}")
            self._all_tasks = [ln.split()[0] for ln in p.stdout.splitlines()[1:]
                               if ln.strip() and not ln.startswith("-")]
        return self._all_tasks

    def shard_by_task(self, runs):
        shards = {}
        for name, argv, est in runs:
            tasks = self.task_names()
            per = []
            for t in tasks:
                a = list(argv)
                a[a.index("--tasks") + 1] = t
                out = a[a.index("--out") + 1][:-len(".json")]
                shard_out = os.path.join(os.path.dirname(out), "shards", f"{name}.{t}")
                a[a.index("--out") + 1] = shard_out + ".json"
                a[a.index("--markdown") + 1] = shard_out + ".md"
                per.append((f"shards/{name}.{t}", a, est / len(tasks) + 10))
            shards[name] = per
        os.makedirs(os.path.join(self.state, "sweep", "shards"), exist_ok=True)
        return shards

    def merge_shards(self, step, shards):
        d = os.path.join(self.state, step)
        missing, status = [], {}
        for name, per in shards.items():
            out = os.path.join(d, name)
            if self.load_json(out + ".json") is not None:
                continue
            files = [os.path.join(d, r[0] + ".json") for r in per]
            if not all(os.path.exists(f) for f in files):
                missing.append(name)
                continue
            argv = [self.kv, "merge", *files, "--out", out + ".json", "--markdown", out + ".md"]
            p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=self.environ)
            status[name] = "merged" if p.returncode == 0 else f"merge FAILED: {p.stderr.strip()}"
            print(f"[{step}] {name}: {status[name]}", flush=True)
            if p.returncode != 0:
                missing.append(name)
        return missing, status

    def step_ppl(self):
        """One kvevict ppl run per (model, method, budget), side by side, merged per model by
        `kvevict merge` (pairs against streamingllm are recomputed by chunk across the runs)."""
        methods = env("PPL_METHODS", "full,dropkv,obcache_v,obcache_k,obcache_vk,h2o,tova,streamingllm")
        budgets = env("PPL_BUDGETS", "128,256,512,1024,2048")
        chunks = env("PPL_CHUNKS", "16" if self.device == "cuda" else "1")
        d = os.path.join(self.state, "ppl")
        cuda = self.device == "cuda"
        jobs = env_int("PPL_JOBS", 24 if cuda else 4)
        per_model = {}
        runs = []
        for m in env_list("PPL_MODELS", "gemma3"):
            chunk = min(env_int("PPL_CHUNK", 8192), self.context(m))
            step_s = self.measured_cost(m, chunk)["decode_s_per_batch"] / 31.0
            settings = [(meth, b) for meth in methods.split(",")
                        for b in (budgets.split(",")[:1] if meth == "full" else budgets.split(","))]
            for meth, b in settings:
                name = f"{m}_{meth}_{b}"
                if cuda:
                    # Measured on the H200 (2026-12-03): 22 settings of 16 x 8192-token chunks side
                    # by side took 386 s, ~17.5 s of the GPU a setting; runs share the GPU.
                    est = (self.overhead(m) + min(jobs, len(settings)) * PPL_SETTING_S
                           * (chunk / 8192) * (int(chunks) / 16))
                else:
                    est = self.overhead(m) + int(chunks) * chunk * step_s * 1.5
                runs.append((name, [self.kv, "ppl", "-m", self.model_file(m), "--device", self.device,
                                    "--methods", meth, "--budgets", b, "--chunk", str(chunk),
                                    "--chunks", chunks, "--out", os.path.join(d, name + ".json"),
                                    "--markdown", os.path.join(d, name + ".md")], est))
                per_model.setdefault(m, []).append(name)
        missing, status = self.run_all("ppl", runs, default_jobs=jobs)
        lines = ["## Perplexity under decode-time eviction (Austen prose)", "",
                 "| model | method | budget | chunk tokens x chunks | ppl [95%] | ppl / streamingllm [95%] "
                 "| chunks better / worse |", "|---|---|---|---|---|---|---|"]
        for m, names in per_model.items():
            files = [os.path.join(d, n + ".json") for n in names]
            merged = os.path.join(d, f"{m}.json")
            have = [f for f in files if os.path.exists(f)]
            if len(have) >= 2:
                p = subprocess.run([self.kv, "merge", *have, "--out", merged, "--markdown",
                                    os.path.join(d, f"{m}.md")], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, env=self.environ)
                status[m] = "merged" if p.returncode == 0 else f"merge FAILED: {p.stderr.strip()}"
            doc = self.load_json(merged if os.path.exists(merged) else (have or [""])[0]) or {}
            for r in doc.get("ppl") or []:
                ci = (f" [{r['ppl_low']:.2f}, {r['ppl_high']:.2f}]" if r.get("ppl_low") is not None
                      else "")
                pr = r.get("paired") or {}
                ratio = (f"{pr['ppl_ratio']:.3f} [{pr['low']:.3f}, {pr['high']:.3f}]"
                         if pr.get("low") is not None else "-")
                sign = f"{pr['chunks_better']} / {pr['chunks_worse']}" if pr else "-"
                lines.append(f"| {m} | {r['method']} | {r['budget']} | {r['chunk_tokens']} x "
                             f"{r['chunks']} | {r['ppl']:.2f}{ci} | {ratio} | {sign} |")
        self.write_summary("ppl", lines)
        return missing, status

    def step_analyze(self):
        d = os.path.join(self.state, "analyze")
        runs = []
        q = env("ANALYZE_QUERIES", "4")
        for m in self.models:
            for L in [int(x) for x in env_list("ANALYZE_LENGTHS", "1024,2048,4096,8192")]:
                if L > self.context(m):
                    continue
                name = f"{m}_{L}"
                runs.append((name, [self.kv, "analyze", "-m", self.model_file(m), "--device",
                                    self.device, "--length", str(L), "--pool-size", "16",
                                    "--evict", "4", "--queries", q,
                                    "--out", os.path.join(d, name + ".json")],
                             self.overhead(m) + 10.0 * L / 4096))
        missing, status = self.run_all("analyze", runs)
        lines = ["## Near-optimality diagnostics on real attention (analyze -m; L=16, k=4)", "",
                 "| model | prompt tokens | rows | F(J^)/F(J*) median | p95 | c* median | c* > 0 |",
                 "|---|---|---|---|---|---|---|"]
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            doc = self.load_json(path) or {}
            dg = doc.get("diagnostics") or {}
            s = dg.get("summary") or {}
            cs = [v for c in dg.get("cone") or [] for v in c.get("c_star") or []
                  if isinstance(v, (int, float))]
            share = f"{100.0 * sum(1 for v in cs if v > 0) / len(cs):.0f}%" if cs else "-"
            fmt = lambda x: "-" if x is None else f"{x:.4f}"
            lines.append(f"| {os.path.basename(path)[:-5].rsplit('_', 1)[0]} | "
                         f"{(doc.get('meta') or {}).get('prompt_tokens', '?')} | {s.get('rows', '?')} | "
                         f"{fmt(s.get('ratio_median'))} | {fmt(s.get('ratio_p95'))} | "
                         f"{fmt(s.get('c_star_median'))} | {share} |")
        self.write_summary("analyze", lines)
        return missing, status

    def summarize_sweep(self):
        """One table per results file (model, length, group) and query mode: the groups have
        their own sample counts, so their cells are not mixed."""
        lines = ["## TEST sweep: task average [95% CI], samples per cell", ""]
        by = {}
        for path in sorted(glob.glob(os.path.join(self.state, "sweep", "*.json"))):
            doc = self.load_json(path) or {}
            m, _, group = os.path.basename(path)[:-5].split("_", 2)
            for a in doc.get("aggregate") or []:
                if a["task"] == "average":
                    key = (m, a["target_length"], group, a["mode"])
                    by.setdefault(key, {})[(a["method"], a["budget"])] = a
            for c in doc.get("comparisons") or []:
                if c["task"] == "average":
                    by.setdefault((m, c["target_length"], group, c["mode"]), {})[
                        ("cmp", c["a"], c["b"], c["budget"])] = c
        for (m, L, group, mode), cells in sorted(by.items()):
            budgets = sorted({k[1] for k in cells if k[0] != "cmp" and k[1] != "1"}, key=float)
            cols = budgets or ["full"]
            methods = sorted({k[0] for k in cells if k[0] not in ("cmp", "full")})
            lines += [f"### {m}, {L} tokens, {group}, {mode}", "",
                      "| setting | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            if ("full", "1") in cells:
                f = cells[("full", "1")]
                lines.append(f"| full cache | {fmt_cell(f)} (n {f['samples']}) |" + " |" * (len(cols) - 1))
            for meth in methods:
                lines.append(f"| {meth} | " + " | ".join(
                    fmt_cell(cells.get((meth, b))) for b in budgets) + " |")
            cmps = sorted(k for k in cells if k[0] == "cmp")
            if cmps:
                lines += ["", "| paired A - B | budget | diff [95% CI] | A/=/B better |", "|---|---|---|---|"]
                for k in cmps:
                    c = cells[k]
                    ci = (f" [{c['diff_ci_low']:+.1f}, {c['diff_ci_high']:+.1f}]"
                          if c.get("diff_ci_low") is not None else "")
                    lines.append(f"| {c['a']} - {c['b']} | {c['budget']} | {c['diff']:+.1f}{ci} | "
                                 f"{c['a_better']}/{c['equal']}/{c['b_better']} |")
            lines.append("")
        self.write_summary("sweep", lines)

    def write_summary(self, step, lines):
        text = "\n".join(lines) + "\n"
        with open(os.path.join(self.state, f"summary_{step}.md"), "w", encoding="utf-8") as f:
            f.write(text)
        print(text, flush=True)

    def step_summary(self):
        for step in ("survey", "ablate", "sweep", "ppl", "analyze"):
            p = os.path.join(self.state, f"summary_{step}.md")
            if step == "sweep" and os.path.isdir(os.path.join(self.state, "sweep")):
                self.summarize_sweep()  # from the files: a resumed sweep's latest runs too
            elif os.path.exists(p):
                print(open(p, encoding="utf-8").read(), flush=True)
        status = {}
        try:
            import matplotlib  # noqa: F401
            have_mpl = True
        except ImportError:
            have_mpl = False
            status["figures"] = "skipped: no matplotlib (scripts/install_deps.sh --eval)"
        if have_mpl:
            for m in self.models:
                inputs = [p for s in ("sweep", "ppl", "analyze")
                          for p in sorted(glob.glob(os.path.join(self.state, s, f"{m}_*.json")))]
                if not inputs:
                    continue
                out = os.path.join(self.state, "figures", m)
                r = subprocess.run([sys.executable, os.path.join(HERE, "plot_results.py"), *inputs,
                                    "--out", out], capture_output=True, text=True)
                status[f"figures {m}"] = (f"{len(r.stdout.split())} figures in {out}" if r.returncode == 0
                                          else f"FAILED: {r.stderr.strip()[-300:]}")
        sweep = sorted(glob.glob(os.path.join(self.state, "sweep", "*.json")))
        if sweep:
            r = subprocess.run([sys.executable, os.path.join(HERE, "demo_table.py"), *sweep, "--out",
                                os.path.join(self.state, "demo_table.json")],
                               capture_output=True, text=True)
            status["demo table"] = r.stdout.strip() or r.stderr.strip()[-300:]
        return [], status

    def step_plan(self):
        print("decisions: " + json.dumps(self.decisions), flush=True)
        nb = len(self.budgets.split(","))
        for m in self.models:
            for L in self.decisions.get("useful_lengths", {}).get(m, [4096]):
                for g, (_, _, nset) in self.sweep_methods(m).items():
                    c = self.measured_cost(m, L)
                    print(f"{m} {L} {g}: {nset * nb + 1} settings ({nb} budgets), "
                          f"{self.per_sample_s(m, L, nset * nb + 1, 2):.3f} s a sample in both "
                          f"modes ({'measured' if c['measured'] else 'default'} costs), overhead "
                          f"{self.overhead(m):.0f} s a run", flush=True)
        return [], {}

    def pack(self):
        target = env("PACK", os.path.join(os.environ["OUT"], "protocol.tar.xz") if os.environ.get("OUT") else "0")
        if target == "0":
            return
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        parent, name = os.path.split(self.state)
        if shutil.which("xz") and shutil.which("tar"):
            with open(target, "wb") as f:
                tar = subprocess.Popen(["tar", "-C", parent, "-cf", "-", name], stdout=subprocess.PIPE)
                subprocess.run(["xz", "-T0", "-3"], stdin=tar.stdout, stdout=f, check=True)
                if tar.wait() != 0:
                    die(f"tar of {self.state} failed")
        else:
            with tarfile.open(target, "w:xz", preset=3) as t:
                t.add(self.state, arcname=name)
        size = os.path.getsize(target)
        if size > PART_BYTES:
            with open(target, "rb") as f:
                i = 0
                while True:
                    chunk = f.read(PART_BYTES)
                    if not chunk:
                        break
                    with open(f"{target}.part-{i:02d}", "wb") as g:
                        g.write(chunk)
                    i += 1
            os.remove(target)
            print(f"packed {self.state} into {i} parts {target}.part-* ({size >> 20} MiB; "
                  f"cat them to rejoin)", flush=True)
        else:
            print(f"packed {self.state} into {target} ({size >> 10} KiB)", flush=True)


def fmt_cell(a):
    if not a:
        return "-"
    if a.get("ci_low") is None:
        return f"{a['score']:.1f}"
    return f"{a['score']:.1f} [{a['ci_low']:.1f}, {a['ci_high']:.1f}]"


def main(argv):
    if len(argv) < 4 or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr if len(argv) < 4 and argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    steps = argv[0].split(",")
    if steps == ["all"]:
        steps = STEPS
    for s in steps:
        if s not in STEPS + ["plan"]:
            die(f"unknown step '{s}'; expected survey, ablate, sweep, ppl, analyze, summary, plan or all")
    state = argv[4] if len(argv) > 4 else "protocol_out"
    if env("STATE_TAR", "") and not os.path.exists(os.path.join(state, "decisions.json")):
        tars = sorted(glob.glob(os.environ["STATE_TAR"] + "*"))
        if not tars:
            die(f"STATE_TAR={os.environ['STATE_TAR']}: no such file")
        data = b"".join(open(p, "rb").read() for p in tars)
        tmp = os.path.abspath(state) + ".unpack"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        import io
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as t:
            t.extractall(tmp, filter="data") if sys.version_info >= (3, 12) else t.extractall(tmp)
        inner = [os.path.join(tmp, x) for x in os.listdir(tmp)]
        if len(inner) != 1:
            die(f"STATE_TAR holds {len(inner)} folders; expected one (a pack of this tool)")
        shutil.rmtree(state, ignore_errors=True)
        os.replace(inner[0], state)
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"unpacked {os.environ['STATE_TAR']} into {state}", flush=True)
    p = Protocol(argv[1], argv[2], argv[3], state)
    results = {}
    weights = {"survey": 1.0, "ablate": 1.5, "sweep": 3.0, "ppl": 1.5, "analyze": 0.3}
    for i, s in enumerate(steps):
        # This step's share of what is left of the call: <STEP>_S, else by weight.
        rest = sum(weights.get(x, 0) for x in steps[i:]) or 1.0
        p.step_budget = float(env(s.upper() + "_S", str(max(0.0, p.left()) * weights.get(s, 0) / rest)))
        t0 = time.time()
        missing, status = getattr(p, "step_" + s)()
        results[s] = (missing, status, time.time() - t0)
    p.save_state()
    print("=================== protocol status", flush=True)
    bad = False
    for s, (missing, status, secs) in results.items():
        print(f"{s}: {secs:.0f} s; " + ("complete" if not missing else
                                       f"{len(missing)} runs missing: {', '.join(missing)}"))
        for k, v in sorted(status.items()):
            if not v.startswith("done"):
                print(f"  {k}: {v}")
                bad = bad or v.startswith("FAILED")
        bad = bad or bool(missing) and s != "summary"
    print("decisions: " + json.dumps({k: v for k, v in p.decisions.items()}), flush=True)
    p.pack()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
