// kvevict demo: the main job. Builds a long needle-in-a-haystack prompt (RULER's niah_single_2:
// a number hidden in Jane Austen's prose), prefills it once, then answers it with the full cache
// and with an evicted cache (DropKV at 10% by default), printing both answers, whether each is
// right, and the KV memory each needed.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/json_out.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/progress.h"
#include "kvevict/error.h"
#include "kvevict/eval/corpus.h"
#include "kvevict/eval/metrics.h"
#include "kvevict/eval/ruler.h"
#include "kvevict/eval/session_model.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct DemoArgs {
  ModelArgs model;
  std::string method = "dropkv";
  std::string budget = "0.1";
  std::string task = "niah_single_2";
  int64_t length = 3000;
  double depth = 50.0;
  uint64_t seed = 7;
  bool query_agnostic = false;
  bool json = false;
};

struct Answer {
  std::string label, text;
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

int run_demo(const DemoArgs& a) {
  // Everything that needs no model first, then what needs only its metadata and tokenizer: a
  // bad value costs milliseconds, not a load and a prefill.
  KVEVICT_CHECK(std::isfinite(a.depth) && a.depth >= 0 && a.depth <= 100, "--depth ", a.depth,
                " is out of range; expected a percentage in [0, 100]");
  eval::ruler_task_config(a.task);
  eval::MethodConfig::make(a.method, parse_budget(a.budget, "--budget"));
  ModelInfo info = a.model.inspect();
  KVEVICT_CHECK(a.length <= info.config.context_length, "--length ", a.length, " exceeds ",
                info.context_text());
  parse_budget(a.budget, "--budget", info.config.context_length, info.context_text());
  const Tokenizer& tok = *info.tokenizer;
  const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
  eval::RulerGenerator gen(corpus, tok);
  eval::GenerateOptions gopt;
  gopt.target_length = a.length;
  gopt.style = eval::PromptStyle::kChat;
  gopt.depths = {a.depth};
  const eval::Sample sample = gen.generate(a.task, gopt, a.seed);

  const auto mode = a.query_agnostic ? eval::QueryMode::kAgnostic : eval::QueryMode::kAware;
  const std::vector<int32_t> context = tok.encode(sample.input_context(), true);
  const std::vector<int32_t> question = tok.encode(sample.input_question(), false);
  const auto prefilled =
      static_cast<int64_t>(context.size() + (a.query_agnostic ? 0 : question.size()));
  std::vector<eval::MethodConfig> methods = {
      eval::MethodConfig::make("full", Budget{}),
      eval::MethodConfig::make(a.method, parse_budget(a.budget, "--budget", prefilled,
                                                      "the " + std::to_string(prefilled) +
                                                          "-token demo prompt"))};
  const auto model = a.model.load();
  if (!a.json)
    std::printf("kvevict demo: %s, %s, %lld-token prompt (%s)\nneedle   %s (depth %.0f%%)\n"
                "question %s\nexpected %s\n\n",
                info.config.name.c_str(), a.task.c_str(),
                static_cast<long long>(context.size() + question.size()),
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
    answers.push_back(ans);
  }

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
      j["answers"].push_back({{"setting", ans.label}, {"text", ans.text}, {"correct", ans.score >= 100.0},
                              {"kv_bytes", ans.kv_bytes}, {"kept_tokens_per_head", ans.kept_per_head},
                              {"seconds", ans.seconds}});
    j["kv_saved_fraction"] = saved;
    print_json(j);
    return 0;
  }
  std::printf("prefill  %.1f s (%.0f tokens/s) on %s, one snapshot shared by both answers\n\n",
              prefill_s, static_cast<double>(context.size() + question.size()) / prefill_s,
              rt->describe().c_str());
  for (const auto& ans : answers)
    std::printf("%-16s %-7s KV %10s  (%lld tokens/head)  \"%s\"\n", ans.label.c_str(),
                ans.score >= 100.0 ? "RIGHT" : "wrong", human_bytes(static_cast<double>(ans.kv_bytes)).c_str(),
                static_cast<long long>(ans.kept_per_head), one_line(ans.text).c_str());
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
  cmd->add_option("--method", a->method, "Eviction method to compare with the full cache")->capture_default_str();
  cmd->add_option("--budget", a->budget, "Kept fraction (<= 1) or tokens per head")->capture_default_str();
  cmd->add_option("--task", a->task, "RULER task")->capture_default_str();
  add_integer(*cmd, "--length", a->length, int64_t{16}, kMaxTokens,
              "Prompt length in tokens (at most the model's context)")
      ->capture_default_str();
  add_number(*cmd, "--depth", a->depth, "Needle depth in percent, 0..100")->capture_default_str();
  add_seed(*cmd, a->seed, "Sample seed");
  cmd->add_flag("--query-agnostic", a->query_agnostic, "Compress the context before the question arrives");
  cmd->add_flag("--json", a->json, "Print JSON");
  return [a] { return run_demo(*a); };
}

}  // namespace kvevict::cli
