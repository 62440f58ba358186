// Decode-time eviction (SPEC section 5), simulated over many steps with real attention outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "kvevict/attention.h"
#include "kvevict/cache.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "support/testing.h"

namespace kvevict {
namespace {

constexpr int kHq = 4, kHkv = 2, kD = 16;

// The step score of one row for one query head, written out from SPEC section 2 in double,
// without score_terms.h, from the raw vectors.
double independent_term(DecodeScore s, const float* q, const float* a, double lse,
                        const std::vector<double>& k, const std::vector<double>& v) {
  double z = 0, v2 = 0, amv2 = 0, av = 0;
  for (int i = 0; i < kD; ++i) {
    z += q[i] * k[i];
    v2 += v[i] * v[i];
    amv2 += (a[i] - v[i]) * (a[i] - v[i]);
    av += a[i] * v[i];
  }
  z /= std::sqrt(static_cast<double>(kD));
  const double p = std::exp(z - lse);
  switch (s) {
    case DecodeScore::kAttentionSum:
    case DecodeScore::kTOVA: return p;
    case DecodeScore::kDropKV: return std::pow(p / std::max(1.0 - p, 1e-12), 2) * amv2;
    case DecodeScore::kObcacheV: return p * p * v2;
    case DecodeScore::kObcacheK: return std::pow(p * z, 2) * amv2;
    case DecodeScore::kObcacheVK:
      return p * p * v2 + std::pow(p * z, 2) * amv2 + 2 * p * p * z * (v2 - av);
  }
  return 0;
}

struct RunResult {
  int64_t evictions = 0;
  int64_t max_len = 0;
};

RunResult simulate(const DecodeEvictOptions& opt, int64_t prompt, int steps, DType dtype,
                   uint64_t seed) {
  SCOPED_TRACE(opt.describe());
  DecodeEvictor ev(opt);
  // The prompt fills the cache up to the budget; the capacity is budget + slack + 1 per head.
  std::vector<float> k0 = testing::normal_floats(kHkv * prompt * kD, seed);
  std::vector<float> v0 = testing::normal_floats(kHkv * prompt * kD, seed + 1);
  HostKVCache dense = HostKVCache::from_dense(
      TensorView(k0.data(), DType::kF32, {kHkv, prompt, kD}),
      TensorView(v0.data(), DType::kF32, {kHkv, prompt, kD}), dtype, 0, true);
  HostKVCache cache(dtype, kHkv, kD, std::vector<int64_t>(kHkv, opt.capacity_per_head()), true);
  cache_compact(dense.view(), Selection::keep_all(kHkv, dense.view().lens), cache.view());
  KVLayerView c = cache.view();

  // Everything ever cached, by (head, position), as the cache stores it (after dtype rounding).
  std::map<std::pair<int, int32_t>, std::pair<std::vector<double>, std::vector<double>>> rows;
  std::map<std::pair<int, int32_t>, double> expected_acc;
  auto remember = [&](int h, int64_t row) {
    std::vector<double> k(kD), v(kD);
    for (int i = 0; i < kD; ++i) {
      k[i] = c.head_k(h).load(row, i);
      v[i] = c.head_v(h).load(row, i);
    }
    rows[{h, c.pos[c.offsets[h] + row]}] = {k, v};
  };
  for (int h = 0; h < kHkv; ++h)
    for (int64_t j = 0; j < c.lens[h]; ++j) remember(h, j);

  RunResult res;
  for (int s = 0; s < steps; ++s) {
    const int32_t pos = static_cast<int32_t>(prompt + s);
    std::vector<float> kr = testing::normal_floats(kHkv * kD, seed + 10 + 3 * s);
    std::vector<float> vr = testing::normal_floats(kHkv * kD, seed + 11 + 3 * s);
    std::vector<float> q = testing::normal_floats(kHq * kD, seed + 12 + 3 * s, 2.0f);
    cache_append(c, TensorView(kr.data(), DType::kF32, {kHkv, kD}),
                 TensorView(vr.data(), DType::kF32, {kHkv, kD}), pos);
    for (int h = 0; h < kHkv; ++h) remember(h, c.lens[h] - 1);

    AttentionProblem ap;
    ap.q = TensorView(q.data(), DType::kF32, {kHq, 1, kD});
    ap.q_pos = &pos;
    ap.cache = c;
    std::vector<float> a(kHq * kD), lse(kHq);
    cpu::attention(ap, {TensorView(a.data(), DType::kF32, {kHq, 1, kD}),
                        TensorView(lse.data(), DType::kF32, {kHq, 1})});
    // The independent accumulator over the rows present at this step.
    for (int h = 0; h < kHkv; ++h)
      for (int64_t j = 0; j < c.lens[h]; ++j) {
        const int32_t p = c.pos[c.offsets[h] + j];
        const auto& kv = rows[{h, p}];
        double t = 0;
        for (int g = 0; g < kHq / kHkv; ++g) {
          const int hq = h * (kHq / kHkv) + g;
          t += independent_term(opt.score, q.data() + hq * kD, a.data() + hq * kD, lse[hq],
                                kv.first, kv.second);
        }
        t /= static_cast<double>(kHq) / kHkv;  // the GQA group size
        if (opt.score == DecodeScore::kTOVA)
          expected_acc[{h, p}] = t;
        else
          expected_acc[{h, p}] += t;
      }

    std::vector<int64_t> len_before(c.lens, c.lens + kHkv);
    res.evictions += ev.step(c, {TensorView(q.data(), DType::kF32, {kHq, kD}),
                                 TensorView(a.data(), DType::kF32, {kHq, kD}),
                                 TensorView(lse.data(), DType::kF32, {kHq})});
    for (int h = 0; h < kHkv; ++h) {
      res.max_len = std::max(res.max_len, c.lens[h]);
      EXPECT_LE(c.lens[h], opt.budget + opt.slack) << "step " << s << " head " << h;
      if (len_before[h] > opt.budget + opt.slack) EXPECT_EQ(c.lens[h], opt.budget);
      // Protected rows survive: the sinks and the `recent` newest positions.
      std::set<int32_t> present(c.pos + c.offsets[h], c.pos + c.offsets[h] + c.lens[h]);
      for (int32_t p = 0; p < opt.sink; ++p) EXPECT_TRUE(present.count(p)) << "sink " << p;
      for (int32_t p = std::max(0, pos - opt.recent + 1); p <= pos; ++p)
        EXPECT_TRUE(present.count(p)) << "recent position " << p << " evicted at step " << s;
      for (int64_t j = 0; j < c.lens[h]; ++j) {
        const int32_t p = c.pos[c.offsets[h] + j];
        if (j) EXPECT_LT(c.pos[c.offsets[h] + j - 1], p) << "rows out of position order";
        const double want = expected_acc[{h, p}];
        EXPECT_NEAR(c.score_acc[c.offsets[h] + j], want, 1e-6 + 2e-4 * std::fabs(want))
            << "accumulator of head " << h << " position " << p << " at step " << s;
      }
    }
  }
  return res;
}

TEST(DecodeEvictor, EveryScoreKeepsBoundsProtectedAndAccumulator) {
  for (DecodeScore s : {DecodeScore::kAttentionSum, DecodeScore::kTOVA, DecodeScore::kDropKV,
                        DecodeScore::kObcacheV, DecodeScore::kObcacheK, DecodeScore::kObcacheVK}) {
    DecodeEvictOptions opt;
    opt.score = s;
    opt.budget = 13;
    opt.slack = 4;
    opt.recent = 5;
    opt.sink = 2;
    const RunResult r = simulate(opt, 13, 30, DType::kF32, 100 + static_cast<int>(s));
    EXPECT_GT(r.evictions, 0);
    EXPECT_EQ(r.max_len, 17);
  }
}

TEST(DecodeEvictor, SlackZeroEvictsEveryStep) {
  DecodeEvictOptions opt;
  opt.score = DecodeScore::kDropKV;
  opt.budget = 9;
  opt.slack = 0;
  opt.recent = 3;
  opt.sink = 1;
  const RunResult r = simulate(opt, 9, 12, DType::kBF16, 7);
  EXPECT_EQ(r.evictions, 12 * kHkv);  // one row per head per step
  EXPECT_EQ(r.max_len, 9);
}

TEST(DecodeEvictor, KeepsHighestAccumulatedScores) {
  HostKVCache c(DType::kF32, 1, 2, {8}, true);
  KVLayerView w = c.view();
  std::vector<float> row = {1, 2};
  for (int p = 0; p < 8; ++p)
    cache_append(w, TensorView(row.data(), DType::kF32, {1, 2}),
                 TensorView(row.data(), DType::kF32, {1, 2}), p);
  const float acc[] = {0.5f, 9, 1, 7, 1, 3, 0, 0};
  std::copy(acc, acc + 8, w.score_acc);
  DecodeEvictOptions opt;
  opt.budget = 5;
  opt.slack = 2;
  opt.recent = 2;
  opt.sink = 1;
  DecodeEvictor ev(opt);
  EXPECT_EQ(ev.evict(w), 3);
  // sink 0, recent 6 and 7, then the best two of rows 1..5: 9 (row 1) and 7 (row 3).
  EXPECT_EQ(std::vector<int32_t>(w.pos, w.pos + 5), (std::vector<int32_t>{0, 1, 3, 6, 7}));
  EXPECT_EQ(w.score_acc[2], 7.0f);
  EXPECT_EQ(ev.evict(w), 0);  // 5 <= 5 + 2
}

TEST(DecodeEvictor, RejectsBadOptions) {
  DecodeEvictOptions opt;
  opt.budget = 10;  // recent defaults to 32
  try {
    DecodeEvictor ev(opt);
    FAIL() << "a budget below recent + sink must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_score_parse("nope"), Error);
  EXPECT_EQ(decode_score_parse("obcache_vk"), DecodeScore::kObcacheVK);
  // budget + slack + 1 (capacity_per_head) overflowed int64 for 2^62 + 2^62 (signed overflow,
  // a negative capacity): refused naming both.
  DecodeEvictOptions huge;
  huge.budget = int64_t{1} << 62;
  huge.slack = int64_t{1} << 62;
  try {
    huge.validate();
    FAIL() << "a budget + slack past any cache must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode budget 4611686018427387904 + slack"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvevict
