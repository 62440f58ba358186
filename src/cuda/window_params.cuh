// What the window kernels share (forward and scoring pass; mma.sync and wgmma variants): the
// launch parameters, the causal geometry of the window rows, and the wgmma launchers' entry
// points (window_forward_wgmma.cu, score_pass_wgmma.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "cuda/mma_tile.cuh"
#include "cuda/window_plan.h"

namespace kvevict::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct ForwardParams {
  WindowArgs a;
  int group = 1;
  int rows = 0;  // G * w
  int row_blocks = 1;
  int splits = 1;
  int64_t keys_per_split = 0;
  float scale_log2 = 0;
  // [Hkv, row_blocks, splits, kRows, d] each split's output normalized by its own sum (o / l),
  // stored in the input dtype T: o / l is a convex combination of rows of V, so it fits T's
  // range, and rounding it adds 2^-9 (bf16) / 2^-11 (f16) relative error, the order of the 16-bit
  // P of P V itself. Halves the partials against f32 (v6: w = 32 scratch 17.3 -> ~4.6 MiB).
  // With V, each split's top key is kept apart from (o, m, l) (see ForwardTop): part_o holds the
  // other keys' output only.
  void* part_o = nullptr;
  // [Hkv, row_blocks, splits, kRows, 4]: the raw max logit q.k of the keys in (o, l), their sum
  // l of exp2((s - max) scale log2 e), the raw logit of the split's top key held apart (-inf:
  // none) and its key index (int bits, -1: none)
  float* part_ml = nullptr;
  TopRow* top = nullptr;  // [Hq, w] written by the merge (null: not wanted)
  // launch_window_attention_rows: the outputs as [w, Hq, d] rows in the input dtype (written by
  // the merge, or with one split by the wgmma forward itself) and lse [Hq, w] (null: not written).
  void* rows_out = nullptr;
  float* rows_lse = nullptr;
};

struct PassParams {
  ScorePassArgs s;
  int group = 1;
  int rows = 0;
  int row_blocks = 1;
  int64_t keys_per_chunk = 0;
  bool accumulate = false;  // several row blocks add into the same keys (scores zeroed first)
  float* scores = nullptr;  // [Hkv, n]
};
// The pass parameters of plan (score_pass_choice.cpp): several row blocks accumulate.
PassParams pass_params(const ScorePassArgs& sa, int group, const WindowPlan& plan, float* scores);

// Last key position a window row may see (causal), or -1 for padding rows.
__device__ __forceinline__ int64_t row_last_key(int row, int rows, int w, int64_t n) {
  return row < rows ? n - w + (row % w) : -1;
}

// Window position t of the block's rows that sees the fewest keys (t_min) and the most (t_max):
// rows r = row0 .. row0 + rows_here - 1 have t = r % w.
__device__ __forceinline__ void block_t_range(int row0, int rows_here, int w, int* t_min,
                                              int* t_max) {
  *t_min = 0;
  *t_max = w - 1;
  if (rows_here < w) {
    const int t0 = row0 % w;
    if (t0 + rows_here - 1 < w) {
      *t_min = t0;
      *t_max = t0 + rows_here - 1;
    }
  }
}

// Query row `row` (block-local) of the block whose first row is row0, for KV head hk, in global
// memory; null for padding rows (row >= rows_here). Row r of a KV head is window query r % w of
// query head hk G + r / w.
template <class T>
__device__ __forceinline__ const T* window_query_row(const WindowArgs& a, int group, int hk,
                                                     int row0, int row, int rows_here) {
  if (row >= rows_here) return nullptr;
  const int r = row0 + row;
  const int qh = hk * group + r / a.w, t = r % a.w;
  return static_cast<const T*>(a.q) + qh * a.q_head_stride +
         static_cast<int64_t>(a.q_rows - a.w + t) * a.q_row_stride;
}

