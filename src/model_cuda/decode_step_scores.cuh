// The step-score epilogue of the decode attention (DecodeEvictor::accumulate fused into the
// attention launch, issue 3): device code included by decode_attention.cu.
//
// The last split block of a segment to finish (an arrival counter per segment, see
// decode_attention.cu) merges the splits of its G query heads into a, lse, then scores every row
// of the segment from the logits z all splits exported and (for the terms that need it) one
// re-read of the row's V. A thread owns a row: it evaluates the term once per head, where the
// unfused kernel's warp-per-row evaluated it on all 32 lanes. ||a - v||^2 and <v, v - a> are
// computed from the d-long difference (score_terms.h's *_dist forms), so a row that takes all the
// attention (p -> 1, a = v) scores exactly 0 under dropkv instead of amplified rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kvevict/method.h"
#include "kvevict/score_terms.h"

namespace kvevict::gpu::detail {

// DecodeScoreArgs::kind -> the method whose per-pair term it is.
__host__ __device__ constexpr Method step_score_method(int kind) {
  return kind == 1   ? Method::kDropKV
         : kind == 2 ? Method::kObcacheV
         : kind == 3 ? Method::kObcacheK
         : kind == 4 ? Method::kObcacheVK
                     : Method::kH2O;
}

// What a kind reads of a row beyond its G logits.
enum class RowNeeds : int {
  kLogits = 0,     // attention sum, tova: z and lse only
  kNorm = 1,       // obcache_v: ||v||^2
  kDist = 2,       // dropkv, obcache_k: ||a_h - v||^2 per head
  kDistVdiff = 3,  // obcache_vk: also <v, v - a_h>
};

__host__ __device__ constexpr RowNeeds row_needs(int kind) {
  return kind == 2                ? RowNeeds::kNorm
         : kind == 1 || kind == 3 ? RowNeeds::kDist
         : kind == 4              ? RowNeeds::kDistVdiff
                                  : RowNeeds::kLogits;
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
  int kind = 0;
  bool replace = false;
  float floor = 1e-12f;
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
    for (int h = 0; h < MG; ++h)
      if (h < G)
        sum += terms::pair_term_dist(method, z[h], s.lse_s[h], v2, dist[h], vdiff[h], s.floor);
    const float mean = sum / static_cast<float>(G);
    s.acc[row] = s.replace ? mean : s.acc[row] + mean;
  }
}

// Dispatch on the kind (block-uniform).
template <int D, int MG>
__device__ void score_segment(const SegmentRows& s, int tid, int nthreads) {
  switch (row_needs(s.kind)) {
    case RowNeeds::kLogits:
      score_segment_rows<D, MG, RowNeeds::kLogits>(s, tid, nthreads);
      break;
    case RowNeeds::kNorm:
      score_segment_rows<D, MG, RowNeeds::kNorm>(s, tid, nthreads);
      break;
    case RowNeeds::kDist:
      score_segment_rows<D, MG, RowNeeds::kDist>(s, tid, nthreads);
      break;
    case RowNeeds::kDistVdiff:
      score_segment_rows<D, MG, RowNeeds::kDistVdiff>(s, tid, nthreads);
      break;
  }
}

}  // namespace kvevict::gpu::detail
