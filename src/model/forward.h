// One forward pass of a chunk of tokens through every layer (internal to src/model).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/model/model.h"

namespace kvevict::model_ops {

// Where to store post-RoPE queries: tokens at positions [from_pos, from_pos + m) go to
// (*queries)[layer] at [h, pos - from_pos, :], each tensor [Hq, m, d].
struct QueryCapture {
  int64_t from_pos = 0;
  int64_t m = 0;
  std::vector<HostTensor>* queries = nullptr;
};

// Called after a layer's attention with the layer's cache view (new rows appended), the queries
// [Hq, T, d], the attention output [T, Hq, d] and its lse [Hq, T]. Decode-time eviction runs here.
using AttentionHook = std::function<void(int layer, const KVLayerView& cache, const float* q,
                                         const float* out, const float* lse)>;

// Runs tokens[T] at positions pos0 .. pos0 + T - 1: appends every layer's K/V rows to `caches`
// (each head needs T spare rows of capacity) and, when logits is non-null, writes the logits
// [V] of the last token.
void forward_chunk(const Model& model, const int32_t* tokens, int64_t T, int64_t pos0,
                   std::vector<HostKVCache>& caches, const QueryCapture* capture, float* logits,
                   const AttentionHook* hook = nullptr);

// Appends T rows per head: k, v are [T, Hkv, d] f32 at positions pos[T].
void cache_append_rows(KVLayerView view, const float* k, const float* v, const int32_t* pos,
                       int64_t T);

}  // namespace kvevict::model_ops
