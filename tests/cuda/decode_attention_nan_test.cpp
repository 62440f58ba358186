// The decode attention (launch_decode_attention, with and without the fused step scores) on a
// cache holding one NaN: in a cached k row, in one element of a cached v row, or in one query
// head. Every output that reads it must be NaN (issue 13: fmaxf in the running maxima and the
// split merge dropped a NaN logit, and `l > 0` guards turned a NaN sum into finite zeros), and
// every output that does not must equal, bit for bit, the same launch on the clean inputs.
// Head dims 64 / 128, GQA groups 1 and 4, one split per segment (sm_count 1) and many (132).
// tools/gpu_check.sh runs this program twice, the second time with KVEVICT_DECODE_SIMT=1 (the
// CUDA-core kernel; the fused scores always take the tensor-core one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/decode_inputs.h"
#include "cuda/model_launchers.h"
#include "support/testing.h"

namespace kvevict::gpu {
namespace {

using cuda::testing::DeviceBuffer;
using detail::bf16;

struct Outputs {
  std::vector<float> a, lse, acc;  // [B Hq d], [B Hq], [rows] (fused dropkv step scores)
};

struct Layout {
  int B = 2, Hkv = 2, G = 4, d = 64;
  std::vector<int32_t> lens{17, 3001, 257, 1};  // [B Hkv]
  std::vector<int64_t> off;                     // [B Hkv + 1], 3 spare rows between segments
  int64_t rows = 0, max_len = 0;
  int Hq() const { return Hkv * G; }
  explicit Layout(int d_, int G_) : G(G_), d(d_) {
    off.assign(lens.size() + 1, 0);
    for (size_t s = 0; s < lens.size(); ++s) {
      off[s + 1] = off[s] + lens[s] + 3;
      max_len = std::max<int64_t>(max_len, lens[s]);
    }
    rows = off.back();
  }
};

// One launch with scores (dropkv, the leave-one-out top term included) on the given inputs.
void launch(const Layout& L, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, int sm_count, Outputs& out) {
  const int S = L.B * L.Hkv;
  testing::DecodeInputs in({L.B, L.Hq(), L.Hkv, L.d, L.max_len}, q, k, v, L.off, L.lens);
  DeviceBuffer<float> acc_d(L.rows), lse_d(static_cast<size_t>(L.B) * L.Hq()),
      a_d(static_cast<size_t>(L.B) * L.Hq() * L.d);
  DeviceBuffer<uint16_t> o_d(static_cast<size_t>(L.B) * L.Hq() * L.d);
  DeviceBuffer<uint32_t> counters_d(S);
  const size_t scratch_bytes =
      detail::decode_attention_scratch_bytes(L.B, L.Hq(), L.Hkv, L.d, L.max_len, sm_count);
  DeviceBuffer<unsigned char> scratch_d(scratch_bytes);
  ASSERT_TRUE(in.ok() && acc_d.ok() && scratch_d.ok());
  acc_d.upload(std::vector<float>(L.rows, 0.5f));
  KVEVICT_ASSERT_CUDA(cudaMemset(counters_d.data(), 0, S * sizeof(uint32_t)));
  const detail::DecodeAttentionArgs da = in.args();
  // Unscored first (the separate merge kernel), then scored (the merge fused in the last block).
  KVEVICT_ASSERT_CUDA(detail::launch_decode_attention(da, reinterpret_cast<bf16*>(o_d.data()),
                                                      lse_d.data(), a_d.data(), scratch_d.data(),
                                                      scratch_bytes, sm_count, nullptr));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  out.a = a_d.download();
  out.lse = lse_d.download();
  detail::DecodeStepScoreArgs sc;
  sc.acc = acc_d.data();
  sc.counters = counters_d.data();
  sc.kind = DecodeScore::kDropKV;
  KVEVICT_ASSERT_CUDA(detail::launch_decode_attention(da, reinterpret_cast<bf16*>(o_d.data()),
                                                      lse_d.data(), a_d.data(), scratch_d.data(),
                                                      scratch_bytes, sm_count, nullptr, &sc));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
  out.acc = acc_d.download();
  // The fused merge writes the same a and lse as the separate one (NaN where it was NaN); under
  // KVEVICT_DECODE_SIMT=1 the unscored launch ran the CUDA-core kernel and the scored one the
  // tensor-core kernel, so only the NaN pattern is the same, not the bits.
  const char* simt_env = std::getenv("KVEVICT_DECODE_SIMT");
  const bool simt = simt_env != nullptr && simt_env[0] == '1';
  const auto a2 = a_d.download(), lse2 = lse_d.download();
  auto same = [simt](float x, float y) {
    return std::isnan(x) ? std::isnan(y) : simt ? !std::isnan(y) : x == y;
  };
  for (size_t i = 0; i < a2.size(); ++i) ASSERT_TRUE(same(a2[i], out.a[i])) << "a " << i;
  for (size_t i = 0; i < lse2.size(); ++i) ASSERT_TRUE(same(lse2[i], out.lse[i])) << "lse " << i;
}

TEST(GpuDecodeAttentionNan, ANanReachesEveryOutputThatReadsItAndNothingElse) {
  KVEVICT_REQUIRE_GPU();
  const float nan = std::nanf("");
  for (const int d : {64, 128})
    for (const int G : {1, 4})
      for (const int sm_count : {1, 132}) {
        const Layout L(d, G);
        const int S = L.B * L.Hkv, col = 5;
        const auto q = cuda::testing::round_to(
            kvevict::testing::normal_floats(static_cast<size_t>(L.B) * L.Hq() * d, 11 + d, 1.5f),
            DType::kBF16);
        const auto k = cuda::testing::round_to(
            kvevict::testing::normal_floats(L.rows * d, 12 + d, 1.0f), DType::kBF16);
        const auto v = cuda::testing::round_to(
            kvevict::testing::normal_floats(L.rows * d, 13 + d, 1.0f), DType::kBF16);
        Outputs clean;
        launch(L, q, k, v, sm_count, clean);
        for (size_t i = 0; i < clean.a.size(); ++i) ASSERT_TRUE(std::isfinite(clean.a[i])) << i;
        // The bad element: segment 1 (the long one, many splits), row 2000; segment 2 for v; query
        // head 1 of sequence 0 (KV head 0 where G > 1, else KV head 1) for q.
        for (const char bad : {'k', 'v', 'q'}) {
          SCOPED_TRACE(std::string("nan in ") + bad + " d=" + std::to_string(d) +
                       " G=" + std::to_string(G) + " sm_count=" + std::to_string(sm_count));
          auto qb = q, kb = k, vb = v;
          const int bad_seg = bad == 'v' ? 2 : 1;
          if (bad == 'k') kb[(L.off[1] + 2000) * d + col] = nan;
          if (bad == 'v') vb[(L.off[2] + 100) * d + col] = nan;
          if (bad == 'q') qb[1 * d + col] = nan;
          Outputs got;
          launch(L, qb, kb, vb, sm_count, got);
          for (int s = 0; s < S; ++s) {
            const int b = s / L.Hkv, g = s % L.Hkv;
            for (int h = 0; h < G; ++h) {
              const int64_t hq = static_cast<int64_t>(b) * L.Hq() + g * G + h;
              const bool row_nan = (bad == 'k' && s == bad_seg) || (bad == 'q' && hq == 1);
              const bool col_nan = bad == 'v' && s == bad_seg;
              ASSERT_EQ(std::isnan(got.lse[hq]), row_nan) << "segment " << s << " head " << h;
              if (!row_nan) EXPECT_EQ(got.lse[hq], clean.lse[hq]) << "segment " << s;
              for (int i = 0; i < d; ++i) {
                const float x = got.a[hq * d + i];
                if (row_nan || (col_nan && i == col))
                  ASSERT_TRUE(std::isnan(x)) << "segment " << s << " head " << h << " dim " << i;
                else
                  ASSERT_EQ(x, clean.a[hq * d + i])
                      << "segment " << s << " head " << h << " dim " << i;
              }
            }
            // Step scores: every row of a segment whose lse or a is NaN scores NaN (dropkv reads
            // both); the rows of the other segments keep their clean scores.
            const int q_seg = G > 1 ? 0 : 1;  // the segment query head 1 of sequence 0 reads
            const bool seg_nan = bad == 'q' ? s == q_seg : s == bad_seg;
            for (int64_t j = 0; j < L.lens[s]; ++j) {
              const float x = got.acc[L.off[s] + j];
              if (seg_nan)
                ASSERT_TRUE(std::isnan(x)) << "segment " << s << " row " << j;
              else
                ASSERT_EQ(x, clean.acc[L.off[s] + j]) << "segment " << s << " row " << j;
            }
          }
        }
      }
}

}  // namespace
}  // namespace kvevict::gpu
