// Bad inputs fail with a clear kvevict::Error naming the problem: corrupt/truncated GGUF,
// unsupported architecture, missing tensor, prompt longer than the context, bad token ids.
#include <gtest/gtest.h>

#include "kvevict/error.h"
#include "model/session.h"
#include "model/tiny_model.h"

namespace kvevict {
namespace {

template <class Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected an Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected it to contain: " << needle;
  }
}

TEST(ModelErrors, UnsupportedArchitecture) {
  testing::GgufWriter g;
  g.add_string("general.architecture", "gpt2");
  testing::TempFile f("arch_gpt2");
  f.write(g.build());
  expect_error([&] { Model::load(f.path()); }, "unsupported architecture 'gpt2'");
}

TEST(ModelErrors, MissingTensorIsNamed) {
  testing::TinySpec spec;
  spec.skip_tensor = "blk.1.ffn_up.weight";
  const auto tiny = testing::make_tiny_model(spec, "missing_tensor");
  expect_error([&] { Model::load(tiny.file->path()); }, "missing tensor blk.1.ffn_up.weight");
}

TEST(ModelErrors, MissingMetadataIsNamed) {
  testing::GgufWriter g;
  g.add_string("general.architecture", "llama");
  g.add_u32("llama.context_length", 64);
  testing::TempFile f("missing_key");
  f.write(g.build());
  expect_error([&] { Model::load(f.path()); }, "llama.embedding_length");
}

TEST(ModelErrors, TruncatedAndCorruptFiles) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "truncated_src");
  std::vector<uint8_t> bytes;
  {
    FILE* in = std::fopen(tiny.file->path().c_str(), "rb");
    ASSERT_NE(in, nullptr);
    int c;
    while ((c = std::fgetc(in)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
    std::fclose(in);
  }
  for (size_t keep : {bytes.size() / 2, size_t{100}, size_t{6}}) {
    testing::TempFile f("truncated_" + std::to_string(keep));
    f.write(std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    EXPECT_THROW(Model::load(f.path()), Error) << "kept " << keep << " bytes";
  }
  std::vector<uint8_t> bad = bytes;
  bad[0] = 'X';  // magic
  testing::TempFile f("bad_magic");
  f.write(bad);
  EXPECT_THROW(Model::load(f.path()), Error);
  EXPECT_THROW(Model::load("/nonexistent/dir/model.gguf"), Error);
}

TEST(ModelErrors, PromptLongerThanTheContext) {
  testing::TinySpec spec;  // ctx 64
  const auto tiny = testing::make_tiny_model(spec, "ctx");
  auto model = Model::load(tiny.file->path());
  Session s(model);
  expect_error([&] { s.prefill(std::vector<int32_t>(65, 1)); }, "exceeds the context length 64");
  Session ok(model);
  ok.prefill(std::vector<int32_t>(63, 1));
  ok.decode(2);  // position 63: the last one
  expect_error([&] { ok.decode(2); }, "exceeds the context length 64");
  expect_error([&] { ok.prefill({1}); }, "already holds");
}

TEST(ModelErrors, BadTokenIdsAndOptions) {
  testing::TinySpec spec;
  const auto tiny = testing::make_tiny_model(spec, "bad_ids");
  auto model = Model::load(tiny.file->path());
  Session s(model);
  expect_error([&] { s.prefill({1, 50}); }, "token id 50");
  expect_error([&] { s.prefill({}); }, "no tokens");
  SessionOptions opt;
  opt.kv_dtype = DType::kI32;
  expect_error([&] { Session bad(model, opt); }, "KV cache dtype i32");
  expect_error([&] { ModelConfig::preset("gpt-5"); }, "unknown model preset 'gpt-5'");
}

}  // namespace
}  // namespace kvevict
