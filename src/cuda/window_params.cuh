// What the window kernels share (forward and scoring pass; mma.sync and wgmma variants): the
// launch parameters, the causal geometry of the window rows, and the wgmma launchers' entry
// points (window_forward_wgmma.cu, score_pass_wgmma.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launchers.h"

namespace kvevict::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct ForwardParams {
  WindowArgs a;
  int group = 1;
  int rows = 0;        // G * w
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

// The wgmma (sm_90a) kernels: 64 query rows a warpgroup, one or two warpgroups a block (rows_per_block
// 64 or 128, head dim 64 or 128). Each returns cudaErrorNotSupported for a configuration it does not
// build; the callers then launch the mma.sync kernels. wgmma_kernels_available(): whether this
// binary's kernels for the current device were compiled with wgmma (sm_90a).
bool wgmma_kernels_available();
// cuda::set_window_wgmma (score.h): false forces the mma.sync kernels.
bool window_wgmma_enabled();
bool wgmma_forward_supported(const WindowArgs& a, int rows_per_block);
cudaError_t launch_forward_wgmma(const ForwardParams& p, int rows_per_block, cudaStream_t stream);
bool wgmma_pass_supported(const ScorePassArgs& s, int rows_per_block);
cudaError_t launch_pass_wgmma(const PassParams& p, int rows_per_block, int chunks,
                              cudaStream_t stream);

}  // namespace kvevict::cuda::detail
