// The scoring pass's per-(query, key) terms, shared by the mma.sync and wgmma passes: the u / w
// split of every term, the dropkv fast and exact forms, the row sums of accumulator fragments and
// the per-key total; and the rows' top keys (issue 13).
//
// Top keys. A row whose top key holds p >= 1/2 (TopRow from the forward's merge) must not give
// that key the first form: (p / (1 - p))^2 ||a - v||^2 with a rounded to 16 bits in the pass
// divides the rounding of a - v (2^-9 |v|) by (1 - p)^2. Each pass block stages its rows' flagged
// top keys that fall in its chunk (top_s, and a bitmask of the tiles that hold one), zeroes p (or
// the weight) of exactly those pairs in the tiles the mask names, and after its last store adds
// terms::top_term of each such row to its key (add_top_terms): ||v - a_{-top}||^2 from the
// forward's exact a_{-top}, no cancellation for any p. Other keys of the row have p <= 1/2, where
// the first form loses at most a factor 2 (1 / (1 - p)^2 <= 4 on the squared ratio).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/launchers.h"
#include "cuda/window_params.cuh"
#include "score/score_terms.h"

namespace kvevict::cuda::detail {

// The keys a pass block scores: its chunk [begin, end) of the layer's keys (every one gets a score:
// zero past the last key a row sees), the end of what its rows see (visible_end), and the window
// positions of its rows that see the fewest (t_min) and the most (t_max) keys.
struct PassChunk {
  int64_t begin = 0, end = 0, visible_end = 0;
  int keys = 0;  // end - begin
  int t_min = 0, t_max = 0;

