// The double reference against formulas written out independently in this file, and against
// identities that tie the methods together (sums of probabilities, h2o = snapkv over all queries).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvevict/score.h"
#include "score/problem_builder.h"
#include "score/score_terms.h"
#include "score/tiny_problem.h"

namespace kvevict {
namespace {

using testing::make_shape;
using testing::ProblemBuilder;
using testing::Shape;
using testing::Tiny;

TEST(ReferenceScore, HandComputedDropKV) {
  Tiny tiny;
  ScoreOptions opt = ScoreOptions::defaults(Method::kDropKV);
  opt.window = 2;
  const ref::Scores got = ref::score(tiny.problem(), opt);
  const std::vector<double> want = tiny.expected(Method::kDropKV);
  ASSERT_EQ(got.scores.size(), 3u);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(got.scores[j], want[j], 1e-12 * (1 + want[j])) << j;
  // One number by hand: token 2 is seen only by query 1 (q = (0.5, -1)): z = (-1.5, -1, -1),
  // p2 = e^-1 / (e^-1.5 + 2 e^-1), a = p0 v0 + p1 v1 + p2 v2.
  const double e0 = std::exp(-1.5), e1 = std::exp(-1.0), s = e0 + 2 * e1;
  const double p0 = e0 / s, p1 = e1 / s, p2 = e1 / s;
  const double ax = p0 + p2, ay = 2 * p1 + p2;
  const double token2 =
      (p2 / (1 - p2)) * (p2 / (1 - p2)) * ((ax - 1) * (ax - 1) + (ay - 1) * (ay - 1));
  EXPECT_NEAR(got.scores[2], token2, 1e-12);
}

TEST(ReferenceScore, HandComputedObcacheVK) {
  Tiny tiny;
  ScoreOptions opt = ScoreOptions::defaults(Method::kObcacheVK);
  opt.window = 2;
  opt.pooling = Pooling{};
  const ref::Scores got = ref::score(tiny.problem(), opt);
  const std::vector<double> want = tiny.expected(Method::kObcacheVK);
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(got.scores[j], want[j], 1e-12 * (1 + std::abs(want[j]))) << j;
}

TEST(ReferenceScore, WindowForwardMatchesSoftmaxByHand) {
  Tiny tiny;
  std::vector<double> a, lse;
  ref::window_forward(tiny.problem(), 1.0f, a, lse);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(lse.size(), 2u);
  // Query 0 = (1, 0) sees k0, k1: z = (1, 0).
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  EXPECT_NEAR(lse[0], std::log(std::exp(1.0) + 1.0), 1e-14);
  EXPECT_NEAR(a[0], p0, 1e-14);
  EXPECT_NEAR(a[1], 2 * (1 - p0), 1e-14);
  EXPECT_NEAR(lse[1], std::log(std::exp(-1.5) + 2 * std::exp(-1.0)), 1e-14);
}

ref::Scores run(ScoreProblem& p, Method m, int window, Pooling pool = {}) {
  ScoreOptions opt = ScoreOptions::defaults(m);
  if (opt.aggregate == Aggregate::kWindow && opt.needs_queries()) opt.window = window;
  opt.pooling = pool;
  return ref::score(p, opt);
}

TEST(ReferenceScore, SnapKVSumsToTheWindow) {
  const Shape s = make_shape(2, 3, 9, 17, 24);
  ProblemBuilder b(s, 11);
  const ref::Scores got = run(b.problem(), Method::kSnapKV, 5);
  for (int g = 0; g < 2; ++g) {
    double sum = 0;
    for (int j = 0; j < 17; ++j) sum += got.scores[g * 17 + j];
    EXPECT_NEAR(sum, 5.0, 1e-12) << "each of the 5 queries spreads probability 1";
  }
}

TEST(ReferenceScore, TovaIsTheLayerMeanOfLastQuerySnapKV) {
  const Shape s = make_shape(3, 2, 4, 17, 8);
  ProblemBuilder b(s, 12);
  const ref::Scores tova = run(b.problem(), Method::kTOVA, 0);
  const ref::Scores snap = run(b.problem(), Method::kSnapKV, 1);
  for (int j = 0; j < 17; ++j) {
    const double mean = (snap.scores[j] + snap.scores[17 + j] + snap.scores[34 + j]) / 3;
    for (int g = 0; g < 3; ++g) EXPECT_NEAR(tova.scores[g * 17 + j], mean, 1e-14) << g << "," << j;
  }
}

TEST(ReferenceScore, H2OIsSnapKVOverAllQueriesAndNormalizes) {
  const Shape s = make_shape(2, 2, 19, 19, 8);
  ProblemBuilder b(s, 13);
  const ref::Scores h2o = run(b.problem(), Method::kH2O, 0);
  const ref::Scores snap = run(b.problem(), Method::kSnapKV, 19);
  ScoreOptions norm = ScoreOptions::defaults(Method::kH2O);
  norm.h2o_normalize = true;
  const ref::Scores h2o_norm = ref::score(b.problem(), norm);
  for (int i = 0; i < 2 * 19; ++i) {
    EXPECT_NEAR(h2o.scores[i], snap.scores[i], 1e-13) << i;
    const int j = i % 19;
    EXPECT_NEAR(h2o_norm.scores[i] * (19 - j), h2o.scores[i], 1e-13) << i;
  }
  // Token 0 is seen by all 19 queries; the last token only by the last one.
  EXPECT_LT(h2o_norm.scores[0], h2o.scores[0]);
  EXPECT_EQ(h2o_norm.scores[18], h2o.scores[18]);
}

TEST(ReferenceScore, PoolingMaxAndAvgOverNeighbours) {
  const Shape s = make_shape(1, 2, 6, 17, 8);
  ProblemBuilder b(s, 14);
  const ref::Scores raw = run(b.problem(), Method::kSnapKV, 6);
  const ref::Scores mx = run(b.problem(), Method::kSnapKV, 6, Pooling{PoolKind::kMax, 5});
  const ref::Scores avg = run(b.problem(), Method::kSnapKV, 6, Pooling{PoolKind::kAvg, 5});
  for (int j = 0; j < 17; ++j) {
    double best = -INFINITY, sum = 0;
    for (int i = j - 2; i <= j + 2; ++i) {
      if (i < 0 || i >= 17) continue;  // max pads -inf, avg pads zeros
      best = std::max(best, raw.scores[i]);
      sum += raw.scores[i];
    }
    EXPECT_EQ(mx.scores[j], best) << j;
    EXPECT_NEAR(avg.scores[j], sum / 5, 1e-15) << j;
  }
}

TEST(ReferenceScore, VatpAndCriticalKV) {
  const Shape s = make_shape(2, 2, 7, 17, 8, 5);
  ProblemBuilder b(s, 15);
  ScoreProblem& p = b.problem();
  const Pooling pool{PoolKind::kMax, 3};
  const ref::Scores snap = run(p, Method::kSnapKV, 7, pool);
  const ref::Scores vatp = run(p, Method::kVATP, 7, pool);
  const ref::Scores crit = run(p, Method::kCriticalKV, 7, pool);
  ASSERT_EQ(crit.aux.size(), snap.scores.size());
  for (int g = 0; g < 2; ++g) {
    for (int j = 0; j < 17; ++j) {
      const int i = g * 17 + j;
      double l1 = 0;
      for (int c = 0; c < 8; ++c) l1 += std::abs(p.v.load(g, j, c));
      EXPECT_NEAR(vatp.scores[i], snap.scores[i] * l1, 1e-14) << i;
      EXPECT_EQ(crit.aux[i], snap.scores[i]) << i;
      double proj = 0;  // mean over the 2 heads of the group of ||W_o^h v_j||_1
      for (int h = 2 * g; h < 2 * g + 2; ++h)
        for (int o = 0; o < 5; ++o) {
          double sum = 0;
          for (int c = 0; c < 8; ++c) sum += p.wo.load(o, h * 8 + c) * p.v.load(g, j, c);
          proj += std::abs(sum) / 2;
        }
      EXPECT_NEAR(crit.scores[i], (snap.scores[i] + 1e-4) * proj, 1e-13) << i;
    }
  }
}

TEST(ReferenceScore, QueryFreeScores) {
  const Shape s = make_shape(2, 1, 1, 5, 3);
  ProblemBuilder b(s, 16);
  ScoreProblem& p = b.problem();
  const ref::Scores knorm = run(p, Method::kKNorm, 0);
  const ref::Scores keydiff = run(p, Method::kKeyDiff, 0);
  const ref::Scores stream = run(p, Method::kStreamingLLM, 0);
  ScoreOptions ropt = ScoreOptions::defaults(Method::kRandom);
  ropt.seed = 7;
  const ref::Scores rnd = ref::score(p, ropt);
  for (int g = 0; g < 2; ++g) {
    double mean[3] = {0, 0, 0};
    for (int j = 0; j < 5; ++j) {
      const double nrm =
          std::sqrt(p.k.load(g, j, 0) * p.k.load(g, j, 0) + p.k.load(g, j, 1) * p.k.load(g, j, 1) +
                    p.k.load(g, j, 2) * p.k.load(g, j, 2));
      EXPECT_NEAR(knorm.scores[g * 5 + j], -nrm, 1e-14);
      for (int c = 0; c < 3; ++c) mean[c] += p.k.load(g, j, c) / nrm / 5;
    }
    const double mn = std::sqrt(mean[0] * mean[0] + mean[1] * mean[1] + mean[2] * mean[2]);
    for (int j = 0; j < 5; ++j) {
      double dot = 0;
      for (int c = 0; c < 3; ++c) dot += p.k.load(g, j, c) * mean[c];
      EXPECT_NEAR(keydiff.scores[g * 5 + j], dot / (-knorm.scores[g * 5 + j] * mn) * -1, 1e-14);
      EXPECT_EQ(stream.scores[g * 5 + j], j);
      EXPECT_EQ(rnd.scores[g * 5 + j], terms::random_uniform<double>(7, g, j));
    }
  }
}

TEST(ReferenceScore, UsesTheLastRowsOfALongerQueryBlock) {
  // q holds 6 queries; a window of 2 must use rows 4 and 5 (positions n-2, n-1).
  const Shape s = make_shape(1, 1, 6, 9, 4);
  ProblemBuilder b(s, 17);
  const ref::Scores full = run(b.problem(), Method::kSnapKV, 2);
  ScoreProblem tail = b.problem();
  tail.q.data = static_cast<float*>(tail.q.data) + 4 * 4;
  tail.q.shape[1] = 2;
  const ref::Scores got = run(tail, Method::kSnapKV, 2);
  for (int j = 0; j < 9; ++j) EXPECT_EQ(full.scores[j], got.scores[j]) << j;
}

}  // namespace
}  // namespace kvevict
