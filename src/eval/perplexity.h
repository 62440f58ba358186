// Perplexity with decode-time eviction on long prose (the OBCache / StreamingLLM PG19 protocol on
// the Austen novels): the text is tokenized once, cut into chunks of `chunk_tokens`, and each
// chunk is fed token by token from an empty cache while the method keeps the cache at its budget
// (SPEC section 5, "Decode"). The NLL of every next token is accumulated; ppl = exp(mean NLL).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/runner.h"
#include "eval/stats.h"
#include "kvevict/model/evict_config.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

// The first max_tokens tokens of a long text (BOS first), tokenizing only a prefix of it that is
// large enough (cut at a space, so no word is split). Returns fewer tokens only when the whole
// text has fewer. Corpus::prose_text() is the intended text.
std::vector<int32_t> prose_tokens(const std::string& text, const Tokenizer& tokenizer,
                                  int64_t max_tokens);

// Token spans [begin, end) of the text, in order.
struct TokenSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Consecutive non-overlapping chunks of exactly chunk_tokens tokens (the remainder is dropped),
// at most max_chunks of them (0 = all). Throws when the text is shorter than one chunk, naming
// both sizes.
std::vector<TokenSpan> ppl_chunks(int64_t n_tokens, int64_t chunk_tokens, int64_t max_chunks = 0);

// Running NLL sums, overall and per position bucket (ppl vs position inside a chunk).
class PplAccumulator {
 public:
  explicit PplAccumulator(int64_t bucket_tokens = 1024);
  // The NLL (natural log) of predicting the token at `position` of its chunk (position >= 1).
  void add(int64_t position, double nll);
  void add_chunk(const std::vector<double>& nlls);  // nlls[i] is for position i + 1
  int64_t count() const { return count_; }
  double mean_nll() const;  // throws when empty
  double ppl() const { return std::exp(mean_nll()); }
  struct Bucket {
    int64_t start, end;  // positions [start, end)
    int64_t count;
    double ppl;
  };
  std::vector<Bucket> buckets() const;  // non-empty buckets in order

 private:
  int64_t bucket_tokens_;
  int64_t count_ = 0;
  double sum_ = 0.0;
  std::vector<std::pair<double, int64_t>> bucket_sums_;  // [buckets] (nll sum, count)
};

// Decode-time eviction settings shared by every method of a perplexity run (the library's).
using DecodeEvictionOptions = kvevict::DecodeEvictionOptions;

// The model side of `kvevict ppl`, implemented by the runtime.
class PplModel {
 public:
  virtual ~PplModel() = default;
  virtual std::string name() const = 0;
  // Feeds each text one token at a time from an empty cache, evicting with `method` (the budget
  // is a token count per head; "full" never evicts), and returns per text the NLL of
  // texts[t][i + 1] given texts[t][0..i] for i = 0..n-2 (n - 1 values).
  virtual std::vector<std::vector<double>> token_nlls(
      const std::vector<std::vector<int32_t>>& texts, const MethodConfig& method,
      const DecodeEvictionOptions& decode) = 0;
  // How many texts one token_nlls call should get (a GPU decodes them as one batch).
  virtual int texts_per_call() const { return 1; }
};

struct PplResult {
  std::string method, budget, policy;
  // The step score that decides the cut ("dropkv", "attention_sum", ...; "none" for full): the
  // decode-time form of the method (DecodeEviction::make), not its prefill window or pooling.
  std::string decode_score;
  int64_t chunks = 0;
  int64_t chunk_tokens = 0;
  int64_t evaluated_tokens = 0;
  double nll = 0.0;  // mean
  double ppl = 0.0;
  // Each chunk's mean NLL, in chunk order (every method runs the same chunks, so two methods'
  // lists pair up), and ppl's 95% interval: exp of the bootstrap interval of the mean of the
  // chunk means (equal-length chunks: that mean is `nll`), resampling chunks. NaN with one chunk.
  std::vector<double> chunk_nll;
  Interval ppl_interval;
  std::vector<PplAccumulator::Bucket> buckets;
};

struct PplRun {
  // The model's name, the bootstrap of every interval, the seed (meta.base_seed: 0, the text is
  // read in order) and, filled by the command, the provenance and option values (RunMeta).
  RunMeta meta;
  std::string source;  // "austen (6 novels, r-cran-janeaustenr)"
  DecodeEvictionOptions decode;
  std::vector<PplResult> results;
};

// Runs every method on the same chunks, model.texts_per_call() chunks a call; progress counts
// chunks x methods.
PplRun run_ppl(PplModel& model, const std::vector<int32_t>& tokens,
               const std::vector<TokenSpan>& chunks, const std::vector<MethodConfig>& methods,
               const DecodeEvictionOptions& decode, int64_t bucket_tokens = 1024,
               const ProgressFn& progress = nullptr, const BootstrapOptions& bootstrap = {});

// A method against a baseline at the same budget on the same chunks: the ratio of their ppl
// (exp of the mean per-chunk NLL difference) with the paired bootstrap interval, and how many
// chunks the method predicts better (lower NLL), equally, worse. Needs >= 2 chunks.
struct PplPaired {
  std::string method, baseline, budget;
  Interval ratio;
  int64_t chunks_better = 0, chunks_equal = 0, chunks_worse = 0;
};
// Every evicting method but the baseline against the baseline (streamingllm: the most recent
// tokens, which any score must beat to be worth computing), where both ran at that budget.
std::vector<PplPaired> ppl_paired(const PplRun& run, const std::string& baseline = "streamingllm");

}  // namespace kvevict::eval
