// The GPU model runtime (kvevict::gpu) against the CPU runtime (kvevict::Session): logits after
// prefill and after decode steps, greedy text, eviction (GPU path and CPU-plan fallback), batched
// decode, the on-device random weights, gemma3 (sliding-window layers, q/k norms, post-norms,
// GELU, embedding scale, soft-capping) and sampling on the GPU against kvevict::Sampler. The CPU
// side runs the same weights rounded to bf16, so the remaining differences are the GPU's bf16
// activations and K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <set>

#include "cuda/cuda_testing.h"
#include "cuda/launchers.h"
#include "cuda/window_plan.h"
#include "io/model_paths.h"
#include "kvevict/decode_evict.h"
#include "kvevict/io/gguf.h"
#include "kvevict/model/model.h"
#include "kvevict/model/runtime.h"
#include "kvevict/tokenizer.h"
#include "model/session.h"
#include "model/tiny_model.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_runtime.h"
#include "model_cuda/greedy_agreement.h"
#include "model_cuda/tiny_configs.h"
#include "support/testing.h"

namespace kvevict {
namespace {

using testing::tiny_config;
using testing::tiny_gemma;

// Model::random with every weight rounded to bf16 (what the GPU holds).
std::shared_ptr<const Model> bf16_model(const ModelConfig& c, uint64_t seed) {
  auto m = Model::random(c, seed);
  auto& w = const_cast<ModelWeights&>(m->weights());
  auto round = [](WeightMatrix& m) {  // random weights own f32 storage
    HostTensor& t = *m.f32();
    float* p = t.ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(p[i]);
  };
  round(w.token_embd);
  if (!w.output.empty()) round(w.output);
  for (auto& L : w.layers)
    for (WeightMatrix* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) round(*t);
  return m;
}

// Every norm weight (attention, FFN, output, gemma3's q/k and post-norms) set to 1 + U(-0.4, 0.4):
// Model::random makes them all ones, under which a norm applied with the wrong weights would pass.
void perturb_norms(const std::shared_ptr<const Model>& m, uint64_t seed) {
  auto& w = const_cast<ModelWeights&>(m->weights());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.6f, 1.4f);
  auto fill = [&](HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  };
  fill(w.output_norm);
  for (auto& L : w.layers)
    for (HostTensor* t :
         {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm, &L.post_attn_norm, &L.post_ffn_norm})
      if (t->nbytes() > 0) fill(*t);
}

// The CPU model tests' seeded token stream (tests/model/tiny_model.h).
std::vector<int32_t> prompt_ids(int n, int64_t vocab, uint64_t seed) {
  return testing::tokens_for(n, static_cast<int>(vocab), seed);
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

// Teacher forcing: the CPU session (prefilled with the same prompt, f32 activations) follows the
// GPU's tokens; every GPU choice must be the CPU's argmax or within 1% of the largest |logit| of it
// (a near-tie of random weights under bf16), never a clearly worse token, and all but two must be
// the argmax.
void expect_tokens_follow_cpu(Session& cpu, const std::vector<int32_t>& tokens) {
  int exact = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& l = cpu.logits();
    const int32_t best = argmax(l);
    double scale = 0;
    for (float v : l) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    exact += best == tokens[i];
    EXPECT_GE(l[tokens[i]], l[best] - 0.01 * scale)
        << "step " << i << ": gpu chose " << tokens[i] << " (cpu logit " << l[tokens[i]]
        << "), cpu argmax " << best << " (" << l[best] << ")";
    if (i + 1 < tokens.size()) cpu.decode(tokens[i]);
  }
  EXPECT_GE(exact, static_cast<int>(tokens.size()) - 2);
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
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  expect_tokens_follow_cpu(cpu, got.tokens);
  // Strict greedy equality of the whole sequence is checked on the llama shapes below.
  if (GetParam() == Arch::kLlama) {
    Session cpu2(cpu_model);
    cpu2.prefill(prompt);
    EXPECT_EQ(got.tokens, cpu2.generate(24, s1).tokens);
  }
}

// A batch of three copies of one prompt decodes as the prompt alone: every row's logits within
// 1e-3 of the largest, greedy rows alike, three sequences' KV bytes. Both sessions share one
// context and the same step kernels (by default a step of one sequence is fused and a step of three
// is not, fused_step_policy.h, which round differently), fused and unfused.
void expect_batched_decode_equals_single(const std::shared_ptr<const gpu::GpuModel>& gm,
                                         const std::vector<int32_t>& prompt, int steps,
                                         int32_t first_token) {
  const EvictConfig ev{PrefillEviction::from_method("dropkv", Budget{0.3}), {}};
  for (gpu::FusedStep mode : {gpu::FusedStep::kOff, gpu::FusedStep::kOn}) {
    SCOPED_TRACE(mode == gpu::FusedStep::kOn ? "fused step" : "unfused step");
    auto ctx = std::make_shared<gpu::GpuContext>(gm);
    ctx->forward().set_decode_fused(mode);
    gpu::GpuSessionOptions one;
    one.max_prompt = static_cast<int64_t>(prompt.size());
    one.decode_room = 8;
    gpu::GpuSession s1(ctx, one);
    s1.prefill(prompt, ev);
    gpu::GpuSessionOptions three = one;
    three.batch = 3;
    gpu::GpuSession s3(ctx, three);
    s3.prefill(prompt, ev);
    s3.replicate_sequence();
    for (int step = 0; step < steps; ++step) {
      const int32_t tok = first_token + step;
      s1.decode({tok});
      s3.decode({tok, tok, tok});
      const auto ref = s1.logits();
      for (int b = 0; b < 3; ++b) expect_close_logits(s3.logits(b), ref, 1e-3, "batch row");
    }
    const auto ids = s3.decode_greedy(4);  // greedy on the device: every row the same tokens
    EXPECT_EQ(ids[0], ids[1]);
    EXPECT_EQ(ids[0], ids[2]);
    EXPECT_EQ(s3.kv_bytes_total(), 3 * s3.kv_bytes_per_sequence());
  }
}

TEST_P(GpuRuntime, BatchedDecodeEqualsSingleSequence) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(GetParam());
  expect_batched_decode_equals_single(gpu::GpuModel::random(c, 4), prompt_ids(200, c.vocab_size, 8),
                                      3, 7);
}