  __device__ __forceinline__ PassChunk(const PassParams& p, int chunk, int row0, int rows_here) {
    const WindowArgs& a = p.s.win;
    begin = chunk * p.keys_per_chunk;
    end = min(a.n, begin + p.keys_per_chunk);
    block_t_range(row0, rows_here, a.w, &t_min, &t_max);
    visible_end = min(end, a.n - a.w + t_max + 1);
    keys = end > begin ? static_cast<int>(end - begin) : 0;
  }
  __device__ __forceinline__ int tiles(int tile_keys) const {
    return (keys + tile_keys - 1) / tile_keys;
  }
  // The last key (relative to begin) that block row `row` sees: its causal limit, capped at
  // visible_end - 1; -1 for padding rows (row >= rows_here) and rows that see none of the chunk.
  __device__ __forceinline__ int row_limit(const WindowArgs& a, int row0, int row,
                                           int rows_here) const {
    const int64_t lim = min(a.n - a.w + (row0 + row) % a.w, visible_end - 1) - begin;
    return row >= rows_here ? -1 : static_cast<int>(max(lim, int64_t{-1}));
  }
  // The last key (relative to begin) that every row of the block sees (-1: none).
  __device__ __forceinline__ int lim_all(const WindowArgs& a) const {
    return static_cast<int>(max(min(a.n - a.w + t_min, visible_end - 1) - begin, int64_t{-1}));
  }
};

// Every term is split as  score_j = sum_i u_ij + ||v_j||^2 sum_i w_ij  (sums over the window rows
// i), so the pair loop never needs ||v_j||^2: it is applied once per key after the row sums.
//   prob       u = p
//   obcache_v  w = p^2
//   dropkv     w = r^2 with r = p / (1 - p),  u = w (||a||^2 - 2 <a, v>)
//   obcache_k  w = (p z)^2,                   u = w (||a||^2 - 2 <a, v>)
//   obcache_vk w = p^2 (1 + z)^2,             u = p^2 z (z (||a||^2 - 2 <a, v>) - 2 <a, v>)
// (obcache_vk = p^2 ||v||^2 + (p z)^2 ||a - v||^2 + 2 p^2 z (||v||^2 - <a, v>), expanded.)
template <PairTerm kTerm>
struct TermTraits {
  static constexpr bool kNeedsOut = pair_term_needs_out(kTerm);
  static constexpr bool kHasU = kTerm != PairTerm::kObcacheV;
  static constexpr bool kHasW = kTerm != PairTerm::kProb;  // also: needs ||v||^2
  // Terms that are squared distances times weights: a total below 0 is rounding noise.
  static constexpr bool kNonNegative = kTerm == PairTerm::kDropKV || kTerm == PairTerm::kObcacheK;
};

// Row constants of the pass, per thread (its rows lo = g and hi = g + 8 of the slab).
struct RowConsts {
  float lse2[2];  // LSE in log2 units; +inf for padding rows (p = 0)
  float a2[2];    // ||a||^2 of the rounded a
  int lim[2];     // last visible key relative to the chunk start (-1: none)
  int top[2];     // the row's flagged top key relative to the chunk start (-1: none here)
};

// The terms that give a flagged top key its leave-one-out form.
template <PairTerm kTerm>
constexpr bool kHasTopTerm =
    kTerm == PairTerm::kDropKV || kTerm == PairTerm::kObcacheK || kTerm == PairTerm::kObcacheVK;
constexpr int kTopMaskWords = 32;  // tile bitmask: bit (tile % 1024); aliasing only adds work

// The block's rows' top keys, in three steps so that no barrier is added: init_top_mask at the
// kernel's start zeroes the tile bitmask; load_top_rows (with the row staging, after the grid
// dependency wait) sets top_s[row] = key - key_begin for a flagged top key in [key_begin,
// chunk_end), else -1 (padding rows too); set_top_mask, after the barrier that ends the staging,
// sets the bit of each such key's tile. The mask may be read after the next barrier.
// The [Hq, w] output row of block row `row` of KV head hk (row r of a KV head is window query
// r % w of query head hk G + r / w).
__device__ __forceinline__ int64_t window_out_row(const PassParams& p, int hk, int row0, int row) {
  const int r = row0 + row, w = p.s.win.w;
  return static_cast<int64_t>(hk * p.group + r / w) * w + r % w;
}
__device__ __forceinline__ void init_top_mask(uint32_t* mask_s) {
  for (int i = threadIdx.x; i < kTopMaskWords; i += blockDim.x) mask_s[i] = 0u;
}
__device__ __forceinline__ void load_top_rows(const PassParams& p, int hk, int row0, int rows_here,
                                              int rows, int64_t key_begin, int64_t chunk_end,
                                              int* top_s) {
  const ScorePassArgs& sa = p.s;
  for (int row = threadIdx.x; row < rows; row += blockDim.x) {
    int rel = -1;
    if (row < rows_here && sa.top != nullptr) {
      const int64_t idx = sa.top[window_out_row(p, hk, row0, row)].idx;
      if (idx >= key_begin && idx < chunk_end) rel = static_cast<int>(idx - key_begin);
    }
    top_s[row] = rel;
  }
}
__device__ __forceinline__ void set_top_mask(const int* top_s, int rows, int tile_keys,
                                             uint32_t* mask_s) {
  for (int row = threadIdx.x; row < rows; row += blockDim.x) {
    const int rel = top_s[row];
    if (rel >= 0) {
      const int bit = (rel / tile_keys) & (32 * kTopMaskWords - 1);
      atomicOr(&mask_s[bit >> 5], 1u << (bit & 31));
    }
  }
}

// Whether tile `tile` of the chunk may hold a row's flagged top key.
__device__ __forceinline__ bool tile_has_top(const uint32_t* mask_s, int tile) {
  const int bit = tile & (32 * kTopMaskWords - 1);
  return (mask_s[bit >> 5] >> (bit & 31)) & 1u;
}

constexpr Method method_of(PairTerm t) {
  return t == PairTerm::kDropKV      ? Method::kDropKV
         : t == PairTerm::kObcacheV  ? Method::kObcacheV
         : t == PairTerm::kObcacheK  ? Method::kObcacheK
         : t == PairTerm::kObcacheVK ? Method::kObcacheVK
                                     : Method::kSnapKV;
}

// Stages the block's `rows` window rows for the pass, a warp per row with the loads of kBatch rows
// in flight at once (one row at a time left each block waiting a global latency per row: 4% of the
// key-major pass's stall samples, ncu): a rounded to T (kNeedsOut)
// into a_s at a_index(row, col), ||a||^2 of the rounded a, and LSE in log2 units; padding rows
// get lse = +inf, so p = exp2(s c - inf) = 0 makes every term 0.
template <class T, int D, bool kNeedsOut, class Index>
__device__ __forceinline__ void stage_window_rows(const PassParams& p, int hk, int row0,
                                                  int rows_here, int rows, int warps, T* a_s,
                                                  Index a_index, float* lse_s, float* a2_s) {
  const ScorePassArgs& sa = p.s;
  const WindowArgs& a = sa.win;
  const int lane = threadIdx.x & 31;
  constexpr int kCols = (D + 31) / 32;  // a's columns a lane holds
  constexpr int kBatch = 4;             // rows a warp loads before it uses any (loads in flight)
  auto out_row = [&](int row) {
    const int r = row0 + row;
    return static_cast<int64_t>(hk * p.group + r / a.w) * a.w + r % a.w;
  };
  for (int first = threadIdx.x >> 5; first < rows; first += warps * kBatch) {
    float x[kBatch][kCols];
    float lse[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int row = first + b * warps;
      const bool valid = row < rows_here;  // (also false past `rows`)
      const int64_t o = valid ? out_row(row) : 0;
      lse[b] = valid ? sa.lse[o] : 0.f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int col = lane + 32 * c;
        x[b][c] = kNeedsOut && valid && col < D ? sa.out[o * D + col] : 0.f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int row = first + b * warps;
      if (row >= rows) break;
      float a2 = 0.f;
      if constexpr (kNeedsOut) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const int col = lane + 32 * c;
          if (col >= D) break;
          const T hi = ElemTraits<T>::from_float(x[b][c]);
          const float xr = ElemTraits<T>::to_float(hi);
          a_s[a_index(row, col)] = hi;
          a2 += xr * xr;
        }
        a2 = warp_sum(a2);
      }
      if (lane == 0) {
        lse_s[row] = row < rows_here ? lse[b] * kLog2e : INFINITY;
        a2_s[row] = a2;
      }
    }
  }
}

