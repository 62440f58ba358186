// The evaluation loop: methods x budgets x {query-aware, query-agnostic} over a set of samples,
// prefilling each sample once per mode and answering with every method from that prefill.
// The model side is an interface (EvalModel) that the runtime implements; the harness never sees
// weights, caches or kernels (ARCHITECTURE.md: eval uses the runtime, never kernels).
//
// Glue for `kvevict eval` (the CLI side):
//   Corpus corpus = Corpus::load(Corpus::default_dir());
//   RulerGenerator gen(corpus, model.tokenizer());
//   GenerateOptions g;  g.style = PromptStyle::kChat;            // instruct models
//   auto samples = gen.generate_suite(tasks, {4096, 16384}, n, seed, g);   // or read_jsonl_samples
//   (for JSONL samples: format_prompt(s, style, &model.tokenizer()) on each)
//   RunOptions run;  run.methods = expand_methods({"full", "dropkv", "snapkv"}, budgets, window,
//                                                 pooling);
//   run.modes = {QueryMode::kAware, QueryMode::kAgnostic};  run.base_seed = seed;
//   EvalResults res = run_eval(model, samples, run, [](const Progress& p) {
//     std::fprintf(stderr, "\r%s", format_progress(p).c_str()); });
//   res.meta.notes.push_back("...");  write_text_file(out + ".json", results_to_json(res));
//   write_text_file(out + ".md", results_to_markdown(res));
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "eval/sample.h"
#include "eval/stats.h"
#include "kvevict/method.h"
#include "kvevict/model/evict_config.h"

namespace kvevict {
class Tokenizer;
}

namespace kvevict::eval {

// SPEC section 5: query-aware puts the question in the prompt that is compressed (the window is the
// question's tokens); query-agnostic compresses the context alone and appends the question after.
enum class QueryMode : uint8_t { kAware, kAgnostic };
const char* query_mode_name(QueryMode m);          // "query-aware" | "query-agnostic"
QueryMode query_mode_parse(const std::string& s);  // also "aware" | "agnostic"

// One eviction setting to evaluate: a method (or the full cache) at one budget.
//
// Settings are spelled METHOD[:MOD]... (method_setting_help() lists the modifiers): the method
// (method_parse names), then modifiers that change its aggregation ("obcache_k:h2o"), policy
// ("obcache_vk:adakv", "adakv:alpha=0.5"), window ("dropkv:w=16", pinned: used in both query
// modes), pooling ("dropkv:pool=max:7"), h2o's normalisation ("h2o:norm"), TOVA keeping the last
// token ("tova:keep_last"), kvpress's defaults ("snapkv:kvpress" = w=64:pool=avg:5), or SPEC
// section 2's defaults instead of kvevict's measured ones ("dropkv:spec"). The spelling is the
// setting's name in every results table.
struct MethodConfig {
  std::string name;        // as the user spelled it (see above) or "full" for no eviction
  MethodSpec spec;         // scoring, policy and sinks; ignored for "full"
  Budget budget;           // 1.0 for "full"
  double alpha = 0.2;      // adakv: B_h = f_h (1 - alpha) + alpha B (SelectOptions::alpha)
  bool keep_last = false;  // the last prompt token is always kept (kvpress's TOVA)

