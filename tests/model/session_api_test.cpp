// Session plumbing: progress callback per prefill chunk, timings, model-name resolution,
// generate's stop handling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kvevict/model/runtime.h"
#include "model/session.h"
#include "model/tiny_model.h"

namespace kvevict {
namespace {

TEST(SessionApi, ProgressIsReportedPerChunkAndTimingsAreFilled) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "api_progress");
  auto model = Model::load(tiny.file->path());
  std::vector<std::pair<int64_t, int64_t>> calls;
  SessionOptions opt;
  opt.chunk = 4;
  opt.progress = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  Session s(model, opt);
  s.prefill(std::vector<int32_t>(10, 3));
  const std::vector<std::pair<int64_t, int64_t>> want = {{4, 10}, {8, 10}, {10, 10}};
  EXPECT_EQ(calls, want);
  s.decode(1);
  s.decode(2);
  const SessionStats& st = s.stats();
  EXPECT_EQ(st.prefill_tokens, 10);
  EXPECT_EQ(st.decode_tokens, 2);
  EXPECT_GT(st.prefill_seconds, 0.0);
  EXPECT_GT(st.decode_seconds, 0.0);
  EXPECT_GT(st.prefill_tokens_per_s(), 0.0);
  EXPECT_NE(st.describe().find("prefill 10 tok"), std::string::npos) << st.describe();
}

TEST(SessionApi, GenerateStopsAtAStopTokenAndDoesNotFeedIt) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "api_stop");
  auto model = Model::load(tiny.file->path());
  Session s(model);
  s.prefill({1, 2, 3});
  Sampler probe;
  const int32_t first = probe.sample(s.logits());
  int seen = 0;
  Sampler g;
  const auto out = s.generate(
      10, g, [&](int32_t t) { return t == first; }, [&](int32_t) { ++seen; });
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.tokens, std::vector<int32_t>{first});
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(s.position(), 3);  // the stop token was not fed
}

// ModelRuntime::token_nlls (perplexity, one token a step from a one-token prefill) against the
// double-precision full recompute: NLL i = logsumexp(ref logits of tokens[0..i]) - ref logit of
// tokens[i + 1], for every i of two texts (a gemma3 with a sliding window shorter than the text).
TEST(SessionApi, TokenNllsMatchTheDoubleReference) {
  for (const char* arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    testing::TinySpec spec;
    spec.arch = arch;
    const auto tiny = testing::make_tiny_model(spec, std::string("api_nll_") + arch);
    const auto rt = ModelRuntime::create(Model::load(tiny.file->path()), RuntimeOptions{});
    const std::vector<std::vector<int32_t>> texts = {testing::tokens_for(20, spec.V, 3),
                                                     testing::tokens_for(12, spec.V, 4)};
    const auto nlls = rt->token_nlls(texts, EvictConfig::none());
    ASSERT_EQ(nlls.size(), 2u);
    for (size_t t = 0; t < texts.size(); ++t) {
      ASSERT_EQ(nlls[t].size(), texts[t].size() - 1);
      for (size_t i = 0; i + 1 < texts[t].size(); ++i) {
        const std::vector<int32_t> prefix(texts[t].begin(), texts[t].begin() + i + 1);
        const std::vector<double> ref = testing::tiny_reference_logits(tiny, prefix);
        double mx = -INFINITY, sum = 0;
        for (double x : ref) mx = std::max(mx, x);
        for (double x : ref) sum += std::exp(x - mx);
        const double want = mx + std::log(sum) - ref[static_cast<size_t>(texts[t][i + 1])];
        EXPECT_NEAR(nlls[t][i], want, 1e-4 * (1 + want)) << "text " << t << " step " << i;
      }
    }
  }
  const auto tiny = testing::make_tiny_model(testing::TinySpec{}, "api_nll_bad");
  const auto rt = ModelRuntime::create(Model::load(tiny.file->path()), RuntimeOptions{});
  EXPECT_THROW(rt->token_nlls({{1}}, EvictConfig::none()), Error);  // one token predicts nothing
}

// A gemma3 sliding layer reports the rows its next token sees (its window), although decode
// trims the cache only every so many steps (trim_sliding's slack): kv_rows and kept_positions
// are the last `window` positions at every step, as the GPU's ring holds them.
TEST(SessionApi, SlidingLayersReportTheirWindowWhileDecoding) {
  testing::TinySpec spec;
  spec.arch = "gemma3";
  spec.sliding_window = 4;
  const auto tiny = testing::make_tiny_model(spec, "api_sliding_rows");
  auto model = Model::load(tiny.file->path());
  const ModelConfig& c = model->config();
  Session s(model);
  s.prefill(testing::tokens_for(10, spec.V, 5));
  for (int step = 0; step < 30; ++step) {
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t pos = s.position();
      const int64_t want = c.is_sliding(l) ? std::min<int64_t>(pos, c.sliding_window) : pos;
      ASSERT_EQ(s.kv_rows(l), want * c.n_kv_heads) << "layer " << l << " step " << step;
      const auto kept = s.kept_positions(l, 0);
      ASSERT_EQ(static_cast<int64_t>(kept.size()), want);
      EXPECT_EQ(kept.back(), pos - 1);
      EXPECT_EQ(kept.front(), pos - want);
    }
    s.decode(static_cast<int32_t>(step % spec.V));
  }
}

TEST(SessionApi, BlasIsDescribed) {
  const std::string b = blas_description();
  EXPECT_TRUE(b.rfind("OpenBLAS ", 0) == 0 || b.rfind("none", 0) == 0) << b;
}

TEST(SessionApi, ModelNamesResolveInTheModelDir) {
  setenv("KVEVICT_MODEL_DIR", "/some/dir", 1);
  EXPECT_EQ(resolve_model_path("smollm2", "/src"), "/some/dir/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(resolve_model_path("gemma3-270m", "/src"), "/some/dir/gemma-3-270m-q4_k_m.gguf");
  unsetenv("KVEVICT_MODEL_DIR");
  EXPECT_EQ(resolve_model_path("smollm2", "/src"), "/src/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(resolve_model_path("x/y.gguf", "/src"), "x/y.gguf");
}

// A bad KVEVICT_WEIGHTS is named as the environment variable it came from (no option of the
// command set it), before any file is opened.
TEST(SessionApi, BadWeightFormatNamesItsEnvironmentVariable) {
  setenv("KVEVICT_WEIGHTS", "bogus", 1);
  try {
    Model::load("/nonexistent/model.gguf", "/src");
    ADD_FAILURE() << "KVEVICT_WEIGHTS=bogus was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("environment variable KVEVICT_WEIGHTS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'bogus'"), std::string::npos) << msg;
  }
  unsetenv("KVEVICT_WEIGHTS");
}

}  // namespace
}  // namespace kvevict
