// Sizing: every task lands within 1% of the target length and never above it, measured by
// re-tokenizing the prompt independently of the generator.
#include <gtest/gtest.h>

#include "eval/eval_fixtures.h"
#include "eval/ruler.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

class RulerSizing : public ::testing::TestWithParam<std::string> {
 protected:
  testing::WhitespaceTokenizer tok_;
  RulerGenerator gen_{testing::test_corpus(), tok_};
};

TEST_P(RulerSizing, HitsTargetWithinOnePercentNeverAbove) {
  const std::string task = GetParam();
  for (int64_t target : {2503, 4099, 7919}) {
    for (bool with_generation : {true, false}) {
      SCOPED_TRACE(task + " target " + std::to_string(target) +
                   (with_generation ? " (prompt + generation)" : " (prompt only)"));
      GenerateOptions opt;
      opt.target_length = target;
      opt.length_includes_generation = with_generation;
      Sample s = gen_.generate(task, opt, 11);
      const int64_t prompt = static_cast<int64_t>(tok_.encode(s.input, true).size());
      const int64_t measured = prompt + (with_generation ? s.max_new_tokens : 0);
      EXPECT_EQ(measured, s.length);
      EXPECT_EQ(s.target_length, target);
      EXPECT_LE(measured, target);
      EXPECT_GE(static_cast<double>(measured), 0.99 * static_cast<double>(target))
          << "haystack amount " << s.haystack_amount;
      // Maximality: one more haystack unit no longer fits.
      Sample bigger = gen_.generate_with_amount(task, s.haystack_amount + 1, opt, 11);
      EXPECT_GT(bigger.length, target);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTasks, RulerSizing, ::testing::ValuesIn(ruler_task_names()));

TEST(RulerSizingErrors, TargetTooSmallNamesTaskAndLength) {
  testing::WhitespaceTokenizer tok;
  RulerGenerator gen(testing::test_corpus(), tok);
  GenerateOptions opt;
  opt.target_length = 150;
  try {
    gen.generate("vt", opt, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("target length 150"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'vt'"), std::string::npos) << msg;
  }
  opt.target_length = 0;
  EXPECT_THROW(gen.generate("niah_single_1", opt, 1), Error);
  opt.target_length = 4000;
  EXPECT_THROW(gen.generate("niah_single_9", opt, 1), Error);
}

}  // namespace
}  // namespace kvevict::eval
