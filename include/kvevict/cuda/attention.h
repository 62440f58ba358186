// CUDA backend: attention of queries over a compacted cache (segment layout of KVLayerView, or
// the paged layout of cuda/compact.h), with the semantics of kvevict::cpu::attention: a key is
// visible iff pos_k <= q_pos by ORIGINAL positions, sliding window and soft-capping optional;
// query head hq reads KV head hq / G. One warp per (query head, query): for checks and short
// query counts, not a tuned prefill kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/attention.h"
#include "kvevict/cuda/score.h"
#include "kvevict/tensor.h"
#include "kvevict/workspace.h"

namespace kvevict::cuda {

// problem.q: [Hq, m, d] device (f32 or the cache's 16-bit dtype); problem.q_pos: host [m];
// problem.cache: device k, v, pos with host offsets/lens (a KVLayerView with device == kCuda),
// bf16 or f16. output.out: [Hq, m, d] f32 device; output.lse: [Hq, m] f32 device or empty.
// The workspace carries q_pos and the segment table to the device.
size_t attention_workspace_bytes(const AttentionProblem& problem);
void attention(const AttentionProblem& problem, const AttentionOutput& output, Workspace ws,
               Stream stream = nullptr);

// The paged layout: k_pages, v_pages [num_pages, page_size, d] (bf16/f16), pos_pages
// [num_pages, page_size] i32, page_table [Hkv, max_pages] i32 and lens [Hkv] i64, all device.
// q: [Hq, m, d] device; q_pos: [m] i32 device. out [Hq, m, d] f32, lse [Hq, m] f32 or empty.
struct PagedAttentionProblem {
  TensorView q, q_pos, k_pages, v_pages, pos_pages, page_table, lens;
  float scale = 0.f;  // 0 = 1/sqrt(d)
  int sliding_window = 0;
  float softcap = 0.f;
};
void attention_paged(const PagedAttentionProblem& problem, const AttentionOutput& output,
                     Stream stream = nullptr);

}  // namespace kvevict::cuda
