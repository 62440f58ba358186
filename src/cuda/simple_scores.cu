// Scores without a window pass: streamingllm (the position j: most recent = highest), random
// (terms::random_uniform, the same counter-based stream as the CPU, so both backends give
// bitwise the same scores for a seed), and criticalkv's second stage, which multiplies the
// pooled snapkv score by the L1 norm of the value projected by the output matrix (SPEC section 2).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "score/score_terms.h"

namespace kvevict::cuda::detail {
namespace {

__global__ void position_kernel(float* scores, int64_t total, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) scores[i] = static_cast<float>(i % n);
}

__global__ void random_kernel(float* scores, int64_t total, int64_t n, uint64_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total)
    scores[i] = terms::random_uniform<float>(seed, static_cast<uint64_t>(i / n),
                                             static_cast<uint64_t>(i % n));
}

// criticalkv: a block owns kTok tokens of one KV head; per query head of the group and per
// 64-row chunk of W_o^h it forms the [kTok, 64] product V W_o^h^T in shared-memory tiles (CUDA
// cores, float) and adds |.| to per-token sums. O(Hq n d D) work: the ||W_o v||_1 multiplier is
// the cost of the method on any backend (a GEMM per head); this kernel is correct, not tuned.
struct CriticalTraits {
  static constexpr int kTok = 32, kOut = 64, kK = 32, kThreads = 256;
  static_assert(kTok * (kOut / 8) == kThreads, "each thread owns one token and 8 outputs");
  static_assert(kOut * kK % kThreads == 0, "the W tile loads evenly");
};

template <class T, class W>
__device__ __forceinline__ float load_w(const void* wo, int64_t i) {
  if constexpr (sizeof(W) == 4) {
    return static_cast<const float*>(wo)[i];
  } else {
    return ElemTraits<T>::to_float(static_cast<const T*>(wo)[i]);
  }
}

template <class T, class W, int D>
__global__ void __launch_bounds__(CriticalTraits::kThreads)
    criticalkv_kernel(const T* v, int64_t head_stride, int64_t row_stride, int num_q_heads,
                      int num_kv_heads, int64_t n, const void* wo, int64_t wo_row_stride,
                      int64_t wo_rows, const float* aux, float eps, float* scores) {
  using C = CriticalTraits;
  __shared__ float vs[C::kTok][D + 1];
  __shared__ float ws[C::kK][C::kOut + 1];
  const int g = blockIdx.y, tid = threadIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * C::kTok;
  const int group = num_q_heads / num_kv_heads;
  for (int i = tid; i < C::kTok * D; i += C::kThreads) {
    const int tt = i / D, c = i % D;
    const int64_t j = j0 + tt;
    vs[tt][c] = j < n ? ElemTraits<T>::to_float(v[g * head_stride + j * row_stride + c]) : 0.f;
  }
  const int tt = tid / (C::kOut / 8), ob = (tid % (C::kOut / 8)) * 8;
  float l1 = 0.f;
  for (int hh = 0; hh < group; ++hh) {
    const int h = g * group + hh;
    for (int64_t o0 = 0; o0 < wo_rows; o0 += C::kOut) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int k0 = 0; k0 < D; k0 += C::kK) {
        __syncthreads();  // vs ready (first round) / ws free
        for (int i = tid; i < C::kOut * C::kK; i += C::kThreads) {
          const int o = i / C::kK, kk = i % C::kK;
          ws[kk][o] = o0 + o < wo_rows ? load_w<T, W>(wo, (o0 + o) * wo_row_stride +
                                                              static_cast<int64_t>(h) * D + k0 + kk)
                                       : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < C::kK; ++kk) {
          const float x = vs[tt][k0 + kk];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] += x * ws[kk][ob + i];
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) l1 += fabsf(acc[i]);  // rows past wo_rows are exact zeros
    }
  }
  // The 8 threads of a token are consecutive lanes.
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 4);
  const int64_t j = j0 + tt;
  if ((tid % (C::kOut / 8)) == 0 && j < n) {
    const int64_t i = static_cast<int64_t>(g) * n + j;
    scores[i] = (aux[i] + eps) * (l1 / static_cast<float>(group));
  }
}

