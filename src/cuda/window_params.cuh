// What the window kernels share (forward and scoring pass; mma.sync and wgmma variants): the
// launch parameters, the causal geometry of the window rows, and the wgmma launchers' entry
// points (window_forward_wgmma.cu, score_pass_wgmma.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/launchers.h"

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
  void* part_o = nullptr;
  float* part_ml = nullptr;  // [Hkv, row_blocks, splits, kRows, 2] (max in log2 units, sum)
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
// tile_max holds the thread's max of each row's raw logits; reduced over the row's 4 lanes, it
// moves the running max m_run, rescales the running sum l_run, and returns in m_c the shift of this
// tile's exponents (max in log2 units, sc = scale log2 e) and in corr the factor for the output
// accumulators. Returns whether some row's max grew (the caller skips rescaling otherwise).
__device__ __forceinline__ bool online_max_step(float (&tile_max)[2], float (&m_run)[2],
                                                float (&l_run)[2], float sc, float (&m_c)[2],
                                                float (&corr)[2]) {
  bool grew = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run[r], mx);
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
bool wgmma_pass_supported(const ScorePassArgs& s, int rows_per_block);
cudaError_t launch_pass_wgmma(const PassParams& p, int rows_per_block, int chunks,
                              cudaStream_t stream);
// The key-major pass (score_pass_keymajor.cu): every term but obcache_vk (and not vatp's ||v||_1),
// bf16, 64 or 128 rows a block of two warpgroups (one block per SM), head dim 64 or 128; off by
// cuda::set_window_keymajor.
bool keymajor_pass_supported(const ScorePassArgs& s, int rows_per_block);
cudaError_t launch_pass_keymajor(const PassParams& p, int rows_per_block, int chunks,
                                 cudaStream_t stream);

}  // namespace kvevict::cuda::detail