// Copies the block's `rows` window query rows (D elements each) into shared memory with cp.async,
// row `row`'s 16-byte chunk `ch` to dst + index(row, ch * 8); padding rows become zeros.
template <class T, int D, class Index>
__device__ __forceinline__ void cp_async_window_queries(const WindowArgs& a, int group, int hk,
                                                        int row0, int rows_here, int rows, T* dst,
                                                        Index index) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < rows * kChunks; c += blockDim.x) {
    const int row = c / kChunks, ch = c % kChunks;
    const T* src = window_query_row<T>(a, group, hk, row0, row, rows_here);
    cp_async_16(dst + index(row, ch * 8), src ? src + ch * 8 : static_cast<const T*>(a.q),
                src ? 16 : 0);
  }
}

// The keys a forward block visits: its split, cut at the last key any of its rows can see and,
// with a sliding window, started at the first key its earliest row can see; and the visible range
// of a row relative to the first of them.
struct ForwardKeys {
  int64_t begin = 0, end = 0;  // absolute [begin, end)
  int keys = 0;
  int t_min = 0, t_max = 0;  // window positions of the block's rows that see least / most
  int64_t sliding_window = 0;

  __device__ __forceinline__ ForwardKeys(const ForwardParams& p, int split, int row0,
                                         int rows_here) {
    const WindowArgs& a = p.a;
    const int64_t split_begin = split * p.keys_per_split;
    block_t_range(row0, rows_here, a.w, &t_min, &t_max);
    sliding_window = a.sliding_window;
    begin =
        sliding_window > 0 ? max(split_begin, a.n - a.w + t_min - sliding_window + 1) : split_begin;
    end = min(min(a.n, split_begin + p.keys_per_split), a.n - a.w + t_max + 1);
    keys = end > begin ? static_cast<int>(end - begin) : 0;
  }
  // Last visible key of a row whose last key is `last`, relative to begin, capped at the split's
  // end (-1: none).
  __device__ __forceinline__ int rel_limit(int64_t last) const {
    const int64_t lim = min(last, end - 1) - begin;
    return static_cast<int>(max(lim, int64_t{-1}));
  }
  // First visible key relative to begin: 0 without a sliding window; with one, a row whose last
  // key is L sees L - sliding_window + 1 .. L (gemma3's local layers).
  __device__ __forceinline__ int rel_first(int64_t last) const {
    if (sliding_window <= 0) return 0;
    const int64_t first = last - sliding_window + 1 - begin;
    return static_cast<int>(min(max(first, int64_t{0}), static_cast<int64_t>(keys)));
  }
};

// One online-softmax step for a thread's two rows (lo, hi) of an mma / wgmma accumulator tile:
// row_max holds each row's max of its raw logits (reduced over the row's 4 lanes); it moves the
// running max m_run, rescales the running sum l_run, and returns in m_c the shift of this tile's
// exponents (max in log2 units, sc = scale log2 e) and in corr the factor for the output
// accumulators. Returns whether some row's max grew (the caller skips rescaling otherwise).
// online_max_step: the same from tile_max, the thread's own maxima (reduced here).
// NaN: the maxima propagate it (nan_max), so a row that saw a NaN logit keeps m_run = NaN, every
// later exponent and l_run NaN, and the merge writes NaN for it (window_forward.cu).
__device__ __forceinline__ bool shift_step(const float (&row_max)[2], float (&m_run)[2],
                                           float (&l_run)[2], float sc, float (&m_c)[2],
                                           float (&corr)[2]) {
  bool grew = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = nan_max(m_run[r], row_max[r]);
    grew |= m_new > m_run[r];
    // -inf (nothing visible yet) uses 0, keeping exp2(-inf - m) = 0, never NaN. corr is exactly
    // 1 when the max did not move (l must not drift against the unscaled o).
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    m_c[r] = m_use * sc;
    corr[r] = fast_exp2((m_run[r] - m_use) * sc);
    m_run[r] = m_new;
    l_run[r] *= corr[r];
  }
  return grew;
}
__device__ __forceinline__ bool online_max_step(float (&tile_max)[2], float (&m_run)[2],
                                                float (&l_run)[2], float sc, float (&m_c)[2],
                                                float (&corr)[2]) {
  const float row_max[2] = {quad_max(tile_max[0]), quad_max(tile_max[1])};
  return shift_step(row_max, m_run, l_run, sc, m_c, corr);
}

