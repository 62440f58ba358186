// cpu::score (float, streaming) against ref::score (double) on random inputs of odd sizes, every
// method and aggregation, f32 / bf16 / f16 storage and strided K/V; bitwise determinism across
// thread counts; sentinels around the outputs and the workspace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kvevict/score.h"
#include "score/problem_builder.h"
#include "score/tiny_problem.h"

namespace kvevict {
namespace {

using testing::Guarded;
using testing::make_shape;
using testing::ProblemBuilder;
using testing::Shape;

struct CpuResult {
  std::vector<float> scores, aux;
};

CpuResult run_cpu(const ScoreProblem& p, const ScoreOptions& opt) {
  const int64_t hkv = p.num_kv_heads(), n = p.num_tokens();
  Guarded<float> scores(static_cast<size_t>(hkv * n), -777.0f);
  Guarded<float> aux(static_cast<size_t>(hkv * n), -777.0f);
  const size_t bytes = cpu::score_workspace_bytes(p, opt);
  Guarded<uint8_t> ws(bytes, 0xA5, 256);
  ScoreOutput out;
  out.scores = TensorView(scores.data(), DType::kF32, {hkv, n});
  if (opt.method == Method::kCriticalKV) out.aux = TensorView(aux.data(), DType::kF32, {hkv, n});
  cpu::score(p, opt, out, Workspace{ws.data(), bytes});
  EXPECT_TRUE(scores.intact()) << "scores sentinels overwritten";
  EXPECT_TRUE(aux.intact()) << "aux sentinels overwritten";
  EXPECT_TRUE(ws.intact()) << "write past the workspace of " << bytes << " bytes";
  CpuResult r{scores.values(), {}};
  if (opt.method == Method::kCriticalKV) r.aux = aux.values();
  return r;
}

// Scale-aware tolerance: float accumulation error relative to the largest score of the problem.
::testing::AssertionResult close_to_ref(const std::vector<float>& got,
                                        const std::vector<double>& want, double rel,
                                        const std::string& what) {
  double top = 0;
  for (double x : want) top = std::max(top, std::abs(x));
  return testing::all_close(got, want, rel * top + 1e-30, 20 * rel, what);
}

void expect_matches_ref(ScoreProblem& p, const ScoreOptions& opt, const std::string& what,
                        double rel = 2e-5) {
  const ref::Scores want = ref::score(p, opt);
  const CpuResult got = run_cpu(p, opt);
  EXPECT_TRUE(close_to_ref(got.scores, want.scores, rel, what + " scores"));
  if (opt.method == Method::kCriticalKV)
    EXPECT_TRUE(close_to_ref(got.aux, want.aux, rel, what + " aux"));
}

ScoreOptions options(Method m, int window, Pooling pool = {}) {
  ScoreOptions o = ScoreOptions::defaults(m);
  if (o.aggregate == Aggregate::kWindow && o.needs_queries()) o.window = window;
  o.pooling = pool;
  return o;
}

struct Case {
  int64_t hkv, group, w, n, d;
};

std::string name(const Case& c, Method m, DType t) {
  return std::string(method_name(m)) + " " + dtype_name(t) + " Hkv=" + std::to_string(c.hkv) +
         " G=" + std::to_string(c.group) + " w=" + std::to_string(c.w) +
         " n=" + std::to_string(c.n) + " d=" + std::to_string(c.d);
}

const Case kWindowCases[] = {
    {1, 1, 1, 1, 64},    {2, 4, 8, 3, 24},      {1, 7, 33, 17, 128}, {2, 4, 8, 1000, 64},
    {1, 7, 8, 1000, 24}, {3, 1, 33, 1000, 128}, {2, 1, 1, 17, 24},
};

TEST(CpuScore, WindowMethodsMatchReference) {
  const Method methods[] = {Method::kDropKV, Method::kObcacheV, Method::kObcacheK,
                            Method::kObcacheVK, Method::kSnapKV};
  uint64_t seed = 100;
  for (const Case& c : kWindowCases) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      const Shape s = make_shape(c.hkv, c.group, std::min(c.w, c.n), c.n, c.d);
      ProblemBuilder b(s, ++seed, t);
      for (Method m : methods) {
        // bf16 storage changes only the loads: two methods cover it (keeps the suite fast).
        if (t == DType::kBF16 && m != Method::kDropKV && m != Method::kObcacheVK) continue;
        expect_matches_ref(b.problem(), options(m, c.w), name(c, m, t));
      }
    }
  }
}

