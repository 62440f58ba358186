// `kvevict eval` writes its outputs all or none (issue 13: a failed --markdown left the results
// JSON behind): --out, --markdown and --plots are staged and committed together, so a failure
// after the evaluation -- here the plot script -- leaves no file at all. On the tiny CLI model
// with a one-row JSONL dataset.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/tiny_cli_model.h"
#include "support/cli_runner.h"
#include "support/special_files.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

class EvalOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.file("one.jsonl"))
        << R"({"context": "the answer is e. ", "question": "what is it?", "answer_prefix": "", )"
        << R"("answers": ["e"], "max_new_tokens": 2, "task": "t"})"
        << "\n";
  }
  std::vector<std::string> args() const {
    return {"eval",
            "-m",
            model_.path(),
            "--data",
            dir_.file("one.jsonl"),
            "--style",
            "raw",
            "--methods",
            "full,dropkv",
            "--budgets",
            "0.5",
            "--window",
            "2",
            "--out",
            dir_.file("out/r.json"),
            "--markdown",
            dir_.file("out/r.md"),
            "--plots",
            dir_.file("out/plots")};
  }
  testing::TinyCliModel model_ = testing::write_tiny_cli_model(testing::tiny_cli_doc(), "eval_out");
  TempDir dir_;
};

TEST_F(EvalOutputs, AFailedPlotLeavesNoResultsBehind) {
  std::filesystem::create_directory(dir_.file("out"));
  // A python3 that passes the up-front matplotlib check but fails to plot.
  std::filesystem::create_directory(dir_.file("bin"));
  std::ofstream(dir_.file("bin/python3")) << "#!/bin/sh\n[ \"$1\" = -c ] && exit 0\nexit 1\n";
  ::chmod(dir_.file("bin/python3").c_str(), 0755);
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir_.file("bin") + ":" + old_path).c_str(), 1);
  const auto r = run_cli(KVEVICT_CLI_PATH, args());
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("plotting failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no output was written"), std::string::npos) << r.err;
  EXPECT_TRUE(testing::list_dir(dir_.file("out")).empty())
      << "left behind: " << testing::list_dir(dir_.file("out")).size() << " entries";
}

TEST_F(EvalOutputs, ASuccessfulRunWritesEveryOutput) {
  const auto check = run_cli("/bin/sh", {"-c", "python3 -c 'import matplotlib' 2>/dev/null"});
  if (check.exit_code != 0) GTEST_SKIP() << "python3 with matplotlib not available";
  std::filesystem::create_directory(dir_.file("out"));
  const auto r = run_cli(KVEVICT_CLI_PATH, args());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.file("out/r.json")));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.file("out/r.md")));
  EXPECT_FALSE(testing::list_dir(dir_.file("out/plots")).empty());
  // Only the three outputs: no staging leftovers.
  EXPECT_EQ(testing::list_dir(dir_.file("out")),
            (std::vector<std::string>{"plots", "r.json", "r.md"}));
}

}  // namespace
}  // namespace kvevict

namespace kvevict {
namespace {

// --list-tasks / --list-methods print what a run would use and exit, without a model file.
TEST(EvalLists, TasksAndResolvedSettingsAsJson) {
  const auto t = testing::run_cli(KVEVICT_CLI_PATH, {"eval", "--list-tasks", "--json"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto tasks = nlohmann::json::parse(t.out);
  ASSERT_EQ(tasks.size(), 11u);
  EXPECT_EQ(tasks[0]["task"], "niah_single_1");
  EXPECT_EQ(tasks[0]["haystack"], "repeated filler");
  EXPECT_EQ(tasks[1]["haystack"], "prose (Austen)");

  const auto m = testing::run_cli(
      KVEVICT_CLI_PATH,
      {"eval", "-m", "/nonexistent.gguf", "--list-methods", "--methods", "all", "--json"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  std::map<std::string, nlohmann::json> by;
  for (const auto& s : nlohmann::json::parse(m.out)) by[s["setting"]] = s;
  ASSERT_TRUE(by.count("dropkv") && by.count("snapkv") && by.count("h2o:kvpress"));
  EXPECT_EQ(by["dropkv"]["window"], 32);
  EXPECT_EQ(by["dropkv"]["pooling"], "max:11");
  EXPECT_EQ(by["dropkv"]["window_in_query_aware"], "same");
  EXPECT_EQ(by["snapkv"]["window_in_query_aware"], "question");
  EXPECT_EQ(by["h2o"]["aggregate"], "h2o");
  const auto spec = testing::run_cli(
      KVEVICT_CLI_PATH, {"eval", "--list-methods", "--methods", "dropkv:spec,full", "--json"});
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  const auto s = nlohmann::json::parse(spec.out);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0]["window"], 8);
  EXPECT_EQ(s[0]["pooling"], "none");
  const auto bad =
      testing::run_cli(KVEVICT_CLI_PATH, {"eval", "--list-methods", "--methods", "dropkv:bogus"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown modifier 'bogus'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvevict
