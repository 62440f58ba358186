// How the window kernels split a layer over blocks (src/cuda/window_plan.cpp): rows of a KV head
// into row blocks of 16 * slabs, keys into splits that fill one wave of blocks. The workspace
// sizing and the launches read the same plan, so its rules are checked here on the host (CI runs
// it: tests/CMakeLists.txt KVEVICT_HOST_ONLY_GPU_TESTS); the kernels' results under each plan are
// checked on a GPU (tests/cuda/score_test.cpp, window_forward_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuda/kernel_variants.h"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"
#include "kvevict/error.h"

namespace kvevict::cuda::detail {
namespace {

// What every plan must satisfy: its row blocks cover the rows, its splits are whole tiles of at
// least the minimum length and cover the keys with none empty, and the grid fits one wave of
// `blocks_per_sm` blocks a SM whenever one split a (KV head, row block) does.
void expect_plan_rules(int hkv, int group, int w, int64_t n, int d, int sms, int blocks_per_sm,
                       int slab_cap, int min_tiles) {
  SCOPED_TRACE("Hkv " + std::to_string(hkv) + " G " + std::to_string(group) + " w " +
               std::to_string(w) + " n " + std::to_string(n) + " d " + std::to_string(d) + " SMs " +
               std::to_string(sms) + " blocks a SM " + std::to_string(blocks_per_sm) +
               " slab cap " + std::to_string(slab_cap));
  const WindowPlan p = make_window_plan(hkv, group, w, n, d, sms, blocks_per_sm, slab_cap);
  EXPECT_EQ(p.rows, group * w);
  const int cap = slab_cap > 0 && slab_cap < max_slabs(d) ? slab_cap : max_slabs(d);
  EXPECT_LE(p.slabs, cap);
  EXPECT_EQ(p.slabs & (p.slabs - 1), 0) << "slabs " << p.slabs << " is not a power of two";
  // The fewest slabs that cover the rows, unless the cap binds.
  EXPECT_TRUE(16 * p.slabs >= p.rows || p.slabs == cap);
  EXPECT_TRUE(p.slabs == 1 || 16 * (p.slabs / 2) < p.rows);
  EXPECT_EQ(p.row_blocks, (p.rows + 16 * p.slabs - 1) / (16 * p.slabs));
  EXPECT_EQ(p.tile_keys, d == 256 ? 32 : 64);
  EXPECT_EQ(p.keys_per_split % p.tile_keys, 0);
  EXPECT_GE(p.keys_per_split, static_cast<int64_t>(min_tiles) * p.tile_keys);
  EXPECT_GE(static_cast<int64_t>(p.splits) * p.keys_per_split, n);
  EXPECT_LT(static_cast<int64_t>(p.splits - 1) * p.keys_per_split, n) << "an empty split";
  const int64_t pairs = static_cast<int64_t>(hkv) * p.row_blocks;
  if (pairs <= static_cast<int64_t>(sms) * blocks_per_sm)
    EXPECT_LE(pairs * p.splits, static_cast<int64_t>(sms) * blocks_per_sm) << "a second wave";
}

TEST(WindowPlan, EveryPlanCoversItsRowsAndKeysInOneWave) {
  for (const int tiles : {4, 1, 8}) {
    set_window_min_split_tiles(tiles);
    for (const int hkv : {1, 4, 8})
      for (const int group : {1, 4, 7})
        for (const int w : {1, 8, 32, 64})
          for (const int64_t n :
               {int64_t{64}, int64_t{999}, int64_t{4096}, int64_t{131072}, int64_t{1} << 20})
            for (const int d : {64, 128, 256})
              for (const int blocks : {1, 2})
                for (const int cap : {0, 4})
                  if (w <= n) expect_plan_rules(hkv, group, w, n, d, 132, blocks, cap, tiles);
  }
  set_window_min_split_tiles(4);
}

// The plans the scoring forward runs on the Llama-3.1-8B layer (Hkv 8, G 4, d 128) at 128K keys on
// 132 SMs: w = 32's 128 rows as one block of 8 slabs a (KV head, split), 16 splits of one block a
// SM; as 64-row blocks (set_window_forward_row_blocks(64): slab cap 4), two row blocks and 16
// splits at two blocks a SM, 8 at one.
TEST(WindowPlan, TheScoringForwardsPlansForTheLlamaLayer) {
  const WindowPlan one = make_window_plan(8, 4, 32, 131072, 128, 132, 1);
  EXPECT_EQ(one.slabs, 8);
  EXPECT_EQ(one.row_blocks, 1);
  EXPECT_EQ(one.splits, 16);
  EXPECT_EQ(one.keys_per_split, 8192);
  const WindowPlan two = make_window_plan(8, 4, 32, 131072, 128, 132, 2, 4);
  EXPECT_EQ(two.slabs, 4);
  EXPECT_EQ(two.row_blocks, 2);
  EXPECT_EQ(two.splits, 16);
  const WindowPlan two_one = make_window_plan(8, 4, 32, 131072, 128, 132, 1, 4);
  EXPECT_EQ(two_one.row_blocks, 2);
  EXPECT_EQ(two_one.splits, 8);
  EXPECT_EQ(two_one.keys_per_split, 16384);
}

TEST(WindowPlan, SwitchesRefuseValuesTheyDoNotKnow) {
  EXPECT_THROW(set_window_forward_row_blocks(32), Error);
  EXPECT_THROW(set_window_forward_row_blocks(128), Error);
  EXPECT_NO_THROW(set_window_forward_row_blocks(64));
  EXPECT_NO_THROW(set_window_forward_row_blocks(0));
}

}  // namespace
}  // namespace kvevict::cuda::detail
