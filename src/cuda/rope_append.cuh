// The rules of RoPE + cache append (RopeAppendArgs, model_launchers.h) that both of its kernels
// follow: rope_append_kernel (dense_ops.cu, one block a token) and the fused q|k|v GEMV's epilogue
// (decode_gemv.cu, GemvOut::kRopeAppend, one lane a rotated pair and batch row).
#pragma once

#include <cstdint>

#include "cuda/model_launchers.h"

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

}  // namespace kvevict::gpu::detail
