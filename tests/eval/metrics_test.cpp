// RULER's string_match_all / string_match_part on hand-checked predictions.
#include "eval/metrics.h"

#include <gtest/gtest.h>

#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

TEST(StringMatchAll, MeanOfCaseInsensitiveSubstringHits) {
  // 2 of 3 answers present (one differs in case) -> 66.67.
  const std::vector<std::string> answers = {"1234567", "Golden-Apple", "9999999"};
  EXPECT_NEAR(string_match_all("The numbers are 1234567 and golden-apple.", answers), 200.0 / 3.0,
              1e-9);
  EXPECT_DOUBLE_EQ(string_match_all("1234567 GOLDEN-APPLE 9999999", answers), 100.0);
  EXPECT_DOUBLE_EQ(string_match_all("nothing here", answers), 0.0);
  // Substring, not token match: RULER counts "12345678" as containing "1234567".
  EXPECT_DOUBLE_EQ(string_match_all("12345678", {"1234567"}), 100.0);
}

TEST(StringMatchPart, AnyHitScoresFull) {
  const std::vector<std::string> answers = {"Paris", "the capital of France"};
  EXPECT_DOUBLE_EQ(string_match_part("It is paris.", answers), 100.0);
  EXPECT_DOUBLE_EQ(string_match_part("London", answers), 0.0);
  EXPECT_DOUBLE_EQ(string_match_part("THE CAPITAL OF FRANCE, Paris", answers), 100.0);
}

TEST(Metrics, CorpusScoreIsMeanOverSamples) {
  const std::vector<std::string> preds = {"a b", "a", "zzz"};
  const std::vector<std::vector<std::string>> refs = {{"a", "b"}, {"a", "b"}, {"a"}};
  // all: (100 + 50 + 0) / 3 ; part: (100 + 100 + 0) / 3
  EXPECT_NEAR(corpus_score(Metric::kStringMatchAll, preds, refs), 50.0, 1e-9);
  EXPECT_NEAR(corpus_score(Metric::kStringMatchPart, preds, refs), 200.0 / 3.0, 1e-9);
}

TEST(Metrics, TaskChoiceFollowsRuler) {
  EXPECT_EQ(metric_for_task("niah_multikey_3"), Metric::kStringMatchAll);
  EXPECT_EQ(metric_for_task("cwe"), Metric::kStringMatchAll);
  EXPECT_EQ(metric_for_task("qa_1"), Metric::kStringMatchPart);
  EXPECT_EQ(metric_parse(metric_name(Metric::kStringMatchPart)), Metric::kStringMatchPart);
  EXPECT_THROW(metric_parse("exact"), Error);
}

TEST(Metrics, PostprocessTrimsAndReplacesControlCharacters) {
  EXPECT_EQ(postprocess_prediction("  \t 1234\x01"
                                   "567 \n"),
            "1234\n567");
  EXPECT_EQ(postprocess_prediction(""), "");
}

TEST(Metrics, EmptyAnswerListIsAnError) {
  try {
    string_match_all("x", {});
    FAIL() << "expected an error for an empty answer list";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected at least one"), std::string::npos) << e.what();
  }
  EXPECT_THROW(string_match_part("x", {}), Error);
  EXPECT_THROW(corpus_score(Metric::kStringMatchAll, {"a"}, {}), Error);
}

}  // namespace
}  // namespace kvevict::eval
