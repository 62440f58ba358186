// `kvevict capture` (issue 13, "as a newcomer": the README's score/analyze examples used q.npy,
// k.npy and wo.npy that nobody had): one layer's q, k, v and W_o from a model's prefill, in the
// shapes score and analyze read, equal to what the runtime computed. On the tiny CLI model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "cli/tiny_cli_model.h"
#include "kvevict/io/npy.h"
#include "kvevict/tokenizer.h"
#include "model/session.h"
#include "support/cli_runner.h"
#include "support/special_files.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

const std::string kPrompt = "the tiny model reads this sentence, and then a second one.";

TEST(CaptureCommand, WritesTheLayerThatScoreAndAnalyzeRead) {
  const auto model = testing::write_tiny_cli_model(testing::tiny_cli_doc(), "capture_tiny");
  TempDir dir;
  const std::string out = dir.file("layer1");
  const auto r = run_cli(KVEVICT_CLI_PATH, {"capture", "-m", model.path(), "--layer", "1", "-p",
                                            kPrompt, "--queries", "8", "--dir", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::list_dir(out),
            (std::vector<std::string>{"k.npy", "q.npy", "v.npy", "wo.npy"}));
  const HostTensor q = npy::load(out + "/q.npy"), k = npy::load(out + "/k.npy"),
                   v = npy::load(out + "/v.npy"), wo = npy::load(out + "/wo.npy");
  const int64_t n = nlohmann::json::parse(r.out)["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(q.shape(), (std::vector<int64_t>{4, 8, 8}));  // [Hq, m, d]
  EXPECT_EQ(k.shape(), (std::vector<int64_t>{2, n, 8}));  // [Hkv, n, d]
  EXPECT_EQ(v.shape(), k.shape());
  EXPECT_EQ(wo.shape(), (std::vector<int64_t>{24, 32}));  // [D, Hq * d]

  // The same tensors as the runtime's own prefill of the same tokens.
  const auto m = Model::load(model.path());
  const auto tok = Tokenizer::from_gguf(*m->file());
  PrefillOptions popt;
  popt.keep_queries = 8;
  const PrefillSnapshot snap = Session::prefill_snapshot(m, tok->encode(kPrompt, true), popt);
  ASSERT_EQ(snap.num_tokens(), n);
  const TensorView k_ref = snap.caches[1].view().uniform_k();
  EXPECT_EQ(std::memcmp(k.data(), k_ref.data, k.nbytes()), 0) << "k differs from the runtime's";
  EXPECT_EQ(std::memcmp(q.data(), snap.queries[1].data(), q.nbytes()), 0) << "q differs";
  EXPECT_EQ(std::memcmp(wo.data(), m->weights().layers[1].wo.data(), wo.nbytes()), 0);

  // Every README use of the files runs.
  const std::vector<std::string> qkv = {"--q",          out + "/q.npy", "--k",
                                        out + "/k.npy", "--v",          out + "/v.npy"};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), qkv.begin(), qkv.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  for (const auto& args :
       {with({"score", "--method", "dropkv", "--window", "8"},
             {"--budget", "0.5", "--out", dir.file("s.npy"), "--keep", dir.file("keep.npy")}),
        with({"score", "--method", "snapkv", "--window", "8"}, {"--compression-ratio", "0.5"}),
        with({"score", "--method", "criticalkv", "--window", "8"},
             {"--wo", out + "/wo.npy", "--budget", "0.5"}),
        with({"analyze"}, {"--queries", "2"})}) {
    const auto s = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(s.exit_code, 0) << s.err;
  }
  EXPECT_EQ(npy::load(dir.file("s.npy")).shape(), (std::vector<int64_t>{2, n}));
}

TEST(CaptureCommand, AllQueriesForH2oAndNoSlidingLayers) {
  const auto model = testing::write_tiny_cli_model(testing::tiny_cli_doc(), "capture_all");
  TempDir dir;
  const auto r = run_cli(KVEVICT_CLI_PATH, {"capture", "-m", model.path(), "--layer", "0", "-p",
                                            kPrompt, "--queries", "0", "--dir", dir.file("all")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const HostTensor q = npy::load(dir.file("all/q.npy")), k = npy::load(dir.file("all/k.npy"));
  EXPECT_EQ(q.shape()[1], k.shape()[1]) << "--queries 0 keeps every prompt query";
  const auto s =
      run_cli(KVEVICT_CLI_PATH, {"score", "--method", "obcache_vk", "--aggregate", "h2o", "--q",
                                 dir.file("all/q.npy"), "--k", dir.file("all/k.npy"), "--v",
                                 dir.file("all/v.npy"), "--budget", "16"});
  EXPECT_EQ(s.exit_code, 0) << s.err;

  // gemma3: layers 0 and 2 slide (the tiny model's pattern 2), 1 is global.
  const auto gemma =
      testing::write_tiny_cli_model(testing::tiny_cli_doc("gemma3"), "capture_gemma");
  const auto g = run_cli(KVEVICT_CLI_PATH, {"capture", "-m", gemma.path(), "--layer", "0", "-p",
                                            kPrompt, "--dir", dir.file("g")});
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.err.find("--layer 0 of tiny-gemma3 is a sliding-window layer"), std::string::npos)
      << g.err;
  EXPECT_NE(g.err.find("expected a global layer: 1"), std::string::npos) << g.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("g")));
}

