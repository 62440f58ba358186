// kvevict ppl: perplexity of long prose (the six Austen novels) with decode-time eviction at fixed
// token budgets per head (OBCache's PG19 protocol), per method, with the full cache as reference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/progress.h"
#include "eval/corpus.h"
#include "eval/perplexity.h"
#include "eval/ppl_report.h"
#include "eval/provenance.h"
#include "eval/report.h"
#include "eval/session_model.h"
#include "kvevict/error.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct PplArgs {
  ModelArgs model;
  std::string methods = "full,h2o,tova,dropkv,obcache_vk";
  std::string budgets = "256,512";
  int64_t chunk = 2048;
  int64_t chunks = 1;
  int slack = 0;
  int recent = 32;
  int64_t bucket = 512;
  int bootstrap = 2000;
  uint64_t bootstrap_seed = 2026;
  std::string out, markdown;
  bool json = false;
};

// Every option value, typed, for the results file (RunMeta::options_json).
std::string options_json(const PplArgs& a) {
  nlohmann::json j = {{"model", a.model.model},
                      {"device", a.model.device},
                      {"kv_dtype", a.model.kv_dtype},
                      {"threads", a.model.threads},
                      {"methods", a.methods},
                      {"budgets", a.budgets},
                      {"chunk", a.chunk},
                      {"chunks", a.chunks},
                      {"slack", a.slack},
                      {"recent", a.recent},
                      {"bucket", a.bucket},
                      {"bootstrap", a.bootstrap},
                      {"bootstrap_seed", a.bootstrap_seed},
                      {"out", a.out},
                      {"markdown", a.markdown},
                      {"json", a.json}};
  return j.dump();
}

