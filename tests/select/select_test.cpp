#include "kvevict/select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "kvevict/error.h"
#include "support/testing.h"

namespace kvevict {
namespace {

// A fraction that floors to 0 of n tokens is an error (SPEC section 1: a budget of 0 is one).
bool keeps_none(double b, int64_t n) {
  return b <= 1 && std::floor(b * static_cast<double>(n) + 1e-9) < 1;
}

struct Dense {
  int hkv;
  int64_t n;
  std::vector<float> scores, aux;
  std::vector<int64_t> starts, lens;
  SelectProblem problem(bool with_aux = false) {
    TensorView s(scores.data(), DType::kF32, {hkv, n});
    TensorView a;
    if (with_aux) a = TensorView(aux.data(), DType::kF32, {hkv, n});
    return SelectProblem::dense(s, a, starts, lens);
  }
};

// Random scores; `levels` > 0 quantizes them to that many values to force ties.
Dense make_dense(int hkv, int64_t n, uint64_t seed, int levels = 0) {
  Dense d{hkv, n, testing::random_floats(hkv * n, seed), testing::random_floats(hkv * n, seed + 7),
          {},  {}};
  if (levels > 0) {
    for (float& x : d.scores) x = std::floor((x + 1.0f) * levels / 2.0f);
    for (float& x : d.aux) x = std::floor((x + 1.0f) * levels / 2.0f);
  }
  return d;
}

std::vector<int32_t> head_rows(const Selection& s, int h) {
  return {s.head(h), s.head(h) + s.count(h)};
}

void expect_sorted_unique(const Selection& s, int64_t n) {
  for (int h = 0; h < s.num_kv_heads; ++h) {
    auto rows = head_rows(s, h);
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_GE(rows[i], 0);
      ASSERT_LT(rows[i], n);
      if (i) ASSERT_LT(rows[i - 1], rows[i]) << "head " << h << " not strictly ascending at " << i;
    }
  }
}

TEST(SelectHead, KeepsTopScoresAndBreaksTiesTowardLowerPosition) {
  const std::vector<float> s = {5, 1, 3, 2, 4, 5, 3};
  std::vector<int32_t> out;
  EXPECT_FALSE(select_head(s.data(), nullptr, 7, 3, 0, 0, out));
  // 5 at rows 0 and 5, then 4 at row 4.
  EXPECT_EQ(out, (std::vector<int32_t>{0, 4, 5}));
  out.clear();
  select_head(s.data(), nullptr, 7, 4, 0, 0, out);  // the 4th is a tie of 3s: rows 2 and 6 -> 2
  EXPECT_EQ(out, (std::vector<int32_t>{0, 2, 4, 5}));
  out.clear();
  select_head(s.data(), nullptr, 7, 4, 1, 2, out);  // sink {0}, window {5, 6}, + best of 1..4 = 4
  EXPECT_EQ(out, (std::vector<int32_t>{0, 4, 5, 6}));
}

TEST(SelectHead, CriticalKVTwoStages) {
  const std::vector<float> main = {0, 9, 8, 7, 1, 2};
  const std::vector<float> aux = {9, 0, 0, 0, 8, 7};
  std::vector<int32_t> out;
  // B = 4: stage 1 takes floor(4/2) = 2 by aux (rows 0, 4), stage 2 two by main (rows 1, 2).
  select_head(main.data(), aux.data(), 6, 4, 0, 0, out);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2, 4}));
  out.clear();
  // B = 3: stage 1 takes 1 (row 0), stage 2 takes 2 (rows 1, 2).
  select_head(main.data(), aux.data(), 6, 3, 0, 0, out);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 2}));
}

