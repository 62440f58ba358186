// kvevict score: scores every cached token of one layer with a method, selects the kept tokens
// under a budget, and writes scores [Hkv, n] f32 and the kept indices.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/json_out.h"
#include "cli/list_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/tensor_args.h"
#include "core/parallel.h"
#include "kvevict/backend.h"
#include "kvevict/error.h"
#include "kvevict/evict.h"
#include "kvevict/io/atomic_file.h"
#include "kvevict/io/npy.h"
#include "kvevict/method.h"

namespace kvevict::cli {
namespace {

struct ScoreArgs {
  std::string method = "dropkv";
  std::string aggregate, pool, policy;
  std::string q, k, v, wo, out, keep;
  std::string budget = "1";
  std::optional<double> compression_ratio;
  std::optional<int> window, sink;
  double alpha = 0.2;
  bool normalize = false;
  uint64_t seed = 0;
  float scale = 0.0f;
  bool bf16 = false;
  bool json = false;
  std::string backend = "cpu";
  int threads = 0;
  const CLI::Option *alpha_opt = nullptr, *seed_opt = nullptr;  // given, or their defaults
};

std::unique_ptr<Backend> make_backend_by_name(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "reference") return make_reference_backend();
  KVEVICT_FAIL("unknown backend '", name, "'; expected cpu or reference");
}

int run_score(const ScoreArgs& a) {
  set_num_threads(a.threads);
  const std::string qf = tensor_file(a.q), kf = tensor_file(a.k), vf = tensor_file(a.v),
                    wf = tensor_file(a.wo);
  check_output_args({{a.out, "--out"}, {a.keep, "--keep"}},
                    {{qf, "--q"}, {kf, "--k"}, {vf, "--v"}, {wf, "--wo"}});
  MethodSpec spec = method_parse(a.method);
  ScoreOptions sopt = spec.score;
  if (!a.aggregate.empty()) sopt.aggregate = aggregate_parse(a.aggregate);
  if (!a.pool.empty()) sopt.pooling = Pooling::parse(a.pool);
  if (a.window) sopt.window = *a.window;
  sopt.h2o_normalize = a.normalize;
  sopt.seed = a.seed;
  sopt.scale = a.scale;
  sopt.validate();

  SelectOptions sel;
  sel.policy = a.policy.empty() ? spec.policy : policy_parse(a.policy);
  sel.budget = a.compression_ratio ? Budget::from_compression_ratio(*a.compression_ratio)
                                   : parse_budget(a.budget, "--budget");
  sel.alpha = a.alpha;
  sel.sink = a.sink ? *a.sink : spec.sink;
  sel.window = sopt.window;
  sel.validate();
  // Options the method would not read are errors, not silently ignored (as generate refuses
  // --budget with --method full).
  KVEVICT_CHECK(a.wo.empty() || sopt.method == Method::kCriticalKV, "--wo has no effect with ",
                "--method ", a.method, " (only criticalkv reads the output projection)");
  KVEVICT_CHECK(a.alpha_opt->count() == 0 || sel.policy == Policy::kAdaKV, "--alpha ", a.alpha,
                " has no effect with the uniform policy; expected --policy adakv (or adakv, "
                "adadropkv)");
  KVEVICT_CHECK(a.q.empty() || sopt.needs_queries(), "--q has no effect with --method ", a.method,
                " (a query-free method: it reads no queries)");
  KVEVICT_CHECK(a.seed_opt->count() == 0 || sopt.method == Method::kRandom, "--seed has no ",
                "effect with --method ", a.method, " (only random draws numbers)");

  HostTensor k = load_tensor_arg(a.k, "--k", a.bf16);
  HostTensor v = load_tensor_arg(a.v, "--v", a.bf16);
  HostTensor q, wo;
  if (sopt.needs_queries()) {
    KVEVICT_CHECK(!a.q.empty(), "method ", a.method, " needs queries; pass --q q.npy [Hq, w, d]");
    q = load_tensor_arg(a.q, "--q", a.bf16);
  }
  if (sopt.method == Method::kCriticalKV) {
    KVEVICT_CHECK(!a.wo.empty(),
                  "criticalkv needs the output projection; pass --wo wo.npy [D, Hq*d]");
  }
  if (!a.wo.empty()) wo = load_tensor_arg(a.wo, "--wo", a.bf16);

  ScoreProblem problem;
  problem.k = k.view();
  problem.v = v.view();
  if (q.numel() > 0 || !q.shape().empty()) problem.q = q.view();
  if (!wo.shape().empty()) problem.wo = wo.view();
  KVEVICT_CHECK(problem.k.ndim == 3, "--k has shape ", problem.k.shape_str(),
                "; expected [Hkv, n, d]");
  problem.validate(sopt);
  if (!a.compression_ratio)
    parse_budget(a.budget, "--budget", problem.num_tokens(),
                 "the " + std::to_string(problem.num_tokens()) + " tokens of --k");

  auto backend = make_backend_by_name(a.backend);
  LayerEvictor evictor(*backend, sopt, sel);
  const auto t0 = std::chrono::steady_clock::now();
  Selection selection = evictor.plan(problem);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const int hkv = problem.num_kv_heads();
  const int64_t n = problem.num_tokens();
  const int d = problem.head_dim();
  TensorView scores = evictor.last_scores();
  int64_t max_keep = 0;
  for (int h = 0; h < hkv; ++h) max_keep = std::max(max_keep, selection.count(h));
  // Both files or neither: staged, then committed together.
  io::StagedFiles files;
  if (!a.out.empty()) {
    KVEVICT_CHECK(!scores.empty(), "method ", a.method, " produces no scores; drop --out");
    npy::stage(files, a.out, "--out", scores);
  }
  if (!a.keep.empty()) {
    // [Hkv, max kept] int32 row indices per head, ascending; -1 pads heads that keep fewer (adakv).
    std::vector<int32_t> keep(static_cast<size_t>(hkv) * max_keep, -1);
    for (int h = 0; h < hkv; ++h)
      std::copy(selection.head(h), selection.head(h) + selection.count(h),
                keep.begin() + h * max_keep);
    npy::stage(files, a.keep, "--keep", DType::kI32, {hkv, max_keep}, keep.data());
  }
  files.commit();

  const int64_t elem = static_cast<int64_t>(dtype_size(problem.k.dtype));
  const int64_t bytes_before = 2 * static_cast<int64_t>(hkv) * n * d * elem;
  const int64_t bytes_after = 2 * selection.total() * d * elem;
  nlohmann::json j;
  j["method"] = a.method;
  j["score"] = sopt.describe();
  j["select"] = sel.describe();
  j["backend"] = backend->name();
  j["shape"] = {{"Hq", problem.num_q_heads()},
                {"Hkv", hkv},
                {"n", n},
                {"d", d},
                {"queries", problem.q.empty() ? 0 : problem.q.shape[1]}};
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(hkv));
  for (int h = 0; h < hkv; ++h) kept.push_back(selection.count(h));
  j["kept_per_head"] = kept;
  j["kept_total"] = selection.total();
  j["kv_bytes_before"] = bytes_before;
  j["kv_bytes_after"] = bytes_after;
  j["time_ms"] = ms;
  if (!selection.warning.empty()) j["warning"] = selection.warning;
  if (!a.out.empty()) j["scores_file"] = a.out;
  if (!a.keep.empty()) j["keep_file"] = a.keep;
  if (!selection.warning.empty())
    std::fprintf(stderr, "kvevict: warning: %s\n", selection.warning.c_str());
  if (a.json) {
    print_json(j);
  } else {
    std::printf("method    %s\nselect    %s\nbackend   %s\nshape     Hq=%d Hkv=%d n=%lld d=%d\n",
                sopt.describe().c_str(), sel.describe().c_str(), backend->name(),
                problem.num_q_heads(), hkv, static_cast<long long>(n), d);
    std::printf("kept      %lld of %lld rows (", static_cast<long long>(selection.total()),
                static_cast<long long>(hkv) * static_cast<long long>(n));
    for (int h = 0; h < hkv; ++h)
      std::printf("%s%lld", h ? " " : "", static_cast<long long>(kept[h]));
    std::printf(
        " per head)\nKV bytes  %s -> %s (%.1f%% saved)\ntime      %.2f ms\n",
        human_bytes(static_cast<double>(bytes_before)).c_str(),
        human_bytes(static_cast<double>(bytes_after)).c_str(),
        bytes_before ? 100.0 * (1.0 - static_cast<double>(bytes_after) / bytes_before) : 0.0, ms);
    if (!a.out.empty())
      std::printf("scores    %s [%d, %lld] f32\n", a.out.c_str(), hkv, static_cast<long long>(n));
    if (!a.keep.empty())
      std::printf("keep      %s [%d, %lld] i32 (-1 = padding)\n", a.keep.c_str(), hkv,
                  static_cast<long long>(max_keep));
  }
  return 0;
}

}  // namespace

