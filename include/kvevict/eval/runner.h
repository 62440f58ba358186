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
#include <memory>
#include <string>
#include <vector>

#include "kvevict/eval/metrics.h"
#include "kvevict/eval/sample.h"
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
struct MethodConfig {
  std::string name;  // as the user typed it (method_parse spelling) or "full" for no eviction
  MethodSpec spec;   // scoring, policy and sinks; ignored for "full"
  Budget budget;     // 1.0 for "full"

  bool is_full() const { return name == "full"; }
  // name + SPEC defaults; window > 0 and a non-empty pooling ("none", "max:7") override them.
  static MethodConfig make(const std::string& name, const Budget& budget, int window = 0,
                           const std::string& pooling = "");
  int window() const { return is_full() ? 0 : spec.score.window; }
  // The eviction of this method (none for "full"); question > 0: query-aware with the question as
  // the observation window of windowed scores (PrefillEviction::make).
  EvictConfig evict_config(int question = 0) const;
  // The observation window this method scores and protects with that question.
  int window_for(int question) const;
  std::string pooling() const { return is_full() ? "none" : spec.score.pooling.str(); }
  std::string policy() const { return is_full() ? "none" : policy_name(spec.policy); }
  std::string label() const;  // "dropkv@0.25", "full"
};

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
  uint64_t base_seed = 0;    // the seed the samples were generated with, for the report
  std::string prompt_style;  // "raw" | "chat", for the report
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
  std::string method;               // MethodConfig::name
  std::string budget;               // Budget::str(), "1" for full
  int window = 0;                   // observation window used for this sample (tokens)
  bool window_is_question = false;  // query-aware with RunOptions::question_window
  std::string pooling;
  std::string policy;
  std::string prediction;  // postprocessed
  std::vector<std::string> answers;
  Metric metric = Metric::kStringMatchAll;
  double score = 0.0;  // 0..100
  int64_t kept_tokens = -1;
  int64_t generated_tokens = -1;  // decode steps of the answer
  double answer_seconds = 0.0;    // eviction + answer of this method
  double prefill_seconds = 0.0;   // the sample's prefill, shared by every method of its mode
};

struct AggregateRow {
  std::string task;  // or "average" over the tasks of the same setting
  int64_t target_length = 0;
  QueryMode mode = QueryMode::kAware;
  std::string method, budget, pooling, policy;
  // The window setting: a token count, or "question" where each sample's window was its question
  // (the count then varies by sample, so it must not split the rows).
  std::string window;
  int64_t samples = 0;
  double score = 0.0;  // mean over samples, 0..100
};

struct RunMeta {
  std::string model;
  std::string prompt_style;
  uint64_t base_seed = 0;
  std::vector<std::string> notes;  // free-form lines for the report header
};

struct EvalResults {
  RunMeta meta;
  std::vector<SampleRecord> records;
  // Mean score per (task, length, mode, method, budget), plus one "average" row per setting (the
  // unweighted mean over tasks, as RULER averages its tasks). Sorted for stable output.
  std::vector<AggregateRow> aggregate() const;
};

EvalResults run_eval(EvalModel& model, const std::vector<Sample>& samples, const RunOptions& opt,
                     const ProgressFn& progress = nullptr);

// A sample's prompt as token ids, split where the context ends.
struct TokenizedSample {
  int64_t index = 0;  // among the samples of its (task, target length)
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
