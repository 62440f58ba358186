// The GPU model runtime (kvevict::gpu) against the CPU runtime (kvevict::Session): logits after
// prefill and after decode steps, greedy text, eviction (GPU path and CPU-plan fallback), batched
// decode, and the on-device random weights. The CPU side runs the same weights rounded to bf16,
// so the remaining differences are the GPU's bf16 activations and K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "cuda/cuda_testing.h"
#include "kvevict/decode_evict.h"
#include "kvevict/io/model_paths.h"
#include "kvevict/model/gpu_runtime.h"
#include "kvevict/model/model.h"
#include "kvevict/model/session.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

ModelConfig tiny_config(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.name = arch == Arch::kLlama ? "tiny-llama" : "tiny-qwen2";
  c.vocab_size = 517;
  c.context_length = 4096;
  c.n_embd = 256;
  c.n_layers = 3;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = arch == Arch::kLlama ? 64 : 128;
  c.value_dim = c.head_dim;
  c.ffn_dim = 384;
  c.rope_base = 10000.0f;
  c.rope_base_sliding = c.rope_base;
  if (arch == Arch::kQwen2) {
    c.rope_style = RopeStyle::kNeox;
    c.qkv_bias = true;
    c.tied_embeddings = false;
  }
  return c;
}

// Model::random with every weight rounded to bf16 (what the GPU holds).
std::shared_ptr<const Model> bf16_model(const ModelConfig& c, uint64_t seed) {
  auto m = Model::random(c, seed);
  auto& w = const_cast<ModelWeights&>(m->weights());
  auto round = [](HostTensor& t) {
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(p[i]);
  };
  round(w.token_embd);
  if (w.output.nbytes()) round(w.output);
  for (auto& L : w.layers)
    for (HostTensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) round(*t);
  return m;
}

std::vector<int32_t> prompt_ids(int n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

struct Diff {
  double max_abs = 0, ref_max = 0;
  int64_t worst = -1;
};
Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  for (size_t i = 0; i < ref.size(); ++i) {
    d.ref_max = std::max(d.ref_max, std::fabs(static_cast<double>(ref[i])));
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (e > d.max_abs) {
      d.max_abs = e;
      d.worst = static_cast<int64_t>(i);
    }
  }
  return d;
}

// bf16 activations and K/V: a few 2^-8 relative roundings per layer.
void expect_close_logits(const std::vector<float>& got, const std::vector<float>& ref, double rel,
                         const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  const Diff d = compare(got, ref);
  EXPECT_LE(d.max_abs, rel * d.ref_max + 1e-3)
      << what << ": max abs err " << d.max_abs << " at " << d.worst << " (gpu " << got[d.worst]
      << ", cpu " << ref[d.worst] << "), largest |logit| " << d.ref_max;
}

std::shared_ptr<const gpu::GpuModel> upload(const std::shared_ptr<const Model>& m) {
  return gpu::GpuModel::upload(*m);
}

class GpuRuntime : public ::testing::TestWithParam<Arch> {};

TEST_P(GpuRuntime, PrefillAndDecodeLogitsMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(GetParam());
  auto cpu_model = bf16_model(c, 11);
  auto gm = upload(cpu_model);
  // 1000 tokens in chunks of 384: three chunks, the last one partial.
  const auto prompt = prompt_ids(1000, c.vocab_size, 5);
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  gpu::GpuSessionOptions go;
  go.max_prompt = 1000;
  go.prefill_chunk = 384;
  go.decode_room = 8;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  expect_close_logits(g.logits(), cpu.logits(), 0.03, "prefill");
  for (int step = 0; step < 4; ++step) {
    const int32_t tok = prompt_ids(1, c.vocab_size, 100 + step)[0];
    cpu.decode(tok);
    g.decode({tok});
    expect_close_logits(g.logits(), cpu.logits(), 0.03, "decode");
  }
  EXPECT_EQ(g.position(), 1004);
  EXPECT_EQ(g.kv_rows(0), 1004 * c.n_kv_heads);
}

TEST_P(GpuRuntime, RandomOnDeviceEqualsUploadedHostRandom) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(GetParam());
  auto a = gpu::GpuModel::random(c, 3);
  auto b = upload(Model::random(c, 3));
  const auto prompt = prompt_ids(77, c.vocab_size, 9);
  gpu::GpuSessionOptions go;
  go.max_prompt = 77;
  gpu::GpuSession sa(a, go), sb(b, go);
  sa.prefill(prompt);
  sb.prefill(prompt);
  const auto la = sa.logits(), lb = sb.logits();
  // Same bf16 weights, same kernels: bitwise equal.
  EXPECT_EQ(compare(la, lb).max_abs, 0.0);
}