INSTANTIATE_TEST_SUITE_P(Archs, GpuRuntime, ::testing::Values(Arch::kLlama, Arch::kQwen2),
                         [](const auto& info) {
                           return std::string(info.param == Arch::kLlama ? "llama" : "qwen2");
                         });

// Prefill eviction through LayerEvictor on the cuda backend (every method and policy): it keeps
// what the CPU runtime keeps, memory shrinks, and the logits after eviction follow the CPU's.
void check_eviction(const std::string& method, double budget) {
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
  int64_t before = 0, after = 0;
  for (auto b : g.stats().kv_bytes_before) before += b;
  for (auto b : g.stats().kv_bytes_after) after += b;
  EXPECT_LT(after, before);
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

TEST(GpuRuntimeEviction, DropKVOnTheGpu) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("dropkv", 0.25);
}

TEST(GpuRuntimeEviction, AdaKVOnTheGpu) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("adadropkv", 0.25);
}

// criticalkv weighs values by ||W_o^h v||_1: the cuda scores read this layer's device output
// projection (bf16, as the CPU session's bf16 model holds it).
TEST(GpuRuntimeEviction, CriticalKVOnTheGpu) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("criticalkv", 0.25);
}

TEST(GpuRuntimeEviction, SnapKVOnTheGpu) {
  KVEVICT_REQUIRE_GPU();
  check_eviction("snapkv", 0.3);
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

// Perplexity's teacher-forced NLLs (ModelRuntime::token_nlls) with decode-time eviction cutting
// every step: the GPU's batch (a row a text, NLLs on the device) against each text alone through
// the session interface on the GPU, and against the CPU runtime. The first NLL of a text follows
// its own one-token prefill, before any batching or eviction: it must equal the host's
// double-precision logits_nll to float rounding. Later steps round by the batch's shape (and the
// CPU by its f32 activations), so each text's mean NLL is compared.
TEST(GpuRuntimeTokenNlls, BatchEqualsOneAtATimeAndTheCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(Arch::kLlama);
  auto model = bf16_model(c, 51);
  RuntimeOptions go, co;
  go.device = Device::kCuda;
  co.kv_dtype = DType::kBF16;
  const auto gpu_rt = ModelRuntime::create(model, go);
  const auto cpu_rt = ModelRuntime::create(model, co);
  std::vector<std::vector<int32_t>> texts;
  for (uint64_t seed : {61, 62, 63}) texts.push_back(prompt_ids(160, c.vocab_size, seed));
  EvictConfig ev;
  ev.decode.enabled = true;
  ev.decode.options.score = decode_score_parse("h2o");
  ev.decode.options.budget = 48;
  ev.decode.options.slack = 0;  // every step past 48 rows cuts
  ev.decode.options.recent = 8;
  const auto batch = gpu_rt->token_nlls(texts, ev);
  const auto alone = gpu_rt->token_nlls_one_at_a_time(texts, ev);  // batch-1 sessions, host NLLs
  const auto cpu = cpu_rt->token_nlls(texts, ev);
  ASSERT_EQ(batch.size(), texts.size());
  auto mean = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return s / static_cast<double>(x.size());
  };
  for (size_t t = 0; t < texts.size(); ++t) {
    SCOPED_TRACE(t);
    ASSERT_EQ(batch[t].size(), texts[t].size() - 1);
    EXPECT_NEAR(batch[t][0], alone[t][0], 1e-5 * (1 + alone[t][0]));
    EXPECT_NEAR(mean(batch[t]), mean(alone[t]), 0.01 * mean(alone[t]));
    EXPECT_NEAR(mean(batch[t]), mean(cpu[t]), 0.02 * mean(cpu[t]));
    std::printf("text %zu: mean NLL batch %.5f, alone %.5f, cpu %.5f\n", t, mean(batch[t]),
                mean(alone[t]), mean(cpu[t]));
  }
  // A text of another length runs as its own group; a one-token text is refused.
  texts.push_back(prompt_ids(40, c.vocab_size, 64));
  EXPECT_EQ(gpu_rt->token_nlls(texts, ev).back().size(), 39u);
  EXPECT_THROW(gpu_rt->token_nlls({{1}}, ev), Error);
}

