// Attention of a chunk of new queries over one layer's cache (internal to src/model).
#pragma once

#include <cstdint>

#include "kvevict/cache.h"

namespace kvevict::model_ops {

// out[t, h, :] = softmax_j(scale q[h, t] . k_j) v_j over the rows j of KV head h / G that the
// query may see: pos_j <= q_pos[t] (causal by original position, so it holds after eviction)
// and, when sliding_window > 0, q_pos[t] - pos_j < sliding_window.
// q is [Hq, T, d] f32 after RoPE; cache is f32 or f16; out is [T, Hq, d] f32 (token-major, what
// the output projection reads); lse (optional) is [Hq, T], the log-sum-exp of the scaled
// logits (what decode-time eviction needs). Threads over (head, query tile); O(n) scratch.
void cache_attention(const float* q, const int32_t* q_pos, int64_t T, int num_q_heads,
                     const KVLayerView& cache, float scale, int sliding_window, float* out,
                     float* lse = nullptr);

}  // namespace kvevict::model_ops
