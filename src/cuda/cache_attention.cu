// Attention of queries over a compacted cache (segment or paged layout): one warp per (query
// head, query), lanes own d/32 dims, online softmax over the head's rows in order. Visibility by
// ORIGINAL positions (pos_k <= q_pos), optional sliding window and logit soft-capping, as
// kvevict::cpu::attention. This is the correctness path of the Backend interface (the tests run
// attention after eviction through it); the model runtime's decode attention lives elsewhere.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

template <class T, int D>
struct CacheAttentionTraits {
  static_assert(D % 32 == 0 && D <= 256, "head dim must be a multiple of 32, at most 256");
  static constexpr int kPer = D / 32;  // dims per lane
  static constexpr int kWarps = 4;     // queries per block
};

template <class T, int D>
__global__ void __launch_bounds__(32 * CacheAttentionTraits<T, D>::kWarps)
    cache_attention_kernel(AttentionArgs a) {
  using Tr = CacheAttentionTraits<T, D>;
  constexpr int kPer = Tr::kPer;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= static_cast<int64_t>(a.num_q_heads) * a.m) return;
  const int hq = static_cast<int>(warp / a.m);
  const int64_t t = warp % a.m;
  const int g = hq / (a.num_q_heads / a.num_kv_heads);
  float q[kPer], acc[kPer];
  const int64_t q_off = hq * a.q_head_stride + t * a.q_row_stride + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    q[i] = a.q_elem_bytes == 4 ? static_cast<const float*>(a.q)[q_off + i]
                               : ElemTraits<T>::to_float(static_cast<const T*>(a.q)[q_off + i]);
    acc[i] = 0.f;
  }
  const int32_t qp = a.q_pos[t];
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  float m_run = -INFINITY, l = 0.f;
  const int64_t len = a.lens[g];
  for (int64_t s = 0; s < len; ++s) {
    const int64_t row =
        a.page_table != nullptr
            ? static_cast<int64_t>(
                  a.page_table[static_cast<int64_t>(g) * a.max_pages + s / a.page_size]) *
                      a.page_size +
                  s % a.page_size
            : a.seg_start[g] + s;
    const int32_t kp = a.pos[row];
    if (kp > qp || (a.sliding_window > 0 && qp - kp >= a.sliding_window)) continue;  // warp-uniform
    const T* kr = k + row * D + lane * kPer;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) dot += q[i] * ElemTraits<T>::to_float(kr[i]);
    float z = warp_sum(dot) * a.scale;
    if (a.softcap > 0.f) z = a.softcap * tanhf(z / a.softcap);
    const float m_new = nan_max(m_run, z);   // a NaN logit keeps the row NaN (issue 13)
    const float corr = expf(m_run - m_new);  // 0 on the first visible key (m_run = -inf)
    const float p = expf(z - m_new);
    l = l * corr + p;
    const T* vr = v + row * D + lane * kPer;
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = acc[i] * corr + p * ElemTraits<T>::to_float(vr[i]);
    m_run = m_new;
  }
  float* out = a.out + (static_cast<int64_t>(hq) * a.m + t) * D + lane * kPer;
  const float inv = l == 0.f ? 0.f : 1.f / l;
#pragma unroll
  for (int i = 0; i < kPer; ++i) out[i] = acc[i] * inv;
  if (a.lse != nullptr && lane == 0)
    a.lse[static_cast<int64_t>(hq) * a.m + t] = l == 0.f ? -INFINITY : m_run + logf(l);
}

template <class T>
cudaError_t launch_typed(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(a.num_q_heads) * a.m;
  const unsigned blocks = static_cast<unsigned>((warps + 3) / 4);
  switch (a.head_dim) {
    case 64: cache_attention_kernel<T, 64><<<blocks, 128, 0, stream>>>(a); break;
    case 128: cache_attention_kernel<T, 128><<<blocks, 128, 0, stream>>>(a); break;
    case 256: cache_attention_kernel<T, 256><<<blocks, 128, 0, stream>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0 || a.m < 0 ||
      (a.page_table != nullptr && a.page_size <= 0) || (a.page_table == nullptr && !a.seg_start))
    return cudaErrorInvalidValue;
  if (a.m == 0 || a.num_q_heads == 0) return cudaSuccess;
  return a.elem == Elem::kBF16 ? launch_typed<__nv_bfloat16>(a, stream)
                               : launch_typed<__half>(a, stream);
}

}  // namespace kvevict::cuda::detail
