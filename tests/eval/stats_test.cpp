// Intervals, paired comparisons, the DEV/TEST split, the ablation's choice and the results
// files' provenance on inputs whose answers are known by hand.
#include <gtest/gtest.h>

#include <set>

#include "eval/ablation.h"
#include "eval/provenance.h"
#include "eval/rng.h"
#include "eval/split.h"
#include "eval/stats.h"
#include "eval/summary.h"
#include "kvevict/error.h"

namespace kvevict::eval {
namespace {

std::vector<double> binary(int ones, int n) {
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < ones; ++i) v[static_cast<size_t>(i) * n / ones] = 100.0;
  return v;
}

TEST(Stats, QuantileIsNumpysLinearType7) {
  // numpy.quantile([1, 2, 4, 8], q): 0.25 -> 1.75, 0.5 -> 3, 0.9 -> 6.8.
  const std::vector<double> v = {1, 2, 4, 8};
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.5), 3.0);
  EXPECT_NEAR(quantile_sorted(v, 0.9), 6.8, 1e-12);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 1.0), 8.0);
  EXPECT_DOUBLE_EQ(quantile_sorted({5}, 0.3), 5.0);
  EXPECT_THROW(quantile_sorted({}, 0.5), Error);
  EXPECT_THROW(quantile_sorted(v, 1.5), Error);
}

TEST(Stats, BinaryMeanIntervalIsTheBinomialQuantiles) {
  // 50 of 100 samples right: a resample's mean is 100 Bin(100, 1/2) / 100. P(X <= 39) = 0.0176
  // and P(X <= 40) = 0.0284, so the 2.5% quantile is 40 and, by symmetry, the 97.5% one is 60
  // (20000 resamples put the empirical CDF within 0.0011 of these: the order statistics at the
  // quantiles are 40 and 60).
  BootstrapOptions opt;
  opt.resamples = 20000;
  const Interval iv = bootstrap_mean(binary(50, 100), opt, stream_key("cell"));
  EXPECT_DOUBLE_EQ(iv.estimate, 50.0);
  EXPECT_EQ(iv.n, 100);
  EXPECT_DOUBLE_EQ(iv.low, 40.0);
  EXPECT_DOUBLE_EQ(iv.high, 60.0);
  // Constant scores: no spread to resample.
  const Interval c = bootstrap_mean(std::vector<double>(7, 100.0), opt, 1);
  EXPECT_DOUBLE_EQ(c.low, 100.0);
  EXPECT_DOUBLE_EQ(c.high, 100.0);
  // One sample: the interval is that sample.
  const Interval one = bootstrap_mean({100.0}, opt, 1);
  EXPECT_DOUBLE_EQ(one.low, 100.0);
  EXPECT_DOUBLE_EQ(one.high, 100.0);
}

TEST(Stats, SeededAndDependentOnlyOnTheCell) {
  BootstrapOptions opt;
  opt.resamples = 500;
  const auto v = binary(3, 10);
  const Interval a = bootstrap_mean(v, opt, 42), b = bootstrap_mean(v, opt, 42);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  // Another stream or seed gives other draws (of the same distribution).
  const auto d1 = bootstrap_means(v, 500, opt.seed, 42), d2 = bootstrap_means(v, 500, opt.seed, 43);
  const auto d3 = bootstrap_means(v, 500, opt.seed + 1, 42);
  EXPECT_NE(d1, d2);
  EXPECT_NE(d1, d3);
  // Off: no interval, the estimate stays.
  opt.resamples = 0;
  const Interval off = bootstrap_mean(v, opt, 42);
  EXPECT_DOUBLE_EQ(off.estimate, 30.0);
  EXPECT_FALSE(off.has_interval());
  opt.level = 1.0;
  EXPECT_THROW(opt.validate(), Error);
}

