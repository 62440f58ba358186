// Selection of SPEC section 3 on the GPU: per KV head, a radix select on the float bits finds the
// threshold score of the k-th best unprotected token, then an ordered pass writes the kept
// indices. Per-head budgets (head_keep / out_offsets) serve adakv and criticalkv's stage 1;
// adakv's budgets come from the same radix machinery run over the whole layer (layer_*), and
// criticalkv's stage 2 reruns the select on a copy of the scores with stage-1 rows at +inf.
// When the (segments x heads) grid fits on the GPU at once, each phase is ONE cooperative
// launch (select_single_kernel, layer_single_kernel) with grid barriers between passes;
// otherwise the multi-launch kernels below run the same passes (docs/GPU_NOTES.md v6). Both launch
// modes are built from the same inlined block steps (add_to_histogram, flush_histogram,
// block_totals, slots_before, write_kept); they differ in where the keys live between passes
// (registers across grid barriers, or re-read from global memory each launch).
//
// Scores map to unsigned keys whose order is the float order (flip all bits of negatives, set
// the sign bit of positives), so "k-th largest float" is "k-th largest key", found digit by digit
// (11 + 11 + 10 bits, three histogram passes) without sorting. Every pass runs over segments of
// kSegment tokens in parallel (grid = segments x heads; one block per head measured 0.25 ms at
// Hkv = 8, n = 128K, far over the 0.05 ms budget); each block re-derives the digits found so far
// from the previous passes' global histograms, so no pass needs a separate "pick the digit"
// launch. The ordered pass keeps protected tokens, every key above the threshold and the first
// `need` keys equal to it (ties toward the lower position); per-segment counts and block-wide
// prefix sums give every kept index its slot, so the output is sorted by position.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cub/block/block_scan.cuh>

#include <atomic>

#include <cstdint>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

constexpr int kThreads = 1024;
constexpr int kItems = 8;
constexpr int kSegment = kThreads * kItems;  // tokens per block
constexpr int kPasses = 3;
constexpr int kBins = 2048;
__constant__ int kShift[kPasses] = {21, 10, 0};
__constant__ int kWidth[kPasses] = {11, 11, 10};

struct SelectState {
  uint32_t threshold;  // key of the k-th best free token
  int32_t need_equal;  // keys equal to the threshold that are kept (lowest positions first)
};

struct SelectParams {
  const float* scores;  // [H, n]
  int64_t n, n_keep, n_protected;
  int sink, window;
  int segments;
  int* hist;           // [kPasses][H][kBins]
  int* seg_keep;       // [H][segments] protected or above the threshold
  int* seg_eq;         // [H][segments] free and equal to the threshold
  SelectState* state;  // [H]
  int32_t* kept;       // [H, n_keep], or [offsets[H]] with per-head budgets
  // Per-head budgets (adakv, criticalkv stage 1); null: every head keeps n_keep. Device memory.
  const int64_t* head_keep = nullptr;    // [H] tokens kept by head h (protected included)
  const int64_t* out_offsets = nullptr;  // [H + 1] head h writes kept[out_offsets[h] ..)
  // adakv's layer-wide allocation (SPEC section 3): one histogram over the free tokens of all
  // heads finds the score of the (Hkv * B)-th best; counts per head follow.
  int* layer_hist = nullptr;           // [kPasses][kBins]
  int64_t layer_need = 0;              // Hkv * B
  SelectState* layer_state = nullptr;  // [1]
  int* head_gt = nullptr;              // [H] free tokens above the layer threshold
};

using Scan = cub::BlockScan<int, kThreads>;

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool is_protected(int64_t j, int64_t n, int sink, int window) {
  return j < sink || j >= n - window;
}

__device__ __forceinline__ int64_t keep_of(const SelectParams& p, int h) {
  return p.head_keep ? p.head_keep[h] : p.n_keep;
}
__device__ __forceinline__ int64_t out_base(const SelectParams& p, int h) {
  return p.out_offsets ? p.out_offsets[h] : static_cast<int64_t>(h) * p.n_keep;
}
// Per head: keep only the protected tokens (none of the free ones) or every token.
struct HeadMode {
  bool keep_none, keep_all;
};
__device__ __forceinline__ HeadMode head_mode(const SelectParams& p, int h) {
  const int64_t k_free = keep_of(p, h) - p.n_protected, n_free = p.n - p.n_protected;
  return HeadMode{k_free <= 0, k_free >= n_free};
}

// One digit of the threshold from one pass's histogram: the bin where the rank *s_need falls,
// counting from the highest bin; updates *s_prefix and *s_need. Block-wide (syncs).
__device__ void resolve_one(const int* hist, int pass, typename Scan::TempStorage& tmp,
                            uint32_t* s_prefix, int* s_need) {
  const int tid = threadIdx.x;
  const int nb = 1 << kWidth[pass];
  // Descending bins: thread tid owns positions 2 tid, 2 tid + 1 of the descending order.
  const int b0 = nb - 1 - 2 * tid, b1 = b0 - 1;
  const int h0 = b0 >= 0 ? hist[b0] : 0, h1 = b1 >= 0 ? hist[b1] : 0;
  int before;
  Scan(tmp).ExclusiveSum(h0 + h1, before);
  const int need = *s_need;
  const uint32_t prefix = *s_prefix;
  __syncthreads();
  if (before < need && before + h0 >= need) {
    *s_prefix = prefix | (static_cast<uint32_t>(b0) << kShift[pass]);
    *s_need = need - before;
  } else if (before + h0 < need && before + h0 + h1 >= need) {
    *s_prefix = prefix | (static_cast<uint32_t>(b1) << kShift[pass]);
    *s_need = need - before - h0;
  }
  __syncthreads();
}

