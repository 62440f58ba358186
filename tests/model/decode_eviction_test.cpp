// Decode-time dynamic eviction wired into Session::decode (SPEC section 5): heads never exceed
// budget + slack after a step, the evictor really runs, memory is given back after a long
// prompt, and the forward stays finite.
#include <gtest/gtest.h>

#include <cmath>

#include "model/session.h"
#include "model/tiny_model.h"

namespace kvevict {
namespace {

EvictConfig decode_config(DecodeScore score, int64_t budget, int64_t slack, int recent) {
  EvictConfig c;
  c.decode.enabled = true;
  c.decode.options.score = score;
  c.decode.options.budget = budget;
  c.decode.options.slack = slack;
  c.decode.options.recent = recent;
  return c;
}

TEST(DecodeEviction, HeadsStayWithinBudgetPlusSlack) {
  for (const char* arch : {"llama", "gemma3"}) {
    for (DecodeScore sc : {DecodeScore::kAttentionSum, DecodeScore::kTOVA, DecodeScore::kDropKV,
                           DecodeScore::kObcacheVK}) {
      testing::TinySpec spec;
      spec.arch = arch;
      const auto tiny = testing::make_tiny_model(spec, std::string("decode_ev_") + arch);
      auto model = Model::load(tiny.file->path());
      Session s(model);
      const int64_t budget = 6, slack = 2;
      s.prefill({1, 2, 3, 4, 5}, decode_config(sc, budget, slack, 2));
      for (int step = 0; step < 12; ++step) {
        s.decode((step * 7) % spec.V);
        for (int l = 0; l < spec.layers; ++l) {
          if (model->config().is_sliding(l)) continue;
          const KVLayerView v = s.cache(l).view();
          for (int h = 0; h < v.num_kv_heads; ++h) {
            ASSERT_LE(v.lens[h], budget + slack)
                << arch << " " << decode_score_name(sc) << " step " << step << " layer " << l;
            // The newest token (the `recent` protection) is always kept.
            EXPECT_EQ(v.pos[v.offsets[h] + v.lens[h] - 1], 5 + step);
          }
        }
        for (float x : s.logits()) ASSERT_TRUE(std::isfinite(x));
      }
      EXPECT_GT(s.stats().decode_evictions, 0) << arch << " " << decode_score_name(sc);
    }
  }
}

TEST(DecodeEviction, LongPromptIsCutToTheBudgetAndMemoryReturned) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "decode_ev_long");
  auto model = Model::load(tiny.file->path());
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = (i * 11) % spec.V;
  Session s(model);
  s.prefill(prompt, decode_config(DecodeScore::kDropKV, 8, 0, 3));
  const int64_t before = s.kv_bytes_total();
  s.decode(1);
  for (int l = 0; l < spec.layers; ++l) EXPECT_EQ(s.kv_rows(l), spec.Hkv * 8) << "layer " << l;
  // Capacity 40 + 1 > 2 * (8 + 0 + 1): the allocation shrinks to the decode capacity.
  EXPECT_LT(s.kv_bytes_total(), before / 3);
}

TEST(DecodeEviction, BudgetAboveLengthNeverEvicts) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "decode_ev_none");
  auto model = Model::load(tiny.file->path());
  Session plain(model), ev(model);
  plain.prefill({4, 5, 6});
  ev.prefill({4, 5, 6}, decode_config(DecodeScore::kAttentionSum, 100, 0, 2));
  for (int i = 0; i < 5; ++i) {
    plain.decode(i);
    ev.decode(i);
    EXPECT_EQ(plain.logits(), ev.logits()) << "step " << i;
  }
  EXPECT_EQ(ev.stats().decode_evictions, 0);
}

// A budget + slack past the context never evicts (a head holds at most the context's rows), and
// reserving budget + slack + 1 rows a head was what the kernel killed for 16777216 (hostile input
// round 2, docs/RELIABILITY.md): the reservation stops at the context (2^21 rows a head before).
TEST(DecodeEviction, ReservationNeverExceedsTheContext) {
  testing::TinySpec spec;  // a 64-token context
  const auto tiny = testing::make_tiny_model(spec, "decode_ev_huge");
  auto model = Model::load(tiny.file->path());
  Session s(model);
  s.prefill({4, 5, 6},
            decode_config(DecodeScore::kAttentionSum, int64_t{1} << 20, int64_t{1} << 20, 2));
  s.decode(1);
  for (int l = 0; l < spec.layers; ++l) {
    if (model->config().is_sliding(l)) continue;
    const KVLayerView v = s.cache(l).view();
    for (int h = 0; h < v.num_kv_heads; ++h)
      EXPECT_LE(v.offsets[h + 1] - v.offsets[h], spec.ctx + 1) << "layer " << l << " head " << h;
  }
  EXPECT_EQ(s.stats().decode_evictions, 0);
}

}  // namespace
}  // namespace kvevict