TEST(Select, UniformExactCountsProtectedKeptSorted) {
  for (int64_t n : {1, 3, 17, 1000}) {
    for (double b : {0.1, 0.5, 0.99, 1.0, 2.0}) {
      if (b > 1 && b > n) continue;
      if (keeps_none(b, n)) continue;  // an error (Budget.AFractionThatKeepsNoTokenIsAnError)
      Dense d = make_dense(3, n, 11 + n);
      SelectOptions opt;
      opt.budget.value = b;
      opt.sink = 2;
      opt.window = 3;
      const Selection s = select(d.problem(), opt);
      const int64_t keep = opt.budget.keep_count(n);
      const int64_t prot = std::min<int64_t>(n, 5);
      expect_sorted_unique(s, n);
      for (int h = 0; h < 3; ++h) {
        const auto rows = head_rows(s, h);
        const std::set<int32_t> set(rows.begin(), rows.end());
        EXPECT_EQ(s.count(h), std::max(keep, prot)) << "n=" << n << " b=" << b;
        for (int64_t i = 0; i < n; ++i)
          if (i < 2 || i >= n - 3) EXPECT_TRUE(set.count(static_cast<int32_t>(i))) << "row " << i;
      }
      EXPECT_EQ(s.warning.empty(), keep >= prot) << "n=" << n << " b=" << b;
    }
  }
}

TEST(Select, BudgetOneKeepsAll) {
  Dense d = make_dense(2, 17, 3);
  SelectOptions opt;
  opt.budget.value = 1.0;
  for (Policy p : {Policy::kUniform, Policy::kAdaKV}) {
    opt.policy = p;
    const Selection s = select(d.problem(), opt);
    for (int h = 0; h < 2; ++h) {
      ASSERT_EQ(s.count(h), 17);
      for (int i = 0; i < 17; ++i) EXPECT_EQ(s.head(h)[i], i);
    }
  }
}

TEST(Select, CountAboveTokensThrowsNamingBoth) {
  Dense d = make_dense(2, 17, 3);
  SelectOptions opt;
  opt.budget.value = 40;
  try {
    select(d.problem(), opt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("40"), std::string::npos) << m;
    EXPECT_NE(m.find("17"), std::string::npos) << m;
  }
}

TEST(Select, BudgetBelowProtectedKeepsJustThemWithWarning) {
  Dense d = make_dense(2, 30, 5);
  SelectOptions opt;
  opt.budget.value = 4;
  opt.sink = 3;
  opt.window = 5;
  for (Policy p : {Policy::kUniform, Policy::kAdaKV}) {
    opt.policy = p;
    const Selection s = select(d.problem(), opt);
    EXPECT_FALSE(s.warning.empty());
    EXPECT_NE(s.warning.find("8 protected"), std::string::npos) << s.warning;
    for (int h = 0; h < 2; ++h)
      EXPECT_EQ(head_rows(s, h), (std::vector<int32_t>{0, 1, 2, 25, 26, 27, 28, 29}));
  }
}

