// The decode step as a replayed CUDA graph (GpuForward, decode_graph.h) against the same step
// launched eagerly: the same weights in two contexts, one with graphs and one without, the same
// prompts and tokens; every step's tokens and every row's logits must be equal bit for bit (the
// graph holds exactly the eager launches, so any difference is a stale baked-in value). Covers
// batch 1 and multi-row batches of distinct lengths, gemma3's ring layers past their wrap, prefill
// and decode-time eviction (in-place cuts between replays), a scratch growth and recording again
// after a change of shape, greedy decoding with the argmax inside the graph, and the eager
// fallback switch, and the GEMV's preloaded weights against its L2 prefetch (gemma3's folds among
// them, and their launch count). Each also checks how often the step was recorded: once per shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "kvevict/decode_evict.h"
#include "kvevict/error.h"
#include "kvevict/model/evict_config.h"
#include "model/tiny_model.h"
#include "model_cuda/gpu_forward.h"
#include "model_cuda/gpu_runtime.h"
#include "model_cuda/tiny_configs.h"
#include "support/testing.h"

namespace kvevict {
namespace {

using testing::tiny_config;
using testing::tiny_gemma;  // window 37: rings wrap within the tests' steps

std::vector<int32_t> prompt(int64_t n, int vocab, uint64_t seed) {
  return testing::tokens_for(static_cast<int>(n), vocab, seed);
}

struct Trace {
  std::vector<int32_t> tokens;  // [steps, B]
  std::vector<float> logits;    // [steps, B, V]
  int64_t evictions = 0;
};

struct Case {
  int batch = 1;
  std::vector<int64_t> lengths;  // distinct prompts of the batch rows
  int steps = 64;
  EvictConfig evict;
  int64_t room = 80;
  int min_segments = 0;  // GpuSessionOptions::scores_in_attention_min_segments
};

// answer_batch's loop (argmax, decode the ids) for `steps` steps; every row's logits after each.
Trace run(const std::shared_ptr<gpu::GpuContext>& ctx, const Case& k) {
  const ModelConfig& c = ctx->model().config();
  gpu::GpuSessionOptions go;
  go.batch = k.batch;
  go.max_prompt = 2048;
  go.decode_room = k.room;
  go.scores_in_attention_min_segments = k.min_segments;
  gpu::GpuSession s(ctx, go);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < k.lengths.size(); ++i)
    prompts.push_back(prompt(k.lengths[i], c.vocab_size, 7 + 31 * i));
  s.prefill_rows(prompts, k.evict);
  Trace r;
  for (int step = 0; step < k.steps; ++step) {
    const std::vector<int32_t> ids = s.argmax();
    r.tokens.insert(r.tokens.end(), ids.begin(), ids.end());
    s.decode(ids);
    for (int b = 0; b < k.batch; ++b) {
      const std::vector<float> l = s.logits(b);
      r.logits.insert(r.logits.end(), l.begin(), l.end());
    }
  }
  r.evictions = s.stats().decode_evictions;
  return r;
}

struct Pair {
  std::shared_ptr<gpu::GpuContext> eager, graph;
};

Pair contexts(const ModelConfig& c, uint64_t seed) {
  auto model = gpu::GpuModel::random(c, seed);
  Pair p{std::make_shared<gpu::GpuContext>(model), std::make_shared<gpu::GpuContext>(model)};
  p.eager->forward().set_decode_graph(false);
  p.graph->forward().set_decode_graph(true);
  return p;
}

uint32_t bits(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

void expect_bitwise(const Trace& eager, const Trace& graph, const std::string& what) {
  ASSERT_EQ(eager.tokens, graph.tokens) << what;
  ASSERT_EQ(eager.logits.size(), graph.logits.size()) << what;
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < eager.logits.size(); ++i)
    if (bits(eager.logits[i]) != bits(graph.logits[i]) && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " logits differ, the first at " << first
                        << " (" << eager.logits[first] << " vs " << graph.logits[first] << ")";
  EXPECT_EQ(eager.evictions, graph.evictions) << what;
}

// The three decoder architectures' tiny configurations.
struct Arch3 {
  ModelConfig config;
  const char* what;
};
std::vector<Arch3> architectures() {
  return {Arch3{tiny_config(Arch::kLlama), "llama"}, Arch3{tiny_config(Arch::kQwen2), "qwen2"},
          Arch3{tiny_gemma(), "gemma3"}};
}

int64_t captures(const Pair& p) {
  return p.graph->forward().decode_graph_stats().captures;
}

TEST(DecodeGraph, BatchOneEqualsEagerAndRecordsOnce) {
  KVEVICT_REQUIRE_GPU();
  const Pair p = contexts(tiny_config(Arch::kLlama), 3);
  Case k;
  k.lengths = {100};
  const Trace e = run(p.eager, k), g = run(p.graph, k);
  expect_bitwise(e, g, "batch 1");
  EXPECT_EQ(captures(p), 1);
  EXPECT_EQ(p.graph->forward().decode_graph_stats().replays, k.steps);
  EXPECT_EQ(p.eager->forward().decode_graph_stats().replays, 0);
}

TEST(DecodeGraph, MultiRowBatchOfDistinctLengthsEqualsEager) {
  KVEVICT_REQUIRE_GPU();
  const Pair p = contexts(tiny_config(Arch::kQwen2), 5);
  Case k;
  k.batch = 5;
  k.lengths = {37, 300, 129, 64, 211};
  const Trace e = run(p.eager, k), g = run(p.graph, k);
  expect_bitwise(e, g, "batch 5");
  EXPECT_EQ(captures(p), 1);
}

TEST(DecodeGraph, GemmaRingsPastTheirWrapEqualEager) {
  KVEVICT_REQUIRE_GPU();
  const Pair p = contexts(tiny_gemma(), 9);
  Case k;
  k.batch = 3;
  k.lengths = {20, 90, 45};  // row 0's rings fill at step 17 and wrap after
  k.evict.prefill = PrefillEviction::from_method("dropkv", Budget{0.5});
  const Trace e = run(p.eager, k), g = run(p.graph, k);
  expect_bitwise(e, g, "gemma3 rings");
  EXPECT_EQ(captures(p), 1);
}

// Decode-time eviction: every scored step replays the graph; the cuts run eagerly between
// replays and shrink segments in place (lengths only), which the graph reads from the device.
void check_decode_eviction(const std::string& score, int min_segments) {
  const Pair p = contexts(tiny_config(Arch::kLlama), 11);
  Case k;
  k.batch = 2;
  k.lengths = {200, 150};
  k.min_segments = min_segments;
  k.evict.prefill = PrefillEviction::from_method("dropkv", Budget{0.5});
  k.evict.decode.enabled = true;
  k.evict.decode.options.score = decode_score_parse(score);
  k.evict.decode.options.budget = 60;
  k.evict.decode.options.slack = 3;
  k.evict.decode.options.recent = 8;
  const Trace e = run(p.eager, k), g = run(p.graph, k);
  const std::string what = score + " min_segments " + std::to_string(min_segments);
  expect_bitwise(e, g, what);
  EXPECT_GT(g.evictions, 10) << what;  // cuts every 4 steps on every full layer
  EXPECT_EQ(captures(p), 1) << what;
}

TEST(DecodeGraph, DecodeEvictionWithCutsEqualsEager) {
  KVEVICT_REQUIRE_GPU();
  check_decode_eviction("dropkv", 0);  // the step scores in a second kernel
  check_decode_eviction("dropkv", 1);  // inside the attention launch (arrival counters)
  check_decode_eviction("tova", 1);
}

// One context serves sessions of other shapes: batch 1, then batch 8 (its decode attention needs
// 8x the split partials: the step grows the scratch first), then batch 1 again with a longer
// cache (another split plan). Each is recorded once, and each equals eager.
TEST(DecodeGraph, ShapeChangesRecordAgainAndScratchGrows) {
  KVEVICT_REQUIRE_GPU();
  const Pair p = contexts(tiny_config(Arch::kLlama), 13);
  Case one;
  one.lengths = {120};
  Case eight;
  eight.batch = 8;
  eight.lengths = {120, 61, 250, 33, 120, 77, 190, 140};
  Case longer;
  longer.lengths = {1500};
  int64_t want = 0;
  for (const Case* k : {&one, &eight, &longer, &one}) {
    const Trace e = run(p.eager, *k), g = run(p.graph, *k);
    expect_bitwise(
        e, g, "batch " + std::to_string(k->batch) + " length " + std::to_string(k->lengths[0]));
    EXPECT_EQ(captures(p), ++want);
  }
  EXPECT_GT(p.graph->forward().decode_graph_stats().updates, 0);  // same topology, new values
}

// decode_greedy: the argmax feeding each step is the graph's first launch.
TEST(DecodeGraph, GreedyDeviceLoopEqualsEager) {
  KVEVICT_REQUIRE_GPU();
  const Pair p = contexts(tiny_gemma(), 17);
  std::vector<int32_t> last[2];
  std::vector<float> logits[2];
  for (int graph = 0; graph < 2; ++graph) {
    gpu::GpuSessionOptions go;
    go.batch = 2;
    go.max_prompt = 200;
    go.decode_room = 80;
    gpu::GpuSession s(graph ? p.graph : p.eager, go);
    s.prefill_rows({prompt(150, 613, 1), prompt(70, 613, 2)}, EvictConfig::none());
    last[graph] = s.decode_greedy(70);
    for (int b = 0; b < 2; ++b) {
      const std::vector<float> l = s.logits(b);
      logits[graph].insert(logits[graph].end(), l.begin(), l.end());
    }
  }
  EXPECT_EQ(last[0], last[1]);
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
  EXPECT_EQ(captures(p), 1);
}

// The fused decode step (KVEVICT_DECODE_FUSED=1: decode_gemv.cu's small-batch projections and the
// attention's merge in its own launch): recorded and replayed like every other launch (graph =
// eager bit for bit, programmatic dependent launches included), and close to the default path on
// every architecture: the logits of each step whose inputs are still the same tokens (a near-tie
// may change a greedy token, after which the traces part) within bf16 rounding of the activations.
TEST(DecodeGraph, FusedStepReplaysBitwiseAndTracksTheDefault) {
  KVEVICT_REQUIRE_GPU();
  for (const Arch3& a : architectures()) {
    SCOPED_TRACE(a.what);
    const Pair fused = contexts(a.config, 21), plain = contexts(a.config, 21);
    fused.eager->forward().set_decode_fused(gpu::FusedStep::kOn);
    fused.graph->forward().set_decode_fused(gpu::FusedStep::kOn);
    plain.graph->forward().set_decode_fused(gpu::FusedStep::kOff);
    Case k;
    k.batch = 3;
    k.lengths = {40, 130, 77};
    k.steps = 24;
    const Trace e = run(fused.eager, k), g = run(fused.graph, k), ref = run(plain.graph, k);
    expect_bitwise(e, g, std::string(a.what) + " fused");
    EXPECT_EQ(captures(fused), 1);
    const size_t V = static_cast<size_t>(a.config.vocab_size), B = k.batch;
    double worst = 0, scale = 0;
    for (int step = 0; step < k.steps; ++step) {
      const size_t t0 = static_cast<size_t>(step) * B;
      if (!std::equal(g.tokens.begin(), g.tokens.begin() + t0 + B, ref.tokens.begin())) break;
      for (size_t i = t0 * V; i < (t0 + B) * V; ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(g.logits[i] - ref.logits[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(ref.logits[i])));
      }
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(worst, 0.03 * scale + 1e-3) << "largest logit difference against the default path";
  }
}

// The fused step with its batch-1 GEMVs' weights in registers before their dependency waits (the
// default, GpuForward::set_gemv_preload) and with them only prefetched into L2: the same bits, on
// every architecture, replayed or eager.
TEST(DecodeGraph, PreloadedGemvWeightsKeepTheStepsBits) {
  KVEVICT_REQUIRE_GPU();
  for (const Arch3& a : architectures()) {
    SCOPED_TRACE(a.what);
    Case k;
    k.lengths = {90};
    k.steps = 40;
    const Pair l2 = contexts(a.config, 31), preloaded = contexts(a.config, 31);
    l2.graph->forward().set_gemv_preload(false);
    EXPECT_TRUE(preloaded.graph->forward().gemv_preload());  // the default
    const Trace ref = run(l2.graph, k), g = run(preloaded.graph, k), e = run(preloaded.eager, k);
    expect_bitwise(ref, g, std::string(a.what) + " preloaded, replayed");
    expect_bitwise(ref, e, std::string(a.what) + " preloaded, eager");
  }
}

// gemma3's fused batch-1 step with its GEMVs' weights preloaded and the folds on
// (set_gemv_folds, KVEVICT_GEMV_FOLDS) folds the per-head q / k norms,
// RoPE and the append into the q|k|v launch and each post-norm add into the next GEMV that norms
// x: five launches a layer where the L2 path (no folds) has eight, and one post-norm add of its
// own before the logits (never folded there). Same bits (as the test above), 3 L - 1 launches
// fewer.
TEST(DecodeGraph, GemmaFoldsMakeFiveLaunchesALayer) {
  KVEVICT_REQUIRE_GPU();
  const ModelConfig c = tiny_gemma();
  Case k;
  k.lengths = {60};
  k.steps = 6;
  const Pair l2 = contexts(c, 41), folded = contexts(c, 41);
  l2.graph->forward().set_gemv_preload(false);
  folded.graph->forward().set_gemv_folds(true);
  const Trace ref = run(l2.graph, k), g = run(folded.graph, k);
  expect_bitwise(ref, g, "gemma3 folded");
  const int64_t unfolded = l2.graph->forward().decode_graph_stats().nodes;
  const int64_t nodes = folded.graph->forward().decode_graph_stats().nodes;
  EXPECT_GT(nodes, 5 * c.n_layers);
  EXPECT_EQ(unfolded - nodes, 3 * c.n_layers - 1) << unfolded << " against " << nodes;
}

TEST(DecodeGraph, EnvironmentSwitchesToEager) {
  KVEVICT_REQUIRE_GPU();
  auto model = gpu::GpuModel::random(tiny_config(Arch::kLlama), 1);
  // The switches are read at construction; the process may run under either.
  using kvevict::testing::ScopedEnv;
  const ScopedEnv no_fused("KVEVICT_DECODE_FUSED", nullptr);
  {
    const ScopedEnv eager("KVEVICT_DECODE_GRAPH", "0");
    gpu::GpuContext off(model);
    EXPECT_FALSE(off.forward().decode_graph());
  }
  const ScopedEnv no_graph("KVEVICT_DECODE_GRAPH", nullptr);
  gpu::GpuContext on(model);
  EXPECT_TRUE(on.forward().decode_graph());
  EXPECT_EQ(on.forward().decode_fused(), gpu::FusedStep::kBatchOne);  // the default
  {
    const ScopedEnv fused_env("KVEVICT_DECODE_FUSED", "1");
    gpu::GpuContext fused(model);
    EXPECT_EQ(fused.forward().decode_fused(), gpu::FusedStep::kOn);
  }
  {
    const ScopedEnv unfused_env("KVEVICT_DECODE_FUSED", "0");
    gpu::GpuContext unfused(model);
    EXPECT_EQ(unfused.forward().decode_fused(), gpu::FusedStep::kOff);
  }
  const ScopedEnv refused_env("KVEVICT_DECODE_FUSED", "yes");
  EXPECT_THROW(gpu::GpuContext refused(model), kvevict::Error);
}

}  // namespace
}  // namespace kvevict
