// The decode attention's block-level device code (decode_attention.cu holds the kernels, the split
// plan and the launchers): the launch parameters, the split merge of one query head and the
// tensor-core block body (one (segment, key split) block, the merge of the segment's splits by its
// last block when merge_counters is set), as functions of the block's coordinates, so a kernel of
// another shape could run the same body with the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/decode_step_scores.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/mma_tile.cuh"
#include "cuda/model_launchers.h"
#include "cuda/window_traits.cuh"

namespace kvevict::gpu::detail::decode_attn {

// Every running max below is NaN-propagating (common.cuh): a NaN logit (a NaN in q or a cached k)
// keeps its row NaN through the splits and the merge instead of dropping out of fmaxf, so the
// output, lse and step scores of that head come out NaN, not finite and wrong (issue 13).
using kvevict::cuda::detail::nan_max;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct DecodeAttentionParams {
  DecodeAttentionArgs a;
  int group = 1, splits = 1;
  int64_t keys_per_split = 0;
  float scale_log2 = 0;
  float* part_o = nullptr;    // [S, splits, G, d] unnormalized
  float* part_ml = nullptr;   // [S, splits, G, 2] (max in log2 units, sum)
  bf16* out = nullptr;        // [B, Hq, d] merged outputs
  float* lse = nullptr;       // [B, Hq] or null
  float* out_f32 = nullptr;   // [B, Hq, d] or null
  DecodeStepScoreArgs score;  // the fused step scores (score.acc null: none)
};

// The query head (row of out / lse: b Hq + its head) of head hq of segment seg's group.
__device__ __forceinline__ int64_t query_head(const DecodeAttentionParams& p, int seg, int hq) {
  const int b = seg / p.a.Hkv, g = seg % p.a.Hkv;
  return static_cast<int64_t>(b) * p.a.Hq + g * p.group + hq;
}

// A head's log-sum-exp (natural units) from its merged max m_all (log2 units) and sum l_all, and
// the factor that normalizes its output (a NaN sum stays NaN).
__device__ __forceinline__ float merged_lse(float m_all, float l_all) {
  return m_all == -INFINITY ? -INFINITY : (m_all + log2f(l_all)) * kLn2;
}
__device__ __forceinline__ float merged_inv_l(float l_all) {
  return l_all == 0.f ? 0.f : 1.f / l_all;
}

// Merges the splits of query head hq of segment seg into out / lse / out_f32 (and a_s, lse_s when
// set: the fused scores' shared copies), one warp: lanes over splits for the max and sum, over
// dims for the output (lane, lane + 32, ...: each split's row read whole by the warp). The partials
// may come from other blocks of the same launch: read through L2 (__ldcg). kUnroll splits' rows
// are in flight at once: a split at a time left the 8B's 47-split merge latency-bound (92 us a
// layer at 32K on an H100 under ncu, more than the attention itself). Each dim still sums its
// splits in order, so the result does not depend on kUnroll.
template <int D>
__device__ void merge_head(const DecodeAttentionParams& p, int seg, int hq, int lane, float* a_s,
                           float* lse_s) {
  static_assert(D % 32 == 0, "whole warps of dims");
  constexpr int kCols = D / 32;
  constexpr int kUnroll = D == 256 ? 4 : 8;
  const int64_t h = query_head(p, seg, hq);
  auto prow = [&](int s) { return (static_cast<int64_t>(seg) * p.splits + s) * p.group + hq; };
  float m_all = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) m_all = nan_max(m_all, __ldcg(p.part_ml + prow(s) * 2));
  for (int o = 16; o > 0; o >>= 1) m_all = nan_max(m_all, __shfl_xor_sync(0xffffffffu, m_all, o));
  float l_all = 0.f;
  if (m_all != -INFINITY)
    for (int s = lane; s < p.splits; s += 32)
      l_all += exp2f(__ldcg(p.part_ml + prow(s) * 2) - m_all) * __ldcg(p.part_ml + prow(s) * 2 + 1);
  for (int o = 16; o > 0; o >>= 1) l_all += __shfl_xor_sync(0xffffffffu, l_all, o);
  const float lse_h = merged_lse(m_all, l_all);
  if (lane == 0) {
    if (p.lse != nullptr) p.lse[h] = lse_h;
    if (lse_s != nullptr) lse_s[hq] = lse_h;
  }
  float acc[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) acc[i] = 0.f;
  if (m_all != -INFINITY) {
    for (int s0 = 0; s0 < p.splits; s0 += kUnroll) {
      float ms[kUnroll], row[kUnroll][kCols];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // loads first, all independent
        const int s = s0 + u;
        ms[u] = s < p.splits ? __ldcg(p.part_ml + prow(s) * 2) : -INFINITY;
#pragma unroll
        for (int i = 0; i < kCols; ++i)
          row[u][i] = s < p.splits ? __ldcg(p.part_o + prow(s) * D + lane + 32 * i) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (ms[u] == -INFINITY) continue;  // an empty split (or past the last)
        const float f = exp2f(ms[u] - m_all);
#pragma unroll
        for (int i = 0; i < kCols; ++i) acc[i] += f * row[u][i];
      }
    }
  }
  const float inv_l = merged_inv_l(l_all);
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int c = lane + 32 * i;
    const float o = acc[i] * inv_l;
    p.out[h * D + c] = __float2bfloat16_rn(o);
    if (p.out_f32 != nullptr) p.out_f32[h * D + c] = o;
    if (a_s != nullptr) a_s[hq * D + c] = o;
  }
}

