// The bodies of the mma.sync window forward's block and of the split merge's row (their kernels are
// in window_forward.cu, whose top describes the design, the top-key handling and the partials'
// layout).
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/launchers.h"
#include "cuda/mma_tile.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {

// Rows of plan's split partials, and the bytes of their 16-bit outputs (with_out; padded to 256).
inline size_t forward_partial_rows(const WindowArgs& a, const WindowPlan& plan) {
  return static_cast<size_t>(a.num_kv_heads) * plan.row_blocks * plan.splits * 16 * plan.slabs;
}
inline size_t forward_partial_o_bytes(const WindowArgs& a, const WindowPlan& plan, bool with_out) {
  return with_out ? (forward_partial_rows(a, plan) * a.head_dim * 2 + 255) / 256 * 256 : 0;
}
// Bytes of plan's split partials: the 16-bit outputs, then (m, l, top logit, top index) a row.
inline size_t forward_partials_bytes(const WindowArgs& a, const WindowPlan& plan, bool with_out) {
  return forward_partial_o_bytes(a, plan, with_out) +
         forward_partial_rows(a, plan) * 4 * sizeof(float);
}

// The launch parameters of plan, its partials laid out in scratch as forward_partials_bytes says.
inline ForwardParams forward_params(const WindowArgs& a, const WindowPlan& plan, bool with_out,
                                    void* scratch) {
  ForwardParams p;
  p.a = a;
  p.group = a.num_q_heads / a.num_kv_heads;
  p.rows = plan.rows;
  p.row_blocks = plan.row_blocks;
  p.splits = plan.splits;
  p.keys_per_split = plan.keys_per_split;
  p.scale_log2 = a.scale * kLog2e;
  char* base = static_cast<char*>(scratch);
  p.part_o = with_out ? static_cast<void*>(base) : nullptr;
  p.part_ml = reinterpret_cast<float*>(base + forward_partial_o_bytes(a, plan, with_out));
  return p;
}

// Few rows (<= 2 slabs, w = 8 at G = 4): two blocks per SM (registers capped at 128) hide latency
// better than one block of 166 registers (ncu, v2: 8 warps per SM at 1.62x the floor). v7: three
// K/V stages where two such blocks still fit in shared memory (d <= 128: 2 x 111 KB), so each SM
// keeps four tiles in flight while it computes on two. More rows: one block of 8 warps with
// three stages.
template <class Tr>
constexpr int forward_min_blocks() {
  return Tr::kSlabs <= 2 ? 2 : 1;
}

template <class Tr, bool kWithV>
constexpr size_t forward_smem_for(int stages) {
  const size_t q = sizeof(typename Tr::T) * Tr::kRows * Tr::kStride;
  const size_t kv =
      sizeof(typename Tr::T) * stages * Tr::kTileKeys * Tr::kStride * (kWithV ? 2 : 1);
  const size_t merge =
      sizeof(float) * (Tr::kKeyGroups * Tr::kRows * ((kWithV ? Tr::kD : 0) + 4) + 2 * Tr::kRows);
  return q + (kv > merge ? kv : merge);
}
// Three stages where forward_min_blocks blocks still share an SM, else two.
template <class Tr, bool kWithV>
constexpr int forward_stages() {
  const int fit = stages_that_fit(forward_min_blocks<Tr>(),
                                  [](int s) { return forward_smem_for<Tr, kWithV>(s); });
  return fit < 3 ? fit : 3;
}
template <class Tr, bool kWithV>
constexpr size_t forward_smem_bytes() {
  return forward_smem_for<Tr, kWithV>(forward_stages<Tr, kWithV>());
}

