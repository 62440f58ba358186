// Presets of real model shapes and seeded random weights (speed runs): shapes as published (the
// small ones field by field against their checkpoints' configs), deterministic weights, and a
// forward that runs on a shrunken copy of each preset.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <utility>

#include "io/model_paths.h"
#include "kvevict/error.h"
#include "kvevict/io/gguf.h"
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

// The presets of the two embedded checkpoints' shapes (speed runs with random weights) are the
// checkpoints' own configs, field by field.
TEST(Presets, SmallPresetsMatchTheirGgufConfigs) {
  for (const auto& [name, file] :
       {std::pair{"smollm2-135m", io::kSmolLM2File}, std::pair{"gemma3-270m", io::kGemma3File}}) {
    SCOPED_TRACE(name);
    const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
    if (!std::ifstream(path).good()) GTEST_SKIP() << "no model file " << path;
    const ModelConfig f = ModelConfig::from_gguf(*gguf::File::open(path));
    const ModelConfig p = ModelConfig::preset(name);
    EXPECT_EQ(p.arch, f.arch);
    EXPECT_EQ(p.vocab_size, f.vocab_size);
    EXPECT_EQ(p.context_length, f.context_length);
    EXPECT_EQ(p.n_embd, f.n_embd);
    EXPECT_EQ(p.n_layers, f.n_layers);
    EXPECT_EQ(p.n_heads, f.n_heads);
    EXPECT_EQ(p.n_kv_heads, f.n_kv_heads);
    EXPECT_EQ(p.head_dim, f.head_dim);
    EXPECT_EQ(p.value_dim, f.value_dim);
    EXPECT_EQ(p.ffn_dim, f.ffn_dim);
    EXPECT_FLOAT_EQ(p.rms_eps, f.rms_eps);
    EXPECT_EQ(p.rope_style, f.rope_style);
    EXPECT_FLOAT_EQ(p.rope_base, f.rope_base);
    EXPECT_FLOAT_EQ(p.rope_base_sliding, f.rope_base_sliding);
    EXPECT_FLOAT_EQ(p.rope_linear_scale, f.rope_linear_scale);
    EXPECT_EQ(p.sliding_window, f.sliding_window);
    EXPECT_EQ(p.layer_sliding, f.layer_sliding);
    EXPECT_EQ(p.qkv_bias, f.qkv_bias);
    EXPECT_EQ(p.qk_norm, f.qk_norm);
    EXPECT_EQ(p.post_norms, f.post_norms);
    EXPECT_EQ(p.embed_scale, f.embed_scale);
    EXPECT_FLOAT_EQ(p.attn_scale, f.attn_scale);
    EXPECT_FLOAT_EQ(p.final_logit_softcap, f.final_logit_softcap);
    EXPECT_EQ(p.activation, f.activation);
    EXPECT_EQ(p.tied_embeddings, f.tied_embeddings);
  }
}

}  // namespace
}  // namespace kvevict
