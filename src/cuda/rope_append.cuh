// The rules of RoPE + cache append (RopeAppendArgs, model_launchers.h) that both of its kernels
// follow: rope_append_kernel (dense_ops.cu, one block a token) and the fused q|k|v GEMV's epilogue
// (decode_gemv.cu, GemvOut::kRopeAppend, one lane a rotated pair and batch row). Where the GEMV's
// gemma3 fold (its per-head q / k norms, GemvArgs::head_arrivals) must give rope_append_kernel's
// bits, each rounding is spelled out here once and both use it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/model_launchers.h"
#include "cuda/row_norm.cuh"

namespace kvevict::gpu::detail {

// The head columns of rotated pair i (half = d / 2): NeoX rotates (i, i + half), the interleaved
// form (2 i, 2 i + 1).
__device__ __forceinline__ void rope_pair_cols(bool neox, int half, int i, int* ia, int* ib) {
  *ia = neox ? i : 2 * i;
  *ib = neox ? i + half : 2 * i + 1;
}

// The cache row that a decode step's token at position pos appends to in segment seg: the slot
// after the segment's rows, or pos % ring on a ring layer. (Prefill: row `first` + t of the
// sequence's segment.)
__device__ __forceinline__ int64_t decode_append_row(const RopeAppendArgs& a, int seg,
                                                     int32_t pos) {
  return a.seg_off[seg] + (a.ring > 0 ? pos % a.ring : a.seg_len[seg]);
}

// A segment's length after one decode append: one more row, at most the ring on a ring layer.
__device__ __forceinline__ int32_t appended_length(int32_t len, int64_t ring) {
  return ring > 0 && len + 1 > ring ? static_cast<int32_t>(ring) : len + 1;
}

// The cosine and sine of a rotated pair's angle pos inv_freq, formed in double and rounded to
// float: at position 131071 a float angle would be off by up to ~0.008 rad (the CPU path forms
// them in double too, ops.cpp rope()).
__device__ __forceinline__ float2 rope_cos_sin(int32_t pos, double inv_freq) {
  double s, c;
  sincos(static_cast<double>(pos) * inv_freq, &s, &c);
  return make_float2(static_cast<float>(c), static_cast<float>(s));
}

// Column col of a q / k / v row as RoPE reads it: the projection's bf16 value plus qwen2's bias.
__device__ __forceinline__ float rope_value(__nv_bfloat16 projected, const float* bias, int col) {
  float v = __bfloat162float(projected);
  if (bias != nullptr) v += bias[col];
  return v;
}

// gemma3's per-head q / k norm of one element: x (inv_rms w), the two products rounded in that
// order. inv_rms: inv_rms_of the head's sum of squares (add_square over columns lane, lane + 32,
// ... of a warp, then cuda::detail::warp_sum).
__device__ __forceinline__ float head_normed(float x, float inv_rms, float w) {
  return __fmul_rn(x, __fmul_rn(inv_rms, w));
}

// The rotation of pair (x0, x1) by cs = (cos, sin): (x0 c - x1 s, x0 s + x1 c), each one rounded
// product and one FMA as rope_append_kernel's SASS has them, fma(x0, c, -(x1 s)) and
// fma(x1, c, x0 s) (a fold that formed the second as fma(x0, s, x1 c) was one bf16 ulp off:
// docs/GPU_NOTES.md 2026-12-07 (g)).
__device__ __forceinline__ float2 rope_rotated(float x0, float x1, float2 cs) {
  return make_float2(__fmaf_rn(x0, cs.x, -__fmul_rn(x1, cs.y)),
                     __fmaf_rn(x1, cs.x, __fmul_rn(x0, cs.y)));
}

}  // namespace kvevict::gpu::detail
