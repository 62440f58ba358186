// The small-batch GEMV of the decode step (src/cuda/decode_gemv.cu) against a double reference
// that rounds where the kernel's contract says it rounds (the normed input to bf16; the gate and
// up products to bf16 before the activation): every output mode, with and without the fused
// RMSNorm, batches 1..8 (1: the CUDA-core kernel; 2 and more: the tensor-core one, and the
// CUDA-core one by GemvArgs::cuda_cores), row counts that
// are not a multiple of the warp's pair or the block's eight rows, K from one 16-byte chunk up;
// at batch 1 the weights preloaded into registers (GemvArgs::preload) give the same bits; rows
// outside the output stay untouched (which shapes it takes: gemv_support_test.cpp). gemma3's
// batch-1 folds (the post-norm add in front, the q / k head norms behind q|k|v) give the bits of
// the launches they replace.
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

// y = rms_norm(x) W^T over B rows (eps 1e-6), W [N, K] bf16 bits in device memory.
GemvArgs normed_projection(const float* x, const float* norm_w, const uint16_t* w, int B, int N,
                           int K, GemvOut out, void* y) {
  GemvArgs a;
  a.x = x;
  a.norm_w = norm_w;
  a.eps = 1e-6f;
  a.w = reinterpret_cast<const __nv_bfloat16*>(w);
  a.B = B;
  a.N = N;
  a.K = K;
  a.out = out;
  a.y = y;
  return a;
}

// The decode mode's segmented cache for the RoPE + append tests: `segments` segments of 16 rows
// holding random bit patterns (about 1 in 256 a bf16 NaN: rows neither path writes must keep
// their bits), segment s filled to 3 + 2 s rows, or to s % (ring + 1) on a ring layer.
struct Segments {
  std::vector<int32_t> len;   // [segments]
  std::vector<int64_t> off;   // [segments + 1]
  std::vector<uint16_t> kv0;  // [rows, d] bf16 bits
  int64_t rows = 0;
};
Segments random_segments(int segments, int ring, int d, std::mt19937_64& rng) {
  constexpr int kCap = 16;
  Segments g;
  g.len.resize(segments);
  g.off.assign(segments + 1, 0);
  for (int s = 0; s < segments; ++s) {
    g.len[s] = ring > 0 ? s % (ring + 1) : 3 + 2 * s;
    g.off[s + 1] = g.off[s] + kCap;
  }
  g.rows = g.off.back();
  g.kv0.resize(static_cast<size_t>(g.rows) * d);
  for (auto& e : g.kv0) e = static_cast<uint16_t>(rng());
  return g;
}

std::vector<double> rope_inv_freq(int d) {
  std::vector<double> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / d);
  return inv_freq;
}

// One path's copy of what a decode step's RoPE + append writes: q [T, Hq, d] (poisoned) and the
// cache's k / v rows, positions (-7), accumulators (0.5) and lengths, as `g` lays them out.
struct StepCache {
  DeviceBuffer<uint16_t> q, k, v;
  DeviceBuffer<int32_t> pos, len;
  DeviceBuffer<float> acc;
  StepCache(size_t qn, const Segments& g)
      : q(qn), k(g.kv0.size()), v(g.kv0.size()), pos(g.rows), len(g.len.size()), acc(g.rows) {
    q.poison();
    k.upload(g.kv0);
    v.upload(g.kv0);
    pos.upload(std::vector<int32_t>(g.rows, -7));
    acc.upload(std::vector<float>(g.rows, 0.5f));
    len.upload(g.len);
  }
  // ra's outputs pointed at this copy (decode mode, token-major q).
  RopeAppendArgs outputs_of(RopeAppendArgs ra) {
    ra.q_out = reinterpret_cast<__nv_bfloat16*>(q.data());
    ra.head_major = false;
    ra.k_cache = reinterpret_cast<__nv_bfloat16*>(k.data());
    ra.v_cache = reinterpret_cast<__nv_bfloat16*>(v.data());
    ra.pos_cache = pos.data();
    ra.acc_cache = acc.data();
    ra.seg_len = len.data();
    ra.decode = true;
    return ra;
  }
};

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
  const int Hq = 6, Hkv = 2, d = 64, W = (Hq + 2 * Hkv) * d, S = B * Hkv;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(B) * K), nw(K), w(static_cast<size_t>(W) * K), bias(W);
  for (auto& e : x) e = 2.f * nd(rng);
  for (auto& e : nw) e = 1.f + 0.2f * nd(rng);
  for (auto& e : w) e = round_bf16(nd(rng) / 16.f);
  for (auto& e : bias) e = 0.1f * nd(rng);
  const std::vector<double> inv_freq = rope_inv_freq(d);
  std::vector<int32_t> pos(B);
  for (int b = 0; b < B; ++b) pos[b] = 1000 + 37 * b;
  const Segments g = random_segments(S, ring, d, rng);

  DeviceBuffer<float> dx(x.size()), dnw(K), dbias(W);
  DeviceBuffer<uint16_t> dw(w.size()), dqkv(static_cast<size_t>(B) * W);
  DeviceBuffer<double> dfreq(inv_freq.size());
  DeviceBuffer<int32_t> dpos(B);
  DeviceBuffer<int64_t> doff(g.off.size());
  DeviceBuffer<uint32_t> arrivals(1);
  dx.upload(x);
  dnw.upload(nw);
  dbias.upload(bias);
  dw.upload(cuda::testing::encode16(w, DType::kBF16));
  dfreq.upload(inv_freq);
  dpos.upload(pos);
  doff.upload(g.off);
  KVEVICT_ASSERT_CUDA(cudaMemset(arrivals.data(), 0, 4));
  const size_t qn = static_cast<size_t>(B) * Hq * d;
  StepCache ref(qn, g), fused(qn, g);
  RopeAppendArgs rope;  // what both paths share
  rope.qkv = reinterpret_cast<const __nv_bfloat16*>(dqkv.data());
  rope.bias = with_bias ? dbias.data() : nullptr;
  rope.pos = dpos.data();
  rope.inv_freq = dfreq.data();
  rope.T = B;
  rope.Hq = Hq;
  rope.Hkv = Hkv;
  rope.d = d;
  rope.neox = neox;
  rope.seg_off = doff.data();
  rope.ring = ring;
  auto rope_of = [&](StepCache& c) { return c.outputs_of(rope); };
  // The reference's projection.
  const GemvArgs proj =
      normed_projection(dx.data(), dnw.data(), dw.data(), B, W, K, GemvOut::kBf16, dqkv.data());
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

