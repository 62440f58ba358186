// The inline half conversions and the bulk (F16C / AVX2 when present) ones of kvevict/dtype.h
// against an independent double-precision definition of binary16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kvevict/dtype.h"

namespace kvevict {
namespace {

// binary16 decoded by its definition: (-1)^s 2^(e - 15) (1 + m / 1024), subnormals 2^-14 m / 1024.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

TEST(DTypeBulk, HalfToFloatMatchesTheDefinitionForEveryHalf) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> bulk(all.size());
  half_to_float_n(all.data(), bulk.data(), static_cast<int64_t>(all.size()));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = half_value(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
      EXPECT_TRUE(std::isnan(bulk[h])) << std::hex << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << std::hex << h;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
    EXPECT_EQ(std::memcmp(&bulk[h], &got, 4), 0) << std::hex << h;
  }
}

// float -> half is the nearest half (ties to even): no other half is closer, checked against the
// two neighbours of the result, over random floats of every exponent the format covers.
TEST(DTypeBulk, FloatToHalfRoundsToNearestEvenScalarAndBulkAlike) {
  std::mt19937_64 rng(17);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const int e = static_cast<int>(rng() % 50) - 30;  // 2^-30 .. 2^19: subnormal .. overflow
    const float f = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24) + 0.5f, e);
    xs.push_back((rng() & 1) ? -f : f);
  }
  // Exact ties and the edges of the subnormal and overflow ranges.
  for (float f : {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 5.96e-8f, 2.98e-8f, 2.9802322e-08f,
                  6.1035156e-05f, 6.0975552e-05f, 65504.0f, 65519.0f, 65520.0f, 0.0f, -0.0f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    xs.push_back(f);
  std::vector<uint16_t> bulk(xs.size());
  float_to_half_n(xs.data(), bulk.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float f = xs[i];
    const uint16_t h = float_to_half(f);
    ASSERT_EQ(bulk[i], h) << f;
    const double v = half_value(h), err = std::abs(v - f);
    if (std::isinf(v)) {
      EXPECT_GE(std::abs(f), 65520.0f) << f;
      continue;
    }
    for (int dh : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(((h & 0x7fff) + dh) | (h & 0x8000));
      if ((h & 0x7fff) == 0 && dh < 0) continue;
      const double nv = half_value(n);
      if (std::isnan(nv) || std::isinf(nv)) continue;
      const double nerr = std::abs(nv - f);
      EXPECT_TRUE(err < nerr || (err == nerr && (h & 1) == 0)) << f << " -> " << std::hex << h;
    }
  }
  uint16_t nan_h;
  float_to_half_n(std::vector<float>{std::nanf("")}.data(), &nan_h, 1);
  EXPECT_TRUE(std::isnan(half_to_float(nan_h)));
}

TEST(DTypeBulk, Bf16BulkEqualsScalar) {
  std::mt19937_64 rng(5);
  std::vector<float> xs(100003);
  for (auto& f : xs) {
    const uint32_t u = static_cast<uint32_t>(rng());
    std::memcpy(&f, &u, 4);  // every bit pattern: NaNs, infinities, subnormals included
  }
  std::vector<uint16_t> b(xs.size());
  float_to_bf16_n(xs.data(), b.data(), static_cast<int64_t>(xs.size()));
  std::vector<float> back(xs.size());
  bf16_to_float_n(b.data(), back.data(), static_cast<int64_t>(b.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(b[i], float_to_bf16(xs[i])) << i;
    const float s = bf16_to_float(b[i]);
    ASSERT_EQ(std::memcmp(&back[i], &s, 4), 0) << i;
  }
}

}  // namespace
}  // namespace kvevict