Runner add_score_command(CLI::App& app) {
  auto a = std::make_shared<ScoreArgs>();
  auto* cmd = app.add_subcommand("score", "Score and select the tokens of one layer's KV cache");
  cmd->add_option(
         "--method", a->method,
         "Method: " +
             [] {
               std::string s;
               for (const auto& n : method_names()) s += (s.empty() ? "" : ", ") + n;
               return s;
             }())
      ->capture_default_str();
  cmd->add_option("--aggregate", a->aggregate,
                  "Query aggregation: snapkv (window), h2o (all), tova (last)");
  cmd->add_option("--q", a->q, "Queries [Hq, w, d] after RoPE (.npy or .safetensors[:name])");
  cmd->add_option("--k", a->k, "Keys [Hkv, n, d] after RoPE")->required();
  cmd->add_option("--v", a->v, "Values [Hkv, n, d]")->required();
  cmd->add_option("--wo", a->wo, "Output projection [D, Hq*d] (criticalkv)");
  auto* budget = cmd->add_option("--budget", a->budget,
                                 "Kept fraction (<= 1, or 10%) or token count (> 1, at most n)")
                     ->capture_default_str();
  add_number(*cmd, "--compression-ratio", a->compression_ratio,
             "kvpress spelling: fraction evicted, 0 <= r < 1 (budget = 1 - r); not with --budget")
      ->excludes(budget);
  cmd->add_option("--policy", a->policy, "uniform or adakv (default: the method's)");
  cmd->add_option("--pool", a->pool, "Pooling: none, max:K, avg:K (default: the method's)");
  add_window(*cmd, a->window, "Observation window w (queries used and last tokens protected)");
  add_integer(*cmd, "--sink", a->sink, 0, 1 << 24,
              "First tokens always kept (streamingllm default 4)");
  a->alpha_opt =
      add_number(*cmd, "--alpha", a->alpha, "adakv alpha, 0 <= alpha <= 1")->capture_default_str();
  cmd->add_flag("--normalize", a->normalize,
                "h2o: divide column sums by the number of queries seeing each token");
  a->seed_opt = add_seed(*cmd, a->seed, "Seed of the random method");
  add_number(*cmd, "--scale", a->scale, "Logit scale, finite >= 0 (0 = 1/sqrt(d))");
  cmd->add_flag("--bf16", a->bf16, "Read uint16 (<u2) .npy arrays as bfloat16 bits");
  cmd->add_option("--backend", a->backend, "cpu (fast float) or reference (double)")
      ->check(CLI::IsMember({"cpu", "reference"}))
      ->capture_default_str();
  add_threads(*cmd, a->threads);
  cmd->add_option("--out", a->out, "Write scores [Hkv, n] f32 here (.npy)");
  cmd->add_option("--keep", a->keep, "Write kept indices [Hkv, max_kept] i32 here (.npy, -1 pads)");
  cmd->add_flag("--json", a->json, "Print a JSON summary");
  return [a] { return run_score(*a); };
}

}  // namespace kvevict::cli