// Walks passes 0..passes-1 of one histogram set (pass `i` at hist0 + i * pass_stride): prefix of
// the threshold and the rank still needed inside it, starting from rank need0. Block-wide; every
// thread returns the same values.
__device__ void resolve_hist(const int* hist0, int64_t pass_stride, int need0, int passes,
                             typename Scan::TempStorage& tmp, uint32_t* s_prefix, int* s_need) {
  if (threadIdx.x == 0) {
    *s_prefix = 0;
    *s_need = need0;
  }
  __syncthreads();
  for (int pass = 0; pass < passes; ++pass)
    resolve_one(hist0 + pass * pass_stride, pass, tmp, s_prefix, s_need);
}

// Per-head histograms (layer = false) or the one histogram of the whole layer (adakv).
__device__ void resolve(const SelectParams& p, int h, int passes, bool layer,
                        typename Scan::TempStorage& tmp, uint32_t* s_prefix, int* s_need) {
  if (layer)
    resolve_hist(p.layer_hist, kBins, static_cast<int>(p.layer_need), passes, tmp, s_prefix,
                 s_need);
  else
    resolve_hist(p.hist + static_cast<int64_t>(h) * kBins, static_cast<int64_t>(gridDim.y) * kBins,
                 static_cast<int>(keep_of(p, h) - p.n_protected), passes, tmp, s_prefix, s_need);
}

// --- The phases' block steps, shared by the multi-launch kernels (one launch a phase, the keys
// re-read from global memory) and the single-launch ones (the keys held in registers across grid
// barriers). Inlined: each kernel compiles as if written out.

// Adds the thread's kItems keys whose digits above this pass's equal `prefix` into the block's
// histogram hist_s (a warp's equal bins in one shared atomic: scores cluster in few bins, the top
// bits being sign and exponent). key_at(i, &key): whether item i is a free token, and its key.
template <class KeyAt>
__device__ __forceinline__ void add_to_histogram(int pass, uint32_t prefix, int* hist_s,
                                                 KeyAt key_at) {
  const int shift = kShift[pass];
  const uint32_t high_mask = pass == 0 ? 0u : (0xffffffffu << (shift + kWidth[pass]));
  const uint32_t digit_mask = (1u << kWidth[pass]) - 1;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    uint32_t key = 0, bin = 0xffffffffu;
    if (key_at(i, &key) && (key & high_mask) == (prefix & high_mask))
      bin = (key >> shift) & digit_mask;
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin != 0xffffffffu && (threadIdx.x & 31) == __ffs(peers) - 1)
      atomicAdd(&hist_s[bin], __popc(peers));
  }
}

// The block's histogram of one pass into the global one (after a barrier).
__device__ __forceinline__ void flush_histogram(int pass, const int* hist_s, int* hist) {
  for (int b = threadIdx.x; b < (1 << kWidth[pass]); b += kThreads)
    if (hist_s[b] != 0) atomicAdd(&hist[b], hist_s[b]);
}

// Block totals of two per-thread counts (two scans; the second's exclusive prefix in *b_rank).
__device__ __forceinline__ void block_totals(typename Scan::TempStorage& tmp, int a, int b,
                                             int* a_total, int* b_total, int* b_rank) {
  int dummy;
  Scan(tmp).ExclusiveSum(a, dummy, *a_total);
  __syncthreads();
  Scan(tmp).ExclusiveSum(b, *b_rank, *b_total);
}

// Thread 0: the output slots and the tie candidates of head h's segments before `seg`, from the
// counts phase's per-segment totals (the first `need` candidates are kept).
__device__ __forceinline__ void slots_before(const SelectParams& p, int h, int seg, int need,
                                             int64_t* s_out, int64_t* s_eq_before) {
  int64_t out = 0, eq_before = 0;
  for (int s = 0; s < seg; ++s) {
    const int e = p.seg_eq[h * p.segments + s];
    const int64_t left = need - eq_before;
    out += p.seg_keep[h * p.segments + s] + (left <= 0 ? 0 : (left < e ? left : e));
    eq_before += e;
  }
  *s_out = out;
  *s_eq_before = eq_before;
}