// --- The forward's top key (issue 13) ------------------------------------------------------------
// dropkv / obcache need a_{-top}, the output WITHOUT a row's top key, where that key holds p -> 1:
// a - p v_top cancels, so a_{-top} must be accumulated apart. The forward keeps each row's running
// top key out of its accumulators (o, l, running max m) once it outweighs everything the row has
// seen (l exp2((m - t1) c) + the former top's weight < 1, a "strong" record): its P is zeroed
// before P V, its value row is stashed in registers (16-bit pairs, the layout of o), and the
// accumulators are then shifted by the OTHER keys' own max, so they do not underflow however far
// the top dominates (1000 nats, q = 1e30). When a later key beats it, the former top is ADDED to
// the accumulators from the stash (nothing is ever subtracted). A record that does not outweigh
// what was seen stays in the accumulators: its row's top then has p < 1/2 and needs no leave-one-
// out (score_terms.h). Records are rare after a row's first tiles, so the extra work (finding the
// record's key and the tile's second max, the stash) runs in a warp-uniform branch; the per-tile
// cost is a compare and a vote. With |max logit scale log2 e| > 2^12 the exponents are formed as
// (s - m) c instead of fma(s, c, -m c), whose rounding of m c would move p by more than 2^-12
// (at q = 1e30 by 2^(1e22)).

// Two 16-bit values (lo = the lower address) as floats.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xFFFF0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// A thread's two rows' top keys held apart (NO: the floats of o a thread holds).
template <int NO>
struct ForwardTop {
  float m_top[2] = {-INFINITY, -INFINITY};  // raw logit q.k; -inf: none held apart
  int idx[2] = {-1, -1};                    // key index relative to the split's first key
  uint32_t v[NO / 2];                       // value pairs at o[2 k], o[2 k + 1]
  bool extreme = false;                     // some row's |m c| > 2^12 (warp-uniform)
  __device__ __forceinline__ ForwardTop() {
#pragma unroll
    for (int k = 0; k < NO / 2; ++k) v[k] = 0u;
  }
};

// What a tile's top step leaves for o and the stash (forward_top_tail): a former top joining the
// accumulators (o = o corr + wb v_former in the rows where wb > 0) and a new strong top's value row
// to stash. The overlapped split loop applies it once the P V in flight on o has completed.
struct ForwardTopTail {
  float wb[2];
  int jstar[2];  // the strong tops' tile keys
  bool strong[2];
  bool any_join, any_strong;  // warp-uniform
};

// The rest of a tile's top step, on o and the stash: o = o corr + wb v_former where a former top
// joins (the rescale the record needs anyway, plus the add), then a new strong top's value row
// into the stash. o(i) returns a reference; v_at(key, col) the tile's 16-bit value pair (col,
// col + 1) of a key, as uint32.
template <class T, int NO, class OAt, class VAt>
__device__ __forceinline__ void forward_top_tail(OAt&& o, VAt&& v_at, ForwardTop<NO>& top,
                                                 const float (&wb)[2], const int (&jstar)[2],
                                                 const bool (&strong)[2], bool any_join,
                                                 bool any_strong, const float (&corr)[2], int t4) {
  if (any_join) {
#pragma unroll
    for (int k = 0; k < NO / 2; ++k) {
      const int r = k & 1;
      const float2 f = unpack2<T>(top.v[k]);
      o(2 * k) = fmaf(wb[r], f.x, o(2 * k) * corr[r]);
      o(2 * k + 1) = fmaf(wb[r], f.y, o(2 * k + 1) * corr[r]);
    }
  }
  if (any_strong) {
#pragma unroll
    for (int k = 0; k < NO / 2; ++k) {
      const int r = k & 1;
      if (strong[r]) top.v[k] = v_at(jstar[r], 8 * (k >> 1) + 2 * t4);
    }
  }
}
template <class T, int NO, class OAt, class VAt>
__device__ __forceinline__ void forward_top_tail(OAt&& o, VAt&& v_at, ForwardTop<NO>& top,
                                                 const ForwardTopTail& tail, const float (&corr)[2],
                                                 int t4) {
  forward_top_tail<T, NO>(o, v_at, top, tail.wb, tail.jstar, tail.strong, tail.any_join,
                          tail.any_strong, corr, t4);
}

