// kvevict analyze: DropKV's near-optimality diagnostics (SPEC section 6) on given q/k/v tensors:
// per query head, the exact optimum over a candidate pool vs the per-token proxy, the cone
// constant, the small-weight eps and the theorem's factor.
#include <CLI/CLI.hpp>

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/progress.h"
#include "cli/prompt_args.h"
#include "cli/tensor_args.h"
#include "eval/provenance.h"
#include "eval/report.h"
#include "eval/results_format.h"
#include "kvevict/diagnostics.h"
#include "kvevict/error.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct AnalyzeArgs {
  ModelArgs model;
  bool use_model = false;
  PromptArgs prompt;
  std::string out;
  std::string q, k, v;
  int pool_size = 16;
  int evict = 4;
  int queries = 1;
  std::string pool = "lowest";
  uint64_t seed = 0;
  float scale = 0.0f;
  bool bf16 = false;
  bool json = false;
};

double quantile(std::vector<double> xs, double q) {
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return !std::isfinite(x); }),
           xs.end());
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  const double pos = q * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (pos - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}

// The diagnostics on a real model's attention: prefill a prompt (Austen prose of --length tokens,
// or -p TEXT), keep each layer's last queries, and run SPEC section 6 per layer and head.
int run_analyze_model(const AnalyzeArgs& a, const diag::DiagnosticsOptions& base) {
  const std::string model_file = a.model.file();
  check_output_args({{a.out, "--out"}}, {{model_file, "-m"}, {a.prompt.file, "-f"}});
  const ModelInfo info = a.model.inspect();
  const std::vector<int32_t> tokens = prompt_or_prose_tokens(info, a.prompt);
  KVEVICT_CHECK(static_cast<int64_t>(tokens.size()) > base.pool_size, "the prompt has ",
                tokens.size(), " tokens; expected more than --pool-size ", base.pool_size);
  KVEVICT_CHECK(base.num_queries <= static_cast<int64_t>(tokens.size()), "--queries ",
                base.num_queries, " exceeds the prompt's ", tokens.size(),
                " tokens; expected at most that many");
  const auto model = a.model.load();
  ProgressBar bar("prefill", static_cast<int64_t>(tokens.size()), !a.json);
  const auto rt = a.model.runtime(model, [&bar](int64_t done, int64_t) { bar.update(done); });
  PrefillOptions popt;
  popt.keep_queries = base.num_queries;
  // The prefill runs on --device; the diagnostics (exact optimum, cone constant) read the real
  // attention in host memory.
  const PrefillSnapshot snap = rt->prefill_snapshot(tokens, popt)->to_host();
  bar.finish();

  const auto& mc = model->config();
  diag::DiagnosticsOptions opt = base;
  opt.scale = mc.logit_scale();
  nlohmann::json layers = nlohmann::json::array(), cone = nlohmann::json::array();
  std::vector<double> all_ratio, all_factor, all_c;
  for (int l = 0; l < mc.n_layers; ++l) {
    if (mc.is_sliding(l)) continue;  // sliding-window layers are never evicted
    const KVLayerView cache = snap.caches[l].view();
    const diag::DiagnosticsReport r =
        diag::run_diagnostics(snap.queries[l].view(), cache.uniform_k(), cache.uniform_v(), opt);
    std::vector<double> ratio, factor, c_star, eps;
    for (const auto& row : r.rows) {
      ratio.push_back(row.ratio);
      factor.push_back(row.factor);
      c_star.push_back(row.c_star);
      eps.push_back(row.eps);
    }
    all_ratio.insert(all_ratio.end(), ratio.begin(), ratio.end());
    all_factor.insert(all_factor.end(), factor.begin(), factor.end());
    all_c.insert(all_c.end(), c_star.begin(), c_star.end());
    layers.push_back({{"layer", l},
                      {"rows", r.rows.size()},
                      {"ratio_median", quantile(ratio, 0.5)},
                      {"ratio_p95", quantile(ratio, 0.95)},
                      {"c_star_median", quantile(c_star, 0.5)},
                      {"eps_median", quantile(eps, 0.5)},
                      {"factor_median", quantile(factor, 0.5)},
                      {"factor_applicable", r.factor_applicable}});
    cone.push_back({{"layer", l}, {"c_star", c_star}});
  }
  nlohmann::json j;
  j["kind"] = "kvevict-results";
  j["version"] = 1;
  // Provenance as every results file has it (model file sha256, commit, command, date, device),
  // plus the prompt's length.
  eval::RunMeta meta;
  meta.model = model->path();  // as before: the plot script names the model by its file
  eval::fill_provenance(meta, model->path(), rt->describe());
  j["meta"] = eval::meta_to_json(meta);
  j["meta"]["prompt_tokens"] = tokens.size();
  j["diagnostics"] = {
      {"options",
       {{"pool_size", opt.pool_size},
        {"evict", opt.k},
        {"queries", opt.num_queries},
        {"pool", opt.pool == diag::PoolChoice::kRandom ? "random" : "lowest_proxy"}}},
      {"summary",
       {{"ratio_median", quantile(all_ratio, 0.5)},
        {"ratio_p95", quantile(all_ratio, 0.95)},
        {"c_star_median", quantile(all_c, 0.5)},
        {"factor_median", quantile(all_factor, 0.5)},
        {"rows", all_ratio.size()}}},
      {"layers", layers},
      {"cone", cone}};
  if (!a.out.empty()) eval::write_text_file(a.out, j.dump(1), "--out");
  if (a.json) {
    print_json(j);
    return 0;
  }
  std::printf("%s, %zu-token prompt, L=%d k=%d, %d queries per head\n", model->path().c_str(),
              tokens.size(), opt.pool_size, opt.k, opt.num_queries);
  std::printf("%5s %6s %12s %10s %10s %10s %12s\n", "layer", "rows", "ratio med", "ratio p95",
              "c* med", "eps med", "factor med");
  for (const auto& L : layers)
    std::printf("%5d %6d %12.4f %10.4f %10.4f %10.4g %12.4g\n", L["layer"].get<int>(),
                L["rows"].get<int>(), L["ratio_median"].get<double>(), L["ratio_p95"].get<double>(),
                L["c_star_median"].get<double>(), L["eps_median"].get<double>(),
                L["factor_median"].get<double>());
  std::printf(
      "all layers: ratio median %.4f, p95 %.4f (paper: <= 1.16 / <= 1.43); c* median %.4f; "
      "factor median %.4g\n",
      quantile(all_ratio, 0.5), quantile(all_ratio, 0.95), quantile(all_c, 0.5),
      quantile(all_factor, 0.5));
  return 0;
}