// The ordered write of the thread's kItems consecutive tokens from `base` (cls: 1 kept, 2 tie
// candidate, 0 not; eq_rank: the thread's first candidate's rank in the segment): candidates of
// rank < need are kept, every kept token gets the next slot of head h's output.
__device__ __forceinline__ void write_kept(const SelectParams& p, int h, int (&cls)[kItems],
                                           int eq_rank, int need, int64_t out_before,
                                           int64_t eq_before, int64_t base,
                                           typename Scan::TempStorage& tmp) {
  int64_t rank = eq_before + eq_rank;
  int keep = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (cls[i] == 2) cls[i] = rank++ < need ? 1 : 0;
    keep += cls[i] == 1;
  }
  __syncthreads();
  int slot_in_block;
  Scan(tmp).ExclusiveSum(keep, slot_in_block);
  int64_t slot = out_before + slot_in_block;
  const int64_t head_keep = keep_of(p, h);
  int32_t* out = p.kept + out_base(p, h);
#pragma unroll
  for (int i = 0; i < kItems; ++i)
    if (cls[i] == 1) {
      if (slot < head_keep) out[slot] = static_cast<int32_t>(base + i);
      ++slot;
    }
}

__global__ void __launch_bounds__(kThreads) histogram_kernel(SelectParams p, int pass, bool layer) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int hist_s[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x;
  if (!layer) {
    const HeadMode mode = head_mode(p, h);
    if (mode.keep_none || mode.keep_all) return;  // the whole block: no threshold to find
  }
  for (int b = tid; b < kBins; b += kThreads) hist_s[b] = 0;
  resolve(p, h, pass, layer, tmp, &s_prefix, &s_need);  // syncs
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSegment;
  add_to_histogram(pass, s_prefix, hist_s, [&](int i, uint32_t* key) {
    const int64_t j = base + i * kThreads + tid;  // coalesced
    if (j >= p.n || is_protected(j, p.n, p.sink, p.window)) return false;
    *key = order_key(row[j]);
    return true;
  });
  __syncthreads();
  flush_histogram(pass, hist_s,
                  layer ? p.layer_hist + pass * kBins
                        : p.hist + (static_cast<int64_t>(pass) * gridDim.y + h) * kBins);
}

// Keep flags of one token given the threshold: 1 = kept unconditionally, 2 = tie candidate.
__device__ __forceinline__ int classify(const SelectParams& p, const float* row, int64_t j,
                                        bool keep_all, bool keep_none, uint32_t threshold) {
  if (j >= p.n) return 0;
  if (is_protected(j, p.n, p.sink, p.window)) return 1;
  if (keep_none) return 0;
  if (keep_all) return 1;
  const uint32_t key = order_key(row[j]);
  return key > threshold ? 1 : (key == threshold ? 2 : 0);
}

__global__ void __launch_bounds__(kThreads) count_kernel(SelectParams p) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x;
  const HeadMode mode = head_mode(p, h);
  const bool keep_all = mode.keep_all, keep_none = mode.keep_none;
  uint32_t threshold = 0;
  if (!keep_all && !keep_none) {
    resolve(p, h, kPasses, false, tmp, &s_prefix, &s_need);
    threshold = s_prefix;
    if (blockIdx.x == 0 && tid == 0) p.state[h] = SelectState{threshold, s_need};
  }
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSegment;
  int keep = 0, eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = classify(p, row, base + i * kThreads + tid, keep_all, keep_none, threshold);
    keep += c == 1;
    eq += c == 2;
  }
  __syncthreads();
  int keep_total, eq_total, eq_rank;
  block_totals(tmp, keep, eq, &keep_total, &eq_total, &eq_rank);
  if (tid == 0) {
    p.seg_keep[h * p.segments + blockIdx.x] = keep_total;
    p.seg_eq[h * p.segments + blockIdx.x] = eq_total;
  }
}

__global__ void __launch_bounds__(kThreads) write_kernel(SelectParams p) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int64_t s_out, s_eq_before;
  const int h = blockIdx.y, tid = threadIdx.x, seg = blockIdx.x;
  const HeadMode mode = head_mode(p, h);
  const bool keep_all = mode.keep_all, keep_none = mode.keep_none;
  uint32_t threshold = 0;
  int need = 0;
  if (!keep_all && !keep_none) {
    threshold = p.state[h].threshold;
    need = p.state[h].need_equal;
  }
  if (tid == 0) slots_before(p, h, seg, need, &s_out, &s_eq_before);
  __syncthreads();
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(seg) * kSegment + static_cast<int64_t>(tid) * kItems;
  int cls[kItems], eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {  // blocked: thread owns kItems consecutive tokens (order)
    cls[i] = classify(p, row, base + i, keep_all, keep_none, threshold);
    eq += cls[i] == 2;
  }
  int eq_rank;
  Scan(tmp).ExclusiveSum(eq, eq_rank);
  write_kept(p, h, cls, eq_rank, need, s_out, s_eq_before, base, tmp);
}

// adakv, after the layer histograms: per (segment, head) the free tokens above the layer
// threshold (summed per head) and equal to it (kept per segment for the tie walk).
__global__ void __launch_bounds__(kThreads) layer_count_kernel(SelectParams p) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x;
  resolve(p, h, kPasses, true, tmp, &s_prefix, &s_need);
  const uint32_t threshold = s_prefix;
  if (blockIdx.x == 0 && h == 0 && tid == 0) *p.layer_state = SelectState{threshold, s_need};
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSegment;
  int gt = 0, eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t j = base + i * kThreads + tid;
    if (j < p.n && !is_protected(j, p.n, p.sink, p.window)) {
      const uint32_t key = order_key(row[j]);
      gt += key > threshold;
      eq += key == threshold;
    }
  }
  __syncthreads();
  int gt_total, eq_total, eq_rank;
  block_totals(tmp, gt, eq, &gt_total, &eq_total, &eq_rank);
  if (tid == 0) {
    if (gt_total != 0) atomicAdd(&p.head_gt[h], gt_total);  // integer sums: order-free
    p.seg_eq[h * p.segments + blockIdx.x] = eq_total;
  }
}

