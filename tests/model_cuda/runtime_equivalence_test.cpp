// The CPU and GPU runtimes through the one interface (ModelRuntime / InferenceSession) on the real
// checkpoints (skipped when the model files are absent): the same code drives both, so what
// differs is only the device's arithmetic (GPU: bf16 weights and cache; CPU: f32).
//   - every method and policy keeps the same positions, except near-ties: a kept set may differ
//     from the CPU's in at most 5% of a layer's kept rows (bf16 activations reorder near-equal
//     scores); the counts per layer are equal;
//   - 32 greedy tokens are equal at budget 1.0 and at 20% (dropkv);
//   - answer_batch (one batch of rows on the GPU) gives every config the answer that
//     from_snapshot + generate gives it alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "cuda/cuda_testing.h"
#include "kvevict/io/model_paths.h"
#include "kvevict/model/runtime.h"
#include "kvevict/tokenizer.h"

namespace kvevict {
namespace {

std::shared_ptr<const Model> load_or_skip(const char* file) {
  const std::string path = io::model_path(KVEVICT_SOURCE_DIR, file);
  if (!std::ifstream(path).good()) return nullptr;
  return Model::load(path);
}

std::vector<int32_t> prompt_of(const Model& m, int repeat) {
  auto tok = Tokenizer::from_gguf(*m.file());
  std::string text;
  for (int i = 0; i < repeat; ++i)
    text += "The quick brown fox jumps over the lazy dog while the river runs to the sea. ";
  text += "The special magic number is 4729. Remember it. ";
  for (int i = 0; i < repeat / 2; ++i) text += "Clouds drift over hills and the wind is calm. ";
  return tok->encode(tok->apply_chat_template({{"user", text + "What is the magic number?"}}),
                     true);
}

struct Runtimes {
  std::shared_ptr<const ModelRuntime> cpu, gpu;
};

// The CPU runtime caches K and V in bf16, as the GPU does, so both score the same rounded keys
// and values (the GPU's activations are bf16 too; the CPU's stay f32).
Runtimes both(const std::shared_ptr<const Model>& model) {
  RuntimeOptions c, g;
  c.kv_dtype = DType::kBF16;
  g.device = Device::kCuda;
  return {ModelRuntime::create(model, c), ModelRuntime::create(model, g)};
}

void check_kept_sets(const char* file) {
  auto model = load_or_skip(file);
  if (!model) GTEST_SKIP() << "no model file " << file;
  const Runtimes rt = both(model);
  const auto prompt = prompt_of(*model, 40);
  const ModelConfig& c = model->config();
  for (const char* m : {"dropkv", "adadropkv", "obcache_v", "obcache_k", "obcache_vk", "snapkv",
                        "adakv", "h2o", "tova", "knorm", "keydiff", "vatp", "criticalkv",
                        "streamingllm", "random"}) {
    SCOPED_TRACE(m);
    const EvictConfig cfg{PrefillEviction::make(method_parse(m), Budget{0.2}), {}};
    auto cs = rt.cpu->session(static_cast<int64_t>(prompt.size()) + 4);
    auto gs = rt.gpu->session(static_cast<int64_t>(prompt.size()) + 4);
    cs->prefill(prompt, cfg);
    gs->prefill(prompt, cfg);
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_EQ(gs->kv_rows(l), cs->kv_rows(l)) << "layer " << l;
      int64_t differ = 0, kept = 0;
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const auto a = cs->kept_positions(l, h), b = gs->kept_positions(l, h);
        const std::set<int32_t> sa(a.begin(), a.end()), sb(b.begin(), b.end());
        ASSERT_EQ(sa.size(), a.size()) << "duplicate positions, layer " << l;
        for (int32_t p : sa) differ += sb.count(p) == 0;
        kept += static_cast<int64_t>(a.size());
      }
      // Query-free scores (knorm, keydiff read K rounded to bf16 on both sides; random and
      // streamingllm do not read data) must agree exactly.
      const std::string name = m;
      std::printf("%s layer %d: %lld of %lld kept positions differ\n", m, l,
                  static_cast<long long>(differ), static_cast<long long>(kept));
      if (name == "random" || name == "streamingllm")
        EXPECT_EQ(differ, 0) << "layer " << l;
      else
        EXPECT_LE(differ, std::max<int64_t>(1, kept / 20))
            << "layer " << l << ": " << differ << " of " << kept << " kept positions differ";
    }
  }
}

