// Compaction into the uniform and the flattened varlen layouts: every kept row and position
// lands where the layout says, nothing is written outside the outputs.
#include <gtest/gtest.h>

#include <random>

#include "cuda/cuda_testing.h"
#include "kvevict/cuda/compact.h"

namespace kvevict::cuda {
namespace {

using testing::DeviceBuffer;

TEST(CudaCompact, UniformAndVarlenGatherKeptRows) {
  KVEVICT_REQUIRE_GPU();
  const int hkv = 3, d = 128;
  const int64_t n = 1001;
  std::mt19937 rng(5);
  std::vector<uint16_t> k(hkv * n * d), v(k.size());
  for (auto& x : k) x = static_cast<uint16_t>(rng());
  for (auto& x : v) x = static_cast<uint16_t>(rng());
  std::vector<int32_t> pos(hkv * n);
  for (auto& x : pos) x = static_cast<int32_t>(rng() % 100000);
  DeviceBuffer<uint16_t> dk(k.size()), dv(v.size());
  DeviceBuffer<int32_t> dpos(pos.size());
  dk.upload(k);
  dv.upload(v);
  dpos.upload(pos);
  TensorView tk(dk.data(), DType::kBF16, {hkv, n, d}, Device::kCuda);
  TensorView tv(dv.data(), DType::kBF16, {hkv, n, d}, Device::kCuda);
  TensorView tpos(dpos.data(), DType::kI32, {hkv, n}, Device::kCuda);

  // Varlen: head h keeps lens[h] rows (one head keeps none).
  const std::vector<int64_t> lens = {17, 0, 333};
  std::vector<int64_t> offsets = {0};
  std::vector<int32_t> kept;
  for (int h = 0; h < hkv; ++h) {
    for (int64_t i = 0; i < lens[h]; ++i) kept.push_back(static_cast<int32_t>((i * 7 + h) % n));
    offsets.push_back(static_cast<int64_t>(kept.size()));
  }
  const int64_t rows = offsets.back();
  DeviceBuffer<int32_t> dkept(kept.size());
  DeviceBuffer<int64_t> doff(offsets.size());
  DeviceBuffer<uint16_t> ok(rows * d), ov(rows * d);
  DeviceBuffer<int32_t> opos(rows);
  dkept.upload(kept);
  doff.upload(offsets);
  ok.poison();
  ov.poison();
  opos.poison();
  compact_varlen(tk, tv, tpos, TensorView(dkept.data(), DType::kI32, {rows}, Device::kCuda),
                 TensorView(doff.data(), DType::kI64, {hkv + 1}, Device::kCuda),
                 TensorView(ok.data(), DType::kBF16, {rows, d}, Device::kCuda),
                 TensorView(ov.data(), DType::kBF16, {rows, d}, Device::kCuda),
                 TensorView(opos.data(), DType::kI32, {rows}, Device::kCuda));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  auto gk = ok.download(), gv = ov.download();
  auto gp = opos.download();
  int64_t bad = 0;
  for (int h = 0; h < hkv; ++h)
    for (int64_t r = offsets[h]; r < offsets[h + 1]; ++r) {
      const int64_t j = kept[r];
      bad += gp[r] != pos[h * n + j];
      for (int c = 0; c < d; ++c)
        bad += gk[r * d + c] != k[(h * n + j) * d + c] || gv[r * d + c] != v[(h * n + j) * d + c];
    }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(ok.sentinels_intact() && ov.sentinels_intact() && opos.sentinels_intact());

  // Uniform: every head keeps the same 250 rows; positions default to the index.
  const int64_t keep = 250;
  std::vector<int32_t> ukept(hkv * keep);
  for (int h = 0; h < hkv; ++h)
    for (int64_t i = 0; i < keep; ++i) ukept[h * keep + i] = static_cast<int32_t>(i * 4 + h);
  DeviceBuffer<int32_t> dukept(ukept.size());
  DeviceBuffer<uint16_t> uk(hkv * keep * d), uv(hkv * keep * d);
  DeviceBuffer<int32_t> upos(hkv * keep);
  dukept.upload(ukept);
  compact_uniform(tk, tv, TensorView(),
                  TensorView(dukept.data(), DType::kI32, {hkv, keep}, Device::kCuda),
                  TensorView(uk.data(), DType::kBF16, {hkv, keep, d}, Device::kCuda),
                  TensorView(uv.data(), DType::kBF16, {hkv, keep, d}, Device::kCuda),
                  TensorView(upos.data(), DType::kI32, {hkv, keep}, Device::kCuda));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  gk = uk.download();
  gv = uv.download();
  gp = upos.download();
  bad = 0;
  for (int h = 0; h < hkv; ++h)
    for (int64_t i = 0; i < keep; ++i) {
      const int64_t r = h * keep + i, j = ukept[r];
      bad += gp[r] != j;
      for (int c = 0; c < d; ++c)
        bad += gk[r * d + c] != k[(h * n + j) * d + c] || gv[r * d + c] != v[(h * n + j) * d + c];
    }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(uk.sentinels_intact() && uv.sentinels_intact() && upos.sentinels_intact());
}

TEST(CudaCompact, RejectsMismatchedOutputs) {
  KVEVICT_REQUIRE_GPU();
  DeviceBuffer<uint16_t> buf(2 * 10 * 64);
  DeviceBuffer<int32_t> kept(8);
  TensorView k(buf.data(), DType::kBF16, {2, 10, 64}, Device::kCuda);
  TensorView small(buf.data(), DType::kBF16, {2, 3, 64}, Device::kCuda);
  DeviceBuffer<int32_t> pos(8);
  EXPECT_THROW(compact_uniform(k, k, TensorView(),
                               TensorView(kept.data(), DType::kI32, {2, 4}, Device::kCuda), small,
                               small, TensorView(pos.data(), DType::kI32, {2, 4}, Device::kCuda)),
               Error);
}

}  // namespace
}  // namespace kvevict::cuda