// kTop (with V): the rows' top keys are kept apart (window_params.cuh ForwardTop), for the scores
// that need a_{-top}; without it the plain online softmax (attention outputs for the model).
template <class Tr, bool kWithV, bool kTop>
__device__ __forceinline__ void window_forward_block(const ForwardParams& p, int hk, int rb,
                                                     int split, unsigned char* smem) {
  static_assert(kWithV || !kTop, "the top keys need V");
  using T = typename Tr::T;
  constexpr int kForwardStages = forward_stages<Tr, kWithV>();
  constexpr int D = Tr::kD, S = Tr::kStride, TK = Tr::kTileKeys, GK = Tr::kGroupKeys;
  constexpr bool kQInRegs = D <= 128;  // 32 registers at d = 128; d = 256 reads Q from smem
  static_assert(forward_smem_bytes<Tr, kWithV>() <= 227 * 1024, "shared memory budget");

  T* q_s = reinterpret_cast<T*>(smem);     // [kRows][S] window queries of this block
  T* k_s = q_s + Tr::kRows * S;            // [kForwardStages][TK][S] key tiles
  T* v_s = k_s + kForwardStages * TK * S;  // [kForwardStages][TK][S] value tiles (kWithV)

  const WindowArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int slab = warp % Tr::kSlabs, kg = warp / Tr::kSlabs;
  const int row0 = rb * Tr::kRows;
  const int rows_here = min(Tr::kRows, p.rows - row0);

  // Keys of this split, cut at the last key any row of the block can see (and, with a sliding
  // window, started at the first key its earliest row can see).
  const ForwardKeys fk(p, split, row0, rows_here);
  const int64_t key_begin = fk.begin;
  const int keys = fk.keys;
  const int num_tiles = (keys + TK - 1) / TK;

  cp_async_window_queries<T, D>(a, p.group, hk, row0, rows_here, Tr::kRows, q_s,
                                [](int row, int col) { return row * S + col; });
  const int64_t head_off = hk * a.kv_head_stride + min(key_begin, a.n - 1) * a.kv_row_stride;
  const KvTileCopy<Tr> copy(static_cast<const T*>(a.k) + head_off,
                            kWithV ? static_cast<const T*>(a.v) + head_off : nullptr,
                            a.kv_row_stride, tid);
  auto load_tile = [&](int tile, int stage) {
    copy.template load<kWithV>(k_s + stage * TK * S, v_s + stage * TK * S, tile, keys);
  };
  // Group i of cp.async holds tile i (group 0 also the queries); kForwardStages - 1 in flight.
#pragma unroll
  for (int st = 0; st < kForwardStages - 1; ++st) {
    if (st < num_tiles) load_tile(st, st);
    cp_async_commit();
  }

  const int rl_lo = slab * 16 + g, rl_hi = rl_lo + 8;  // block-local rows of this thread
  const ForwardRowLimits limits(fk, a, p.rows, row0 + rl_lo);
  const float sc = p.scale_log2;  // logits in log2 units: s * sc

  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  float o[kWithV ? D / 8 : 1][4];
#pragma unroll
  for (int i = 0; i < (kWithV ? D / 8 : 1); ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  // Running max of the raw logits q.k (scale > 0, so it is also the max of the scaled ones) and
  // running sum of exp2((s - m) sc), of the keys in o (with V: all but the top held apart).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  ForwardTop<kTop ? D / 2 : 2> top;

  auto q_frag = [&](int ks, uint32_t(&f)[4]) { a_fragment<T, S>(f, q_s, rl_lo, ks, t4); };
  const MmaLane ln(lane);

  // One barrier per tile: after it, tile `tile` is visible to all and every warp is done with
  // tile - 1, whose stage then takes the copy of tile + kForwardStages - 1.
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kForwardStages;
    cp_async_wait<kForwardStages - 2>();
    __syncthreads();
    const int ahead = tile + kForwardStages - 1;
    if (ahead < num_tiles) load_tile(ahead, ahead % kForwardStages);
    cp_async_commit();
    if (tile == 0) load_query_frags<D, kQInRegs>(qf, q_frag);

    // S = Q K^T for this warp's GK keys.
    float s[GK / 8][4];
    qk_tile<T, S, D, kQInRegs>(s, qf, k_s + (stage * TK + kg * GK) * S, ln, q_frag, [](int) {});

    // Masked, the online softmax step, s becomes P.
    const int key0 = tile * TK + kg * GK;                // relative to key_begin
    const T* vgroup = v_s + (stage * TK + kg * GK) * S;  // this warp's keys of the tile
    float corr[2];
    bool grew = false, rescaled = false;
    forward_softmax_tile<kTop, T, GK / 2>(
        [&](int i) -> float& { return s[i >> 2][i & 3]; },
        [&](int i) -> float& { return o[i >> 2][i & 3]; },
        [&](int key, int col) {
          return *reinterpret_cast<const uint32_t*>(vgroup + key * S + col);
        },
        limits, key0, t4, sc, top, m_run, l_run, corr, &grew, &rescaled);

    if constexpr (kWithV) {
      // The running max of a row stops growing after the first few tiles: the rescale of the
      // accumulators (D / 2 multiplies a thread) runs only when some row of the warp grew.
      if (grew && !rescaled) scale_rows(o, corr);
      mma_pv<T, S>(o, s, v_s + (stage * TK + kg * GK) * S, ln);  // O += P V
    }
  }
  cp_async_wait<0>();
  l_run[0] = quad_sum(l_run[0]);
  l_run[1] = quad_sum(l_run[1]);

  // Merge the key groups of the block through shared memory (the K/V tiles are dead now).
  __syncthreads();
  constexpr int KG = Tr::kKeyGroups, RB = Tr::kRows;
  float* mo = reinterpret_cast<float*>(k_s);          // [KG][kRows][D]
  float* mm = mo + (kWithV ? KG * RB * D : 0);        // [KG][kRows] raw max
  float* ml = mm + KG * RB;                           // [KG][kRows]
  float* mt = ml + KG * RB;                           // [KG][kRows] top held apart (raw)
  float* blk_mt = mt + KG * RB;                       // [kRows] the block's top (raw)
  int* blk_id = reinterpret_cast<int*>(blk_mt + RB);  // [kRows] its key index
  if constexpr (kTop) {
    // The block's top key of a row: the first key group's top among the largest, if it beats
    // every group's other keys and no other group ties it (else p <= 1/2: no top held apart).
    // Every other group adds its top to its own accumulators.
    if (t4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mm[kg * RB + (r ? rl_hi : rl_lo)] = m_run[r];
        mt[kg * RB + (r ? rl_hi : rl_lo)] = top.m_top[r];
      }
    }
    __syncthreads();
    bool keep[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r ? rl_hi : rl_lo;
      float best = -INFINITY, inc = -INFINITY;
      int who = 0, ties = 0;
#pragma unroll
      for (int x = 0; x < KG; ++x) {
        const float t = mt[x * RB + row];
        if (t > best) {
          best = t;
          who = x;
        }
        inc = nan_max(inc, mm[x * RB + row]);
      }
#pragma unroll
      for (int x = 0; x < KG; ++x) ties += mt[x * RB + row] == best;
      const bool unique = best > -INFINITY && best > inc && ties == 1;
      keep[r] = unique && who == kg;
      if (t4 == 0 && kg == (unique ? who : 0)) {
        blk_mt[row] = unique ? best : -INFINITY;
        blk_id[row] = unique ? static_cast<int>(key_begin) + top.idx[r] : -1;
      }
    }
    float corr[2], wb[2];
    bool any = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float old = keep[r] ? -INFINITY : top.m_top[r];
      const float m_new = nan_max(m_run[r], old);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      corr[r] = fast_exp2((m_run[r] - m_use) * sc);
      wb[r] = old > -INFINITY ? fast_exp2((old - m_use) * sc) : 0.f;
      l_run[r] = l_run[r] * corr[r] + wb[r];  // l_run is the row's full sum here
      m_run[r] = m_new;
      any |= old > -INFINITY;
    }
    if (__any_sync(0xffffffffu, any)) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int c = 0; c < 4; c += 2) {
          const int r = c >> 1;
          const float2 f = unpack2<T>(top.v[2 * dt + r]);
          o[dt][c] = fmaf(wb[r], f.x, o[dt][c] * corr[r]);
          o[dt][c + 1] = fmaf(wb[r], f.y, o[dt][c + 1] * corr[r]);
        }
    }
    __syncthreads();  // every group has read mm / mt
  } else {
    if (t4 == 0 && kg == 0) {
      blk_mt[rl_lo] = blk_mt[rl_hi] = -INFINITY;
      blk_id[rl_lo] = blk_id[rl_hi] = -1;
    }
  }
  // The partials keep the raw max (the merge scales differences of maxima by sc).
  stash_key_group<RB, D, kWithV>(mo, mm, ml, kg, rl_lo, t4, m_run, l_run, o);
  __syncthreads();
  const int64_t part =
      ((static_cast<int64_t>(hk) * p.row_blocks + rb) * p.splits + split) * Tr::kRows;
  constexpr int kCols = kWithV ? D : 1;
  for (int idx = tid; idx < Tr::kRows * kCols; idx += Tr::kThreads) {
    const int row = idx / kCols, col = idx % kCols;
    const KeyGroupsMerged g = merge_key_groups<KG, RB, D, kWithV>(mo, mm, ml, row, col, sc);
    const float m_all = g.m, l_all = g.l, acc = g.acc;
    if constexpr (kWithV)
      static_cast<T*>(p.part_o)[(part + row) * D + col] =
          ElemTraits<T>::from_float(l_all == 0.f ? 0.f : acc / l_all);  // NaN stays NaN
    if (col == 0)
      *reinterpret_cast<float4*>(p.part_ml + (part + row) * 4) =
          make_float4(m_all, l_all, blk_mt[row], __int_as_float(blk_id[row]));
  }
}

