// `kvevict demo` prints, beside its answers, the accuracy a results table measured for each
// setting on its task, length and query mode, and takes its default budget from the table's rule
// (the smallest measured budget within 10 points of the full cache), saying where each number
// comes from and "not measured" where the table has none. A table that is not one is an error
// naming the file. The runs use the real SmolLM2 checkpoint and the corpus (skipped without).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/model_paths.h"
#include "support/cli_runner.h"
#include "support/special_files.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

std::string smollm2() {
  return io::model_path(KVEVICT_SOURCE_DIR, io::kSmolLM2File);
}

bool have_corpus() {
  const char* env = std::getenv("KVEVICT_CORPUS_DIR");
  const std::string dir = env && *env ? env : std::string(KVEVICT_SOURCE_DIR) + "/data/corpus";
  return std::filesystem::is_directory(dir + "/austen");
}

// A table for SmolLM2 at 512 tokens, query-aware: the full cache, dropkv at 0.2 and 0.5, and the
// rule's pick (0.5); snapkv measured with no budget within the rule.
std::string write_table(const TempDir& dir) {
  const std::string m = "SmolLM2-135M-Instruct.Q4_1";
  auto row = [&](const char* setting, const char* budget, double score, int n) {
    return nlohmann::json{{"model", m},           {"task", "niah_single_1"},
                          {"target_length", 512}, {"mode", "query-aware"},
                          {"setting", setting},   {"budget", budget},
                          {"score", score},       {"ci_low", score - 5},
                          {"ci_high", score},     {"samples", n},
                          {"source", 0}};
  };
  nlohmann::json t = {{"kind", "kvevict-demo-table"},
                      {"version", 1},
                      {"rule", "test rule"},
                      {"sources", {{{"file", "results/test_run.json"}, {"commit", "abc123"}}}},
                      {"rows",
                       {row("full", "1", 100.0, 4), row("dropkv", "0.2", 50.0, 4),
                        row("dropkv", "0.5", 95.0, 4), row("snapkv", "0.1", 25.0, 4)}},
                      {"defaults",
                       {{{"model", m},
                         {"task", "niah_single_1"},
                         {"target_length", 512},
                         {"mode", "query-aware"},
                         {"setting", "dropkv"},
                         {"budget", "0.5"},
                         {"full", 100.0},
                         {"full_samples", 4},
                         {"score", 95.0},
                         {"samples", 4},
                         {"source", 0}},
                        {{"model", m},
                         {"task", "niah_single_1"},
                         {"target_length", 512},
                         {"mode", "query-aware"},
                         {"setting", "snapkv"},
                         {"budget", nullptr},
                         {"full", 100.0},
                         {"full_samples", 4}}}}};
  std::ofstream(dir.file("table.json")) << t.dump(1);
  return dir.file("table.json");
}

class DemoTable : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(smollm2())) GTEST_SKIP() << "run scripts/fetch_models.sh first";
    if (!have_corpus()) GTEST_SKIP() << "run scripts/prepare_corpus.sh first";
    table_ = write_table(dir_);
  }
  nlohmann::json demo(std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "demo", "-m", smollm2(), "--length", "512", "--results-table", table_, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  TempDir dir_;
  std::string table_;
};

TEST_F(DemoTable, DefaultBudgetFollowsTheTablesRuleAndEachAnswerShowsItsMeasuredAccuracy) {
  const auto j = demo({});
  ASSERT_TRUE(j.contains("answers")) << j.dump();
  EXPECT_EQ(j["budget"]["value"], "0.5");
  EXPECT_NE(j["budget"]["why"].get<std::string>().find("results/test_run.json"), std::string::npos)
      << j["budget"]["why"];
  EXPECT_EQ(j["results_table"], table_);
  ASSERT_EQ(j["answers"].size(), 2u);
  EXPECT_EQ(j["answers"][0]["measured"]["score"], 100.0);
  EXPECT_EQ(j["answers"][1]["setting"], "dropkv@0.5");
  EXPECT_EQ(j["answers"][1]["measured"]["score"], 95.0);
  EXPECT_EQ(j["answers"][1]["measured"]["samples"], 4);
  EXPECT_NE(j["answers"][1]["measured"]["source"].get<std::string>().find("abc123"),
            std::string::npos);
}

TEST_F(DemoTable, AnExplicitBudgetIsLookedUpAndAnUnmeasuredOneSaysSo) {
  auto j = demo({"--budget", "0.2"});
  EXPECT_EQ(j["budget"]["why"], "--budget");
  EXPECT_EQ(j["answers"][1]["measured"]["score"], 50.0);
  j = demo({"--budget", "0.3"});
  EXPECT_TRUE(j["answers"][1]["measured"].is_null()) << j["answers"][1].dump();
  const auto r = run_cli(KVEVICT_CLI_PATH, {"demo", "-m", smollm2(), "--length", "512",
                                            "--results-table", table_, "--budget", "0.3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("not measured for SmolLM2-135M-Instruct.Q4_1 at 512 tokens and budget 0.3"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("measured lengths: 512"), std::string::npos) << r.out;
}

TEST_F(DemoTable, NoQualifyingBudgetFallsBackAndSaysItIsNotAMeasuredChoice) {
  const auto j = demo({"--method", "snapkv"});
  EXPECT_EQ(j["budget"]["value"], "0.1");
  EXPECT_NE(j["budget"]["why"].get<std::string>().find("no measured budget of snapkv"),
            std::string::npos)
      << j["budget"]["why"];
  EXPECT_EQ(j["answers"][1]["measured"]["score"], 25.0);
}

TEST(DemoTableFile, ATableThatIsNotOneIsAnErrorNamingTheFile) {
  TempDir dir;
  std::ofstream(dir.file("junk.json")) << R"({"rows": []})";
  std::ofstream(dir.file("bad.json")) << "not json";
  for (const char* f : {"junk.json", "bad.json", "missing.json"}) {
    const auto r = run_cli(KVEVICT_CLI_PATH, {"demo", "--results-table", dir.file(f)});
    EXPECT_EQ(r.exit_code, 2) << f << ": " << r.err;
    EXPECT_NE(r.err.find(dir.file(f)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tools/demo_table.py"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kvevict
