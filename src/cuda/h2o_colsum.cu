// h2o's all-queries score (SPEC section 2): the column sums of the causal attention matrix of the
// whole prompt, sum_{t >= j} p_tj, never materialized. The LSE of every query comes first (the
// window forward run with w = n and no V: a causal flash pass); then this kernel, key-stationary:
// a block owns a tile of keys of one KV head (K tile in shared memory), walks every query slab of
// the group that can see the tile (t >= first key, so the causal triangle and no more), forms the
// 16 x TK logits with mma.sync, p = exp2(z log2e - LSE log2e), and adds p into per-key registers.
// The sums are reduced over lanes (shuffles) and warps (shared memory, fixed order) and written
// once per key: no atomics, so the scores are bitwise reproducible (the window pass's float
// atomics across many row blocks were not), and O(Hq n) scratch (the LSE) beyond the scores.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

template <class T_, int D_>
struct ColsumTraits {
  using T = T_;
  static constexpr int kD = D_;
  // 128 keys a block halves the re-reads of Q against 64 (Q streams once per key tile); d = 256
  // keeps 64 so the K tile stays under 48 KB of static shared memory.
  static constexpr int kTileKeys = kD <= 128 ? 128 : 64;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStride = kD + 8;  // 16-byte row padding: conflict-free fragment loads
  static constexpr int kNTiles = kTileKeys / 8;
  static_assert(kD == 64 || kD == 128 || kD == 256, "head dim must be 64, 128 or 256");
  static_assert(kTileKeys * kStride * sizeof(T) <= 40 * 1024, "K tile fits static smem");
  static_assert(kTileKeys <= kThreads, "one thread per key in the final reduction");
};

