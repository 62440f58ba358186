// Sizing RULER samples to a token budget with the model's tokenizer. RULER grows the haystack in
// fixed steps and keeps the last size that fits; here a galloping + binary search over the haystack
// amount finds the largest amount that fits, which lands within one haystack unit of the target.
#include <algorithm>

#include "eval/ruler.h"
#include "eval/split.h"
#include "kvevict/error.h"
#include "kvevict/tokenizer.h"

namespace kvevict::eval {

namespace {

// The smallest haystack each task can be built with.
int64_t min_amount(const TaskConfig& c) {
  switch (c.family) {
    case TaskFamily::kNiah:
      return c.haystack == Haystack::kEssay ? 1 : static_cast<int64_t>(c.num_keys) * c.num_values;
    case TaskFamily::kVariableTracking: return c.num_hops + 1;
    case TaskFamily::kCommonWords: return c.num_common + 1;
    case TaskFamily::kFreqWords: return 100;  // below this the top-3 counts tie with rank 5
  }
  return 1;
}

}  // namespace

RulerGenerator::RulerGenerator(const Corpus& corpus, const Tokenizer& tokenizer)
    : corpus_(corpus), tokenizer_(tokenizer) {
  essay_words_ = split_words(corpus.essay_text());
  cwe_words_ = corpus.nouns;
  cwe_words_.insert(cwe_words_.end(), corpus.adjectives.begin(), corpus.adjectives.end());
  cwe_words_.insert(cwe_words_.end(), corpus.verbs.begin(), corpus.verbs.end());
  std::sort(cwe_words_.begin(), cwe_words_.end());
  cwe_words_.erase(std::unique(cwe_words_.begin(), cwe_words_.end()), cwe_words_.end());
  Rng fixed(42);  // RULER shuffles its word list once with the global seed
  fixed.shuffle(cwe_words_);
  cwe_large_words_ = corpus.all_words;
  fixed.shuffle(cwe_large_words_);
}

int64_t RulerGenerator::measure(const Sample& s, const GenerateOptions& opt) const {
  const auto ids = tokenizer_.encode(s.input, opt.add_bos);
  return static_cast<int64_t>(ids.size()) + (opt.length_includes_generation ? s.max_new_tokens : 0);
}

Sample RulerGenerator::generate_with_amount(const std::string& task, int64_t amount,
                                            const GenerateOptions& opt, uint64_t seed) const {
  const TaskConfig& c = ruler_task_config(task);
  KVEVICT_CHECK(opt.target_length > 0, "target length ", opt.target_length,
                " is invalid; expected a positive token count");
  TaskInputs in{c,          essay_words_,     corpus_.adjectives, corpus_.nouns,
                cwe_words_, cwe_large_words_, opt.target_length,  opt.depths};
  Sample s;
  switch (c.family) {
    case TaskFamily::kNiah: s = build_niah(in, amount, seed); break;
    case TaskFamily::kVariableTracking: s = build_variable_tracking(in, amount, seed); break;
    case TaskFamily::kCommonWords: s = build_common_words(in, amount, seed); break;
    case TaskFamily::kFreqWords: s = build_freq_words(in, amount, seed); break;
  }
  format_prompt(s, opt.style, &tokenizer_);
  s.target_length = opt.target_length;
  s.length = measure(s, opt);
  return s;
}

int64_t RulerGenerator::smallest_length(const std::string& task, const GenerateOptions& opt,
                                        uint64_t seed) const {
  return generate_with_amount(task, min_amount(ruler_task_config(task)), opt, seed).length;
}

Sample RulerGenerator::generate(const std::string& task, const GenerateOptions& opt,
                                uint64_t seed) const {
  const TaskConfig& c = ruler_task_config(task);
  int64_t max_amount = INT64_MAX / 4;
  if (c.family == TaskFamily::kCommonWords)
    max_amount = static_cast<int64_t>(std::max(cwe_words_.size(), cwe_large_words_.size()));

  Sample best;  // the sample of the largest amount that fits so far
  auto fits = [&](int64_t a) {
    Sample s = generate_with_amount(task, a, opt, seed);
    if (s.length > opt.target_length) return false;
    if (a >= best.haystack_amount) best = std::move(s);
    return true;
  };

  int64_t lo = min_amount(c);
  KVEVICT_CHECK(fits(lo), "target length ", opt.target_length, " tokens is too small for task '",
                task, "': its smallest prompt already takes ",
                generate_with_amount(task, lo, opt, seed).length,
                " tokens; expected a larger target");
  // Gallop up from the smallest haystack to bracket the target, then bisect. The length grows
  // (almost) monotonically with the amount; `lo` always holds a measured fit, so the result never
  // exceeds the target even where it does not.
  int64_t step = 1, hi = -1;
  while (hi < 0) {
    int64_t probe = std::min(lo + step, max_amount);
    if (probe == lo) break;  // the corpus limit fits: return the longest prompt it allows
    if (fits(probe)) {
      lo = probe;
      step *= 2;
    } else {
      hi = probe;
    }
  }
  while (hi > lo + 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid;
  }
  return best;
}

std::vector<Sample> RulerGenerator::generate_set(const std::string& task,
                                                 const GenerateOptions& opt, int n,
                                                 uint64_t base_seed, int64_t first_index) const {
  KVEVICT_CHECK(n >= 0, "sample count ", n, " is negative; expected >= 0");
  KVEVICT_CHECK(first_index >= 0, "first sample index ", first_index, " is negative");
  std::vector<Sample> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out.push_back(generate(task, opt, sample_seed(base_seed, task, first_index + i)));
    out.back().index = index_in_split(first_index + i);
  }
  return out;
}

std::vector<Sample> RulerGenerator::generate_suite(
    const std::vector<std::string>& tasks, const std::vector<int64_t>& lengths, int n,
    uint64_t base_seed, const GenerateOptions& base,
    const std::function<void(int64_t, int64_t)>& done) const {
  KVEVICT_CHECK(!tasks.empty() && !lengths.empty(), "a suite of ", tasks.size(), " tasks and ",
                lengths.size(), " lengths is empty; expected at least one of each");
  KVEVICT_CHECK(n > 0, "samples per task ", n, " is invalid; expected > 0");
  for (const auto& t : tasks) ruler_task_config(t);  // fail before any work on a bad name
  const int64_t total = static_cast<int64_t>(tasks.size() * lengths.size()) * n;
  std::vector<Sample> out;
  out.reserve(static_cast<size_t>(total));
  for (int64_t length : lengths) {
    GenerateOptions opt = base;
    opt.target_length = length;
    for (const auto& t : tasks)
      for (int i = 0; i < n; ++i) {
        out.push_back(generate(t, opt, sample_seed(base_seed, t, i)));
        out.back().index = i;
        if (done) done(static_cast<int64_t>(out.size()), total);
      }
  }
  return out;
}

}  // namespace kvevict::eval
