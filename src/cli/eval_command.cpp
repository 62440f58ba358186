// kvevict eval: RULER-style accuracy of many methods x budgets x query modes in one run. Each
// sample is prefilled once per mode and every method is evaluated from that prefill.
//
// Order of work: every option is checked first (names, numbers, lists, output paths, the plot
// script); then the model's metadata and tokenizer are read (milliseconds) and every sample is
// checked against them (a JSONL row by its size before it is parsed, every prompt and token
// budget by its tokens); only then are the weights loaded. The outputs (--out, --markdown,
// --plots) are written all or none at the end.
#include <CLI/CLI.hpp>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/progress.h"
#include "kvevict/error.h"
#include "kvevict/eval/corpus.h"
#include "kvevict/eval/jsonl.h"
#include "kvevict/eval/report.h"
#include "kvevict/eval/ruler.h"
#include "kvevict/eval/session_model.h"
#include "kvevict/io/atomic_file.h"

extern char** environ;

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
  std::optional<int> window;
  std::string pool;
  uint64_t seed = 0;
  int max_new = 0;
  std::string out, markdown, plots;
  bool json = false;
};

// Runs a program (no shell: arguments cannot be split or quoted wrongly); true when it exits 0.
bool run_program(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return false;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string plot_script() { return source_dir() + "/tools/plot_results.py"; }

// --plots: draws the staged results into a fresh directory beside DIR, then (after the results
// files are committed) moves the PNGs into DIR. A failed plot leaves no output at all.
class StagedPlots {
 public:
  explicit StagedPlots(const std::string& dir)
      : dir_(dir), tmp_(dir + ".tmp." + std::to_string(::getpid())) {}
  ~StagedPlots() {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }
  void draw(const std::string& json_path) {
    KVEVICT_CHECK(run_program({"python3", plot_script(), json_path, "--out", tmp_}),
                  "--plots: plotting failed: python3 ", plot_script(), " ", json_path, " --out ",
                  tmp_, " (install matplotlib with scripts/install_deps.sh --eval); no output "
                  "was written");
  }
  void commit() {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    KVEVICT_CHECK(!ec, "--plots: cannot create ", dir_, " (", ec.message(), ")");
    for (const auto& e : std::filesystem::directory_iterator(tmp_)) {
      const std::string target = (std::filesystem::path(dir_) / e.path().filename()).string();
      io::check_output_path(target, "--plots");  // the same policy as every other output
      std::filesystem::rename(e.path(), target, ec);
      KVEVICT_CHECK(!ec, "--plots: cannot move a plot to ", target, " (", ec.message(), ")");
    }
  }

 private:
  std::string dir_, tmp_;
};

int run_eval_command(const EvalArgs& a) {
  // Every name, number and path is checked before the model and the corpus are read.
  const eval::PromptStyle style = eval::prompt_style_parse(a.style);
  std::vector<std::string> tasks = split_list(a.tasks, "--tasks");
  if (tasks.size() == 1 && tasks[0] == "all") tasks = eval::ruler_task_names();
  for (const auto& t : tasks) eval::ruler_task_config(t);
  const std::vector<int64_t> lengths = parse_ints(a.lengths, "--lengths");
  const std::vector<std::string> method_names = split_list(a.methods, "--methods");
  eval::RunOptions ropt;
  ropt.methods = eval::expand_methods(method_names, parse_budgets(a.budgets, "--budgets"),
                                      a.window.value_or(0), a.pool);
  ropt.modes.clear();
  for (const auto& m : split_list(a.modes, "--modes")) ropt.modes.push_back(eval::query_mode_parse(m));
  check_output_args({{a.out, "--out"}, {a.markdown, "--markdown"}});
  if (!a.plots.empty()) {
    KVEVICT_CHECK(!a.out.empty(), "--plots needs --out results.json (the plot script reads it)");
    check_output_dir(a.plots, "--plots");
    KVEVICT_CHECK(run_program({"python3", "-c", "import matplotlib"}),
                  "--plots needs python3 with matplotlib (scripts/install_deps.sh --eval)");
  }

  ModelInfo info = a.model.inspect();
  const int64_t ctx = info.config.context_length;
  const std::string of = info.context_text();
  if (a.data.empty())
    for (int64_t len : lengths) KVEVICT_CHECK(len <= ctx, "--lengths ", len, " exceeds ", of);
  // A token budget above the context can never fit any sample: say so now (each sample's own
  // prompt length is checked by run_eval before the first prefill).
  parse_budgets(a.budgets, "--budgets", ctx, of);
  std::vector<eval::Sample> samples;
  if (!a.data.empty()) {
    eval::JsonlLimits limits;
    limits.max_text_bytes = eval::max_text_bytes(*info.tokenizer, ctx);
    limits.why = of + " holds at most that much text";
    samples = eval::read_jsonl_samples(a.data, limits);
    for (auto& s : samples) eval::format_prompt(s, style, info.tokenizer.get());
  } else {
    const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
    eval::RulerGenerator gen(corpus, *info.tokenizer);
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
  ropt.context_length = ctx;
  const std::vector<eval::TokenizedSample> prompts =
      eval::tokenize_samples(*info.tokenizer, samples, ropt);  // checked before the weights load
  const auto model = a.model.load();
  const auto rt = a.model.runtime(model);
  eval::SessionModel runner(rt, std::move(info.tokenizer), ropt.methods,
                            std::filesystem::path(model->path()).stem().string());

  const int64_t total = static_cast<int64_t>(samples.size() * ropt.modes.size() * ropt.methods.size());
  ProgressBar bar("eval", total, !a.json);
  eval::EvalResults results = eval::run_eval(runner, samples, prompts, ropt,
                                             [&](const eval::Progress& p) { bar.update(p.done); });
  bar.finish();
  results.meta.notes.push_back("runtime: " + rt->describe());
  if (a.max_new > 0)
    results.meta.notes.push_back("answers capped at " + std::to_string(a.max_new) +
                                 " new tokens (--max-new; RULER's task limits otherwise)");

  const std::string json = eval::results_to_json(results);
  const std::string md = eval::results_to_markdown(results);
  // All outputs or none: stage the files, draw the plots from the staged JSON, then commit.
  io::StagedFiles files;
  if (!a.out.empty()) files.add(a.out, "--out", {{json.data(), json.size()}});
  if (!a.markdown.empty()) files.add(a.markdown, "--markdown", {{md.data(), md.size()}});
  std::unique_ptr<StagedPlots> plots;
  if (!a.plots.empty()) {
    plots = std::make_unique<StagedPlots>(a.plots);
    plots->draw(files.staged_path(a.out));
  }
  files.commit();
  if (plots) plots->commit();
  std::printf("%s\n", a.json ? json.c_str() : md.c_str());
  return 0;
}

}  // namespace

Runner add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "RULER-style accuracy of eviction methods at budgets");
  a->model.add_to(*cmd);
  cmd->add_option("--tasks", a->tasks, "Comma-separated RULER tasks, or all")->capture_default_str();
  cmd->add_option("--lengths", a->lengths, "Comma-separated target lengths in tokens")->capture_default_str();
  add_integer(*cmd, "--samples", a->samples, 1, 1 << 20, "Samples per task and length")
      ->capture_default_str();
  cmd->add_option("--methods", a->methods, "Comma-separated methods (full = no eviction)")->capture_default_str();
  cmd->add_option("--budgets", a->budgets, "Comma-separated budgets (fractions or token counts)")
      ->capture_default_str();
  cmd->add_option("--modes", a->modes,
                  "Comma-separated query modes: aware (or query-aware), agnostic (or "
                  "query-agnostic); both: aware,agnostic")
      ->capture_default_str();
  cmd->add_option("--data", a->data, "Evaluate a JSONL file instead of generated tasks");
  cmd->add_option("--style", a->style, "Prompt style: chat or raw")->capture_default_str();
  add_window(*cmd, a->window, "Override every method's window");
  cmd->add_option("--pool", a->pool, "Override every method's pooling");
  add_seed(*cmd, a->seed, "Base seed of the generated samples");
  add_integer(*cmd, "--max-new", a->max_new, 0, 1 << 20,
              "Cap every answer at N new tokens (0 = each task's limit)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write the results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the markdown tables here");
  cmd->add_option("--plots", a->plots, "Draw PNG plots into this directory (needs --out)");
  cmd->add_flag("--json", a->json, "Print the results JSON instead of the tables");
  return [a] { return run_eval_command(*a); };
}

}  // namespace kvevict::cli
