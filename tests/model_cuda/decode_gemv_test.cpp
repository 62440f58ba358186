// The small-batch GEMV of the decode step (src/cuda/decode_gemv.cu) against a double reference
// that rounds where the kernel's contract says it rounds (the normed input to bf16; the gate and
// up products to bf16 before the activation): every output mode, with and without the fused
// RMSNorm, batches 1..8 (1: the CUDA-core kernel; 2 and more: the tensor-core one, and the
// CUDA-core one by GemvArgs::cuda_cores), row counts that
// are not a multiple of the warp's pair or the block's eight rows, K from one 16-byte chunk up;
// at batch 1 the weights preloaded into registers (GemvArgs::preload) give the same bits; rows
// outside the output stay untouched; shapes the kernel does not cover are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using gpu::detail::RopeAppendArgs;

struct Case {
  int B, N, K;
  bool norm;
  GemvOut out;
  bool gelu = false;
  bool cuda_cores = false;  // GemvArgs::cuda_cores: the batch-1 kernel at this batch
};

std::string name(const Case& c) {
  const char* outs[] = {"bf16", "f32", "f32+=", "gated"};
  return "B=" + std::to_string(c.B) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         (c.norm ? " norm" : "") + " out=" + outs[static_cast<int>(c.out)] +
         (c.gelu ? " gelu" : "") + (c.cuda_cores ? " cuda-cores" : "");
}

