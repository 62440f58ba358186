// Window forward: attention outputs a and log-sum-exp of the w window queries of every query head,
// flash-style (online softmax over key tiles, tensor-core mma.sync), split over keys.
//
// Grid: (KV head, row block, key split). A block stages its query rows in shared memory once,
// then streams K and V tiles through 2-3 cp.async stages (one barrier per tile). Each warp owns one
// 16-row slab and one key group of every tile and keeps its own (running max, running sum,
// output) in registers; the key groups of a block are merged through shared memory at the end
// and written as one partial per split. A second kernel, launched as a programmatic dependent,
// merges the splits (the usual (m, l, o) combination). Blocks of 32-128 rows run the wgmma version
// (window_forward_wgmma.cu) where the build has it; its partials use the same layout and merge.
// Logits run in log2 units (z * scale * log2 e) so exp2 is one instruction; the running max is
// kept on the raw q.k (scale > 0), so one fma per logit scales and shifts it.
//
// Issue 13: with V, each row's top key is kept apart from (o, l, m) once it outweighs what the
// row has seen (window_params.cuh ForwardTop): o then accumulates the other keys only, shifted by
// their own max, and the split's partial carries the top's logit and index. The merge resolves
// the row's top over the splits (the first of the largest), ADDS every other split's top to the
// others (value rows re-read from V, nothing subtracted), and writes a = (v_top + rho a_{-top}) /
// (1 + rho) with rho = sum_{others} exp(z - z_top), lse = z_top + log1p(rho), and, where the top
// holds p >= 1/2, its leave-one-out record (TopRow: ||v_top - a_{-top}||^2, <v_top, v_top -
// a_{-top}>, p and 1 - p from rho). Accuracy: a_{-top} is a convex combination of the other keys'
// values with the forward's usual error (16-bit P, 16-bit partials: ~2^-9 relative), whatever p;
// 1 - p = rho / (1 + rho) carries the relative error of rho, never 1 - p's cancellation.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/launchers.h"
#include "cuda/mma_tile.cuh"
#include "cuda/window_forward_block.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {
namespace {

// kTop (with V): the rows' top keys are kept apart (window_params.cuh ForwardTop), for the scores
// that need a_{-top}; without it the plain online softmax (attention outputs for the model).
template <class Tr, bool kWithV, bool kTop>
__global__ void __launch_bounds__(Tr::kThreads, forward_min_blocks<Tr>())
    window_forward_kernel(ForwardParams p) {
  // Every block of this grid is resident from the start (one wave): the merge kernel may be
  // scheduled as blocks finish; it waits for this grid's writes (grid_dependency_wait).
  launch_dependents();
  extern __shared__ __align__(16) unsigned char smem[];
  window_forward_block<Tr, kWithV, kTop>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}

// One warp per window row (window_merge_row).
template <class T>
__global__ void window_merge_kernel(ForwardParams p, int block_rows, float* out, float* lse) {
  grid_dependency_wait();  // the forward's partials
  launch_dependents();
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (warp >= p.a.num_kv_heads * p.rows) return;
  window_merge_row<T>(p, block_rows, out, lse, warp);
}

// The merge of the splits' partials (block_rows: the rows of a forward block, the partials' row
// count per split), a programmatic dependent of the forward kernel.
cudaError_t launch_merge(const ForwardParams& p, int block_rows, float* out, float* lse,
                         cudaStream_t stream) {
  const int warps = p.a.num_kv_heads * p.rows;
  return with_elem(p.a.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return launch_pdl(window_merge_kernel<T>, dim3((warps + 7) / 8), dim3(256), 0, stream, p,
                      block_rows, out, lse);
  });
}

template <class Tr, bool kWithV, bool kTop>
cudaError_t launch_forward_config(const ForwardParams& p, float* out, float* lse,
                                  cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<Tr, kWithV>();
  auto kernel = window_forward_kernel<Tr, kWithV, kTop>;
  cudaError_t err = set_kernel_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.a.num_kv_heads, p.row_blocks, p.splits);
  kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_merge(p, Tr::kRows, out, lse, stream);
}