TEST(Stats, AverageOverTasksResamplesWithinEachTask) {
  // One task always right, one always wrong: the average is 50 with no uncertainty at all when
  // each task keeps its weight (stratified); pooling the samples would give an interval ~ +-20.
  BootstrapOptions opt;
  opt.resamples = 2000;
  const Interval s = bootstrap_mean_of_means(
      {std::vector<double>(10, 100.0), std::vector<double>(30, 0.0)}, opt, 9);
  EXPECT_DOUBLE_EQ(s.estimate, 50.0);  // mean of task means, not 25 (the pooled mean)
  EXPECT_DOUBLE_EQ(s.low, 50.0);
  EXPECT_DOUBLE_EQ(s.high, 50.0);
  EXPECT_EQ(s.n, 40);
  EXPECT_THROW(bootstrap_mean_of_means({{1.0}, {}}, opt, 9), Error);
}

TEST(Stats, PairedDifferenceResamplesPairsTogether) {
  BootstrapOptions opt;
  opt.resamples = 20000;
  // B right on half the samples (i % 4 in {1, 2}); A right wherever B is and on the even samples
  // (i % 4 == 0 adds 25): A 75, B 50, A - B = 25, never negative.
  std::vector<std::pair<double, double>> pairs;
  const auto extra = binary(50, 100);  // 100 at the even indices
  for (int i = 0; i < 100; ++i) {
    const double b = (i % 4 == 1) || (i % 4 == 2) ? 100.0 : 0.0;
    const double a = extra[static_cast<size_t>(i)] > 0 && b == 0 ? 100.0 : b;
    pairs.emplace_back(a, b);
  }
  int a_only = 0;
  for (const auto& [a, b] : pairs) a_only += a > b;
  ASSERT_EQ(a_only, 25);
  const PairedDifference d = paired_difference({pairs}, opt, 5);
  EXPECT_EQ(d.a_better, a_only);
  EXPECT_EQ(d.b_better, 0);
  EXPECT_EQ(d.equal, 100 - a_only);
  EXPECT_DOUBLE_EQ(d.diff.estimate, a_only);
  EXPECT_DOUBLE_EQ(d.b.estimate, 50.0);
  // Paired: A - B is never negative in any resample; independent resampling of the two settings
  // (their own intervals, ~ +-10 each) would put the lower end far below 0.
  EXPECT_GE(d.diff.low, 0.0);
  EXPECT_LT(d.diff.high - d.diff.low, (d.a.high - d.a.low) + (d.b.high - d.b.low));
  // Identical settings: difference exactly 0.
  std::vector<std::pair<double, double>> same;
  for (double x : binary(3, 9)) same.emplace_back(x, x);
  const PairedDifference z = paired_difference({same}, opt, 5);
  EXPECT_DOUBLE_EQ(z.diff.low, 0.0);
  EXPECT_DOUBLE_EQ(z.diff.high, 0.0);
  EXPECT_EQ(z.equal, 9);
}

TEST(Stats, PairedDifferenceOfExactlyHalfIsTheBinomialCase) {
  BootstrapOptions opt;
  opt.resamples = 20000;
  std::vector<std::pair<double, double>> pairs;
  for (double x : binary(50, 100)) pairs.emplace_back(x, 0.0);
  const PairedDifference d = paired_difference({pairs}, opt, 77);
  EXPECT_DOUBLE_EQ(d.diff.estimate, 50.0);
  EXPECT_DOUBLE_EQ(d.diff.low, 40.0);
  EXPECT_DOUBLE_EQ(d.diff.high, 60.0);
}

SampleRecord record(const std::string& split, const std::string& task, const std::string& method,
                    int64_t index, double score) {
  SampleRecord r;
  r.split = split;
  r.task = task;
  r.target_length = 2048;
  r.sample_index = index;
  r.seed = static_cast<uint64_t>(1000 + index);
  r.method = method;
  r.budget = method == "full" ? "1" : "0.1";
  r.window = 8;
  r.pooling = "none";
  r.policy = "uniform";
  r.score = score;
  return r;
}

