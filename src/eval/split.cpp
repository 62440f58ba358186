#include "eval/split.h"

#include "kvevict/error.h"

namespace kvevict::eval {

static_assert(kSplitSpan <= kDevFirstIndex, "the TEST index range must end before DEV's begins");

const char* split_name(SeedSplit s) {
  return s == SeedSplit::kDev ? "dev" : "test";
}

SeedSplit split_parse(const std::string& s) {
  if (s == "test") return SeedSplit::kTest;
  if (s == "dev") return SeedSplit::kDev;
  KVEVICT_FAIL("split '", s, "' is unknown; expected test (reported numbers) or dev (tuning)");
}

int64_t split_first_index(SeedSplit s) {
  return s == SeedSplit::kDev ? kDevFirstIndex : 0;
}

int64_t index_in_split(int64_t seed_index) {
  return seed_index >= kDevFirstIndex ? seed_index - kDevFirstIndex : seed_index;
}

void check_split_range(int64_t first, int64_t n) {
  check_split_size(n);
  KVEVICT_CHECK(first >= 0 && first <= kSplitSpan - n, "samples ", first, " .. ", first + n - 1,
                " do not fit a split; expected first sample 0 .. ", kSplitSpan - n, " for ", n,
                " samples");
}

void check_split_size(int64_t n) {
  KVEVICT_CHECK(n >= 1 && n <= kSplitSpan, n,
                " samples per task do not fit a split; expected 1 .. ", kSplitSpan);
}

}  // namespace kvevict::eval