// gemma3's post-norm fold (GemvArgs::post_in) against the two launches it replaces on the same
// inputs: rms_norm_add (x += rms_norm(o) w), then the projection of the new x by the preloaded
// batch-1 kernel. The outputs and the new x row must be equal bit for bit (the fold sums the post
// row in rms_norm_add_kernel's order), and the arrival counter back at zero. Two rounds, x updated
// in place as the decode step does it.
void check_post_fold(GemvOut out, int N, int K, bool gelu, uint64_t seed) {
  SCOPED_TRACE("post fold N=" + std::to_string(N) + " K=" + std::to_string(K) +
               (out == GemvOut::kGated ? " gated" : " bf16") + (gelu ? " gelu" : ""));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t w_rows = out == GemvOut::kGated ? 2 * N : N;
  std::vector<float> x(K), nw(K), pw(K), w(w_rows * K);
  for (auto& e : x) e = 3.f * nd(rng);
  for (auto& e : nw) e = 1.f + 0.25f * nd(rng);
  for (auto& e : pw) e = 1.f + 0.25f * nd(rng);
  for (auto& e : w) e = round_bf16(nd(rng) / std::sqrt(static_cast<float>(K)));
  DeviceBuffer<float> x_ref(K), x_fold(K), o(K), dnw(K), dpw(K);
  DeviceBuffer<uint16_t> dw(w.size()), y_ref(N), y_fold(N);
  DeviceBuffer<uint32_t> arrivals(1);
  x_ref.upload(x);
  x_fold.upload(x);
  dnw.upload(nw);
  dpw.upload(pw);
  dw.upload(cuda::testing::encode16(w, DType::kBF16));
  KVEVICT_ASSERT_CUDA(cudaMemset(arrivals.data(), 0, 4));
  GemvArgs ref = normed_projection(x_ref.data(), dnw.data(), dw.data(), 1, N, K, out, y_ref.data());
  ref.gelu_tanh = gelu;
  GemvArgs fold = ref;
  fold.x = x_fold.data();
  fold.y = y_fold.data();
  fold.post_in = o.data();
  fold.post_w = dpw.data();
  fold.x_out = x_fold.data();
  fold.arrivals = arrivals.data();
  ASSERT_TRUE(gpu::detail::gemv_supported(fold));
  for (int round = 0; round < 2; ++round) {
    std::vector<float> o_h(K);
    for (auto& e : o_h) e = 2.f * nd(rng);
    o.upload(o_h);
    y_ref.poison();
    y_fold.poison();
    KVEVICT_ASSERT_CUDA(
        gpu::detail::launch_rms_norm_add(o.data(), 1, K, dpw.data(), 1e-6f, x_ref.data(), nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(ref, nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(fold, nullptr));
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> xr = x_ref.download(), xf = x_fold.download();
    int differ = 0;
    for (int k = 0; k < K; ++k)
      if (bits(xr[k]) != bits(xf[k]) && ++differ <= 3)
        ADD_FAILURE() << "round " << round << " x[" << k << "]: " << xf[k] << " vs " << xr[k];
    EXPECT_EQ(differ, 0) << "round " << round << ": elements of the new x row";
    EXPECT_EQ(y_fold.download(), y_ref.download()) << "round " << round;
    EXPECT_EQ(arrivals.download(), std::vector<uint32_t>{0u}) << "round " << round;
    EXPECT_TRUE(x_fold.sentinels_intact() && y_fold.sentinels_intact());
  }
}

TEST(DecodeGemv, PostNormFoldEqualsTheAddThenTheProjection) {
  KVEVICT_REQUIRE_GPU();
  // Gemma 3 270M's gate|up (2 x 2048 x 640, GELU: 512 blocks counting on one counter) and q|k|v
  // as a plain projection (1536 x 640), the tiny gemma3 of the graph tests' gate|up, a one-block
  // launch over a single chunk, a full input tile, and a K that ends within the row kernels'
  // 256-column strides.
  check_post_fold(GemvOut::kGated, 2048, 640, true, 61);
  check_post_fold(GemvOut::kBf16, 1536, 640, false, 62);
  check_post_fold(GemvOut::kGated, 320, 192, true, 63);
  check_post_fold(GemvOut::kBf16, 7, 8, false, 64);
  check_post_fold(GemvOut::kGated, 37, 2048, false, 65);
  check_post_fold(GemvOut::kBf16, 301, 200, false, 66);
}

// gemma3's q / k head norms in the batch-1 q|k|v launch (GemvArgs::head_arrivals, with and without
// the post-norm fold) against the launches it replaces: [rms_norm_add,] the kBf16 projection, then
// rope_append with the norms (decode mode). Every store equal bit for bit (rope_append.cuh's
// roundings in both): q, the appended k / v / pos / acc rows, the projection's q / k values the
// fold leaves in y, the new x row; the lengths advanced once, every counter back at zero. Caches
// start as random bit patterns: rows neither path writes keep theirs.
struct HeadNormCase {
  int Hq, Hkv, d, K;
  bool neox, post, bias;
  int ring;
};

void check_head_norm_fold(const HeadNormCase& c, uint64_t seed) {
  SCOPED_TRACE("Hq=" + std::to_string(c.Hq) + " Hkv=" + std::to_string(c.Hkv) +
               " d=" + std::to_string(c.d) + " K=" + std::to_string(c.K) +
               (c.neox ? " neox" : " interleaved") + (c.post ? " post" : "") +
               (c.bias ? " bias" : "") + " ring=" + std::to_string(c.ring));
  const int Hq = c.Hq, Hkv = c.Hkv, d = c.d, K = c.K, W = (Hq + 2 * Hkv) * d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(K), nw(K), pw(K), w(static_cast<size_t>(W) * K), bias(W), qn(d), kn(d);
  for (auto& e : x) e = 2.f * nd(rng);
  for (auto& e : nw) e = 1.f + 0.2f * nd(rng);
  for (auto& e : pw) e = 1.f + 0.2f * nd(rng);
  for (auto& e : w) e = round_bf16(nd(rng) / 16.f);
  for (auto& e : bias) e = 0.1f * nd(rng);
  for (auto& e : qn) e = 1.f + 0.3f * nd(rng);
  for (auto& e : kn) e = 1.f + 0.3f * nd(rng);
  const std::vector<double> inv_freq = rope_inv_freq(d);
  std::vector<int32_t> pos{1000};
  const Segments g = random_segments(Hkv, c.ring, d, rng);

  DeviceBuffer<float> dnw(K), dpw(K), o(K), dbias(W), dqn(d), dkn(d);
  DeviceBuffer<uint16_t> dw(w.size());
  DeviceBuffer<double> dfreq(inv_freq.size());
  DeviceBuffer<int32_t> dpos(1);
  DeviceBuffer<int64_t> doff(g.off.size());
  DeviceBuffer<uint32_t> arrivals(1 + Hq + Hkv);  // the launch's, then the heads'
  dnw.upload(nw);
  dpw.upload(pw);
  dbias.upload(bias);
  dqn.upload(qn);
  dkn.upload(kn);
  dw.upload(cuda::testing::encode16(w, DType::kBF16));
  dfreq.upload(inv_freq);
  dpos.upload(pos);
  doff.upload(g.off);
  KVEVICT_ASSERT_CUDA(cudaMemset(arrivals.data(), 0, arrivals.size() * 4));
  // Each path's cache copy, its input row x and its projection's q|k|v values (poisoned).
  struct Path : StepCache {
    DeviceBuffer<float> x;
    DeviceBuffer<uint16_t> qkv;
    Path(int K, int W, size_t qn, const Segments& g) : StepCache(qn, g), x(K), qkv(W) {
      qkv.poison();
    }
  };
  Path ref(K, W, static_cast<size_t>(Hq) * d, g), fused(K, W, static_cast<size_t>(Hq) * d, g);
  for (Path* p : {&ref, &fused}) p->x.upload(x);
  RopeAppendArgs rope;  // what both paths share
  rope.bias = c.bias ? dbias.data() : nullptr;
  rope.pos = dpos.data();
  rope.inv_freq = dfreq.data();
  rope.T = 1;
  rope.Hq = Hq;
  rope.Hkv = Hkv;
  rope.d = d;
  rope.neox = c.neox;
  rope.q_norm = dqn.data();
  rope.k_norm = dkn.data();
  rope.norm_eps = 1e-6f;
  rope.seg_off = doff.data();
  rope.ring = c.ring;
  auto rope_of = [&](Path& p) {
    RopeAppendArgs ra = p.outputs_of(rope);
    ra.qkv = reinterpret_cast<const __nv_bfloat16*>(p.qkv.data());
    return ra;
  };
  // The reference's projection (the preloaded batch-1 kernel).
  const GemvArgs proj = normed_projection(ref.x.data(), dnw.data(), dw.data(), 1, W, K,
                                          GemvOut::kBf16, ref.qkv.data());
  GemvArgs a = proj;  // the fused launch
  a.x = fused.x.data();
  a.out = GemvOut::kRopeAppend;
  a.y = fused.qkv.data();
  a.rope = rope_of(fused);
  a.arrivals = arrivals.data();
  a.head_arrivals = arrivals.data() + 1;
  if (c.post) {
    a.post_in = o.data();
    a.post_w = dpw.data();
    a.x_out = fused.x.data();
  }
  ASSERT_TRUE(gpu::detail::gemv_supported(a));
  const size_t qk_cols = static_cast<size_t>(Hq + Hkv) * d;  // y's columns the fold writes
  for (int round = 0; round < 2; ++round) {  // the second round appends the next token
    std::vector<float> o_h(K);
    for (auto& e : o_h) e = 1.5f * nd(rng);
    o.upload(o_h);
    if (c.post)
      KVEVICT_ASSERT_CUDA(gpu::detail::launch_rms_norm_add(o.data(), 1, K, dpw.data(), 1e-6f,
                                                           ref.x.data(), nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(proj, nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_rope_append(rope_of(ref), nullptr));
    KVEVICT_ASSERT_CUDA(gpu::detail::launch_gemv(a, nullptr));
    KVEVICT_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::string r = "round " + std::to_string(round);
    EXPECT_EQ(fused.q.download(), ref.q.download()) << r << ": q";
    EXPECT_EQ(fused.k.download(), ref.k.download()) << r << ": k cache";
    EXPECT_EQ(fused.v.download(), ref.v.download()) << r << ": v cache";
    EXPECT_EQ(fused.pos.download(), ref.pos.download()) << r;
    EXPECT_EQ(fused.acc.download(), ref.acc.download()) << r;
    EXPECT_EQ(fused.len.download(), ref.len.download()) << r;
    const std::vector<uint16_t> yf = fused.qkv.download(), yr = ref.qkv.download();
    EXPECT_TRUE(std::equal(yf.begin(), yf.begin() + qk_cols, yr.begin())) << r << ": q / k in y";
    const std::vector<float> xf = fused.x.download(), xr = ref.x.download();
    EXPECT_EQ(std::memcmp(xf.data(), xr.data(), xf.size() * 4), 0) << r << ": the x row";
    EXPECT_EQ(arrivals.download(), std::vector<uint32_t>(1 + Hq + Hkv, 0u)) << r;
    ++pos[0];  // the next token's position (a ring layer's next slot)
    dpos.upload(pos);
  }
}

TEST(DecodeGemv, RopeAppendWithHeadNormsEqualsTheProjectionThenRopeAppend) {
  KVEVICT_REQUIRE_GPU();
  uint64_t seed = 80;
  // Gemma 3 270M's layer (4 q heads, 1 KV head, d = 256, D = 640), global and ring.
  check_head_norm_fold({4, 1, 256, 640, true, true, false, 0}, seed++);
  check_head_norm_fold({4, 1, 256, 640, true, false, false, 5}, seed++);
  // The tiny gemma3 of the graph tests (D = 192, two KV heads).
  check_head_norm_fold({4, 2, 256, 192, true, true, false, 5}, seed++);
  // d = 64 both layouts, a bias (the rule allows it), a full input tile; d = 8: one block a head
  // and lanes without columns.
  check_head_norm_fold({6, 2, 64, 576, false, true, true, 0}, seed++);
  check_head_norm_fold({6, 2, 64, 2048, true, false, false, 5}, seed++);
  check_head_norm_fold({2, 1, 8, 64, false, true, false, 0}, seed++);
}

}  // namespace
}  // namespace kvevict