// The row constants of a thread's rows rl_lo and rl_lo + 8 (block-local): LSE (log2 units) and
// ||a||^2 from the block's shared-memory copies, the last key each row sees
// (PassChunk::row_limit) and, with kTop, its flagged top key from top_s (load_top_rows; else -1).
template <bool kTop>
__device__ __forceinline__ RowConsts load_row_consts(const float* lse_s, const float* a2_s,
                                                     const int* top_s, int rl_lo,
                                                     const WindowArgs& a, int row0, int rows_here,
                                                     const PassChunk& ch) {
  RowConsts rc;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rl = rl_lo + 8 * r;
    rc.lse2[r] = lse_s[rl];
    rc.a2[r] = a2_s[rl];
    rc.lim[r] = ch.row_limit(a, row0, rl, rows_here);
    rc.top[r] = kTop ? top_s[rl] : -1;
  }
  return rc;
}
// r = p / (1 - p) of dropkv from p = exp2(x2).
// kFast: p <= 2^-8 for every pair of the warp, so r = p + p^2 + p^3 to float precision (the next
// term is p^4 / r < 2^-24 relative) and no division is needed.
template <bool kFast>
__device__ __forceinline__ float dropkv_ratio(float x2, float p, float floor) {
  if constexpr (kFast) {
    return fmaf(p, fmaf(p, p, p), p);
  } else {
    // 1 - p loses nothing while p < 0.7; closer to 1 it cancels, so use expm1 there
    // (SPEC: p near 1 must stay exact): for x = x2 ln 2 in (-0.35, 0], expm1(x) by its Taylor
    // series to x^7 (the rest is below 2e-8 relative), branch-free and 8 instructions where
    // expm1f inlined a long branchy body into every unrolled pair.
    const float x = x2 * kLn2;
    const float em1 =
        x * fmaf(x,
                 fmaf(x,
                      fmaf(x, fmaf(x, fmaf(x, fmaf(x, 1.f / 5040, 1.f / 720), 1.f / 120), 1.f / 24),
                           1.f / 6),
                      0.5f),
                 1.f);
    const float om = x2 > -0.5f ? -em1 : 1.f - p;
    // When the key holds all of the row's probability to float precision (a single visible
    // key, or one that dominates by > 14 logits), a = v_j up to rounding and the expanded
    // ||a - v||^2 is pure rounding noise that 1 / (1 - p)^2 (up to 1e24) would blow up: the
    // exact value there is (1 - p)^2 ||a' - v_j||^2 with a' the other keys' mean, which a
    // float forward cannot resolve. Take it as 0, the value at p = 1 (docs/GPU_NOTES.md).
    return om < 1e-6f ? 0.f : __fdividef(p, nan_max(om, floor));
  }
}