TEST_P(GpuRuntime, GreedyTokensMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(GetParam());
  auto cpu_model = bf16_model(c, 21);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(300, c.vocab_size, 6);
  gpu::GpuSessionOptions go;
  go.max_prompt = 300;
  go.decode_room = 32;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  Sampler s1, s2;
  const auto got = g.generate(24, s2);
  // The CPU runs the same weights in f32 activations: it follows the GPU's tokens (teacher
  // forcing) and every GPU choice must be the CPU's argmax, or within the bf16 logit error of it
  // (a near-tie of random weights), never a clearly worse token.
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  int exact = 0;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const auto& l = cpu.logits();
    const int32_t best = argmax(l);
    double scale = 0;
    for (float v : l) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    exact += best == got.tokens[i];
    EXPECT_GE(l[got.tokens[i]], l[best] - 0.01 * scale)
        << "step " << i << ": gpu chose " << got.tokens[i] << " (cpu logit " << l[got.tokens[i]]
        << "), cpu argmax " << best << " (" << l[best] << ")";
    if (i + 1 < got.tokens.size()) cpu.decode(got.tokens[i]);
  }
  // Strict greedy equality of the whole sequence is checked on the llama shapes below.
  EXPECT_GE(exact, static_cast<int>(got.tokens.size()) - 2);
  if (GetParam() == Arch::kLlama) {
    Session cpu2(cpu_model);
    cpu2.prefill(prompt);
    EXPECT_EQ(got.tokens, cpu2.generate(24, s1).tokens);
  }
}

TEST_P(GpuRuntime, BatchedDecodeEqualsSingleSequence) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(GetParam());
  auto gm = gpu::GpuModel::random(c, 4);
  const auto prompt = prompt_ids(200, c.vocab_size, 8);
  gpu::GpuSessionOptions one;
  one.max_prompt = 200;
  one.decode_room = 8;
  gpu::GpuSession s1(gm, one);
  s1.prefill(prompt, EvictConfig{PrefillEviction::from_method("dropkv", Budget{0.3}), {}});
  gpu::GpuSessionOptions three = one;
  three.batch = 3;
  gpu::GpuSession s3(gm, three);
  s3.prefill(prompt, EvictConfig{PrefillEviction::from_method("dropkv", Budget{0.3}), {}});
  s3.replicate_sequence();
  for (int step = 0; step < 3; ++step) {
    const int32_t tok = 7 + step;
    s1.decode({tok});
    s3.decode({tok, tok, tok});
    const auto ref = s1.logits();
    for (int b = 0; b < 3; ++b) expect_close_logits(s3.logits(b), ref, 1e-3, "batch row");
  }
  // Greedy on the device: every row follows the same tokens.
  const auto ids = s3.decode_greedy(4);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[0], ids[2]);
  EXPECT_EQ(s3.kv_bytes_total(), 3 * s3.kv_bytes_per_sequence());
}

INSTANTIATE_TEST_SUITE_P(Archs, GpuRuntime, ::testing::Values(Arch::kLlama, Arch::kQwen2),
                         [](const auto& info) {
                           return std::string(info.param == Arch::kLlama ? "llama" : "qwen2");
                         });

// Prefill eviction: the GPU path (uniform dropkv: CUDA scores + radix select) and the CPU-plan
// fallback (adakv policy) keep what the CPU runtime keeps, memory shrinks, and the logits after
// eviction follow the CPU's.
void check_eviction(const std::string& method, double budget, const char* path) {
  const ModelConfig c = tiny_config(Arch::kLlama);
  auto cpu_model = bf16_model(c, 31);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(640, c.vocab_size, 12);
  const EvictConfig ev{PrefillEviction::from_method(method, Budget{budget}), {}};
  SessionOptions so;
  so.kv_dtype = DType::kBF16;
  Session cpu(cpu_model, so);
  cpu.prefill(prompt, ev);
  gpu::GpuSessionOptions go;
  go.max_prompt = 640;
  go.decode_room = 4;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt, ev);
  EXPECT_EQ(g.stats().evict_path, path);
  EXPECT_LT(g.stats().kv_bytes_after, g.stats().kv_bytes_before);
  for (int l = 0; l < c.n_layers; ++l) {
    // Uniform: exactly floor(B n) rows per head; adakv: the same layer total.
    EXPECT_EQ(g.kv_rows(l), cpu.kv_rows(l)) << method << " layer " << l;
    // Kept positions: the sets may differ where bf16 activations reorder near-equal scores.
    const KVLayerView v = cpu.cache(l).view();
    int64_t kept_cpu = 0;
    for (int h = 0; h < v.num_kv_heads; ++h) kept_cpu += v.lens[h];
    EXPECT_EQ(kept_cpu, cpu.kv_rows(l));
  }
  // Logits are computed before eviction (identical to no eviction); the next step reads the
  // compacted cache.
  const int32_t tok = 3;
  cpu.decode(tok);
  g.decode({tok});
  expect_close_logits(g.logits(), cpu.logits(), 0.08, method.c_str());
}

TEST(GpuRuntimeEviction, DropKVOnTheGpuPath) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("dropkv", 0.25, "gpu");
}

TEST(GpuRuntimeEviction, AdaKVThroughTheCpuPlan) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("adadropkv", 0.25, "cpu-plan");
}

