// Host launchers of the model-runtime kernels (STYLE.md layer 2): raw device pointers, sizes, a
// stream; they return cudaError_t and never allocate. gpu_session.cpp (layer 3) checks shapes and
// owns every buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kvevict/decode_score.h"

namespace kvevict::gpu::detail {

using bf16 = __nv_bfloat16;

// --- dense_ops.cu ------------------------------------------------------------------------------
// x[T, D] f32 = embd[tokens[t], :] * mul (embd [V, D] bf16).
cudaError_t launch_embed(const bf16* embd, const int32_t* tokens, int T, int D, float mul, float* x,
                         cudaStream_t stream);
// out[T, D] bf16 = x / rms(x) * w (x f32 [T, D], row stride x_stride; w f32 [D]).
cudaError_t launch_rms_norm(const float* x, int64_t x_stride, int T, int D, const float* w,
                            float eps, bf16* out, cudaStream_t stream);
// x[T, D] += o / rms(o) * w (o f32 [T, D], w f32 [D]): gemma3's post-attention / post-FFN norm
// fused with the residual add.
cudaError_t launch_rms_norm_add(const float* o, int T, int D, const float* w, float eps, float* x,
                                cudaStream_t stream);

// RoPE of the fused projection and the cache append (one block per token).
struct RopeAppendArgs {
  const bf16* qkv = nullptr;         // [T, (Hq + 2 Hkv) d] q | k | v of each token, before RoPE
  const float* bias = nullptr;       // [(Hq + 2 Hkv) d] qwen2's q/k/v biases, or null
  const int32_t* pos = nullptr;      // [T] positions
  const double* inv_freq = nullptr;  // [d / 2] angle per position of each rotated pair
  int T = 0, Hq = 0, Hkv = 0, d = 0;
  bool neox = false;  // rotate (i, i + d/2) instead of (2i, 2i + 1)
  // gemma3: every q / k head is RMS-normed (weights [d]) before RoPE; null = off.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 1e-6f;
  // Queries out: head_major ? [Hq, T, d] (prefill, the window kernel's layout) : [T, Hq, d].
  bf16* q_out = nullptr;
  bool head_major = true;
  // Cache: rows of segment s are k/v[seg_off[s] ..], pos_out the same rows.
  bf16* k_cache = nullptr;       // [rows, d] keys after RoPE
  bf16* v_cache = nullptr;       // [rows, d]
  int32_t* pos_cache = nullptr;  // [rows]
  float* acc_cache = nullptr;    // [rows] decode-eviction accumulators (zeroed on append), or null
  const int64_t* seg_off = nullptr;  // [segments + 1]
  int32_t* seg_len = nullptr;        // [segments]; decode mode reads and increments it
  // prefill (decode = false): token t of sequence `seq` goes to row seg_off[seq Hkv + g] + first
  // + t. decode: token t is sequence t; row seg_off[t Hkv + g] + seg_len[...], then len += 1.
  bool decode = false;
  int seq = 0;
  int64_t first = 0;
  // decode of a sliding-window layer kept as a ring of `ring` rows (0 = off): position p goes to
  // row seg_off[...] + p % ring, and len = min(len + 1, ring).
  int64_t ring = 0;
};
cudaError_t launch_rope_append(const RopeAppendArgs& a, cudaStream_t stream);

// gu [T, 2F] bf16 (gate | up) -> h [T, F] bf16 = act(gate) * up; act = silu, or GELU with the
// tanh approximation when gelu_tanh (gemma3).
cudaError_t launch_gated_act(const bf16* gu, int T, int F, bool gelu_tanh, bf16* h,
                             cudaStream_t stream);
// logits[n] = cap * tanh(logits / cap) (gemma's final soft-capping).
cudaError_t launch_softcap(float* logits, int64_t n, float cap, cudaStream_t stream);
// ids[r] = argmax of logits[r, :V] (ties toward the lower id); rows r < R.
cudaError_t launch_argmax(const float* logits, int R, int64_t V, int32_t* ids, cudaStream_t stream);
// nll[r] = logsumexp(logits[r, :V]) - logits[r, targets[r]] (NaN when the row holds a NaN);
// rows r < R, targets device [R] in [0, V).
cudaError_t launch_row_nll(const float* logits, int R, int64_t V, const int32_t* targets,
                           float* nll, cudaStream_t stream);
// The values of Model::random's random_tensor(seed, stddev) for elements [0, n), as bf16, into
// out[0, n) (or as f32 into out_f32 when non-null).
cudaError_t launch_random_uniform(uint64_t seed, float stddev, int64_t n, bf16* out, float* out_f32,
                                  cudaStream_t stream);
cudaError_t launch_fill(float* out, int64_t n, float value, cudaStream_t stream);

// --- decode_gemv.cu ----------------------------------------------------------------------------
// y[B, N] = x[B, K] W^T at small batch (the decode step's projections), W [N, K] bf16 row-major,
// f32 accumulation, launched as a programmatic dependent of the stream's previous kernel.
constexpr int kGemvMaxBatch = 8;
// Columns of the GEMV's input tile in shared memory; at batch 1 a row of at most this many columns
// is read once and the weights wait in registers (GemvArgs::preload).
constexpr int kGemvTileK = 2048;
enum class GemvOut {
  kBf16,    // y bf16 [B, N]
  kF32,     // y f32 [B, N]
  kF32Add,  // y f32 [B, N] += (the residual add)
  kGated,   // y bf16 [B, N] = act(x W_j^T) * (x W_{N + j}^T): W is [2N, K], gate rows then up rows
  // The decode step's q|k|v projection (N = (Hq + 2 Hkv) d) with the rope_append kernel's decode
  // mode fused behind it (GemvArgs::rope; y unused): RoPE of q and k, q to rope.q_out [B, Hq, d],
  // k / v / pos / acc appended to each row's segments, then the segment lengths advance (the last
  // block to finish does it, counted by GemvArgs::arrivals). gemma3's per-head q / k norms
  // (rope.q_norm / k_norm) only at batch 1 with preload: GemvArgs::head_arrivals.
  kRopeAppend,
};
struct GemvArgs {
  const void* x = nullptr;        // [B, K] bf16; f32 when norm_w is set
  const float* norm_w = nullptr;  // [K]: x is RMS-normed with these weights first (eps below)
  float eps = 0.0f;
  const bf16* w = nullptr;  // [N, K] ([2N, K] for kGated)
  int B = 0, N = 0, K = 0;
  GemvOut out = GemvOut::kBf16;
  bool gelu_tanh = false;  // kGated: GELU-tanh (gemma3) instead of SiLU
  void* y = nullptr;       // [B, N] as out says (kRopeAppend: with head_arrivals, [N] bf16 q|k|v)
  RopeAppendArgs rope;     // kRopeAppend (decode = true, head_major = false; qkv unused)
  // kRopeAppend, and any launch with post_in: one counter, zero before and after each launch.
  uint32_t* arrivals = nullptr;
  bool cuda_cores = false;  // tests and gpu_gemv_bench: the batch-1 (CUDA-core) kernel at any batch
  // Batch 1, K <= 2048: each warp's weight rows go into registers before the kernel waits for the
  // previous one, and the input row is read once after it (same results, bit for bit); false:
  // the weights are only prefetched into L2 (tests and A/B runs).
  bool preload = true;
  // gemma3's batch-1 folds (the fields above keep their places, so the kernels that do not fold
  // compile as before). Both need preload, B = 1 and norm_w.
  // The post-norm + residual add of the previous projection in front of this launch's norm
  // (kBf16, kGated, kRopeAppend): the row normed is x + rms_norm(post_in) post_w (eps as the
  // input norm's), formed as rms_norm_add_kernel forms it, and the launch's last block writes it
  // to x_out. Null post_in: no fold.
  const float* post_in = nullptr;  // [K] f32 the previous projection's output
  const float* post_w = nullptr;   // [K] its post-norm weights
  float* x_out = nullptr;          // [K] the residual row after the add (x itself is allowed)
  // kRopeAppend with rope.q_norm / k_norm: every q / k head RMS-normed before RoPE, as
  // rope_append_kernel does it; [Hq + Hkv] counters, zero before and after each launch (each
  // head's last warp norms, rotates and stores the head from y).
  uint32_t* head_arrivals = nullptr;
};
// Whether launch_gemv covers the shape: 1 <= B <= kGemvMaxBatch, K a multiple of 8, x / w /
// norm_w 16-byte aligned (kRopeAppend: the decode mode, even d, N = (Hq + 2 Hkv) d, an arrival
// counter). The folds: batch 1 with preload and norm_w; post_in: kBf16, kGated or kRopeAppend,
// post_w, x_out, an arrival counter, post_in / post_w / x_out 16-byte aligned; q / k norms: both,
// head_arrivals, y, d <= 256 with d / 2 a multiple of 4 (a head's pairs fill whole blocks), the
// norm weights 16-byte aligned.
bool gemv_supported(const GemvArgs& a);
cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream);

