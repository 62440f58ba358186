// The `kvevict score` and `kvevict analyze` commands end to end: outputs agree with the library,
// and every bad input gets exit code 2, a message naming the problem, and no output file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvevict/io/npy.h"
#include "kvevict/score.h"
#include "support/cli_runner.h"
#include "support/testing.h"

namespace kvevict {
namespace {

using testing::run_cli;
using testing::TempDir;

class ScoreCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    q_ = testing::normal_floats(4 * 8 * 16, 1);
    k_ = testing::normal_floats(2 * 97 * 16, 2);
    v_ = testing::normal_floats(2 * 97 * 16, 3);
    npy::save(dir_.file("q.npy"), DType::kF32, {4, 8, 16}, q_.data());
    npy::save(dir_.file("k.npy"), DType::kF32, {2, 97, 16}, k_.data());
    npy::save(dir_.file("v.npy"), DType::kF32, {2, 97, 16}, v_.data());
  }
  std::vector<std::string> base(const std::string& method) const {
    return {
        "score", "--method",        method, "--q", dir_.file("q.npy"), "--k", dir_.file("k.npy"),
        "--v",   dir_.file("v.npy")};
  }
  // Runs a command expected to fail with exit 2 and a message containing `needle`; checks that
  // the --out file was not created.
  void expect_bad(std::vector<std::string> args, const std::string& needle) {
    const std::string out = dir_.file("bad_out.npy");
    args.emplace_back("--out");
    args.push_back(out);
    const auto r = run_cli(KVEVICT_CLI_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << "partial output left behind";
  }
  TempDir dir_;
  std::vector<float> q_, k_, v_;
};

TEST_F(ScoreCommand, WritesScoresThatMatchTheReference) {
  auto args = base("dropkv:spec");
  for (const char* a : {"--budget", "0.25", "--out"}) args.emplace_back(a);
  args.push_back(dir_.file("s.npy"));
  args.emplace_back("--keep");
  args.push_back(dir_.file("keep.npy"));
  const auto r = run_cli(KVEVICT_CLI_PATH, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  HostTensor s = npy::load(dir_.file("s.npy"));
  ASSERT_EQ(s.shape(), (std::vector<int64_t>{2, 97}));
  ScoreProblem p;
  p.q = TensorView(q_.data(), DType::kF32, {4, 8, 16});
  p.k = TensorView(k_.data(), DType::kF32, {2, 97, 16});
  p.v = TensorView(v_.data(), DType::kF32, {2, 97, 16});
  const auto ref = ref::score(p, ScoreOptions::defaults(Method::kDropKV));
  EXPECT_TRUE(testing::all_close(s.ptr<float>(), ref.scores.data(), ref.scores.size(), 1e-6, 1e-4,
                                 "cli scores"));
  HostTensor keep = npy::load(dir_.file("keep.npy"));
  ASSERT_EQ(keep.shape(), (std::vector<int64_t>{2, 24}));  // floor(0.25 * 97)
  for (int h = 0; h < 2; ++h)
    for (int i = 1; i < 24; ++i)
      EXPECT_LT(keep.ptr<int32_t>()[h * 24 + i - 1], keep.ptr<int32_t>()[h * 24 + i]);
}

// The plain name is kvevict's measured default (window 32, max-pooling 11): with the window set to
// the 8 queries at hand it is the reference's dropkv with that pooling; without it, the error says
// how many queries it needs and which option sets the window.
TEST_F(ScoreCommand, PlainNameIsTheMeasuredDefault) {
  auto args = base("dropkv");
  for (const char* a : {"--window", "8", "--out"}) args.emplace_back(a);
  args.push_back(dir_.file("s.npy"));
  const auto r = run_cli(KVEVICT_CLI_PATH, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ScoreProblem p;
  p.q = TensorView(q_.data(), DType::kF32, {4, 8, 16});
  p.k = TensorView(k_.data(), DType::kF32, {2, 97, 16});
  p.v = TensorView(v_.data(), DType::kF32, {2, 97, 16});
  ScoreOptions o = ScoreOptions::defaults(Method::kDropKV);
  o.pooling = Pooling{PoolKind::kMax, kMeasuredPoolKernel};
  const auto ref = ref::score(p, o);
  HostTensor s = npy::load(dir_.file("s.npy"));
  EXPECT_TRUE(testing::all_close(s.ptr<float>(), ref.scores.data(), ref.scores.size(), 1e-6, 1e-4,
                                 "cli scores, max:11"));
  expect_bad(base("dropkv"), "q holds 8 queries but dropkv with snapkv aggregation needs 32");
}

TEST_F(ScoreCommand, JsonSummaryNamesTheSettings) {
  auto args = base("adadropkv:spec");
  for (const char* a : {"--budget", "20", "--json"}) args.emplace_back(a);
  const auto r = run_cli(KVEVICT_CLI_PATH, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"kept_total\": 40"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("policy=adakv"), std::string::npos) << r.out;
}

TEST_F(ScoreCommand, RejectsUnknownNames) {
  expect_bad(base("dropkvv"), "unknown method 'dropkvv'");
  auto a = base("dropkv:spec");
  a.insert(a.end(), {"--aggregate", "sum"});
  expect_bad(a, "unknown aggregation 'sum'");
  a = base("dropkv:spec");
  a.insert(a.end(), {"--pool", "max:4"});
  expect_bad(a, "pooling 'max:4': kernel 4");
  a = base("dropkv:spec");
  a.insert(a.end(), {"--policy", "fair"});
  expect_bad(a, "unknown policy 'fair'");
}

TEST_F(ScoreCommand, RejectsBudgetsOutOfRange) {
  for (const char* b : {"0", "-1", "1.5", "abc", "150%"}) {
    auto a = base("dropkv:spec");
    a.insert(a.end(), {"--budget", b});
    expect_bad(a, "budget");
  }
  auto a = base("dropkv:spec");
  a.insert(a.end(), {"--budget", "98"});
  expect_bad(a, "--budget 98 keeps more tokens than the 97 tokens of --k");
  a = base("dropkv:spec");
  a.insert(a.end(), {"--compression-ratio", "1"});
  expect_bad(a, "compression ratio");
}

TEST_F(ScoreCommand, RejectsWrongShapesAndNonFinite) {
  std::vector<float> k3(2 * 97 * 8, 0.5f);
  npy::save(dir_.file("k_d8.npy"), DType::kF32, {2, 97, 8}, k3.data());
  auto a = base("dropkv:spec");
  a[6] = dir_.file("k_d8.npy");
  expect_bad(a, "[2, 97, 8]");
  std::vector<float> k_nan = k_;
  k_nan[123] = NAN;
  npy::save(dir_.file("k_nan.npy"), DType::kF32, {2, 97, 16}, k_nan.data());
  a = base("dropkv:spec");
  a[6] = dir_.file("k_nan.npy");
  expect_bad(a, "non-finite");
  std::vector<float> q3(3 * 8 * 16, 0.1f);  // Hq = 3 is not a multiple of Hkv = 2
  npy::save(dir_.file("q3.npy"), DType::kF32, {3, 8, 16}, q3.data());
  a = base("dropkv:spec");
  a[4] = dir_.file("q3.npy");
  expect_bad(a, "3");
}

TEST_F(ScoreCommand, RejectsBrokenFiles) {
  {
    const std::ofstream empty(dir_.file("empty.npy"));
    std::ofstream f(dir_.file("junk.npy"), std::ios::binary);
    f << "not an npy file at all, not even close";
  }
  std::filesystem::copy_file(dir_.file("k.npy"), dir_.file("trunc.npy"));
  std::filesystem::resize_file(dir_.file("trunc.npy"), 200);
  for (const char* f : {"empty.npy", "junk.npy", "trunc.npy", "missing.npy"}) {
    auto a = base("dropkv:spec");
    a[6] = dir_.file(f);
    expect_bad(a, "--k");
  }
  auto a = base("dropkv:spec");
  a[6] = dir_.file("k.txt");
  expect_bad(a, "unknown extension");
}

TEST_F(ScoreCommand, CriticalKVNeedsTheOutputProjection) {
  expect_bad(base("criticalkv"), "--wo");
}

TEST_F(ScoreCommand, AnalyzeReportsRatios) {
  const auto r = run_cli(KVEVICT_CLI_PATH,
                         {"analyze", "--q", dir_.file("q.npy"), "--k", dir_.file("k.npy"), "--v",
                          dir_.file("v.npy"), "--pool-size", "10", "--evict", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ratio_median"), std::string::npos) << r.out;
  const auto bad =
      run_cli(KVEVICT_CLI_PATH, {"analyze", "--q", dir_.file("q.npy"), "--k", dir_.file("k.npy"),
                                 "--v", dir_.file("v.npy"), "--pool-size", "30", "--evict", "3"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("30"), std::string::npos) << bad.err;
}

TEST(Cli, HelpEverywhere) {
  for (const char* cmd : {"score", "analyze"}) {
    const auto r = run_cli(KVEVICT_CLI_PATH, {cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("--json"), std::string::npos) << cmd;
  }
  const auto none = run_cli(KVEVICT_CLI_PATH, {});
  EXPECT_EQ(none.exit_code, 2);
  const auto unknown = run_cli(KVEVICT_CLI_PATH, {"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
}

}  // namespace
}  // namespace kvevict