TEST(CpuScore, HandComputedTinyCase) {
  testing::Tiny tiny;
  for (Method m : {Method::kDropKV, Method::kObcacheVK}) {
    ScoreOptions opt = options(m, 2);
    const CpuResult got = run_cpu(tiny.problem(), opt);
    const std::vector<double> want = tiny.expected(m);
    EXPECT_TRUE(testing::all_close(got.scores, want, 1e-6, 1e-5, method_name(m)));
  }
}

TEST(CpuScore, TinyEdgeCases) {
  // Pooling kernels wider than the sequence, h2o over a single token, an explicit logit scale,
  // and criticalkv with a bf16 output projection.
  for (int64_t n : {1, 3}) {
    ProblemBuilder b(make_shape(2, 2, n, n, 24, 3), 20 + n, DType::kBF16);
    const std::string tag = " n=" + std::to_string(n);
    expect_matches_ref(b.problem(), options(Method::kObcacheVK, 8, Pooling{PoolKind::kMax, 7}),
                       "vk max:7" + tag);
    expect_matches_ref(b.problem(), options(Method::kSnapKV, 8, Pooling{PoolKind::kAvg, 5}),
                       "snap avg:5" + tag);
    expect_matches_ref(b.problem(), ScoreOptions::defaults(Method::kH2O), "h2o" + tag);
    expect_matches_ref(b.problem(), ScoreOptions::defaults(Method::kTOVA), "tova" + tag);
    expect_matches_ref(b.problem(), options(Method::kCriticalKV, 8), "criticalkv" + tag);
    ScoreProblem scaled = b.problem();
    scaled.scale = 0.37f;
    expect_matches_ref(scaled, options(Method::kDropKV, 8), "dropkv scale=0.37" + tag);
  }
}

TEST(CpuScore, PoolingAndDerivedScores) {
  const Shape s = make_shape(2, 4, 16, 1000, 24, 7);
  ProblemBuilder b(s, 7);
  ScoreProblem& p = b.problem();
  expect_matches_ref(p, options(Method::kObcacheVK, 16, Pooling{PoolKind::kMax, 7}), "vk max:7");
  expect_matches_ref(p, options(Method::kSnapKV, 16, Pooling{PoolKind::kAvg, 5}), "snap avg:5");
  expect_matches_ref(p, options(Method::kVATP, 16, Pooling{PoolKind::kMax, 7}), "vatp");
  expect_matches_ref(p, options(Method::kCriticalKV, 16, Pooling{PoolKind::kMax, 7}), "criticalkv");
}

TEST(CpuScore, AllQueriesAggregation) {
  const Shape s = make_shape(2, 2, 301, 301, 24);
  for (DType t : {DType::kF32, DType::kBF16}) {
    ProblemBuilder b(s, 8, t);
    ScoreProblem& p = b.problem();
    ScoreOptions h2o = ScoreOptions::defaults(Method::kH2O);
    expect_matches_ref(p, h2o, std::string("h2o ") + dtype_name(t));
    h2o.h2o_normalize = true;
    expect_matches_ref(p, h2o, "h2o normalized");
    for (Method m : {Method::kDropKV, Method::kObcacheVK, Method::kObcacheV}) {
      ScoreOptions o = ScoreOptions::defaults(m);
      o.aggregate = Aggregate::kAllQueries;
      o.pooling = Pooling{};
      expect_matches_ref(p, o, std::string(method_name(m)) + " all queries");
    }
  }
}

TEST(CpuScore, LastQueryAggregation) {
  const Shape s = make_shape(3, 4, 5, 1000, 64);
  ProblemBuilder b(s, 9);
  expect_matches_ref(b.problem(), ScoreOptions::defaults(Method::kTOVA), "tova");
  ScoreOptions o = ScoreOptions::defaults(Method::kDropKV);
  o.aggregate = Aggregate::kLastQuery;
  expect_matches_ref(b.problem(), o, "dropkv last query");
}

TEST(CpuScore, QueryFreeScores) {
  const Shape s = make_shape(2, 1, 1, 1000, 24);
  ProblemBuilder b(s, 10, DType::kBF16);
  ScoreProblem& p = b.problem();
  expect_matches_ref(p, ScoreOptions::defaults(Method::kKNorm), "knorm", 1e-6);
  expect_matches_ref(p, ScoreOptions::defaults(Method::kKeyDiff), "keydiff", 1e-6);
  for (Method m : {Method::kRandom, Method::kStreamingLLM}) {
    ScoreOptions o = ScoreOptions::defaults(m);
    o.seed = 1234;
    const ref::Scores want = ref::score(p, o);
    const CpuResult got = run_cpu(p, o);
    for (size_t i = 0; i < want.scores.size(); ++i)
      ASSERT_EQ(static_cast<double>(got.scores[i]), want.scores[i]) << method_name(m) << " " << i;
  }
}