// u and w of one pair (see TermTraits) from the raw logit s, p = exp2(x2) and <a, v>.
template <PairTerm kTerm, bool kFast>
__device__ __forceinline__ void pair_uw(float s, float x2, float p, float a2, float av, float scale,
                                        float floor, float& u, float& w) {
  if constexpr (kTerm == PairTerm::kProb) {
    u = p;
  } else if constexpr (kTerm == PairTerm::kObcacheV) {
    w = p * p;
  } else {
    const float d = fmaf(-2.f, av, a2);  // ||a - v||^2 - ||v||^2
    if constexpr (kTerm == PairTerm::kDropKV) {
      const float r = dropkv_ratio<kFast>(x2, p, floor);
      w = r * r;
      u = w * d;
    } else {
      const float z = s * scale;
      if constexpr (kTerm == PairTerm::kObcacheK) {
        const float pz = p * z;
        w = pz * pz;
        u = w * d;
      } else {  // kObcacheVK
        const float p2 = p * p, z1 = 1.f + z;
        w = p2 * z1 * z1;
        u = p2 * z * fmaf(z, d, -2.f * av);
      }
    }
  }
}

// The pairs of one accumulator tile in the row-major passes (the mma.sync and wgmma kernels share
// it): element i of the thread's NS (s(i) the raw logit, av(i) <a, v>) is row (i >> 1) & 1 of its
// two rows and key key0 + 8 (i >> 2) + 2 t4 + (i & 1), relative to the chunk. p = exp2(s c2 -
// lse2); keys a row cannot see get p = 0 (tested only in a `masked` tile, one that some row does
// not see in full), and so does a row's flagged top key in a tile the mask names (kTop: it takes
// its leave-one-out term at the end, add_top_terms; p = 0 makes every term of the pair 0, in both
// dropkv forms). Out: per key column c = 2 (i >> 2) + (i & 1), u[c] and w[c] summed over the two
// rows. dropkv takes the division-free form while every p of the warp is <= 2^-8 (almost every
// tile: p is ~1/n for most keys); a vote picks the exact form for the rest.
template <PairTerm kTerm, bool kTop, int NS, class SAt, class AvAt>
__device__ __forceinline__ void row_major_pair_terms(SAt&& s, AvAt&& av, const RowConsts& rc,
                                                     const ScorePassArgs& sa, float c2, int key0,
                                                     bool masked, const uint32_t* mask_s, int tile,
                                                     int t4, float (&u)[NS / 2],
                                                     float (&w)[NS / 2]) {
  float x2[NS], pr[NS];
  float x2max = -INFINITY;
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const int r = (i >> 1) & 1;
    float x = fmaf(s(i), c2, -rc.lse2[r]);
    if (masked && key0 + (i >> 2) * 8 + 2 * t4 + (i & 1) > rc.lim[r]) x = -INFINITY;
    x2[i] = x;
    pr[i] = fast_exp2(x);
    x2max = fmaxf(x2max, x);
  }
  if constexpr (kTop) {
    if (tile_has_top(mask_s, tile)) {
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (key0 + (i >> 2) * 8 + 2 * t4 + (i & 1) == rc.top[(i >> 1) & 1]) pr[i] = 0.f;
    }
  }
  const float floor = sa.one_minus_p_floor, scale = sa.win.scale;
  auto terms = [&](auto fast) {
#pragma unroll
    for (int nt = 0; nt < NS / 4; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int lo = 4 * nt + e, hi = lo + 2;
        float ulo = 0.f, wlo = 0.f, uhi = 0.f, whi = 0.f;
        pair_uw<kTerm, decltype(fast)::value>(s(lo), x2[lo], pr[lo], rc.a2[0], av(lo), scale, floor,
                                              ulo, wlo);
        pair_uw<kTerm, decltype(fast)::value>(s(hi), x2[hi], pr[hi], rc.a2[1], av(hi), scale, floor,
                                              uhi, whi);
        u[2 * nt + e] = ulo + uhi;
        w[2 * nt + e] = wlo + whi;
      }
  };
  if (kTerm != PairTerm::kDropKV || __all_sync(0xffffffffu, x2max <= -8.f))
    terms(std::true_type{});
  else
    terms(std::false_type{});
}