TEST(Summary, CellsAndComparisonsFromRecords) {
  EvalResults res;
  res.meta.bootstrap.resamples = 2000;
  res.meta.comparisons = {{"dropkv", "snapkv"}, {"dropkv", "full"}, {"absent", "snapkv"}};
  // Task t1: dropkv right on 3 of 4, snapkv on 1 of 4 (the same sample); t2: both right on 2.
  const double dk[] = {100, 100, 100, 0}, sk[] = {100, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    res.records.push_back(record("test", "t1", "dropkv", i, dk[i]));
    res.records.push_back(record("test", "t1", "snapkv", i, sk[i]));
    res.records.push_back(record("test", "t1", "full", i, 100));
    res.records.push_back(record("test", "t2", "dropkv", i, i < 2 ? 100 : 0));
    res.records.push_back(record("test", "t2", "snapkv", i, i < 2 ? 100 : 0));
    res.records.push_back(record("test", "t2", "full", i, 100));
  }
  const auto rows = res.aggregate();
  ASSERT_EQ(rows.size(), 9u);  // 3 settings x (2 tasks + average)
  for (const auto& r : rows) {
    if (r.method == "dropkv" && r.task == "average") {
      EXPECT_DOUBLE_EQ(r.score, (75.0 + 50.0) / 2);
      EXPECT_EQ(r.samples, 8);
      EXPECT_LT(r.ci_low, r.score);
      EXPECT_GT(r.ci_high, r.score);
    }
    if (r.method == "full") {
      EXPECT_DOUBLE_EQ(r.ci_low, 100.0);
      EXPECT_DOUBLE_EQ(r.ci_high, 100.0);
    }
  }
  const auto cmp = res.compare();
  // dropkv/snapkv and dropkv/full: per task + average; the absent pair is skipped.
  ASSERT_EQ(cmp.size(), 6u);
  for (const auto& c : cmp) {
    EXPECT_EQ(c.budget, "0.1");
    if (c.b == "snapkv" && c.task == "average") {
      EXPECT_DOUBLE_EQ(c.result.diff.estimate, (50.0 + 0.0) / 2);
      EXPECT_EQ(c.result.a_better, 2);
      EXPECT_EQ(c.result.equal, 6);
      EXPECT_EQ(c.result.b_better, 0);
      EXPECT_GE(c.result.diff.low, 0.0);  // never worse on any pair
    }
    if (c.b == "full" && c.task == "t2") {
      EXPECT_DOUBLE_EQ(c.result.diff.estimate, -50.0);
      EXPECT_EQ(c.result.b_better, 2);
    }
  }
  // A cell's interval does not depend on the other cells of the run.
  EvalResults only = res;
  only.records.erase(std::remove_if(only.records.begin(), only.records.end(),
                                    [](const SampleRecord& r) { return r.method != "dropkv"; }),
                     only.records.end());
  const auto rows1 = only.aggregate();
  for (const auto& r1 : rows1)
    for (const auto& r : rows)
      if (r.method == r1.method && r.task == r1.task) {
        EXPECT_EQ(r.ci_low, r1.ci_low);
        EXPECT_EQ(r.ci_high, r1.ci_high);
      }
}

TEST(Summary, CostTableSumsTheBatches) {
  EvalResults res;
  for (int i = 0; i < 2; ++i) {
    BatchRecord b;
    b.split = "test";
    b.task = "t";
    b.target_length = 4096;
    b.sample_index = i;
    b.prefill_tokens = 4000 + 100 * i;
    b.settings = 10;
    b.prefill_seconds = 1.0 + i;  // 1, 2
    b.answer_seconds = 3.0;
    b.evict_seconds = 0.5;  // 10 settings: 0.05 each
    b.decode_seconds = 2.0;
    b.append_seconds = 0.0;
    b.decode_steps = 20;
    b.batches = 1;
    res.batches.push_back(b);
  }
  const auto cost = cost_summary(res);
  ASSERT_EQ(cost.size(), 2u);  // the group and the whole run
  const CostRow& c = cost[0];
  EXPECT_EQ(c.samples, 2);
  EXPECT_DOUBLE_EQ(c.prefill_tokens, 4050.0);
  EXPECT_DOUBLE_EQ(c.prefill_s, 1.5);
  EXPECT_DOUBLE_EQ(c.evict_s_per_setting, 0.05);
  EXPECT_DOUBLE_EQ(c.decode_s_per_batch, 2.0);
  EXPECT_DOUBLE_EQ(c.decode_steps_per_batch, 20.0);
  EXPECT_DOUBLE_EQ(c.batches_per_sample, 1.0);
  EXPECT_DOUBLE_EQ(c.total_s, 1 + 2 + 3 + 3);
  EXPECT_EQ(cost[1].target_length, -1);
  // One batch without runtime times: the group reports none ("-"), not a wrong mean.
  res.batches[1].decode_seconds = -1;
  EXPECT_LT(cost_summary(res)[0].decode_s_per_batch, 0.0);
}

