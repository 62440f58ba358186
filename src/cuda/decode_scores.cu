// Decode-time step scores (SPEC section 5, DecodeEvictor::accumulate on the GPU): every cached row
// of every segment gets the step's w = 1 score, averaged over the G query heads of its KV head,
// added to (tova: written into) the row's running accumulator. The terms are the shared
// kvevict::terms formulas (score_terms.h), in float.
//
// Two kernels:
//   - attention sum (h2o, tova) with the logits z exported by the decode attention (the default):
//     one thread per row reads its G logits and the G lse values; no K, V or a.
//   - every other case: a block per (segment, tile of kRowsPerBlock rows) stages the segment's G
//     outputs a (and, without z, the G queries) in shared memory once, with ||a||^2 per head;
//     a warp per row reads the row's V (and, without z, K) once, lanes split the head dim and
//     shuffles reduce ||v||^2, <a_h, v> (and q_h.k) for every head. A (row, head) pair that may
//     hold p >= 1/2 (dropkv, obcache_k, obcache_vk) takes the leave-one-out term after the block's
//     rows (decode_step_scores.cuh, issue 13): the norm identity's first form would divide its
//     rounding by (1 - p)^2.
// v1 (one warp per row, a and q re-read from global memory for every row and head, ||a||^2
// recomputed per row) spent most of its time on those re-reads: Llama-3.1-8B at batch 536, 1638
// rows per head, decoded 137.7 ms a step with h2o scores from z against 46.5 ms without scores
// (batch 557), ~2.8 ms a layer (gpu_runtime.md, 2026-11-29).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode_step_scores.cuh"
#include "cuda/model_launchers.h"
#include "score/score_terms.h"

