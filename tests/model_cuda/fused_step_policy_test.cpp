// The fused decode step's policy (src/model_cuda/fused_step_policy.h): which steps are fused under
// each mode; which projections the small-batch GEMV takes under each route and with which kernel,
// the byte bound of the `small` route (gated projections count both halves) and its batch-1 rows of
// at most kGemvTileK columns whatever the matrix's size, shapes the GEMV does not cover never
// taken; the values of KVEVICT_DECODE_FUSED, KVEVICT_GEMV_ROUTE, KVEVICT_GEMV_PRELOAD and
// KVEVICT_GEMV_FOLDS and the refusal of any other. Host logic only: no GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "kvevict/error.h"
#include "model_cuda/fused_step_policy.h"

namespace kvevict::gpu {
namespace {

using detail::bf16;
using detail::GemvArgs;
using detail::GemvOut;

// 16-byte aligned host bytes the arguments point into: gemv_takes only checks their alignment.
alignas(16) bf16 g_storage[64];

// Arguments of an [N, K] projection at batch B.
GemvArgs projection(int B, int N, int K, GemvOut out = GemvOut::kBf16) {
  GemvArgs a;
  a.x = g_storage;
  a.w = g_storage + 8;
  a.y = g_storage + 16;
  a.B = B;
  a.N = N;
  a.K = K;
  a.out = out;
  return a;
}

TEST(FusedStepPolicy, BatchOneFusesStepsOfOneSequenceOnly) {
  EXPECT_TRUE(step_is_fused(FusedStep::kBatchOne, 1));
  EXPECT_FALSE(step_is_fused(FusedStep::kBatchOne, 2));
  EXPECT_FALSE(step_is_fused(FusedStep::kOff, 1));
  for (int B : {1, 2, 8}) EXPECT_TRUE(step_is_fused(FusedStep::kOn, B)) << B;
}

TEST(FusedStepPolicy, FusedModeValuesAndTheRefusalOfOthers) {
  EXPECT_EQ(parse_fused_step(""), FusedStep::kBatchOne);
  EXPECT_EQ(parse_fused_step("auto"), FusedStep::kBatchOne);
  EXPECT_EQ(parse_fused_step("0"), FusedStep::kOff);
  EXPECT_EQ(parse_fused_step("1"), FusedStep::kOn);
  for (const char* bad : {"2", "on", "true", " 1"}) {
    try {
      parse_fused_step(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const kvevict::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

// A 0 / 1 switch: both values read, anything else refused naming it, the environment read.
void expect_on_off_switch(bool (*parse)(const std::string&), bool (*from_env)(), const char* var,
                          bool unset_means) {
  SCOPED_TRACE(var);
  EXPECT_EQ(parse(""), unset_means);
  EXPECT_TRUE(parse("1"));
  EXPECT_FALSE(parse("0"));
  for (const char* bad : {"2", "on", "yes", " 1"}) {
    try {
      parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const kvevict::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  ASSERT_EQ(setenv(var, unset_means ? "0" : "1", 1), 0);
  EXPECT_EQ(from_env(), !unset_means);
  ASSERT_EQ(unsetenv(var), 0);
  EXPECT_EQ(from_env(), unset_means);
}

TEST(FusedStepPolicy, GemvPreloadValuesAndTheRefusalOfOthers) {
  // On by default: measured faster.
  expect_on_off_switch(parse_gemv_preload, gemv_preload_from_env, "KVEVICT_GEMV_PRELOAD", true);
}

TEST(FusedStepPolicy, GemvFoldsValuesAndTheRefusalOfOthers) {
  // Off by default: measured slower at short contexts.
  expect_on_off_switch(parse_gemv_folds, gemv_folds_from_env, "KVEVICT_GEMV_FOLDS", false);
}

TEST(GemvRoute, AllTakesEverySupportedShapeOnTheTensorCoresFromBatchTwo) {
  for (int B : {1, 2, 8}) {
    GemvArgs a = projection(B, 128256, 4096);
    a.cuda_cores = true;
    EXPECT_TRUE(gemv_takes(GemvRoute::kAll, &a)) << B;
    EXPECT_FALSE(a.cuda_cores) << B;
  }
}

TEST(GemvRoute, CoresTakesEverySupportedShapeOnTheCudaCores) {
  GemvArgs a = projection(4, 4096, 14336);
  EXPECT_TRUE(gemv_takes(GemvRoute::kCudaCores, &a));
  EXPECT_TRUE(a.cuda_cores);
}

TEST(GemvRoute, SmallTakesMatricesUpToTheByteBoundOnly) {
  // 1024 x 4096 bf16 = 8 MiB: taken; one more row: not (from batch 2, or at K > kGemvTileK).
  GemvArgs at = projection(2, 1024, 4096);
  EXPECT_TRUE(gemv_takes(GemvRoute::kSmall, &at));
  EXPECT_TRUE(at.cuda_cores);
  GemvArgs over = projection(2, 1025, 4096);
  EXPECT_FALSE(gemv_takes(GemvRoute::kSmall, &over));
  // SmolLM2's projections (576 wide) are taken, the 8B's q|k|v (6144 x 4096, 48 MiB) is not.
  GemvArgs small = projection(8, 960, 576);
  EXPECT_TRUE(gemv_takes(GemvRoute::kSmall, &small));
  GemvArgs large = projection(1, 6144, 4096);
  EXPECT_FALSE(gemv_takes(GemvRoute::kSmall, &large));
  // At batch 1 a row of at most kGemvTileK columns is taken whatever the matrix's size (SmolLM2's
  // output projection, 49152 x 576, 54 MiB), from batch 2 not; K one chunk past the tile: not.
  GemvArgs logits = projection(1, 49152, 576);
  EXPECT_TRUE(gemv_takes(GemvRoute::kSmall, &logits));
  GemvArgs logits2 = projection(2, 49152, 576);
  EXPECT_FALSE(gemv_takes(GemvRoute::kSmall, &logits2));
  GemvArgs wide_k = projection(1, 4096, 2048 + 8);
  EXPECT_FALSE(gemv_takes(GemvRoute::kSmall, &wide_k));
  // A gated projection reads 2N rows: 1024 x 2048 x 2 halves = 8 MiB taken, 1025 not (batch 2).
  GemvArgs gated = projection(2, 1024, 2048, GemvOut::kGated);
  EXPECT_TRUE(gemv_takes(GemvRoute::kSmall, &gated));
  GemvArgs gated_over = projection(2, 1025, 2048, GemvOut::kGated);
  EXPECT_FALSE(gemv_takes(GemvRoute::kSmall, &gated_over));
}

TEST(GemvRoute, UnsupportedShapesAreNeverTaken) {
  for (GemvRoute r : {GemvRoute::kAll, GemvRoute::kCudaCores, GemvRoute::kSmall}) {
    GemvArgs batch9 = projection(9, 64, 64);
    EXPECT_FALSE(gemv_takes(r, &batch9)) << gemv_route_name(r);
    GemvArgs odd_k = projection(1, 64, 60);
    EXPECT_FALSE(gemv_takes(r, &odd_k)) << gemv_route_name(r);
    GemvArgs unaligned = projection(1, 64, 64);
    unaligned.w = g_storage + 9;  // 2 bytes past a 16-byte boundary
    EXPECT_FALSE(gemv_takes(r, &unaligned)) << gemv_route_name(r);
  }
}

TEST(GemvRoute, NamesRoundTripAndUnknownOnesAreRefused) {
  for (GemvRoute r : {GemvRoute::kAll, GemvRoute::kCudaCores, GemvRoute::kSmall})
    EXPECT_EQ(parse_gemv_route(gemv_route_name(r)), r);
  EXPECT_EQ(parse_gemv_route(""), GemvRoute::kSmall);
  try {
    parse_gemv_route("fastest");
    FAIL() << "an unknown route was accepted";
  } catch (const kvevict::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'fastest'"), std::string::npos) << what;
    EXPECT_NE(what.find("all, cores, small"), std::string::npos) << what;
  }
}

TEST(GemvRoute, TheEnvironmentPicksTheRoute) {
  ASSERT_EQ(setenv("KVEVICT_GEMV_ROUTE", "cores", 1), 0);
  EXPECT_EQ(gemv_route_from_env(), GemvRoute::kCudaCores);
  ASSERT_EQ(setenv("KVEVICT_GEMV_ROUTE", "bogus", 1), 0);
  EXPECT_THROW(gemv_route_from_env(), kvevict::Error);
  ASSERT_EQ(unsetenv("KVEVICT_GEMV_ROUTE"), 0);
  EXPECT_EQ(gemv_route_from_env(), GemvRoute::kSmall);
}

}  // namespace
}  // namespace kvevict::gpu