constexpr int kMaxLayerHeads = 256;

// adakv, one block: which heads the free tokens equal to the layer threshold belong to (the
// first need_equal of them in (position, head) order, the order of select.cpp's flattened
// candidates), then the per-head budgets of SPEC section 3 exactly as select.cpp computes them:
// B_h = f_h (1 - alpha) + alpha B, floored, the remaining units to the largest remainders (ties
// toward the lower head), capped at the free tokens of a head. The product is formed as
// fma(f_h, 1 - alpha, alpha B): the host build (-march=native, GCC contracts by default) computes
// it that way, and an equal-remainder tie must round the same way on both sides.
__device__ void layer_budget_block(const SelectParams& p, int num_heads, int64_t B, double alpha,
                                   int64_t* head_keep, int64_t* out_offsets) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int taken[kMaxLayerHeads];
  __shared__ int s_seg, s_left;
  const int tid = threadIdx.x;
  for (int h = tid; h < num_heads; h += kThreads) taken[h] = 0;
  const uint32_t threshold = p.layer_state->threshold;
  const int need = p.layer_state->need_equal;
  __syncthreads();
  if (tid == 0) {
    int cum = 0;
    s_seg = -1;
    s_left = 0;
    for (int seg = 0; seg < p.segments && need > 0; ++seg) {
      int e = 0;
      for (int h = 0; h < num_heads; ++h) e += p.seg_eq[h * p.segments + seg];
      if (cum + e >= need) {
        s_seg = seg;
        s_left = need - cum;
        break;
      }
      for (int h = 0; h < num_heads; ++h) taken[h] += p.seg_eq[h * p.segments + seg];
      cum += e;
    }
  }
  __syncthreads();
  if (s_seg >= 0) {  // the crossing segment: walk positions in order, heads in order
    const int left = s_left;
    const int64_t base =
        static_cast<int64_t>(s_seg) * kSegment + static_cast<int64_t>(tid) * kItems;
    int cnt[kItems], total = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t j = base + i;
      cnt[i] = 0;
      if (j < p.n && !is_protected(j, p.n, p.sink, p.window))
        for (int h = 0; h < num_heads; ++h)
          cnt[i] += order_key(p.scores[static_cast<int64_t>(h) * p.n + j]) == threshold;
      total += cnt[i];
    }
    int before;
    Scan(tmp).ExclusiveSum(total, before);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (cnt[i] > 0 && before < left) {
        int r = left - before;  // equal keys still taken at this position, lowest head first
        const int64_t j = base + i;
        for (int h = 0; h < num_heads && r > 0; ++h)
          if (order_key(p.scores[static_cast<int64_t>(h) * p.n + j]) == threshold) {
            atomicAdd(&taken[h], 1);
            --r;
          }
      }
      before += cnt[i];
    }
  }
  __syncthreads();
  if (tid != 0) return;
  const int64_t m = p.n - p.n_protected, take = static_cast<int64_t>(num_heads) * B;
  int64_t bh[kMaxLayerHeads];
  double rem[kMaxLayerHeads];
  int order[kMaxLayerHeads];
  int64_t total = 0;
  const double alpha_b = __dmul_rn(alpha, static_cast<double>(B));
  for (int h = 0; h < num_heads; ++h) {
    const int64_t f = static_cast<int64_t>(p.head_gt[h]) + taken[h];
    const double x = __fma_rn(static_cast<double>(f), 1.0 - alpha, alpha_b);
    bh[h] = static_cast<int64_t>(floor(__dadd_rn(x, 1e-9)));
    rem[h] = __dsub_rn(x, static_cast<double>(bh[h]));
    total += bh[h];
    order[h] = h;
  }
  for (int i = 1; i < num_heads; ++i) {  // stable insertion sort, remainder descending
    const int key = order[i];
    int j = i - 1;
    while (j >= 0 && rem[order[j]] < rem[key]) {
      order[j + 1] = order[j];
      --j;
    }
    order[j + 1] = key;
  }
  for (int i = 0; total < take; i = (i + 1) % num_heads)
    if (bh[order[i]] < m) {
      ++bh[order[i]];
      ++total;
    }
  int64_t off = 0;
  for (int h = 0; h < num_heads; ++h) {
    head_keep[h] = p.n_protected + bh[h];
    out_offsets[h] = off;
    off += head_keep[h];
  }
  out_offsets[num_heads] = off;
}

__global__ void __launch_bounds__(kThreads)
    layer_budget_kernel(SelectParams p, int num_heads, int64_t B, double alpha, int64_t* head_keep,
                        int64_t* out_offsets) {
  layer_budget_block(p, num_heads, B, alpha, head_keep, out_offsets);
}

