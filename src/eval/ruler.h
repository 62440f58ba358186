// RULER-style synthetic long-context tasks (Hsieh et al. 2024, NVIDIA/RULER), rebuilt from the
// published task design on Debian-packaged text: Austen novels as the essay haystack, WordNet
// lemmas for word keys and word lists (RULER uses Paul Graham essays and the wonderwords lists).
//   niah_single_1/2/3, niah_multikey_1/2/3, niah_multivalue, niah_multiquery, vt, cwe, fwe
// qa_1/qa_2 need SQuAD/HotpotQA and are out of scope (SPEC section 7); external JSONL covers them.
// As in RULER, the essay haystack always starts at the beginning of the text (the first novel), so
// samples of one length differ in their needles and depths, not in their prose.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/corpus.h"
#include "eval/rng.h"
#include "eval/sample.h"

namespace kvevict {
class Tokenizer;
}

namespace kvevict::eval {

enum class TaskFamily : uint8_t { kNiah, kVariableTracking, kCommonWords, kFreqWords };
enum class Haystack : uint8_t {
  kRepeat,  // the noise sentence repeated (niah_single_1, vt)
  kEssay,   // prose sentences (niah_single_2/3, multikey_1, multivalue, multiquery)
  kNeedle,  // distractor needles with other keys (niah_multikey_2/3)
  kNone,    // the task builds its own text (cwe, fwe)
};
enum class NeedleType : uint8_t { kWords, kNumbers, kUuids };
const char* needle_type_name(NeedleType t);  // "words", "numbers", "uuids" (RULER's spelling)

// One task's configuration, as RULER's synthetic.yaml sets it.
struct TaskConfig {
  std::string name;
  TaskFamily family = TaskFamily::kNiah;
  Haystack haystack = Haystack::kEssay;
  NeedleType key_type = NeedleType::kWords;
  NeedleType value_type = NeedleType::kNumbers;
  int num_keys = 1;        // needles with distinct keys (max(num_keys, num_queries) as RULER does)
  int num_values = 1;      // values per key
  int num_queries = 1;     // keys asked about
  int num_chains = 1;      // vt
  int num_hops = 4;        // vt
  int freq_common = 30;    // cwe: repeats of each common word (6 below 4K tokens)
  int freq_uncommon = 3;   // cwe: repeats of each other word (1 below 4K tokens)
  int num_common = 10;     // cwe
  double alpha = 2.0;      // fwe: Zipf exponent
  int coded_word_len = 6;  // fwe
  int max_new_tokens = 0;  // RULER's tokens_to_generate: niah 128, vt 30, cwe 120, fwe 50
};

const std::vector<std::string>& ruler_task_names();  // the 11 tasks above, in RULER's order
// Throws naming the unknown task and listing the valid ones.
const TaskConfig& ruler_task_config(const std::string& name);

// RULER's literal text (constants.py). Each task's prompt is template(context, query) with
// context + question split at the end of the haystack, then the answer prefix.
namespace templates {
extern const char* const kNoiseSentence;  // the repeated haystack of niah_single_1 and vt
extern const char* const
    kNeedle;  // "One of the special magic {type_needle_v} for {key} is: {value}."
extern const char* const kNiahPlural;    // full niah template, several answers
extern const char* const kNiahSingular;  // the same with one answer ("A special magic ... is")
extern const char* const kNiahPrefixPlural;
extern const char* const kNiahPrefixSingular;
extern const char* const kVariableTracking;
extern const char* const kVariableTrackingPrefix;
extern const char* const kCommonWords;
extern const char* const kCommonWordsPrefix;
extern const char* const kFreqWords;
extern const char* const kFreqWordsPrefix;
}  // namespace templates

// Replaces every "{name}" in text by its value; throws on a placeholder left without a value.
std::string fill_template(const std::string& text,
                          const std::vector<std::pair<std::string, std::string>>& values);

struct GenerateOptions {
  int64_t target_length = 4096;  // tokens
  // RULER counts max_new_tokens inside the length (max_seq_length = prompt + generation); with
  // false the target is the prompt alone.
  bool length_includes_generation = true;
  PromptStyle style = PromptStyle::kRaw;
  bool add_bos = true;  // count the BOS the model will see
  // Needle depths in percent, one per needle (multi-needle tasks take them in needle order). Empty:
  // RULER's choice, random depths from round(linspace(0, 100, 40)) for the essay haystack and
  // random positions for the others.
  std::vector<double> depths;
};

// RULER's depth grid: round(linspace(0, 100, 40)).
const std::vector<int>& ruler_depths();

class RulerGenerator {
 public:
  // Both must outlive the generator. The tokenizer sizes prompts (and formats chat prompts).
  RulerGenerator(const Corpus& corpus, const Tokenizer& tokenizer);