// The step scores three ways: inside the decode attention launch (the default), in a second
// kernel reading the logits the attention exported, and in a second kernel recomputing q.k from
// K: the same rows are cut at the same steps and the logits stay together, for a term of each
// kind (attention sum: z and lse only; dropkv and obcache_vk: z, a and V).
TEST(GpuRuntimeDecodeEviction, FusedScoresEqualUnfused) {
  KVEVICT_REQUIRE_GPU();
  for (Arch arch : {Arch::kLlama, Arch::kQwen2}) {
    const ModelConfig c = tiny_config(arch);
    auto gm = gpu::GpuModel::random(c, 77);
    const auto prompt = prompt_ids(311, c.vocab_size, 29);
    for (const char* score : {"h2o", "dropkv", "obcache_vk"}) {
      SCOPED_TRACE(std::string(arch_name(arch)) + " " + score);
      EvictConfig ev;
      ev.decode.enabled = true;
      ev.decode.options.score = decode_score_parse(score);
      ev.decode.options.budget = 101;
      ev.decode.options.slack = 5;
      ev.decode.options.recent = 9;
      gpu::GpuSessionOptions go;
      go.max_prompt = 311;
      go.decode_room = 4;
      go.scores_in_attention_min_segments = 1;  // 2 segments: fused only when forced
      gpu::GpuSession in_attention(gm, go);
      go.scores_in_attention = false;
      gpu::GpuSession separate(gm, go);
      go.fused_decode_scores = false;
      gpu::GpuSession unfused(gm, go);
      in_attention.prefill(prompt, ev);
      separate.prefill(prompt, ev);
      unfused.prefill(prompt, ev);
      for (int step = 0; step < 14; ++step) {
        const int32_t tok = prompt_ids(1, c.vocab_size, 900 + step)[0];
        in_attention.decode({tok});
        separate.decode({tok});
        unfused.decode({tok});
        for (int l = 0; l < c.n_layers; ++l) {
          ASSERT_EQ(in_attention.kv_rows(l), unfused.kv_rows(l))
              << "step " << step << " layer " << l;
          ASSERT_EQ(separate.kv_rows(l), unfused.kv_rows(l)) << "step " << step << " layer " << l;
        }
        expect_close_logits(in_attention.logits(), unfused.logits(), 1e-3, score);
        expect_close_logits(separate.logits(), unfused.logits(), 1e-3, score);
      }
      EXPECT_EQ(in_attention.stats().decode_evictions, unfused.stats().decode_evictions);
      EXPECT_EQ(separate.stats().decode_evictions, unfused.stats().decode_evictions);
      EXPECT_GT(unfused.stats().decode_evictions, 0);
    }
  }
}

