// Selection of SPEC section 3 on the GPU: per KV head, a radix select on the float bits finds the
// threshold score of the k-th best unprotected token, then an ordered pass writes the kept
// indices. Per-head budgets (head_keep / out_offsets) serve adakv and criticalkv's stage 1;
// adakv's budgets come from the same radix machinery run over the whole layer (layer_*), and
// criticalkv's stage 2 reruns the select on a copy of the scores with stage-1 rows at +inf.
// Both run as phases of one kernel body (select_phases): ONE cooperative launch with grid
// barriers between the phases when the (segments x heads) grid fits on the GPU at once, else one
// launch a phase (docs/GPU_NOTES.md v6).
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
  int heads;            // H
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

// How a selection's phases run: ONE cooperative launch with grid barriers between them (kSingle,
// when the segments x heads grid fits on the GPU at once: the scores are read once into
// registers and the launch gaps vanish; at a 5% budget of n = 128K the multi-launch path spent
// 0.041 ms, mostly in those gaps), or one launch a phase (kMulti, any grid). Both run the body
// below; kMulti re-reads the keys and re-walks the earlier passes' digits in every launch.
enum class Launch { kSingle, kMulti };

// The phases in order: zero the global histograms and counts, one histogram a radix pass, the
// counts at the threshold, then the ordered write (per head) or the budgets (the layer).
constexpr int kZero = 0;
constexpr int kHist = 1;  // kHist + pass
constexpr int kCount = kHist + kPasses;
constexpr int kWrite = kCount + 1;

// adakv's layer phase: the budgets it writes (block (0, 0) of its last phase).
struct LayerBudget {
  int64_t B = 0;  // free tokens a head keeps on average
  double alpha = 0.0;
  int64_t* head_keep = nullptr;    // [H]
  int64_t* out_offsets = nullptr;  // [H + 1]
};

// A block's tokens (blocked: a thread owns kItems consecutive ones, the order the ordered write
// needs; the histograms and counts are order-free) as order keys, and which of them are free (in
// range, unprotected: bit i) or protected (bit 16 + i).
struct BlockKeys {
  uint32_t key[kItems];
  uint32_t kind = 0;
  __device__ bool is_free(int i) const { return (kind >> i) & 1u; }
  __device__ bool is_protected(int i) const { return (kind >> (16 + i)) & 1u; }
};
__device__ __forceinline__ void load_keys(const SelectParams& p, int h, int64_t first,
                                          BlockKeys& b) {
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t j = first + i;
    b.key[i] = 0;
    if (j < p.n) {
      if (is_protected(j, p.n, p.sink, p.window)) {
        b.kind |= 1u << (16 + i);
      } else {
        b.kind |= 1u << i;
        b.key[i] = order_key(row[j]);
      }
    }
  }
}

// Zeroes the histograms and counts the atomics of later phases add to (every block a slice).
template <bool kLayer>
__device__ void zero_phase(const SelectParams& p) {
  const int64_t blocks = static_cast<int64_t>(gridDim.x) * gridDim.y;
  const int64_t bid = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t hist_ints = kLayer ? int64_t{kPasses} * kBins : int64_t{kPasses} * p.heads * kBins;
  const int64_t total = hist_ints + (kLayer ? p.heads : 0);
  int* hist = kLayer ? p.layer_hist : p.hist;
  for (int64_t i = bid * kThreads + threadIdx.x; i < total; i += blocks * kThreads) {
    if (i < hist_ints)
      hist[i] = 0;
    else
      p.head_gt[i - hist_ints] = 0;
  }
}

// One radix pass: the histogram of the pass's digit over the free keys whose higher digits equal
// the threshold's found so far (prefix), added to the global histogram hist.
__device__ void histogram_phase(const BlockKeys& b, int pass, uint32_t prefix, int* hist_s,
                                int* hist) {
  const int tid = threadIdx.x;
  const int shift = kShift[pass];
  const uint32_t high_mask = pass == 0 ? 0u : (0xffffffffu << (shift + kWidth[pass]));
  const uint32_t digit_mask = (1u << kWidth[pass]) - 1;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    uint32_t bin = 0xffffffffu;
    if (b.is_free(i) && (b.key[i] & high_mask) == (prefix & high_mask))
      bin = (b.key[i] >> shift) & digit_mask;
    // Scores cluster in few bins (the top bits are sign and exponent): aggregate equal bins of a
    // warp into one shared atomic instead of 32 colliding ones.
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin != 0xffffffffu && (tid & 31) == __ffs(peers) - 1)
      atomicAdd(&hist_s[bin], __popc(peers));
  }
  __syncthreads();
  for (int bin = tid; bin < (1 << kWidth[pass]); bin += kThreads)
    if (hist_s[bin] != 0) atomicAdd(&hist[bin], hist_s[bin]);
}

