// Decode-time cut of over-long segments (SPEC section 5; Backend::cut_segments on the GPU), in
// place, one block per cut segment, every sequence and head of a batch in one launch.
//
// A segment of L rows keeps N: its `sink` lowest and `recent` highest positions (protected),
// plus the M = N - sink - recent highest accumulators of the others, ties toward the lower
// position. These are the rules of kvevict::select_head on a host cache (whose rows are in
// position order, so "lowest / highest positions" are its first / last rows); here they are
// stated by position because the GPU cut does not keep rows in order:
//
//   holes  = evicted rows below the new end N,  movers = kept rows at N or after;
//   |holes| = |movers| (N rows are kept in all), and the i-th mover moves into the i-th hole.
//
// Each row moves at most once and only kept rows past the new end move, so a cut of e rows
// moves at most e rows (a stable compaction would move every row after the first hole: at
// slack 0 that is about half the cache every step). Holes and movers are disjoint, so the moves
// need no ordering among themselves.
//
// Selections are radix selects on 32-bit keys, 8 bits a pass, in shared memory: the sink-th
// lowest and recent-th highest position (positions are unique), the M-th highest order key of
// the free accumulators (the float order as unsigned order, as radix_select.cu), and, when keys
// tie at that threshold, the lowest positions among the tied. A segment's positions and
// accumulators are staged in shared memory when they fit (kStageRows), else read from global
// memory in every pass.
#include <cuda_runtime.h>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/launchers.h"

namespace kvevict::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kStageRows = 12288;  // 96 KB of staged pos + acc per block

using Scan = cub::BlockScan<int, kThreads>;

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct SegmentRows {
  const int32_t* pos;  // [L] staged or global
  const float* acc;    // [L]
  int64_t L;
};

// Shared state of one block's selection passes.
struct CutShared {
  int hist[256];
  uint32_t prefix;
  int64_t remaining;
  int count;
};

// The k-th highest (k >= 1) of key(i) over the rows i with pred(i): returns K with
// count(key > K) < k <= count(key >= K), and sets *rank_in_ties = k - count(key > K) (how many
// rows with key == K belong to the top k). Every thread returns the same values.
template <class KeyFn, class PredFn>
__device__ uint32_t block_kth_highest(int64_t L, int64_t k, KeyFn key, PredFn pred, CutShared& sh,
                                      int64_t* rank_in_ties) {
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) sh.remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    // Keys cluster in few bins (positions share their high bits, scores their exponent): the
    // lanes of a warp with the same bin add once (the whole loop runs warp-uniformly).
    for (int64_t base = 0; base < L; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      int bin = -1;
      if (i < L && pred(i)) {
        const uint32_t x = key(i);
        if ((x & mask) == prefix) bin = static_cast<int>((x >> shift) & 255u);
      }
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1)
        atomicAdd(&sh.hist[bin], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t left = sh.remaining;
      int digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (sh.hist[b] >= left) {
          digit = b;
          break;
        }
        left -= sh.hist[b];
      }
      sh.remaining = left;
      sh.prefix = prefix | (static_cast<uint32_t>(digit) << shift);
    }
    __syncthreads();
    prefix = sh.prefix;
    mask |= 255u << shift;
  }
  *rank_in_ties = sh.remaining;
  __syncthreads();  // sh is reused by the next selection
  return prefix;
}

// Number of rows with pred(i), on every thread.
template <class PredFn>
__device__ int block_count(int64_t L, PredFn pred, CutShared& sh) {
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  int c = 0;
  for (int64_t i = threadIdx.x; i < L; i += blockDim.x) c += pred(i) ? 1 : 0;
  atomicAdd(&sh.count, c);
  __syncthreads();
  const int total = sh.count;
  __syncthreads();
  return total;
}