  bool is_full() const { return name == "full"; }
  // Parses the spelling at `budget`; window > 0 and a non-empty pooling ("none", "max:7")
  // override every windowed method's defaults (before the spelling's own modifiers).
  static MethodConfig make(const std::string& name, const Budget& budget, int window = 0,
                           const std::string& pooling = "");
  int window() const { return is_full() ? 0 : spec.score.window; }
  // The eviction of this method (none for "full"); question > 0: query-aware with the question as
  // the observation window of windowed scores (PrefillEviction::make), unless spec.pin_window
  // (w=N, or the measured defaults of dropkv / obcache_vk).
  EvictConfig evict_config(int question = 0) const;
  // The observation window this method scores and protects with that question.
  int window_for(int question) const;
  // True when a query-aware question of that many tokens is this method's window.
  bool window_is_question(int question) const;
  std::string pooling() const { return is_full() ? "none" : spec.score.pooling.str(); }
  std::string policy() const { return is_full() ? "none" : policy_name(spec.policy); }
  // "snapkv" | "h2o" | "tova" for query scores; "none" for the full cache and query-free scores.
  std::string aggregate() const;
  bool normalize() const { return !is_full() && spec.score.h2o_normalize; }
  std::string label() const;  // "dropkv@0.25", "full"
};

// The modifiers of a setting's spelling, one per line, for --help.
std::string method_setting_help();
// Names of method groups ("all", "spec", "aggregations", "kvpress", "adakv-variants") replaced by
// their members, in order, without duplicates; other names are kept as they are.
std::vector<std::string> expand_method_groups(const std::vector<std::string>& names);
// The group names expand_method_groups knows, each with what it holds, for --help.
std::string method_groups_help();

// methods x budgets, with "full" (when listed) once at budget 1.0 since no budget applies to it.
std::vector<MethodConfig> expand_methods(const std::vector<std::string>& methods,
                                         const std::vector<Budget>& budgets, int window = 0,
                                         const std::string& pooling = "");

// What the runtime keeps after prefilling one prompt with the full cache. Opaque to the harness.
class PrefillState {
 public:
  virtual ~PrefillState() = default;
};

struct Generation {
  std::string text;               // the decoded continuation (after the answer prefix)
  int64_t kept_tokens = -1;       // cache tokens per head after eviction, if the runtime reports it
  int64_t generated_tokens = -1;  // decode steps taken
  int64_t kv_bytes = -1;          // K/V bytes allocated after eviction, if the runtime reports it
  // Seconds the runtime reports (-1: not reported; GPU: device time): this setting's eviction,
  // and the question append and decode of the batch it was answered in, which `rows_in_batch`
  // settings share (BatchAnswer).
  double evict_seconds = -1;
  double batch_append_seconds = -1;
  double batch_decode_seconds = -1;
  int64_t batch_decode_steps = -1;
  int rows_in_batch = 1;
};

class EvalModel {
 public:
  virtual ~EvalModel() = default;
  virtual std::string name() const = 0;  // model name for the reports (file stem, arch)
  virtual const Tokenizer& tokenizer() const = 0;

