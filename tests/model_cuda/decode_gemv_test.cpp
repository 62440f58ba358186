// The small-batch GEMV of the decode step (src/cuda/decode_gemv.cu) against a double reference
// that rounds where the kernel's contract says it rounds (the normed input to bf16; the gate and
// up products to bf16 before the activation): every output mode, with and without the fused
// RMSNorm, batches 1..8, row counts that are not a multiple of the warp's pair or the block's
// eight rows, K from one 16-byte chunk up; rows outside the output stay untouched; shapes the
// kernel does not cover are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_testing.h"
#include "cuda/model_launchers.h"
#include "kvevict/dtype.h"

namespace kvevict {
namespace {

using cuda::testing::DeviceBuffer;
using gpu::detail::GemvArgs;
using gpu::detail::GemvOut;

struct Case {
  int B, N, K;
  bool norm;
  GemvOut out;
  bool gelu = false;
};

std::string name(const Case& c) {
  const char* outs[] = {"bf16", "f32", "f32+=", "gated"};
  return "B=" + std::to_string(c.B) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         (c.norm ? " norm" : "") + " out=" + outs[static_cast<int>(c.out)] +
         (c.gelu ? " gelu" : "");
}

double act(double g, bool gelu) {
  return gelu ? 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
              : g / (1.0 + std::exp(-g));
}

void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const bool gated = c.out == GemvOut::kGated;
  const int64_t w_rows = gated ? 2 * c.N : c.N;
  std::vector<float> w(w_rows * c.K), x(static_cast<size_t>(c.B) * c.K), nw(c.K);
  for (auto& e : w) e = round_bf16(nd(rng) / std::sqrt(static_cast<float>(c.K)));
  for (auto& e : x) e = c.norm ? 3.f * nd(rng) : round_bf16(nd(rng));
  for (auto& e : nw) e = 1.f + 0.25f * nd(rng);
  std::vector<float> y0(static_cast<size_t>(c.B) * c.N);
  for (auto& e : y0) e = nd(rng);  // kF32Add adds into these