// stage_rows > 0: pos and acc of the segment are staged in shared memory ([stage_rows] each).
__global__ void __launch_bounds__(kThreads)
    segment_cut_kernel(SegmentCutArgs a, int32_t* holes, int64_t holes_per_segment,
                       int64_t stage_rows) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ CutShared sh;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int chunk_base;
  const int s = a.heads[blockIdx.x];
  const int64_t base = a.off[s];
  const int64_t L = a.len[s];
  const int64_t N = a.keep;
  if (L <= N) return;  // nothing over budget (the host plans only over-long segments)
  int32_t* g_pos = a.pos + base;
  float* g_acc = a.acc + base;
  SegmentRows rows{g_pos, g_acc, L};
  if (stage_rows > 0) {
    auto* s_pos = reinterpret_cast<int32_t*>(smem);
    auto* s_acc = reinterpret_cast<float*>(smem + stage_rows * sizeof(int32_t));
    for (int64_t i = threadIdx.x; i < L; i += blockDim.x) {
      s_pos[i] = g_pos[i];
      s_acc[i] = g_acc[i];
    }
    __syncthreads();
    rows.pos = s_pos;
    rows.acc = s_acc;
  }
  const int32_t* pos = rows.pos;
  const float* acc = rows.acc;
  int64_t ties = 0;
  // Protected rows: the `sink` lowest and `recent` highest positions (unique positions).
  int32_t sink_last = -1;          // pos <= sink_last: a sink
  int32_t recent_first = INT_MAX;  // pos >= recent_first: recent
  auto all = [](int64_t) { return true; };
  if (a.sink > 0)
    sink_last = static_cast<int32_t>(~block_kth_highest(
        L, a.sink, [&](int64_t i) { return ~static_cast<uint32_t>(pos[i]); }, all, sh, &ties));
  if (a.recent > 0)
    recent_first = static_cast<int32_t>(block_kth_highest(
        L, a.recent, [&](int64_t i) { return static_cast<uint32_t>(pos[i]); }, all, sh, &ties));
  auto is_free = [&](int64_t i) { return pos[i] > sink_last && pos[i] < recent_first; };
  // The M highest free accumulators; `need_eq` of the rows at the threshold key are kept, the
  // lowest positions first.
  const int64_t M = N - a.sink - a.recent;
  uint32_t threshold = UINT32_MAX;
  bool keep_none = M <= 0;
  int32_t tie_last = INT_MAX;  // a free row with key == threshold is kept iff pos <= tie_last
  if (!keep_none) {
    int64_t need_eq = 0;
    auto score_key = [&](int64_t i) { return order_key(acc[i]); };
    threshold = block_kth_highest(L, M, score_key, is_free, sh, &need_eq);
    auto tied = [&](int64_t i) { return is_free(i) && order_key(acc[i]) == threshold; };
    const int n_eq = block_count(L, tied, sh);
    if (need_eq < n_eq)
      tie_last = static_cast<int32_t>(~block_kth_highest(
          L, need_eq, [&](int64_t i) { return ~static_cast<uint32_t>(pos[i]); }, tied, sh, &ties));
  }
  auto kept = [&](int64_t i) {
    if (!is_free(i)) return true;
    if (keep_none) return false;
    const uint32_t x = order_key(acc[i]);
    return x > threshold || (x == threshold && pos[i] <= tie_last);
  };
  // Holes: evicted rows below N, numbered in row order.
  int32_t* seg_holes = holes + static_cast<int64_t>(blockIdx.x) * holes_per_segment;
  if (threadIdx.x == 0) chunk_base = 0;
  __syncthreads();
  for (int64_t c0 = 0; c0 < N; c0 += kThreads) {
    const int64_t i = c0 + threadIdx.x;
    const int hole = i < N && !kept(i) ? 1 : 0;
    int rank, total;
    Scan(scan).ExclusiveSum(hole, rank, total);
    if (hole) seg_holes[chunk_base + rank] = static_cast<int32_t>(i);
    __syncthreads();
    if (threadIdx.x == 0) chunk_base += total;
    __syncthreads();
  }
  // Movers: kept rows at N or after, in row order; the r-th fills the r-th hole. One warp per
  // mover row (16-byte chunks across the lanes), pos and acc by lane 0. The staged copies of
  // pos/acc are only read, so they stay valid while the global rows move.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunks = a.row_bytes / 16;
  if (threadIdx.x == 0) chunk_base = 0;
  __syncthreads();
  for (int64_t c0 = N; c0 < L; c0 += kThreads) {
    const int64_t i = c0 + threadIdx.x;
    const int mover = i < L && kept(i) ? 1 : 0;
    int rank, total;
    Scan(scan).ExclusiveSum(mover, rank, total);
    const int first = chunk_base;
    // Each warp walks the movers of its 32 rows one at a time.
    unsigned mask = __ballot_sync(0xffffffffu, mover);
    while (mask) {
      const int src_lane = __ffs(mask) - 1;
      mask &= mask - 1;
      const int64_t src = c0 + warp * 32 + src_lane;
      const int r = __shfl_sync(0xffffffffu, rank, src_lane);
      const int64_t dst = seg_holes[first + r];
      char* k_row = a.k + (base + src) * a.row_bytes;
      char* v_row = a.v + (base + src) * a.row_bytes;
      char* k_dst = a.k + (base + dst) * a.row_bytes;
      char* v_dst = a.v + (base + dst) * a.row_bytes;
      for (int c = lane; c < chunks; c += 32) {
        reinterpret_cast<uint4*>(k_dst)[c] = reinterpret_cast<const uint4*>(k_row)[c];
        reinterpret_cast<uint4*>(v_dst)[c] = reinterpret_cast<const uint4*>(v_row)[c];
      }
      if (lane == 0) {
        g_pos[dst] = pos[src];
        g_acc[dst] = acc[src];
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) chunk_base += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) a.len[s] = static_cast<int32_t>(N);
}

}  // namespace

size_t segment_cut_scratch_bytes(int m, int64_t max_len) {
  return static_cast<size_t>(m > 0 ? m : 0) * static_cast<size_t>(max_len > 0 ? max_len : 0) *
             sizeof(int32_t) +
         16;
}

cudaError_t launch_segment_cut(const SegmentCutArgs& a, void* scratch, size_t scratch_bytes,
                               cudaStream_t stream) {
  if (a.m < 0 || a.keep < 0 || a.sink < 0 || a.recent < 0 || a.row_bytes <= 0 ||
      a.row_bytes % 16 != 0 || a.keep < static_cast<int64_t>(a.sink) + a.recent || a.max_len < 0 ||
      a.max_len > INT_MAX)
    return cudaErrorInvalidValue;
  if (a.m == 0) return cudaSuccess;
  if (scratch_bytes < segment_cut_scratch_bytes(a.m, a.max_len)) return cudaErrorInvalidValue;
  const int64_t stage_rows = a.max_len <= kStageRows ? (a.max_len + 3) / 4 * 4 : 0;
  const size_t smem = static_cast<size_t>(stage_rows) * 8;
  if (smem > 48 * 1024) {
    const cudaError_t err = set_kernel_smem(segment_cut_kernel, smem);
    if (err != cudaSuccess) return err;
  }
  // Holes of one segment: at most its evicted rows, below max_len.
  segment_cut_kernel<<<a.m, kThreads, smem, stream>>>(a, static_cast<int32_t*>(scratch), a.max_len,
                                                      stage_rows);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