// A head's keep flags given its threshold: cls[i] = 1 kept unconditionally, 2 tie candidate;
// keep_total / eq_total over the block, eq_rank this thread's ties before its own.
struct BlockClasses {
  int cls[kItems];
  int keep_total, eq_total, eq_rank;
};
__device__ void classify_phase(const BlockKeys& b, HeadMode mode, uint32_t threshold,
                               typename Scan::TempStorage& tmp, BlockClasses& c) {
  int keep = 0, eq = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    c.cls[i] = 0;
    if (b.is_protected(i))
      c.cls[i] = 1;
    else if (b.is_free(i) && !mode.keep_none)
      c.cls[i] = mode.keep_all ? 1 : (b.key[i] > threshold ? 1 : (b.key[i] == threshold ? 2 : 0));
    keep += c.cls[i] == 1;
    eq += c.cls[i] == 2;
  }
  __syncthreads();  // tmp may still be read by an earlier scan
  int unused;
  Scan(tmp).ExclusiveSum(keep, unused, c.keep_total);
  __syncthreads();
  Scan(tmp).ExclusiveSum(eq, c.eq_rank, c.eq_total);
}

// The ordered write of head h's segment: the slots used by earlier segments (their kept tokens
// and the ties they took), then every kept token of the block in position order.
__device__ void write_phase(const SelectParams& p, int h, int seg, int64_t first, int need,
                            BlockClasses& c, typename Scan::TempStorage& tmp, int64_t* s_out,
                            int64_t* s_eq_before) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    int64_t out = 0, eq_before = 0;
    for (int sg = 0; sg < seg; ++sg) {
      const int e = p.seg_eq[h * p.segments + sg];
      const int64_t left = need - eq_before;
      out += p.seg_keep[h * p.segments + sg] + (left <= 0 ? 0 : (left < e ? left : e));
      eq_before += e;
    }
    *s_out = out;
    *s_eq_before = eq_before;
  }
  __syncthreads();
  int64_t rank = *s_eq_before + c.eq_rank;
  int kept_here = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (c.cls[i] == 2) c.cls[i] = rank++ < need ? 1 : 0;
    kept_here += c.cls[i] == 1;
  }
  __syncthreads();
  int slot_in_block;
  Scan(tmp).ExclusiveSum(kept_here, slot_in_block);
  int64_t slot = *s_out + slot_in_block;
  const int64_t head_keep = keep_of(p, h);
  int32_t* out = p.kept + out_base(p, h);
#pragma unroll
  for (int i = 0; i < kItems; ++i)
    if (c.cls[i] == 1) {
      if (slot < head_keep) out[slot] = static_cast<int32_t>(first + i);
      ++slot;
    }
}

// Phases first..last of a selection (per head: kLayer = false; adakv's layer budgets: true) on
// block (segment, head). The threshold's digits are walked in shared memory: a block walks each
// pass's histogram once it is complete (kSingle keeps the walk across phases; a kMulti launch
// starts over from the global histograms).
template <Launch L, bool kLayer>
__device__ __forceinline__ void select_phases(const SelectParams& p, const LayerBudget& lb,
                                              int first, int last) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int hist_s[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int64_t s_out, s_eq_before;
  const int h = blockIdx.y, tid = threadIdx.x, seg = blockIdx.x;
  const HeadMode mode = kLayer ? HeadMode{false, false} : head_mode(p, h);
  const bool find = !(mode.keep_none || mode.keep_all);  // this head has a threshold to find
  int* hist0 = kLayer ? p.layer_hist : p.hist + static_cast<int64_t>(h) * kBins;
  const int64_t pass_stride = kLayer ? kBins : static_cast<int64_t>(p.heads) * kBins;
  const int64_t first_token =
      static_cast<int64_t>(seg) * kSegment + static_cast<int64_t>(tid) * kItems;
  BlockKeys keys;
  if (last >= kHist && !(kLayer && first == kWrite)) load_keys(p, h, first_token, keys);
  if (tid == 0) {
    s_prefix = 0;
    s_need = static_cast<int>(kLayer ? p.layer_need : keep_of(p, h) - p.n_protected);
  }
  __syncthreads();
  int walked = 0;  // passes whose digits s_prefix holds (block-uniform)
  auto walk_to = [&](int passes) {
    for (; walked < passes; ++walked)
      resolve_one(hist0 + walked * pass_stride, walked, tmp, &s_prefix, &s_need);
  };
  uint32_t threshold = 0;
  int need = 0;
  BlockClasses c;
  for (int phase = first; phase <= last; ++phase) {
    if (phase == kZero) {
      zero_phase<kLayer>(p);
    } else if (phase < kCount) {
      const int pass = phase - kHist;
      if (find) {
        for (int b = tid; b < kBins; b += kThreads) hist_s[b] = 0;
        walk_to(pass);  // syncs
        __syncthreads();
        histogram_phase(keys, pass, s_prefix, hist_s, hist0 + pass * pass_stride);
      }
    } else if (phase == kCount) {
      if (find) {
        walk_to(kPasses);
        threshold = s_prefix;
        need = s_need;
        if (seg == 0 && tid == 0 && (!kLayer || h == 0))
          *(kLayer ? p.layer_state : p.state + h) = {threshold, need};
      }
      if constexpr (kLayer) {  // per head: free tokens above the layer threshold, and equal to it
        int gt = 0, eq = 0;
#pragma unroll
        for (int i = 0; i < kItems; ++i)
          if (keys.is_free(i)) {
            gt += keys.key[i] > threshold;
            eq += keys.key[i] == threshold;
          }
        int gt_total, eq_total, unused;
        Scan(tmp).ExclusiveSum(gt, unused, gt_total);
        __syncthreads();
        Scan(tmp).ExclusiveSum(eq, unused, eq_total);
        if (tid == 0) {
          if (gt_total != 0) atomicAdd(&p.head_gt[h], gt_total);  // integer sums: order-free
          p.seg_eq[h * p.segments + seg] = eq_total;
        }
      } else {
        classify_phase(keys, mode, threshold, tmp, c);
        if (tid == 0) {
          p.seg_keep[h * p.segments + seg] = c.keep_total;
          p.seg_eq[h * p.segments + seg] = c.eq_total;
        }
      }
    } else if constexpr (kLayer) {
      if (seg == 0 && h == 0)
        layer_budget_block(p, p.heads, lb.B, lb.alpha, lb.head_keep, lb.out_offsets);
    } else {
      if constexpr (L == Launch::kMulti) {  // the count phase ran in another launch
        if (find) {
          threshold = p.state[h].threshold;
          need = p.state[h].need_equal;
        }
        classify_phase(keys, mode, threshold, tmp, c);
      }
      write_phase(p, h, seg, first_token, need, c, tmp, &s_out, &s_eq_before);
    }
    if constexpr (L == Launch::kSingle) {
      if (phase < last) cooperative_groups::this_grid().sync();
    }
  }
}