TEST(GpuRuntimeErrors, RefusesBadConfigsAndSizes) {
  KVEVICT_REQUIRE_GPU();
  ModelConfig c = tiny_config(Arch::kLlama);
  c.head_dim = c.value_dim = 96;
  EXPECT_THROW(gpu::check_supported(c), Error);  // head dim 96
  c = tiny_config(Arch::kLlama);
  c.n_heads = 32;
  c.n_kv_heads = 2;
  EXPECT_THROW(gpu::check_supported(c), Error);  // GQA group 16
  EXPECT_NO_THROW(gpu::check_supported(ModelConfig::preset("gemma3-270m")));
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

// The real checkpoint, where present (KVEVICT_MODEL_DIR or <source>/models): logits and greedy
// text of the CPU and GPU runtimes agree.
void check_real_model_matches_cpu(const char* file, const char* label) {
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no model file " << path;
  auto model = Model::load(path);
  auto tok = Tokenizer::from_gguf(*model->file());
  const auto prompt =
      tok->encode(tok->apply_chat_template(
                      {{"user", "Name three primary colors and say why the sky is blue."}}),
                  true);
  // One prefill a device (a snapshot), and two sessions from each: the free-running pair and the
  // teacher-forced pair below.
  const PrefillSnapshot cpu_snap = Session::prefill_snapshot(model, prompt);
  Session cpu = Session::from_snapshot(model, cpu_snap, EvictConfig::none());
  auto gm = gpu::GpuModel::upload(*model);
  gpu::GpuSessionOptions go;
  go.max_prompt = static_cast<int64_t>(prompt.size());
  go.decode_room = 48;
  // Both GPU sessions on one context: a snapshot loads only into sessions of the context that
  // made it.
  auto ctx = std::make_shared<gpu::GpuContext>(gm);
  gpu::GpuSession g(ctx, go);
  const auto gpu_snap = g.prefill_snapshot(prompt, PrefillOptions{});
  g.load_rows(*gpu_snap, {EvictConfig::none()});
  expect_close_logits(g.logits(), cpu.logits(), 0.05, label);
  // Free-running text is printed; the CPU's greedy tokens teacher-forced through both sessions
  // (the second pair) must agree up to near-ties (greedy_agreement.h: the text follows the first
  // near-tie either way, e.g. SmolLM2's "Red" / "red" on the H200, 2026-12-02).
  Sampler s1, s2;
  const auto ref = cpu.generate(32, s1);
  const auto got = g.generate(32, s2);
  std::printf("cpu: %s\ngpu: %s\n", tok->decode(ref.tokens).c_str(),
              tok->decode(got.tokens).c_str());
  Session cpu2 = Session::from_snapshot(model, cpu_snap, EvictConfig::none());
  gpu::GpuSession g2(ctx, go);
  g2.load_rows(*gpu_snap, {EvictConfig::none()});
  testing::expect_greedy_agreement(cpu2, g2, ref.tokens, true, label);
}

TEST(GpuRuntimeGolden, SmolLM2GreedyTokensAgreeWithCpu) {
  KVEVICT_REQUIRE_GPU();
  check_real_model_matches_cpu(io::kSmolLM2File, "smollm2 prefill");
}

// ---------------------------------------------------------------------------------------------
// The window kernel's sliding window (src/cuda/window_forward.cu, WindowArgs::sliding_window), as
// the runtime's prefill calls it: the chunk's T queries at positions n - T .. n - 1 over keys
// 0 .. n - 1, query at position p seeing keys p - W + 1 .. p. Against a double reference.
struct SlidingCase {
  int hq, hkv, d;
  int64_t n;
  int t, window;
};

void run_sliding_case(const SlidingCase& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "Hq " << c.hq << " Hkv " << c.hkv << " d " << c.d << " n "
                                    << c.n << " T " << c.t << " W " << c.window);
  const size_t nq = static_cast<size_t>(c.hq) * c.t * c.d, nk = c.hkv * c.n * c.d;
  auto q = cuda::testing::round_to(testing::normal_floats(nq, seed, 2.0f), DType::kBF16);
  auto k = cuda::testing::round_to(testing::normal_floats(nk, seed + 1, 1.0f), DType::kBF16);
  auto v = cuda::testing::round_to(testing::normal_floats(nk, seed + 2, 1.0f), DType::kBF16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const int G = c.hq / c.hkv;
  std::vector<double> ref_a(nq), ref_lse(static_cast<size_t>(c.hq) * c.t);
  for (int h = 0; h < c.hq; ++h)
    for (int t = 0; t < c.t; ++t) {
      const int64_t p = c.n - c.t + t, lo = std::max<int64_t>(0, p - c.window + 1);
      const float* qr = &q[(static_cast<size_t>(h) * c.t + t) * c.d];
      std::vector<double> z;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        const float* kr = &k[(static_cast<size_t>(h / G) * c.n + j) * c.d];
        double dot = 0;
        for (int i = 0; i < c.d; ++i) dot += static_cast<double>(qr[i]) * kr[i];
        z.push_back(dot * scale);
        mx = std::max(mx, z.back());
      }
      double sum = 0;
      for (double& x : z) sum += (x = std::exp(x - mx));
      ref_lse[static_cast<size_t>(h) * c.t + t] = mx + std::log(sum);
      double* out = &ref_a[(static_cast<size_t>(h) * c.t + t) * c.d];
      for (int64_t j = lo; j <= p; ++j) {
        const float* vr = &v[(static_cast<size_t>(h / G) * c.n + j) * c.d];
        for (int i = 0; i < c.d; ++i) out[i] += z[j - lo] / sum * vr[i];
      }
    }
  cuda::testing::DeviceBuffer<uint16_t> dq(nq), dk(nk), dv(nk);
  cuda::testing::DeviceBuffer<float> dout(nq), dlse(ref_lse.size());
  ASSERT_TRUE(dq.ok() && dk.ok() && dv.ok() && dout.ok() && dlse.ok());
  dq.upload(cuda::testing::encode16(q, DType::kBF16));
  dk.upload(cuda::testing::encode16(k, DType::kBF16));
  dv.upload(cuda::testing::encode16(v, DType::kBF16));
  dout.poison();
  dlse.poison();
  const cuda::detail::WindowArgs wa = cuda::testing::contiguous_window_args(
      DType::kBF16, dq.data(), dk.data(), dv.data(), c.hq, c.hkv, c.d, c.t, c.n, scale, c.window);
  const int sms = cuda::detail::current_sm_count();
  const size_t ws = cuda::detail::window_forward_scratch_bytes(wa, true, sms);
  cuda::testing::DeviceBuffer<char> scratch(ws);
  ASSERT_TRUE(scratch.ok());
  KVEVICT_ASSERT_CUDA(cuda::detail::launch_window_forward(wa, dout.data(), dlse.data(),
                                                          scratch.data(), ws, sms, nullptr));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(testing::all_close(dlse.download(), ref_lse, 1e-4, 1e-5, "lse"));
  // P is rounded to bf16 before P V (as in CudaWindowForward.MatchesDoubleReference).
  EXPECT_TRUE(testing::all_close(dout.download(), ref_a, 0.75e-2, 1.5e-2, "a"));
  EXPECT_TRUE(dout.sentinels_intact() && dlse.sentinels_intact()) << "write outside the outputs";
}

