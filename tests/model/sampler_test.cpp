// Sampling: greedy is argmax with ties toward the lower id; seeded sampling is reproducible;
// top-k / top-p restrict the support; frequencies follow softmax(logits / T).
#include "kvevict/model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kvevict/error.h"

namespace kvevict {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowerIdTies) {
  Sampler s;
  EXPECT_EQ(s.sample({0.1f, 3.0f, -1.0f, 3.0f}), 1);
  EXPECT_EQ(argmax({-5.0f}), 0);
}

// The vectorized argmax answers what the one-pass loop answers: ties to the lowest id, +-0 and
// -inf alike, and a NaN anywhere never wins (a NaN first element stays the answer, as before).
TEST(Sampler, ArgmaxEqualsTheScalarLoopWithTiesInfAndNan) {
  auto scalar = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (size_t i = 1; i < x.size(); ++i)
      if (x[i] > x[best]) best = static_cast<int32_t>(i);
    return best;
  };
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<std::vector<float>> cases = {
      {1},         {-inf, -inf},   {0.0f, -0.0f, 0.0f}, {-0.0f, 0.0f},     {nan, 5, 7},
      {3, nan, 7}, {3, 7, nan, 7}, {nan, nan},          {-inf, nan, -inf}, {2, inf, inf, 1}};
  uint32_t state = 12345;
  for (int c = 0; c < 40; ++c) {
    std::vector<float> x(1 + (c * 977) % 3001);
    for (auto& v : x) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<float>(state >> 24) / 16.0f;  // many ties
    }
    if (c % 4 == 1) x[(c * 31) % x.size()] = nan;
    cases.push_back(x);
  }
  for (const auto& x : cases) EXPECT_EQ(argmax(x), scalar(x)) << "size " << x.size();
}

TEST(Sampler, SeededRunsRepeatAndSeedsDiffer) {
  const std::vector<float> logits = {1.0f, 1.2f, 0.7f, 1.1f, 0.9f, 1.05f, 0.8f};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.seed = 42;
  Sampler a(o), b(o);
  o.seed = 43;
  Sampler c(o);
  std::vector<int32_t> ra, rb, rc;
  for (int i = 0; i < 64; ++i) {
    ra.push_back(a.sample(logits));
    rb.push_back(b.sample(logits));
    rc.push_back(c.sample(logits));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.9f, -1.0f, 1.8f};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 2;
  Sampler k2(o);
  for (int i = 0; i < 200; ++i) {
    const int32_t t = k2.sample(logits);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  o.top_k = 0;
  o.top_p = 0.01f;  // the top token alone holds more than 1% of the mass
  Sampler p(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(p.sample(logits), 1);
}

TEST(Sampler, FrequenciesFollowTemperedSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  SamplerOptions o;
  o.temperature = 2.0f;
  o.seed = 7;
  Sampler s(o);
  const int N = 20000;
  std::map<int32_t, int> count;
  for (int i = 0; i < N; ++i) ++count[s.sample(logits)];
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  for (int t = 0; t < 3; ++t) {
    const double p = std::exp(logits[t] / 2.0) / z;
    const double sigma = std::sqrt(p * (1 - p) / N);
    EXPECT_NEAR(count[t] / double(N), p, 5 * sigma) << "token " << t;
  }
}

TEST(Sampler, BadOptionsAreErrors) {
  SamplerOptions o;
  o.temperature = -1.0f;
  EXPECT_THROW(Sampler{o}, Error);
  o = {};
  o.top_p = 0.0f;
  EXPECT_THROW(Sampler{o}, Error);
  o = {};
  o.top_k = -3;
  EXPECT_THROW(Sampler{o}, Error);
}

// A NaN logit anywhere is refused with its index (greedy and sampled alike), at odd vocabulary
// sizes and positions that end the vectorized scan's blocks.
TEST(Sampler, NanLogitIsRefusedWithItsIndex) {
  for (size_t n : {1u, 7u, 16u, 1001u, 262144u}) {
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<float> logits(n, 0.5f);
      logits[at] = std::nanf("");
      for (float temperature : {0.0f, 1.0f}) {
        SamplerOptions o;
        o.temperature = temperature;
        Sampler s(o);
        try {
          s.sample(logits);
          ADD_FAILURE() << "no error for a NaN at " << at << " of " << n;
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("logit " + std::to_string(at) + " is NaN"),
                    std::string::npos)
              << e.what();
        }
      }
    }
  }
  std::vector<float> fine(1001, 0.25f);
  fine[500] = 3.0f;
  Sampler greedy;
  EXPECT_EQ(greedy.sample(fine), 500);
}

}  // namespace
}  // namespace kvevict
