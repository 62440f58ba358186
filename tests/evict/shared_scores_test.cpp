// Score once, select many (LayerEvictor::score + select): settings that differ only in selection
// (budget, policy, alpha, sink, protected window) share one score pass, and each must get exactly
// the selection plan() gives it with an evictor of its own. same_scores() decides who shares.
#include <gtest/gtest.h>

#include "kvevict/error.h"
#include "kvevict/evict.h"
#include "score/problem_builder.h"
#include "support/testing.h"

namespace kvevict {
namespace {

SelectOptions select_of(const MethodSpec& spec, double budget) {
  SelectOptions so;
  so.policy = spec.policy;
  so.budget.value = budget;
  so.sink = spec.sink;
  so.window = observation_window(spec.score);
  return so;
}

void check_shared(Backend& backend, const std::string& method, const std::string& other) {
  SCOPED_TRACE(backend.name() + std::string(" ") + method + " / " + other);
  const int64_t n = 150;
  testing::ProblemBuilder b(testing::make_shape(3, 2, n, n, 16, 24), 11);  // h2o: every query
  const ScoreProblem& p = b.problem();
  const MethodSpec spec = method_parse(method), spec2 = method_parse(other);
  ASSERT_TRUE(LayerEvictor::same_scores(spec.score, spec2.score));
  // Settings of both spellings at several budgets, one of them a token count.
  std::vector<SelectOptions> settings;
  for (double budget : {0.05, 0.2, 0.5, 40.0}) {
    settings.push_back(select_of(spec, budget));
    settings.push_back(select_of(spec2, budget));
  }
  LayerEvictor shared(backend, spec.score, settings[0]);
  shared.score(p);
  for (const SelectOptions& so : settings) {
    LayerEvictor alone(backend, spec.score, so);
    const Selection want = alone.plan(p);
    const Selection got = shared.select(so);
    EXPECT_EQ(got.offsets, want.offsets) << so.describe();
    EXPECT_EQ(got.index, want.index) << so.describe();
  }
  // Budgets change the selection (else the comparison above could not fail).
  EXPECT_NE(shared.select(settings[0]).index, shared.select(settings[4]).index);
}

TEST(SharedScores, EverySelectionEqualsItsOwnPlan) {
  for (auto make : {&make_cpu_backend, &make_reference_backend}) {
    auto backend = make();
    check_shared(*backend, "dropkv", "adadropkv");
    check_shared(*backend, "snapkv", "adakv");
    check_shared(*backend, "criticalkv", "criticalkv");  // two stages: the aux scores are shared
    check_shared(*backend, "h2o", "h2o");
  }
}

TEST(SharedScores, SameScoresComparesEveryScoringField) {
  const ScoreOptions base = ScoreOptions::defaults(Method::kSnapKV);
  EXPECT_TRUE(LayerEvictor::same_scores(base, base));
  EXPECT_TRUE(LayerEvictor::same_scores(method_parse("snapkv").score, method_parse("adakv").score));
  EXPECT_FALSE(
      LayerEvictor::same_scores(method_parse("dropkv").score, method_parse("obcache_vk").score));
  std::vector<ScoreOptions> changed(10, base);
  changed[0].method = Method::kVATP;
  changed[1].aggregate = Aggregate::kAllQueries;
  changed[2].window = base.window + 1;
  changed[3].pooling = Pooling::parse("avg:7");
  changed[4].pooling = Pooling::parse("max:5");
  changed[5].h2o_normalize = true;
  changed[6].one_minus_p_floor = 1e-9;
  changed[7].criticalkv_eps = 1e-3;
  changed[8].seed = 7;
  changed[9].scale = 0.5f;
  for (size_t i = 0; i < changed.size(); ++i)
    EXPECT_FALSE(LayerEvictor::same_scores(base, changed[i])) << "field " << i;
}

TEST(SharedScores, SelectBeforeScoreThrows) {
  auto backend = make_cpu_backend();
  const MethodSpec spec = method_parse("dropkv:spec");  // w = 8: the 8 queries below
  LayerEvictor ev(*backend, spec.score, select_of(spec, 0.3));
  EXPECT_THROW(ev.select(select_of(spec, 0.3)), Error);
  SelectOptions bad = select_of(spec, 0.3);
  bad.alpha = 2.0;
  testing::ProblemBuilder b(testing::make_shape(2, 1, 8, 40, 8), 3);
  ev.score(b.problem());
  EXPECT_THROW(ev.select(bad), Error);
}

}  // namespace
}  // namespace kvevict
