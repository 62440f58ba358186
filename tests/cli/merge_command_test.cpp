// `kvevict merge`: two `eval --out` runs of the tiny CLI model (one JSONL task each) merge into one
// results file holding both tasks' records and their average; a run merged with itself, a
// missing file or a single file is refused with exit 2 and no output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "cli/tiny_cli_model.h"
#include "support/cli_runner.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

class MergeCommand : public ::testing::Test {
 protected:
  // One eval run over a one-row dataset of task `task`; returns its results file.
  std::string run_eval(const std::string& task) {
    const std::string data = dir_.file(task + ".jsonl");
    std::ofstream(data) << R"({"context": "the answer is e. ", "question": "what is it?", )"
                        << R"("answer_prefix": "", "answers": ["e"], "max_new_tokens": 2, )"
                        << R"("task": ")" << task << R"("})"
                        << "\n";
    const std::string out = dir_.file(task + ".json");
    const auto r = run_cli(KVEVICT_CLI_PATH, {"eval", "-m", model_.path(), "--data", data,
                                              "--style", "raw", "--methods", "full,dropkv,snapkv",
                                              "--budgets", "0.5", "--window", "2", "--out", out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }
  testing::TinyCliModel model_ =
      testing::write_tiny_cli_model(testing::tiny_cli_doc(), "merge_cmd");
  TempDir dir_;
};

TEST_F(MergeCommand, TwoRunsMergeIntoOneWithBothTasks) {
  const std::string a = run_eval("t1"), b = run_eval("t2");
  const std::string out = dir_.file("m.json");
  const auto r =
      run_cli(KVEVICT_CLI_PATH, {"merge", a, b, "--out", out, "--markdown", dir_.file("m.md")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  const auto doc = nlohmann::json::parse(in);
  std::set<std::string> tasks;
  for (const auto& x : doc["records"]) tasks.insert(x["task"].get<std::string>());
  EXPECT_EQ(tasks, (std::set<std::string>{"t1", "t2"}));
  bool average = false;
  for (const auto& x : doc["aggregate"])
    average |= x["task"] == "average" && x["method"] == "dropkv";
  EXPECT_TRUE(average) << "no average row over the merged tasks";
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.file("m.md")));
}

TEST_F(MergeCommand, OverlappingMissingOrSingleInputsExitTwoWritingNothing) {
  const std::string a = run_eval("t1");
  const std::string out = dir_.file("m.json");
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : {Case{{"merge", a, a, "--out", out}, "repeats sample t1 #0"},
                        Case{{"merge", a, dir_.file("none.json"), "--out", out}, "does not exist"},
                        Case{{"merge", a, "--out", out}, "At least 2 required"},
                        Case{{"merge", a, a}, "nothing to write"}}) {
    const auto r = run_cli(KVEVICT_CLI_PATH, c.args);
    EXPECT_EQ(r.exit_code, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.says;
  }
}

}  // namespace
}  // namespace kvevict
