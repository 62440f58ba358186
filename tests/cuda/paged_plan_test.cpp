// The paged layout's plan (SPEC section 4): per-head page tables, kept rows packed into whole
// pages, pages numbered from a first one. Host logic: CI runs it (tests/CMakeLists.txt
// KVEVICT_HOST_ONLY_GPU_TESTS); tests/cuda/paged_test.cpp checks attention over such a cache.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvevict/cuda/compact.h"
#include "kvevict/error.h"

namespace kvevict::cuda {
namespace {

TEST(CudaPaged, PlanPacksWholePages) {
  const PagedPlan p = paged_plan({17, 0, 32, 1}, 16, 5);
  EXPECT_EQ(p.num_pages, 2 + 0 + 2 + 1);
  EXPECT_EQ(p.max_pages, 2);
  const std::vector<int32_t> want = {5, 6, -1, -1, 7, 8, 9, -1};
  EXPECT_EQ(p.page_table, want);
  EXPECT_THROW(paged_plan({3}, 0), Error);
  EXPECT_THROW(paged_plan({-1}, 16), Error);
}

}  // namespace
}  // namespace kvevict::cuda
