// CUDA backend: uniform-budget selection (SPEC section 3) on the GPU. Every KV head keeps the
// protected tokens (the first `sink` and the last `window`) plus the highest-scoring others, ties
// toward the lower position, and the kept indices come out sorted by position. Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/cuda/score.h"
#include "kvevict/method.h"
#include "kvevict/tensor.h"
#include "kvevict/workspace.h"

namespace kvevict::cuda {

// Number of protected tokens of one head: |{j < sink} U {j >= n - window}|.
int64_t protected_count(int64_t n, int sink, int window);

// scores: [Hkv, n] f32 device; kept: [Hkv, n_keep] i32 device, written sorted ascending.
// Requires protected_count(n, sink, window) <= n_keep <= n (the caller turns a budget below the
// protected tokens into n_keep = protected_count, as SPEC section 1 says).
size_t select_uniform_workspace_bytes(int num_kv_heads, int64_t n);
void select_uniform(const TensorView& scores, int64_t n_keep, int sink, int window,
                    const TensorView& kept, Workspace ws, Stream stream = nullptr);

// Every policy of SPEC section 3 on the GPU, with the semantics of kvevict::select():
//   uniform  every head keeps n_keep (protected included);
//   adakv    the layer's free scores flattened, the top Hkv * B (B = n_keep - protected; ties
//            toward the lower position, then the lower head) give counts f_h, B_h = f_h (1 -
//            alpha) + alpha B rounded by largest remainder to a layer total of exactly Hkv * B,
//            then per-head top B_h; the layer keeps Hkv * n_keep rows either way;
//   criticalkv two stages when `aux` is non-empty: per head the top floor(B_h / 2) free tokens by
//            aux, then the rest by scores among the others.
// scores, aux: [Hkv, n] f32 device (aux may be empty). n_keep: tokens per head (per-head mean
// for adakv) with protected_count(n, sink, window) <= n_keep <= n. Outputs, device: kept
// [Hkv * n_keep] i32, head h's indices (ascending, within the head) at kept[offsets[h] ..
// offsets[h+1]); offsets [Hkv + 1] i64. Hkv <= 256. Deterministic; no host synchronization.
// NaN scores are not checked here (they rank above every number, by their bits); the cuda
// Backend's select() rejects them like kvevict::select does.
size_t select_workspace_bytes(int num_kv_heads, int64_t n, int64_t n_keep, bool two_stage);
void select(const TensorView& scores, const TensorView& aux, int64_t n_keep, int sink, int window,
            Policy policy, double alpha, const TensorView& kept, const TensorView& offsets,
            Workspace ws, Stream stream = nullptr);

}  // namespace kvevict::cuda
