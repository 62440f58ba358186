// The model commands end to end on the embedded SmolLM2 checkpoint (skipped when
// scripts/fetch_models.sh has not run): JSON output, eviction shrinking memory, and the
// bad-input catalogue (exit code 2 with a message naming the problem).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/model_paths.h"
#include "kvevict/model/runtime.h"
#include "support/cli_runner.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

std::string smollm2() {
  return io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
}

class ModelCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!io::file_exists(smollm2())) GTEST_SKIP() << "run scripts/fetch_models.sh first";
  }
  void expect_bad(const std::vector<std::string>& args, const std::string& needle) {
    const auto r = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  }
};

TEST_F(ModelCommands, GenerateWithEvictionShrinksTheCache) {
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  const auto r = run_cli(KVEVICT_CLI_PATH, {"generate", "-m", smollm2(), "-p", prompt, "-n", "4",
                                            "--method", "dropkv", "--budget", "0.25", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated_tokens"].get<int>(), 4);
  const int64_t before = j["kv_bytes_before"], after = j["kv_bytes_after"];
  ASSERT_GT(before, 0);
  // 25% of the rows are kept (plus the generation slack the runtime reserves).
  EXPECT_LT(after, before / 2) << r.out;
  for (const auto& kept : j["kept_tokens_per_head_per_layer"]) EXPECT_LT(kept.get<int64_t>(), 200);
}

// Issue "Model runtime": a needle-in-a-haystack prompt the full cache answers is still answered
// with DropKV keeping 20% of the cache. The prompt is the eval generator's first niah_single_1
// sample at 2K tokens (base seed 0), evicted query-aware with DropKV's defaults (no pooling).
TEST_F(ModelCommands, DropKVAt20PercentStillFindsTheNeedle) {
  const auto r = run_cli(KVEVICT_CLI_PATH, {"eval", "-m", smollm2(), "--tasks", "niah_single_1",
                                            "--lengths", "2048", "--samples", "1", "--methods",
                                            "full,dropkv", "--budgets", "0.2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  int checked = 0;
  for (const auto& rec : j["records"]) {
    const std::string method = rec["method"];
    EXPECT_EQ(rec["score"].get<double>(), 100.0)
        << method << " answered '" << rec["prediction"] << "', expected " << rec["answers"];
    if (method == "dropkv") EXPECT_LE(rec["kept_tokens"].get<int64_t>(), 0.2 * 2048);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST_F(ModelCommands, GenerateRejectsBadInput) {
  expect_bad({"generate", "-m", smollm2(), "-p", "hi", "--method", "dropkvv"},
             "unknown method 'dropkvv'");
  expect_bad({"generate", "-m", smollm2(), "-p", "hi", "--method", "dropkv", "--budget", "0"},
             "budget");
  expect_bad({"generate", "-m", "/nonexistent/model.gguf", "-p", "hi"}, "/nonexistent/model.gguf");
  expect_bad({"generate", "-m", smollm2(), "-p", "hi", "--device", "tpu"},
             "unknown --device 'tpu'");
  expect_bad({"generate", "-m", smollm2()}, "-p TEXT or -f FILE");
  expect_bad({"generate", "-m", smollm2(), "-p", "hi", "--query-aware"}, "--question");
  std::string huge;
  for (int i = 0; i < 9000; ++i) huge += "word ";  // > the 8192-token context
  expect_bad({"generate", "-m", smollm2(), "-p", huge, "-n", "1"}, "context");
}

// --device cuda and --dummy: clear errors (exit 2) that need no model file; on a machine without a
// GPU (CI) --device cuda itself is refused naming the reason.
TEST(DeviceCuda, ClearErrors) {
  auto bad = [](const std::vector<std::string>& args, const std::string& needle) {
    const auto r = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  };
  bad({"generate", "--dummy", "llama-3.1-8b", "-n", "1"}, "use --device cuda");
  bad({"generate", "--dummy", "llama-9b", "--device", "cuda"}, "unknown model preset 'llama-9b'");
  bad({"generate", "--dummy", "llama-3.1-8b", "-p", "hi"}, "--dummy takes no -p");
  if (!runtime_available(Device::kCuda)) {
    // Every model command takes --device cuda; without a GPU runtime each says why, exit 2.
    bad({"generate", "--dummy", "llama-3.1-8b", "--device", "cuda", "-n", "1"}, "--device cuda: ");
    bad({"demo", "--device", "cuda", "--length", "300"}, "--device cuda: ");
  }
}

TEST_F(ModelCommands, CorruptModelFilesGetClearErrors) {
  TempDir dir;
  {
    std::ofstream(dir.file("empty.gguf"));
    std::ofstream f(dir.file("junk.gguf"), std::ios::binary);
    f << "GGUF but not really a gguf file";
  }
  std::filesystem::copy_file(smollm2(), dir.file("trunc.gguf"));
  std::filesystem::resize_file(dir.file("trunc.gguf"), 1 << 20);
  for (const char* f : {"empty.gguf", "junk.gguf", "trunc.gguf"})
    expect_bad({"generate", "-m", dir.file(f), "-p", "hi"}, f);
}

TEST_F(ModelCommands, HelpEverywhere) {
  for (const char* cmd : {"generate", "demo", "eval", "ppl", "analyze"}) {
    const auto r = run_cli(KVEVICT_CLI_PATH, {cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << cmd;
  }
}

TEST_F(ModelCommands, EvalAndPplRejectUnknownNames) {
  expect_bad({"eval", "-m", smollm2(), "--tasks", "niah_single_9"}, "niah_single_9");
  expect_bad({"eval", "-m", smollm2(), "--methods", "full,nope"}, "unknown method 'nope'");
  expect_bad({"eval", "-m", smollm2(), "--lengths", "100000"}, "100000");
  expect_bad({"ppl", "-m", smollm2(), "--budgets", "0.5"}, "tokens per head");
  expect_bad({"ppl", "-m", smollm2(), "--methods", "knorm"}, "no decode-time form");
}

}  // namespace
}  // namespace kvevict
