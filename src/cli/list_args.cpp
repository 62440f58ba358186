#include "cli/list_args.h"

#include <cmath>
#include <cstdlib>

#include "core/number_parse.h"
#include "kvevict/error.h"

namespace kvevict::cli {

std::vector<std::string> split_list(const std::string& s, const char* what) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    std::string item = s.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    KVEVICT_CHECK(!item.empty() || (s.find_first_not_of(' ') == std::string::npos), what, " '", s,
                  "' has an empty item; expected comma-separated values");
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  KVEVICT_CHECK(!out.empty(), what, " is empty; expected at least one value");
  return out;
}

void check_distinct(const std::vector<std::string>& items, const char* what) {
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      KVEVICT_CHECK(items[i] != items[j], what, " lists '", items[i],
                    "' twice; expected each item once");
}

Budget parse_budget(const std::string& s, const char* what, int64_t n, const std::string& of) {
  const bool number = is_decimal_number(s);
  const double v = number ? std::strtod(s.c_str(), nullptr) : 0.0;
  KVEVICT_CHECK(n <= 0 || !number || !(v > 1.0 && v > static_cast<double>(n) && std::floor(v) == v),
                what, " ", s, " keeps more tokens than ", of, "; expected a token count <= ", n,
                " or a fraction in (0, 1]");
  try {
    return Budget::parse(s);
  } catch (const Error& e) {
    KVEVICT_FAIL(what, ": ", e.what());
  }
}

std::vector<Budget> parse_budgets(const std::string& s, const char* what, int64_t n,
                                  const std::string& of) {
  std::vector<Budget> out;
  const std::vector<std::string> items = split_list(s, what);
  for (const auto& item : items) {
    out.push_back(parse_budget(item, what, n, of));
    for (size_t j = 0; j + 1 < out.size(); ++j)
      KVEVICT_CHECK(out[j].value != out.back().value, what, " lists the budget ", out.back().str(),
                    " twice ('", items[j], "' and '", item, "'); expected each budget once");
  }
  return out;
}

std::vector<int64_t> parse_ints(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(s, what)) {
    const int64_t v = parse_decimal_int(item, what);
    KVEVICT_CHECK(v > 0, what, " value '", item, "' is not a positive integer");
    for (int64_t seen : out)
      KVEVICT_CHECK(seen != v, what, " lists ", v, " twice; expected each value once");
    out.push_back(v);
  }
  return out;
}

}  // namespace kvevict::cli
