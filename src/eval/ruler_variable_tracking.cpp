// Variable tracking (RULER scripts/data/synthetic/variable_tracking.py): a chain
// "VAR A = 12345", "VAR B = VAR A ", ... hidden in repeated noise; the answer is every variable
// that ends up holding the value. One in-context example precedes the task, as in RULER.
#include <algorithm>
#include <set>

#include "eval/ruler.h"
#include "kvevict/error.h"
#include "ruler_builders.h"

namespace kvevict::eval {

namespace {

// RULER's ICL example is sized to about 500 tokens; 20 noise lines is that size for common
// tokenizers and keeps the example independent of the tokenizer.
constexpr int64_t kIclNoiseLines = 20;

struct Chains {
  std::vector<std::vector<std::string>> vars;   // [chains][hops + 1]
  std::vector<std::vector<std::string>> lines;  // [chains][hops + 1] assignment statements
};

Chains make_chains(Rng& rng, int num_chains, int num_hops, bool icl) {
  const int letters = icl ? 3 : 5;
  std::set<std::string> used;
  Chains c;
  for (int ch = 0; ch < num_chains; ++ch) {
    std::vector<std::string> vars;
    while (static_cast<int>(vars.size()) < num_hops + 1) {
      std::string v;
      for (int i = 0; i < letters; ++i) v.push_back(static_cast<char>('A' + rng.uniform(26)));
      if (used.insert(v).second) vars.push_back(v);
    }
    // RULER: np.random.randint(10000, 99999) (high exclusive); its ICL example uses 12345.
    const std::string value = icl ? "12345" : std::to_string(rng.uniform_int(10000, 99998));
    std::vector<std::string> lines = {"VAR " + vars[0] + " = " + value};
    for (int j = 0; j < num_hops; ++j)
      lines.push_back("VAR " + vars[j + 1] + " = VAR " + vars[j] + " ");
    c.vars.push_back(vars);
    c.lines.push_back(lines);
  }
  return c;
}

// Returns the haystack text and fills needles (offsets relative to the haystack).
std::string hide_chains(Rng& rng, const Chains& chains, int64_t amount,
                        std::vector<NeedlePlacement>* needles) {
  std::vector<std::string> sentences(static_cast<size_t>(amount),
                                     std::string(templates::kNoiseSentence) + "\n");
  std::vector<int> is_chain(sentences.size(), -1);
  for (const auto& chain : chains.lines) {
    const int64_t n = static_cast<int64_t>(sentences.size());
    KVEVICT_CHECK(n >= static_cast<int64_t>(chain.size()), "variable tracking needs at least ",
                  chain.size(), " noise lines; got ", n);
    std::vector<int64_t> pos = rng.sample_indices(n, static_cast<int64_t>(chain.size()));
    std::sort(pos.begin(), pos.end());
    for (size_t j = 0; j < chain.size(); ++j) {
      const size_t at = static_cast<size_t>(pos[j]) + j;
      sentences.insert(sentences.begin() + static_cast<std::ptrdiff_t>(at), chain[j]);
      is_chain.insert(is_chain.begin() + static_cast<std::ptrdiff_t>(at), 1);
    }
  }
  // RULER: " ".join(sentences).replace(". \n", ".\n"). Every noise line ends in ".\n" and the
  // join adds the space after the newline, and chain lines end in a digit or a space, so ". \n"
  // never occurs in this layout and the plain join is the same text.
  std::string out;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (i) out.push_back(' ');
    if (is_chain[i] == 1 && needles != nullptr) {
      NeedlePlacement p;
      p.text = sentences[i];
      p.offset = out.size();
      p.depth = 100.0 * static_cast<double>(i) / static_cast<double>(sentences.size());
      needles->push_back(p);
    }
    out += sentences[i];
  }
  KVEVICT_CHECK(out.find(". \n") == std::string::npos,
                "variable tracking haystack contains '. \\n'; expected RULER's layout without it");
  return out;
}

}  // namespace

Sample build_variable_tracking(const TaskInputs& in, int64_t amount, uint64_t seed) {
  const TaskConfig& c = in.config;
  KVEVICT_CHECK(amount >= c.num_hops + 1, "variable tracking with ", c.num_hops,
                " hops needs at least ", c.num_hops + 1, " noise lines; got ", amount);
  Rng rng(seed);
  Chains icl = make_chains(rng, c.num_chains, std::min(10, c.num_hops), true);
  Chains main = make_chains(rng, c.num_chains, c.num_hops, false);
  Rng icl_rng(mix_seed(seed ^ 0x69636cull));
  const std::string icl_haystack = hide_chains(icl_rng, icl, kIclNoiseLines, nullptr);

  auto values_for = [&](const Chains& ch) {
    const std::string& first = ch.lines[0][0];
    const std::string value = first.substr(first.rfind('=') + 2);
    return std::vector<std::pair<std::string, std::string>>{
        {"query", value}, {"num_v", std::to_string(c.num_hops + 1)}};
  };
  auto icl_vals = values_for(icl);
  std::string icl_example = fill_template(templates::kVariableTracking,
                                          [&] {
                                            auto v = icl_vals;
                                            v.emplace_back("context", icl_haystack);
                                            return v;
                                          }()) +
                            fill_template(templates::kVariableTrackingPrefix, icl_vals);
  for (size_t i = 0; i < icl.vars[0].size(); ++i) icl_example += (i ? " " : "") + icl.vars[0][i];
  icl_example += "\n\n";

  std::vector<NeedlePlacement> needles;
  Rng hide_rng(mix_seed(seed ^ 0x766172ull));
  const std::string haystack = hide_chains(hide_rng, main, amount, &needles);
  auto vals = values_for(main);
  auto [context, question] = detail::split_at_context(templates::kVariableTracking, haystack, vals);

  Sample s;
  s.task = c.name;
  const size_t haystack_start = icl_example.size() + context.size() - haystack.size() - 1;
  s.context = icl_example + context;
  s.question = question;
  s.answer_prefix = fill_template(templates::kVariableTrackingPrefix, vals);
  s.answers = main.vars[0];
  s.max_new_tokens = c.max_new_tokens;
  s.seed = seed;
  s.haystack_amount = amount;
  for (auto& p : needles) {
    p.offset += haystack_start;
    s.needles.push_back(p);
  }
  return s;
}

}  // namespace kvevict::eval
