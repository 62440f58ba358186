// CUDA backend: scores of SPEC section 2 on the GPU (H200, sm_90). Same inputs and outputs as
// kvevict::cpu::score, with every tensor in device memory. No CUDA header is needed to include
// this file: streams travel as an opaque pointer (a cudaStream_t; nullptr = the legacy default
// stream). Nothing here allocates: callers size a device Workspace with *_workspace_bytes().
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/method.h"
#include "kvevict/score.h"
#include "kvevict/tensor.h"
#include "kvevict/workspace.h"

namespace kvevict::cuda {

using Stream = void*;  // cudaStream_t

// True when the CUDA runtime sees at least one device (never throws).
bool device_available();
// Name and multiprocessor count of the current device (for benchmark headers).
struct DeviceInfo {
  char name[256] = {};
  int sm_count = 0;
  int l2_bytes = 0;
};
DeviceInfo device_info();

// --- Window forward (flash-style, split-K) ---------------------------------------------------
// For the last w rows of q ([Hq, m, d], m >= w) against keys/values [Hkv, n, d] (inner dim
// contiguous, bf16 or f16, same dtype as q) with causal visibility (query t at position n-w+t):
//   out [Hq, w, d] f32 attention outputs a, lse [Hq, w] f32 log-sum-exp of the scaled logits.
// `out` may be empty: then V is never read and only lse is computed (what snapkv-style scores
// need). All query heads of one KV head are processed together, so K and V are read once per KV
// head; the key range is split over blocks (split-K) when Hkv alone cannot fill the GPU.
size_t window_forward_workspace_bytes(int num_q_heads, int num_kv_heads, int64_t n, int w,
                                      int head_dim);
void window_forward(const TensorView& q, const TensorView& k, const TensorView& v, int w,
                    float scale, const TensorView& out, const TensorView& lse, Workspace ws,
                    Stream stream = nullptr);

// --- Scores -----------------------------------------------------------------------------------
// Device implementation of kvevict::cpu::score for dropkv, obcache_v/k/vk, snapkv, vatp, h2o,
// tova (window forward + one streaming scoring pass, pooling as a follow-up kernel), knorm and
// keydiff. out.scores: [Hkv, n] f32 on the device. Other methods throw naming the method.
bool score_supported(Method m);
size_t score_workspace_bytes(const ScoreProblem& problem, const ScoreOptions& opt);
void score(const ScoreProblem& problem, const ScoreOptions& opt, const ScoreOutput& out,
           Workspace ws, Stream stream = nullptr);

// The switches between kernel variants (wgmma / mma.sync, key-major pass) are internal:
// src/cuda/kernel_variants.h, for benchmarks and tests.

}  // namespace kvevict::cuda
