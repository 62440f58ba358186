// Comma-separated list options ("dropkv,snapkv", "0.05,0.1").
#pragma once

#include <string>
#include <vector>

#include "kvevict/method.h"

namespace kvevict::cli {

std::vector<std::string> split_list(const std::string& s);
std::vector<Budget> parse_budgets(const std::string& s);
std::vector<int64_t> parse_ints(const std::string& s, const char* what);

}  // namespace kvevict::cli
