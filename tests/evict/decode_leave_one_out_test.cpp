// Issue 13 at decode time (w = 1): DecodeEvictor::step_scores when one cached row takes almost all
// of a query's probability. dropkv's step score of row j is the mean over the group's heads of
// ||a - a_{-j}||^2 (the output without row j, SPEC section 2); here it is checked against that
// perturbation computed by brute force (each softmax rerun without j, long double), for logit gaps
// of 0 .. 1000 nats, p_top = 1 - 1e-k and q = 1e30, and the dominant row must score highest.
// Tolerance: step_scores works in double but takes the step's float a for the other rows:
// rtol 1e-5, atol 1e-9 of the largest score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/decode_evict.h"
#include "support/testing.h"

namespace kvevict {
namespace {

constexpr int kG = 2, kD = 16;
constexpr int64_t kLen = 41;

struct DecodeCase {
  double gap = 0, p_top = 0, q_scale = 1;
  int64_t top = 5;
  uint64_t seed = 1;
};

TEST(DecodeLeaveOneOut, DropKVStepScoreIsTheRemovalPerturbation) {
  std::vector<DecodeCase> cases;
  uint64_t seed = 500;
  for (double gap : {0.0, 10.0, 30.0, 100.0, 1000.0}) cases.push_back({gap, 0, 1, 5, ++seed});
  for (int k = 1; k <= 12; ++k) cases.push_back({0, 1 - std::pow(10.0, -k), 1, 17, ++seed});
  cases.push_back({30, 0, 1e30, 0, ++seed});
  cases.push_back({30, 0, 1e30, kLen - 1, ++seed});
  for (const DecodeCase& dc : cases) {
    SCOPED_TRACE(::testing::Message() << "gap " << dc.gap << " p_top " << dc.p_top << " q_scale "
                                      << dc.q_scale << " top row " << dc.top);
    std::mt19937_64 rng(dc.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
    // Head h's query is q_scale e_h, so key coordinate h sets its logits (as in
    // tests/score/peaked_problem.h); both heads share the dominant row.
    std::vector<float> k(kLen * kD), v(kLen * kD), q(kG * kD, 0.0f);
    for (auto& x : k) x = static_cast<float>(normal(rng));
    for (auto& x : v) x = static_cast<float>(normal(rng));
    for (int h = 0; h < kG; ++h) {
      q[h * kD + h] = static_cast<float>(dc.q_scale);
      std::vector<double> z(kLen);
      double best = -INFINITY, sum = 0;
      for (int64_t j = 0; j < kLen; ++j) z[j] = normal(rng);
      for (int64_t j = 0; j < kLen; ++j)
        if (j != dc.top) best = std::max(best, z[j]);
      for (int64_t j = 0; j < kLen; ++j)
        if (j != dc.top) sum += std::exp(z[j] - best);
      z[dc.top] =
          dc.p_top > 0 ? best + std::log(sum) + std::log(dc.p_top / (1 - dc.p_top)) : best + dc.gap;
      for (int64_t j = 0; j < kLen; ++j) k[j * kD + h] = static_cast<float>(z[j] / scale);
    }
    HostKVCache dense = HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {1, kLen, kD}),
                                                TensorView(v.data(), DType::kF32, {1, kLen, kD}),
                                                DType::kF32, 0, true);
    const KVLayerView c = dense.view();

    // The step's a and lse as the model's float attention would hand them over, and the
    // brute-force perturbation of every row.
    using LD = long double;
    std::vector<float> a(kG * kD), lse(kG);
    std::vector<double> pert(kLen, 0.0);
    for (int h = 0; h < kG; ++h) {
      std::vector<LD> z(kLen);
      for (int64_t j = 0; j < kLen; ++j) {
        LD dot = 0;
        for (int i = 0; i < kD; ++i) dot += static_cast<LD>(q[h * kD + i]) * k[j * kD + i];
        z[j] = dot * static_cast<LD>(static_cast<float>(scale));
      }
      auto softmax = [&](int64_t skip, std::vector<LD>& o) {
        LD m = -INFINITY, s = 0;
        for (int64_t j = 0; j < kLen; ++j)
          if (j != skip) m = std::max(m, z[j]);
        o.assign(kD, 0.0L);
        for (int64_t j = 0; j < kLen; ++j) {
          if (j == skip) continue;
          const LD e = std::exp(z[j] - m);
          s += e;
          for (int i = 0; i < kD; ++i) o[i] += e * v[j * kD + i];
        }
        for (int i = 0; i < kD; ++i) o[i] /= s;
        return m + std::log(s);
      };
      std::vector<LD> full, without;
      lse[h] = static_cast<float>(softmax(-1, full));
      for (int i = 0; i < kD; ++i) a[h * kD + i] = static_cast<float>(full[i]);
      for (int64_t j = 0; j < kLen; ++j) {
        softmax(j, without);
        LD e = 0;
        for (int i = 0; i < kD; ++i) e += (full[i] - without[i]) * (full[i] - without[i]);
        pert[j] += static_cast<double>(e) / kG;
      }
    }
    DecodeEvictOptions opt;
    opt.score = DecodeScore::kDropKV;
    opt.budget = 8;
    opt.recent = 1;
    opt.scale = static_cast<float>(scale);
    const DecodeEvictor ev(opt);
    std::vector<float> got(kLen);
    ev.step_scores(
        c,
        {TensorView(q.data(), DType::kF32, {kG, kD}), TensorView(a.data(), DType::kF32, {kG, kD}),
         TensorView(lse.data(), DType::kF32, {kG})},
        0, got.data());
    double top = 0;
    for (double x : pert) top = std::max(top, x);
    EXPECT_TRUE(testing::all_close(got, pert, 1e-9 * top, 1e-5, "step scores"));
    const int64_t best = std::max_element(got.begin(), got.end()) - got.begin();
    const int64_t best_ref = std::max_element(pert.begin(), pert.end()) - pert.begin();
    if (dc.gap > 0 || dc.p_top > 0) EXPECT_EQ(best_ref, dc.top);
    EXPECT_EQ(best, best_ref) << "dominant row score " << got[dc.top];
  }
}

}  // namespace
}  // namespace kvevict
