#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kvevict/dtype.h"

namespace kvevict {
namespace {

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), h) << std::hex << h;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.0f))));
  EXPECT_EQ(half_to_float(float_to_half(5.96e-8f)), 5.960464477539063e-08f);  // min subnormal
}

TEST(DType, Bf16RoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-100, 100);
  for (int i = 0; i < 10000; ++i) {
    const float f = dist(rng);
    const float r = round_bf16(f);
    EXPECT_LE(std::abs(r - f), std::abs(f) * (1.0f / 256)) << f;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

}  // namespace
}  // namespace kvevict
