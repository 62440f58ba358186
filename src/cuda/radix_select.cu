// Uniform-budget selection: per KV head, a radix select on the float bits finds the threshold
// score of the k-th best unprotected token, then an ordered pass writes the kept indices.
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
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

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
  int* hist;            // [kPasses][H][kBins]
  int* seg_keep;        // [H][segments] protected or above the threshold
  int* seg_eq;          // [H][segments] free and equal to the threshold
  SelectState* state;   // [H]
  int32_t* kept;        // [H, n_keep]
  // Optional fused compaction (k == nullptr: none): rows of `chunks` 16-byte pieces.
  const char* k = nullptr;  // [H, n, d] keys, head / row strides in bytes
  const char* v = nullptr;  // [H, n, d] values
  int64_t head_stride_b = 0, row_stride_b = 0;
  int chunks = 0;
  const int32_t* pos = nullptr;  // [H, n] original positions or null (identity)
  int64_t pos_head_stride = 0;
  char* out_k = nullptr;     // [H, n_keep, d]
  char* out_v = nullptr;     // [H, n_keep, d]
  int32_t* out_pos = nullptr;  // [H, n_keep]
};

using Scan = cub::BlockScan<int, kThreads>;

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool is_protected(int64_t j, int64_t n, int sink, int window) {
  return j < sink || j >= n - window;
}

// Walks passes 0..passes-1 of head h's histograms: prefix of the threshold and the rank still
// needed inside it. Block-wide; every thread returns the same values.
__device__ void resolve(const SelectParams& p, int h, int passes, typename Scan::TempStorage& tmp,
                        uint32_t* s_prefix, int* s_need) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    *s_prefix = 0;
    *s_need = static_cast<int>(p.n_keep - p.n_protected);
  }
  __syncthreads();
  for (int pass = 0; pass < passes; ++pass) {
    const int nb = 1 << kWidth[pass];
    const int* hist = p.hist + (static_cast<int64_t>(pass) * gridDim.y + h) * kBins;
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
}

__global__ void __launch_bounds__(kThreads) histogram_kernel(SelectParams p, int pass) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int hist_s[kBins];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x;
  for (int b = tid; b < kBins; b += kThreads) hist_s[b] = 0;
  resolve(p, h, pass, tmp, &s_prefix, &s_need);  // syncs
  const uint32_t prefix = s_prefix;
  const int shift = kShift[pass];
  const uint32_t high_mask = pass == 0 ? 0u : (0xffffffffu << (shift + kWidth[pass]));
  const uint32_t digit_mask = (1u << kWidth[pass]) - 1;
  const float* row = p.scores + static_cast<int64_t>(h) * p.n;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSegment;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t j = base + i * kThreads + tid;  // coalesced
    uint32_t bin = 0xffffffffu;
    if (j < p.n && !is_protected(j, p.n, p.sink, p.window)) {
      const uint32_t key = order_key(row[j]);
      if ((key & high_mask) == (prefix & high_mask)) bin = (key >> shift) & digit_mask;
    }
    // Scores cluster in few bins (the top bits are sign and exponent): aggregate equal bins of a
    // warp into one shared atomic instead of 32 colliding ones.
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin != 0xffffffffu && (threadIdx.x & 31) == __ffs(peers) - 1)
      atomicAdd(&hist_s[bin], __popc(peers));
  }
  __syncthreads();
  int* hist = p.hist + (static_cast<int64_t>(pass) * gridDim.y + h) * kBins;
  for (int b = tid; b < (1 << kWidth[pass]); b += kThreads)
    if (hist_s[b] != 0) atomicAdd(&hist[b], hist_s[b]);
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

__global__ void __launch_bounds__(kThreads) count_kernel(SelectParams p, bool keep_all,
                                                         bool keep_none) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const int h = blockIdx.y, tid = threadIdx.x;
  uint32_t threshold = 0;
  if (!keep_all && !keep_none) {
    resolve(p, h, kPasses, tmp, &s_prefix, &s_need);
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
  int keep_total, eq_total, dummy;
  Scan(tmp).ExclusiveSum(keep, dummy, keep_total);
  __syncthreads();
  Scan(tmp).ExclusiveSum(eq, dummy, eq_total);
  if (tid == 0) {
    p.seg_keep[h * p.segments + blockIdx.x] = keep_total;
    p.seg_eq[h * p.segments + blockIdx.x] = eq_total;
  }
}