uint32_t bits(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
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
  a.cuda_cores = c.cuda_cores;
  a.preload = false;  // the L2 path first; at batch 1 the preloaded weights below
  a.y = out_f32 ? static_cast<void*>(dyf.data()) : static_cast<void*>(dyb.data());
  ASSERT_TRUE(gpu::detail::gemv_supported(a));
  // One launch from the initial outputs; the outputs as floats, the sentinels checked.
  auto launch = [&]() {
    if (c.out == GemvOut::kF32Add) dyf.upload(y0);
    if (c.out == GemvOut::kF32) dyf.poison();
    if (!out_f32) dyb.poison();
    EXPECT_EQ(gpu::detail::launch_gemv(a, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> y(y0.size());
    if (out_f32) {
      y = dyf.download();
      EXPECT_TRUE(dyf.sentinels_intact());
    } else {
      const auto raw = dyb.download();
      for (size_t i = 0; i < raw.size(); ++i) y[i] = bf16_to_float(raw[i]);
      EXPECT_TRUE(dyb.sentinels_intact());
    }
    return y;
  };
  const std::vector<float> got = launch();
  if (c.B == 1) {  // the weights in registers (GemvArgs::preload, K <= 2,048): the same bits
    a.preload = true;
    const std::vector<float> again = launch();
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (bits(got[i]) != bits(again[i]) && ++differ <= 3)
        ADD_FAILURE() << "preloaded weights: row " << i << " " << again[i] << " vs " << got[i];
    EXPECT_EQ(differ, 0);
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
        // K = 4104: two full input tiles of 2,048 columns and a last one of 8.
        for (int K : {8, 576, 1544, 4104}) {
          check({B, 37, K, norm, out}, seed++);
          if (B > 1) check({B, 37, K, norm, out, false, true}, seed++);  // the other kernel
        }
}

TEST(DecodeGemv, ModelShapesAndTheGeluActivation) {
  KVEVICT_REQUIRE_GPU();
  // SmolLM2's q|k|v (960 x 576), Gemma 3's gate|up (2 x 2048 x 640) with GELU, its down (640 x
  // 2048), a one-row output, a vocabulary-sized one, and a K of 14,336.
  check({1, 960, 576, true, GemvOut::kBf16}, 11);
  check({2, 2048, 640, true, GemvOut::kGated, true}, 12);
  check({5, 1536, 576, true, GemvOut::kGated, false}, 13);
  check({1, 640, 2048, false, GemvOut::kF32Add}, 14);
  check({8, 1, 64, false, GemvOut::kF32}, 15);
  check({1, 49152, 576, true, GemvOut::kF32}, 16);
  // Llama-3.1-8B's down projection's K (7 input tiles) at the largest batch.
  check({8, 300, 14336, true, GemvOut::kF32Add}, 17);
}

// kRopeAppend against the two launches it replaces (the kBf16 projection, then rope_append's
// decode mode) on the same inputs and two copies of the same cache: every store equal (q and k may
// differ by the contraction of the rotation into FMAs: at most 1 bf16 ulp), the lengths advanced
// once, ring layers included. The caches start as random bit patterns (about 1 in 256 a bf16 NaN),
// so q / k elements are compared bitwise first: the rows neither path writes must keep their bits.
void check_rope_append(int B, bool neox, bool with_bias, int ring, uint64_t seed, int K = 256,
                       bool preload = false) {
  SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) +
               (neox ? " neox" : " interleaved") + (with_bias ? " bias" : "") +
               " ring=" + std::to_string(ring));
  const int Hq = 6, Hkv = 2, d = 64, W = (Hq + 2 * Hkv) * d, S = B * Hkv, cap = 16;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(B) * K), nw(K), w(static_cast<size_t>(W) * K), bias(W);
  for (auto& e : x) e = 2.f * nd(rng);
  for (auto& e : nw) e = 1.f + 0.2f * nd(rng);
  for (auto& e : w) e = round_bf16(nd(rng) / 16.f);
  for (auto& e : bias) e = 0.1f * nd(rng);
  std::vector<double> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / d);
  std::vector<int32_t> pos(B), len(S);
  std::vector<int64_t> off(S + 1);
  for (int b = 0; b < B; ++b) pos[b] = 1000 + 37 * b;
  for (int s = 0; s < S; ++s) {
    len[s] = ring > 0 ? static_cast<int32_t>(s % (ring + 1)) : static_cast<int32_t>(3 + 2 * s);
    off[s + 1] = off[s] + cap;
  }
  const int64_t rows = off.back();
  std::vector<uint16_t> kv0(static_cast<size_t>(rows) * d);
  for (auto& e : kv0) e = static_cast<uint16_t>(rng());

  DeviceBuffer<float> dx(x.size()), dnw(K), dbias(W);
  DeviceBuffer<uint16_t> dw(w.size()), dqkv(static_cast<size_t>(B) * W);
  DeviceBuffer<double> dfreq(inv_freq.size());
  DeviceBuffer<int32_t> dpos(B);
  DeviceBuffer<int64_t> doff(off.size());
  DeviceBuffer<uint32_t> arrivals(1);
  dx.upload(x);
  dnw.upload(nw);
  dbias.upload(bias);
  dw.upload(cuda::testing::encode16(w, DType::kBF16));
  dfreq.upload(inv_freq);
  dpos.upload(pos);
  doff.upload(off);
  KVEVICT_ASSERT_CUDA(cudaMemset(arrivals.data(), 0, 4));
  struct Cache {
    DeviceBuffer<uint16_t> q, k, v;
    DeviceBuffer<int32_t> pos, len;
    DeviceBuffer<float> acc;
    Cache(size_t qn, size_t kvn, size_t rows, size_t segs)
        : q(qn), k(kvn), v(kvn), pos(rows), len(segs), acc(rows) {}
  };
  const size_t qn = static_cast<size_t>(B) * Hq * d;
  Cache ref(qn, kv0.size(), rows, S), fused(qn, kv0.size(), rows, S);
  for (Cache* c : {&ref, &fused}) {
    c->q.poison();
    c->k.upload(kv0);
    c->v.upload(kv0);
    c->pos.upload(std::vector<int32_t>(rows, -7));
    c->acc.upload(std::vector<float>(rows, 0.5f));
    c->len.upload(len);
  }
  auto rope_of = [&](Cache& c) {
    RopeAppendArgs ra;
    ra.qkv = reinterpret_cast<const __nv_bfloat16*>(dqkv.data());
    ra.bias = with_bias ? dbias.data() : nullptr;
    ra.pos = dpos.data();
    ra.inv_freq = dfreq.data();
    ra.T = B;
    ra.Hq = Hq;
    ra.Hkv = Hkv;
    ra.d = d;
    ra.neox = neox;
    ra.q_out = reinterpret_cast<__nv_bfloat16*>(c.q.data());
    ra.head_major = false;
    ra.k_cache = reinterpret_cast<__nv_bfloat16*>(c.k.data());
    ra.v_cache = reinterpret_cast<__nv_bfloat16*>(c.v.data());
    ra.pos_cache = c.pos.data();
    ra.acc_cache = c.acc.data();
    ra.seg_off = doff.data();
    ra.seg_len = c.len.data();
    ra.decode = true;
    ra.ring = ring;
    return ra;
  };
  GemvArgs proj;  // the reference's projection
  proj.x = dx.data();
  proj.norm_w = dnw.data();
  proj.eps = 1e-6f;
  proj.w = reinterpret_cast<const __nv_bfloat16*>(dw.data());
  proj.B = B;
  proj.N = W;
  proj.K = K;
  proj.out = GemvOut::kBf16;
  proj.y = dqkv.data();
  GemvArgs a = proj;  // the fused launch
  a.out = GemvOut::kRopeAppend;
  a.y = nullptr;
  a.rope = rope_of(fused);
  a.arrivals = arrivals.data();
  a.preload = preload;
  ASSERT_TRUE(gpu::detail::gemv_supported(a));
  for (int round = 0; round < 2; ++round) {  // the second round appends the next token
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(proj, nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_rope_append(rope_of(ref), nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(a, nullptr));
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(fused.len.download(), ref.len.download()) << "round " << round;
    EXPECT_EQ(fused.v.download(), ref.v.download()) << "round " << round;
    EXPECT_EQ(fused.pos.download(), ref.pos.download()) << "round " << round;
    EXPECT_EQ(fused.acc.download(), ref.acc.download()) << "round " << round;
    EXPECT_EQ(arrivals.download(), std::vector<uint32_t>{0u}) << "round " << round;
    for (auto* pr : {&fused.q, &fused.k}) {
      const auto got = pr->download();
      const auto want = (pr == &fused.q ? ref.q : ref.k).download();
      int far = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i]) continue;  // same bits (a NaN of the untouched rows included)
        const float g = bf16_to_float(got[i]), e = bf16_to_float(want[i]);
        if (!(g == e || std::fabs(g - e) <= std::fabs(e) * 0x1p-7f) && ++far <= 3)
          ADD_FAILURE() << (pr == &fused.q ? "q" : "k cache") << " element " << i << " (row "
                        << i / d << ", column " << i % d << "): got " << g << ", want " << e;
      }
      EXPECT_EQ(far, 0) << (pr == &fused.q ? "q" : "k cache") << " round " << round;
    }
    for (auto& p : pos) ++p;  // the next token's positions (a ring layer's next slot)
    dpos.upload(pos);
  }
}

TEST(DecodeGemv, RopeAppendEqualsTheProjectionThenRopeAppend) {
  KVEVICT_REQUIRE_GPU();
  uint64_t seed = 40;
  for (int B : {1, 3})
    for (bool neox : {false, true})
      for (bool bias : {false, true})
        for (int ring : {0, 5}) {
          check_rope_append(B, neox, bias, ring, seed++);
          if (B == 1) check_rope_append(B, neox, bias, ring, seed++, 576, true);  // preloaded
        }
  // The largest batch over several input tiles (two of 2,048 columns and one of 8).
  check_rope_append(8, true, true, 5, seed++, 4104);
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
