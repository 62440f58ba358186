// The table of tests/support/backend_cases.h through the reference (double) and cpu (float)
// backends: the whole LayerEvictor pipeline (score -> select -> plan_segments -> compact ->
// attention after eviction) and the decode-time cut, op by op. tests/cuda/backend_test.cpp runs
// the same table on the cuda backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kvevict/backend.h"
#include "kvevict/evict.h"
#include "support/backend_cases.h"
#include "support/testing.h"

namespace kvevict {
namespace {

void run(const testing::EvictorCase& c) {
  const auto& sh = c.shape;
  SCOPED_TRACE(::testing::Message() << c.method << " Hq " << sh.hq << " Hkv " << sh.hkv << " d "
                                    << sh.d << " n " << sh.n << " budget " << c.budget);
  const MethodSpec spec = method_parse(c.method);
  SelectOptions sel;
  sel.policy = spec.policy;
  sel.budget.value = c.budget;
  sel.sink = spec.sink;
  sel.window = spec.score.window;
  const int64_t m = sh.n, D = 48;
  auto q = testing::normal_floats(static_cast<size_t>(sh.hq) * m * sh.d, c.seed, 2.0f);
  auto k = testing::normal_floats(static_cast<size_t>(sh.hkv) * sh.n * sh.d, c.seed + 1);
  auto v = testing::normal_floats(static_cast<size_t>(sh.hkv) * sh.n * sh.d, c.seed + 2);
  auto wo = testing::normal_floats(static_cast<size_t>(D) * sh.hq * sh.d, c.seed + 3, 0.1f);
  ScoreProblem p;
  p.q = TensorView(q.data(), DType::kF32, {sh.hq, m, sh.d});
  p.k = TensorView(k.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  p.v = TensorView(v.data(), DType::kF32, {sh.hkv, sh.n, sh.d});
  p.wo = TensorView(wo.data(), DType::kF32, {D, int64_t{sh.hq} * sh.d});
  auto ref = make_reference_backend();
  auto cpu = make_cpu_backend();
  LayerEvictor ref_ev(*ref, spec.score, sel), cpu_ev(*cpu, spec.score, sel);
  const Selection rs = ref_ev.plan(p), cs = cpu_ev.plan(p);
  const TensorView rsv = ref_ev.last_scores(), csv = cpu_ev.last_scores();
  const std::vector<float> ref_scores(rsv.ptr<float>(), rsv.ptr<float>() + sh.hkv * sh.n);
  const std::vector<float> cpu_scores(csv.ptr<float>(), csv.ptr<float>() + sh.hkv * sh.n);
  double peak = 0;
  for (float x : ref_scores) peak = std::max(peak, std::fabs(static_cast<double>(x)));
  EXPECT_TRUE(testing::all_close(cpu_scores,
                                 std::vector<double>(ref_scores.begin(), ref_scores.end()),
                                 1e-4 * peak + 1e-30, 1e-3, "scores"));
  EXPECT_EQ(rs.warning.empty(), cs.warning.empty());
  EXPECT_EQ(rs.offsets.back(), cs.offsets.back());
  const std::string swaps = testing::kept_sets_differ(rs, cs, ref_scores, sh.n, sel.sink,
                                                      sel.window, 1e-3, 1e-4 * peak + 1e-30);
  EXPECT_TRUE(swaps.empty()) << swaps;

  // plan_segments + compact: both backends write the same table and bytes for one selection.
  const int64_t slack = 2;
  const HostKVCache full = HostKVCache::from_dense(p.k, p.v, DType::kBF16, 0, true);
  HostKVCache a = cache_allocate_for(full.view(), cs, slack),
              b = cache_allocate_for(full.view(), cs, slack);
  cpu->plan_segments(cs, slack, a.view());
  ref->plan_segments(cs, slack, b.view());
  EXPECT_EQ(std::vector<int64_t>(a.view().offsets, a.view().offsets + sh.hkv + 1),
            cache_plan_offsets(cs, slack));
  cpu_ev.apply(full.view(), cs, a.view());
  ref_ev.apply(full.view(), cs, b.view());
  const KVLayerView va = a.view(), vb = b.view();
  for (int h = 0; h < sh.hkv; ++h) {
    ASSERT_EQ(va.lens[h], cs.count(h));
    ASSERT_EQ(vb.lens[h], cs.count(h));
    for (int64_t i = 0; i < va.lens[h]; ++i) {
      const int64_t r = va.offsets[h] + i;
      ASSERT_EQ(va.pos[r], vb.pos[r]);
      ASSERT_EQ(va.pos[r], cs.head(h)[i]) << "rows are the kept positions, in order";
      ASSERT_EQ(std::memcmp(static_cast<char*>(va.k) + r * sh.d * 2,
                            static_cast<char*>(vb.k) + r * sh.d * 2, sh.d * 2),
                0);
    }
  }

  // Attention over the compacted cache: cpu vs the double reference.
  const int64_t mq = 2;
  auto q2 = testing::normal_floats(static_cast<size_t>(sh.hq) * mq * sh.d, c.seed + 9, 2.0f);
  std::vector<int32_t> q_pos = {static_cast<int32_t>(sh.n), static_cast<int32_t>(sh.n + 1)};
  AttentionProblem ap;
  ap.q = TensorView(q2.data(), DType::kF32, {sh.hq, mq, sh.d});
  ap.q_pos = q_pos.data();
  ap.cache = a.view();
  std::vector<float> oc(q2.size()), orf(q2.size());
  std::vector<uint8_t> ws(cpu->attention_workspace_bytes(ap) + 1);
  cpu->attention(ap, {TensorView(oc.data(), DType::kF32, {sh.hq, mq, sh.d}), TensorView()},
                 Workspace{ws.data(), ws.size()});
  ref->attention(ap, {TensorView(orf.data(), DType::kF32, {sh.hq, mq, sh.d}), TensorView()},
                 Workspace{});
  EXPECT_TRUE(testing::all_close(oc, std::vector<double>(orf.begin(), orf.end()), 1e-5, 1e-4,
                                 "attention after eviction"));

  // The decode-time cut on the compacted caches: random accumulators with ties, both backends.
  std::mt19937_64 rng(c.seed + 11);
  for (int64_t r = 0; r < va.capacity_rows(); ++r)
    va.score_acc[r] = vb.score_acc[r] = static_cast<float>(rng() % 5);
  SegmentCut cut;
  cut.keep = 3;
  cut.sink = 1;
  cut.recent = 1;
  for (int h = 0; h < sh.hkv; ++h)
    if (va.lens[h] > cut.keep) cut.heads.push_back(h);
  cpu->cut_segments(va, cut);
  ref->cut_segments(vb, cut);
  for (int h = 0; h < sh.hkv; ++h) {
    ASSERT_EQ(va.lens[h], vb.lens[h]);
    for (int64_t i = 0; i < va.lens[h]; ++i)
      ASSERT_EQ(va.pos[va.offsets[h] + i], vb.pos[vb.offsets[h] + i]);
  }
}

TEST(BackendConformance, EveryMethodAndShapeOnReferenceAndCpu) {
  for (const auto& c : testing::evictor_cases(/*big=*/false)) run(c);
}

}  // namespace
}  // namespace kvevict