TEST(GpuWindowKernel, SlidingWindowMatchesDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  const SlidingCase cases[] = {
      {8, 2, 64, 300, 77, 37},       // window shorter than the chunk, odd sizes
      {4, 1, 256, 1157, 389, 512},   // gemma3-270m's heads, a chunk past two windows
      {4, 1, 256, 509, 509, 512},    // window longer than the prompt: plain causal
      {6, 2, 256, 50, 50, 1},        // window 1: each query sees only itself
      {32, 8, 128, 4099, 16, 3000},  // many splits, some entirely before every row's window
      {4, 2, 128, 2049, 1, 100},     // decode-like: one query
  };
  uint64_t seed = 40;
  for (const SlidingCase& c : cases) run_sliding_case(c, seed += 3);
}

// ---------------------------------------------------------------------------------------------
// gemma3

std::shared_ptr<const Model> gemma_model(const ModelConfig& c, uint64_t seed) {
  auto m = bf16_model(c, seed);
  perturb_norms(m, seed + 1);
  return m;
}

// Prefill of n tokens in chunks of `chunk`, then `steps` decode steps: logits after the prefill
// and after every step within `rel` of the CPU's; per-layer rows as the CPU's (sliding layers keep
// min(position, window)).
void check_gemma_logits(const ModelConfig& c, const std::shared_ptr<const Model>& cpu_model,
                        const std::shared_ptr<const gpu::GpuModel>& gm, int n, int chunk, int steps,
                        double rel) {
  SCOPED_TRACE(c.name + " n=" + std::to_string(n));
  const auto prompt = prompt_ids(n, c.vocab_size, 1000 + n);
  SessionOptions so;
  so.chunk = chunk;
  Session cpu(cpu_model, so);
  cpu.prefill(prompt);
  gpu::GpuSessionOptions go;
  go.max_prompt = n;
  go.prefill_chunk = chunk;
  go.decode_room = steps + 2;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  expect_close_logits(g.logits(), cpu.logits(), rel, "gemma prefill");
  for (int step = 0; step <= steps; ++step) {
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t pos = n + step;
      const int64_t want = c.is_sliding(l) ? std::min<int64_t>(pos, c.sliding_window) : pos;
      ASSERT_EQ(g.kv_rows(l), want * c.n_kv_heads) << "layer " << l << " step " << step;
      ASSERT_EQ(cpu.kv_rows(l), want * c.n_kv_heads) << "cpu layer " << l << " step " << step;
    }
    if (step == steps) break;
    const int32_t tok = prompt_ids(1, c.vocab_size, 500 + step)[0];
    cpu.decode(tok);
    g.decode({tok});
    expect_close_logits(g.logits(), cpu.logits(), rel, "gemma decode");
  }
}

