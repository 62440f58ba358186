// The shared per-(query, token) terms: each checked against the formula written out directly on
// explicit vectors (not through the norm identity the header uses).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "score/score_terms.h"

namespace kvevict {
namespace {

struct Pair {
  double a[3] = {0.3, -0.2, 0.5};  // attention output of the query
  double v[3] = {-0.4, 0.9, 0.1};  // value of the token
  double z = 0.7;
  double lse = 1.9;
  double a2() const { return a[0] * a[0] + a[1] * a[1] + a[2] * a[2]; }
  double v2() const { return v[0] * v[0] + v[1] * v[1] + v[2] * v[2]; }
  double av() const { return a[0] * v[0] + a[1] * v[1] + a[2] * v[2]; }
  double diff2() const {
    double s = 0;
    for (int i = 0; i < 3; ++i) s += (a[i] - v[i]) * (a[i] - v[i]);
    return s;
  }
};

TEST(ScoreTerms, MatchTheWrittenOutFormulas) {
  const Pair x;
  const double p = std::exp(x.z - x.lse);
  EXPECT_NEAR(terms::prob(x.z, x.lse), p, 1e-15);
  EXPECT_NEAR(terms::one_minus_prob(x.z, x.lse, 1e-12), 1 - p, 1e-15);
  const double drop = (p / (1 - p)) * (p / (1 - p)) * x.diff2();
  EXPECT_NEAR(terms::pair_term(Method::kDropKV, x.z, x.lse, x.a2(), x.v2(), x.av(), 1e-12), drop,
              1e-14);
  const double obv = p * p * x.v2();
  const double obk = (p * x.z) * (p * x.z) * x.diff2();
  const double cross = 2 * p * p * x.z * (x.v2() - x.av());
  EXPECT_NEAR(terms::obcache_v_term(p, x.v2()), obv, 1e-15);
  EXPECT_NEAR(terms::obcache_k_term(p, x.z, x.a2(), x.v2(), x.av()), obk, 1e-15);
  EXPECT_NEAR(terms::obcache_vk_term(p, x.z, x.a2(), x.v2(), x.av()), obv + obk + cross, 1e-15);
  for (Method m :
       {Method::kSnapKV, Method::kH2O, Method::kTOVA, Method::kVATP, Method::kCriticalKV})
    EXPECT_NEAR(terms::pair_term(m, x.z, x.lse, x.a2(), x.v2(), x.av(), 1e-12), p, 1e-15)
        << method_name(m);
  EXPECT_EQ(terms::pair_term(Method::kKNorm, x.z, x.lse, x.a2(), x.v2(), x.av(), 1e-12), 0.0);
  // The float instantiation agrees to float precision.
  EXPECT_NEAR(terms::dropkv_term<float>(float(p), float(1 - p), float(x.a2()), float(x.v2()),
                                        float(x.av())),
              drop, 1e-6 * drop);
}

TEST(ScoreTerms, OneMinusPStaysExactNearOneAndIsClamped) {
  // z - lse = -1e-9: p = 1 - 1e-9; 1 - exp() in double would keep only ~7 digits.
  const double omp = terms::one_minus_prob(-1e-9, 0.0, 1e-12);
  EXPECT_NEAR(omp, 1e-9, 1e-18);
  // p = 1 exactly: clamped at the floor, so dropkv stays finite.
  EXPECT_EQ(terms::one_minus_prob(2.0, 2.0, 1e-12), 1e-12);
  EXPECT_TRUE(std::isfinite(terms::pair_term(Method::kDropKV, 2.0, 2.0, 1.0, 1.0, 0.5, 1e-12)));
  // The float path keeps the relative precision too.
  EXPECT_NEAR(terms::one_minus_prob<float>(-1e-6f, 0.0f, 1e-12f), 1e-6f, 1e-12f);
}

TEST(ScoreTerms, DistanceIsClampedAtZero) {
  // a == v up to rounding: the identity can go slightly negative; the term must not.
  const double a2 = 0.1 * 0.1, v2 = a2, av = a2 * (1 + 1e-15);
  EXPECT_GE(terms::dist2(a2, v2, av), 0.0);
  EXPECT_GE(terms::dropkv_term(0.5, 0.5, a2, v2, av), 0.0);
}

TEST(ScoreTerms, LseMerge) {
  const double a = 1.3, b = -0.4;
  EXPECT_NEAR(terms::lse_merge(a, b), std::log(std::exp(a) + std::exp(b)), 1e-15);
  EXPECT_NEAR(terms::lse_merge(b, a), std::log(std::exp(a) + std::exp(b)), 1e-15);
  EXPECT_EQ(terms::lse_merge(-HUGE_VAL, 0.5), 0.5);
  EXPECT_EQ(terms::lse_merge(-HUGE_VAL, -HUGE_VAL), -HUGE_VAL);
}

// Every clamp and max of the terms keeps NaN: `a > b ? a : b` returned the clamp for a NaN a, so
// a NaN distance or 1 - p became a finite, wrong score on the GPU decode path (issue 13).
TEST(ScoreTerms, ClampsAndMaximaKeepNan) {
  const double nan = std::nan("");
  const float nanf = std::nanf("");
  EXPECT_TRUE(std::isnan(nan_max(nan, 0.0)));
  EXPECT_TRUE(std::isnan(nan_max(0.0, nan)));
  EXPECT_TRUE(std::isnan(nan_max(nanf, -INFINITY)));
  EXPECT_EQ(nan_max(2.0, 1.0), 2.0);
  EXPECT_EQ(nan_max(-1.0, 1.0), 1.0);
  EXPECT_TRUE(std::isnan(terms::dist2(nan, 1.0, 0.5)));
  EXPECT_TRUE(std::isnan(terms::dist2(1.0, 1.0, nan)));
  EXPECT_TRUE(std::isnan(terms::dist2<float>(1.0f, nanf, 0.5f)));
  EXPECT_TRUE(std::isnan(terms::one_minus_prob(nan, 0.0, 1e-12)));
  EXPECT_TRUE(std::isnan(terms::one_minus_prob(0.0, nan, 1e-12)));
  EXPECT_TRUE(std::isnan(terms::one_minus_prob<float>(nanf, 0.0f, 1e-12f)));
  EXPECT_TRUE(std::isnan(terms::lse_merge(nan, 0.5)));
  EXPECT_TRUE(std::isnan(terms::lse_merge(0.5, nan)));
  EXPECT_TRUE(std::isnan(terms::lse_merge(-HUGE_VAL, nan)));
}

TEST(ScoreTerms, RandomIsUniformCounterBasedAndExactInFloat) {
  // Reference value of splitmix64 for state 0 (the generator's published first output).
  EXPECT_EQ(terms::splitmix64(0), 0xE220A8397B1DCDAFull);
  std::set<double> seen;
  double sum = 0;
  const int count = 20000;
  for (int j = 0; j < count; ++j) {
    const double u = terms::random_uniform<double>(42, 3, j);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // Same bits through float: every backend writes the same f32 score.
    ASSERT_EQ(static_cast<double>(terms::random_uniform<float>(42, 3, j)), u) << j;
    seen.insert(u);
    sum += u;
  }
  EXPECT_GT(seen.size(), static_cast<size_t>(count * 0.99));
  EXPECT_NEAR(sum / count, 0.5, 0.01);
  // Seed and head change the stream.
  EXPECT_NE(terms::random_uniform<double>(42, 3, 5), terms::random_uniform<double>(43, 3, 5));
  EXPECT_NE(terms::random_uniform<double>(42, 3, 5), terms::random_uniform<double>(42, 4, 5));
}

}  // namespace
}  // namespace kvevict
