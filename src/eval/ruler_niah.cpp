// Needle in a haystack (RULER scripts/data/synthetic/niah.py): needles "One of the special magic
// {type} for {key} is: {value}." hidden in a repeated noise sentence, prose, or other needles.
#include <algorithm>
#include <cstdio>
#include <set>

#include "eval/ruler.h"
#include "kvevict/error.h"
#include "ruler_builders.h"

namespace kvevict::eval {

std::string random_needle_value(NeedleType type, Rng& rng,
                                const std::vector<std::string>& adjectives,
                                const std::vector<std::string>& nouns) {
  switch (type) {
    case NeedleType::kNumbers:
      return std::to_string(rng.uniform_int(1000000, 9999999));  // 7 digits
    case NeedleType::kWords:
      KVEVICT_CHECK(!adjectives.empty() && !nouns.empty(),
                    "word needles need the WordNet adjective and noun lists; expected them in the "
                    "corpus (scripts/prepare_corpus.sh)");
      return adjectives[rng.uniform(adjectives.size())] + "-" + nouns[rng.uniform(nouns.size())];
    case NeedleType::kUuids: {
      unsigned char b[16];
      uint64_t hi = rng.next_u64(), lo = rng.next_u64();
      for (int i = 0; i < 8; ++i) {
        b[i] = static_cast<unsigned char>(hi >> (56 - 8 * i));
        b[8 + i] = static_cast<unsigned char>(lo >> (56 - 8 * i));
      }
      b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
      b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
      char s[37];
      std::snprintf(s, sizeof(s),
                    "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                    b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                    b[13], b[14], b[15]);
      return s;
    }
  }
  return {};
}

Sample build_niah(const TaskInputs& in, int64_t amount, uint64_t seed) {
  const TaskConfig& c = in.config;
  KVEVICT_CHECK(amount >= 1, "haystack amount ", amount, " for task '", c.name,
                "' is too small; expected >= 1");
  Rng rng(seed);
  const std::string type_plural = needle_type_name(c.value_type);
  auto draw = [&](NeedleType t, std::set<std::string>& used) {
    for (;;) {  // distinct keys and values keep every answer unambiguous
      std::string v = random_needle_value(t, rng, in.adjectives, in.nouns);
      if (used.insert(v).second) return v;
    }
  };
  std::set<std::string> used;
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;
  std::vector<std::string> needles;
  for (int k = 0; k < c.num_keys; ++k) {
    keys.push_back(draw(c.key_type, used));
    values.emplace_back();
    for (int v = 0; v < c.num_values; ++v) {
      values.back().push_back(draw(c.value_type, used));
      needles.push_back(fill_template(
          templates::kNeedle,
          {{"type_needle_v", type_plural}, {"key", keys.back()}, {"value", values.back().back()}}));
    }
  }
  rng.shuffle(needles);
  const int64_t n_needles = static_cast<int64_t>(needles.size());

  // Queries and answers are drawn before the haystack so they do not depend on its size.
  std::vector<int64_t> picked = rng.sample_indices(c.num_keys, c.num_queries);
  std::vector<std::string> queries, answers;
  for (int64_t i : picked) {
    queries.push_back(keys[static_cast<size_t>(i)]);
    for (const auto& v : values[static_cast<size_t>(i)]) answers.push_back(v);
  }

  std::vector<double> depths = in.depths;
  KVEVICT_CHECK(depths.empty() || static_cast<int64_t>(depths.size()) == n_needles, "task '",
                c.name, "' places ", n_needles, " needles but ", depths.size(),
                " depths were given; expected one depth per needle or none");
  for (double d : depths)
    KVEVICT_CHECK(d >= 0.0 && d <= 100.0, "needle depth ", d, " is out of range; expected 0..100");

  std::vector<std::string> units;  // haystack pieces the needles go between
  std::string sep;
  if (c.haystack == Haystack::kEssay) {
    units = split_sentences(detail::essay_prefix(in.essay_words, amount));
    sep = " ";
    if (depths.empty()) {
      const auto& grid = ruler_depths();
      for (int64_t i : rng.sample_indices(static_cast<int64_t>(grid.size()), n_needles))
        depths.push_back(grid[static_cast<size_t>(i)]);
    }
  } else {
    sep = "\n";
    if (c.haystack == Haystack::kRepeat) {
      units.assign(static_cast<size_t>(amount), templates::kNoiseSentence);
    } else {
      KVEVICT_CHECK(c.haystack == Haystack::kNeedle, "task '", c.name,
                    "' has no haystack; expected repeat, essay or needle");
      // Distractors come from their own stream so the needles above stay fixed as amount grows.
      Rng distractor_rng(mix_seed(seed ^ 0x6e6565646c65ull));
      std::set<std::string> distractor_used = used;
      for (int64_t i = 0; i < amount; ++i) {
        std::string k, v;
        do {
          k = random_needle_value(c.key_type, distractor_rng, in.adjectives, in.nouns);
        } while (!distractor_used.insert(k).second);
        v = random_needle_value(c.value_type, distractor_rng, in.adjectives, in.nouns);
        units.push_back(fill_template(templates::kNeedle,
                                      {{"type_needle_v", type_plural}, {"key", k}, {"value", v}}));
      }
    }
    if (depths.empty()) {
      KVEVICT_CHECK(amount >= n_needles, "task '", c.name, "' needs a haystack of at least ",
                    n_needles, " sentences for its needles; got ", amount);
      for (int64_t i : rng.sample_indices(amount, n_needles))
        depths.push_back(100.0 * static_cast<double>(i) / static_cast<double>(amount));
    }
  }

  // RULER: position = int(len(units) * depth / 100), needles in order of position.
  const int64_t n_units = static_cast<int64_t>(units.size());
  std::vector<std::pair<int64_t, std::string>> items;
  std::vector<std::pair<int64_t, double>> where;  // (position, depth) per needle index
  for (int64_t i = 0; i < n_needles; ++i) {
    int64_t pos = static_cast<int64_t>(static_cast<double>(n_units) * depths[i] / 100.0 + 1e-9);
    pos = std::min(std::max<int64_t>(pos, 0), n_units);
    items.emplace_back(pos, needles[static_cast<size_t>(i)]);
    where.emplace_back(pos, depths[static_cast<size_t>(i)]);
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].first < items[b].first; });
  std::vector<std::pair<int64_t, std::string>> sorted_items;
  for (size_t i : order) sorted_items.push_back(items[i]);
  auto [haystack, offsets] = detail::insert_between(units, sorted_items, sep);

  const bool single = c.num_queries * c.num_values == 1;
  std::string type_v = type_plural;
  if (single) type_v.pop_back();  // "numbers" -> "number"
  const std::string query = detail::join_queries(queries);
  std::vector<std::pair<std::string, std::string>> vals = {{"type_needle_v", type_v},
                                                           {"query", query}};
  Sample s;
  s.task = c.name;
  auto [context, question] = detail::split_at_context(
      single ? templates::kNiahSingular : templates::kNiahPlural, haystack, vals);
  const size_t haystack_start = context.size() - haystack.size() - 1;  // 1 newline follows it
  s.context = std::move(context);
  s.question = std::move(question);
  s.answer_prefix =
      fill_template(single ? templates::kNiahPrefixSingular : templates::kNiahPrefixPlural, vals);
  s.answers = answers;
  s.max_new_tokens = c.max_new_tokens;
  s.seed = seed;
  s.haystack_amount = amount;
  for (size_t i = 0; i < order.size(); ++i) {
    NeedlePlacement p;
    p.text = sorted_items[i].second;
    p.offset = haystack_start + offsets[i];
    p.depth = where[order[i]].second;
    s.needles.push_back(p);
  }
  return s;
}

}  // namespace kvevict::eval
