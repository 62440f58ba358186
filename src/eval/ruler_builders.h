// Helpers shared by the RULER task builders (private to src/eval).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "eval/ruler.h"

namespace kvevict::eval::detail {

// Splits template(context = haystack) into the context part (everything up to the end of the
// haystack, plus the newline that follows it) and the question part, so that
// context + question == fill_template(tmpl, {context: haystack, ...values}).
std::pair<std::string, std::string> split_at_context(
    const std::string& tmpl, const std::string& haystack,
    const std::vector<std::pair<std::string, std::string>>& values);

// "a", "a and b" is never produced: RULER lists queries as "a, b, c, and d" (one: "a").
std::string join_queries(const std::vector<std::string>& queries);

// The essay words [0, amount), wrapping around to the start when the corpus is shorter, joined by
// single spaces.
std::string essay_prefix(const std::vector<std::string>& words, int64_t amount);

// Inserts `items` (sorted by position, positions in [0, units.size()]) before the unit at their
// position, joining everything with `sep`. Returns the text and each item's byte offset.
std::pair<std::string, std::vector<size_t>> insert_between(
    const std::vector<std::string>& units,
    const std::vector<std::pair<int64_t, std::string>>& items, const std::string& sep);

}  // namespace kvevict::eval::detail
