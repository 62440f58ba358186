// kvevict demo: the main job. Builds a long needle-in-a-haystack prompt (RULER's niah_single_1
// by default: a number hidden in a repeated filler text; --task niah_single_2 hides it in Jane
// Austen's prose), prefills it once, then answers it with the full cache
// and with an evicted cache (DropKV by default), printing both answers, whether each is right,
// the KV memory each needed, and beside each the accuracy measured for that setting on this task,
// length and query mode by a committed evaluation run (the results table, cli/demo_table.h), so
// one answer is seen in context. The default budget comes from the same table: the smallest
// measured budget at which the setting scores within 10 points of the full cache (docs/EVAL.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/demo_table.h"
#include "cli/json_out.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/progress.h"
#include "eval/corpus.h"
#include "eval/metrics.h"
#include "eval/ruler.h"
#include "eval/session_model.h"
#include "kvevict/error.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct DemoArgs {
  ModelArgs model;
  std::string method = "dropkv";
  std::string budget = "auto";
  std::string task = "niah_single_1";
  int64_t length = 2048;
  std::string results_table;
  double depth = 50.0;
  uint64_t seed = 7;
  bool query_agnostic = false;
  bool json = false;
};

struct Answer {
  std::string label, text;
  std::optional<MeasuredCell> measured;
  double score = 0;
  int64_t kv_bytes = 0, kept_per_head = 0;
  double seconds = 0;
};

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s.size() > 90 ? s.substr(0, 87) + "..." : s;
}

// Without --budget: the table's rule for this setting here, else kFallbackBudget, saying why.
constexpr const char* kFallbackBudget = "0.1";
constexpr const char* kRule =
    "the smallest measured budget at which it scores within 10 points "
    "of the full cache";

struct BudgetPick {
  std::string budget, why;
};

BudgetPick pick_budget(const DemoArgs& a, const DemoTable* table, const std::string& model,
                       const std::string& mode) {
  if (a.budget != "auto") return {a.budget, "--budget"};
  if (table == nullptr)
    return {kFallbackBudget, std::string("not measured: no results table found; ") +
                                 kFallbackBudget + " is the fallback, not a measured choice"};
  const BudgetRule r = table->budget_rule(model, a.task, a.length, mode, a.method);
  char buf[160];
  if (r.budget) {
    std::snprintf(buf, sizeof(buf), ": %.1f (%lld samples) vs the full cache's %.1f (%lld), ",
                  r.score, static_cast<long long>(r.samples), r.full,
                  static_cast<long long>(r.full_samples));
    return {*r.budget, std::string("auto, ") + kRule + buf + r.source};
  }
  if (r.full_measured)
    return {kFallbackBudget, std::string("auto: no measured budget of ") + a.method +
                                 " is within 10 points of the full cache here; " + kFallbackBudget +
                                 " is the fallback, not a measured choice"};
  return {kFallbackBudget, std::string("auto: not measured here in ") + table->path() + "; " +
                               kFallbackBudget + " is the fallback, not a measured choice"};
}

