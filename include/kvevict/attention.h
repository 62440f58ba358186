// Attention of queries over one layer's (possibly compacted) KV cache.
//
// A key row is visible to a query iff pos_k <= q_pos, by ORIGINAL positions (cache.pos), so the
// same call serves prefill, decode, and questions appended after eviction. Query head hq reads KV
// head hq / G (G = Hq / Hkv). This is also the CPU attention of the model runtime.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/cache.h"
#include "kvevict/tensor.h"
#include "kvevict/workspace.h"

namespace kvevict {

struct AttentionProblem {
  TensorView q;                    // [Hq, m, d] queries after RoPE (f32 on the fast path)
  const int32_t* q_pos = nullptr;  // [m] original position of every query
  KVLayerView cache;               // rows [offsets[h], offsets[h] + lens[h]) of every KV head
  float scale = 0.0f;              // logit scale; 0 = 1/sqrt(d)
  int sliding_window = 0;          // 0 = off; else key visible iff q_pos - k_pos < window
  float softcap = 0.0f;            // 0 = off; else z = softcap * tanh(z / softcap) (Gemma)

  int num_q_heads() const { return static_cast<int>(q.shape[0]); }
  int64_t num_queries() const { return q.shape[1]; }
  float logit_scale() const;
  // Throws naming the bad field: shapes, Hq not a multiple of Hkv, missing q_pos, bad cache.
  void validate() const;
};

struct AttentionOutput {
  TensorView out;  // [Hq, m, d] f32; a query that sees no key gets zeros
  TensorView lse;  // [Hq, m] f32 log-sum-exp of the (capped) logits, -inf if none; optional
  // The host paths' check of what they write: out (and lse when given) f32 of pb's shapes.
  void validate_host(const AttentionProblem& pb) const;
};

namespace ref {
// Double precision, one query at a time, two passes (max, then sums). out [Hq*m*d], lse [Hq*m].
void attention(const AttentionProblem& pb, std::vector<double>& out,
               std::vector<double>* lse = nullptr);
}  // namespace ref

namespace cpu {
// The float path: tiles of queries x keys with online softmax, threads over (query head, query
// tile); cache f32, f16 or bf16. Fixed work split, so results are identical for any thread count.
size_t attention_workspace_bytes(const AttentionProblem& pb);
void attention(const AttentionProblem& pb, const AttentionOutput& out, Workspace ws);
// Convenience that allocates its own workspace.
void attention(const AttentionProblem& pb, const AttentionOutput& out);
}  // namespace cpu

}  // namespace kvevict
