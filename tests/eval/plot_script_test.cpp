// tools/plot_results.py reads what the C++ reports write: every figure appears for a full results
// set, and missing sections are skipped without an error. Skips when python3 or matplotlib is
// missing (scripts/install_deps.sh --eval installs matplotlib).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "eval/perplexity.h"
#include "eval/ppl_report.h"
#include "eval/report.h"

namespace kvevict::eval {
namespace {

namespace fs = std::filesystem;

int run(const std::string& cmd) {
  return std::system((cmd + " > /dev/null 2>&1").c_str());
}

EvalResults fake_results() {
  EvalResults res;
  res.meta.model = "plot-test";
  for (int64_t length : {4096, 8192})
    for (const char* method : {"full", "dropkv", "snapkv"})
      for (const char* budget : {"0.1", "0.5"}) {
        SampleRecord r;
        r.task = "niah_single_2";
        r.target_length = length;
        r.method = method;
        r.budget = std::string(method) == "full" ? "1" : budget;
        r.window = std::string(method) == "full" ? 0 : 8;
        r.pooling = "none";
        r.policy = "uniform";
        r.score = std::string(method) == "full" ? 100.0 : 50.0;
        res.records.push_back(r);
      }
  return res;
}

class PlotScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run("python3 -c 'import matplotlib'") != 0)
      GTEST_SKIP() << "python3 with matplotlib not available (scripts/install_deps.sh --eval)";
    dir_ = fs::temp_directory_path() /
           ("kvevict_plot_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string script() const { return std::string(KVEVICT_SOURCE_DIR) + "/tools/plot_results.py"; }
  fs::path dir_;
};

TEST_F(PlotScript, DrawsEveryFigureFromTheReports) {
  write_text_file((dir_ / "eval.json").string(), results_to_json(fake_results()));
  PplRun ppl;
  ppl.meta.model = "plot-test";
  for (const char* m : {"full", "h2o"})
    for (double b : {256.0, 1024.0}) {
      PplResult r;
      r.method = m;
      r.budget = std::string(m) == "full" ? "1" : std::to_string(static_cast<int>(b));
      r.ppl = 10.0 + 1000.0 / b;
      ppl.results.push_back(r);
    }
  write_text_file((dir_ / "ppl.json").string(), ppl_to_json(ppl));
  write_text_file((dir_ / "cone.json").string(),
                  R"({"meta": {"model": "plot-test", "prompt_tokens": 64},
                      "diagnostics": {"cone": [{"layer": 0, "c_star": [0.1, -0.2, 0.3]},
                                               {"layer": 1, "c_star": [0.5]}],
                                      "layers": [{"layer": 0, "c_star_median": 0.1,
                                                  "ratio_median": 1.0, "ratio_p95": 1.2},
                                                 {"layer": 1, "c_star_median": 0.5,
                                                  "ratio_median": 1.1, "ratio_p95": 1.3}]}})");
  const fs::path out = dir_ / "plots";
  ASSERT_EQ(run("python3 " + script() + " " + (dir_ / "eval.json").string() + " " +
                (dir_ / "ppl.json").string() + " " + (dir_ / "cone.json").string() + " --out " +
                out.string()),
            0);
  for (const char* f :
       {"accuracy_vs_budget_4096_query-aware.png", "accuracy_vs_budget_8192_query-aware.png",
        "accuracy_vs_length_query-aware_0.1.png", "ppl_vs_budget.png", "cone_constant_hist.png",
        "cone_per_layer.png"})
    EXPECT_TRUE(fs::exists(out / f)) << f << " was not written";
}

TEST_F(PlotScript, MissingSectionsAreSkipped) {
  write_text_file((dir_ / "meta.json").string(), R"({"meta": {"model": "m"}})");
  const fs::path out = dir_ / "plots";
  EXPECT_EQ(
      run("python3 " + script() + " " + (dir_ / "meta.json").string() + " --out " + out.string()),
      0);
  EXPECT_TRUE(fs::is_empty(out));
  // An unreadable input is an error that names the file.
  EXPECT_NE(
      run("python3 " + script() + " " + (dir_ / "nope.json").string() + " --out " + out.string()),
      0);
  // So is a JSON file that is no kvevict results document.
  write_text_file((dir_ / "other.json").string(), R"({"name": "x"})");
  EXPECT_NE(
      run("python3 " + script() + " " + (dir_ / "other.json").string() + " --out " + out.string()),
      0);
}

TEST_F(PlotScript, SeveralModelsNeedModel) {
  EvalResults a = fake_results(), b = fake_results();
  b.meta.model = "other-model";
  write_text_file((dir_ / "a.json").string(), results_to_json(a));
  write_text_file((dir_ / "b.json").string(), results_to_json(b));
  const std::string both = (dir_ / "a.json").string() + " " + (dir_ / "b.json").string();
  EXPECT_NE(run("python3 " + script() + " " + both + " --out " + (dir_ / "p1").string()), 0);
  ASSERT_EQ(run("python3 " + script() + " " + both + " --model other-model --out " +
                (dir_ / "p2").string()),
            0);
  EXPECT_TRUE(fs::exists(dir_ / "p2" / "accuracy_vs_length_query-aware_0.1.png"));
}

}  // namespace
}  // namespace kvevict::eval
