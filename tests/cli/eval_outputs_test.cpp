// `kvevict eval` writes its outputs all or none (issue 13: a failed --markdown left the results
// JSON behind): --out, --markdown and --plots are staged and committed together, so a failure
// after the evaluation -- here the plot script -- leaves no file at all. On the tiny CLI model
// with a one-row JSONL dataset.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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