// One warp per window row: combines the splits' partials into a, lse and the top-key record.
// Lanes split the splits and the 16-byte column chunks (d = 128: 16 chunks x 2 split lanes), so a
// row's loads are many and independent (v6 walked the splits one after another per column: ~20 us
// at w = 8). The row's top: the largest of the splits' tops held apart (the first split on ties);
// it is the row's top key if it beats every split's other keys and no other split's top ties it
// (else its p <= 1/2 and every top joins the others). The others: the splits' (o, l) and every
// other split's top, whose value row is read from V (the only loads that depend on the partials).
// `row` numbers the rows of every KV head (hk * p.rows + r); the whole warp calls it.
template <class T>
__device__ __forceinline__ void window_merge_row(const ForwardParams& p, int block_rows, float* out,
                                                 float* lse, int row) {
  const int lane = threadIdx.x & 31;
  const WindowArgs& a = p.a;
  const int hk = row / p.rows, r = row % p.rows;
  const int rb = r / block_rows, rl = r % block_rows;
  const int64_t base = (static_cast<int64_t>(hk) * p.row_blocks + rb) * p.splits;
  const float sc = p.scale_log2;
  // (m, l, m_top, idx) of splits lane, lane + 32, ... stay in registers (up to kMaxSplitRegs * 32
  // splits); each split's weights are then fetched by shuffle instead of a reload.
  constexpr int kMaxSplitRegs = 4;
  const float* ml = p.part_ml;
  auto part4 = [&](int s) {
    return *reinterpret_cast<const float4*>(ml + ((base + s) * block_rows + rl) * 4);
  };
  float ms[kMaxSplitRegs], ls[kMaxSplitRegs], mts[kMaxSplitRegs];
  int ids[kMaxSplitRegs];
  float m_inc = -INFINITY, m_best = -INFINITY;
  int s_best = INT_MAX;
#pragma unroll
  for (int i = 0; i < kMaxSplitRegs; ++i) {
    const int s = lane + 32 * i;
    ms[i] = mts[i] = -INFINITY;
    ls[i] = 0.f;
    ids[i] = -1;
    if (s < p.splits) {
      const float4 x = part4(s);
      ms[i] = x.x;
      ls[i] = x.y;
      mts[i] = x.z;
      ids[i] = __float_as_int(x.w);
    }
    m_inc = nan_max(m_inc, ms[i]);
    if (mts[i] > m_best) {
      m_best = mts[i];
      s_best = s;
    }
  }
  for (int s = lane + 32 * kMaxSplitRegs; s < p.splits; s += 32) {  // more splits: not held
    const float4 x = part4(s);
    m_inc = nan_max(m_inc, x.x);
    if (x.z > m_best) {
      m_best = x.z;
      s_best = s;
    }
  }
  // A row whose splits hold no top (where no key ever outweighed the keys before it in its split,
  // and in the lse-only forwards) skips the top search, its ties and the others' max over tops.
  const bool any_top = __any_sync(0xffffffffu, m_best > -INFINITY);
  for (int o = 16; o > 0; o >>= 1) {
    m_inc = nan_max(m_inc, __shfl_xor_sync(0xffffffffu, m_inc, o));
    if (!any_top) continue;  // warp-uniform
    const float mb = __shfl_xor_sync(0xffffffffu, m_best, o);
    const int sb = __shfl_xor_sync(0xffffffffu, s_best, o);
    if (mb > m_best || (mb == m_best && sb < s_best)) {
      m_best = mb;
      s_best = sb;
    }
  }
  int ties = 0;
  float R = m_inc;  // the others' max (see below)
  bool have_top = false;
  if (any_top) {
#pragma unroll
    for (int i = 0; i < kMaxSplitRegs; ++i) ties += mts[i] == m_best && m_best > -INFINITY;
    for (int s = lane + 32 * kMaxSplitRegs; s < p.splits; s += 32)
      ties += part4(s).z == m_best && m_best > -INFINITY;
    for (int o = 16; o > 0; o >>= 1) ties += __shfl_xor_sync(0xffffffffu, ties, o);
    have_top = m_best > -INFINITY && m_best > m_inc && ties == 1;
    // The others' max R and their weights: (o, l) of split s by f = exp2((m - R) sc) l, the top
    // of a split other than the row's top by g = exp2((m_top - R) sc).
#pragma unroll
    for (int i = 0; i < kMaxSplitRegs; ++i)
      if (!(have_top && lane + 32 * i == s_best)) R = nan_max(R, mts[i]);
    for (int s = lane + 32 * kMaxSplitRegs; s < p.splits; s += 32)
      if (!(have_top && s == s_best)) R = nan_max(R, part4(s).z);
    for (int o = 16; o > 0; o >>= 1) R = nan_max(R, __shfl_xor_sync(0xffffffffu, R, o));
  }
  auto weights = [&](float m, float l, float mt, int s, float* f, float* g) {
    *f = (R == -INFINITY || m == -INFINITY) ? 0.f : exp2f((m - R) * sc) * l;
    *g = (R == -INFINITY || mt == -INFINITY || (have_top && s == s_best)) ? 0.f
                                                                          : exp2f((mt - R) * sc);
  };
  float fs[kMaxSplitRegs], gs[kMaxSplitRegs];
  float l_all = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxSplitRegs; ++i) {
    weights(ms[i], ls[i], mts[i], lane + 32 * i, &fs[i], &gs[i]);
    l_all += fs[i] + gs[i];
  }
  for (int s = lane + 32 * kMaxSplitRegs; s < p.splits; s += 32) {
    const float4 x = part4(s);
    float f, g;
    weights(x.x, x.y, x.z, s, &f, &g);
    l_all += f + g;
  }
  l_all = warp_sum(l_all);
  int top_idx = -1;
  if (have_top) top_idx = __shfl_sync(0xffffffffu, ids[0], s_best & 31);
  if (have_top && s_best >= 32) top_idx = __float_as_int(part4(s_best).w);  // uniform branch
  const int qh = hk * p.group + r / a.w, t = r % a.w;
  const int64_t out_row = static_cast<int64_t>(qh) * a.w + t;
  // A row that saw a NaN logit has NaN maxima and sums (nan_max; exp2 of NaN), and a +inf logit
  // (an Inf in q or k) leaves no softmax either (exp(inf - inf)): its lse, a and top record are
  // NaN, so every score it enters is NaN (RELIABILITY.md "NaN and Inf in q, k, v"), where the
  // comparisons below would drop it (have_top is false for NaN; a +inf top gave p = 1).
  const bool nan_row = isnan(l_all) || isnan(R) || R == INFINITY || m_best == INFINITY;
  // rho = sum_{others} exp(z - z_top): the others' mass relative to the top (0 without a top).
  const float rho = have_top && l_all > 0.f ? l_all * exp2f((R - m_best) * sc) : 0.f;
  if (lane == 0 && lse != nullptr) {
    float x;
    if (have_top)
      x = m_best * sc + log1pf(rho) * kLog2e;
    else
      x = R == -INFINITY ? -INFINITY : fmaf(R, sc, log2f(l_all));
    lse[out_row] = nan_row ? CUDART_NAN_F : R == -INFINITY && !have_top ? -INFINITY : x * kLn2;
  }
  if (out == nullptr && p.rows_out == nullptr) return;
  const T* vhead = static_cast<const T*>(a.v) + hk * a.kv_head_stride;
  const int chunks = a.head_dim / 8;  // 8, 16 or 32: a power of two dividing 32
  const int split_lanes = 32 / chunks;
  const int ch = lane % chunks, s0 = lane / chunks;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  auto load8 = [](const T* src) { return *reinterpret_cast<const uint4*>(src); };
  auto add8 = [&](const uint4& raw, float w) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = fmaf(w, ElemTraits<T>::to_float(e[i]), acc[i]);
  };
  // The row's own top value row: loaded now, used after the sums below.
  uint4 top_raw = make_uint4(0u, 0u, 0u, 0u);
  if (have_top) top_raw = load8(vhead + static_cast<int64_t>(top_idx) * a.kv_row_stride + ch * 8);
  if (l_all > 0.f) {
    // Every lane runs the same number of steps (the shuffles need the whole warp); split
    // s = s0 + k * split_lanes lies in register (k * split_lanes) / 32 of lane s % 32 for all
    // lanes of a step alike, since split_lanes divides 32.
    // The loads of kBatch steps are issued before any of them is summed: loaded and summed step
    // by step, each step's two rows (o partial, another split's top value) cost a round trip to
    // L2 or memory, 16 in a row at 4K (the merge took 10.8 us there, ncu 2026-12-06 (e)). The sums
    // keep the steps' order, so the bits are the same. 4 steps a batch: 117 registers, two blocks
    // a SM for the large merge grids of short prefill chunks (8: 156 registers, one block).
    constexpr int kBatch = 4;
    const int steps = (p.splits + split_lanes - 1) / split_lanes;
    for (int k0 = 0; k0 < steps; k0 += kBatch) {
      uint4 raw_o[kBatch], raw_v[kBatch];
      float fb[kBatch], gb[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int k = k0 + b;
        fb[b] = gb[b] = 0.f;
        raw_o[b] = raw_v[b] = make_uint4(0u, 0u, 0u, 0u);
        if (k >= steps) continue;  // warp-uniform
        const int s = s0 + k * split_lanes;
        const bool valid = s < p.splits;
        float f = 0.f, g = 0.f;
        int idx = -1;
        if (p.splits <= 32 * kMaxSplitRegs) {  // warp-uniform
          const int reg = (k * split_lanes) >> 5;
          float hf = fs[0], hg = gs[0];
          int hi = ids[0];
#pragma unroll
          for (int i = 1; i < kMaxSplitRegs; ++i)
            if (reg == i) {
              hf = fs[i];
              hg = gs[i];
              hi = ids[i];
            }
          f = __shfl_sync(0xffffffffu, hf, s & 31);
          g = __shfl_sync(0xffffffffu, hg, s & 31);
          idx = __shfl_sync(0xffffffffu, hi, s & 31);
        } else if (valid) {
          const float4 x = part4(s);
          weights(x.x, x.y, x.z, s, &f, &g);
          idx = __float_as_int(x.w);
        }
        if (!valid) continue;
        fb[b] = f;
        gb[b] = g;
        const int64_t prow = (base + s) * block_rows + rl;
        if (f != 0.f)
          raw_o[b] = load8(static_cast<const T*>(p.part_o) + prow * a.head_dim + ch * 8);
        if (g != 0.f)
          raw_v[b] = load8(vhead + static_cast<int64_t>(idx) * a.kv_row_stride + ch * 8);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {  // as the steps ran: o partial, then the other top
        if (fb[b] != 0.f) add8(raw_o[b], fb[b]);
        if (gb[b] != 0.f) add8(raw_v[b], gb[b]);
      }
    }
  }
  for (int o = chunks; o < 32; o <<= 1)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
  // a = (v_top + rho a_{-top}) / (1 + rho); without a top a = acc / l.
  const float inv_l = l_all > 0.f ? 1.f / l_all : 0.f;
  const float p_top = 1.f / (1.f + rho);
  float vt[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float d2 = 0.f, vdiff = 0.f, v2 = 0.f;
  if (have_top) {
    const T* e = reinterpret_cast<const T*>(&top_raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      vt[i] = ElemTraits<T>::to_float(e[i]);
      const float aoth = acc[i] * inv_l, diff = vt[i] - aoth;
      d2 = fmaf(diff, diff, d2);
      vdiff = fmaf(vt[i], diff, vdiff);
      v2 = fmaf(vt[i], vt[i], v2);
      acc[i] = (vt[i] + rho * aoth) * p_top;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] *= inv_l;
  }
  if (nan_row)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = CUDART_NAN_F;
  if (s0 == 0 && p.rows_out != nullptr) {  // [w, Hq, d] rows in T
    uint4 packed;
    T* e = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = ElemTraits<T>::from_float(acc[i]);
    *reinterpret_cast<uint4*>(static_cast<T*>(p.rows_out) +
                              (static_cast<int64_t>(t) * a.num_q_heads + qh) * a.head_dim +
                              ch * 8) = packed;
  } else if (s0 == 0) {
    float4* dst = reinterpret_cast<float4*>(out + out_row * a.head_dim + ch * 8);
    dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
  if (p.top == nullptr) return;
  // The chunks' sums live in lanes 0 .. chunks - 1 (and their copies): sum over those.
  if (have_top) {  // warp-uniform; without a top the three stay 0
    const bool first = s0 == 0;
    d2 = warp_sum(first ? d2 : 0.f);
    vdiff = warp_sum(first ? vdiff : 0.f);
    v2 = warp_sum(first ? v2 : 0.f);
  }
  if (lane == 0) {
    TopRow tr;
    tr.idx = have_top && !nan_row && rho <= 1.f ? top_idx : -1;  // p_top >= 1/2
    tr.p = nan_row ? CUDART_NAN_F : p_top;
    tr.omp = nan_row ? CUDART_NAN_F : rho * p_top;
    tr.z = m_best * a.scale;
    tr.d2 = d2;
    tr.vdiff = vdiff;
    tr.v2 = v2;
    p.top[out_row] = tr;
  }
}

}  // namespace kvevict::cuda::detail