TEST(GpuRuntimeEviction, SnapKVOnTheGpuPath) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("snapkv", 0.3, "gpu");
}

// Decode-time eviction (SPEC section 5): step scores accumulate on the GPU, heads over
// budget + slack are cut to the budget at the same steps as the CPU's DecodeEvictor, and the
// logits keep following the CPU session.
void check_decode_eviction(const std::string& score) {
  const ModelConfig c = tiny_config(Arch::kLlama);
  auto cpu_model = bf16_model(c, 41);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(200, c.vocab_size, 13);
  EvictConfig ev;
  ev.decode.enabled = true;
  ev.decode.options.score = decode_score_parse(score);
  ev.decode.options.budget = 96;
  ev.decode.options.slack = 4;
  ev.decode.options.recent = 16;
  SessionOptions so;
  so.kv_dtype = DType::kBF16;
  Session cpu(cpu_model, so);
  cpu.prefill(prompt, ev);
  gpu::GpuSessionOptions go;
  go.max_prompt = 200;
  go.decode_room = 4;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt, ev);
  for (int step = 0; step < 12; ++step) {
    const int32_t tok = prompt_ids(1, c.vocab_size, 300 + step)[0];
    cpu.decode(tok);
    g.decode({tok});
    for (int l = 0; l < c.n_layers; ++l)
      ASSERT_EQ(g.kv_rows(l), cpu.kv_rows(l)) << score << " step " << step << " layer " << l;
    expect_close_logits(g.logits(), cpu.logits(), 0.08, score.c_str());
  }
  EXPECT_GT(g.stats().decode_evictions, 0);
  EXPECT_EQ(g.stats().decode_evictions, cpu.stats().decode_evictions);
  // 201 rows -> 96 at step 1, then 97..100, 101 -> 96 at steps 6 and 11, 97 after step 12.
  EXPECT_EQ(g.kv_rows(0), 97 * c.n_kv_heads);
}

TEST(GpuRuntimeDecodeEviction, AttentionSumMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  check_decode_eviction("h2o");
}

TEST(GpuRuntimeDecodeEviction, DropKVMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  check_decode_eviction("dropkv");
}

TEST(GpuRuntimeDecodeEviction, TovaMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  check_decode_eviction("tova");
}

TEST(GpuRuntimeErrors, RefusesGemmaAndBadSizes) {
  KVEVICT_REQUIRE_GPU();
  ModelConfig c = tiny_config(Arch::kLlama);
  c.arch = Arch::kGemma3;
  EXPECT_THROW(gpu::check_supported(c), Error);
  auto gm = gpu::GpuModel::random(tiny_config(Arch::kLlama), 1);
  gpu::GpuSessionOptions go;
  go.max_prompt = 16;
  gpu::GpuSession g(gm, go);
  EXPECT_THROW(g.prefill(prompt_ids(17, 517, 1)), Error);  // over max_prompt
  EXPECT_THROW(g.decode({1}), Error);                      // nothing prefilled
  go.batch = 0;
  EXPECT_THROW(gpu::GpuSession(gm, go), Error);
}

// SmolLM2's shape (Hq 9, Hkv 3, d 64, 30 layers) with random weights: greedy tokens equal.
TEST(GpuRuntimeShapes, SmolLM2ShapeGreedyMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = ModelConfig::preset("smollm2-135m");
  auto cpu_model = bf16_model(c, 2);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(150, c.vocab_size, 4);
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  gpu::GpuSessionOptions go;
  go.max_prompt = 150;
  go.decode_room = 20;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  expect_close_logits(g.logits(), cpu.logits(), 0.03, "smollm2 shape prefill");
  Sampler s1, s2;
  EXPECT_EQ(g.generate(12, s2).tokens, cpu.generate(12, s1).tokens);
}

// The real checkpoint, where present (KVEVICT_MODEL_DIR or <source>/models): greedy text and
// logits of the CPU and GPU runtimes agree.
TEST(GpuRuntimeGolden, SmolLM2GreedyTextMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no model file " << path;
  auto model = Model::load(path);
  auto tok = Tokenizer::from_gguf(*model->file());
  const auto prompt =
      tok->encode(tok->apply_chat_template(
                      {{"user", "Name three primary colors and say why the sky is blue."}}),
                  true);
  Session cpu(model);
  cpu.prefill(prompt);
  auto gm = gpu::GpuModel::upload(*model);
  gpu::GpuSessionOptions go;
  go.max_prompt = static_cast<int64_t>(prompt.size());
  go.decode_room = 48;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  expect_close_logits(g.logits(), cpu.logits(), 0.05, "smollm2 prefill");
  Sampler s1, s2;
  const auto ref = cpu.generate(32, s1);
  const auto got = g.generate(32, s2);
  std::printf("cpu: %s\ngpu: %s\n", tok->decode(ref.tokens).c_str(),
              tok->decode(got.tokens).c_str());
  EXPECT_EQ(tok->decode(got.tokens), tok->decode(ref.tokens));
}

}  // namespace
}  // namespace kvevict