// --- sampling.cu ---------------------------------------------------------------------------------
// Sampler's temperature / top-k / top-p rule on R rows of logits [R, V] f32, one uniform draw
// uniforms[r] in [0, 1) per row (device). temperature must be > 0 (0 is argmax: launch_argmax).
struct SampleArgs {
  const float* logits = nullptr;     // [R, V]
  const double* uniforms = nullptr;  // [R]
  int R = 0;
  int64_t V = 0;
  float temperature = 1.0f;
  int top_k = 0;       // 0 = off
  float top_p = 1.0f;  // 1 = off
};
size_t sample_scratch_bytes(int R, int64_t V);
// ids[R] = the sampled token of every row.
cudaError_t launch_sample(const SampleArgs& a, int32_t* ids, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream);

// --- decode_attention.cu -----------------------------------------------------------------------
// One query token per sequence against its varlen cache: segment s = b * Hkv + g holds rows
// seg_off[s] .. seg_off[s] + seg_len[s] of k/v; query heads g G .. g G + G - 1 of token b use it.
struct DecodeAttentionArgs {
  const bf16* q = nullptr;           // [B, Hq, d] after RoPE
  const bf16* k = nullptr;           // [rows, d]
  const bf16* v = nullptr;           // [rows, d]
  const int64_t* seg_off = nullptr;  // [B Hkv + 1]
  const int32_t* seg_len = nullptr;  // [B Hkv]
  int B = 0, Hq = 0, Hkv = 0, d = 0;
  int64_t max_len = 0;  // longest segment (sizes the splits)
  float scale = 1.0f;
  // [rows, G] f32, or null: when set, every cached row's logit z = q.k * scale for each of the G
  // query heads of its KV head (row-major by cache row), for the decode-time step scores.
  float* z_out = nullptr;
  // [B Hkv] arrival counters (zero before the first launch; every complete launch leaves them
  // zero), or null. When set, the tensor-core kernel's last split block of each segment merges
  // the segment's splits in the same launch instead of a separate merge kernel (one launch a
  // layer fewer; same arithmetic, so the same bits). The fused step scores use their own.
  uint32_t* merge_counters = nullptr;
  // The tensor-core kernel launched as a programmatic dependent of the stream's previous kernel
  // (the fused decode step: its prologue overlaps the append, and the o projection after it may
  // start fetching its weights while it runs). Same results.
  bool pdl = false;
};
// The decode-time step scores fused into the decode attention (one launch: attention, split merge,
// the w = 1 score of every row as launch_decode_scores computes it). The last split block of each
// segment to finish merges and scores the segment; per-segment arrival counters find it.
struct DecodeStepScoreArgs {
  float* acc = nullptr;  // [rows] running accumulators
  // [B Hkv] arrival counters: zero before the first launch; every complete launch leaves them
  // zero again (the last block of a segment resets its counter).
  uint32_t* counters = nullptr;
  DecodeScore kind = DecodeScore::kAttentionSum;  // the step score; tova: with replace
  bool replace = false;
  float one_minus_p_floor = 1e-12f;
};
// Whether the fused kernel covers head dim d and GQA group `group` (the tensor-core kernel: d 64,
// 128, 256 and group <= 16).
bool decode_step_scores_fusable(int d, int group);
size_t decode_attention_scratch_bytes(int B, int Hq, int Hkv, int d, int64_t max_len, int sm_count);
// out [B, Hq d] bf16 (the o-projection's input); lse [B, Hq] f32 and out_f32 [B, Hq, d] (the
// unrounded outputs a, for decode-time scores) may be null. scores non-null: the step scores in
// the same launch (needs a.z_out and decode_step_scores_fusable; KVEVICT_DECODE_SIMT is ignored).
cudaError_t launch_decode_attention(const DecodeAttentionArgs& a, bf16* out, float* lse,
                                    float* out_f32, void* scratch, size_t scratch_bytes,
                                    int sm_count, cudaStream_t stream,
                                    const DecodeStepScoreArgs* scores = nullptr);