namespace kvevict::gpu::detail {
namespace {

// Every term but the attention sum (h2o, tova) reads the output a and the values.
__host__ __device__ constexpr bool needs_av(DecodeScore k) {
  return k != DecodeScore::kAttentionSum && k != DecodeScore::kTOVA;
}

constexpr int kWarps = 8;
constexpr int kRowsPerBlock = 32;  // rows of one segment per block of the general kernel
constexpr int kProbThreads = 256;

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ void store(const DecodeScoreArgs& a, int64_t row, float mean) {
  a.acc[row] = a.replace ? mean : a.acc[row] + mean;
}

// Attention sum from the exported logits: thread per row.
__global__ void __launch_bounds__(kProbThreads) prob_scores_kernel(DecodeScoreArgs a) {
  const int seg = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kProbThreads + threadIdx.x;
  if (j >= a.seg_len[seg]) return;
  const int G = a.Hq / a.Hkv;
  const int b = seg / a.Hkv, g = seg % a.Hkv;
  const int64_t row = a.seg_off[seg] + j;
  const float* lse = a.lse + static_cast<int64_t>(b) * a.Hq + g * G;
  float acc = 0.f;
  for (int hq = 0; hq < G; ++hq)
    acc += terms::attention_term(terms::prob(a.z[row * G + hq], lse[hq]));
  store(a, row, acc / static_cast<float>(G));
}

// The general kernel. Shared memory: a_s [G][d] f32, q_s [G][d] f32 (without z), a2_s [G], and
// for the top rows TopPairs and kWarps * (d + 4) floats.
template <int D>
__global__ void __launch_bounds__(kWarps * 32) row_scores_kernel(DecodeScoreArgs a) {
  extern __shared__ float smem[];
  const int seg = blockIdx.y;
  const int64_t len = a.seg_len[seg];
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  if (j0 >= len) return;  // block-uniform
  const int G = a.Hq / a.Hkv, d = a.d;
  const int b = seg / a.Hkv, g = seg % a.Hkv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool need_qk = a.z == nullptr;    // warp-uniform
  const bool need_av = needs_av(a.kind);  // every term but the attention sum reads a and v
  float* a_s = smem;
  float* q_s = a_s + (need_av ? G * d : 0);
  float* a2_s = q_s + (need_qk ? G * d : 0);
  TopPairs* tops = reinterpret_cast<TopPairs*>(a2_s + G);
  float* red_s = reinterpret_cast<float*>(tops + 1);
  const bool top_rows = a.kind == DecodeScore::kDropKV || a.kind == DecodeScore::kObcacheK ||
                        a.kind == DecodeScore::kObcacheVK;  // block-uniform
  if (top_rows && threadIdx.x == 0) tops->count = 0;
  const int64_t h0 = static_cast<int64_t>(b) * a.Hq + g * G;  // first query head of the segment
  for (int i = threadIdx.x; i < G * d; i += blockDim.x) {
    if (need_av) a_s[i] = a.out[h0 * d + i];
    if (need_qk) q_s[i] = __bfloat162float(a.q[h0 * d + i]);
  }
  __syncthreads();
  if (need_av) {
    for (int hq = warp; hq < G; hq += kWarps) {
      float s = 0.f;
      for (int i = lane; i < d; i += 32) s += a_s[hq * d + i] * a_s[hq * d + i];
      s = warp_sum(s);
      if (lane == 0) a2_s[hq] = s;
    }
    __syncthreads();
  }
  for (int r = warp; r < kRowsPerBlock; r += kWarps) {
    const int64_t j = j0 + r;
    if (j >= len) break;  // warp-uniform
    const int64_t row = a.seg_off[seg] + j;
    const bf16* k = a.k + row * d;
    const bf16* v = a.v + row * d;
    float v2 = 0.f;
    if (need_av) {
      for (int i = lane; i < d; i += 32) {
        const float vi = __bfloat162float(v[i]);
        v2 += vi * vi;
      }
      v2 = warp_sum(v2);
    }
    float acc = 0.f;
    for (int hq = 0; hq < G; ++hq) {
      float dot = 0.f, av = 0.f;
      for (int i = lane; i < d; i += 32) {
        if (need_qk) dot += q_s[hq * d + i] * __bfloat162float(k[i]);
        if (need_av) av += a_s[hq * d + i] * __bfloat162float(v[i]);
      }
      const float z = need_qk ? warp_sum(dot) * a.scale : a.z[row * G + hq];
      av = need_av ? warp_sum(av) : 0.f;
      const float a2 = need_av ? a2_s[hq] : 0.f;
      const float lse = a.lse[h0 + hq];
      if (top_rows && top_candidate(z, lse)) {  // warp-uniform: z and lse are
        int recorded = 0;
        if (lane == 0) recorded = record_top_pair(tops, static_cast<int>(j), hq);
        if (__shfl_sync(0xffffffffu, recorded, 0)) continue;
      }
      const float p = terms::prob(z, lse);
      float s = 0.f;
      switch (a.kind) {
        case DecodeScore::kAttentionSum:  // h2o
        case DecodeScore::kTOVA: s = terms::attention_term(p); break;
        case DecodeScore::kDropKV:
          s = terms::dropkv_term(p, terms::one_minus_prob(z, lse, a.one_minus_p_floor), a2, v2, av);
          break;
        case DecodeScore::kObcacheV: s = terms::obcache_v_term(p, v2); break;
        case DecodeScore::kObcacheK: s = terms::obcache_k_term(p, z, a2, v2, av); break;
        case DecodeScore::kObcacheVK: s = terms::obcache_vk_term(p, z, a2, v2, av); break;
      }
      acc += s;
    }
    if (lane == 0) store(a, row, acc / static_cast<float>(G));
  }
  if (top_rows) {
    __syncthreads();  // the block's rows are stored, every pair recorded
    LooSource src;
    src.z = a.z;
    src.q_s = q_s;
    src.k = a.k;
    src.v = a.v;
    src.base = a.seg_off[seg];
    src.len = len;
    src.G = G;
    src.scale = a.scale;
    add_top_pairs<D>(src, tops, step_score_method(a.kind), a.acc, red_s);
  }
}

}  // namespace

cudaError_t launch_decode_scores(const DecodeScoreArgs& a, int64_t max_len, cudaStream_t stream) {
  if (a.B <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0 || a.d <= 0) return cudaErrorInvalidValue;
  if (max_len <= 0) return cudaSuccess;
  const unsigned segments = static_cast<unsigned>(a.B * a.Hkv);
  const int G = a.Hq / a.Hkv;
  if ((a.kind == DecodeScore::kAttentionSum || a.kind == DecodeScore::kTOVA) && a.z != nullptr) {
    const dim3 grid(static_cast<unsigned>((max_len + kProbThreads - 1) / kProbThreads), segments);
    prob_scores_kernel<<<grid, kProbThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
  const size_t smem = sizeof(float) * (static_cast<size_t>(needs_av(a.kind) ? G * a.d : 0) +
                                       (a.z == nullptr ? G * a.d : 0) + G) +
                      sizeof(TopPairs) + sizeof(float) * kWarps * (a.d + 4);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // G * d <= 5K floats: G 16 at d 256 fits
  const dim3 grid(static_cast<unsigned>((max_len + kRowsPerBlock - 1) / kRowsPerBlock), segments);
  switch (a.d) {
    case 64: row_scores_kernel<64><<<grid, kWarps * 32, smem, stream>>>(a); break;
    case 128: row_scores_kernel<128><<<grid, kWarps * 32, smem, stream>>>(a); break;
    case 256: row_scores_kernel<256><<<grid, kWarps * 32, smem, stream>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kvevict::gpu::detail