// One tile of the online softmax with the top key kept apart, before P = exp2(...). Accumulator
// layout of mma.sync / wgmma: element i of s (NS of them) is row (i >> 1) & 1, tile key
// 8 (i >> 2) + 2 t4 + (i & 1); element i of o likewise over the head dim. s(i) / o(i) return
// references; v_at(key, col) the tile's 16-bit value pair (col, col + 1) of a key, as uint32.
// mx: the thread's row maxima of s (masked keys -inf). Updates m_run / l_run (thread-partial sums)
// and the top; zeroes a new strong top's logit (-inf) in s; ends with forward_top_tail, which
// rescales o itself when a former top joins (then *rescaled = true), else leaves o to the caller:
// o *= corr when grew_any. deferred (a ForwardTopTail*, not nullptr): the tail is left there for
// the caller to apply after the P V in flight on o. m_use: the rows' shifts (raw units), m_c =
// m_use * sc.
template <class T, int NS, int NO, class SAt, class OAt, class VAt, class Deferred>
__device__ __forceinline__ void forward_top_step(SAt&& s, OAt&& o, VAt&& v_at, ForwardTop<NO>& top,
                                                 float (&m_run)[2], float (&l_run)[2],
                                                 const float (&mx)[2], float sc, int t4, int key0,
                                                 float (&m_use)[2], float (&corr)[2],
                                                 bool* grew_any, bool* rescaled,
                                                 Deferred deferred) {
  float t1[2], m_new[2], wb[2] = {0.f, 0.f};
  bool rec[2], strong[2] = {false, false};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    t1[r] = quad_max(mx[r]);
    // A NaN logit (t1) or a row that saw one (m_run) makes no record and keeps m_run NaN.
    rec[r] = t1[r] > nan_max(m_run[r], top.m_top[r]);
    m_new[r] = nan_max(m_run[r], t1[r]);
  }
  // A record either joins the accumulators (weak; a former top held apart joins with it: an add
  // back, the usual event after a row's first tile) or is held apart (strong: needs the record's
  // key and the tile's second max, rare after the first tile).
  bool any_strong = false, any_join = false;
  if (__any_sync(0xffffffffu, rec[0] || rec[1])) {
    bool join[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // Mass of everything the row has seen, relative to the record key's weight 1.
      const float l = quad_sum(l_run[r]);
      const bool held = top.m_top[r] > -INFINITY;
      const float mass = l * fast_exp2((m_run[r] - t1[r]) * sc) +
                         (held ? fast_exp2((top.m_top[r] - t1[r]) * sc) : 0.f);
      strong[r] = rec[r] && mass < 1.f;
      join[r] = rec[r] && held;  // the former top joins the accumulators
    }
    any_strong = __any_sync(0xffffffffu, strong[0] || strong[1]);
    any_join = __any_sync(0xffffffffu, join[0] || join[1]);
  }
  int jstar[2] = {0, 0};
  float t2[2] = {-INFINITY, -INFINITY};
  if (any_strong) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The record key: the first of the row's keys equal to the tile max; t2: the max of the
      // tile's other keys.
      int cand = 1 << 20;
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (((i >> 1) & 1) == r && s(i) == t1[r]) cand = min(cand, 8 * (i >> 2) + 2 * t4 + (i & 1));
      jstar[r] = quad_min(cand);
      float m2 = -INFINITY;
