// Presets of real model shapes and seeded random weights (speed runs): shapes as published,
// deterministic weights, and a forward that runs on a shrunken copy of each preset.
#include <gtest/gtest.h>

#include <cmath>

#include "kvevict/error.h"
#include "model/session.h"

namespace kvevict {
namespace {

TEST(Presets, RealShapes) {
  const ModelConfig l = ModelConfig::preset("llama-3.1-8b");
  EXPECT_EQ(l.n_heads, 32);
  EXPECT_EQ(l.n_kv_heads, 8);
  EXPECT_EQ(l.head_dim, 128);
  EXPECT_EQ(l.n_layers, 32);
  EXPECT_EQ(l.n_embd, 4096);
  // ~8.03e9 parameters (untied embeddings of 128256 x 4096).
  EXPECT_NEAR(static_cast<double>(l.num_params()), 8.03e9, 0.02e9);
  const ModelConfig q = ModelConfig::preset("qwen2.5-7b");
  EXPECT_EQ(q.n_heads, 28);
  EXPECT_EQ(q.n_kv_heads, 4);
  EXPECT_EQ(q.head_dim, 128);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.rope_style, RopeStyle::kNeox);
  EXPECT_NEAR(static_cast<double>(q.num_params()), 7.62e9, 0.02e9);
}

TEST(Presets, RandomWeightsAreSeededAndRun) {
  for (const char* name : {"llama-3.1-8b", "qwen2.5-7b"}) {
    ModelConfig c = ModelConfig::preset(name);
    // Keep the attention shape (Hq, Hkv, d) and shrink the rest so the test stays small.
    c.n_layers = 2;
    c.vocab_size = 301;
    c.n_embd = 256;
    c.ffn_dim = 96;
    auto a = Model::random(c, 1), b = Model::random(c, 1), other = Model::random(c, 2);
    Session sa(a), sb(b), so(other);
    const std::vector<int32_t> toks = {3, 100, 7, 300, 42};
    sa.prefill(toks);
    sb.prefill(toks);
    so.prefill(toks);
    EXPECT_EQ(sa.logits(), sb.logits()) << name;
    EXPECT_NE(sa.logits(), so.logits()) << name;
    sa.decode(5);
    for (float x : sa.logits()) ASSERT_TRUE(std::isfinite(x)) << name;
    EXPECT_EQ(sa.kv_rows(0), int64_t{c.n_kv_heads} * 6) << name;
    // Decode reserves spare rows (at least 16 per head) so that it does not reallocate every step.
    EXPECT_EQ(sa.kv_bytes(0), 2 * int64_t{c.n_kv_heads} * (5 + 1 + 16) * c.head_dim * 4) << name;
  }
}

}  // namespace
}  // namespace kvevict
