// kvevict eval: RULER-style accuracy of many methods x budgets x query modes in one run. Each
// sample is prefilled once per mode and every method is evaluated from that prefill (on the GPU
// all settings of a prefill decode as one batch). Cells carry bootstrap intervals, paired
// comparisons are reported, --split picks DEV or TEST seeds, --ablate runs the window x pooling
// ablation (DEV) and reports the chosen settings on TEST; docs/EVAL.md is the protocol.
//
// Order of work: every option is checked first (names, numbers, lists, output paths, the plot
// script); then the model's metadata and tokenizer are read (milliseconds) and every sample is
// checked against them (a JSONL row by its size before it is parsed, every prompt and token
// budget by its tokens); only then are the weights loaded. The outputs (--out, --markdown,
// --plots) are written all or none at the end.
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/corpus_arg.h"
#include "cli/list_args.h"
#include "cli/model_args.h"
#include "cli/numeric_options.h"
#include "cli/output_args.h"
#include "cli/progress.h"
#include "eval/ablation.h"
#include "eval/corpus.h"
#include "eval/jsonl.h"
#include "eval/provenance.h"
#include "eval/report.h"
#include "eval/rng.h"
#include "eval/ruler.h"
#include "eval/session_model.h"
#include "eval/split.h"
#include "kvevict/error.h"
#include "kvevict/io/atomic_file.h"
#include "kvevict/model/runtime.h"

namespace kvevict::cli {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string tasks = "niah_single_1,niah_single_2,niah_multikey_1,vt";
  std::string lengths = "2048";
  int samples = 5;
  // Generated samples first_sample .. first_sample + samples - 1 of the split.
  int first_sample = 0;
  std::string methods = "full,dropkv,snapkv";
  std::string budgets = "0.1,0.2";
  std::string modes = "aware";
  std::string data;
  std::string style = "chat";
  std::optional<int> window;
  std::string pool;
  uint64_t seed = 0;
  int max_new = 0;
  std::string split = "test";
  int bootstrap = 2000;
  uint64_t bootstrap_seed = 2026;
  std::string compare = "dropkv/snapkv,adadropkv/adakv,obcache_vk/snapkv";
  std::string ablate;
  std::string ablate_windows = "8,16,32";
  std::string ablate_pools = "none,max:7,max:11,avg:7";
  std::string out, markdown, plots;
  bool skip_unfit = false;
  bool one_at_a_time = false;
  double progress_every = 0;
  bool json = false;
  bool list_tasks = false;
  bool list_methods = false;
};

// Every option value, typed, for the results file (RunMeta::options_json).
std::string options_json(const EvalArgs& a) {
  nlohmann::json j = {{"model", a.model.model},
                      {"device", a.model.device},
                      {"kv_dtype", a.model.kv_dtype},
                      {"threads", a.model.threads},
                      {"tasks", a.tasks},
                      {"lengths", a.lengths},
                      {"samples", a.samples},
                      {"first_sample", a.first_sample},
                      {"methods", a.methods},
                      {"budgets", a.budgets},
                      {"modes", a.modes},
                      {"data", a.data},
                      {"style", a.style},
                      {"window", a.window ? nlohmann::json(*a.window) : nlohmann::json(nullptr)},
                      {"pool", a.pool},
                      {"seed", a.seed},
                      {"max_new", a.max_new},
                      {"split", a.split},
                      {"bootstrap", a.bootstrap},
                      {"bootstrap_seed", a.bootstrap_seed},
                      {"compare", a.compare},
                      {"ablate", a.ablate},
                      {"ablate_windows", a.ablate_windows},
                      {"ablate_pools", a.ablate_pools},
                      {"out", a.out},
                      {"markdown", a.markdown},
                      {"plots", a.plots},
                      {"skip_unfit", a.skip_unfit},
                      {"one_at_a_time", a.one_at_a_time},
                      {"progress_every", a.progress_every},
                      {"json", a.json}};
  return j.dump();
}

