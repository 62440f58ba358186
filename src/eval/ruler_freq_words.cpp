// Frequent words extraction (RULER scripts/data/synthetic/freq_words_extraction.py): coded
// 6-letter words drawn with Zipf frequencies (count_k = floor(N k^-alpha / zeta(alpha))); the most
// frequent one is replaced by the noise "..." and the answer is the next three.
#include <algorithm>
#include <cmath>
#include <set>

#include "eval/ruler.h"
#include "kvevict/error.h"
#include "ruler_builders.h"

namespace kvevict::eval {

namespace {

// Riemann zeta by direct sum plus the Euler-Maclaurin tail; exact to ~1e-12 for alpha >= 1.5.
double zeta(double a) {
  constexpr int kTerms = 10000;
  double s = 0.0;
  for (int k = kTerms; k >= 1; --k) s += std::pow(static_cast<double>(k), -a);
  const double n = kTerms;
  s += std::pow(n, 1.0 - a) / (a - 1.0) - 0.5 * std::pow(n, -a) + a / 12.0 * std::pow(n, -a - 1.0);
  return s;
}

}  // namespace

Sample build_freq_words(const TaskInputs& in, int64_t amount, uint64_t seed) {
  const TaskConfig& c = in.config;
  KVEVICT_CHECK(c.alpha > 1.0, "fwe alpha ", c.alpha, " is out of range; expected > 1");
  // RULER: vocab_size = max_seq_length // 50; at least 5 so the answer and a runner-up exist.
  const int64_t vocab_size = std::max<int64_t>(5, in.target_length / 50);
  Rng rng(seed);
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (static_cast<int64_t>(vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < c.coded_word_len; ++i)
      w.push_back(static_cast<char>('a' + rng.uniform(26)));
    if (seen.insert(w).second) vocab.push_back(w);
  }
  std::sort(vocab.begin(), vocab.end());
  rng.shuffle(vocab);
  vocab[0] = "...";  // the top rank is noise the question tells the model to ignore

  const double z = zeta(c.alpha);
  std::vector<std::string> words;
  for (int64_t k = 1; k <= vocab_size; ++k) {
    const auto count = static_cast<int64_t>(static_cast<double>(amount) *
                                            std::pow(static_cast<double>(k), -c.alpha) / z);
    for (int64_t r = 0; r < count; ++r) words.push_back(vocab[static_cast<size_t>(k - 1)]);
  }
  rng.shuffle(words);
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) text += (i ? " " : "") + words[i];

  auto [context, question] = detail::split_at_context(templates::kFreqWords, text, {});
  Sample s;
  s.task = c.name;
  s.context = context;
  s.question = question;
  s.answer_prefix = templates::kFreqWordsPrefix;
  s.answers = {vocab[1], vocab[2], vocab[3]};
  s.max_new_tokens = c.max_new_tokens;
  s.seed = seed;
  s.haystack_amount = amount;
  return s;
}

}  // namespace kvevict::eval