#pragma unroll
      for (int i = 0; i < NS; ++i)
        if (((i >> 1) & 1) == r && 8 * (i >> 2) + 2 * t4 + (i & 1) != jstar[r])
          m2 = nan_max(m2, s(i));
      t2[r] = quad_max(m2);
    }
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      const int r = (i >> 1) & 1;
      if (strong[r] && 8 * (i >> 2) + 2 * t4 + (i & 1) == jstar[r]) s(i) = -INFINITY;
    }
  }
  if (any_strong || any_join) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!rec[r]) continue;
      const float old = top.m_top[r];  // the former top (if held apart) joins the accumulators
      const float m_inc = strong[r] ? nan_max(nan_max(m_run[r], old), t2[r]) : t1[r];
      m_new[r] = m_inc;
      wb[r] = old > -INFINITY ? fast_exp2((old - m_inc) * sc) : 0.f;
      top.m_top[r] = strong[r] ? t1[r] : -INFINITY;
      top.idx[r] = strong[r] ? key0 + jstar[r] : -1;
    }
  }
  bool grew[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // -inf (nothing in the accumulators yet) shifts by 0, keeping exp2(-inf - m) = 0; corr is
    // exactly 1 when the max did not move.
    m_use[r] = m_new[r] == -INFINITY ? 0.f : m_new[r];
    corr[r] = fast_exp2((m_run[r] - m_use[r]) * sc);
    grew[r] = m_new[r] > m_run[r];
    m_run[r] = m_new[r];
    l_run[r] = l_run[r] * corr[r] + (t4 == 0 ? wb[r] : 0.f);
  }
  *grew_any = __any_sync(0xffffffffu, grew[0] || grew[1]);
  if (*grew_any)
    top.extreme =
        __any_sync(0xffffffffu, fabsf(m_use[0] * sc) > 4096.f || fabsf(m_use[1] * sc) > 4096.f);
  *rescaled = any_join;
  if constexpr (std::is_same<Deferred, std::nullptr_t>::value)
    forward_top_tail<T, NO>(o, v_at, top, wb, jstar, strong, any_join, any_strong, corr, t4);
  else
    *deferred = ForwardTopTail{
        {wb[0], wb[1]}, {jstar[0], jstar[1]}, {strong[0], strong[1]}, any_join, any_strong};
}

// forward_exp_tile_fma: P = exp2(s c - m_c) of the tile in place from the shifts m_c = m_use c
// (log2 units), summed into the thread's l_run: the common form.
template <int NS, class SAt>
__device__ __forceinline__ void forward_exp_tile_fma(SAt&& s, const float (&m_c)[2], float sc,
                                                     float (&l_run)[2]) {
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    s(i) = fast_exp2(fmaf(s(i), sc, -m_c[(i >> 1) & 1]));
    l_run[(i >> 1) & 1] += s(i);
  }
}
// P = exp2((s - m) c) of the tile in place (see the top-key comment above for the two forms),
// summed into the thread's l_run.
template <int NS, class SAt>
__device__ __forceinline__ void forward_exp_tile(SAt&& s, const float (&m_use)[2], float sc,
                                                 bool extreme, float (&l_run)[2]) {
  if (!extreme) {
    const float m_c[2] = {m_use[0] * sc, m_use[1] * sc};
    forward_exp_tile_fma<NS>(s, m_c, sc, l_run);
  } else {
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      s(i) = fast_exp2((s(i) - m_use[(i >> 1) & 1]) * sc);
      l_run[(i >> 1) & 1] += s(i);
    }
  }
}

// The keys a thread's two accumulator rows (lo, hi = lo + 8, block-local) can see, relative to
// fk.begin (lim: last, first: first visible), and those every valid row of the block sees
// (first_all .. lim_all; padding rows compute on zero queries and are never read).
struct ForwardRowLimits {
  int lim_lo, lim_hi, first_lo, first_hi, lim_all, first_all;
  __device__ __forceinline__ ForwardRowLimits(const ForwardKeys& fk, const WindowArgs& a, int rows,
                                              int row_lo) {
    const int64_t last_lo = row_last_key(row_lo, rows, a.w, a.n);
    const int64_t last_hi = row_last_key(row_lo + 8, rows, a.w, a.n);
    lim_lo = fk.rel_limit(last_lo);
    lim_hi = fk.rel_limit(last_hi);
    first_lo = fk.rel_first(last_lo);
    first_hi = fk.rel_first(last_hi);
    lim_all = fk.rel_limit(a.n - a.w + fk.t_min);
    first_all = fk.rel_first(a.n - a.w + fk.t_max);
  }
};