// "a/b,c/d" -> {(a, b), (c, d)}.
std::vector<std::pair<std::string, std::string>> parse_pairs(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.empty()) return out;  // --compare '': no comparisons
  const std::vector<std::string> items = split_list(s, "--compare");
  check_distinct(items, "--compare");
  for (const auto& item : items) {
    const size_t slash = item.find('/');
    KVEVICT_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < item.size() &&
                      item.find('/', slash + 1) == std::string::npos,
                  "--compare item '", item, "' is not A/B; expected e.g. dropkv/snapkv");
    const std::string first = item.substr(0, slash), second = item.substr(slash + 1);
    KVEVICT_CHECK(first != second, "--compare item '", item,
                  "' pairs a setting with itself; expected two different settings");
    for (const std::string& name : {first, second})
      if (name != "full") eval::MethodConfig::make(name, Budget{0.5});  // names checked now
    out.emplace_back(first, second);
  }
  return out;
}

// Runs a program (no shell: arguments cannot be split or quoted wrongly); true when it exits 0.
bool run_program(std::vector<std::string> args) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return false;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string plot_script() {
  return source_dir() + "/tools/plot_results.py";
}

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
                  tmp_,
                  " (install matplotlib with scripts/install_deps.sh --eval); no output "
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

const char* haystack_name(eval::Haystack h) {
  switch (h) {
    case eval::Haystack::kRepeat: return "repeated filler";
    case eval::Haystack::kEssay: return "prose (Austen)";
    case eval::Haystack::kNeedle: return "distractor needles";
    case eval::Haystack::kNone: return "own text";
  }
  return "?";
}

// --list-tasks: the 11 tasks with what distinguishes them; --json for scripts.
int list_tasks(bool as_json) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& name : eval::ruler_task_names()) {
    const eval::TaskConfig& c = eval::ruler_task_config(name);
    j.push_back({{"task", name},
                 {"haystack", haystack_name(c.haystack)},
                 {"keys", eval::needle_type_name(c.key_type)},
                 {"values", eval::needle_type_name(c.value_type)},
                 {"num_keys", c.num_keys},
                 {"num_values", c.num_values},
                 {"num_queries", c.num_queries},
                 {"max_new_tokens", c.max_new_tokens}});
  }
  if (as_json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("%-16s %-19s %-8s %-8s %5s %6s %7s %7s\n", "task", "haystack", "keys", "values",
              "keys", "values", "queries", "max new");
  for (const auto& t : j)
    std::printf("%-16s %-19s %-8s %-8s %5d %6d %7d %7d\n", t["task"].get<std::string>().c_str(),
                t["haystack"].get<std::string>().c_str(), t["keys"].get<std::string>().c_str(),
                t["values"].get<std::string>().c_str(), t["num_keys"].get<int>(),
                t["num_values"].get<int>(), t["num_queries"].get<int>(),
                t["max_new_tokens"].get<int>());
  return 0;
}