// Sums C values per lane over the 8 lanes of equal t4 (lane bits 2..4, the mma row groups) by
// recursive halving: each step sends half of the values to the partner lane and keeps the other
// half, so C = 8 columns need 7 shuffles instead of 3 per column. Returns the column index
// (0 .. C-1) whose full sum this lane holds in v[0]; with C = 4 lanes l and l ^ 4 hold the same;
// with C = 16 (a 64-key wgmma tile) v[0], v[1] hold the sums of columns col, col + 1.
// One step per lane bit M = 16, 8, 4 with K values still live (templates keep every index a
// compile-time constant, so v stays in registers).
template <int K, int M, int C>
__device__ __forceinline__ void halving_step(float (&v)[C], int lane, int& col) {
  if constexpr (M >= 4) {
    if constexpr (K > 1) {
      const bool upper = (lane & M) != 0;
#pragma unroll
      for (int i = 0; i < K / 2; ++i) {
        const float send = upper ? v[i] : v[i + K / 2];
        const float keep = upper ? v[i + K / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, M);
      }
      if (upper) col += K / 2;
      halving_step<K / 2, M / 2, C>(v, lane, col);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], M);
      halving_step<K, M / 2, C>(v, lane, col);
    }
  }
}
template <int C>
__device__ __forceinline__ int halving_sum(float (&v)[C], int lane) {
  int col = 0;
  halving_step<C, 16, C>(v, lane, col);
  return col;
}

// Launches a scoring-pass kernel on grid (KV head, row block, key chunk) with `smem` bytes of
// dynamic shared memory (opted in first), as a programmatic dependent launch: it may start while
// the forward's merge kernel ends (the kernels wait before reading a and LSE).
template <class Kernel>
cudaError_t launch_pass_kernel(Kernel kernel, size_t smem, int threads, const PassParams& p,
                               int chunks, cudaStream_t stream) {
  const cudaError_t err = set_kernel_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.s.win.num_kv_heads, p.row_blocks, chunks);
  return launch_pdl(kernel, grid, dim3(threads), smem, stream, p);
}

// Calls f(std::integral_constant<PairTerm, t>{}) for the runtime term t (the pass kernels are
// templated on the term).
template <class F>
cudaError_t with_pair_term(PairTerm t, F&& f) {
  using P = PairTerm;
  switch (t) {
    case P::kDropKV: return f(std::integral_constant<P, P::kDropKV>{});
    case P::kObcacheV: return f(std::integral_constant<P, P::kObcacheV>{});
    case P::kObcacheK: return f(std::integral_constant<P, P::kObcacheK>{});
    case P::kObcacheVK: return f(std::integral_constant<P, P::kObcacheVK>{});
    case P::kProb: return f(std::integral_constant<P, P::kProb>{});
  }
  return cudaErrorInvalidValue;
}