  // One sample sized to opt.target_length: a galloping + binary search over the haystack amount
  // finds the largest amount whose prompt fits, so the result is never above the target and short
  // of it by less than one haystack unit: within 1% whenever a unit is under 1% of the target (all
  // tasks from 4K up, except niah_multikey_3 below ~8K, whose unit is a two-UUID needle of ~80
  // BPE tokens). Throws when even the smallest haystack does not fit. Deterministic in
  // (task, seed, options).
  Sample generate(const std::string& task, const GenerateOptions& opt, uint64_t seed) const;

  // The length of the smallest sample of a task (its least haystack) with these options and seed:
  // generate() throws for a target below it.
  int64_t smallest_length(const std::string& task, const GenerateOptions& opt, uint64_t seed) const;

  // The sample with a given haystack amount (no sizing); length is still measured.
  Sample generate_with_amount(const std::string& task, int64_t amount, const GenerateOptions& opt,
                              uint64_t seed) const;

  // n samples with seeds sample_seed(base_seed, task, i), i = first_index .. first_index + n - 1
  // (split.h: the DEV split starts at kDevFirstIndex).
  std::vector<Sample> generate_set(const std::string& task, const GenerateOptions& opt, int n,
                                   uint64_t base_seed, int64_t first_index = 0) const;

  // Every task x length, n samples each, in (length, task, index) order; samples of task t at any
  // length use seeds sample_seed(base_seed, t, i). `done` is called after each sample.
  std::vector<Sample> generate_suite(
      const std::vector<std::string>& tasks, const std::vector<int64_t>& lengths, int n,
      uint64_t base_seed, const GenerateOptions& base,
      const std::function<void(int64_t done, int64_t total)>& done = nullptr) const;

  // Token count of the sized quantity of a formatted sample (prompt, plus generation if counted).
  int64_t measure(const Sample& s, const GenerateOptions& opt) const;

 private:
  const Corpus& corpus_;
  const Tokenizer& tokenizer_;
  std::vector<std::string> essay_words_;      // the essay haystack, split on spaces
  std::vector<std::string> cwe_words_;        // nouns + adjectives + verbs, fixed shuffle
  std::vector<std::string> cwe_large_words_;  // all lemmas, fixed shuffle (long lists)
};

// Task builders (one per family, in their own files). They fill context, question, answer_prefix,
// answers, needles and max_new_tokens for a given haystack amount; generation inputs are the
// corpus words and an Rng seeded from the sample seed.
struct TaskInputs {
  const TaskConfig& config;
  const std::vector<std::string>& essay_words;
  const std::vector<std::string>& adjectives;
  const std::vector<std::string>& nouns;
  const std::vector<std::string>& cwe_words;
  const std::vector<std::string>& cwe_large_words;  // used when cwe_words is too short
  int64_t target_length;  // cwe switches to its short-context settings below 4096, fwe sizes
                          // its vocabulary as target / 50
  const std::vector<double>& depths;
};
Sample build_niah(const TaskInputs& in, int64_t amount, uint64_t seed);
Sample build_variable_tracking(const TaskInputs& in, int64_t amount, uint64_t seed);
Sample build_common_words(const TaskInputs& in, int64_t amount, uint64_t seed);
Sample build_freq_words(const TaskInputs& in, int64_t amount, uint64_t seed);

// A random needle value of the given type: 7-digit number, "adjective-noun" word, or a version-4
// UUID, as RULER draws them.
std::string random_needle_value(NeedleType type, Rng& rng,
                                const std::vector<std::string>& adjectives,
                                const std::vector<std::string>& nouns);

}  // namespace kvevict::eval