// ppl is slow, not stuck (issue 13): it feeds every token through the model one at a time, and
// says up front how many steps that is.
TEST(PplCommand, SaysHowManyDecodeStepsItWillRun) {
  if (!std::filesystem::is_directory(std::string(KVEVICT_SOURCE_DIR) + "/data/corpus/austen"))
    GTEST_SKIP() << "data/corpus not prepared (scripts/prepare_corpus.sh)";
  const auto model = testing::write_tiny_cli_model(testing::tiny_cli_doc(), "ppl_tiny");
  const auto r =
      run_cli(KVEVICT_CLI_PATH, {"ppl", "-m", model.path(), "--chunk", "16", "--methods",
                                 "full,h2o", "--budgets", "8,15", "--recent", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("3 settings x 1 chunks x 15 predicted tokens = 45 decode steps"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--budgets 15 is not below the 15 tokens a chunk caches"), std::string::npos)
      << r.err;
  // With only `full` the budgets are unused: no warning about them.
  const auto f = run_cli(KVEVICT_CLI_PATH, {"ppl", "-m", model.path(), "--chunk", "16", "--methods",
                                            "full", "--budgets", "15", "--json"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.err.find("warning"), std::string::npos) << f.err;
}

// --chunk 256 (the case that "was still running after 120 s"): at the context's full length on
// a tiny model, every one of the 2 x 255 decode steps completes, with and without eviction, and
// the run ends in seconds; the time per step, not a hang, is what made SmolLM2's run long.
TEST(PplCommand, AFullContextChunkFinishes) {
  if (!std::filesystem::is_directory(std::string(KVEVICT_SOURCE_DIR) + "/data/corpus/austen"))
    GTEST_SKIP() << "data/corpus not prepared (scripts/prepare_corpus.sh)";
  const auto model = testing::write_tiny_cli_model(testing::tiny_cli_doc(), "ppl_tiny_256");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r =
      run_cli(KVEVICT_CLI_PATH, {"ppl", "-m", model.path(), "--chunk", "256", "--methods",
                                 "full,dropkv", "--budgets", "64", "--json"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 settings x 1 chunks x 255 predicted tokens = 510 decode steps"),
            std::string::npos)
      << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ppl"].size(), 2u);
  for (const auto& row : j["ppl"]) {
    EXPECT_EQ(row["evaluated_tokens"].get<int64_t>(), 255) << row.dump();
    EXPECT_TRUE(std::isfinite(row["ppl"].get<double>())) << row.dump();
  }
  EXPECT_LT(s, 60.0) << "510 decode steps of a 3-layer model took " << s << " s";
}

}  // namespace
}  // namespace kvevict