template <class T, class W>
cudaError_t launch_critical_typed(const void* v, int64_t head_stride, int64_t row_stride,
                                  int num_q_heads, int num_kv_heads, int64_t n, int d,
                                  const void* wo, int64_t wo_row_stride, int64_t wo_rows,
                                  const float* aux, float eps, float* scores, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + CriticalTraits::kTok - 1) / CriticalTraits::kTok),
                  num_kv_heads);
  const T* vt = static_cast<const T*>(v);
  switch (d) {
    case 64:
      criticalkv_kernel<T, W, 64><<<grid, CriticalTraits::kThreads, 0, stream>>>(
          vt, head_stride, row_stride, num_q_heads, num_kv_heads, n, wo, wo_row_stride, wo_rows,
          aux, eps, scores);
      break;
    case 128:
      criticalkv_kernel<T, W, 128><<<grid, CriticalTraits::kThreads, 0, stream>>>(
          vt, head_stride, row_stride, num_q_heads, num_kv_heads, n, wo, wo_row_stride, wo_rows,
          aux, eps, scores);
      break;
    case 256:  // 41 KB of static shared memory
      criticalkv_kernel<T, W, 256><<<grid, CriticalTraits::kThreads, 0, stream>>>(
          vt, head_stride, row_stride, num_q_heads, num_kv_heads, n, wo, wo_row_stride, wo_rows,
          aux, eps, scores);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// first = min(first, i) over the elements that are NaN (kInf false) or infinite (kInf true).
template <bool kInf>
__global__ void find_kernel(const float* x, int64_t count, unsigned long long* first) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (kInf ? isinf(x[i]) : isnan(x[i])) atomicMin(first, static_cast<unsigned long long>(i));
}

template <bool kInf>
cudaError_t launch_find(const float* x, int64_t count, unsigned long long* first,
                        cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, 1024);
  find_kernel<kInf><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, count, first);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_find_nan(const float* x, int64_t count, unsigned long long* first,
                            cudaStream_t stream) {
  return launch_find<false>(x, count, first, stream);
}

cudaError_t launch_find_inf(const float* x, int64_t count, unsigned long long* first,
                            cudaStream_t stream) {
  return launch_find<true>(x, count, first, stream);
}

cudaError_t launch_position_scores(float* scores, int num_kv_heads, int64_t n,
                                   cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_kv_heads) * n;
  if (total == 0) return cudaSuccess;
  position_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(scores, total, n);
  return cudaGetLastError();
}

cudaError_t launch_random_scores(float* scores, int num_kv_heads, int64_t n, uint64_t seed,
                                 cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_kv_heads) * n;
  if (total == 0) return cudaSuccess;
  random_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(scores, total, n,
                                                                                seed);
  return cudaGetLastError();
}

cudaError_t launch_criticalkv_scores(Elem elem, const void* v, int64_t head_stride,
                                     int64_t row_stride, int num_q_heads, int num_kv_heads,
                                     int64_t n, int d, const void* wo, int wo_elem_bytes,
                                     int64_t wo_row_stride, int64_t wo_rows, const float* aux,
                                     float eps, float* scores, cudaStream_t stream) {
  if (num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0 || wo_rows <= 0)
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (elem == Elem::kBF16)
    return wo_elem_bytes == 4 ? launch_critical_typed<__nv_bfloat16, float>(
                                    v, head_stride, row_stride, num_q_heads, num_kv_heads, n, d, wo,
                                    wo_row_stride, wo_rows, aux, eps, scores, stream)
                              : launch_critical_typed<__nv_bfloat16, __nv_bfloat16>(
                                    v, head_stride, row_stride, num_q_heads, num_kv_heads, n, d, wo,
                                    wo_row_stride, wo_rows, aux, eps, scores, stream);
  return wo_elem_bytes == 4
             ? launch_critical_typed<__half, float>(v, head_stride, row_stride, num_q_heads,
                                                    num_kv_heads, n, d, wo, wo_row_stride, wo_rows,
                                                    aux, eps, scores, stream)
             : launch_critical_typed<__half, __half>(v, head_stride, row_stride, num_q_heads,
                                                     num_kv_heads, n, d, wo, wo_row_stride, wo_rows,
                                                     aux, eps, scores, stream);
}

}  // namespace kvevict::cuda::detail
