// Comma-separated list options ("dropkv,snapkv", "0.05,0.1") and budget options. An empty list
// (`--tasks ''`) or an empty item ("a,,b", "a,") is an error naming the option, never a silent
// empty run (issue 13: `eval --tasks ''` wrote an empty result and exited 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/numeric_options.h"
#include "kvevict/method.h"

namespace kvevict::cli {

// Items with surrounding blanks trimmed; throws naming `what` for an empty list or item.
std::vector<std::string> split_list(const std::string& s, const char* what);
// Throws naming `what` and the item when an item appears twice (a task, length, mode or budget
// listed twice ran its samples twice and counted them twice in every cell).
void check_distinct(const std::vector<std::string>& items, const char* what);
// Positive integers, each once.
std::vector<int64_t> parse_ints(const std::string& s, const char* what);

// Budget::parse with the option's name in the error. With n > 0, a token count above the `n`
// tokens it is taken from is refused naming the option, the text and n ("--budget 1e19 keeps
// more tokens than the 8192-token context of SmolLM2"), also past 2^53 where Budget::parse's
// own limit would speak first. `of` says what n counts.
// Without n, the limit is kMaxTokens, the longest context any model may declare: the check a
// command can make before it knows the model.
Budget parse_budget(const std::string& s, const char* what, int64_t n = kMaxTokens,
                    const std::string& of = kMaxTokensText);
// Each budget once: "0.1,10%" names one budget twice.
std::vector<Budget> parse_budgets(const std::string& s, const char* what, int64_t n = kMaxTokens,
                                  const std::string& of = kMaxTokensText);

}  // namespace kvevict::cli