// adakv's layer phase in ONE cooperative launch (as select_single_kernel for the per-head
// phase): zero the layer histogram and counts, three histogram passes over register-resident
// keys, the per-head counts above / at the threshold, then block (0, 0) runs the tie walk and the
// budgets. Replaces two memsets and five launches.
__global__ void __launch_bounds__(kThreads)
    layer_single_kernel(SelectParams p, int num_heads, int64_t B, double alpha, int64_t* head_keep,
                        int64_t* out_offsets) {
  namespace cg = cooperative_groups;
  cg::grid_group grid = cg::this_grid();
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int hist_s[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x, seg = blockIdx.x;
  {
    const int64_t blocks = static_cast<int64_t>(gridDim.x) * gridDim.y;
    const int64_t bid = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    for (int64_t i = bid * kThreads + tid; i < kPasses * kBins + num_heads;
         i += blocks * kThreads) {
      if (i < kPasses * kBins)
        p.layer_hist[i] = 0;
      else
        p.head_gt[i - kPasses * kBins] = 0;
    }
  }
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(seg) * kSegment;
  uint32_t key[kItems];
  uint32_t free_mask = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t j = base + i * kThreads + tid;  // strided: the counts are order-free
    key[i] = 0;
    if (j < p.n && !is_protected(j, p.n, p.sink, p.window)) {
      free_mask |= 1u << i;
      key[i] = order_key(row[j]);
    }
  }
  if (tid == 0) {
    s_prefix = 0;
    s_need = static_cast<int>(p.layer_need);
  }
  grid.sync();
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int b = tid; b < kBins; b += kThreads) hist_s[b] = 0;
    if (pass > 0) resolve_one(p.layer_hist + (pass - 1) * kBins, pass - 1, tmp, &s_prefix, &s_need);
    __syncthreads();
    add_to_histogram(pass, s_prefix, hist_s, [&](int i, uint32_t* k) {
      *k = key[i];
      return ((free_mask >> i) & 1u) != 0;
    });
    __syncthreads();
    flush_histogram(pass, hist_s, p.layer_hist + pass * kBins);
    grid.sync();
  }
  resolve_one(p.layer_hist + (kPasses - 1) * kBins, kPasses - 1, tmp, &s_prefix, &s_need);
  const uint32_t threshold = s_prefix;
  if (blockIdx.x == 0 && h == 0 && tid == 0) *p.layer_state = SelectState{threshold, s_need};
  int gt = 0, eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i)
    if ((free_mask >> i) & 1u) {
      gt += key[i] > threshold;
      eq += key[i] == threshold;
    }
  int gt_total, eq_total, eq_rank;
  block_totals(tmp, gt, eq, &gt_total, &eq_total, &eq_rank);
  if (tid == 0) {
    if (gt_total != 0) atomicAdd(&p.head_gt[h], gt_total);
    p.seg_eq[h * p.segments + seg] = eq_total;
  }
  grid.sync();
  if (blockIdx.x == 0 && blockIdx.y == 0)
    layer_budget_block(p, num_heads, B, alpha, head_keep, out_offsets);
}

// Uniform budgets as per-head arrays (what the general path reads).
__global__ void uniform_budget_kernel(int num_heads, int64_t n_keep, int64_t* head_keep,
                                      int64_t* out_offsets) {
  for (int h = threadIdx.x; h <= num_heads; h += blockDim.x) {
    if (h < num_heads) head_keep[h] = n_keep;
    out_offsets[h] = static_cast<int64_t>(h) * n_keep;
  }
}

// criticalkv stage 1 (select.cpp select_head): the protected tokens plus floor(B_h / 2) by aux.
__global__ void stage1_budget_kernel(int num_heads, int64_t n_protected, const int64_t* head_keep,
                                     int64_t* keep1, int64_t* off1) {
  if (threadIdx.x != 0) return;
  int64_t off = 0;
  for (int h = 0; h < num_heads; ++h) {
    const int64_t b = head_keep[h] - n_protected;
    keep1[h] = n_protected + (b > 0 ? b / 2 : 0);
    off1[h] = off;
    off += keep1[h];
  }
  off1[num_heads] = off;
}

__device__ __forceinline__ int head_of(const int64_t* offsets, int num_heads, int64_t r) {
  int lo = 0, hi = num_heads - 1;  // last h with offsets[h] <= r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// criticalkv stage 2 ranks the tokens stage 1 left by the main score: stage-1 tokens get +inf in
// a copy of the scores, so the stage-2 select takes all of them first (scores are finite) and
// fills the rest exactly like select_head's second top_by.
__global__ void mark_kept_kernel(float* scores, int64_t n, int num_heads, const int32_t* kept,
                                 const int64_t* offsets) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= offsets[num_heads]) return;
  const int h = head_of(offsets, num_heads, r);
  scores[static_cast<int64_t>(h) * n + kept[r]] = __int_as_float(0x7f800000);
}