TEST(GpuGemma, TinyGemmaLogitsMatchCpuAcrossTheWindow) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_gemma();
  auto cpu_model = gemma_model(c, 51);
  auto gm = upload(cpu_model);
  // Shorter than the window, one short of it (the ring wraps while decoding), a chunk that
  // straddles it, several windows in chunks of 50.
  for (int n : {23, 35, 61, 203}) check_gemma_logits(c, cpu_model, gm, n, 50, 5, 0.03);
}

TEST(GpuGemma, Gemma270mShapeLogitsMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = ModelConfig::preset("gemma3-270m");
  auto cpu_model = gemma_model(c, 61);
  auto gm = upload(cpu_model);
  // Window 512: below it, one short of it (decode wraps the ring), above it, above two windows.
  for (int n : {333, 509, 701, 1157}) check_gemma_logits(c, cpu_model, gm, n, 384, 4, 0.03);
}

TEST(GpuGemma, RandomOnDeviceEqualsUploadedHostRandom) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_gemma();
  auto a = gpu::GpuModel::random(c, 8);
  auto b = upload(Model::random(c, 8));
  const auto prompt = prompt_ids(91, c.vocab_size, 2);
  gpu::GpuSessionOptions go;
  go.max_prompt = 91;
  gpu::GpuSession sa(a, go), sb(b, go);
  sa.prefill(prompt);
  sb.prefill(prompt);
  EXPECT_EQ(compare(sa.logits(), sb.logits()).max_abs, 0.0);
}

// Greedy tokens under teacher forcing (as GreedyTokensMatchCpu): every GPU token is the CPU's
// argmax or within 1% of it; nearly all are the argmax.
TEST(GpuGemma, Gemma270mShapeGreedyTokensMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = ModelConfig::preset("gemma3-270m");
  auto cpu_model = gemma_model(c, 71);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(613, c.vocab_size, 7);
  gpu::GpuSessionOptions go;
  go.max_prompt = 613;
  go.decode_room = 24;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt);
  Sampler greedy;
  const auto got = g.generate(20, greedy);
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  expect_tokens_follow_cpu(cpu, got.tokens);
}

// Prefill eviction on gemma3: full-attention layers keep the CPU's rows, sliding layers keep
// their window, memory shrinks, the next step follows the CPU.
void check_gemma_prefill_eviction(const ModelConfig& c, int n, int chunk, const std::string& method,
                                  double budget) {
  SCOPED_TRACE(c.name + " " + method + " n=" + std::to_string(n));
  auto cpu_model = gemma_model(c, 81);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(n, c.vocab_size, 17);
  const EvictConfig ev{PrefillEviction::from_method(method, Budget{budget}), {}};
  SessionOptions so;
  so.kv_dtype = DType::kBF16;
  so.chunk = chunk;
  Session cpu(cpu_model, so);
  cpu.prefill(prompt, ev);
  gpu::GpuSessionOptions go;
  go.max_prompt = n;
  go.prefill_chunk = chunk;
  go.decode_room = 4;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt, ev);
  int64_t before = 0, after = 0;
  for (auto b : g.stats().kv_bytes_before) before += b;
  for (auto b : g.stats().kv_bytes_after) after += b;
  EXPECT_LT(after, before);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(g.kv_rows(l), cpu.kv_rows(l)) << "layer " << l;
    if (c.is_sliding(l)) EXPECT_EQ(g.kv_rows(l), int64_t{c.sliding_window} * c.n_kv_heads);
  }
  expect_close_logits(g.logits(), cpu.logits(), 0.03, "gemma prefill logits");
  for (int step = 0; step < 3; ++step) {
    const int32_t tok = 3 + step;
    cpu.decode(tok);
    g.decode({tok});
    expect_close_logits(g.logits(), cpu.logits(), 0.08, method.c_str());
  }
}

TEST(GpuGemma, PrefillEvictionDropKV) {
  KVEVICT_REQUIRE_GPU();
  check_gemma_prefill_eviction(tiny_gemma(), 187, 64, "dropkv", 0.25);
  check_gemma_prefill_eviction(ModelConfig::preset("gemma3-270m"), 1157, 512, "dropkv", 0.2);
}

TEST(GpuGemma, PrefillEvictionAdaKVPolicy) {
  KVEVICT_REQUIRE_GPU();
  check_gemma_prefill_eviction(tiny_gemma(), 187, 64, "adadropkv", 0.25);
}

