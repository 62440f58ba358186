// The step-score epilogue of the decode attention (DecodeEvictor::accumulate fused into the
// attention launch, issue 3): device code included by decode_attention.cu.
//
// The last split block of a segment to finish (an arrival counter per segment, see
// decode_attention.cu) merges the splits of its G query heads into a, lse, then scores every row
// of the segment from the logits z all splits exported and (for the terms that need it) one
// re-read of the row's V. A thread owns a row: it evaluates the term once per head, where the
// unfused kernel's warp-per-row evaluated it on all 32 lanes. ||a - v||^2 and <v, v - a> are
// computed from the d-long difference (score_terms.h's *_dist forms).
//
// The top row (issue 13, also used by decode_scores.cu). A (row, head) pair that may hold
// p >= 1/2 (top_candidate: z - lse > ln(1/2) less a margin for the rounding of lse) must not take
// the first form, (p / (1 - p))^2 ||a - v||^2, which divides the rounding of a - v by (1 - p)^2:
// the scoring thread records it (TopPairs) and skips its term; after the rows, the block computes
// its leave-one-out term (leave_one_out_term): a_{-j} as a softmax over the segment's other rows
// with their own max (no underflow however far the row dominates), rho = sum_{i != j}
// exp(z_i - z_j), p = 1 / (1 + rho), 1 - p = rho p, then terms::top_term, and adds it. Every
// other pair has p < 1/2 + margin, where the first form loses at most a factor ~2. The form is
// exact for any row, so a candidate that is not the top only costs time; a block that finds more
// than kMaxTopPairs candidates (ties at |z| ~ 1e30) scores the rest in the first form.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "kvevict/decode_score.h"
#include "kvevict/method.h"
#include "score/score_terms.h"