// The whole per-head selection in ONE launch when the (segments x heads) grid fits on the GPU at
// once (cooperative launch; 128 blocks of 1024 threads at Hkv = 8, n = 128K on 132 SMs). Each
// block reads its kSegment scores once into registers (blocked: a thread owns kItems consecutive
// tokens, the order the ordered write needs) and grid barriers replace the six launches of the
// multi-pass path (histogram memset, three histogram passes, counts, write): at a 5% budget of
// n = 128K that path spent 0.041 ms, mostly in launch gaps and re-reading the scores.
__global__ void __launch_bounds__(kThreads) select_single_kernel(SelectParams p) {
  namespace cg = cooperative_groups;
  cg::grid_group grid = cg::this_grid();
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int hist_s[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int64_t s_out, s_eq_before;
  const int h = blockIdx.y, tid = threadIdx.x, seg = blockIdx.x;
  const HeadMode mode = head_mode(p, h);
  const bool find = !(mode.keep_none || mode.keep_all);
  {  // zero the global histograms (every block a slice)
    const int64_t blocks = static_cast<int64_t>(gridDim.x) * gridDim.y;
    const int64_t bid = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    const int64_t total = static_cast<int64_t>(kPasses) * gridDim.y * kBins;
    for (int64_t i = bid * kThreads + tid; i < total; i += blocks * kThreads) p.hist[i] = 0;
  }
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(seg) * kSegment + static_cast<int64_t>(tid) * kItems;
  uint32_t key[kItems];
  uint32_t kind = 0;  // bit i: token i is free (in range, unprotected); bit 16 + i: protected
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t j = base + i;
    key[i] = 0;
    if (j < p.n) {
      if (is_protected(j, p.n, p.sink, p.window)) {
        kind |= 1u << (16 + i);
      } else {
        kind |= 1u << i;
        key[i] = order_key(row[j]);
      }
    }
  }
  if (tid == 0) {
    s_prefix = 0;
    s_need = static_cast<int>(keep_of(p, h) - p.n_protected);
  }
  const int* head_hist = p.hist + static_cast<int64_t>(h) * kBins;
  const int64_t pass_stride = static_cast<int64_t>(gridDim.y) * kBins;
  grid.sync();
  for (int pass = 0; pass < kPasses; ++pass) {
    if (find) {
      for (int b = tid; b < kBins; b += kThreads) hist_s[b] = 0;
      // The digits of passes < pass-1 are already in s_prefix: only the last pass is walked
      // (the multi-launch kernels re-walk every earlier pass).
      if (pass > 0)
        resolve_one(head_hist + (pass - 1) * pass_stride, pass - 1, tmp, &s_prefix, &s_need);
      __syncthreads();
      add_to_histogram(pass, s_prefix, hist_s, [&](int i, uint32_t* k) {
        *k = key[i];
        return ((kind >> i) & 1u) != 0;
      });
      __syncthreads();
      flush_histogram(pass, hist_s, p.hist + (static_cast<int64_t>(pass) * gridDim.y + h) * kBins);
    }
    grid.sync();
  }
  uint32_t threshold = 0;
  int need = 0;
  if (find) {
    resolve_one(head_hist + (kPasses - 1) * pass_stride, kPasses - 1, tmp, &s_prefix, &s_need);
    threshold = s_prefix;
    need = s_need;
  }
  // cls: 1 kept unconditionally, 2 tie candidate (as classify()).
  int cls[kItems], keep = 0, eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    cls[i] = 0;
    if ((kind >> (16 + i)) & 1u)
      cls[i] = 1;
    else if ((kind >> i) & 1u) {
      if (mode.keep_all)
        cls[i] = 1;
      else if (!mode.keep_none)
        cls[i] = key[i] > threshold ? 1 : (key[i] == threshold ? 2 : 0);
    }
    keep += cls[i] == 1;
    eq += cls[i] == 2;
  }
  __syncthreads();
  int keep_total, eq_total, eq_rank;
  block_totals(tmp, keep, eq, &keep_total, &eq_total, &eq_rank);
  if (tid == 0) {
    p.seg_keep[h * p.segments + seg] = keep_total;
    p.seg_eq[h * p.segments + seg] = eq_total;
  }
  grid.sync();
  if (tid == 0) slots_before(p, h, seg, need, &s_out, &s_eq_before);
  __syncthreads();
  write_kept(p, h, cls, eq_rank, need, s_out, s_eq_before, base, tmp);
}

std::atomic<bool> g_single_launch{true};

// Blocks of select_single_kernel that fit on the current device at once (0: no cooperative
// launch). Cached per device.
template <class Kernel>
int64_t coop_capacity(Kernel kernel, int64_t (&cached)[64], bool (&known)[64]) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (!known[dev]) {
    int coop = 0, sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 0;
    }
    cached[dev] = coop ? static_cast<int64_t>(per_sm) * sms : 0;
    known[dev] = true;
  }
  return cached[dev];
}
int64_t single_launch_capacity() {
  static int64_t cached[64];
  static bool known[64] = {};
  return coop_capacity(select_single_kernel, cached, known);
}
int64_t layer_single_capacity() {
  static int64_t cached[64];
  static bool known[64] = {};
  return coop_capacity(layer_single_kernel, cached, known);
}

int segments_of(int64_t n) {
  return static_cast<int>((n + kSegment - 1) / kSegment);
}

