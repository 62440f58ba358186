// Uniform-budget selection: per KV head, a radix select on the float bits finds the threshold
// score of the k-th best unprotected token, then one ordered pass writes the kept indices.
//
// One block per head. Scores map to unsigned keys whose order is the float order (flip all bits of
// negatives, set the sign bit of positives), so "k-th largest float" is "k-th largest key", found
// digit by digit (8 bits, 4 histogram passes) without sorting. The ordered pass then keeps
// protected tokens, every key above the threshold, and the first `need` keys equal to it (ties
// toward the lower position), using block-wide prefix sums so the output is sorted by position.
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

constexpr int kSelectThreads = 1024;
constexpr int kSelectItems = 4;  // per thread per ordered chunk

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool is_protected(int64_t j, int64_t n, int sink, int window) {
  return j < sink || j >= n - window;
}

__global__ void __launch_bounds__(kSelectThreads)
    select_uniform_kernel(const float* scores, int64_t n, int64_t n_keep, int sink, int window,
                          int64_t n_protected, int32_t* kept) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_need;
  __shared__ int s_running[2];  // equal-to-threshold keys seen, kept indices written

  const int h = blockIdx.x;
  const float* row = scores + static_cast<int64_t>(h) * n;
  int32_t* out = kept + static_cast<int64_t>(h) * n_keep;
  const int tid = threadIdx.x;
  const int64_t k_free = n_keep - n_protected;  // unprotected tokens to keep
  const int64_t n_free = n - n_protected;

  // Threshold search: after the passes, prefix = threshold key and need = how many keys equal to
  // it are kept. k_free == 0 keeps no free key (threshold above every key); k_free == n_free keeps
  // all (threshold 0 keeps everything, since every key is > 0 or == 0 with need large enough).
  if (tid == 0) {
    s_prefix = 0;
    s_need = k_free;
  }
  __syncthreads();
  if (k_free > 0 && k_free < n_free) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kSelectThreads) hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      const uint32_t high_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
      for (int64_t j = tid; j < n; j += kSelectThreads) {
        if (is_protected(j, n, sink, window)) continue;
        const uint32_t key = order_key(row[j]);
        if ((key & high_mask) == (prefix & high_mask)) atomicAdd(&hist[(key >> shift) & 0xff], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int64_t need = s_need, above = 0;
        int digit = 255;
        for (; digit > 0; --digit) {
          if (above + hist[digit] >= need) break;
          above += hist[digit];
        }
        s_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
        s_need = need - above;
      }
      __syncthreads();
    }
  }
  const bool keep_none = k_free <= 0;
  const bool keep_all = k_free >= n_free;
  const uint32_t threshold = s_prefix;
  const int64_t need_equal = s_need;
  if (tid == 0) s_running[0] = s_running[1] = 0;
  __syncthreads();

  // Ordered pass in chunks of kSelectThreads * kSelectItems consecutive positions.
  for (int64_t base = 0; base < n; base += kSelectThreads * kSelectItems) {
    int eq[kSelectItems], keep[kSelectItems];
    bool above[kSelectItems], prot[kSelectItems];
    int eq_count = 0;
#pragma unroll
    for (int i = 0; i < kSelectItems; ++i) {
      const int64_t j = base + static_cast<int64_t>(tid) * kSelectItems + i;
      const bool in = j < n;
      prot[i] = in && is_protected(j, n, sink, window);
      uint32_t key = 0;
      if (in && !prot[i]) key = order_key(row[j]);
      const bool free_tok = in && !prot[i];
      above[i] = free_tok && !keep_none && (keep_all || key > threshold);
      eq[i] = free_tok && !keep_none && !keep_all && key == threshold;
      eq_count += eq[i];
    }
    int eq_before, eq_total;
    Scan(scan_tmp).ExclusiveSum(eq_count, eq_before, eq_total);
    const int64_t eq_seen = s_running[0];
    int keep_count = 0;
#pragma unroll
    for (int i = 0; i < kSelectItems; ++i) {
      const bool eq_kept = eq[i] && (eq_seen + eq_before < need_equal);
      eq_before += eq[i];
      keep[i] = prot[i] || above[i] || eq_kept;
      keep_count += keep[i];
    }
    __syncthreads();  // scan_tmp reuse
    int keep_before, keep_total;
    Scan(scan_tmp).ExclusiveSum(keep_count, keep_before, keep_total);
    const int64_t written = s_running[1];
    int64_t slot = written + keep_before;
#pragma unroll
    for (int i = 0; i < kSelectItems; ++i) {
      if (keep[i] && slot < n_keep) out[slot] = static_cast<int32_t>(base + tid * kSelectItems + i);
      slot += keep[i];
    }
    __syncthreads();
    if (tid == 0) {
      s_running[0] += eq_total;
      s_running[1] += keep_total;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_select_uniform(const float* scores, int num_heads, int64_t n, int64_t n_keep,
                                  int sink, int window, int32_t* kept, cudaStream_t stream) {
  if (num_heads <= 0 || n_keep > n || n_keep < 0 || sink < 0 || window < 0)
    return cudaErrorInvalidValue;
  const int64_t s = sink < n ? sink : n;
  const int64_t wdw = window < n ? window : n;
  const int64_t n_protected = s + wdw > n ? n : s + wdw;
  if (n_keep < n_protected) return cudaErrorInvalidValue;
  if (n == 0 || n_keep == 0) return cudaSuccess;
  select_uniform_kernel<<<num_heads, kSelectThreads, 0, stream>>>(scores, n, n_keep, sink,
                                                                    window, n_protected, kept);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