TEST(CpuScore, HalfStorageAndTokenMajorStrides) {
  const Shape s = make_shape(3, 2, 8, 1000, 24);
  ProblemBuilder half(s, 11, DType::kF16);
  expect_matches_ref(half.problem(), options(Method::kDropKV, 8), "dropkv f16");
  ProblemBuilder strided(s, 12, DType::kBF16, 1.5f, /*token_major_kv=*/true);
  expect_matches_ref(strided.problem(), options(Method::kObcacheVK, 8), "vk token-major");
}

TEST(CpuScore, LongSequencesSplitAcrossForwardChunks) {
  // 100003 tokens: four forward chunks merged split-K; kept cheap (one head, w = 1, d = 8).
  {
    const Shape s = make_shape(1, 1, 1, 100003, 8);
    ProblemBuilder b(s, 13);
    expect_matches_ref(b.problem(), options(Method::kDropKV, 1), "dropkv n=100003", 1e-4);
  }
  {
    const Shape s = make_shape(1, 2, 3, 70001, 16);
    ProblemBuilder b(s, 14, DType::kBF16);
    expect_matches_ref(b.problem(), options(Method::kObcacheVK, 3), "vk n=70001", 1e-4);
  }
}

TEST(CpuScore, PeakedAttentionKeepsOneMinusPExact) {
  // Large logits make p of one token ~ 1: 1 - p must come from expm1, not 1 - exp.
  const Shape s = make_shape(1, 2, 4, 300, 64);
  ProblemBuilder b(s, 15, DType::kF32, /*q_scale=*/6.0f);
  expect_matches_ref(b.problem(), options(Method::kDropKV, 4), "dropkv peaked", 1e-4);
}

TEST(CpuScore, BitwiseIdenticalForAnyThreadCount) {
  const Shape s = make_shape(2, 3, 5, 70001, 24);
  ProblemBuilder b(s, 16, DType::kBF16);
  const Shape sh = make_shape(2, 2, 301, 301, 24);
  ProblemBuilder bh(sh, 17);
  ScoreOptions all = ScoreOptions::defaults(Method::kDropKV);
  all.aggregate = Aggregate::kAllQueries;
  const int before = num_threads();
  std::vector<CpuResult> runs, runs_h2o;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    runs.push_back(run_cpu(b.problem(), options(Method::kDropKV, 5, Pooling{PoolKind::kMax, 7})));
    runs_h2o.push_back(run_cpu(bh.problem(), all));
  }
  set_num_threads(before);
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(0, std::memcmp(runs[0].scores.data(), runs[r].scores.data(),
                             runs[0].scores.size() * sizeof(float)))
        << "window scores differ between 1 and " << r + 1 << " threads";
    EXPECT_EQ(0, std::memcmp(runs_h2o[0].scores.data(), runs_h2o[r].scores.data(),
                             runs_h2o[0].scores.size() * sizeof(float)))
        << "all-query scores differ between 1 and " << r + 1 << " threads";
  }
}

TEST(CpuScore, StridedOutputRows) {
  // Output rows with a gap between them: the gap must stay untouched.
  const Shape s = make_shape(2, 2, 8, 17, 24);
  ProblemBuilder b(s, 18);
  const ScoreOptions opt = options(Method::kDropKV, 8);
  std::vector<float> buf(2 * 20, -5.0f);
  ScoreOutput out;
  out.scores = TensorView(buf.data(), DType::kF32, {2, 17});
  out.scores.stride[0] = 20;
  std::vector<uint8_t> ws(cpu::score_workspace_bytes(b.problem(), opt));
  cpu::score(b.problem(), opt, out, Workspace{ws.data(), ws.size()});
  const ref::Scores want = ref::score(b.problem(), opt);
  for (int g = 0; g < 2; ++g) {
    std::vector<float> row(buf.begin() + g * 20, buf.begin() + g * 20 + 17);
    EXPECT_TRUE(close_to_ref(
        row, std::vector<double>(want.scores.begin() + g * 17, want.scores.begin() + g * 17 + 17),
        2e-5, "strided row"));
    for (int j = 17; j < 20; ++j) EXPECT_EQ(buf[g * 20 + j], -5.0f) << g << "," << j;
  }
}

}  // namespace
}  // namespace kvevict