TEST(Split, DevAndTestSeedsAreDisjoint) {
  std::set<uint64_t> test, dev;
  for (int64_t i = 0; i < 2000; ++i) {
    test.insert(sample_seed(3, "niah_single_1", split_first_index(SeedSplit::kTest) + i));
    dev.insert(sample_seed(3, "niah_single_1", split_first_index(SeedSplit::kDev) + i));
  }
  EXPECT_EQ(test.size(), 2000u);
  EXPECT_EQ(dev.size(), 2000u);
  for (uint64_t s : dev) EXPECT_EQ(test.count(s), 0u);
  EXPECT_EQ(split_parse("dev"), SeedSplit::kDev);
  EXPECT_STREQ(split_name(SeedSplit::kTest), "test");
  EXPECT_THROW(split_parse("train"), Error);
  EXPECT_THROW(check_split_size(0), Error);
  EXPECT_THROW(check_split_size(kSplitSpan + 1), Error);
}

TEST(Ablation, ChoosesTheBestDevSettingAndNeverReadsTest) {
  AblationOptions opt;
  opt.methods = {"dropkv"};
  opt.windows = {8, 16};
  opt.poolings = {"none", "max:7"};
  const auto grid = ablation_grid("dropkv", opt);
  ASSERT_EQ(grid.size(), 4u);
  EXPECT_EQ(grid[1], "dropkv:w=8:pool=max:7");
  EvalResults res;
  // DEV: w=16 + max:7 is best; TEST (which must not count) says w=8 + none.
  const double dev_scores[] = {20, 40, 30, 90};
  for (size_t g = 0; g < grid.size(); ++g)
    for (int i = 0; i < 2; ++i) {
      res.records.push_back(record("dev", "t", grid[g], i, dev_scores[g]));
      res.records.push_back(record("test", "t", grid[g], i, g == 0 ? 100 : 0));
    }
  for (int i = 0; i < 2; ++i) res.records.push_back(record("dev", "t", "dropkv", i, 10));
  const auto choice = choose_ablation(res, opt);
  ASSERT_EQ(choice.size(), 1u);
  EXPECT_EQ(choice[0].chosen, "dropkv:w=16:pool=max:7");
  EXPECT_DOUBLE_EQ(choice[0].dev_score, 90.0);
  EXPECT_DOUBLE_EQ(choice[0].default_dev_score, 10.0);
  EXPECT_EQ(choice[0].cells, 1);
  // A tie goes to the earlier grid setting.
  for (auto& r : res.records)
    if (r.split == "dev" && r.method != "dropkv") r.score = 50;
  EXPECT_EQ(choose_ablation(res, opt)[0].chosen, grid[0]);
  // A grid setting missing from DEV is an error, not a silent choice among the rest.
  res.records.erase(std::remove_if(res.records.begin(), res.records.end(),
                                   [&](const SampleRecord& r) { return r.method == grid[3]; }),
                    res.records.end());
  EXPECT_THROW(choose_ablation(res, opt), Error);
  // Settings the grid parses as: pinned windows and the pooling.
  const MethodConfig m = MethodConfig::make(grid[3], Budget{0.1});
  EXPECT_TRUE(m.spec.pin_window);
  EXPECT_EQ(m.window_for(40), 16);  // pinned: not the question's 40 tokens
  EXPECT_EQ(m.pooling(), "max:7");
  opt.windows = {0};
  EXPECT_THROW(opt.validate(), Error);
}

