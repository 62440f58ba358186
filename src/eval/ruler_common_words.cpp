// Common words extraction (RULER scripts/data/synthetic/common_words_extraction.py): a numbered
// list where 10 words repeat often (30 times) and the rest rarely (3 times); the answer is the 10
// common words. One in-context example precedes the task; below 4K tokens RULER uses smaller
// repeat counts (6 and 1) and a smaller example, and so does this.
#include "eval/ruler.h"
#include "kvevict/error.h"
#include "ruler_builders.h"

namespace kvevict::eval {

namespace {

struct WordList {
  std::string text;                 // "1. w 2. w ..."
  std::vector<std::string> common;  // the words that repeat most
};

WordList make_list(Rng& rng, const std::vector<std::string>& words, int64_t num_words,
                   int common_repeats, int uncommon_repeats, int num_common) {
  KVEVICT_CHECK(num_words <= static_cast<int64_t>(words.size()),
                "common words extraction asks for ", num_words,
                " distinct words but the WordNet list has ", words.size(),
                "; expected a shorter target length");
  std::vector<std::string> chosen;
  for (int64_t i : rng.sample_indices(static_cast<int64_t>(words.size()), num_words))
    chosen.push_back(words[static_cast<size_t>(i)]);
  WordList out;
  out.common.assign(chosen.begin(), chosen.begin() + num_common);
  std::vector<std::string> list;
  for (int r = 0; r < common_repeats; ++r)
    for (int i = 0; i < num_common; ++i) list.push_back(chosen[static_cast<size_t>(i)]);
  for (int r = 0; r < uncommon_repeats; ++r)
    for (size_t i = static_cast<size_t>(num_common); i < chosen.size(); ++i)
      list.push_back(chosen[i]);
  rng.shuffle(list);
  for (size_t i = 0; i < list.size(); ++i)
    out.text += (i ? " " : "") + std::to_string(i + 1) + ". " + list[i];
  return out;
}

std::string numbered(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i ? " " : "") + std::to_string(i + 1) + ". " + words[i];
  return out;
}

}  // namespace

Sample build_common_words(const TaskInputs& in, int64_t amount, uint64_t seed) {
  const TaskConfig& c = in.config;
  KVEVICT_CHECK(amount > c.num_common, "common words extraction needs more than ", c.num_common,
                " words; got ", amount);
  const bool short_context = in.target_length < 4096;
  Rng rng(seed);
  // RULER samples from its everyday word list and switches to a larger list when the task needs
  // more distinct words than that list has.
  const std::vector<std::string>& pool =
      amount <= static_cast<int64_t>(in.cwe_words.size()) ? in.cwe_words : in.cwe_large_words;
  // The example is drawn first so that it does not change with the list length.
  WordList shot = short_context ? make_list(rng, in.cwe_words, 20, 3, 1, c.num_common)
                                : make_list(rng, in.cwe_words, 40, 10, 3, c.num_common);
  WordList main = short_context
                      ? make_list(rng, pool, amount, 6, 1, c.num_common)
                      : make_list(rng, pool, amount, c.freq_common, c.freq_uncommon, c.num_common);
  const std::string example = fill_template(templates::kCommonWords, {{"context", shot.text}}) +
                              templates::kCommonWordsPrefix + " " + numbered(shot.common) + "\n";
  auto [context, question] = detail::split_at_context(templates::kCommonWords, main.text, {});
  Sample s;
  s.task = c.name;
  s.context = example + context;
  s.question = question;
  s.answer_prefix = templates::kCommonWordsPrefix;
  s.answers = main.common;
  s.max_new_tokens = c.max_new_tokens;
  s.seed = seed;
  s.haystack_amount = amount;
  return s;
}

}  // namespace kvevict::eval