struct ColsumParams {
  const void* q;  // [Hq, q_rows, d]; the last n rows are the prompt's queries
  int64_t q_head_stride, q_row_stride;
  int q_rows;
  const void* k;  // [Hkv, n, d]
  int64_t kv_head_stride, kv_row_stride;
  const float* lse;  // [Hq, n] natural-log LSE of every query
  int num_q_heads, num_kv_heads, group;
  int64_t n;
  float scale_log2;  // logit scale * log2(e)
  float row_weight;  // 1 / G
  bool normalize;    // divide key j by the n - j queries that see it
  float* scores;     // [Hkv, n]
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) h2o_colsum_kernel(ColsumParams p) {
  using T = typename Tr::T;
  constexpr int D = Tr::kD, S = Tr::kStride, TK = Tr::kTileKeys, NT = Tr::kNTiles;
  __shared__ __align__(16) T k_s[TK * S];
  __shared__ float red_s[Tr::kWarps][TK];
  const int hk = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * TK;

  const T* k = static_cast<const T*>(p.k) + hk * p.kv_head_stride;
  for (int c = tid; c < TK * (D / 8); c += Tr::kThreads) {
    const int key = c / (D / 8), ch = c % (D / 8);
    const int64_t j = j0 + key;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (j < p.n) val = *reinterpret_cast<const uint4*>(k + j * p.kv_row_stride + ch * 8);
    *reinterpret_cast<uint4*>(k_s + key * S + ch * 8) = val;
  }
  __syncthreads();

  float col[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) col[nt][0] = col[nt][1] = 0.f;

  // Query slabs of 16 rows that see the tile: t from j0 (rounded down to 16) to n - 1.
  const int64_t first_t = j0 / 16 * 16;
  const int64_t slabs = (p.n - first_t + 15) / 16;
  const int64_t total = slabs * p.group;
  const T* q = static_cast<const T*>(p.q);
  for (int64_t idx = warp; idx < total; idx += Tr::kWarps) {
    const int hh = static_cast<int>(idx / slabs);
    const int64_t t0 = first_t + (idx % slabs) * 16;
    const int h = hk * p.group + hh;
    const int64_t t_lo = t0 + g, t_hi = t_lo + 8;
    const bool ok_lo = t_lo < p.n, ok_hi = t_hi < p.n;
    const T* q_lo =
        q + h * p.q_head_stride + (p.q_rows - p.n + (ok_lo ? t_lo : 0)) * p.q_row_stride;
    const T* q_hi =
        q + h * p.q_head_stride + (p.q_rows - p.n + (ok_hi ? t_hi : 0)) * p.q_row_stride;
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int c = ks * 16 + 2 * t4;
      qa[ks][0] = ok_lo ? *reinterpret_cast<const uint32_t*>(q_lo + c) : 0u;
      qa[ks][1] = ok_hi ? *reinterpret_cast<const uint32_t*>(q_hi + c) : 0u;
      qa[ks][2] = ok_lo ? *reinterpret_cast<const uint32_t*>(q_lo + c + 8) : 0u;
      qa[ks][3] = ok_hi ? *reinterpret_cast<const uint32_t*>(q_hi + c + 8) : 0u;
    }
    // Padding rows get LSE = +inf: exp2(z - inf) = 0 without a row mask.
    const float l_lo = ok_lo ? p.lse[static_cast<int64_t>(h) * p.n + t_lo] * kLog2e : INFINITY;
    const float l_hi = ok_hi ? p.lse[static_cast<int64_t>(h) * p.n + t_hi] * kLog2e : INFINITY;
    // Whole slab sees the whole tile (and no key past n): no per-element causal mask.
    const bool full = t0 >= j0 + TK - 1 && j0 + TK <= p.n;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const T* kr = k_s + (nt * 8 + g) * S + ks * 16 + 2 * t4;
        mma_16816<T>(c, qa[ks], *reinterpret_cast<const uint32_t*>(kr),
                     *reinterpret_cast<const uint32_t*>(kr + 8));
      }
      const int64_t j = j0 + nt * 8 + 2 * t4;
      float p0 = exp2f(fmaf(c[0], p.scale_log2, -l_lo));
      float p1 = exp2f(fmaf(c[1], p.scale_log2, -l_lo));
      float p2 = exp2f(fmaf(c[2], p.scale_log2, -l_hi));
      float p3 = exp2f(fmaf(c[3], p.scale_log2, -l_hi));
      if (!full) {
        if (!(j <= t_lo && j < p.n)) p0 = 0.f;
        if (!(j + 1 <= t_lo && j + 1 < p.n)) p1 = 0.f;
        if (!(j <= t_hi && j < p.n)) p2 = 0.f;
        if (!(j + 1 <= t_hi && j + 1 < p.n)) p3 = 0.f;
      }
      col[nt][0] += p0 + p2;
      col[nt][1] += p1 + p3;
    }
  }
  // Sum over the 8 row groups of the warp (lanes with the same t4), then over warps in order.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = col[nt][e];
      x += __shfl_xor_sync(0xffffffffu, x, 4);
      x += __shfl_xor_sync(0xffffffffu, x, 8);
      x += __shfl_xor_sync(0xffffffffu, x, 16);
      if (g == 0) red_s[warp][nt * 8 + 2 * t4 + e] = x;
    }
  __syncthreads();
  if (tid < TK) {
    const int64_t j = j0 + tid;
    if (j < p.n) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < Tr::kWarps; ++w) s += red_s[w][tid];
      s *= p.row_weight;
      if (p.normalize) s /= static_cast<float>(p.n - j);
      p.scores[static_cast<int64_t>(hk) * p.n + j] = s;
    }
  }
}

template <class T, int D>
cudaError_t launch_typed(const ColsumParams& p, cudaStream_t stream) {
  using Tr = ColsumTraits<T, D>;
  const dim3 grid(static_cast<unsigned>((p.n + Tr::kTileKeys - 1) / Tr::kTileKeys), p.num_kv_heads);
  h2o_colsum_kernel<Tr><<<grid, Tr::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_h2o_colsum(const WindowArgs& a, const float* lse, bool normalize, float* scores,
                              cudaStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0 || a.q_rows < a.n ||
      lse == nullptr || a.n > 0x7fffffffLL * 16)
    return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  ColsumParams p;
  p.q = a.q;
  p.q_head_stride = a.q_head_stride;
  p.q_row_stride = a.q_row_stride;
  p.q_rows = a.q_rows;
  p.k = a.k;
  p.kv_head_stride = a.kv_head_stride;
  p.kv_row_stride = a.kv_row_stride;
  p.lse = lse;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group = a.num_q_heads / a.num_kv_heads;
  p.n = a.n;
  p.scale_log2 = a.scale * kLog2e;
  p.row_weight = 1.0f / static_cast<float>(p.group);
  p.normalize = normalize;
  p.scores = scores;
  return with_elem(a.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128, 256>(
        a.head_dim, [&](auto d) { return launch_typed<T, decltype(d)::value>(p, stream); });
  });
}

}  // namespace kvevict::cuda::detail