// Decode-time eviction on gemma3: only the full-attention layers are scored and cut, at the same
// steps as the CPU's DecodeEvictor; sliding layers keep their window.
void check_gemma_decode_eviction(const ModelConfig& c, int n, int budget,
                                 const std::string& score) {
  SCOPED_TRACE(c.name + " " + score);
  auto cpu_model = gemma_model(c, 91);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(n, c.vocab_size, 19);
  EvictConfig ev;
  ev.decode.enabled = true;
  ev.decode.options.score = decode_score_parse(score);
  ev.decode.options.budget = budget;
  ev.decode.options.slack = 3;
  ev.decode.options.recent = 8;
  SessionOptions so;
  so.kv_dtype = DType::kBF16;
  Session cpu(cpu_model, so);
  cpu.prefill(prompt, ev);
  gpu::GpuSessionOptions go;
  go.max_prompt = n;
  go.decode_room = 4;
  gpu::GpuSession g(gm, go);
  g.prefill(prompt, ev);
  for (int step = 0; step < 10; ++step) {
    const int32_t tok = prompt_ids(1, c.vocab_size, 700 + step)[0];
    cpu.decode(tok);
    g.decode({tok});
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_EQ(g.kv_rows(l), cpu.kv_rows(l)) << "step " << step << " layer " << l;
      if (c.is_sliding(l))
        ASSERT_EQ(g.kv_rows(l), std::min<int64_t>(n + step + 1, c.sliding_window) * c.n_kv_heads);
    }
    expect_close_logits(g.logits(), cpu.logits(), 0.08, score.c_str());
  }
  EXPECT_GT(g.stats().decode_evictions, 0);
  EXPECT_EQ(g.stats().decode_evictions, cpu.stats().decode_evictions);
}

TEST(GpuGemma, DecodeEvictionMatchesCpu) {
  KVEVICT_REQUIRE_GPU();
  check_gemma_decode_eviction(tiny_gemma(), 121, 24, "dropkv");
  check_gemma_decode_eviction(tiny_gemma(), 121, 24, "h2o");
  check_gemma_decode_eviction(ModelConfig::preset("gemma3-270m"), 777, 96, "dropkv");
}

// Ring layers survive replicate_sequence: every batch row decodes like the single sequence.
TEST(GpuGemma, BatchedDecodeEqualsSingleSequence) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_gemma();
  expect_batched_decode_equals_single(upload(gemma_model(c, 5)), prompt_ids(83, c.vocab_size, 8), 4,
                                      11);
}

TEST(GpuRuntimeGolden, Gemma3GreedyTokensAgreeWithCpu) {
  KVEVICT_REQUIRE_GPU();
  check_real_model_matches_cpu(io::kGemma3File, "gemma3 prefill");
}

// The gemma3-270m preset is the real file's shape and conventions (needs no GPU; skipped without
// the file).
// ---------------------------------------------------------------------------------------------
// Sampling on the GPU against kvevict::Sampler

// Rows of random logits with repeated values (ties) and a few far-below entries.
std::vector<float> random_logits(int rows, int64_t V, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(rows) * V);
  for (auto& x : l) x = nd(rng);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 40; ++i) {
      float* row = l.data() + static_cast<int64_t>(r) * V;
      row[rng() % V] = row[rng() % V];  // duplicates: ties must break toward the lower id
      row[rng() % V] = -60.0f;
    }
  return l;
}