// A segment of one split (p.splits == 1): its block's merged key groups (m, l, unnormalized acc)
// of query head hq, column c, are the head's result; written as merge_head writes it from the one
// partial, with the same arithmetic (so the same bits), without the partials' round trip, the
// arrival counter and the merge's loads.
__device__ __forceinline__ void store_single_split(const DecodeAttentionParams& p, int seg, int hq,
                                                   int c, int D, float m, float l, float acc) {
  const int64_t h = query_head(p, seg, hq);
  const float m_all = nan_max(-INFINITY, m);
  const float l_all = m_all != -INFINITY ? 0.f + exp2f(m - m_all) * l : 0.f;
  if (c == 0 && p.lse != nullptr) p.lse[h] = merged_lse(m_all, l_all);
  const float sum = m_all != -INFINITY && m != -INFINITY ? 0.f + exp2f(m - m_all) * acc : 0.f;
  const float o = sum * merged_inv_l(l_all);
  p.out[h * D + c] = __float2bfloat16_rn(o);
  if (p.out_f32 != nullptr) p.out_f32[h * D + c] = o;
}

// K^T and O += P V with mma.sync m16n8k16 (the register reuse of src/cuda/window_forward.cu,
// without its causal mask and with per-segment key ranges). The SIMT kernel above spends ~68 warp
// instructions per key on dot products from shared memory, which held it near half the copy
// bandwidth; here a key costs ~2 mma per warp.
// stages: the K / V tiles in flight (cp.async stages).
template <class Tr>
constexpr size_t mma_smem_bytes_for(int stages) {
  const size_t q = sizeof(bf16) * Tr::kRows * Tr::kStride;
  const size_t kv = sizeof(bf16) * stages * Tr::kTileKeys * Tr::kStride * 2;
  const size_t merge = sizeof(float) * Tr::kKeyGroups * Tr::kRows * (Tr::kD + 2);
  return q + (kv > merge ? kv : merge);
}
template <class Tr, int kStages = 2>
constexpr size_t mma_smem_bytes() {
  return mma_smem_bytes_for<Tr>(kStages);
}