  // Reference: the product's input rows as the kernel sees them.
  std::vector<double> xin(x.size());
  for (int b = 0; b < c.B; ++b) {
    double ss = 0;
    for (int k = 0; k < c.K; ++k) ss += static_cast<double>(x[b * c.K + k]) * x[b * c.K + k];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / c.K + 1e-6));
    for (int k = 0; k < c.K; ++k)
      xin[b * c.K + k] = c.norm ? round_bf16(x[b * c.K + k] * inv * nw[k]) : x[b * c.K + k];
  }
  auto dot = [&](int b, int64_t r) {
    double s = 0;
    for (int k = 0; k < c.K; ++k) s += xin[b * c.K + k] * static_cast<double>(w[r * c.K + k]);
    return s;
  };

  DeviceBuffer<uint16_t> dw(w.size());
  dw.upload(cuda::testing::encode16(w, DType::kBF16));
  DeviceBuffer<float> dxf(c.norm ? x.size() : 1), dnw(c.K);
  DeviceBuffer<uint16_t> dxb(c.norm ? 1 : x.size());
  if (c.norm) {
    dxf.upload(x);
    dnw.upload(nw);
  } else {
    dxb.upload(cuda::testing::encode16(x, DType::kBF16));
  }
  const bool out_f32 = c.out == GemvOut::kF32 || c.out == GemvOut::kF32Add;
  DeviceBuffer<float> dyf(out_f32 ? y0.size() : 1);
  DeviceBuffer<uint16_t> dyb(out_f32 ? 1 : y0.size());
  if (c.out == GemvOut::kF32Add) dyf.upload(y0);
  if (c.out == GemvOut::kF32) dyf.poison();
  if (!out_f32) dyb.poison();

  GemvArgs a;
  a.x = c.norm ? static_cast<const void*>(dxf.data()) : static_cast<const void*>(dxb.data());
  a.norm_w = c.norm ? dnw.data() : nullptr;
  a.eps = 1e-6f;
  a.w = reinterpret_cast<const __nv_bfloat16*>(dw.data());
  a.B = c.B;
  a.N = c.N;
  a.K = c.K;
  a.out = c.out;
  a.gelu_tanh = c.gelu;
  a.y = out_f32 ? static_cast<void*>(dyf.data()) : static_cast<void*>(dyb.data());
  ASSERT_TRUE(gpu::detail::gemv_supported(a));
  KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(a, nullptr));
  KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());

  std::vector<float> got(y0.size());
  if (out_f32) {
    got = dyf.download();
    EXPECT_TRUE(dyf.sentinels_intact());
  } else {
    const auto raw = dyb.download();
    for (size_t i = 0; i < raw.size(); ++i) got[i] = bf16_to_float(raw[i]);
    EXPECT_TRUE(dyb.sentinels_intact());
  }
  // Tolerances: f32 sums in another order (1e-5 sqrt(K)); with the norm, the kernel's inverse RMS
  // may differ from the double one in its last bits, which can move an input element across a
  // bf16 rounding boundary (2^-8 of that element's term; two such flips allowed per row); a bf16
  // output adds its own rounding; the gated rows round g and u to bf16 (a near-tie may go the
  // other way) and then the product.
  auto max_term = [&](int b, int64_t r) {
    double m = 0;
    for (int k = 0; k < c.K; ++k)
      m = std::max(m, std::fabs(xin[b * c.K + k] * static_cast<double>(w[r * c.K + k])));
    return m;
  };
  int bad = 0;
  for (int b = 0; b < c.B; ++b) {
    for (int r = 0; r < c.N; ++r) {
      double want = 0, tol = 0;
      if (gated) {
        const double g = round_bf16(static_cast<float>(dot(b, r)));
        const double u = round_bf16(static_cast<float>(dot(b, c.N + r)));
        want = act(g, c.gelu) * u;
        tol = 0x1p-6 * (std::fabs(g) + 1) * (std::fabs(u) + 1);
      } else {
        want = dot(b, r) + (c.out == GemvOut::kF32Add ? y0[b * c.N + r] : 0.0);
        tol = 1e-5 * std::sqrt(static_cast<double>(c.K)) + (c.norm ? 0x1p-7 * max_term(b, r) : 0) +
              (c.out == GemvOut::kBf16 ? std::fabs(want) * 0x1p-8 : 0.0);
      }
      if (!(std::fabs(got[b * c.N + r] - want) <= tol) && ++bad <= 5)
        ADD_FAILURE() << "b " << b << " row " << r << ": got " << got[b * c.N + r] << ", want "
                      << want << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(DecodeGemv, EveryOutputModeAgainstTheDoubleReference) {
  KVEVICT_REQUIRE_GPU();
  uint64_t seed = 1;
  for (GemvOut out : {GemvOut::kBf16, GemvOut::kF32, GemvOut::kF32Add, GemvOut::kGated})
    for (bool norm : {false, true})
      for (int B : {1, 3, 8})
        for (int K : {8, 576, 1544}) check({B, 37, K, norm, out}, seed++);
}

TEST(DecodeGemv, ModelShapesAndTheGeluActivation) {
  KVEVICT_REQUIRE_GPU();
  // SmolLM2's q|k|v (960 x 576), Gemma 3's gate|up (2 x 2048 x 640) with GELU, its down (640 x
  // 2048), a one-row output, and a vocabulary-sized one.
  check({1, 960, 576, true, GemvOut::kBf16}, 11);
  check({2, 2048, 640, true, GemvOut::kGated, true}, 12);
  check({5, 1536, 576, true, GemvOut::kGated, false}, 13);
  check({1, 640, 2048, false, GemvOut::kF32Add}, 14);
  check({8, 1, 64, false, GemvOut::kF32}, 15);
  check({1, 49152, 576, true, GemvOut::kF32}, 16);
}

TEST(DecodeGemv, RefusesShapesItDoesNotCover) {
  GemvArgs a;
  static float buf[64] __attribute__((aligned(16)));
  a.x = buf;
  a.w = reinterpret_cast<const __nv_bfloat16*>(buf);
  a.y = buf;
  a.B = 1;
  a.N = 4;
  a.K = 16;
  EXPECT_TRUE(gpu::detail::gemv_supported(a));
  a.K = 12;  // not a multiple of 8
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.K = 16;
  a.B = gpu::detail::kGemvMaxBatch + 1;
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.B = 0;
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  a.B = 1;
  a.w = reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<const char*>(buf) + 2);
  EXPECT_FALSE(gpu::detail::gemv_supported(a));
  EXPECT_EQ(gpu::detail::launch_gemv(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvevict
