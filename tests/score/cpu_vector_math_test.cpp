// The polynomial exp / expm1 of the CPU path against libm in double, over the range the scores
// evaluate (x = z - max or z - lse, so x <= ~0), and their handling of -inf and NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "score/cpu_vector_math.h"

namespace kvevict::score_detail {
namespace {

TEST(CpuVectorMath, ExpRelativeErrorIsFloatLevel) {
  double worst = 0, at = 0;
  for (float x = -86.9f; x <= 1.0f; x += 0.0007f) {
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(exp_poly(x) - want) / want;
    if (rel > worst) worst = rel, at = x;
  }
  EXPECT_LT(worst, 4e-7) << "worst relative error at x = " << at;
}

TEST(CpuVectorMath, ExpUnderflowsToZeroForMaskedLogits) {
  EXPECT_EQ(exp_poly(-INFINITY), 0.0f);
  EXPECT_EQ(exp_poly(-100.0f), 0.0f);
  EXPECT_EQ(exp_poly(0.0f), 1.0f);  // p = 1 exactly for a query that sees one key
}

// NaN in, NaN out, without UB on the way (the float -> int exponent cast sees a clamped value):
// e^NaN as e^-87 would weigh a NaN logit as a finite key (issue 13).
TEST(CpuVectorMath, NanStaysNan) {
  EXPECT_TRUE(std::isnan(exp_poly(NAN)));
  EXPECT_TRUE(std::isnan(exp_poly(-NAN)));
  EXPECT_TRUE(std::isnan(expm1_poly(NAN)));
}

TEST(CpuVectorMath, Expm1KeepsRelativePrecisionNearZero) {
  double worst = 0, at = 0;
  for (float x = -3.0f; x <= 0.1f; x += 0.00013f) {
    const double want = std::expm1(static_cast<double>(x));
    if (want == 0) continue;
    const double rel = std::abs(expm1_poly(x) - want) / std::abs(want);
    if (rel > worst) worst = rel, at = x;
  }
  EXPECT_LT(worst, 1e-6) << "worst relative error at x = " << at;
  // Tiny arguments: exp(x) - 1 in float would return 0 or one ulp of 1.
  for (float x : {-1e-6f, -3e-9f, -2e-12f}) {
    const double want = std::expm1(static_cast<double>(x));
    EXPECT_NEAR(expm1_poly(x), want, 1e-6 * std::abs(want)) << x;
  }
}

}  // namespace
}  // namespace kvevict::score_detail