// kScoreG > 0: the fused step scores (the logits are exported too); kScoreG bounds the group.
// One block of the tensor-core kernel: split `split` of segment `seg` (every thread of the block
// calls it after the dependency wait; it holds block barriers). smem: mma_smem_bytes<Tr>() of
// dynamic shared memory.
// kDirect (one split, merged in this launch: p.splits == 1 and a.merge_counters set, kScoreG == 0):
// the block's result is the segment's, written directly (store_single_split). kStages: K / V tiles
// in flight (mma_smem_bytes<Tr, kStages>()): 2 where blocks share SMs, more for the few long
// blocks of one split a segment, whose tiles would otherwise wait on each other's loads.
template <class Tr, bool kZ, int kScoreG, bool kDirect = false, int kStages = 2>
__device__ __forceinline__ void mma_block(const DecodeAttentionParams& p, int seg, int split,
                                          unsigned char* smem) {
  using namespace kvevict::cuda::detail;
  using T = bf16;
  static_assert(kStages >= 2, "at least double buffering");
  constexpr int D = Tr::kD, S = Tr::kStride, TK = Tr::kTileKeys, GK = Tr::kGroupKeys;
  constexpr int kChunks = Tr::kChunksPerRow;
  // d <= 128 keeps the query fragments in registers (32 at d = 128); d = 256 (gemma3) reads them
  // from shared memory every tile, as the window kernel does: its 128 output accumulators leave
  // no room for 64 more.
  constexpr bool kQInRegs = D <= 128;
  static_assert(Tr::kSlabs == 1, "one 16-row slab: G <= 16 query heads per KV head");
  T* q_s = reinterpret_cast<T*>(smem);  // [16][S]
  T* k_s = q_s + Tr::kRows * S;         // [kStages][TK][S]
  T* v_s = k_s + kStages * TK * S;      // [kStages][TK][S]

  const DecodeAttentionArgs& a = p.a;
  const int G = p.group;
  const int b = seg / a.Hkv, hk = seg % a.Hkv;
  const int tid = threadIdx.x, lane = tid & 31, kg = tid >> 5;
  const int gq = lane >> 2, t4 = lane & 3;
  const MmaLane ln(lane);
  const int64_t len = a.seg_len[seg], base = a.seg_off[seg];
  const int64_t key_begin = split * p.keys_per_split;
  const int64_t key_end = min(len, key_begin + p.keys_per_split);
  const int num_tiles =
      key_end > key_begin ? static_cast<int>((key_end - key_begin + TK - 1) / TK) : 0;

  const T* q = a.q;
  for (int c = tid; c < Tr::kRows * kChunks; c += Tr::kThreads) {
    const int row = c / kChunks, ch = c % kChunks;
    const bool valid = row < G;
    const T* src = valid ? q + (static_cast<int64_t>(b) * a.Hq + hk * G + row) * D + ch * 8 : q;
    cp_async_16(q_s + row * S + ch * 8, src, valid ? 16 : 0);
  }
  // The window kernels' tile schedule (thread -> 16-byte chunk, rows past the split's end zeroed);
  // an empty split copies nothing, so its first row may lie past the segment.
  const int64_t first_row = num_tiles > 0 ? (base + key_begin) * D : 0;
  const KvTileCopy<Tr> copy(a.k + first_row, a.v + first_row, D, tid);
  const int split_keys = num_tiles > 0 ? static_cast<int>(key_end - key_begin) : 0;
  auto load_tile = [&](int tile, int stage) {
    copy.template load<true>(k_s + stage * TK * S, v_s + stage * TK * S, tile, split_keys);
  };
  // Group i of cp.async holds tile i (group 0 the queries too).
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < num_tiles) load_tile(st, st);
    cp_async_commit();
  }

  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    const int ahead = tile + kStages - 1;
    if (ahead < num_tiles) load_tile(ahead, ahead % kStages);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    auto q_frag = [&](int ks, uint32_t(&f)[4]) { a_fragment<T, S>(f, q_s, gq, ks, t4); };
    if (tile == 0) load_query_frags<D, kQInRegs>(qf, q_frag);
    float sc[GK / 8][4];
    qk_tile<T, S, D, kQInRegs>(sc, qf, k_s + (stage * TK + kg * GK) * S, ln, q_frag, [](int) {});
    const int64_t key0 = key_begin + static_cast<int64_t>(tile) * TK + kg * GK;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < GK / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t j = key0 + nt * 8 + 2 * t4 + (c & 1);
        if constexpr (kZ) {  // the step scores' logits, natural units
          const int row = c < 2 ? gq : gq + 8;
          if (j < key_end && row < G) a.z_out[(base + j) * G + row] = sc[nt][c] * a.scale;
        }
        sc[nt][c] = j < key_end ? sc[nt][c] * p.scale_log2 : -INFINITY;
        mx[c >> 1] = nan_max(mx[c >> 1], sc[nt][c]);
      }
    }
    float m_use[2], corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = quad_max(mx[i]);
      const float m_new = nan_max(m_run[i], mx[i]);
      m_use[i] = m_new == -INFINITY ? 0.f : m_new;
      corr[i] = exp2f(m_run[i] - m_use[i]);
      m_run[i] = m_new;
      l_run[i] *= corr[i];
    }