TEST(Select, AdaKVHandExample) {
  // Head 0 owns all top-4 scores: f = [4, 0], B = 2.
  std::vector<float> scores = {10, 9, 8, 7, 0, 1, 2, 3};
  std::vector<int64_t> starts, lens;
  TensorView t(scores.data(), DType::kF32, {2, 4});
  const SelectProblem pb = SelectProblem::dense(t, TensorView(), starts, lens);
  SelectOptions opt;
  opt.policy = Policy::kAdaKV;
  opt.budget.value = 2;
  opt.alpha = 0.5;  // B_h = [3, 1]
  Selection s = select(pb, opt);
  EXPECT_EQ(head_rows(s, 0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(head_rows(s, 1), (std::vector<int32_t>{3}));
  opt.alpha = 0.2;  // B_h = [3.6, 0.4] -> largest remainder gives head 0 the last unit: [4, 0]
  s = select(pb, opt);
  EXPECT_EQ(s.count(0), 4);
  EXPECT_EQ(s.count(1), 0);
}

TEST(Select, AdaKVLayerTotalExactAndWithinAvailable) {
  for (int64_t n : {3, 17, 1000}) {
    for (int hkv : {1, 3, 8}) {
      Dense d = make_dense(hkv, n, 100 + n + hkv);
      // Skew head 0 so the adaptive budgets differ from uniform ones.
      for (int64_t i = 0; i < n; ++i) d.scores[i] += 0.7f;
      SelectOptions opt;
      opt.policy = Policy::kAdaKV;
      opt.budget.value = 0.3;
      opt.sink = 1;
      opt.window = 1;
      if (keeps_none(opt.budget.value, n)) continue;
      const Selection s = select(d.problem(), opt);
      const int64_t prot = std::min<int64_t>(n, 2);
      const int64_t keep = std::max(opt.budget.keep_count(n), prot);
      EXPECT_EQ(s.total(), hkv * keep) << "n=" << n << " hkv=" << hkv;
      for (int h = 0; h < hkv; ++h) {
        EXPECT_GE(s.count(h), prot);
        EXPECT_LE(s.count(h), n);
      }
      expect_sorted_unique(s, n);
      if (hkv > 1 && n == 1000) EXPECT_GT(s.count(0), s.count(1)) << "skewed head got no more";
    }
  }
}

TEST(Select, MatchesBruteForceReference) {
  uint64_t seed = 1;
  for (int64_t n : {1, 3, 17, 1000}) {
    for (int hkv : {1, 3}) {
      for (int levels : {0, 4}) {  // 4 levels: heavy ties
        for (Policy p : {Policy::kUniform, Policy::kAdaKV}) {
          for (bool aux : {false, true}) {
            for (double b : {0.05, 0.3, 0.77, 3.0}) {
              if (b > n || keeps_none(b, n)) continue;
              Dense d = make_dense(hkv, n, ++seed, levels);
              SelectOptions opt;
              opt.policy = p;
              opt.budget.value = b;
              opt.sink = static_cast<int>(seed % 3);
              opt.window = static_cast<int>(seed % 4);
              const Selection got = select(d.problem(aux), opt);
              const Selection want = ref::select(d.problem(aux), opt);
              SCOPED_TRACE(::testing::Message()
                           << "n=" << n << " hkv=" << hkv << " levels=" << levels
                           << " policy=" << policy_name(p) << " aux=" << aux << " b=" << b);
              ASSERT_EQ(got.offsets, want.offsets);
              EXPECT_EQ(got.index, want.index);
              EXPECT_EQ(got.warning.empty(), want.warning.empty());
              // Ties mode: the multiset of kept scores must match, whatever rows carry them.
              for (int h = 0; h < hkv; ++h) {
                std::multiset<float> a, w;
                for (int64_t i = 0; i < got.count(h); ++i)
                  a.insert(d.scores[h * n + got.head(h)[i]]);
                for (int64_t i = 0; i < want.count(h); ++i)
                  w.insert(d.scores[h * n + want.head(h)[i]]);
                EXPECT_EQ(a, w);
              }
              expect_sorted_unique(got, n);
            }
          }
        }
      }
    }
  }
}

TEST(Select, DeterministicAndSegmentLayout) {
  // Per-head lengths (decode layout) with gaps between segments.
  std::vector<float> scores = testing::random_floats(100, 9);
  std::vector<int64_t> starts = {0, 40, 70}, lens = {33, 17, 30};
  SelectProblem pb;
  pb.num_kv_heads = 3;
  pb.scores = scores.data();
  pb.starts = starts.data();
  pb.lens = lens.data();
  SelectOptions opt;
  opt.budget.value = 0.5;
  const Selection a = select(pb, opt), b = select(pb, opt);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.count(0), 16);
  EXPECT_EQ(a.count(1), 8);
  EXPECT_EQ(a.count(2), 15);
  const Selection r = ref::select(pb, opt);
  EXPECT_EQ(a.index, r.index);
  opt.policy = Policy::kAdaKV;
  EXPECT_THROW(select(pb, opt), Error);  // unequal lengths
}

TEST(Select, RejectsNaN) {
  Dense d = make_dense(1, 5, 1);
  d.scores[3] = std::nanf("");
  SelectOptions opt;
  opt.budget.value = 0.5;
  EXPECT_THROW(select(d.problem(), opt), Error);
}

}  // namespace
}  // namespace kvevict