int run_demo(const DemoArgs& a) {
  // Everything that needs no model first, then what needs only its metadata and tokenizer: a
  // bad value costs milliseconds, not a load and a prefill.
  KVEVICT_CHECK(std::isfinite(a.depth) && a.depth >= 0 && a.depth <= 100, "--depth ", a.depth,
                " is out of range; expected a percentage in [0, 100]");
  eval::ruler_task_config(a.task);
  // The demo answers with the full cache and with --method: full against itself would print a
  // budget that nothing reads and "0% saved" as if it were a result.
  KVEVICT_CHECK(a.method != "full", "--method full: the demo compares an evicted cache with the ",
                "full one; expected an eviction method (e.g. dropkv, snapkv)");
  const bool auto_budget = a.budget == "auto";
  eval::MethodConfig::make(a.method,
                           parse_budget(auto_budget ? kFallbackBudget : a.budget, "--budget"));
  std::string searched;
  const std::optional<DemoTable> table = DemoTable::find(a.results_table, &searched);
  ModelInfo info = a.model.inspect();
  KVEVICT_CHECK(a.length <= info.config.context_length, "--length ", a.length, " exceeds ",
                info.context_text());
  const std::string model_key = std::filesystem::path(info.file->path()).stem().string();
  const auto mode = a.query_agnostic ? eval::QueryMode::kAgnostic : eval::QueryMode::kAware;
  const BudgetPick pick =
      pick_budget(a, table ? &*table : nullptr, model_key, eval::query_mode_name(mode));
  parse_budget(pick.budget, "--budget", info.config.context_length, info.context_text());
  const Tokenizer& tok = *info.tokenizer;
  const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
  eval::RulerGenerator gen(corpus, tok);
  eval::GenerateOptions gopt;
  gopt.target_length = a.length;
  gopt.style = eval::PromptStyle::kChat;
  gopt.depths = {a.depth};
  const eval::Sample sample = gen.generate(a.task, gopt, a.seed);

  const std::vector<int32_t> context = tok.encode(sample.input_context(), true);
  const std::vector<int32_t> question = tok.encode(sample.input_question(), false);
  const auto prefilled =
      static_cast<int64_t>(context.size() + (a.query_agnostic ? 0 : question.size()));
  std::vector<eval::MethodConfig> methods = {
      eval::MethodConfig::make("full", Budget{}),
      eval::MethodConfig::make(
          a.method, parse_budget(pick.budget, "--budget", prefilled,
                                 "the " + std::to_string(prefilled) + "-token demo prompt"))};
  const auto model = a.model.load();
  if (!a.json)
    std::printf(
        "kvevict demo: %s, %s, %lld-token prompt (%s)\nneedle   %s (depth %.0f%%)\n"
        "question %s\nexpected %s\n\n",
        info.config.name.c_str(), a.task.c_str(),
        static_cast<long long>(context.size()) + static_cast<long long>(question.size()),
        eval::query_mode_name(mode),
        one_line(sample.needles.empty() ? "" : sample.needles[0].text).c_str(), a.depth,
        one_line(sample.question).c_str(), sample.answers.at(0).c_str());

  // One prefill with the full cache; every method starts from a copy of it (SPEC section 5: the
  // prefill does not depend on the method).
  ProgressBar bar("prefill", static_cast<int64_t>(context.size() + question.size()), !a.json);
  const auto rt = a.model.runtime(model, [&bar](int64_t done, int64_t) { bar.update(done); });
  eval::SessionModel runner(rt, std::move(info.tokenizer), methods, model->config().name);
  const auto t_prefill = std::chrono::steady_clock::now();
  auto state = runner.prefill(context, question, mode);
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prefill).count();
  bar.finish();

  // Both answers from the one snapshot (on the GPU: decoded together, a batch row each).
  const auto t0 = std::chrono::steady_clock::now();
  const int question_window =
      mode == eval::QueryMode::kAware ? static_cast<int>(question.size()) : 0;
  const std::vector<eval::Generation> gens =
      runner.answer_all(*state, methods, question, mode, sample.max_new_tokens, question_window);
  const double answer_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<Answer> answers;
  for (size_t i = 0; i < methods.size(); ++i) {
    const auto& m = methods[i];
    const eval::Generation& g = gens[i];
    Answer ans;
    ans.label = m.is_full() ? "full cache" : m.label();
    ans.text = eval::postprocess_prediction(g.text);
    ans.score = eval::string_match_all(ans.text, sample.answers);
    ans.kv_bytes = g.kv_bytes;
    ans.kept_per_head = g.kept_tokens;
    ans.seconds = answer_s / static_cast<double>(methods.size());
    if (table)
      ans.measured =
          table->cell(model_key, a.task, a.length, eval::query_mode_name(mode),
                      m.is_full() ? "full" : a.method, m.is_full() ? "1" : m.budget.str());
    answers.push_back(ans);
  }
  // Where the table has no row: say so, and which lengths it did measure.
  auto not_measured = [&](const eval::MethodConfig& m) {
    if (!table) return "not measured: no results table found (looked in " + searched + ")";
    const auto ls = table->lengths(model_key, a.task, eval::query_mode_name(mode),
                                   m.is_full() ? "full" : a.method);
    std::string s = "not measured for " + model_key + " at " + std::to_string(a.length) +
                    " tokens and budget " + (m.is_full() ? "1" : m.budget.str()) + " in " +
                    table->path();
    if (!ls.empty()) {
      s += " (measured lengths:";
      for (int64_t l : ls) s += " " + std::to_string(l);
      s += ")";
    }
    return s;
  };

  const double saved = 1.0 - static_cast<double>(answers[1].kv_bytes) / answers[0].kv_bytes;
  if (a.json) {
    nlohmann::json j;
    j["model"] = model->path();
    j["device"] = a.model.device;
    j["runtime"] = rt->describe();
    j["task"] = a.task;
    j["prompt_tokens"] = static_cast<int64_t>(context.size() + question.size());
    j["mode"] = eval::query_mode_name(mode);
    j["expected"] = sample.answers;
    j["prefill_seconds"] = prefill_s;
    for (const auto& ans : answers)
      j["answers"].push_back({{"setting", ans.label},
                              {"text", ans.text},
                              {"correct", ans.score >= 100.0},
                              {"kv_bytes", ans.kv_bytes},
                              {"kept_tokens_per_head", ans.kept_per_head},
                              {"seconds", ans.seconds}});
    j["kv_saved_fraction"] = saved;
    j["budget"] = {{"value", pick.budget}, {"why", pick.why}};
    j["results_table"] = table ? nlohmann::json(table->path()) : nlohmann::json(nullptr);
    for (size_t i = 0; i < answers.size(); ++i)
      j["answers"][i]["measured"] =
          answers[i].measured ? answers[i].measured->to_json() : nlohmann::json(nullptr);
    print_json(j);
    return 0;
  }
  std::printf("prefill  %.1f s (%.0f tokens/s) on %s, one snapshot shared by both answers\n\n",
              prefill_s, static_cast<double>(context.size() + question.size()) / prefill_s,
              rt->describe().c_str());
  std::printf("budget   %s (%s)\n\n", pick.budget.c_str(), pick.why.c_str());
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer& ans = answers[i];
    std::printf("%-16s %-7s KV %10s  (%lld tokens/head)  \"%s\"\n", ans.label.c_str(),
                ans.score >= 100.0 ? "RIGHT" : "wrong",
                human_bytes(static_cast<double>(ans.kv_bytes)).c_str(),
                static_cast<long long>(ans.kept_per_head), one_line(ans.text).c_str());
    if (ans.measured)
      std::printf("%-16s measured on %s, %lld tokens, %s: %s\n%-16s   from %s\n", "",
                  a.task.c_str(), static_cast<long long>(a.length), eval::query_mode_name(mode),
                  ans.measured->text().c_str(), "", ans.measured->source.c_str());
    else
      std::printf("%-16s %s\n", "", not_measured(methods[i]).c_str());
  }
  std::printf("\nmemory saved: %.1f%% of the KV cache (%s -> %s)\n", 100.0 * saved,
              human_bytes(static_cast<double>(answers[0].kv_bytes)).c_str(),
              human_bytes(static_cast<double>(answers[1].kv_bytes)).c_str());
  return 0;
}

}  // namespace

