// kvevict analyze: DropKV's near-optimality diagnostics (SPEC section 6) on given q/k/v tensors:
// per query head, the exact optimum over a candidate pool vs the per-token proxy, the cone
// constant, the small-weight eps and the theorem's factor.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/tensor_args.h"
#include "kvevict/diagnostics.h"
#include "kvevict/error.h"

namespace kvevict::cli {
namespace {

struct AnalyzeArgs {
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
  HostTensor q = load_tensor_arg(a.q, "--q", a.bf16);
  HostTensor k = load_tensor_arg(a.k, "--k", a.bf16);
  HostTensor v = load_tensor_arg(a.v, "--v", a.bf16);
  const diag::DiagnosticsReport report = diag::run_diagnostics(q.view(), k.view(), v.view(), opt);
  std::printf("%s\n", a.json ? report.to_json().c_str() : report.to_table().c_str());
  return 0;
}

}  // namespace

Runner add_analyze_command(CLI::App& app) {
  auto a = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand(
      "analyze", "Near-optimality diagnostics of the DropKV proxy (exact optimum, cone constant)");
  cmd->add_option("--q", a->q, "Queries [Hq, m, d] after RoPE (the last m positions)")->required();
  cmd->add_option("--k", a->k, "Keys [Hkv, n, d] after RoPE")->required();
  cmd->add_option("--v", a->v, "Values [Hkv, n, d]")->required();
  cmd->add_option("--pool-size", a->pool_size, "Candidate pool size L (<= 24, exact enumeration)")
      ->capture_default_str();
  cmd->add_option("--evict", a->evict, "Evicted set size k (1 <= k <= L)")->capture_default_str();
  cmd->add_option("--queries", a->queries, "Analyse each of the last m queries")->capture_default_str();
  cmd->add_option("--pool", a->pool, "Pool choice: lowest (smallest proxy) or random")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for --pool random")->capture_default_str();
  cmd->add_option("--scale", a->scale, "Logit scale (default 1/sqrt(d))");
  cmd->add_flag("--bf16", a->bf16, "Read uint16 .npy arrays as bfloat16");
  cmd->add_flag("--json", a->json, "Print JSON instead of a table");
  return [a] { return run_analyze(*a); };
}

}  // namespace kvevict::cli
