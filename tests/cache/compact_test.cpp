#include <gtest/gtest.h>

#include "kvevict/cache.h"
#include "kvevict/error.h"
#include "kvevict/select.h"
#include "support/testing.h"

namespace kvevict {
namespace {

Selection make_selection(const std::vector<std::vector<int32_t>>& rows) {
  Selection s;
  s.num_kv_heads = static_cast<int>(rows.size());
  s.offsets.push_back(0);
  for (const auto& r : rows) {
    s.index.insert(s.index.end(), r.begin(), r.end());
    s.offsets.push_back(static_cast<int64_t>(s.index.size()));
  }
  return s;
}

float k_at(const KVLayerView& c, int64_t row, int i) {
  return static_cast<float>(TensorView(c.k, c.dtype, {c.capacity_rows(), c.head_dim}).load(row, i));
}

TEST(HostKVCache, FromDenseRoundTripAndViews) {
  const int hkv = 3, d = 5;
  const int64_t n = 7;
  std::vector<float> k = testing::random_floats(hkv * n * d, 1), v = testing::random_floats(hkv * n * d, 2);
  HostKVCache c = HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {hkv, n, d}),
                                          TensorView(v.data(), DType::kF32, {hkv, n, d}),
                                          DType::kBF16, 2, true);
  const KVLayerView w = c.view();
  EXPECT_EQ(w.capacity_rows(), hkv * (n + 2));
  EXPECT_EQ(w.total_len(), hkv * n);
  EXPECT_EQ(c.kv_bytes(), 2 * hkv * (n + 2) * d * 2);
  EXPECT_EQ(w.kv_bytes(), c.kv_bytes());
  EXPECT_TRUE(w.is_uniform());
  const TensorView uk = w.uniform_k();
  for (int h = 0; h < hkv; ++h)
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(w.pos[w.offsets[h] + j], j);
      for (int i = 0; i < d; ++i) {
        EXPECT_EQ(uk.load(h, j, i), round_bf16(k[(h * n + j) * d + i]));
        EXPECT_EQ(w.head_v(h).load(j, i), round_bf16(v[(h * n + j) * d + i]));
      }
    }
}

TEST(CacheCompact, CopiesKeptRowsAndShrinks) {
  const int hkv = 2, d = 3;
  const int64_t n = 9;
  std::vector<float> k = testing::random_floats(hkv * n * d, 3), v = testing::random_floats(hkv * n * d, 4);
  HostKVCache full = HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {hkv, n, d}),
                                             TensorView(v.data(), DType::kF32, {hkv, n, d}),
                                             DType::kF32, 0, true);
  KVLayerView fw = full.view();
  for (int64_t r = 0; r < fw.capacity_rows(); ++r) fw.score_acc[r] = static_cast<float>(r);
  const Selection sel = make_selection({{0, 4, 8}, {1, 2, 3, 7, 8}});
  EXPECT_EQ(cache_plan_offsets(sel, 2), (std::vector<int64_t>{0, 5, 12}));
  HostKVCache small = cache_allocate_for(fw, sel, 0);
  cache_compact(fw, sel, small.view());
  const KVLayerView sw = small.view();
  EXPECT_EQ(sw.lens[0], 3);
  EXPECT_EQ(sw.lens[1], 5);
  EXPECT_EQ(small.kv_bytes(), 8 * d * 4 * 2);
  EXPECT_LT(small.kv_bytes(), full.kv_bytes());
  EXPECT_FALSE(sw.is_uniform());
  for (int h = 0; h < hkv; ++h)
    for (int64_t i = 0; i < sel.count(h); ++i) {
      const int64_t src = h * n + sel.head(h)[i], dst = sw.offsets[h] + i;
      EXPECT_EQ(sw.pos[dst], sel.head(h)[i]);
      EXPECT_EQ(sw.score_acc[dst], static_cast<float>(src));
      for (int j = 0; j < d; ++j) {
        EXPECT_EQ(k_at(sw, dst, j), k[src * d + j]);
        EXPECT_EQ(sw.head_v(h).load(i, j), v[src * d + j]);
      }
    }
}

TEST(CacheCompact, RejectsMismatches) {
  std::vector<float> k(2 * 4 * 3, 1.0f);
  HostKVCache full = HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {2, 4, 3}),
                                             TensorView(k.data(), DType::kF32, {2, 4, 3}),
                                             DType::kF32);
  const Selection sel = make_selection({{0, 1}, {2, 3}});
  HostKVCache bad_dtype(DType::kF16, 2, 3, {2, 2});
  EXPECT_THROW(cache_compact(full.view(), sel, bad_dtype.view()), Error);
  HostKVCache bad_dim(DType::kF32, 2, 4, {2, 2});
  EXPECT_THROW(cache_compact(full.view(), sel, bad_dim.view()), Error);
  HostKVCache too_small(DType::kF32, 2, 3, {2, 1});
  try {
    cache_compact(full.view(), sel, too_small.view());
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 1"), std::string::npos) << e.what();
  }
  const Selection out_of_range = make_selection({{0, 4}, {1}});
  HostKVCache ok(DType::kF32, 2, 3, {2, 2});
  EXPECT_THROW(cache_compact(full.view(), out_of_range, ok.view()), Error);
  const Selection unsorted = make_selection({{1, 0}, {1}});
  EXPECT_THROW(cache_compact(full.view(), unsorted, ok.view()), Error);
}

TEST(CacheAppend, FillsSegmentsThenThrows) {
  HostKVCache c(DType::kF16, 2, 4, {2, 2}, true);
  KVLayerView w = c.view();
  std::vector<float> row = testing::random_floats(8, 5);
  const TensorView r(row.data(), DType::kF32, {2, 4});
  cache_append(w, r, r, 10);
  cache_append(w, r, r, 11);
  EXPECT_EQ(w.lens[0], 2);
  EXPECT_EQ(w.pos[w.offsets[1] + 1], 11);
  EXPECT_EQ(w.head_k(1).load(1, 3), round_half(row[7]));
  EXPECT_THROW(cache_append(w, r, r, 12), Error);
  const TensorView wrong(row.data(), DType::kF32, {1, 8});
  EXPECT_THROW(cache_append(w, wrong, wrong, 12), Error);
}

TEST(CacheCompactInplace, MovesKeptRowsForward) {
  std::vector<float> k(1 * 6 * 2);
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i);
  HostKVCache c = HostKVCache::from_dense(TensorView(k.data(), DType::kF32, {1, 6, 2}),
                                          TensorView(k.data(), DType::kF32, {1, 6, 2}),
                                          DType::kF32, 0, true);
  KVLayerView w = c.view();
  for (int i = 0; i < 6; ++i) w.score_acc[i] = 100.0f + i;
  const int32_t keep[] = {1, 4, 5};
  cache_compact_head_inplace(w, 0, keep, 3);
  EXPECT_EQ(w.lens[0], 3);
  EXPECT_EQ(w.pos[0], 1);
  EXPECT_EQ(w.pos[1], 4);
  EXPECT_EQ(w.pos[2], 5);
  EXPECT_EQ(w.score_acc[1], 104.0f);
  EXPECT_EQ(k_at(w, 1, 1), 9.0f);
  const int32_t bad[] = {2, 1};
  EXPECT_THROW(cache_compact_head_inplace(w, 0, bad, 2), Error);
}

}  // namespace
}  // namespace kvevict