// The mma.sync forward of slabs x 16 rows a block, its merge behind it.
cudaError_t launch_forward_mma(const ForwardParams& p, int slabs, float* out, float* lse,
                               cudaStream_t stream) {
  const bool with_v = out != nullptr || p.rows_out != nullptr, top = with_v && p.top != nullptr;
  return with_elem(p.a.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128, 256>(p.a.head_dim, [&](auto d) {
      constexpr int D = decltype(d)::value;
      return with_int<1, 2, 4, 8>(slabs, [&](auto sl) -> cudaError_t {
        constexpr int S = decltype(sl)::value;
        if constexpr (S <= max_slabs(D)) {
          using Tr = WindowTraits<T, D, S>;
          return top      ? launch_forward_config<Tr, true, true>(p, out, lse, stream)
                 : with_v ? launch_forward_config<Tr, true, false>(p, out, lse, stream)
                          : launch_forward_config<Tr, false, false>(p, out, lse, stream);
        } else {
          return cudaErrorInvalidValue;
        }
      });
    });
  });
}

// Splits fill ONE wave of the blocks that really fit: two per SM up to 2 slabs, one beyond
// (forward_min_blocks: 3 stages and up to 236 registers, ncu v4). v5 planned two per SM for every
// config, so w = 32 (8 slabs) ran 33 splits as two waves of 132 blocks and held 17 MiB of
// partials; one wave of 16 splits does the same work with half the partials (v6).
// Without V (lse only: snapkv, h2o) the kernel holds no output accumulators and v5's two-per-SM
// plan stays: one wave of 16 splits made snapkv w = 32 slower (0.533 -> 0.569 ms, v6 lease).
WindowPlan forward_plan(const WindowArgs& a, bool with_out, int sm_count) {
  const int group = a.num_q_heads / a.num_kv_heads;
  WindowPlan plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 2);
  // 32-64 rows (w = 8 / 16 at G = 4) run one 64-row warpgroup a block on wgmma, padding rows
  // included: w = 8's forward 0.164 -> 0.138 ms at 128K (H200, session 4). With outputs one block
  // per SM: two (33 splits) measured slower at w = 8 (0.148 ms) and w = 16 and took the obcache_vk
  // scratch to 8.5 MiB.
  if (window_wgmma_enabled() && plan.rows >= 32 && plan.rows <= 64 &&
      wgmma_forward_supported(a, 64)) {
    const int forced = forward_blocks_per_sm_forced();
    plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count,
                            forced > 0 ? forced
                            : with_out ? 1
                                       : 2);
    plan.slabs = 4;
    plan.row_blocks = 1;
    return plan;
  }
  // set_window_forward_row_blocks(64): more than 64 rows as 64-row one-warpgroup blocks.
  if (with_out && plan.rows > 64 && forward_row_blocks_forced() == 64 && window_wgmma_enabled() &&
      wgmma_forward_supported(a, 64)) {
    const int forced = forward_blocks_per_sm_forced();
    return make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count,
                            forced > 0 ? forced : 2, 4);
  }
  if (with_out && plan.slabs > 2)
    plan = make_window_plan(a.num_kv_heads, group, a.w, a.n, a.head_dim, sm_count, 1);
  return plan;
}

}  // namespace

size_t window_forward_scratch_bytes(const WindowArgs& a, bool with_out, int sm_count) {
  return forward_partials_bytes(a, forward_plan(a, with_out, sm_count), with_out);
}

