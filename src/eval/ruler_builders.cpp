#include "ruler_builders.h"

#include "kvevict/error.h"

namespace kvevict::eval::detail {

std::pair<std::string, std::string> split_at_context(
    const std::string& tmpl, const std::string& haystack,
    const std::vector<std::pair<std::string, std::string>>& values) {
  const std::string marker = "{context}";
  const size_t at = tmpl.find(marker);
  KVEVICT_CHECK(at != std::string::npos, "task template has no {context}; expected exactly one");
  std::string head = tmpl.substr(0, at);
  std::string tail = tmpl.substr(at + marker.size());
  size_t newlines = 0;
  while (newlines < tail.size() && tail[newlines] == '\n') ++newlines;
  std::string context = fill_template(head, values) + haystack + tail.substr(0, newlines);
  std::string question = fill_template(tail.substr(newlines), values);
  return {context, question};
}

std::string join_queries(const std::vector<std::string>& q) {
  KVEVICT_CHECK(!q.empty(), "no queries to join; expected at least one");
  if (q.size() == 1) return q[0];
  std::string out;
  for (size_t i = 0; i + 1 < q.size(); ++i) out += (i ? ", " : "") + q[i];
  return out + ", and " + q.back();
}

std::string essay_prefix(const std::vector<std::string>& words, int64_t amount) {
  KVEVICT_CHECK(!words.empty(), "the essay haystack is empty; expected the Austen corpus");
  std::string out;
  for (int64_t i = 0; i < amount; ++i) {
    if (i) out.push_back(' ');
    out += words[static_cast<size_t>(i) % words.size()];
  }
  return out;
}

std::pair<std::string, std::vector<size_t>> insert_between(
    const std::vector<std::string>& units,
    const std::vector<std::pair<int64_t, std::string>>& items, const std::string& sep) {
  std::string out;
  std::vector<size_t> offsets;
  size_t next = 0;
  bool first = true;
  auto append = [&](const std::string& s) {
    if (!first) out += sep;
    first = false;
    out += s;
  };
  for (size_t u = 0; u <= units.size(); ++u) {
    while (next < items.size() && items[next].first == static_cast<int64_t>(u)) {
      if (!first) out += sep;
      first = false;
      offsets.push_back(out.size());
      out += items[next].second;
      ++next;
    }
    if (u < units.size()) append(units[u]);
  }
  KVEVICT_CHECK(next == items.size(), "insert position ",
                (next < items.size() ? items[next].first : 0), " is outside [0, ", units.size(),
                "] or unsorted; expected sorted positions");
  return {out, offsets};
}

}  // namespace kvevict::eval::detail