int run_analyze(const AnalyzeArgs& a) {
  diag::DiagnosticsOptions opt;
  opt.pool_size = a.pool_size;
  opt.k = a.evict;
  opt.num_queries = a.queries;
  opt.seed = a.seed;
  opt.scale = a.scale;
  if (a.pool == "lowest")
    opt.pool = diag::PoolChoice::kLowestProxy;
  else if (a.pool == "random")
    opt.pool = diag::PoolChoice::kRandom;
  else
    KVEVICT_FAIL("unknown --pool '", a.pool, "'; expected lowest or random");
  opt.validate();
  if (a.use_model) return run_analyze_model(a, opt);
  KVEVICT_CHECK(
      !a.q.empty() && !a.k.empty() && !a.v.empty(),
      "analyze needs --q, --k and --v tensors, or -m MODEL to analyse a model's attention");
  HostTensor q = load_tensor_arg(a.q, "--q", a.bf16);
  HostTensor k = load_tensor_arg(a.k, "--k", a.bf16);
  HostTensor v = load_tensor_arg(a.v, "--v", a.bf16);
  // run_diagnostics analyses min(--queries, m): more than q holds was silently fewer.
  KVEVICT_CHECK(q.shape().size() != 3 || a.queries <= q.shape()[1], "--queries ", a.queries,
                " exceeds the ", q.shape().size() == 3 ? q.shape()[1] : 0, " queries of --q ", a.q,
                "; expected at most that many");
  const diag::DiagnosticsReport report = diag::run_diagnostics(q.view(), k.view(), v.view(), opt);
  std::printf("%s\n", a.json ? report.to_json().c_str() : report.to_table().c_str());
  return 0;
}

}  // namespace

Runner add_analyze_command(CLI::App& app) {
  auto a = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand(
      "analyze", "Near-optimality diagnostics of the DropKV proxy (exact optimum, cone constant)");
  auto* q = cmd->add_option("--q", a->q, "Queries [Hq, m, d] after RoPE (the last m positions)");
  auto* k = cmd->add_option("--k", a->k, "Keys [Hkv, n, d] after RoPE");
  auto* v = cmd->add_option("--v", a->v, "Values [Hkv, n, d]");
  // Tensors or a model, not both: with both, the tensors were silently ignored.
  auto* m =
      cmd->add_option("-m,--model", a->model.model,
                      "Analyse a model's attention instead (smollm2, gemma3-270m, or a .gguf)")
          ->excludes(q)
          ->excludes(k)
          ->excludes(v);
  add_threads(*cmd, a->model.threads);
  cmd->add_option("--device", a->model.device, "With -m: run the prefill on cpu or cuda")
      ->capture_default_str()
      ->needs(m);
  a->prompt.add_to(*cmd, "With -m: the prompt", /*with_prose=*/true);
  for (CLI::Option* o : {a->prompt.p, a->prompt.f, a->prompt.length_opt}) o->needs(m);
  cmd->add_option("--out", a->out,
                  "With -m: write the results JSON here (for tools/plot_results.py)")
      ->needs(m);
  add_integer(*cmd, "--pool-size", a->pool_size, 1, 24, "Candidate pool size L (exact enumeration)")
      ->capture_default_str();
  add_integer(*cmd, "--evict", a->evict, 1, 24, "Evicted set size k (1 <= k <= L)")
      ->capture_default_str();
  add_integer(*cmd, "--queries", a->queries, 1, 1 << 24, "Analyse each of the last m queries")
      ->capture_default_str();
  cmd->add_option("--pool", a->pool, "Pool choice: lowest (smallest proxy) or random")
      ->capture_default_str();
  add_seed(*cmd, a->seed, "Seed for --pool random");
  add_number(*cmd, "--scale", a->scale, "Logit scale, finite >= 0 (0 = 1/sqrt(d))");
  cmd->add_flag("--bf16", a->bf16, "Read uint16 (<u2) .npy arrays as bfloat16 bits");
  cmd->add_flag("--json", a->json, "Print JSON instead of a table");
  return [a, m] {
    a->use_model = m->count() > 0;
    return run_analyze(*a);
  };
}

}  // namespace kvevict::cli