  // Prefills with the full cache. kAware: the prompt is context + question, and eviction scores
  // with the last `method.window()` queries (the question's tokens with
  // RunOptions::question_window). kAgnostic: only the context is prefilled; the
  // question is appended after eviction, in answer().
  virtual std::unique_ptr<PrefillState> prefill(const std::vector<int32_t>& context_tokens,
                                                const std::vector<int32_t>& question_tokens,
                                                QueryMode mode) = 0;
  // Evicts a copy of the prefilled cache with `method` (nothing for "full"), appends the question
  // in kAgnostic mode, then decodes greedily up to max_new_tokens or the end of generation. Must
  // leave `state` as prefill() returned it: every method of the run starts from the same prefill.
  virtual Generation answer(PrefillState& state, const MethodConfig& method,
                            const std::vector<int32_t>& question_tokens, QueryMode mode,
                            int max_new_tokens) = 0;
  // Every method's answer from one prefill, in order. `question_window` > 0: the question's
  // tokens are the observation window of windowed scores (query-aware with
  // RunOptions::question_window). Runtimes that decode many caches together (the GPU) override
  // it; the default answers one method after another, each with its window set.
  virtual std::vector<Generation> answer_all(PrefillState& state,
                                             const std::vector<MethodConfig>& methods,
                                             const std::vector<int32_t>& question_tokens,
                                             QueryMode mode, int max_new_tokens,
                                             int question_window);
};

struct RunOptions {
  std::vector<MethodConfig> methods;  // expand_methods(...)
  std::vector<QueryMode> modes = {QueryMode::kAware};
  bool add_bos = true;  // BOS before the context tokens
  // SPEC section 5: in query-aware mode the observation window is the question. When true, each
  // windowed method's window (aggregate kWindow: scored queries and protected tail) is set to the
  // question's token count for that sample; h2o/tova-style aggregations and false keep the
  // method's own window. Records carry the window used.
  bool question_window = true;
  // > 0: every answer stops after at most this many new tokens (RULER's per-task limits, up to
  // 128, otherwise). A speed knob for small models that ramble after a wrong answer; reported.
  int max_new_tokens_cap = 0;
  // > 0: every sample's prompt plus its answer must fit this many tokens (the model's context);
  // checked, with every token budget against every sample's prompt, before the first prefill.
  int64_t context_length = 0;
  uint64_t base_seed = 0;      // the seed the samples were generated with, for the report
  std::string prompt_style;    // "raw" | "chat", for the report
  std::string split;           // "dev" | "test" (split.h) for generated samples; "" for a data file
  BootstrapOptions bootstrap;  // the intervals of the aggregate rows and comparisons
  // Answer each setting alone (answer_all with one method: a decode batch of one) instead of
  // every setting of a prefill together: slower; the check that batching changes no answer.
  bool one_at_a_time = false;
};

struct Progress {
  int64_t done = 0;   // answers produced so far
  int64_t total = 0;  // samples x modes x methods
  double elapsed_s = 0.0;
  double eta_s = 0.0;   // elapsed / done x (total - done); 0 until the first answer
  std::string current;  // "niah_single_1 #3 query-aware dropkv@0.25"
};
using ProgressFn = std::function<void(const Progress&)>;
// "12/40 (30%) elapsed 1m05s eta 2m32s niah_single_1 #3 query-aware dropkv@0.25"
std::string format_progress(const Progress& p);

struct SampleRecord {
  std::string task;
  int64_t target_length = 0;  // 0 for external data
  int64_t sample_index = 0;   // within its (task, length) group
  uint64_t seed = 0;
  int64_t context_tokens = 0;   // incl. BOS
  int64_t question_tokens = 0;  // question + chat suffix + answer prefix
  QueryMode mode = QueryMode::kAware;
  std::string split;                // RunOptions::split
  std::string method;               // MethodConfig::name
  std::string budget;               // Budget::str(), "1" for full
  int window = 0;                   // observation window used for this sample (tokens)
  bool window_is_question = false;  // query-aware with RunOptions::question_window
  std::string pooling;
  std::string policy;
  std::string aggregate;   // MethodConfig::aggregate()
  bool normalize = false;  // h2o's normalisation (MethodConfig::normalize())
  bool keep_last = false;  // MethodConfig::keep_last
  std::string prediction;  // postprocessed
  std::vector<std::string> answers;
  Metric metric = Metric::kStringMatchAll;
  double score = 0.0;  // 0..100
  int64_t kept_tokens = -1;
  int64_t generated_tokens = -1;  // decode steps of the answer
  double answer_seconds = 0.0;    // wall time of the sample's answers / settings answered
  double prefill_seconds = 0.0;   // the sample's prefill, shared by every method of its mode
  double evict_seconds = -1.0;    // this setting's eviction, as the runtime reports it
};

// One prefill and every setting's answer from it (one answer_all call): what the cost table sums.
struct BatchRecord {
  std::string split, task;
  int64_t target_length = 0;
  int64_t sample_index = 0;
  QueryMode mode = QueryMode::kAware;
  int64_t prefill_tokens = 0;    // tokens prefilled (query-aware: context + question)
  int64_t settings = 0;          // answers from this prefill
  double prefill_seconds = 0.0;  // wall time of the prefill
  double answer_seconds = 0.0;   // wall time of answer_all: every eviction, append and decode
  // As the runtime reports them (-1: not reported): the settings' evictions summed; the question
  // appends and decode loops of the batches answer_all ran (the GPU: one batch of every setting;
  // the CPU: a batch of one per setting), summed.
  double evict_seconds = -1.0;
  double append_seconds = -1.0;
  double decode_seconds = -1.0;
  int64_t decode_steps = -1;  // decode steps of those batches, summed
  int64_t batches = 0;        // decode batches answer_all ran
};

struct AggregateRow {
  std::string split;
  std::string task;  // or "average" over the tasks of the same setting
  int64_t target_length = 0;
  QueryMode mode = QueryMode::kAware;
  std::string method, budget, pooling, policy, aggregate;
  // The observation window in tokens; where each sample's window was its question
  // (window_is_question), the count varies by sample and must not split the rows: window is 0.
  int window = 0;
  bool window_is_question = false;
  bool normalize = false, keep_last = false;
  int64_t samples = 0;
  double score = 0.0;  // mean over samples, 0..100 ("average": the mean of the task means)
  // The interval of the score (RunMeta::bootstrap; the average resamples within each task).
  double ci_low = std::numeric_limits<double>::quiet_NaN();
  double ci_high = std::numeric_limits<double>::quiet_NaN();
};

// A paired comparison: settings A and B at the same budget, on the same samples (matched by
// task, length, mode, sample index and seed), per task and averaged over tasks.
struct ComparisonRow {
  std::string split;
  std::string task;  // or "average"
  int64_t target_length = 0;
  QueryMode mode = QueryMode::kAware;
  std::string budget;
  std::string a, b;         // setting names (MethodConfig::name)
  PairedDifference result;  // A, B and A - B with their intervals; sign counts
};

// The ablation of windows x pooling (ablation.h): the grid on the DEV split and the setting it
// chose per method.
struct AblationChoice {
  std::string method;           // the method ablated ("dropkv")
  std::string chosen;           // the winning setting's name ("dropkv:w=16:pool=max:7")
  double dev_score = 0;         // its mean of the DEV average rows (the criterion)
  std::string default_setting;  // the method's current default, as evaluated on DEV
  double default_dev_score = 0;
  int64_t cells = 0;  // (length, mode, budget) cells averaged into each score
};

// Everything a results file needs to describe itself (docs/EVAL.md, "Results files").
struct RunMeta {
  std::string model;
  std::string prompt_style;
  uint64_t base_seed = 0;
  std::vector<std::string> notes;  // free-form lines for the report header
  std::string split;               // RunOptions::split
  BootstrapOptions bootstrap;
  // Provenance (provenance.h), filled by the command that ran: empty when unknown.
  std::string kvevict_version, git_commit, command_line, date_utc, device;
  bool git_modified = false;  // tracked files differed from git_commit at build time
  std::string model_path, model_sha256;
  std::string options_json;  // a JSON object text: every option value of the command, typed
  // Paired comparisons the reports compute (names of settings A, B); pairs whose settings are
  // absent from the run are skipped.
  std::vector<std::pair<std::string, std::string>> comparisons;
};

struct EvalResults {
  RunMeta meta;
  std::vector<SampleRecord> records;
  std::vector<BatchRecord> batches;
  std::vector<AblationChoice> ablation;  // empty unless the run was an ablation
  // Mean score per (split, task, length, mode, setting), plus one "average" row per setting (the
  // unweighted mean over tasks, as RULER averages its tasks), each with its interval
  // (meta.bootstrap). Sorted for stable output. (summary.cpp)
  std::vector<AggregateRow> aggregate() const;
  // meta.comparisons at every (split, length, mode, budget) where both settings were answered.
  std::vector<ComparisonRow> compare() const;
  // Appends another run's records, batches and ablation (meta stays this one's).
  void append(const EvalResults& other);
};

EvalResults run_eval(EvalModel& model, const std::vector<Sample>& samples, const RunOptions& opt,
                     const ProgressFn& progress = nullptr);

// A sample's prompt as token ids, split where the context ends.
struct TokenizedSample {
  int64_t index = 0;  // Sample::index, or (external data) its place among its (task, length)
  std::vector<int32_t> context, question;
};
// Tokenizes every sample and checks each one before any prefill: its prompt plus its answer
// must fit RunOptions::context_length (when set), and every token-count budget must fit the
// tokens the sample prefills in each mode. Throws naming the sample ("data.jsonl line 3", or
// "sample vt #2"). run_eval above does this first; a caller that wants the checks before it
// loads the model's weights calls it itself and passes the result to the overload below.
std::vector<TokenizedSample> tokenize_samples(const Tokenizer& tokenizer,
                                              const std::vector<Sample>& samples,
                                              const RunOptions& opt);
EvalResults run_eval(EvalModel& model, const std::vector<Sample>& samples,
                     const std::vector<TokenizedSample>& prompts, const RunOptions& opt,
                     const ProgressFn& progress = nullptr);

}  // namespace kvevict::eval
