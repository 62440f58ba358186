// Sampling: greedy is argmax with ties toward the lower id; seeded sampling is reproducible;
// top-k / top-p restrict the support; frequencies follow softmax(logits / T).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kvevict/error.h"
#include "kvevict/model/sampler.h"

namespace kvevict {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowerIdTies) {
  Sampler s;
  EXPECT_EQ(s.sample({0.1f, 3.0f, -1.0f, 3.0f}), 1);
  EXPECT_EQ(argmax({-5.0f}), 0);
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

}  // namespace
}  // namespace kvevict
