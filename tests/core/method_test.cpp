#include <gtest/gtest.h>

#include <cmath>

#include "kvevict/error.h"
#include "kvevict/method.h"

namespace kvevict {
namespace {

TEST(Budget, FractionsAndCounts) {
  EXPECT_EQ(Budget::parse("0.1").keep_count(1000), 100);
  EXPECT_EQ(Budget::parse("10%").keep_count(1000), 100);
  EXPECT_EQ(Budget::parse("1").keep_count(17), 17);  // 1.0 keeps all
  EXPECT_EQ(Budget::parse("2048").keep_count(4096), 2048);
  EXPECT_EQ(Budget::parse("0.5").keep_count(3), 1);  // floor
  EXPECT_EQ(Budget::from_compression_ratio(0.9).keep_count(1000), 100);
}

TEST(Budget, RejectsOutOfRange) {
  EXPECT_THROW(Budget::parse("0"), Error);
  EXPECT_THROW(Budget::parse("-3"), Error);
  EXPECT_THROW(Budget::parse("nan"), Error);
  EXPECT_THROW(Budget::parse("1.5"), Error);
  EXPECT_THROW(Budget::parse("abc"), Error);
  EXPECT_THROW(Budget::parse("150%"), Error);
  EXPECT_THROW(Budget::from_compression_ratio(1.0), Error);
  try {
    Budget::parse("5000").keep_count(4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos) << e.what();
  }
}

TEST(Budget, AFractionThatKeepsNoTokenIsAnError) {
  // floor(0.01 * 20) = 0 kept the layer empty (attention over it returns zeros).
  try {
    Budget::parse("0.01").keep_count(20);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("budget 0.01 keeps 0 of 20 tokens"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Budget::from_compression_ratio(0.99).keep_count(20), Error);
  EXPECT_EQ(Budget::parse("0.05").keep_count(20), 1);  // one token is a budget
  EXPECT_EQ(Budget::parse("0.01").keep_count(0), 0);   // an empty head keeps its 0 rows
}

TEST(Method, ParsesEveryName) {
  for (const auto& name : method_names()) EXPECT_NO_THROW(method_parse(name)) << name;
  EXPECT_EQ(method_parse("adadropkv").policy, Policy::kAdaKV);
  EXPECT_EQ(method_parse("adadropkv").score.method, Method::kDropKV);
  EXPECT_EQ(method_parse("streamingllm").sink, 4);
  EXPECT_EQ(method_parse("h2o").score.aggregate, Aggregate::kAllQueries);
  EXPECT_EQ(method_parse("tova").score.aggregate, Aggregate::kLastQuery);
}

TEST(Method, UnknownNameListsChoices) {
  try {
    method_parse("dropkvv");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dropkvv"), std::string::npos) << msg;
    EXPECT_NE(msg.find("obcache_vk"), std::string::npos) << msg;
  }
}

// kvevict's measured defaults (method.h) for dropkv, adadropkv and obcache_vk: w = 32 pinned and
// max-pooling 11; ":spec" gives SPEC section 2's, and changes nothing for the other methods.
TEST(Method, MeasuredDefaultsAndTheSpecSuffix) {
  for (const char* name : {"dropkv", "adadropkv", "obcache_vk"}) {
    const MethodSpec m = method_parse(name);
    EXPECT_EQ(m.score.window, kMeasuredWindow) << name;
    EXPECT_EQ(m.score.pooling.str(), "max:11") << name;
    EXPECT_TRUE(m.pin_window) << name;
    const MethodSpec s = method_parse(std::string(name) + ":spec");
    EXPECT_EQ(s.score.window, ScoreOptions::defaults(s.score.method).window) << name;
    EXPECT_EQ(s.score.pooling.str(), ScoreOptions::defaults(s.score.method).pooling.str()) << name;
    EXPECT_FALSE(s.pin_window) << name;
    EXPECT_EQ(s.policy, m.policy) << name;
  }
  EXPECT_EQ(method_parse("dropkv:spec").score.window, 8);
  EXPECT_EQ(method_parse("dropkv:spec").score.pooling.str(), "none");
  EXPECT_EQ(method_parse("adadropkv:spec").policy, Policy::kAdaKV);
  for (const char* name : {"obcache_v", "obcache_k", "snapkv", "adakv", "h2o", "streamingllm"}) {
    const MethodSpec m = method_parse(name), s = method_parse(std::string(name) + ":spec");
    EXPECT_FALSE(m.pin_window) << name;
    EXPECT_EQ(m.score.describe(), s.score.describe()) << name;
    EXPECT_EQ(m.sink, s.sink) << name;
  }
  for (const char* bad : {"dropkv:", ":spec", "dropkv:spec:spec", "spec", "dropkv:SPEC"}) {
    try {
      method_parse(bad);
      FAIL() << "expected an error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unknown method"), std::string::npos) << e.what();
    }
  }
}

TEST(Method, Defaults) {
  EXPECT_EQ(ScoreOptions::defaults(Method::kDropKV).window, 8);
  EXPECT_EQ(ScoreOptions::defaults(Method::kSnapKV).window, 32);
  EXPECT_EQ(ScoreOptions::defaults(Method::kSnapKV).pooling.str(), "max:7");
  EXPECT_EQ(ScoreOptions::defaults(Method::kObcacheVK).window, 16);
  EXPECT_EQ(ScoreOptions::defaults(Method::kH2O).queries_needed(100), 100);
  EXPECT_EQ(ScoreOptions::defaults(Method::kTOVA).queries_needed(100), 1);
  EXPECT_EQ(ScoreOptions::defaults(Method::kKNorm).queries_needed(100), 0);
}

TEST(Pooling, Parse) {
  EXPECT_EQ(Pooling::parse("max:7").kernel, 7);
  EXPECT_EQ(Pooling::parse("avg:3").kind, PoolKind::kAvg);
  EXPECT_EQ(Pooling::parse("none").kind, PoolKind::kNone);
  EXPECT_THROW(Pooling::parse("max:4"), Error);
  EXPECT_THROW(Pooling::parse("max"), Error);
  EXPECT_THROW(Pooling::parse("median:3"), Error);
}

}  // namespace
}  // namespace kvevict
