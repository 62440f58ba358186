#include "kvevict/evict.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kvevict/error.h"
#include "score/problem_builder.h"
#include "support/testing.h"

namespace kvevict {
namespace {

// The pipeline must equal its parts: ref::score -> ref::select -> compaction of those rows.
void check_pipeline(const MethodSpec& spec, double budget, int64_t n, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << method_name(spec.score.method) << " policy "
                                    << policy_name(spec.policy) << " n=" << n);
  testing::ProblemBuilder b(testing::make_shape(3, 2, 32, n, 16, 24), seed);
  ScoreProblem& pb = b.problem();
  SelectOptions so;
  so.policy = spec.policy;
  so.budget.value = budget;
  so.sink = spec.sink;
  so.window = spec.score.window;
  auto backend = make_reference_backend();
  LayerEvictor ev(*backend, spec.score, so);
  const HostEvictResult r = ev.evict_host(pb, DType::kBF16, 2);

  const ref::Scores s = ref::score(pb, spec.score);
  std::vector<float> sf(s.scores.begin(), s.scores.end()), af(s.aux.begin(), s.aux.end());
  std::vector<int64_t> starts, lens;
  const Selection want = ref::select(
      SelectProblem::dense(TensorView(sf.data(), DType::kF32, {3, n}),
                           af.empty() ? TensorView() : TensorView(af.data(), DType::kF32, {3, n}),
                           starts, lens),
      so);
  EXPECT_EQ(r.selection.offsets, want.offsets);
  EXPECT_EQ(r.selection.index, want.index);

  const int64_t keep = so.budget.keep_count(n);
  EXPECT_EQ(r.selection.total(), 3 * std::max<int64_t>(keep, std::min<int64_t>(n, so.window + so.sink)));
  EXPECT_EQ(r.bytes_before, 2 * 3 * n * 16 * 2);
  EXPECT_EQ(r.bytes_after, 2 * (r.selection.total() + 3 * 2) * 16 * 2);
  EXPECT_LT(r.bytes_after, r.bytes_before);
  const KVLayerView c = r.cache.view();
  for (int h = 0; h < 3; ++h) {
    ASSERT_EQ(c.lens[h], r.selection.count(h));
    for (int64_t i = 0; i < c.lens[h]; ++i) {
      const int32_t src = r.selection.head(h)[i];
      ASSERT_EQ(c.pos[c.offsets[h] + i], src);
      for (int j = 0; j < 16; j += 5)
        ASSERT_EQ(c.head_k(h).load(i, j), round_bf16(static_cast<float>(pb.k.load(h, src, j))));
    }
  }
}

TEST(LayerEvictor, EqualsScoreThenSelectThenCompact) {
  check_pipeline(method_parse("dropkv"), 0.25, 97, 1);
  check_pipeline(method_parse("adadropkv"), 0.3, 101, 2);
  check_pipeline(method_parse("snapkv"), 0.5, 77, 3);
  check_pipeline(method_parse("criticalkv"), 0.6, 90, 4);
  check_pipeline(method_parse("streamingllm"), 40, 120, 5);
  check_pipeline(method_parse("obcache_vk"), 0.2, 133, 6);
}

TEST(LayerEvictor, StreamingLLMKeepsSinksAndRecent) {
  testing::ProblemBuilder b(testing::make_shape(2, 1, 1, 50, 8), 9);
  const MethodSpec spec = method_parse("streamingllm");
  SelectOptions so;
  so.budget.value = 10;
  so.sink = spec.sink;
  so.window = spec.score.window;
  auto backend = make_reference_backend();
  LayerEvictor ev(*backend, spec.score, so);
  const Selection s = ev.plan(b.problem());
  for (int h = 0; h < 2; ++h)
    EXPECT_EQ(std::vector<int32_t>(s.head(h), s.head(h) + s.count(h)),
              (std::vector<int32_t>{0, 1, 2, 3, 44, 45, 46, 47, 48, 49}));
  EXPECT_EQ(ev.last_scores().shape[1], 50);
}

TEST(LayerEvictor, WarnsBelowProtectedAndRejectsBadBudget) {
  testing::ProblemBuilder b(testing::make_shape(2, 2, 8, 30, 8), 10);
  SelectOptions so;
  so.budget.value = 4;
  so.window = 8;
  auto backend = make_reference_backend();
  LayerEvictor ev(*backend, ScoreOptions::defaults(Method::kDropKV), so);
  const Selection s = ev.plan(b.problem());
  EXPECT_FALSE(s.warning.empty());
  EXPECT_EQ(s.count(0), 8);
  so.budget.value = 31;
  LayerEvictor too_big(*backend, ScoreOptions::defaults(Method::kDropKV), so);
  EXPECT_THROW(too_big.plan(b.problem()), Error);
}

}  // namespace
}  // namespace kvevict
