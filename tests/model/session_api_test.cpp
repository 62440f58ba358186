// Session plumbing: progress callback per prefill chunk, timings, model-name resolution,
// generate's stop handling.
#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace kvevict
