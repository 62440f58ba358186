#include "cli/list_args.h"

#include <cstdlib>

#include "kvevict/error.h"

namespace kvevict::cli {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    std::string item = s.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<Budget> parse_budgets(const std::string& s) {
  std::vector<Budget> out;
  for (const auto& item : split_list(s)) out.push_back(Budget::parse(item));
  KVEVICT_CHECK(!out.empty(), "empty budget list '", s, "'; expected e.g. 0.05,0.1,0.2");
  return out;
}

std::vector<int64_t> parse_ints(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(s)) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    KVEVICT_CHECK(end == item.c_str() + item.size() && v > 0, what, " value '", item,
                  "' is not a positive integer");
    out.push_back(v);
  }
  KVEVICT_CHECK(!out.empty(), "empty ", what, " list");
  return out;
}

}  // namespace kvevict::cli