__global__ void __launch_bounds__(kThreads) write_kernel(SelectParams p, bool keep_all,
                                                         bool keep_none) {
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int64_t s_out, s_eq_before;
  const int h = blockIdx.y, tid = threadIdx.x, seg = blockIdx.x;
  uint32_t threshold = 0;
  int need = 0;
  if (!keep_all && !keep_none) {
    threshold = p.state[h].threshold;
    need = p.state[h].need_equal;
  }
  if (tid == 0) {  // slots used by earlier segments
    int64_t out = 0, eq_before = 0;
    for (int s = 0; s < seg; ++s) {
      const int e = p.seg_eq[h * p.segments + s];
      const int64_t left = need - eq_before;
      out += p.seg_keep[h * p.segments + s] + (left <= 0 ? 0 : (left < e ? left : e));
      eq_before += e;
    }
    s_out = out;
    s_eq_before = eq_before;
  }
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
  int64_t rank = s_eq_before + eq_rank;
  int keep = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (cls[i] == 2) cls[i] = rank++ < need ? 1 : 0;
    keep += cls[i] == 1;
  }
  __syncthreads();
  int slot_in_block;
  Scan(tmp).ExclusiveSum(keep, slot_in_block);
  int64_t slot = s_out + slot_in_block;
  int32_t* out = p.kept + static_cast<int64_t>(h) * p.n_keep;
  int64_t slots[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    slots[i] = slot;
    if (cls[i] == 1) {
      if (slot < p.n_keep) out[slot] = static_cast<int32_t>(base + i);
      ++slot;
    }
  }
  if (p.k == nullptr) return;
  // Fused compaction: the warp copies its kept rows one at a time, a 16-byte chunk per lane
  // (d = 128 bf16: 16 chunks of K + 16 of V = one chunk per lane), so rows stay coalesced
  // however unevenly the kept tokens fall on the threads.
  const int lane = tid & 31;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    unsigned mask = __ballot_sync(0xffffffffu, cls[i] == 1 && slots[i] < p.n_keep);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const int64_t j = __shfl_sync(0xffffffffu, base + i, src);
      const int64_t r = static_cast<int64_t>(h) * p.n_keep + __shfl_sync(0xffffffffu, slots[i], src);
      for (int c = lane; c < 2 * p.chunks; c += 32) {
        const bool is_v = c >= p.chunks;
        const int cc = is_v ? c - p.chunks : c;
        const char* from = (is_v ? p.v : p.k) + h * p.head_stride_b + j * p.row_stride_b + cc * 16;
        char* to = (is_v ? p.out_v : p.out_k) + (r * p.chunks + cc) * 16;
        *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
      }
      if (lane == 0 && p.out_pos != nullptr)
        p.out_pos[r] = p.pos ? p.pos[h * p.pos_head_stride + j] : static_cast<int32_t>(j);
    }
  }
}

int segments_of(int64_t n) { return static_cast<int>((n + kSegment - 1) / kSegment); }

}  // namespace

size_t select_uniform_scratch_bytes(int num_heads, int64_t n) {
  const size_t segs = static_cast<size_t>(segments_of(n));
  return sizeof(int) * (static_cast<size_t>(kPasses) * num_heads * kBins + 2 * num_heads * segs) +
         sizeof(SelectState) * num_heads + 64;
}

cudaError_t launch_select_uniform(const float* scores, int num_heads, int64_t n, int64_t n_keep,
                                  int sink, int window, int32_t* kept, void* scratch,
                                  size_t scratch_bytes, cudaStream_t stream,
                                  const FusedCompaction* fused) {
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
  const uintptr_t st = reinterpret_cast<uintptr_t>(p.seg_eq + static_cast<size_t>(num_heads) * p.segments);
  p.state = reinterpret_cast<SelectState*>((st + 15) / 16 * 16);
  p.kept = kept;
  if (fused != nullptr) {
    if ((static_cast<int64_t>(fused->d) * fused->elem_bytes) % 16 != 0) return cudaErrorInvalidValue;
    p.k = static_cast<const char*>(fused->k);
    p.v = static_cast<const char*>(fused->v);
    p.head_stride_b = fused->head_stride * fused->elem_bytes;
    p.row_stride_b = fused->row_stride * fused->elem_bytes;
    p.chunks = fused->d * fused->elem_bytes / 16;
    p.pos = fused->pos;
    p.pos_head_stride = fused->pos_head_stride;
    p.out_k = static_cast<char*>(fused->out_k);
    p.out_v = static_cast<char*>(fused->out_v);
    p.out_pos = fused->out_pos;
  }
  const int64_t k_free = n_keep - n_protected, n_free = n - n_protected;
  const bool keep_none = k_free <= 0, keep_all = k_free >= n_free;
  const dim3 grid(p.segments, num_heads);
  cudaError_t err;
  if (!keep_none && !keep_all) {
    err = cudaMemsetAsync(p.hist, 0, sizeof(int) * kPasses * num_heads * kBins, stream);
    if (err != cudaSuccess) return err;
    for (int pass = 0; pass < kPasses; ++pass) {
      histogram_kernel<<<grid, kThreads, 0, stream>>>(p, pass);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
  }
  count_kernel<<<grid, kThreads, 0, stream>>>(p, keep_all, keep_none);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  write_kernel<<<grid, kThreads, 0, stream>>>(p, keep_all, keep_none);
  return cudaGetLastError();
}

}  // namespace kvevict::cuda::detail