// Threshold passes (when `hist`: some head has a threshold to find), counts, ordered write. One
// cooperative launch when the grid fits at once.
cudaError_t run_passes(const SelectParams& p, int num_heads, bool hist, cudaStream_t stream) {
  const dim3 grid(p.segments, num_heads);
  cudaError_t err;
  if (hist && g_single_launch.load(std::memory_order_relaxed) &&
      static_cast<int64_t>(p.segments) * num_heads <= single_launch_capacity()) {
    SelectParams args = p;
    void* kargs[] = {&args};
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&select_single_kernel), grid,
                                       dim3(kThreads), kargs, 0, stream);
  }
  if (hist) {
    err = cudaMemsetAsync(p.hist, 0, sizeof(int) * kPasses * num_heads * kBins, stream);
    if (err != cudaSuccess) return err;
    for (int pass = 0; pass < kPasses; ++pass) {
      histogram_kernel<<<grid, kThreads, 0, stream>>>(p, pass, false);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
  }
  count_kernel<<<grid, kThreads, 0, stream>>>(p);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  write_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

size_t select_uniform_scratch_bytes(int num_heads, int64_t n) {
  const size_t segs = static_cast<size_t>(segments_of(n));
  return sizeof(int) * (static_cast<size_t>(kPasses) * num_heads * kBins + 2 * num_heads * segs) +
         sizeof(SelectState) * num_heads + 64;
}

cudaError_t launch_select_uniform(const float* scores, int num_heads, int64_t n, int64_t n_keep,
                                  int sink, int window, int32_t* kept, void* scratch,
                                  size_t scratch_bytes, cudaStream_t stream) {
  if (num_heads <= 0 || num_heads > 65535 || n_keep > n || n_keep < 0 || sink < 0 || window < 0)
    return cudaErrorInvalidValue;
  const int64_t s = sink < n ? sink : n;
  const int64_t wdw = window < n ? window : n;
  const int64_t n_protected = s + wdw > n ? n : s + wdw;
  if (n_keep < n_protected) return cudaErrorInvalidValue;
  if (n == 0 || n_keep == 0) return cudaSuccess;
  if (scratch_bytes < select_uniform_scratch_bytes(num_heads, n)) return cudaErrorInvalidValue;
  SelectParams p;
  p.scores = scores;
  p.n = n;
  p.n_keep = n_keep;
  p.n_protected = n_protected;
  p.sink = sink;
  p.window = window;
  p.segments = segments_of(n);
  p.hist = static_cast<int*>(scratch);
  p.seg_keep = p.hist + static_cast<size_t>(kPasses) * num_heads * kBins;
  p.seg_eq = p.seg_keep + static_cast<size_t>(num_heads) * p.segments;
  const uintptr_t st =
      reinterpret_cast<uintptr_t>(p.seg_eq + static_cast<size_t>(num_heads) * p.segments);
  p.state = reinterpret_cast<SelectState*>((st + 15) / 16 * 16);
  p.kept = kept;
  const int64_t k_free = n_keep - n_protected, n_free = n - n_protected;
  return run_passes(p, num_heads, /*hist=*/k_free > 0 && k_free < n_free, stream);
}

namespace {
// Carves the general path's scratch; the same walk sizes it (ptr == nullptr).
struct GeneralScratch {
  char* base = nullptr;  // select_uniform_scratch_bytes: per-head histograms, segment counts
  int* layer_hist = nullptr;
  SelectState* layer_state = nullptr;
  int* head_gt = nullptr;
  int64_t* head_keep = nullptr;
  float* scores_copy = nullptr;  // two stages only
  int32_t* kept1 = nullptr;
  int64_t *keep1 = nullptr, *off1 = nullptr;
  size_t bytes = 0;
};
GeneralScratch carve_general(void* ptr, int num_heads, int64_t n, int64_t n_keep, bool two_stage) {
  GeneralScratch g;
  char* p = static_cast<char*>(ptr);
  size_t used = 0;
  auto take = [&](size_t bytes) {
    used = (used + 255) / 256 * 256;
    char* r = p ? p + used : nullptr;
    used += bytes;
    return r;
  };
  g.base = take(select_uniform_scratch_bytes(num_heads, n));
  g.layer_hist = reinterpret_cast<int*>(take(sizeof(int) * kPasses * kBins));
  g.layer_state = reinterpret_cast<SelectState*>(take(sizeof(SelectState)));
  g.head_gt = reinterpret_cast<int*>(take(sizeof(int) * num_heads));
  g.head_keep = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * num_heads));
  if (two_stage) {
    g.scores_copy = reinterpret_cast<float*>(take(sizeof(float) * num_heads * n));
    g.kept1 = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * num_heads * n_keep));
    g.keep1 = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * num_heads));
    g.off1 = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * (num_heads + 1)));
  }
  g.bytes = used;
  return g;
}
}  // namespace

size_t select_scratch_bytes(int num_heads, int64_t n, int64_t n_keep, bool two_stage) {
  return carve_general(nullptr, num_heads, n, n_keep, two_stage).bytes;
}

