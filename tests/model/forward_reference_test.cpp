// The runtime's cached, chunked forward of each architecture equals an independent double
// forward (tests/model/tiny_model.h) on tiny random GGUF models: prefill in odd chunks, then
// decode steps, for f32 and f16 caches.
#include <gtest/gtest.h>

#include "model/session.h"
#include "model/tiny_model.h"

namespace kvevict {
namespace {

using testing::TinySpec;
using testing::tokens_for;

struct ArchCase {
  std::string arch;
  bool tied;
};

class ForwardReference : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ForwardReference, PrefillAndDecodeMatchDoubleReference) {
  TinySpec spec;
  spec.arch = GetParam().arch;
  spec.tied = GetParam().tied;
  const auto tiny = testing::make_tiny_model(spec, "tiny_" + spec.arch);
  auto model = Model::load(tiny.file->path());
  EXPECT_EQ(arch_name(model->config().arch), spec.arch);
  EXPECT_EQ(model->config().tied_embeddings, spec.tied);
  for (DType dt : {DType::kF32, DType::kF16}) {
    SessionOptions opt;
    opt.chunk = 3;  // 11 prompt tokens = chunks of 3, 3, 3, 2
    opt.kv_dtype = dt;
    Session s(model, opt);
    std::vector<int32_t> toks = tokens_for(11, spec.V, 3);
    s.prefill(toks);
    // f16 K/V rounding (relative 2^-11) propagates through 3 layers.
    const double atol = dt == DType::kF32 ? 2e-4 : 2e-2, rtol = dt == DType::kF32 ? 1e-4 : 1e-2;
    auto ref = testing::tiny_reference_logits(tiny, toks);
    EXPECT_TRUE(
        testing::all_close(s.logits(), ref, atol, rtol, spec.arch + " prefill " + dtype_name(dt)));
    for (int step = 0; step < 4; ++step) {
      const int32_t next = (7 * step + 5) % spec.V;
      s.decode(next);
      toks.push_back(next);
      ref = testing::tiny_reference_logits(tiny, toks);
      EXPECT_TRUE(testing::all_close(
          s.logits(), ref, atol, rtol,
          spec.arch + " decode step " + std::to_string(step) + " " + dtype_name(dt)));
    }
    EXPECT_EQ(s.position(), 15);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardReference,
                         ::testing::Values(ArchCase{"llama", true}, ArchCase{"llama", false},
                                           ArchCase{"qwen2", false}, ArchCase{"gemma3", true}),
                         [](const auto& info) {
                           return info.param.arch + (info.param.tied ? "_tied" : "_untied");
                         });

TEST(ForwardReference, ChunkSizeDoesNotChangeLogitsBeyondRounding) {
  TinySpec spec;
  spec.arch = "gemma3";
  const auto tiny = testing::make_tiny_model(spec, "tiny_chunks");
  auto model = Model::load(tiny.file->path());
  const auto toks = tokens_for(17, spec.V, 11);
  std::vector<float> first;
  for (int64_t chunk : {1, 4, 17, 256}) {
    SessionOptions opt;
    opt.chunk = chunk;
    Session s(model, opt);
    s.prefill(toks);
    if (first.empty()) {
      first = s.logits();
      continue;
    }
    std::vector<double> ref(first.begin(), first.end());
    EXPECT_TRUE(testing::all_close(s.logits(), ref, 1e-5, 1e-5, "chunk " + std::to_string(chunk)));
  }
}

TEST(ForwardReference, SlidingLayersKeepOnlyTheirWindow) {
  TinySpec spec;
  spec.arch = "gemma3";
  const auto tiny = testing::make_tiny_model(spec, "tiny_window");
  auto model = Model::load(tiny.file->path());
  ASSERT_TRUE(model->config().is_sliding(0));
  ASSERT_FALSE(model->config().is_sliding(1));
  Session s(model);
  s.prefill(tokens_for(13, spec.V, 5));
  EXPECT_EQ(s.kv_rows(0), spec.Hkv * spec.sliding_window);
  EXPECT_EQ(s.kv_rows(1), spec.Hkv * 13);
  for (int i = 0; i < 5; ++i) s.decode(1);
  // Decode appends into spare rows; the rows in use past the window are dropped on reallocation.
  EXPECT_LE(s.kv_rows(0), spec.Hkv * (spec.sliding_window + 256 + 1));
  EXPECT_EQ(s.kv_rows(1), spec.Hkv * 18);
}

}  // namespace
}  // namespace kvevict