// One tile of the forward's online softmax, the step the mma.sync and wgmma forwards share: the
// logits of keys a row cannot see (causal, sliding window, split end) become -inf (tiles every row
// sees in full skip the test), the rows' maxima move, and s becomes P in place. Layout as in
// forward_top_step: element i of s (NS of them, s(i) a reference) is row (i >> 1) & 1, key key0 +
// 8 (i >> 2) + 2 t4 + (i & 1) relative to fk.begin; the tile spans 2 NS keys a row. kTop keeps
// the rows' top keys apart (o(i), v_at(key, col) and top as forward_top_step takes them). corr:
// the factor for o (the caller rescales when *grew, unless *rescaled: the top step did it).
// deferred (kTop): where a P V may still run on o, the top step's tail is left there for the
// caller's forward_top_tail after that P V (*rescaled then says what the tail will do).
template <bool kTop, class T, int NS, int NO, class SAt, class OAt, class VAt,
          class Deferred = std::nullptr_t>
__device__ __forceinline__ void forward_softmax_tile(SAt&& s, OAt&& o, VAt&& v_at,
                                                     const ForwardRowLimits& rl, int key0, int t4,
                                                     float sc, ForwardTop<NO>& top,
                                                     float (&m_run)[2], float (&l_run)[2],
                                                     float (&corr)[2], bool* grew, bool* rescaled,
                                                     Deferred deferred = nullptr) {
  if (key0 + 2 * NS - 1 > rl.lim_all || key0 < rl.first_all) {
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      const int j = key0 + (i >> 2) * 8 + 2 * t4 + (i & 1);
      const bool hi = (i & 2) != 0;
      if (j > (hi ? rl.lim_hi : rl.lim_lo) || j < (hi ? rl.first_hi : rl.first_lo))
        s(i) = -INFINITY;
    }
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < NS; i += 4) {
    mx[0] = nan_max(mx[0], nan_max(s(i), s(i + 1)));  // NaN logits stay (shift_step)
    mx[1] = nan_max(mx[1], nan_max(s(i + 2), s(i + 3)));
  }
  if constexpr (!kTop) {
    float m_c[2];
    *grew = online_max_step(mx, m_run, l_run, sc, m_c, corr);
    forward_exp_tile_fma<NS>(s, m_c, sc, l_run);
  } else {
    float m_use[2];
    forward_top_step<T, NS, NO>(s, o, v_at, top, m_run, l_run, mx, sc, t4, key0, m_use, corr, grew,
                                rescaled, deferred);
    forward_exp_tile<NS>(s, m_use, sc, top.extreme, l_run);
  }
}

// The wgmma (sm_90a) kernels: 64 query rows a warpgroup, one or two warpgroups a block
// (rows_per_block 64 or 128, head dim 64 or 128). Each returns cudaErrorNotSupported for a
// configuration it does not build; the callers then launch the mma.sync kernels.
// wgmma_kernels_available(): whether this binary's kernels for the current device were compiled
// with wgmma (sm_90a).
bool wgmma_kernels_available();
// cuda::set_window_wgmma (score.h): false forces the mma.sync kernels.
bool window_wgmma_enabled();
bool wgmma_forward_supported(const WindowArgs& a, int rows_per_block);
cudaError_t launch_forward_wgmma(const ForwardParams& p, int rows_per_block, cudaStream_t stream);
// Head dim 256's direct rows (launch_window_attention_rows, one key split, 128-row blocks) on the
// wide TMA forward: whether this build and the switches allow it, and its launch (p's plan must be
// 128-row blocks of one split).
bool wgmma_rows_d256_enabled();
cudaError_t launch_rows_wgmma_d256(const ForwardParams& p, cudaStream_t stream);
bool wgmma_pass_supported(const ScorePassArgs& s, int rows_per_block);
cudaError_t launch_pass_wgmma(const PassParams& p, int rows_per_block, int chunks,
                              cudaStream_t stream);
// The mma.sync pass (score_pass.cu): blocks of 16 * slabs rows, any head dim and dtype.
cudaError_t launch_pass_mma(const PassParams& p, int slabs, int chunks, cudaStream_t stream);
// The key-major pass (score_pass_keymajor.cu): every term but obcache_vk (and not vatp's ||v||_1),
// bf16, 64 or 128 rows a block of two warpgroups (one block per SM), head dim 64 or 128; off by
// cuda::set_window_keymajor.
bool keymajor_pass_supported(const ScorePassArgs& s, int rows_per_block);
cudaError_t launch_pass_keymajor(const PassParams& p, int rows_per_block, int chunks,
                                 cudaStream_t stream);

}  // namespace kvevict::cuda::detail