namespace kvevict::gpu::detail {

// The library's decode score (kvevict::DecodeScore, decode_evict.h) -> the method whose per-pair
// term it is (h2o's attention sum and tova add / write p).
__host__ __device__ constexpr Method step_score_method(DecodeScore kind) {
  return kind == DecodeScore::kDropKV      ? Method::kDropKV
         : kind == DecodeScore::kObcacheV  ? Method::kObcacheV
         : kind == DecodeScore::kObcacheK  ? Method::kObcacheK
         : kind == DecodeScore::kObcacheVK ? Method::kObcacheVK
                                           : Method::kH2O;
}

// What a kind reads of a row beyond its G logits.
enum class RowNeeds : int {
  kLogits = 0,     // attention sum, tova: z and lse only
  kNorm = 1,       // obcache_v: ||v||^2
  kDist = 2,       // dropkv, obcache_k: ||a_h - v||^2 per head
  kDistVdiff = 3,  // obcache_vk: also <v, v - a_h>
};

__host__ __device__ constexpr RowNeeds row_needs(DecodeScore kind) {
  return kind == DecodeScore::kObcacheV                                   ? RowNeeds::kNorm
         : kind == DecodeScore::kDropKV || kind == DecodeScore::kObcacheK ? RowNeeds::kDist
         : kind == DecodeScore::kObcacheVK                                ? RowNeeds::kDistVdiff
                                                                          : RowNeeds::kLogits;
}

__device__ __forceinline__ float seg_warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

constexpr int kMaxTopPairs = 16;  // candidate (row, head) pairs a block records

// A block's candidate pairs (shared memory; count zeroed before the rows are scored).
struct TopPairs {
  int count;
  int row[kMaxTopPairs];  // segment-relative row
  int head[kMaxTopPairs];
};

// Whether the pair may hold p >= 1/2 (the margin, 1e-5 |lse|, covers the rounding of lse and of
// the exported z against it: a few 2^-24 |z|, ~1e24 at q = 1e30).
__device__ __forceinline__ bool top_candidate(float z, float lse) {
  return z - lse > -0.6931472f - 1e-6f - 1e-5f * fabsf(lse);
}
// Records the pair if there is room; true: recorded (its first-form term is then skipped).
__device__ __forceinline__ bool record_top_pair(TopPairs* tp, int row, int head) {
  const int slot = atomicAdd(&tp->count, 1);
  if (slot >= kMaxTopPairs) return false;
  tp->row[slot] = row;
  tp->head[slot] = head;
  return true;
}

// Where the leave-one-out pass reads a segment's logits: the exported z, or q (f32, unscaled, in
// shared memory) against K, summed as the scoring kernels sum it (same z bits).
struct LooSource {
  const float* z = nullptr;          // [rows, G] or null
  const float* q_s = nullptr;        // [G][D] shared (z null)
  const __nv_bfloat16* k = nullptr;  // [rows, D]
  const __nv_bfloat16* v = nullptr;  // [rows, D]
  int64_t base = 0, len = 0;
  int G = 1;
  float scale = 1.f;
};

// The leave-one-out term of segment row j for head h (score_terms.h top_term of `method`). Run by
// every thread of the block together (blockDim.x a multiple of 32); red_s: shared scratch of
// (blockDim.x / 32) * (D + 4) floats. Returns the term in every thread; ends with a barrier.
// A NaN logit among the other rows makes m2 and l2 NaN (nan_max; the guards test "== -inf" /
// "== 0", which NaN fails), so a_{-j}, rho and the term are NaN, as the row's other terms are.
template <int D>
__device__ float leave_one_out_term(const LooSource& src, int64_t j, int h, Method method,
                                    float* red_s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  auto logit = [&](int64_t i) {  // warp-uniform i
    if (src.z != nullptr) return __ldcg(src.z + (src.base + i) * src.G + h);
    const __nv_bfloat16* kr = src.k + (src.base + i) * D;
    float dot = 0.f;
    for (int c = lane; c < D; c += 32) dot += src.q_s[h * D + c] * __bfloat162float(kr[c]);
    return seg_warp_sum(dot) * src.scale;
  };
  // 1. The other rows' max m2 and sum l2 of exp(z - m2): per warp, then over the warps.
  float m = -INFINITY, l = 0.f;
  for (int64_t i = warp; i < src.len; i += nw) {
    if (i == j) continue;
    const float z = logit(i);
    const float mn = cuda::detail::nan_max(m, z);
    l = l * (m == -INFINITY ? 0.f : expf(m - mn)) + expf(z - mn);
    m = mn;
  }
  const float zj = logit(j);
  if (lane == 0) {
    red_s[2 * warp] = m;
    red_s[2 * warp + 1] = l;
  }
  __syncthreads();
  float m2 = -INFINITY;
  for (int w = 0; w < nw; ++w) m2 = cuda::detail::nan_max(m2, red_s[2 * w]);
  float l2 = 0.f;
  if (m2 != -INFINITY)
    for (int w = 0; w < nw; ++w)
      if (red_s[2 * w] != -INFINITY) l2 += red_s[2 * w + 1] * expf(red_s[2 * w] - m2);
  __syncthreads();
  // 2. a_{-j} = sum_{i != j} exp(z_i - m2) v_i / l2: lanes over the head dim, warps over rows.
  constexpr int kPer = (D + 31) / 32;
  float acc[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) acc[c] = 0.f;
  if (m2 != -INFINITY) {
    for (int64_t i = warp; i < src.len; i += nw) {
      if (i == j) continue;
      const float wgt = expf(logit(i) - m2);
      const __nv_bfloat16* vr = src.v + (src.base + i) * D;
#pragma unroll
      for (int c = 0; c < kPer; ++c)
        if (lane + 32 * c < D) acc[c] = fmaf(wgt, __bfloat162float(vr[lane + 32 * c]), acc[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < kPer; ++c)
    if (lane + 32 * c < D) red_s[warp * D + lane + 32 * c] = acc[c];
  __syncthreads();
  // 3. ||v_j - a_{-j}||^2, <v_j, v_j - a_{-j}>, ||v_j||^2 (warp 0), then the term.
  float* sums = red_s + nw * D;  // [3]
  if (warp == 0) {
    float d2 = 0.f, vd = 0.f, v2 = 0.f;
    const __nv_bfloat16* vj = src.v + (src.base + j) * D;
    for (int c = lane; c < D; c += 32) {
      float a = 0.f;
      for (int w = 0; w < nw; ++w) a += red_s[w * D + c];
      a = l2 == 0.f ? 0.f : a / l2;  // no other row: the output without j is 0
      const float vt = __bfloat162float(vj[c]), diff = vt - a;
      d2 = fmaf(diff, diff, d2);
      vd = fmaf(vt, diff, vd);
      v2 = fmaf(vt, vt, v2);
    }
    d2 = seg_warp_sum(d2);
    vd = seg_warp_sum(vd);
    v2 = seg_warp_sum(v2);
    if (lane == 0) {
      sums[0] = d2;
      sums[1] = vd;
      sums[2] = v2;
    }
  }
  __syncthreads();
  terms::TopKey<float> tk;
  const float rho = l2 == 0.f ? 0.f : l2 * expf(m2 - zj);
  terms::top_probs(rho, tk.p, tk.omp);
  tk.z = zj;
  tk.d2 = sums[0];
  tk.vdiff = sums[1];
  tk.v2 = sums[2];
  __syncthreads();  // red_s may be reused
  return terms::top_term(method, tk);
}

// After the block scored its rows (and a barrier): adds the leave-one-out term of every recorded
// pair to its row's accumulator, as a 1 / G share of the head mean.
template <int D>
__device__ void add_top_pairs(const LooSource& src, const TopPairs* tp, Method method, float* acc,
                              float* red_s) {
  const int count = min(tp->count, kMaxTopPairs);
  for (int c = 0; c < count; ++c) {
    const int64_t j = tp->row[c];
    const float t = leave_one_out_term<D>(src, j, tp->head[c], method, red_s);
    if (threadIdx.x == 0) acc[src.base + j] += t / static_cast<float>(src.G);
  }
}

// One segment's rows as the scoring threads see them.
struct SegmentRows {
  const float* a_s = nullptr;        // [G][D] shared: the merged attention outputs of the segment
  const float* lse_s = nullptr;      // [G] shared
  const float* z = nullptr;          // [rows, G] the step logits (global, written by every split)
  const __nv_bfloat16* v = nullptr;  // [rows, D]
  float* acc = nullptr;              // [rows] running accumulators
  int64_t base = 0, len = 0;         // rows base .. base + len - 1
  int G = 1;
  DecodeScore kind = DecodeScore::kAttentionSum;
  bool replace = false;
  float floor = 1e-12f;
  TopPairs* tops = nullptr;  // shared: the block's top-row candidates
  float* red_s = nullptr;    // shared scratch of leave_one_out_term
};

// Rows tid, tid + nthreads, ... of the segment: acc[row] (+)= mean over the G heads of the term.
// MG bounds G at compile time so the per-head accumulators stay in registers.
template <int D, int MG, RowNeeds kNeed>
__device__ void score_segment_rows(const SegmentRows& s, int tid, int nthreads) {
  const Method method = step_score_method(s.kind);
  const int G = s.G;
  for (int64_t j = tid; j < s.len; j += nthreads) {
    const int64_t row = s.base + j;
    float z[MG], dist[MG], vdiff[MG];
    float v2 = 0.f;
#pragma unroll
    for (int h = 0; h < MG; ++h) {
      z[h] = h < G ? __ldcg(s.z + row * G + h) : 0.f;
      dist[h] = vdiff[h] = 0.f;
    }
    if constexpr (kNeed != RowNeeds::kLogits) {
      const uint4* vr = reinterpret_cast<const uint4*>(s.v + row * D);
#pragma unroll 4
      for (int c = 0; c < D / 8; ++c) {
        const uint4 raw = __ldg(vr + c);
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
        float vf[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[e]));
          vf[2 * e] = f.x;
          vf[2 * e + 1] = f.y;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) v2 = fmaf(vf[e], vf[e], v2);
        if constexpr (kNeed == RowNeeds::kDist || kNeed == RowNeeds::kDistVdiff) {
#pragma unroll
          for (int h = 0; h < MG; ++h) {
            if (h < G) {
              // Every thread reads the same a words: shared-memory broadcasts.
              const float4 a0 = *reinterpret_cast<const float4*>(s.a_s + h * D + c * 8);
              const float4 a1 = *reinterpret_cast<const float4*>(s.a_s + h * D + c * 8 + 4);
              const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                const float diff = vf[e] - av[e];  // v - a
                dist[h] = fmaf(diff, diff, dist[h]);
                if constexpr (kNeed == RowNeeds::kDistVdiff) vdiff[h] = fmaf(vf[e], diff, vdiff[h]);
              }
            }
          }
        }
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int h = 0; h < MG; ++h) {
      if (h >= G) continue;
      // A pair that may hold p >= 1/2 takes the leave-one-out term after the rows.
      if constexpr (kNeed == RowNeeds::kDist || kNeed == RowNeeds::kDistVdiff)
        if (top_candidate(z[h], s.lse_s[h]) && record_top_pair(s.tops, static_cast<int>(j), h))
          continue;
      sum += terms::pair_term_dist(method, z[h], s.lse_s[h], v2, dist[h], vdiff[h], s.floor);
    }
    const float mean = sum / static_cast<float>(G);
    s.acc[row] = s.replace ? mean : s.acc[row] + mean;
  }
}

// Dispatch on the kind (block-uniform); then the recorded top rows (all threads of the block).
template <int D, int MG>
__device__ void score_segment(const SegmentRows& s, int tid, int nthreads) {
  const bool tops =
      row_needs(s.kind) == RowNeeds::kDist || row_needs(s.kind) == RowNeeds::kDistVdiff;
  if (tops) {
    if (tid == 0) s.tops->count = 0;
    __syncthreads();
  }
  switch (row_needs(s.kind)) {
    case RowNeeds::kLogits: score_segment_rows<D, MG, RowNeeds::kLogits>(s, tid, nthreads); break;
    case RowNeeds::kNorm: score_segment_rows<D, MG, RowNeeds::kNorm>(s, tid, nthreads); break;
    case RowNeeds::kDist: score_segment_rows<D, MG, RowNeeds::kDist>(s, tid, nthreads); break;
    case RowNeeds::kDistVdiff:
      score_segment_rows<D, MG, RowNeeds::kDistVdiff>(s, tid, nthreads);
      break;
  }
  if (tops) {
    __syncthreads();
    LooSource src;
    src.z = s.z;
    src.v = s.v;
    src.base = s.base;
    src.len = s.len;
    src.G = s.G;
    add_top_pairs<D>(src, s.tops, step_score_method(s.kind), s.acc, s.red_s);
  }
}

}  // namespace kvevict::gpu::detail