// --- grid_sync_cost.cu --------------------------------------------------------------------------
// n grid-wide dependencies with no work between them (gpu_gemv_bench --sync-cost), `blocks`
// blocks of 128 threads: n empty kernels (plain, or programmatic dependents), or one cooperative
// launch of n barriers (cooperative groups' grid.sync, or a counter barrier over state[2], zero
// before and after). blocks must be resident at once for the barriers.
enum class SyncKind { kKernel, kPdlKernel, kGroupsBarrier, kCounterBarrier };
cudaError_t launch_sync_cost(SyncKind kind, int n, int blocks, unsigned* state,
                             cudaStream_t stream);

// --- decode_scores.cu ----------------------------------------------------------------------------
// The w = 1 step score of every cached row (DecodeEvictor::accumulate): per segment s = b Hkv + g
// and row j < seg_len[s], the mean over the G query heads of the term, added to acc (replace:
// written, tova).
struct DecodeScoreArgs {
  const bf16* q = nullptr;           // [B, Hq, d] the step's queries after RoPE
  const float* out = nullptr;        // [B, Hq, d] attention outputs a
  const float* lse = nullptr;        // [B, Hq]
  const bf16* k = nullptr;           // [rows, d]
  const bf16* v = nullptr;           // [rows, d]
  const int64_t* seg_off = nullptr;  // [B Hkv + 1]
  const int32_t* seg_len = nullptr;  // [B Hkv]
  float* acc = nullptr;              // [rows]
  // [rows, G] logits of the step written by the decode attention (DecodeAttentionArgs::z_out), or
  // null: z is then recomputed from q and k. With z, the attention-sum terms read no K or V and
  // the others read V only.
  const float* z = nullptr;
  int B = 0, Hq = 0, Hkv = 0, d = 0;
  float scale = 1.0f;
  DecodeScore kind = DecodeScore::kAttentionSum;  // the step score; tova: with replace
  bool replace = false;
  float one_minus_p_floor = 1e-12f;
};
cudaError_t launch_decode_scores(const DecodeScoreArgs& a, int64_t max_len, cudaStream_t stream);

}  // namespace kvevict::gpu::detail