int run_ppl_command(const PplArgs& a) {
  // Options and outputs first, then the model's metadata (context, tokenizer), then the weights.
  const std::vector<std::string> names = split_list(a.methods, "--methods");
  const auto budgets = parse_budgets(a.budgets, "--budgets");
  for (const auto& b : budgets)
    KVEVICT_CHECK(!b.is_fraction(), "--budgets: ppl budgets are tokens per head (> 1); got ",
                  b.str());
  const auto methods = eval::expand_methods(names, budgets);
  eval::DecodeEvictionOptions dopt;
  dopt.slack = a.slack;
  dopt.recent = a.recent;
  for (const auto& m : methods) eval::decode_eviction_for(m, dopt);  // checks names
  eval::BootstrapOptions boot;
  boot.resamples = a.bootstrap;
  boot.seed = a.bootstrap_seed;
  boot.validate();
  const std::string model_file = a.model.file();
  check_output_args({{a.out, "--out"}, {a.markdown, "--markdown"}}, {{model_file, "-m"}});
  ModelInfo info = a.model.inspect();
  KVEVICT_CHECK(a.chunk <= info.config.context_length, "--chunk ", a.chunk, " exceeds ",
                info.context_text());
  parse_budgets(a.budgets, "--budgets", info.config.context_length, info.context_text());
  for (const auto& b : budgets)
    check_decode_rows(static_cast<int64_t>(b.value), a.slack, "--budgets", "--slack", info);
  // A chunk caches at most chunk - 1 tokens; a head is evicted only past budget + slack. (With
  // only `full` in --methods the budgets are unused: nothing to warn about.)
  const bool evicts = std::any_of(methods.begin(), methods.end(),
                                  [](const eval::MethodConfig& m) { return !m.is_full(); });
  for (const auto& b : budgets)
    if (evicts && b.value + a.slack >= static_cast<double>(a.chunk - 1))
      std::fprintf(stderr,
                   "kvevict: warning: --budgets %s%s is not below the %lld tokens a chunk caches, "
                   "so nothing is evicted: its rows equal the full cache's\n",
                   b.str().c_str(), a.slack > 0 ? " + --slack" : "",
                   static_cast<long long>(a.chunk - 1));

  const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
  // Enough prose for the chunks (about 4 characters a token; take generously, then trim).
  std::string prose = corpus.prose_text();
  const size_t want_chars = static_cast<size_t>(a.chunk * a.chunks * 8);
  if (prose.size() > want_chars) prose.resize(want_chars);
  std::vector<int32_t> tokens = info.tokenizer->encode(prose, true);
  const auto spans = eval::ppl_chunks(static_cast<int64_t>(tokens.size()), a.chunk, a.chunks);
  // Fewer chunks than asked for would be reported as if they were the run asked for.
  KVEVICT_CHECK(static_cast<int64_t>(spans.size()) == a.chunks, "--chunks ", a.chunks,
                " of --chunk ", a.chunk, " tokens: the text holds only ", spans.size(),
                " such chunks (", tokens.size(), " tokens); expected --chunks <= ", spans.size());
  // Perplexity feeds every token through the model one at a time (decode-time eviction decides
  // after each): settings x chunks x (chunk - 1) steps, each a full forward of one token. Say how
  // much work that is, since it is minutes even for a 135M model (docs/RELIABILITY.md).
  std::fprintf(
      stderr,
      "kvevict ppl: %zu settings x %zu chunks x %lld predicted tokens = %lld decode "
      "steps, one token at a time\n",
      methods.size(), spans.size(), static_cast<long long>(a.chunk - 1),
      static_cast<long long>(methods.size() * spans.size()) * static_cast<long long>(a.chunk - 1));

  const auto model = a.model.load();
  // Batch-invariant decoding: a setting's losses never depend on the other settings of its batch.
  RuntimeOptions rt_opt = a.model.runtime_options();
  rt_opt.batch_invariant_decode = true;
  const auto rt = ModelRuntime::create(model, rt_opt);
  eval::SessionModel runner(rt, std::move(info.tokenizer), methods, model->config().name);
  ProgressBar bar("ppl", static_cast<int64_t>(spans.size() * methods.size()), !a.json);
  eval::PplRun run = eval::run_ppl(
      runner, tokens, spans, methods, dopt, a.bucket,
      [&](const eval::Progress& p) { bar.update(p.done); }, boot);
  bar.finish();
  run.meta.model = runner.name();
  eval::fill_provenance(run.meta, model->path(), rt->describe());
  run.meta.options_json = options_json(a);
  run.source = "austen (6 novels, r-cran-janeaustenr)";
  write_report(a.out, a.markdown, eval::ppl_to_json(run), eval::ppl_to_markdown(run), a.json);
  return 0;
}

}  // namespace

Runner add_ppl_command(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  auto* cmd = app.add_subcommand("ppl", "Perplexity of long prose under decode-time eviction");
  a->model.add_to(*cmd);
  cmd->add_option("--methods", a->methods, "Comma-separated methods (full = no eviction)")
      ->capture_default_str();
  cmd->add_option("--budgets", a->budgets, "Comma-separated token budgets per head")
      ->capture_default_str();
  add_integer(*cmd, "--chunk", a->chunk, int64_t{2}, kMaxTokens,
              "Tokens per evaluated chunk (at most the model's context)")
      ->capture_default_str();
  add_integer(*cmd, "--chunks", a->chunks, int64_t{1}, int64_t{1} << 20, "Number of chunks")
      ->capture_default_str();
  add_integer(*cmd, "--slack", a->slack, 0, 1 << 24, "Evict when a head exceeds budget + slack")
      ->capture_default_str();
  add_integer(*cmd, "--recent", a->recent, 0, 1 << 24, "Last tokens never evicted")
      ->capture_default_str();
  add_integer(*cmd, "--bucket", a->bucket, int64_t{1}, kMaxTokens,
              "Report ppl per position bucket of this many tokens")
      ->capture_default_str();
  add_bootstrap(*cmd, a->bootstrap, a->bootstrap_seed, "over the chunks (needs >= 2 chunks)");
  cmd->add_option("--out", a->out, "Write the results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the markdown table here");
  cmd->add_flag("--json", a->json, "Print JSON");
  return [a] { return run_ppl_command(*a); };
}

}  // namespace kvevict::cli
