// kvevict eval: RULER-style accuracy of many methods x budgets x query modes in one run. Each
// sample is prefilled once per mode and every method is evaluated from that prefill.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/progress.h"
#include "kvevict/error.h"
#include "kvevict/eval/corpus.h"
#include "kvevict/eval/jsonl.h"
#include "kvevict/eval/report.h"
#include "kvevict/eval/ruler.h"
#include "kvevict/eval/session_model.h"

namespace kvevict::cli {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string tasks = "niah_single_1,niah_single_2,niah_multikey_1,vt";
  std::string lengths = "2048";
  int samples = 5;
  std::string methods = "full,dropkv,snapkv";
  std::string budgets = "0.1,0.2";
  std::string modes = "aware";
  std::string data;
  std::string style = "chat";
  int window = 0;
  std::string pool;
  uint64_t seed = 0;
  int max_new = 0;
  std::string out, markdown, plots;
  bool json = false;
};

int run_eval_command(const EvalArgs& a) {
  KVEVICT_CHECK(a.samples >= 1, "--samples ", a.samples, " must be >= 1");
  KVEVICT_CHECK(a.max_new >= 0, "--max-new ", a.max_new,
                " is negative; expected a token count, or 0 for each task's own limit");
  // Every name and number is checked before the model and the corpus are loaded.
  const eval::PromptStyle style = eval::prompt_style_parse(a.style);
  std::vector<std::string> tasks = split_list(a.tasks);
  if (tasks.size() == 1 && tasks[0] == "all") tasks = eval::ruler_task_names();
  for (const auto& t : tasks) eval::ruler_task_config(t);
  const std::vector<int64_t> lengths = parse_ints(a.lengths, "--lengths");
  eval::RunOptions ropt;
  ropt.methods = eval::expand_methods(split_list(a.methods), parse_budgets(a.budgets), a.window, a.pool);
  ropt.modes.clear();
  for (const auto& m : split_list(a.modes)) ropt.modes.push_back(eval::query_mode_parse(m));

  const auto model = a.model.load();
  auto tok = load_tokenizer(*model);
  std::vector<eval::Sample> samples;
  if (!a.data.empty()) {
    samples = eval::read_jsonl_samples(a.data);
    for (auto& s : samples) eval::format_prompt(s, style, tok.get());
  } else {
    for (int64_t len : lengths)
      KVEVICT_CHECK(len <= model->config().context_length, "--lengths ", len, " exceeds the ",
                    model->config().context_length, "-token context of ", model->config().name);
    const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
    eval::RulerGenerator gen(corpus, *tok);
    for (int64_t len : lengths) {
      eval::GenerateOptions gopt;
      gopt.target_length = len;
      gopt.style = style;
      for (const auto& t : tasks) {
        auto set = gen.generate_set(t, gopt, a.samples, a.seed);
        samples.insert(samples.end(), set.begin(), set.end());
      }
    }
  }

  ropt.base_seed = a.seed;
  ropt.max_new_tokens_cap = a.max_new;
  ropt.prompt_style = eval::prompt_style_name(style);
  const auto rt = a.model.runtime(model);
  eval::SessionModel runner(rt, std::move(tok), ropt.methods,
                            std::filesystem::path(model->path()).stem().string());

  const int64_t total = static_cast<int64_t>(samples.size() * ropt.modes.size() * ropt.methods.size());
  ProgressBar bar("eval", total, !a.json);
  eval::EvalResults results = eval::run_eval(runner, samples, ropt, [&](const eval::Progress& p) {
    bar.update(p.done);
  });
  bar.finish();
  results.meta.notes.push_back("runtime: " + rt->describe());
  if (a.max_new > 0)
    results.meta.notes.push_back("answers capped at " + std::to_string(a.max_new) +
                                 " new tokens (--max-new; RULER's task limits otherwise)");

  const std::string json = eval::results_to_json(results);
  const std::string md = eval::results_to_markdown(results);
  if (!a.out.empty()) eval::write_text_file(a.out, json);
  if (!a.markdown.empty()) eval::write_text_file(a.markdown, md);
  if (a.json)
    std::printf("%s\n", json.c_str());
  else
    std::printf("%s\n", md.c_str());
  if (!a.plots.empty()) {
    KVEVICT_CHECK(!a.out.empty(), "--plots needs --out results.json (the plot script reads it)");
    const std::string cmd = "python3 '" + source_dir() + "/tools/plot_results.py' '" + a.out +
                            "' --out '" + a.plots + "'";
    KVEVICT_CHECK(std::system(cmd.c_str()) == 0, "plotting failed: ", cmd,
                  " (install matplotlib with scripts/install_deps.sh --eval)");
  }
  return 0;
}

}  // namespace

Runner add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "RULER-style accuracy of eviction methods at budgets");
  a->model.add_to(*cmd);
  cmd->add_option("--tasks", a->tasks, "Comma-separated RULER tasks, or all")->capture_default_str();
  cmd->add_option("--lengths", a->lengths, "Comma-separated target lengths in tokens")->capture_default_str();
  cmd->add_option("--samples", a->samples, "Samples per task and length")->capture_default_str();
  cmd->add_option("--methods", a->methods, "Comma-separated methods (full = no eviction)")->capture_default_str();
  cmd->add_option("--budgets", a->budgets, "Comma-separated budgets (fractions or token counts)")
      ->capture_default_str();
  cmd->add_option("--modes", a->modes, "aware, agnostic, or both: aware,agnostic")->capture_default_str();
  cmd->add_option("--data", a->data, "Evaluate a JSONL file instead of generated tasks");
  cmd->add_option("--style", a->style, "Prompt style: chat or raw")->capture_default_str();
  cmd->add_option("--window", a->window, "Override every method's window (0 = defaults)")->capture_default_str();
  cmd->add_option("--pool", a->pool, "Override every method's pooling");
  cmd->add_option("--seed", a->seed, "Base seed of the generated samples")->capture_default_str();
  cmd->add_option("--max-new", a->max_new, "Cap every answer at N new tokens (0 = each task's limit)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write the results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the markdown tables here");
  cmd->add_option("--plots", a->plots, "Draw PNG plots into this directory (needs --out)");
  cmd->add_flag("--json", a->json, "Print the results JSON instead of the tables");
  return [a] { return run_eval_command(*a); };
}

}  // namespace kvevict::cli
