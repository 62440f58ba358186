// Every op of the CPU backend against the reference backend (llama.cpp test-backend-ops style).
#include "kvevict/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kvevict/evict.h"
#include "score/problem_builder.h"
#include "support/testing.h"

namespace kvevict {
namespace {

TEST(Backend, CpuMatchesReferenceOpByOp) {
  auto cpu = make_cpu_backend();
  auto ref = make_reference_backend();
  EXPECT_STREQ(cpu->name(), "cpu");
  EXPECT_STREQ(ref->name(), "reference");
  const int hkv = 2, group = 3, d = 24;
  const int64_t n = 157, m = 32;
  testing::ProblemBuilder b(testing::make_shape(hkv, group, m, n, d), 21);
  const ScoreProblem& pb = b.problem();
  for (Method meth : {Method::kDropKV, Method::kSnapKV, Method::kObcacheVK}) {
    const ScoreOptions so = ScoreOptions::defaults(meth);
    std::vector<float> sc(hkv * n), sr(hkv * n);
    std::vector<uint8_t> ws(cpu->score_workspace_bytes(pb, so) + 1);
    cpu->score(pb, so, {TensorView(sc.data(), DType::kF32, {hkv, n}), TensorView()},
               Workspace{ws.data(), ws.size()});
    ref->score(pb, so, {TensorView(sr.data(), DType::kF32, {hkv, n}), TensorView()}, Workspace{});
    std::vector<double> srd(sr.begin(), sr.end());
    float peak = 0;
    for (float x : sr) peak = std::max(peak, std::fabs(x));
    EXPECT_TRUE(testing::all_close(sc, srd, 1e-4 * peak, 1e-3, method_name(meth)));

    // select: same scores in, same selection out.
    SelectOptions sel;
    sel.policy = Policy::kAdaKV;
    sel.budget.value = 0.3;
    sel.window = so.window;
    const TensorView scores(sc.data(), DType::kF32, {hkv, n});
    const Selection a = cpu->select(scores, TensorView(), sel);
    const Selection r = ref->select(scores, TensorView(), sel);
    EXPECT_EQ(a.offsets, r.offsets);
    EXPECT_EQ(a.index, r.index);

    // compact: identical bytes.
    const HostKVCache full = HostKVCache::from_dense(pb.k, pb.v, DType::kBF16);
    HostKVCache ca = cache_allocate_for(full.view(), a, 1),
                cr = cache_allocate_for(full.view(), a, 1);
    cpu->compact(full.view(), a, ca.view());
    ref->compact(full.view(), a, cr.view());
    const KVLayerView va = ca.view(), vr = cr.view();
    for (int h = 0; h < hkv; ++h)
      for (int64_t i = 0; i < va.lens[h]; ++i) {
        ASSERT_EQ(va.pos[va.offsets[h] + i], vr.pos[vr.offsets[h] + i]);
        for (int j = 0; j < d; ++j) ASSERT_EQ(va.head_v(h).load(i, j), vr.head_v(h).load(i, j));
      }

    // attention over the compacted cache, queries after the prompt.
    std::vector<float> q = testing::normal_floats(hkv * group * 5 * d, 4);
    std::vector<int32_t> qpos = {static_cast<int32_t>(n), static_cast<int32_t>(n + 1), 3, 80,
                                 static_cast<int32_t>(n - 1)};
    AttentionProblem ap;
    ap.q = TensorView(q.data(), DType::kF32, {hkv * group, 5, d});
    ap.q_pos = qpos.data();
    ap.cache = va;
    std::vector<float> oa(q.size()), orf(q.size()), la(hkv * group * 5), lr(la.size());
    std::vector<uint8_t> aws(cpu->attention_workspace_bytes(ap) + 1);
    cpu->attention(ap,
                   {TensorView(oa.data(), DType::kF32, {hkv * group, 5, d}),
                    TensorView(la.data(), DType::kF32, {hkv * group, 5})},
                   Workspace{aws.data(), aws.size()});
    ref->attention(ap,
                   {TensorView(orf.data(), DType::kF32, {hkv * group, 5, d}),
                    TensorView(lr.data(), DType::kF32, {hkv * group, 5})},
                   Workspace{});
    EXPECT_TRUE(testing::all_close(oa, std::vector<double>(orf.begin(), orf.end()), 2e-5, 2e-4,
                                   "attention out"));
    // A query that sees no kept key has lse -inf on both backends; compare those as equal.
    for (size_t i = 0; i < la.size(); ++i) {
      EXPECT_EQ(std::isinf(la[i]), std::isinf(lr[i])) << "lse " << i;
      if (std::isinf(la[i]) && std::isinf(lr[i])) la[i] = lr[i] = 0.0f;
    }
    EXPECT_TRUE(testing::all_close(la, std::vector<double>(lr.begin(), lr.end()), 1e-5, 1e-5,
                                   "attention lse"));
  }
}

TEST(Backend, CpuEvictorKeepsNearlyTheReferenceScoreMass) {
  // Float and double scores may order near-ties differently; the kept score mass (by the
  // reference scores) must agree closely, and the pipeline must be consistent with its parts.
  const int hkv = 4, group = 2, d = 32;
  const int64_t n = 301;
  testing::ProblemBuilder b(testing::make_shape(hkv, group, 8, n, d), 31);
  const ScoreProblem& pb = b.problem();
  const MethodSpec spec = method_parse("adadropkv:spec");
  SelectOptions sel;
  sel.policy = spec.policy;
  sel.budget.value = 0.2;
  sel.window = spec.score.window;
  auto cpu = make_cpu_backend();
  auto ref = make_reference_backend();
  LayerEvictor ec(*cpu, spec.score, sel), er(*ref, spec.score, sel);
  const HostEvictResult rc = ec.evict_host(pb, DType::kBF16);
  const HostEvictResult rr = er.evict_host(pb, DType::kBF16);
  EXPECT_EQ(rc.selection.total(), rr.selection.total());
  EXPECT_EQ(rc.bytes_after, rr.bytes_after);
  const ref::Scores s = ref::score(pb, spec.score);
  auto mass = [&](const Selection& x) {
    double m = 0;
    for (int h = 0; h < hkv; ++h)
      for (int64_t i = 0; i < x.count(h); ++i) m += s.scores[h * n + x.head(h)[i]];
    return m;
  };
  EXPECT_NEAR(mass(rc.selection), mass(rr.selection), 1e-4 * mass(rr.selection));
  // plan() == select() over the backend's own scores.
  const TensorView last = ec.last_scores();
  std::vector<int64_t> starts, lens;
  const Selection again = select(SelectProblem::dense(last, TensorView(), starts, lens), sel);
  EXPECT_EQ(again.index, rc.selection.index);
}

}  // namespace
}  // namespace kvevict