TEST(Settings, KvpressVariantsAndModifiers) {
  const MethodConfig s = MethodConfig::make("snapkv:kvpress", Budget{0.1});
  EXPECT_EQ(s.window_for(20), 64);
  EXPECT_EQ(s.pooling(), "avg:5");
  EXPECT_FALSE(s.window_is_question(20));
  const MethodConfig ours = MethodConfig::make("snapkv", Budget{0.1});
  EXPECT_EQ(ours.window_for(20), 20);  // query-aware: the question
  EXPECT_TRUE(ours.window_is_question(20));
  EXPECT_TRUE(MethodConfig::make("h2o:kvpress", Budget{0.1}).normalize());
  EXPECT_FALSE(MethodConfig::make("h2o", Budget{0.1}).normalize());
  EXPECT_TRUE(MethodConfig::make("tova:kvpress", Budget{0.1}).keep_last);
  EXPECT_EQ(MethodConfig::make("obcache_k:h2o", Budget{0.1}).aggregate(), "h2o");
  EXPECT_EQ(MethodConfig::make("obcache_k", Budget{0.1}).aggregate(), "snapkv");
  EXPECT_EQ(MethodConfig::make("obcache_vk:adakv", Budget{0.1}).policy(), "adakv");
  EXPECT_DOUBLE_EQ(MethodConfig::make("adakv:alpha=0.5", Budget{0.1}).alpha, 0.5);
  for (const char* bad : {"snapkv:h2o", "dropkv:alpha=0.5", "snapkv:norm", "knorm:kvpress",
                          "dropkv:w=0", "dropkv:bogus", "dropkv:tova:w=8", "nosuch"})
    EXPECT_THROW(MethodConfig::make(bad, Budget{0.1}), Error) << bad;
  const auto all = expand_method_groups({"all"});
  EXPECT_EQ(all.front(), "full");
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), all.size());
  for (const auto& n : all) MethodConfig::make(n, Budget{0.1});  // every member parses
}

// The measured defaults pin dropkv's / obcache_vk's window at 32 in both modes; ":spec" and
// ":w=q" give query-aware prompts the question as the window again.
TEST(Settings, MeasuredDefaultsArePinnedAndSpecIsNot) {
  const int question = 20;
  for (const char* name : {"dropkv", "adadropkv", "obcache_vk", "dropkv:adakv"}) {
    const MethodConfig m = MethodConfig::make(name, Budget{0.1});
    EXPECT_EQ(m.window_for(question), kMeasuredWindow) << name;
    EXPECT_FALSE(m.window_is_question(question)) << name;
    EXPECT_EQ(m.pooling(), "max:11") << name;
    const EvictConfig cfg = m.evict_config(question);
    EXPECT_EQ(cfg.prefill.score.window, kMeasuredWindow) << name;
    EXPECT_EQ(cfg.prefill.select.window, kMeasuredWindow) << name;
  }
  for (const char* name : {"dropkv:spec", "dropkv:w=q", "obcache_vk:spec", "adadropkv:spec"}) {
    const MethodConfig m = MethodConfig::make(name, Budget{0.1});
    EXPECT_EQ(m.window_for(question), question) << name;
    EXPECT_TRUE(m.window_is_question(question)) << name;
  }
  EXPECT_EQ(MethodConfig::make("dropkv:spec", Budget{0.1}).window_for(0), 8);
  EXPECT_EQ(MethodConfig::make("dropkv:spec", Budget{0.1}).pooling(), "none");
  EXPECT_EQ(MethodConfig::make("dropkv:w=q", Budget{0.1}).pooling(), "max:11");
  EXPECT_EQ(MethodConfig::make("obcache_vk:spec:pool=avg:5", Budget{0.1}).pooling(), "avg:5");
  // The h2o aggregation has no window to pin.
  EXPECT_EQ(MethodConfig::make("dropkv:h2o", Budget{0.1}).window_for(question), 0);
}

TEST(Provenance, Sha256KnownVectorsAndBuildInfo) {
  // FIPS 180-4 examples.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_THROW(file_sha256("/nonexistent/model.gguf"), Error);
  const BuildInfo& b = build_info();
  EXPECT_FALSE(b.version.empty());
  EXPECT_FALSE(b.git_commit.empty());
  const std::string t = utc_timestamp();
  ASSERT_EQ(t.size(), 20u) << t;
  EXPECT_EQ(t.back(), 'Z');
}

}  // namespace
}  // namespace kvevict::eval