cudaError_t launch_select(const float* scores, const float* aux, int num_heads, int64_t n,
                          int64_t n_keep, int sink, int window, bool adakv, double alpha,
                          int32_t* kept, int64_t* offsets, void* scratch, size_t scratch_bytes,
                          cudaStream_t stream) {
  if (num_heads <= 0 || num_heads > kMaxLayerHeads || n_keep > n || n_keep < 0 || sink < 0 ||
      window < 0 || !(alpha >= 0.0 && alpha <= 1.0) ||
      static_cast<int64_t>(num_heads) * n > (int64_t{1} << 31) - 1)
    return cudaErrorInvalidValue;
  const int64_t s = sink < n ? sink : n;
  const int64_t wdw = window < n ? window : n;
  const int64_t n_protected = s + wdw > n ? n : s + wdw;
  if (n_keep < n_protected) return cudaErrorInvalidValue;
  const bool two_stage = aux != nullptr;
  const GeneralScratch g = carve_general(scratch, num_heads, n, n_keep, two_stage);
  if (scratch_bytes < g.bytes) return cudaErrorInvalidValue;
  cudaError_t err;
  SelectParams p;
  p.scores = scores;
  p.n = n;
  p.n_keep = n_keep;
  p.n_protected = n_protected;
  p.sink = sink;
  p.window = window;
  p.segments = segments_of(n);
  p.hist = reinterpret_cast<int*>(g.base);
  p.seg_keep = p.hist + static_cast<size_t>(kPasses) * num_heads * kBins;
  p.seg_eq = p.seg_keep + static_cast<size_t>(num_heads) * p.segments;
  const uintptr_t st =
      reinterpret_cast<uintptr_t>(p.seg_eq + static_cast<size_t>(num_heads) * p.segments);
  p.state = reinterpret_cast<SelectState*>((st + 15) / 16 * 16);
  const dim3 grid(p.segments, num_heads);
  const int64_t B = n_keep - n_protected, n_free = n - n_protected;
  if (n == 0) return cudaMemsetAsync(offsets, 0, sizeof(int64_t) * (num_heads + 1), stream);
  if (adakv && B > 0 && B < n_free) {
    // Layer histogram over the free tokens of every head: threshold of the Hkv * B-th best.
    p.layer_hist = g.layer_hist;
    p.layer_need = static_cast<int64_t>(num_heads) * B;
    p.layer_state = g.layer_state;
    p.head_gt = g.head_gt;
    if (g_single_launch.load(std::memory_order_relaxed) &&
        static_cast<int64_t>(p.segments) * num_heads <= layer_single_capacity()) {
      SelectParams args = p;
      int heads = num_heads;
      int64_t b = B;
      double al = alpha;
      int64_t* keep_out = g.head_keep;
      void* kargs[] = {&args, &heads, &b, &al, &keep_out, &offsets};
      err = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&layer_single_kernel), grid,
                                        dim3(kThreads), kargs, 0, stream);
      if (err != cudaSuccess) return err;
    } else {
      if ((err = cudaMemsetAsync(g.layer_hist, 0, sizeof(int) * kPasses * kBins, stream)) !=
              cudaSuccess ||
          (err = cudaMemsetAsync(g.head_gt, 0, sizeof(int) * num_heads, stream)) != cudaSuccess)
        return err;
      for (int pass = 0; pass < kPasses; ++pass) {
        histogram_kernel<<<grid, kThreads, 0, stream>>>(p, pass, true);
        if ((err = cudaGetLastError()) != cudaSuccess) return err;
      }
      layer_count_kernel<<<grid, kThreads, 0, stream>>>(p);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
      layer_budget_kernel<<<1, kThreads, 0, stream>>>(p, num_heads, B, alpha, g.head_keep, offsets);
    }
  } else {
    // Uniform budgets (adakv with B <= 0 or B >= the free tokens gives every head the same).
    uniform_budget_kernel<<<1, 256, 0, stream>>>(num_heads, n_keep, g.head_keep, offsets);
  }
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  p.head_keep = g.head_keep;
  p.out_offsets = offsets;
  if (two_stage) {
    SelectParams s1 = p;
    s1.scores = aux;
    s1.kept = g.kept1;
    s1.head_keep = g.keep1;
    s1.out_offsets = g.off1;
    stage1_budget_kernel<<<1, 32, 0, stream>>>(num_heads, n_protected, g.head_keep, g.keep1,
                                               g.off1);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    if ((err = run_passes(s1, num_heads, true, stream)) != cudaSuccess) return err;
    if ((err = cudaMemcpyAsync(g.scores_copy, scores, sizeof(float) * num_heads * n,
                               cudaMemcpyDeviceToDevice, stream)) != cudaSuccess)
      return err;
    const int64_t max_rows = static_cast<int64_t>(num_heads) * n_keep;
    if (max_rows > 0) {
      mark_kept_kernel<<<static_cast<unsigned>((max_rows + 255) / 256), 256, 0, stream>>>(
          g.scores_copy, n, num_heads, g.kept1, g.off1);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
    p.scores = g.scores_copy;
  }
  p.kept = kept;
  return run_passes(p, num_heads, true, stream);
}

void set_select_single_launch(bool enabled) {
  g_single_launch.store(enabled);
}

}  // namespace kvevict::cuda::detail
