// tools/eval_protocol.py's decisions, from the results files the C++ reports write: the survey's
// length rule (lengths up to the longest at which the full cache's niah average is still >= 40,
// the scan stopping at the first length below it), the ablation's recorded choices and the TEST
// sweep's settings with those choices passed explicitly. Every run's results file exists already,
// so the steps launch nothing (a resumed step skips finished runs): no model, no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/report.h"

namespace kvevict::eval {
namespace {

namespace fs = std::filesystem;

// Full-cache DEV rows at one length: niah_single_1 scores `niah`, vt 0.
EvalResults survey_results(int64_t length, double niah) {
  EvalResults res;
  res.meta.model = "SmolLM2-135M-Instruct.Q4_1";
  for (const char* task : {"niah_single_1", "vt"})
    for (int i = 0; i < 2; ++i) {
      SampleRecord r;
      r.task = task;
      r.target_length = length;
      r.sample_index = i;
      r.split = "dev";
      r.method = "full";
      r.budget = "1";
      r.score = std::string(task) == "vt" ? 0.0 : niah;
      res.records.push_back(r);
    }
  return res;
}

class ProtocolScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system(
            "python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' > /dev/null 2>&1"))
      GTEST_SKIP() << "python3 >= 3.8 not available";
    dir_ = fs::temp_directory_path() /
           ("kvevict_protocol_" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / "corpus" / "austen");
    fs::create_directories(dir_ / "state" / "survey");
    fs::create_directories(dir_ / "state" / "ablate");
    // A kvevict that fails if the script ever runs it: every run here is finished already.
    std::ofstream(dir_ / "bin" / "kvevict")
        << "#!/bin/sh\necho ran >> " << (dir_ / "ran").string() << "\nexit 1\n";
    fs::permissions(dir_ / "bin" / "kvevict", fs::perms::owner_all);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  int protocol(const std::string& steps, std::string* out) {
    const std::string log = (dir_ / "log").string();
    const std::string cmd =
        "MODELS=smollm2 TASKS=niah_single_1,vt SURVEY_LENGTHS=2048,4096,8192 "
        "BUDGETS=0.1 PACK=0 python3 " +
        std::string(KVEVICT_SOURCE_DIR) + "/tools/eval_protocol.py " + steps + " " +
        (dir_ / "bin").string() + " " + dir_.string() + " " + (dir_ / "corpus").string() + " " +
        (dir_ / "state").string() + " > " + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return rc;
  }
  nlohmann::json decisions() {
    std::ifstream in(dir_ / "state" / "decisions.json");
    return nlohmann::json::parse(in);
  }
  fs::path dir_;
};

TEST_F(ProtocolScript, SurveyKeepsLengthsUpToTheFirstBelowTheNiahThreshold) {
  // 2K: 100, 4K: 50 (kept), 8K: 30 -> [2048, 4096]; then a later rise would not count.
  const std::pair<int64_t, double> cells[] = {{2048, 100.0}, {4096, 50.0}, {8192, 30.0}};
  for (const auto& [len, niah] : cells)
    write_text_file(
        (dir_ / "state" / "survey" / ("smollm2_" + std::to_string(len) + ".json")).string(),
        results_to_json(survey_results(len, niah)));
  std::string out;
  ASSERT_EQ(protocol("survey", &out), 0) << out;
  EXPECT_EQ(decisions()["useful_lengths"]["smollm2"], nlohmann::json::array({2048, 4096})) << out;
  EXPECT_NE(out.find("| smollm2 | 8192 | 30.0 |"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ / "ran")) << "a finished run was started again";

  // 2K below the threshold: the shortest length is used and the table says so.
  write_text_file((dir_ / "state" / "survey" / "smollm2_2048.json").string(),
                  results_to_json(survey_results(2048, 20.0)));
  ASSERT_EQ(protocol("survey", &out), 0) << out;
  EXPECT_EQ(decisions()["useful_lengths"]["smollm2"], nlohmann::json::array({2048}));
  EXPECT_NE(out.find("no length reaches niah 40"), std::string::npos) << out;
}

TEST_F(ProtocolScript, TheAblationsChoiceIsPassedExplicitlyToTheSweep) {
  for (int64_t len : {2048, 4096, 8192})
    write_text_file(
        (dir_ / "state" / "survey" / ("smollm2_" + std::to_string(len) + ".json")).string(),
        results_to_json(survey_results(len, len == 2048 ? 100.0 : 10.0)));
  EvalResults abl = survey_results(2048, 100.0);
  AblationChoice c;
  c.method = "dropkv";
  c.chosen = "dropkv:w=16:pool=max:7";
  c.default_setting = "dropkv";
  c.cells = 2;
  abl.ablation.push_back(c);
  write_text_file((dir_ / "state" / "ablate" / "smollm2_ablation.json").string(),
                  results_to_json(abl));
  std::string out;
  ASSERT_EQ(protocol("survey,ablate", &out), 0) << out;
  EXPECT_EQ(decisions()["chosen"]["smollm2"]["dropkv"], "dropkv:w=16:pool=max:7") << out;
  // The sweep's runs (one process a task: SWEEP_SHARD=task) name the chosen setting and its
  // comparisons; the fake kvevict fails them, so the step reports them as failed and missing,
  // and the status says so.
  EXPECT_NE(protocol("sweep", &out), 0) << out;
  std::ifstream log(dir_ / "state" / "sweep" / "shards" / "smollm2_2048_core.vt.log");
  std::string first;
  std::getline(log, first);
  EXPECT_NE(first.find("dropkv:w=16:pool=max:7,adadropkv:w=16:pool=max:7"), std::string::npos)
      << first;
  EXPECT_NE(first.find("dropkv:w=16:pool=max:7/snapkv"), std::string::npos) << first;
  EXPECT_NE(first.find("--split test"), std::string::npos) << first;
  EXPECT_NE(first.find("--tasks vt "), std::string::npos) << first;
  EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
}

TEST_F(ProtocolScript, UnknownStepsAndMissingToolsAreErrors) {
  std::string out;
  EXPECT_NE(protocol("nope", &out), 0);
  EXPECT_NE(out.find("unknown step 'nope'"), std::string::npos) << out;
  fs::remove(dir_ / "bin" / "kvevict");
  EXPECT_NE(protocol("survey", &out), 0);
  EXPECT_NE(out.find("no kvevict tool"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvevict::eval