namespace {

bool window_args_valid(const WindowArgs& a) {
  return a.num_kv_heads > 0 && a.num_q_heads % a.num_kv_heads == 0 && a.w > 0 && a.w <= a.n &&
         a.q_rows >= a.w;
}

// Blocks of 64+ rows run the wgmma kernel where this binary has it (sm_90a).
bool runs_wgmma(const WindowArgs& a, const WindowPlan& plan) {
  const int block_rows = 16 * plan.slabs;
  return window_wgmma_enabled() && block_rows >= 64 && wgmma_forward_supported(a, block_rows);
}

}  // namespace

cudaError_t launch_window_forward(const WindowArgs& a, float* out, float* lse, void* scratch,
                                  size_t scratch_bytes, int sm_count, cudaStream_t stream,
                                  TopRow* top) {
  if (!window_args_valid(a)) return cudaErrorInvalidValue;
  const bool with_out = out != nullptr;
  if (with_out && a.v == nullptr) return cudaErrorInvalidValue;
  if (top != nullptr && !with_out) return cudaErrorInvalidValue;
  if (lse == nullptr) return cudaErrorInvalidValue;
  if (scratch_bytes < window_forward_scratch_bytes(a, with_out, sm_count))
    return cudaErrorInvalidValue;
  const WindowPlan plan = forward_plan(a, with_out, sm_count);
  ForwardParams p = forward_params(a, plan, with_out, scratch);
  p.top = top;
  const int block_rows = 16 * plan.slabs;
  if (runs_wgmma(a, plan)) {
    const cudaError_t err = launch_forward_wgmma(p, block_rows, stream);
    if (err != cudaSuccess) return err;
    return launch_merge(p, block_rows, out, lse, stream);
  }
  return launch_forward_mma(p, plan.slabs, out, lse, stream);
}

cudaError_t launch_window_attention_rows(const WindowArgs& a, void* out_rows, float* lse,
                                         void* scratch, size_t scratch_bytes, int sm_count,
                                         cudaStream_t stream) {
  if (!window_args_valid(a) || a.v == nullptr || out_rows == nullptr) return cudaErrorInvalidValue;
  if (scratch_bytes < window_forward_scratch_bytes(a, true, sm_count)) return cudaErrorInvalidValue;
  // Head dim 256 (Gemma 3): 128-row blocks of one key split on the wide TMA forward where they
  // fill more than half the SMs, the rule by which a d = 128 plan has one split; otherwise (short
  // chunks) the mma.sync kernels with their splits.
  if (a.head_dim == 256 && wgmma_rows_d256_enabled()) {
    WindowPlan wide;
    wide.slabs = 8;
    wide.rows = (a.num_q_heads / a.num_kv_heads) * a.w;
    wide.row_blocks = (wide.rows + 127) / 128;
    wide.splits = 1;
    wide.tile_keys = 64;
    wide.keys_per_split = (a.n + 63) / 64 * 64;
    if (2 * static_cast<int64_t>(a.num_kv_heads) * wide.row_blocks > sm_count) {
      ForwardParams p = forward_params(a, wide, true, scratch);
      p.part_o = nullptr;  // direct rows: no partials (scratch is sized for the mma.sync plan)
      p.part_ml = nullptr;
      p.rows_out = out_rows;
      p.rows_lse = lse;
      const cudaError_t err = launch_rows_wgmma_d256(p, stream);
      if (err != cudaErrorNotSupported) return err;  // else (no tensor maps here) the fallback
    }
  }
  const WindowPlan plan = forward_plan(a, true, sm_count);
  ForwardParams p = forward_params(a, plan, true, scratch);
  p.rows_out = out_rows;
  p.rows_lse = lse;
  const int block_rows = 16 * plan.slabs;
  if (runs_wgmma(a, plan)) {
    const cudaError_t err = launch_forward_wgmma(p, block_rows, stream);
    if (err != cudaSuccess || plan.splits == 1) return err;  // one split: written by the forward
    return launch_merge(p, block_rows, nullptr, lse, stream);
  }
  return launch_forward_mma(p, plan.slabs, nullptr, lse, stream);
}

}  // namespace kvevict::cuda::detail
