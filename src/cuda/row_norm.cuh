// The RMSNorm arithmetic of the row kernels (dense_ops.cu: rms_norm_kernel, rms_norm_add_kernel)
// spelled out once, each rounding as the kernels' SASS has it, so that the batch-1 GEMV's
// post-norm fold (decode_gemv_block.cuh, GemvArgs::post_in) forms gemma3's x + rms_norm(o) w with
// the same operations in the same order: the same bits, not one ulp off (the first fold, which
// summed the row in its own order, moved 19,577 gemma3 logits by one ulp: docs/GPU_NOTES.md
// 2026-12-07 (e)).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common.cuh"

namespace kvevict::gpu::detail {

// Threads of a row kernel's block (one block a row).
constexpr int kRowThreads = 256;

// One term of a sum of squares: ss + v v as one FMA (what nvcc contracts `ss += v * v` into).
__device__ __forceinline__ float add_square(float ss, float v) {
  return __fmaf_rn(v, v, ss);
}

// 1 / sqrt(mean + eps) from the sum of squares ss of n elements.
__device__ __forceinline__ float inv_rms_of(float ss, int n, float eps) {
  return rsqrtf(ss / static_cast<float>(n) + eps);
}

// gemma3's post-norm + residual add of one element, x + (o inv_rms) w: the product o inv_rms
// rounded, then one FMA (rms_norm_add_kernel's FMUL, FFMA).
__device__ __forceinline__ float post_norm_add(float x, float o, float inv_rms, float w) {
  return __fmaf_rn(__fmul_rn(o, inv_rms), w, x);
}

// The row kernels' 1 / rms of a row of n floats (dense_ops.cu row_inv_rms: thread t of the
// kRowThreads sums elements t, t + 256, ...; block_sum adds each warp's 32 sums by xor shuffles,
// then warp 0 adds the 8 warp sums, lanes 8 .. 31 holding zeros) formed by ONE warp, for each of
// its lanes: lane l stands for thread 32 v + l of every warp v in turn. row: shared memory (any
// lane reads any element).
__device__ __forceinline__ float warp0_inv_rms_row_order(const float* row, int n, float eps) {
  constexpr int kWarps = kRowThreads / 32;
  const int lane = threadIdx.x & 31;
  float ss[kWarps] = {};  // thread 32 v + lane's sum; the 8 in step, each in its thread's order
  for (int i0 = lane; i0 < n; i0 += kRowThreads) {
#pragma unroll
    for (int v = 0; v < kWarps; ++v)
      if (i0 + 32 * v < n) ss[v] = add_square(ss[v], row[i0 + 32 * v]);
  }
  float s = 0.f;  // block_sum's second stage: lane v < kWarps holds warp v's sum
#pragma unroll
  for (int v = 0; v < kWarps; ++v) {
    const float sum_v = cuda::detail::warp_sum(ss[v]);
    if (lane == v) s = sum_v;
  }
  return inv_rms_of(cuda::detail::warp_sum(s), n, eps);
}

}  // namespace kvevict::gpu::detail
