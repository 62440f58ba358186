// One forward pass of a chunk of tokens through every layer (internal to src/model).
#pragma once

#include <cstdint>
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

// Runs tokens[T] at positions pos0 .. pos0 + T - 1: appends every layer's K/V rows to `caches`
// (each head needs T spare rows of capacity) and, when logits is non-null, writes the logits
// [V] of the last token.
void forward_chunk(const Model& model, const int32_t* tokens, int64_t T, int64_t pos0,
                   std::vector<HostKVCache>& caches, const QueryCapture* capture, float* logits);

// Appends T rows per head: k, v are [T, Hkv, d] f32 at positions pos[T].
void cache_append_rows(KVLayerView view, const float* k, const float* v, const int32_t* pos,
                       int64_t T);

}  // namespace kvevict::model_ops
