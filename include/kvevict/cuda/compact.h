// CUDA backend: compaction of a layer's cache after selection (SPEC section 4), out of place.
// Real compaction: the kept rows are copied into a smaller buffer, positions travel with them.
#pragma once

#include <cstdint>

#include "kvevict/cuda/score.h"
#include "kvevict/tensor.h"

namespace kvevict::cuda {

// Uniform layout. k, v: [Hkv, n, d] (bf16, f16 or f32, inner dim contiguous); pos: [Hkv, n] i32
// original positions, or empty for positions 0..n-1; kept: [Hkv, n_keep] i32 (sorted or not).
// out_k, out_v: [Hkv, n_keep, d] contiguous, same dtype; out_pos: [Hkv, n_keep] i32.
void compact_uniform(const TensorView& k, const TensorView& v, const TensorView& pos,
                     const TensorView& kept, const TensorView& out_k, const TensorView& out_v,
                     const TensorView& out_pos, Stream stream = nullptr);

// Flattened varlen layout (AdaKV style): head h's kept indices are kept[offsets[h] ..
// offsets[h+1]) and land in rows offsets[h] .. offsets[h+1] of out_k / out_v ([rows, d]) and
// out_pos ([rows]). offsets: device i64 [Hkv + 1], offsets[0] = 0, non-decreasing, offsets[Hkv] =
// rows = kept.numel(). The caller knows rows (it sized the outputs).
void compact_varlen(const TensorView& k, const TensorView& v, const TensorView& pos,
                    const TensorView& kept, const TensorView& offsets, const TensorView& out_k,
                    const TensorView& out_v, const TensorView& out_pos, Stream stream = nullptr);

}  // namespace kvevict::cuda