// The first draw of Sampler(seed)'s generator, as a unit draw.
double first_draw(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

TEST(GpuSampling, SameTokenAsTheCpuSamplerForTheSameDraw) {
  KVEVICT_REQUIRE_GPU();
  struct Opt {
    float t;
    int k;
    float p;
  };
  const std::vector<Opt> opts = {{0.7f, 0, 1.0f},  {1.3f, 40, 1.0f}, {0.9f, 0, 0.9f},
                                 {1.0f, 50, 0.8f}, {2.0f, 0, 0.5f},  {0.3f, 7, 0.99f}};
  const int R = 3;
  int checked = 0;
  for (int64_t V : {int64_t{4099}, int64_t{262144}}) {
    for (size_t oi = 0; oi < opts.size(); ++oi) {
      for (uint64_t trial = 0; trial < 4; ++trial) {
        const auto logits = random_logits(R, V, 100 * V + 10 * oi + trial, 2.5f);
        SamplerOptions so;
        so.temperature = opts[oi].t;
        so.top_k = opts[oi].k;
        so.top_p = opts[oi].p;
        std::vector<double> u(R);
        std::vector<int32_t> want(R);
        for (int r = 0; r < R; ++r) {
          so.seed = 7919 * trial + 31 * r + oi;
          u[r] = first_draw(so.seed);
          Sampler cpu(so);
          want[r] =
              cpu.sample(std::vector<float>(logits.begin() + r * V, logits.begin() + (r + 1) * V));
        }
        const auto got = gpu::sample_logits(logits, R, so, u);
        EXPECT_EQ(got, want) << "V " << V << " options " << so.describe();
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 6 * 4);
}

TEST(GpuSampling, EdgeCases) {
  KVEVICT_REQUIRE_GPU();
  const int64_t V = 10007;
  auto logits = random_logits(2, V, 5, 1.0f);
  // Row 0: the largest logit twice (ids 17 and 4000): every greedy-like rule picks 17.
  logits[17] = logits[4000] = 50.0f;
  const int32_t am1 = argmax(std::vector<float>(logits.begin() + V, logits.end()));
  auto run = [&](float t, int k, float p, double u0, double u1) {
    SamplerOptions so;
    so.temperature = t;
    so.top_k = k;
    so.top_p = p;
    return gpu::sample_logits(logits, 2, so, {u0, u1});
  };
  // temperature 0 = argmax (no draws needed), top-k 1 = argmax at any temperature, a tiny top-p
  // keeps only the first token, and a zero draw takes the first sorted token.
  EXPECT_EQ(run(0.0f, 0, 1.0f, 0.5, 0.5), (std::vector<int32_t>{17, am1}));
  for (float t : {0.05f, 1.0f, 50.0f}) {
    EXPECT_EQ(run(t, 1, 1.0f, 0.999, 0.999), (std::vector<int32_t>{17, am1})) << t;
    EXPECT_EQ(run(t, 0, 1e-6f, 0.999, 0.999), (std::vector<int32_t>{17, am1})) << t;
    EXPECT_EQ(run(t, 0, 1.0f, 0.0, 0.0), (std::vector<int32_t>{17, am1})) << t;
  }
  // top-k 2 on row 0 at a high temperature: the two tied tokens, the lower id first; the last
  // draw below 1 takes the second.
  EXPECT_EQ(run(1.0f, 2, 1.0f, 0.25, 0.0)[0], 17);
  EXPECT_EQ(run(1.0f, 2, 1.0f, 0.75, 0.0)[0], 4000);
  EXPECT_EQ(run(1.0f, 2, 1.0f, std::nextafter(1.0, 0.0), 0.0)[0], 4000);
  // top-k beyond V is off.
  SamplerOptions big;
  big.temperature = 1.0f;
  big.top_k = static_cast<int>(V) + 9;
  big.seed = 3;
  Sampler cpu(big);
  EXPECT_EQ(gpu::sample_logits(std::vector<float>(logits.begin() + V, logits.end()), 1, big,
                               {first_draw(3)})[0],
            cpu.sample(std::vector<float>(logits.begin() + V, logits.end())));
  // Clear errors: a draw outside [0, 1), the wrong number of draws, bad options.
  EXPECT_THROW(run(1.0f, 0, 1.0f, 1.0, 0.0), Error);
  EXPECT_THROW(run(1.0f, 0, 1.0f, -0.1, 0.0), Error);
  SamplerOptions so;
  so.temperature = 1.0f;
  EXPECT_THROW(gpu::sample_logits(logits, 2, so, {0.5}), Error);
  EXPECT_THROW(gpu::sample_logits(logits, 3, so, {0.5, 0.5, 0.5}), Error);  // 20014 % 3 != 0
  so.top_p = 0.0f;
  EXPECT_THROW(gpu::sample_logits(logits, 2, so, {0.5, 0.5}), Error);
}

// GpuSession::generate samples on the device: the same seed gives the same tokens, and the CPU
// session following the GPU's tokens with a Sampler of the same options (the same draws) picks
// the same token at (nearly) every step.
TEST(GpuSampling, GenerateIsSeededAndFollowsTheCpuSampler) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_config(Arch::kLlama);
  auto cpu_model = bf16_model(c, 23);
  auto gm = upload(cpu_model);
  const auto prompt = prompt_ids(150, c.vocab_size, 3);
  // Random weights make peaked logits (greedy repeats one token): a high temperature spreads the
  // distribution so that the draws matter.
  SamplerOptions so;
  so.temperature = 40.0f;
  so.top_k = 200;
  so.top_p = 0.95f;
  so.seed = 42;
  gpu::GpuSessionOptions go;
  go.max_prompt = 150;
  go.decode_room = 20;
  auto run = [&](uint64_t seed) {
    gpu::GpuSession g(gm, go);
    g.prefill(prompt);
    SamplerOptions o = so;
    o.seed = seed;
    Sampler s(o);
    return g.generate(16, s).tokens;
  };
  const auto a = run(42), b = run(42), other = run(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  Session cpu(cpu_model);
  cpu.prefill(prompt);
  Sampler cs(so);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same += cs.sample(cpu.logits()) == a[i];
    if (i + 1 < a.size()) cpu.decode(a[i]);
  }
  EXPECT_GE(same, static_cast<int>(a.size()) - 1);
}

}  // namespace
}  // namespace kvevict
