// Paged compaction (SPEC section 4): per-head page tables, kept rows packed into whole pages.
// The check SPEC asks of every layout: attention over the paged cache equals attention over the
// full cache with the evicted keys masked out (double reference on the host).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "cuda/cuda_testing.h"
#include "kvevict/cuda/attention.h"
#include "kvevict/cuda/compact.h"
#include "kvevict/cuda/select.h"
#include "support/testing.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

void run(int hq, int hkv, int d, int64_t n, int64_t n_keep, int page_size, Policy policy,
         DType q_dtype, uint64_t seed) {
  if (std::getenv("KVEVICT_SANITIZER") != nullptr && n > 20000) return;
  SCOPED_TRACE(::testing::Message() << "Hq " << hq << " Hkv " << hkv << " d " << d << " n " << n
                                    << " keep " << n_keep << " page " << page_size << " "
                                    << policy_name(policy) << " q " << dtype_name(q_dtype));
  const DType bf = DType::kBF16;
  const size_t nk = static_cast<size_t>(hkv) * n * d;
  const auto k = testing::round_to(kvevict::testing::normal_floats(nk, seed, 1.0f), bf);
  const auto v = testing::round_to(kvevict::testing::normal_floats(nk, seed + 1, 1.0f), bf);
  const auto s = kvevict::testing::normal_floats(static_cast<size_t>(hkv) * n, seed + 2, 1.0f);
  DeviceBuffer<uint16_t> dk(nk), dv(nk);
  dk.upload(testing::encode16(k, bf));
  dv.upload(testing::encode16(v, bf));
  DeviceBuffer<float> ds(s.size());
  ds.upload(s);
  // Positions: token j of every head sits at 2 j + 5 (not the identity, so pos must travel).
  std::vector<int32_t> pos(static_cast<size_t>(hkv) * n);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(2 * (i % n) + 5);
  DeviceBuffer<int32_t> dpos(pos.size());
  dpos.upload(pos);

  // Select (varlen budgets with adakv), then pages for the kept counts.
  const int sink = 1, window = 4;
  const size_t kept_n = static_cast<size_t>(hkv) * n_keep;
  DeviceBuffer<int32_t> dkept(kept_n);
  DeviceBuffer<int64_t> doff(hkv + 1);
  const size_t ws_bytes = select_workspace_bytes(hkv, n, n_keep, false);
  DeviceBuffer<char> ws(ws_bytes);
  select(TensorView(ds.data(), DType::kF32, {hkv, n}, Device::kCuda), TensorView(), n_keep, sink,
         window, policy, 0.2,
         TensorView(dkept.data(), DType::kI32, {static_cast<int64_t>(kept_n)}, Device::kCuda),
         TensorView(doff.data(), DType::kI64, {hkv + 1}, Device::kCuda), {ws.data(), ws_bytes});
  const auto off = doff.download();
  const auto kept = dkept.download();
  std::vector<int64_t> counts(hkv);
  for (int h = 0; h < hkv; ++h) counts[h] = off[h + 1] - off[h];
  const PagedPlan plan = paged_plan(counts, page_size);
  int64_t want_pages = 0;
  for (int64_t c : counts) want_pages += (c + page_size - 1) / page_size;
  ASSERT_EQ(plan.num_pages, want_pages) << "pages are not packed";
  const int64_t pool_rows = std::max<int64_t>(1, plan.num_pages) * page_size;
  DeviceBuffer<uint16_t> pk(pool_rows * d), pv(pool_rows * d);
  DeviceBuffer<int32_t> ppos(pool_rows), dtable(plan.page_table.size());
  DeviceBuffer<int64_t> dlens(hkv);
  pk.poison();
  pv.poison();
  ppos.poison();
  dtable.upload(plan.page_table);
  dlens.upload(plan.lens);
  const int64_t np = std::max<int64_t>(1, plan.num_pages);
  compact_paged(
      TensorView(dk.data(), bf, {hkv, n, d}, Device::kCuda),
      TensorView(dv.data(), bf, {hkv, n, d}, Device::kCuda),
      TensorView(dpos.data(), DType::kI32, {hkv, n}, Device::kCuda),
      TensorView(dkept.data(), DType::kI32, {static_cast<int64_t>(kept_n)}, Device::kCuda),
      TensorView(doff.data(), DType::kI64, {hkv + 1}, Device::kCuda),
      TensorView(dtable.data(), DType::kI32, {hkv, plan.max_pages}, Device::kCuda),
      TensorView(pk.data(), bf, {np, page_size, d}, Device::kCuda),
      TensorView(pv.data(), bf, {np, page_size, d}, Device::kCuda),
      TensorView(ppos.data(), DType::kI32, {np, page_size}, Device::kCuda));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(pk.sentinels_intact() && pv.sentinels_intact() && ppos.sentinels_intact());
  // Every kept row lands in its page slot with its position.
  const auto gpos = ppos.download();
  int64_t bad = 0;
  for (int h = 0; h < hkv; ++h)
    for (int64_t sl = 0; sl < counts[h]; ++sl) {
      const int64_t row =
          static_cast<int64_t>(plan.page_table[h * plan.max_pages + sl / page_size]) * page_size +
          sl % page_size;
      bad += gpos[row] != pos[h * n + kept[off[h] + sl]];
    }
  EXPECT_EQ(bad, 0) << "positions in the pages differ from the kept rows'";

  // Queries: after the prompt, and one in the middle (sees only part of the kept rows).
  const int64_t m = 4;
  auto q = testing::round_to(
      kvevict::testing::normal_floats(static_cast<size_t>(hq) * m * d, seed + 3, 2.0f), bf);
  std::vector<int32_t> q_pos = {static_cast<int32_t>(2 * n + 5), static_cast<int32_t>(2 * n + 9),
                                static_cast<int32_t>(n + 5), 5};
  DeviceBuffer<int32_t> dqpos(m);
  dqpos.upload(q_pos);
  DeviceBuffer<float> dqf(q.size());
  DeviceBuffer<uint16_t> dqb(q.size());
  dqf.upload(q);
  dqb.upload(testing::encode16(q, bf));
  DeviceBuffer<float> dout(q.size()), dlse(static_cast<size_t>(hq) * m);
  dout.poison();
  PagedAttentionProblem ap;
  ap.q = q_dtype == DType::kF32 ? TensorView(dqf.data(), DType::kF32, {hq, m, d}, Device::kCuda)
                                : TensorView(dqb.data(), bf, {hq, m, d}, Device::kCuda);
  ap.q_pos = TensorView(dqpos.data(), DType::kI32, {m}, Device::kCuda);
  ap.k_pages = TensorView(pk.data(), bf, {np, page_size, d}, Device::kCuda);
  ap.v_pages = TensorView(pv.data(), bf, {np, page_size, d}, Device::kCuda);
  ap.pos_pages = TensorView(ppos.data(), DType::kI32, {np, page_size}, Device::kCuda);
  ap.page_table = TensorView(dtable.data(), DType::kI32, {hkv, plan.max_pages}, Device::kCuda);
  ap.lens = TensorView(dlens.data(), DType::kI64, {hkv}, Device::kCuda);
  attention_paged(ap,
                  AttentionOutput{TensorView(dout.data(), DType::kF32, {hq, m, d}, Device::kCuda),
                                  TensorView(dlse.data(), DType::kF32, {hq, m}, Device::kCuda)});
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());

  // Masked full attention in double: every token of the full cache, evicted ones masked out.
  std::vector<char> keep(static_cast<size_t>(hkv) * n, 0);
  for (int h = 0; h < hkv; ++h)
    for (int64_t r = off[h]; r < off[h + 1]; ++r) keep[h * n + kept[r]] = 1;
  std::vector<double> ref(q.size(), 0.0), ref_lse(static_cast<size_t>(hq) * m);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int h = 0; h < hq; ++h) {
    const int g = h / (hq / hkv);
    for (int64_t t = 0; t < m; ++t) {
      std::vector<double> z(n, -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        if (!keep[g * n + j] || pos[g * n + j] > q_pos[t]) continue;
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[(h * m + t) * d + i]) * k[(g * n + j) * d + i];
        z[j] = dot * scale;
        mx = std::max(mx, z[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < n; ++j)
        if (z[j] > -INFINITY) l += std::exp(z[j] - mx);
      for (int64_t j = 0; j < n; ++j) {
        if (z[j] == -INFINITY) continue;
        const double p = std::exp(z[j] - mx) / l;
        for (int i = 0; i < d; ++i) ref[(h * m + t) * d + i] += p * v[(g * n + j) * d + i];
      }
      ref_lse[h * m + t] = l > 0 ? mx + std::log(l) : -INFINITY;
    }
  }
  EXPECT_TRUE(kvevict::testing::all_close(dout.download(), ref, 1e-4, 1e-3, "paged attention"));
  const auto got_lse = dlse.download();
  for (size_t i = 0; i < got_lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse[" << i << "]";
    } else {
      EXPECT_NEAR(got_lse[i], ref_lse[i], 1e-4 + 1e-4 * std::abs(ref_lse[i])) << "lse[" << i << "]";
    }
  }
  EXPECT_TRUE(dout.sentinels_intact() && dlse.sentinels_intact());
}

TEST(CudaPaged, AttentionEqualsMaskedFullAttention) {
  KVEVICT_REQUIRE_GPU();
  run(8, 2, 128, 1003, 300, 16, Policy::kAdaKV, DType::kF32, 1);
  run(8, 2, 128, 1003, 300, 64, Policy::kUniform, DType::kBF16, 2);
  run(4, 4, 64, 17, 9, 16, Policy::kAdaKV, DType::kF32, 3);  // less than a page per head
  run(4, 1, 128, 1, 1, 16, Policy::kUniform, DType::kF32, 4);
  run(6, 3, 128, 20011, 1001, 64, Policy::kAdaKV, DType::kBF16, 5);
  run(2, 2, 256, 333, 64, 16, Policy::kAdaKV, DType::kF32, 6);  // exactly 4 pages a head on average
}

}  // namespace
}  // namespace kvevict::cuda