// --list-methods: what --methods expands to (groups included) and what each setting resolves to:
// window (pinned or the question in query-aware mode), pooling, policy, aggregation.
int list_methods(const EvalArgs& a) {
  const std::vector<std::string> names = split_list(a.methods, "--methods");
  nlohmann::json j = nlohmann::json::array();
  for (const auto& n : eval::expand_method_groups(names)) {
    const eval::MethodConfig m =
        eval::MethodConfig::make(n, Budget{0.5}, a.window.value_or(0), a.pool);
    // A windowed query score takes the question as its window in query-aware mode unless pinned.
    const char* aware = m.window_is_question(1)     ? "question"
                        : m.aggregate() == "snapkv" ? "same"
                                                    : "none";
    j.push_back({{"setting", n},
                 {"window", m.window()},
                 {"window_in_query_aware", aware},
                 {"pooling", m.pooling()},
                 {"policy", m.policy()},
                 {"aggregate", m.aggregate()},
                 {"sink", m.is_full() ? 0 : m.spec.sink}});
  }
  if (a.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("%-26s %6s %-10s %-8s %-8s %-8s %4s\n", "setting", "window", "query-aware", "pooling",
              "policy", "aggr.", "sink");
  for (const auto& m : j)
    std::printf("%-26s %6d %-10s %-8s %-8s %-8s %4d\n", m["setting"].get<std::string>().c_str(),
                m["window"].get<int>(), m["window_in_query_aware"].get<std::string>().c_str(),
                m["pooling"].get<std::string>().c_str(), m["policy"].get<std::string>().c_str(),
                m["aggregate"].get<std::string>().c_str(), m["sink"].get<int>());
  return 0;
}

int run_eval_command(const EvalArgs& a) {
  if (a.list_tasks) return list_tasks(a.json);
  if (a.list_methods) return list_methods(a);
  // Every name, number and path is checked before the model and the corpus are read.
  const eval::PromptStyle style = eval::prompt_style_parse(a.style);
  KVEVICT_CHECK(a.progress_every >= 0, "--progress-every ", a.progress_every,
                " is negative; expected seconds (0 = off)");
  // A task, length or mode listed twice ran its samples twice and counted them twice in every
  // cell (n doubled, intervals too narrow): each list item once (budgets: parse_budgets).
  std::vector<std::string> tasks = split_list(a.tasks, "--tasks");
  check_distinct(tasks, "--tasks");
  if (tasks.size() == 1 && tasks[0] == "all") tasks = eval::ruler_task_names();
  for (const auto& t : tasks) eval::ruler_task_config(t);
  const std::vector<int64_t> lengths = parse_ints(a.lengths, "--lengths");
  const std::vector<std::string> method_names = split_list(a.methods, "--methods");
  const std::vector<Budget> budgets = parse_budgets(a.budgets, "--budgets");
  eval::RunOptions ropt;
  ropt.methods = eval::expand_methods(method_names, budgets, a.window.value_or(0), a.pool);
  // The overrides apply to the methods that evict: with only `full` they would be ignored.
  const bool evicts = std::any_of(ropt.methods.begin(), ropt.methods.end(),
                                  [](const eval::MethodConfig& m) { return !m.is_full(); });
  KVEVICT_CHECK(evicts || (!a.window && a.pool.empty()), a.window ? "--window" : "--pool",
                " has no effect with --methods ", a.methods,
                " (no eviction); expected an eviction method");
  ropt.modes.clear();
  std::vector<std::string> mode_names;
  for (const auto& m : split_list(a.modes, "--modes")) {
    ropt.modes.push_back(eval::query_mode_parse(m));
    mode_names.emplace_back(eval::query_mode_name(ropt.modes.back()));
  }
  check_distinct(mode_names, "--modes");
  const eval::SeedSplit split = eval::split_parse(a.split);
  eval::check_split_range(a.first_sample, a.samples);
  KVEVICT_CHECK(a.first_sample == 0 || a.data.empty(), "--first-sample ", a.first_sample,
                " picks generated samples; expected 0 with --data (its rows are the samples)");
  ropt.bootstrap.resamples = a.bootstrap;
  ropt.bootstrap.seed = a.bootstrap_seed;
  ropt.bootstrap.validate();
  const auto comparisons = parse_pairs(a.compare);
  const bool ablate = !a.ablate.empty();
  eval::AblationOptions abl;
  if (ablate) {
    KVEVICT_CHECK(a.data.empty(),
                  "--ablate needs generated samples (DEV and TEST seeds); got --data");
    abl.methods = split_list(a.ablate, "--ablate");
    abl.windows.clear();
    for (int64_t w : parse_ints(a.ablate_windows, "--ablate-windows"))
      abl.windows.push_back(static_cast<int>(w));
    abl.poolings = split_list(a.ablate_pools, "--ablate-pools");
    abl.validate();
  }
  const std::string model_file = a.model.file();
  check_output_args({{a.out, "--out"}, {a.markdown, "--markdown"}},
                    {{model_file, "-m"}, {a.data, "--data"}});
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
  std::vector<eval::Sample> samples, dev_samples;
  std::set<std::string> skipped;  // --skip-unfit: "vt at 512"
  if (!a.data.empty()) {
    eval::JsonlLimits limits;
    limits.max_text_bytes = eval::max_text_bytes(*info.tokenizer, ctx);
    limits.why = of + " holds at most that much text";
    samples = eval::read_jsonl_samples(a.data, limits);
    for (auto& s : samples) eval::format_prompt(s, style, info.tokenizer.get());
  } else {
    const eval::Corpus corpus = eval::Corpus::load(corpus_dir());
    eval::RulerGenerator gen(corpus, *info.tokenizer);
    auto generate = [&](eval::SeedSplit which) {
      std::vector<eval::Sample> out;
      const int64_t first = eval::split_first_index(which) + a.first_sample;  // seed index
      for (int64_t len : lengths) {
        eval::GenerateOptions gopt;
        gopt.target_length = len;
        gopt.style = style;
        for (const auto& t : tasks) {
          const uint64_t first_seed = eval::sample_seed(a.seed, t, first);
          if (a.skip_unfit && gen.smallest_length(t, gopt, first_seed) > len) {
            skipped.insert(t + " at " + std::to_string(len));
            continue;
          }
          auto set = gen.generate_set(t, gopt, a.samples, a.seed, first);
          out.insert(out.end(), set.begin(), set.end());
        }
      }
      return out;
    };
    samples = generate(ablate ? eval::SeedSplit::kTest : split);
    if (ablate) dev_samples = generate(eval::SeedSplit::kDev);
    KVEVICT_CHECK(!samples.empty(), "--skip-unfit skipped every task at every length (",
                  skipped.size(), " task x length pairs); expected a length that fits a task");
  }

  ropt.base_seed = a.seed;
  ropt.max_new_tokens_cap = a.max_new;
  ropt.one_at_a_time = a.one_at_a_time;
  ropt.prompt_style = eval::prompt_style_name(style);
  ropt.split = a.data.empty() ? eval::split_name(split) : "";
  ropt.context_length = ctx;
  // Every sample is tokenized and checked before the weights load (and the DEV samples of an
  // ablation too).
  const std::vector<eval::TokenizedSample> prompts =
      eval::tokenize_samples(*info.tokenizer, samples, ropt);
  if (ablate) eval::tokenize_samples(*info.tokenizer, dev_samples, ropt);
  const auto model = a.model.load();
  // Batch-invariant decoding: a setting's answers never depend on the other settings of its batch.
  RuntimeOptions rt_opt = a.model.runtime_options();
  rt_opt.batch_invariant_decode = true;
  const auto rt = ModelRuntime::create(model, rt_opt);
  eval::SessionModel runner(
      rt, std::move(info.tokenizer),
      ablate ? eval::ablation_all_methods(abl, budgets, ropt.methods) : ropt.methods,
      std::filesystem::path(model->path()).stem().string());

  int64_t total = static_cast<int64_t>(samples.size() * ropt.modes.size() * ropt.methods.size());
  if (ablate)
    total += static_cast<int64_t>(dev_samples.size() * ropt.modes.size() *
                                  eval::ablation_dev_methods(abl, budgets, false).size());
  ProgressBar bar("eval", total, !a.json);
  // Logs (stderr not a terminal): a line every --progress-every seconds and at the end.
  auto last_line = std::chrono::steady_clock::now();
  auto progress = [&](const eval::Progress& p) {
    bar.update(p.done);
    if (a.progress_every <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (p.done < p.total &&
        std::chrono::duration<double>(now - last_line).count() < a.progress_every)
      return;
    last_line = now;
    std::fprintf(stderr, "eval %s\n", eval::format_progress(p).c_str());
    std::fflush(stderr);
  };
  eval::EvalResults results =
      ablate ? eval::run_ablation(runner, dev_samples, samples, ropt, abl, budgets, progress)
             : eval::run_eval(runner, samples, prompts, ropt, progress);
  bar.finish();
  results.meta.comparisons.insert(results.meta.comparisons.begin(), comparisons.begin(),
                                  comparisons.end());
  eval::fill_provenance(results.meta, model->path(), rt->describe());
  results.meta.options_json = options_json(a);
  for (const auto& s : skipped)
    results.meta.notes.push_back("skipped " + s +
                                 " tokens: the task's smallest prompt is longer "
                                 "(--skip-unfit)");
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
  cmd->add_option("--tasks", a->tasks, "Comma-separated RULER tasks, or all")
      ->capture_default_str();
  cmd->add_option("--lengths", a->lengths, "Comma-separated target lengths in tokens")
      ->capture_default_str();
  add_integer(*cmd, "--samples", a->samples, 1, 1 << 20, "Samples per task and length")
      ->capture_default_str();
  add_integer(*cmd, "--first-sample", a->first_sample, 0, (1 << 20) - 1,
              "Index of the first generated sample of each task and length in its split (runs "
              "from disjoint ranges merge with kvevict merge)")
      ->capture_default_str();
  cmd->add_option("--methods", a->methods,
                  "Comma-separated settings METHOD[:MOD]... or groups (full = no eviction); "
                  "see the modifiers and groups below")
      ->capture_default_str();
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
  cmd->add_option("--split", a->split,
                  "Sample seeds: test (reported numbers) or dev (tuning); disjoint, docs/EVAL.md")
      ->capture_default_str();
  add_bootstrap(*cmd, a->bootstrap, a->bootstrap_seed, "over the samples of a cell");
  cmd->add_option("--compare", a->compare,
                  "Paired comparisons A/B at equal budget on the same samples (pairs absent from "
                  "the run are skipped; '' for none)")
      ->capture_default_str();
  auto* ablate =
      cmd->add_option("--ablate", a->ablate,
                      "Ablate these methods' window x pooling on DEV seeds, then report the chosen "
                      "setting and the default on TEST seeds (e.g. dropkv,obcache_vk)");
  // Without --ablate they would be ignored: refused instead (CLI11: "requires --ablate").
  cmd->add_option("--ablate-windows", a->ablate_windows, "Windows of the ablation (pinned)")
      ->capture_default_str()
      ->needs(ablate);
  cmd->add_option("--ablate-pools", a->ablate_pools, "Poolings of the ablation")
      ->capture_default_str()
      ->needs(ablate);
  cmd->add_option("--out", a->out, "Write the results JSON here");
  cmd->add_option("--markdown", a->markdown, "Write the markdown tables here");
  cmd->add_option("--plots", a->plots, "Draw PNG plots into this directory (needs --out)");
  cmd->add_flag("--skip-unfit", a->skip_unfit,
                "Skip a task at a length below its smallest prompt (noted in the results) "
                "instead of failing");
  cmd->add_flag("--one-at-a-time", a->one_at_a_time,
                "Decode each setting alone (a batch of one) instead of all settings of a prefill "
                "as one batch: slower; checks that batching changes no answer");
  add_number(*cmd, "--progress-every", a->progress_every,
             "Also print a progress line to stderr every S seconds (for logs; 0 = off)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the results JSON instead of the tables");
  cmd->add_flag("--list-tasks", a->list_tasks,
                "Print the RULER tasks (haystack, needles, answer cap) and exit; with --json as "
                "JSON");
  cmd->add_flag("--list-methods", a->list_methods,
                "Print what --methods expands to (groups included) and each setting's window, "
                "pooling, policy and aggregation, and exit; with --json as JSON")
      ->excludes(cmd->get_option("--list-tasks"));
  cmd->footer(
      "Setting modifiers (--methods dropkv:w=16, obcache_k:h2o, snapkv:kvpress):\n" +
      eval::method_setting_help() + "Method groups (--methods all):\n" +
      eval::method_groups_help() +
      "--tasks all: the 11 offline RULER tasks. Budgets: fractions (0.05) or tokens per "
      "head (2048).\nDefaults: SPEC section 2's, except dropkv / adadropkv / obcache_vk (w=32 "
      "pinned, max:11,\nchosen on DEV seeds; :spec for SPEC's); --ablate measures "
      "alternatives (docs/EVAL.md). Results files name the kvevict commit, "
      "device, model sha256 and every option.");
  return [a] { return run_eval_command(*a); };
}

}  // namespace kvevict::cli
