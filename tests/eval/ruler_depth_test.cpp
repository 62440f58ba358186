// Needles land at the requested depth of the haystack.
#include <gtest/gtest.h>

#include "eval/eval_fixtures.h"
#include "eval/ruler.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

// Fraction of the haystack bytes before the needle, ignoring the other needles.
double relative_position(const Sample& s, size_t which, size_t haystack_begin,
                         size_t haystack_end) {
  size_t before = s.needles[which].offset - haystack_begin;
  size_t total = haystack_end - haystack_begin;
  for (size_t i = 0; i < s.needles.size(); ++i) {
    total -= s.needles[i].text.size();
    if (i < which) before -= s.needles[i].text.size();
  }
  return static_cast<double>(before) / static_cast<double>(total);
}

class RulerDepth : public ::testing::Test {
 protected:
  testing::WhitespaceTokenizer tok_;
  RulerGenerator gen_{testing::test_corpus(), tok_};
};

TEST_F(RulerDepth, SingleNeedleAtRequestedDepthInEveryHaystackType) {
  for (const std::string task : {"niah_single_1", "niah_single_2", "niah_multikey_2"}) {
    for (double depth : {0.0, 10.0, 37.0, 50.0, 83.0, 100.0}) {
      SCOPED_TRACE(task + " depth " + std::to_string(depth));
      GenerateOptions opt;
      opt.target_length = 4001;
      opt.depths = {depth};
      Sample s = gen_.generate(task, opt, 5);
      ASSERT_EQ(s.needles.size(), 1u);
      EXPECT_DOUBLE_EQ(s.needles[0].depth, depth);
      const size_t begin = s.context.find(" afterwards.\n") + 13;
      const size_t end = s.context.size() - 1;
      const double pos = relative_position(s, 0, begin, end);
      // Placement is at a sentence boundary: allow a sentence (~1% of these haystacks) of slack.
      EXPECT_NEAR(pos, depth / 100.0, 0.015);
    }
  }
}

TEST_F(RulerDepth, MultipleNeedlesKeepTheirDepthsInOrder) {
  GenerateOptions opt;
  opt.target_length = 6007;
  opt.depths = {80.0, 20.0, 60.0, 40.0};
  Sample s = gen_.generate("niah_multikey_1", opt, 9);
  ASSERT_EQ(s.needles.size(), 4u);
  const size_t begin = s.context.find(" afterwards.\n") + 13;
  const size_t end = s.context.size() - 1;
  const double expected[] = {20.0, 40.0, 60.0, 80.0};  // needles come out sorted by position
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(s.needles[i].depth, expected[i]);
    EXPECT_NEAR(relative_position(s, i, begin, end), expected[i] / 100.0, 0.015) << i;
  }
}

TEST_F(RulerDepth, DefaultDepthsComeFromRulersGrid) {
  GenerateOptions opt;
  opt.target_length = 3001;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Sample s = gen_.generate("niah_single_2", opt, seed);
    const auto& grid = ruler_depths();
    EXPECT_NE(std::find(grid.begin(), grid.end(), static_cast<int>(s.needles[0].depth)), grid.end())
        << s.needles[0].depth;
  }
}

TEST_F(RulerDepth, WrongDepthCountOrRangeIsAnError) {
  GenerateOptions opt;
  opt.target_length = 3001;
  opt.depths = {10.0, 20.0};
  try {
    gen_.generate("niah_single_2", opt, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 needles but 2 depths"), std::string::npos) << e.what();
  }
  opt.depths = {101.0};
  EXPECT_THROW(gen_.generate("niah_single_2", opt, 1), Error);
}

}  // namespace
}  // namespace kvevict::eval