template <Launch L, bool kLayer>
__global__ void __launch_bounds__(kThreads)
    select_kernel(SelectParams p, LayerBudget lb, int first, int last) {
  select_phases<L, kLayer>(p, lb, first, last);
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

std::atomic<bool> g_single_launch{true};

// Blocks of select_kernel<kSingle, kLayer> that fit on the current device at once (0: no
// cooperative launch). Cached per device.
template <bool kLayer>
int64_t single_launch_capacity() {
  static int64_t cached[64];
  static bool known[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (!known[dev]) {
    int coop = 0, sms = 0, per_sm = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, select_kernel<Launch::kSingle, kLayer>, kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 0;
    }
    cached[dev] = coop ? static_cast<int64_t>(per_sm) * sms : 0;
    known[dev] = true;
  }
  return cached[dev];
}

int segments_of(int64_t n) {
  return static_cast<int>((n + kSegment - 1) / kSegment);
}

// Phases first..kWrite of a selection (kLayer: adakv's layer budgets) over the segments x heads
// grid: one cooperative launch when it fits at once, else one launch a phase (the layer's budget
// phase on one block).
template <bool kLayer>
cudaError_t run_phases(const SelectParams& p, const LayerBudget& lb, int first,
                       cudaStream_t stream) {
  const dim3 grid(p.segments, p.heads);
  if (g_single_launch.load(std::memory_order_relaxed) &&
      static_cast<int64_t>(p.segments) * p.heads <= single_launch_capacity<kLayer>()) {
    SelectParams args = p;
    LayerBudget budget = lb;
    int from = first, to = kWrite;
    void* kargs[] = {&args, &budget, &from, &to};
    return cudaLaunchCooperativeKernel(
        reinterpret_cast<const void*>(&select_kernel<Launch::kSingle, kLayer>), grid,
        dim3(kThreads), kargs, 0, stream);
  }
  for (int phase = first; phase <= kWrite; ++phase) {
    const dim3 g = kLayer && phase == kWrite ? dim3(1, 1) : grid;
    select_kernel<Launch::kMulti, kLayer><<<g, kThreads, 0, stream>>>(p, lb, phase, phase);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// The per-head selection: from the threshold passes when `hist` (some head has a threshold to
// find), else from the counts.
cudaError_t run_passes(const SelectParams& p, bool hist, cudaStream_t stream) {
  return run_phases<false>(p, LayerBudget{}, hist ? kZero : kCount, stream);
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
  p.heads = num_heads;
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
  return run_passes(p, /*hist=*/k_free > 0 && k_free < n_free, stream);
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
  p.heads = num_heads;
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
  const int64_t B = n_keep - n_protected, n_free = n - n_protected;
  if (n == 0) return cudaMemsetAsync(offsets, 0, sizeof(int64_t) * (num_heads + 1), stream);
  if (adakv && B > 0 && B < n_free) {
    // Layer histogram over the free tokens of every head: threshold of the Hkv * B-th best.
    p.layer_hist = g.layer_hist;
    p.layer_need = static_cast<int64_t>(num_heads) * B;
    p.layer_state = g.layer_state;
    p.head_gt = g.head_gt;
    err = run_phases<true>(p, LayerBudget{B, alpha, g.head_keep, offsets}, kZero, stream);
    if (err != cudaSuccess) return err;
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
    if ((err = run_passes(s1, true, stream)) != cudaSuccess) return err;
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
  return run_passes(p, true, stream);
}

void set_select_single_launch(bool enabled) {
  g_single_launch.store(enabled);
}

}  // namespace kvevict::cuda::detail