TEST(RuntimeEquivalence, SmolLM2KeptSetsMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  check_kept_sets(io::kSmolLM2File);
}

TEST(RuntimeEquivalence, Gemma3KeptSetsMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  check_kept_sets(io::kGemma3File);
}

void check_greedy(const char* file) {
  auto model = load_or_skip(file);
  if (!model) GTEST_SKIP() << "no model file " << file;
  const Runtimes rt = both(model);
  auto tok = Tokenizer::from_gguf(*model->file());
  const auto prompt = prompt_of(*model, 30);
  for (double budget : {1.0, 0.2}) {
    SCOPED_TRACE(budget);
    EvictConfig cfg;
    if (budget < 1.0) cfg.prefill = PrefillEviction::make(method_parse("dropkv"), Budget{budget});
    std::vector<std::vector<int32_t>> out;
    for (const auto* r : {rt.cpu.get(), rt.gpu.get()}) {
      auto s = r->session(static_cast<int64_t>(prompt.size()) + 40);
      s->prefill(prompt, cfg);
      Sampler greedy;
      out.push_back(s->generate(32, greedy).tokens);
    }
    size_t same = 0;
    while (same < out[0].size() && same < out[1].size() && out[0][same] == out[1][same]) ++same;
    std::printf("budget %.1f: %zu of 32 leading tokens equal\n cpu: %s\n gpu: %s\n", budget, same,
                tok->decode(out[0]).c_str(), tok->decode(out[1]).c_str());
    EXPECT_EQ(out[1], out[0]) << "greedy tokens differ";
  }
}

TEST(RuntimeEquivalence, SmolLM2GreedyTokensMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  check_greedy(io::kSmolLM2File);
}

TEST(RuntimeEquivalence, Gemma3GreedyTokensMatchCpu) {
  KVEVICT_REQUIRE_GPU();
  check_greedy(io::kGemma3File);
}

// answer_batch: every config's row of one batch gives the answer it gets alone, on both devices.
void check_batch_equals_single(Device device, const char* file) {
  auto model = load_or_skip(file);
  if (!model) GTEST_SKIP() << "no model file " << file;
  RuntimeOptions o;
  o.device = device;
  const auto rt = ModelRuntime::create(model, o);
  auto tok = Tokenizer::from_gguf(*model->file());
  const auto prompt = prompt_of(*model, 20);
  std::vector<EvictConfig> configs(1);  // the full cache first
  for (const char* m : {"dropkv", "adadropkv", "snapkv", "h2o", "tova", "obcache_vk"})
    for (double b : {0.1, 0.3}) configs.push_back({PrefillEviction::make(method_parse(m), Budget{b}), {}});
  PrefillOptions popt;
  popt.keep_queries = -1;  // h2o reads every query
  const auto snap = rt->prefill_snapshot(prompt, popt);
  const std::vector<int32_t> question = tok->encode(" The number is", false);
  auto stop = [&](int32_t id) { return tok->is_end_of_generation(id); };
  const auto batch = rt->answer_batch(*snap, configs, question, 16, stop);
  ASSERT_EQ(batch.size(), configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    auto s = rt->from_snapshot(*snap, configs[i], static_cast<int64_t>(question.size()) + 17);
    s->append(question);
    EXPECT_EQ(batch[i].kept_rows_per_head, kept_rows_per_head(*s, model->config()));
    Sampler greedy;
    const GenerateResult one = s->generate(16, greedy, stop);
    EXPECT_EQ(batch[i].result.tokens, one.tokens) << "config " << configs[i].describe();
  }
}

TEST(RuntimeEquivalence, GpuBatchEqualsOneConfigAtATime) {
  KVEVICT_REQUIRE_GPU();
  check_batch_equals_single(Device::kCuda, io::kSmolLM2File);
  check_batch_equals_single(Device::kCuda, io::kGemma3File);
}

}  // namespace
}  // namespace kvevict