// The score of key j from its summed terms `raw`: clamped at 0 for the squared distance terms,
// times the row weight, and (h2o) divided by the window queries that see key j. The clamp keeps
// NaN (a NaN in q, k or v must reach the score: fmaxf(NaN, 0) was 0, issue 13).
template <PairTerm kTerm>
__device__ __forceinline__ float finish_key_score(const ScorePassArgs& sa, int64_t j, float raw) {
  float total = raw;
  if constexpr (TermTraits<kTerm>::kNonNegative) total = nan_max(total, 0.f);
  total *= sa.row_weight;
  if (sa.h2o_normalize) {
    // Window queries t with n - w + t >= j see key j.
    const WindowArgs& a = sa.win;
    const int64_t first = j - (a.n - a.w);
    const int64_t seen = a.w - (first > 0 ? first : 0);
    total = seen > 0 ? total / static_cast<float>(seen) : 0.f;
  }
  return total;
}
// The score of key j from its row sums: sum_i u + ||v_j||^2 sum_i w, finished as above.
template <PairTerm kTerm>
__device__ __forceinline__ float key_total(const ScorePassArgs& sa, int64_t j, float su, float sw,
                                           float v2) {
  return finish_key_score<kTerm>(sa, j, TermTraits<kTerm>::kHasW ? fmaf(v2, sw, su) : su);
}

// Writes key j's score of KV head hk (added when several row blocks share the keys).
__device__ __forceinline__ void store_key_score(const PassParams& p, int hk, int64_t j,
                                                float total) {
  float* dst = p.scores + static_cast<int64_t>(hk) * p.s.win.n + j;
  if (p.accumulate)
    atomicAdd(dst, total);
  else
    *dst = total;
}

// The row-major passes' key write-out: thread tid < TK adds key tid of tile `tile` over the kSlots
// partial sums of buffer `buf` (red_u / red_w: [2][kSlots][TK]; v2_s: [2][TK] ||v||^2), stores
// its score (store_key_score), then calls also_store(j) with the key's index (vatp's ||v||_1).
template <PairTerm kTerm, int kSlots, int TK, class AlsoStore>
__device__ __forceinline__ void write_tile_key(const PassParams& p, int hk, int64_t key_begin,
                                               int64_t chunk_end, int tile, int buf,
                                               const float* red_u, const float* red_w,
                                               const float* v2_s, int tid, AlsoStore&& also_store) {
  using TT = TermTraits<kTerm>;
  if (tid >= TK) return;
  const int64_t j = key_begin + static_cast<int64_t>(tile) * TK + tid;
  if (j >= chunk_end) return;
  const float* ru = red_u + buf * kSlots * TK;
  const float* rw = red_w + buf * kSlots * TK;
  float su = 0.f, sw = 0.f;
#pragma unroll
  for (int x = 0; x < kSlots; ++x) {
    if constexpr (TT::kHasU) su += ru[x * TK + tid];
    if constexpr (TT::kHasW) sw += rw[x * TK + tid];
  }
  store_key_score(p, hk, j,
                  key_total<kTerm>(p.s, j, su, sw, TT::kHasW ? v2_s[buf * TK + tid] : 0.f));
  also_store(j);
}

// After a barrier that follows the block's last score store: adds the leave-one-out term of each
// staged top key (top_s) to its key's score (atomics: several rows may share a top, and the key's
// total was stored by another thread of the block).
template <PairTerm kTerm>
__device__ __forceinline__ void add_top_terms(const PassParams& p, int hk, int row0, int rows_here,
                                              int rows, int64_t key_begin, const int* top_s) {
  const ScorePassArgs& sa = p.s;
  const WindowArgs& a = sa.win;
  for (int row = threadIdx.x; row < rows; row += blockDim.x) {
    if (row >= rows_here || top_s[row] < 0) continue;
    const TopRow tr = sa.top[window_out_row(p, hk, row0, row)];
    terms::TopKey<float> tk;
    tk.p = tr.p;
    tk.omp = tr.omp;
    tk.z = tr.z;
    tk.d2 = tr.d2;
    tk.vdiff = tr.vdiff;
    tk.v2 = tr.v2;
    const int64_t j = key_begin + top_s[row];
    const float t = terms::top_term(method_of(kTerm), tk);
    atomicAdd(p.scores + static_cast<int64_t>(hk) * a.n + j, finish_key_score<kTerm>(sa, j, t));
  }
}

}  // namespace kvevict::cuda::detail