Runner add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* cmd = app.add_subcommand(
      "demo", "Needle in a haystack: the full cache vs an evicted cache, answers and memory saved");
  a->model.add_to(*cmd);
  cmd->add_option("--method", a->method, "Eviction method to compare with the full cache")
      ->capture_default_str();
  cmd->add_option("--budget", a->budget,
                  "Kept fraction (<= 1) or tokens per head; auto: the smallest budget at which "
                  "the results table measured the method within 10 points of the full cache here "
                  "(else 0.1, said so)")
      ->capture_default_str();
  cmd->add_option("--task", a->task, "RULER task")->capture_default_str();
  add_integer(*cmd, "--length", a->length, int64_t{16}, kMaxTokens,
              "Prompt length in tokens (at most the model's context)")
      ->capture_default_str();
  add_number(*cmd, "--depth", a->depth, "Needle depth in percent, 0..100")->capture_default_str();
  add_seed(*cmd, a->seed, "Sample seed");
  cmd->add_flag("--query-agnostic", a->query_agnostic,
                "Compress the context before the question arrives");
  cmd->add_option("--results-table", a->results_table,
                  "Measured accuracies to print beside the answers (tools/demo_table.py's JSON; "
                  "default: $KVEVICT_DEMO_TABLE, demo_table.json next to the binary or in "
                  "../share/kvevict, docs/results/demo_table.json of the source tree)");
  cmd->add_flag("--json", a->json, "Print JSON");
  return [a] { return run_demo(*a); };
}

}  // namespace kvevict::cli
