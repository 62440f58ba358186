// The decode attention's merge inside its own launch (DecodeAttentionArgs::merge_counters: the last
// split block of a segment merges it) against the separate merge kernel: the same a (bf16 and
// f32) and lse bit for bit, at head dims 64 / 128 / 256, GQA groups 1 / 3 / 8, one split per
// segment (few SMs, or short segments: the block writes the result itself) and many; the counters
// are left at zero, so a second launch merges again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/decode_inputs.h"
#include "cuda/model_launchers.h"

namespace kvevict::gpu {
namespace {

using cuda::testing::DeviceBuffer;
using detail::bf16;

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> a, lse;
};

void check(int d, int G, int sm_count, const std::vector<int32_t>& lens) {
  SCOPED_TRACE("d " + std::to_string(d) + ", G " + std::to_string(G) + ", sm_count " +
               std::to_string(sm_count) + ", longest " +
               std::to_string(*std::max_element(lens.begin(), lens.end())));
  const int B = 2, Hkv = 2, Hq = Hkv * G, S = B * Hkv;
  std::vector<int64_t> off(S + 1, 0);
  int64_t max_len = 0;
  for (int s = 0; s < S; ++s) {
    off[s + 1] = off[s] + lens[s] + 5;  // spare rows between segments
    max_len = std::max<int64_t>(max_len, lens[s]);
  }
  std::mt19937 rng(static_cast<uint32_t>(d * 100 + G));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> q(static_cast<size_t>(B) * Hq * d), k(off.back() * d), v(k.size());
  for (auto& e : q) e = round_bf16(nd(rng));
  for (auto& e : k) e = round_bf16(nd(rng));
  for (auto& e : v) e = round_bf16(nd(rng));
  testing::DecodeInputs in({B, Hq, Hkv, d, max_len}, q, k, v, off, lens);
  const size_t scratch_bytes =
      detail::decode_attention_scratch_bytes(B, Hq, Hkv, d, max_len, sm_count);
  DeviceBuffer<unsigned char> scratch(scratch_bytes);
  DeviceBuffer<uint32_t> counters(S);
  ASSERT_TRUE(in.ok() && scratch.ok() && counters.ok());
  KVEVICT_ASSERT_CUDA(cudaMemset(counters.data(), 0, S * sizeof(uint32_t)));

  auto run = [&](bool in_launch) {
    DeviceBuffer<uint16_t> out(static_cast<size_t>(B) * Hq * d);
    DeviceBuffer<float> a(static_cast<size_t>(B) * Hq * d), lse(static_cast<size_t>(B) * Hq);
    out.poison();
    a.poison();
    lse.poison();
    detail::DecodeAttentionArgs da = in.args();
    da.z_out = nullptr;
    da.merge_counters = in_launch ? counters.data() : nullptr;
    Result r;
    EXPECT_EQ(
        detail::launch_decode_attention(da, reinterpret_cast<bf16*>(out.data()), lse.data(),
                                        a.data(), scratch.data(), scratch_bytes, sm_count, nullptr),
        cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    r.out = out.download();
    r.a = a.download();
    r.lse = lse.download();
    EXPECT_TRUE(out.sentinels_intact() && a.sentinels_intact() && lse.sentinels_intact());
    return r;
  };
  const Result sep = run(false);
  for (int round = 0; round < 2; ++round) {
    const Result one = run(true);
    EXPECT_EQ(one.out, sep.out) << "round " << round;
    ASSERT_EQ(one.a.size(), sep.a.size());
    size_t differ = 0;
    for (size_t i = 0; i < sep.a.size(); ++i) differ += !(one.a[i] == sep.a[i]);
    for (size_t i = 0; i < sep.lse.size(); ++i) differ += !(one.lse[i] == sep.lse[i]);
    EXPECT_EQ(differ, 0u) << "round " << round;
    const std::vector<uint32_t> left = counters.download();
    EXPECT_EQ(left, std::vector<uint32_t>(S, 0u)) << "the counters are left for the next launch";
  }
}

TEST(GpuDecodeMergeInLaunch, EqualsTheSeparateMergeBitForBit) {
  KVEVICT_REQUIRE_GPU();
  for (int d : {64, 128, 256})
    for (int G : {1, 3, 8})
      for (int sm_count : {1, 132}) check(d, G, sm_count, {1, 3001, 257, 64});
}

// Segments short enough for one split whatever the SM count (a few key tiles): the block writes
// the result itself, no partials; the separate merge reads its one partial.
TEST(GpuDecodeMergeInLaunch, OneSplitSegmentsEqualTheSeparateMerge) {
  KVEVICT_REQUIRE_GPU();
  for (int d : {64, 128, 256})
    for (int G : {1, 4}) check(d, G, 132, {1, 150, 97, 64});
}

}  // namespace
}  // namespace kvevict::gpu
