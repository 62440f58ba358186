// kvevict ppl: perplexity of long prose (the six Austen novels) with decode-time eviction at fixed
// token budgets per head (OBCache's PG19 protocol), per method, with the full cache as reference.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/progress.h"
#include "kvevict/error.h"
#include "kvevict/eval/corpus.h"
#include "kvevict/eval/perplexity.h"
#include "kvevict/eval/report.h"
#include "kvevict/eval/session_model.h"

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
  std::string out, markdown;
  bool json = false;
};

int run_ppl_command(const PplArgs& a) {
  KVEVICT_CHECK(a.chunk >= 2, "--chunk ", a.chunk, " must be >= 2 tokens");
  KVEVICT_CHECK(a.chunks >= 1, "--chunks ", a.chunks, " must be >= 1");
  const auto model = a.model.load();
  KVEVICT_CHECK(a.chunk <= model->config().context_length, "--chunk ", a.chunk, " exceeds the ",
                model->config().context_length, "-token context of ", model->config().name);
  const auto budgets = parse_budgets(a.budgets);
  for (const auto& b : budgets)
    KVEVICT_CHECK(!b.is_fraction(), "ppl budgets are tokens per head (> 1); got ", b.str());
  const auto methods = eval::expand_methods(split_list(a.methods), budgets);
  eval::DecodeEvictionOptions dopt;
  dopt.slack = a.slack;
  dopt.recent = a.recent;
  for (const auto& m : methods) eval::decode_eviction_for(m, dopt);  // checks names

  const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
  auto tok = load_tokenizer(*model);
  // Enough prose for the chunks (about 4 characters a token; take generously, then trim).
  std::string prose = corpus.prose_text();
  const size_t want_chars = static_cast<size_t>(a.chunk * a.chunks * 8);
  if (prose.size() > want_chars) prose.resize(want_chars);
  std::vector<int32_t> tokens = tok->encode(prose, true);
  const auto spans = eval::ppl_chunks(static_cast<int64_t>(tokens.size()), a.chunk, a.chunks);

  eval::SessionModel runner(a.model.runtime(model), std::move(tok), methods,
                            model->config().name);
  ProgressBar bar("ppl", static_cast<int64_t>(spans.size() * methods.size()), !a.json);
  eval::PplRun run = eval::run_ppl(runner, tokens, spans, methods, dopt, a.bucket,
                                   [&](const eval::Progress& p) { bar.update(p.done); });
  bar.finish();
  run.model = runner.name();
  run.source = "austen (6 novels, r-cran-janeaustenr)";
  const std::string json = "{\"kind\": \"kvevict-results\", \"version\": 1, \"ppl\": " +
                           eval::ppl_to_json(run) + "}";
  const std::string md = eval::ppl_to_markdown(run);
  if (!a.out.empty()) eval::write_text_file(a.out, json);
  if (!a.markdown.empty()) eval::write_text_file(a.markdown, md);
  std::printf("%s\n", a.json ? json.c_str() : md.c_str());
  return 0;
}

}  // namespace

Runner add_ppl_command(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  auto* cmd = app.add_subcommand("ppl", "Perplexity of long prose under decode-time eviction");
  a->model.add_to(*cmd);
  cmd->add_option("--methods", a->methods, "Comma-separated methods (full = no eviction)")->capture_default_str();
  cmd->add_option("--budgets", a->budgets, "Comma-separated token budgets per head")->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "Tokens per evaluated chunk")->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "Number of chunks")->capture_default_str();
  cmd->add_option("--slack", a->slack, "Evict when a head exceeds budget + slack")->capture_default_str();
  cmd->add_option("--recent", a->recent, "Last tokens never evicted")->capture_default_str();
  cmd->add_option("--bucket", a->bucket, "Report ppl per position bucket of this many tokens")->capture_default_str();
  cmd->add_option("--out", a->out, "Write the results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the markdown table here");
  cmd->add_flag("--json", a->json, "Print JSON");
  return [a] { return run_ppl_command(*a); };
}

}  // namespace kvevict::cli