#pragma unroll
    for (int nt = 0; nt < GK / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        sc[nt][c] = exp2f(sc[nt][c] - m_use[c >> 1]);
        l_run[c >> 1] += sc[nt][c];
      }
    }
    scale_rows(o, corr);
    mma_pv<T, S>(o, sc, v_s + (stage * TK + kg * GK) * S, ln);  // O += P V
    __syncthreads();
  }
  cp_async_wait<0>();
  l_run[0] = quad_sum(l_run[0]);
  l_run[1] = quad_sum(l_run[1]);
  // Merge the 4 key groups through shared memory, then one partial per (segment, split).
  __syncthreads();
  float* mo = reinterpret_cast<float*>(k_s);        // [KG][16][D]
  float* mm = mo + Tr::kKeyGroups * Tr::kRows * D;  // [KG][16]
  float* ml = mm + Tr::kKeyGroups * Tr::kRows;      // [KG][16]
  stash_key_group<Tr::kRows, D, true>(mo, mm, ml, kg, gq, t4, m_run, l_run, o);
  __syncthreads();
  const int64_t part = (static_cast<int64_t>(seg) * p.splits + split) * G;
  static_assert(!kDirect || kScoreG == 0, "the fused step scores merge through their counters");
  for (int idx = tid; idx < G * D; idx += Tr::kThreads) {
    const int row = idx / D, col = idx % D;
    // The decode attention's maxima are in log2 units already: a unit scale.
    const KeyGroupsMerged g =
        merge_key_groups<Tr::kKeyGroups, Tr::kRows, D, true>(mo, mm, ml, row, col, 1.f);
    const float m_all = g.m, l_all = g.l, acc = g.acc;
    if constexpr (kDirect) {
      store_single_split(p, seg, row, col, D, m_all, l_all, acc);
      continue;
    }
    p.part_o[(part + row) * D + col] = acc;
    if (col == 0) {
      p.part_ml[(part + row) * 2] = m_all;
      p.part_ml[(part + row) * 2 + 1] = l_all;
    }
  }
  if constexpr (kDirect) {
    return;
  } else if constexpr (kScoreG == 0) {
    // The merge in this launch (a.merge_counters): the segment's last block to arrive merges its G
    // heads, a warp a head, as decode_merge_kernel would.
    if (a.merge_counters == nullptr || !last_block_to_arrive(a.merge_counters + seg, p.splits))
      return;
    for (int hq = kg; hq < G; hq += Tr::kWarps) merge_head<D>(p, seg, hq, lane, nullptr, nullptr);
  } else {
    // The segment's last block to arrive (every other split has published) merges and scores.
    if (!last_block_to_arrive(p.score.counters + seg, p.splits)) return;
    float* a_s = reinterpret_cast<float*>(smem);  // [G][D]: q_s and k_s are dead
    float* lse_s = a_s + kScoreG * D;             // [G]
    TopPairs* tops = reinterpret_cast<TopPairs*>(lse_s + kScoreG);
    float* red_s = reinterpret_cast<float*>(tops + 1);  // [warps][D + 4] (leave_one_out_term)
    for (int hq = kg; hq < G; hq += Tr::kWarps) merge_head<D>(p, seg, hq, lane, a_s, lse_s);
    __syncthreads();
    SegmentRows rows;
    rows.a_s = a_s;
    rows.lse_s = lse_s;
    rows.z = a.z_out;
    rows.v = a.v;
    rows.acc = p.score.acc;
    rows.base = base;
    rows.len = len;
    rows.G = G;
    rows.kind = p.score.kind;
    rows.replace = p.score.replace;
    rows.floor = p.score.one_minus_p_floor;
    rows.tops = tops;
    rows.red_s = red_s;
    score_segment<D, kScoreG>(rows, tid, Tr::kThreads);
  }
}

}  // namespace kvevict::gpu::detail::decode_attn
