// What one grid-wide dependency costs on this card, the ways a decode step can pay it: a kernel
// boundary in a CUDA graph (plain, or a programmatic dependent launch whose blocks wait at
// griddepcontrol.wait), or a barrier inside one cooperative launch (cooperative groups' grid.sync,
// or the barrier below: one arrival counter, a generation word, polling with a short sleep).
// Every kernel here does no work besides the dependency itself, so the time over n dependencies
// is their cost alone (gpu_gemv_bench --sync-cost). On an H100 (2026-12-06 (i)) a programmatic
// dependent costs 0.63-0.97 us, a barrier 1.1-1.9 us: why the decode step stays a chain of
// programmatic dependent launches, not one persistent launch (docs/GPU_NOTES.md).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/model_launchers.h"

namespace kvevict::gpu::detail {
namespace {

namespace cg = cooperative_groups;

__global__ void empty_kernel() {}

__global__ void empty_pdl_kernel() {
  cuda::detail::launch_dependents();
  cuda::detail::grid_dependency_wait();
}

__global__ void cg_barriers_kernel(int n) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < n; ++i) grid.sync();
}

// A barrier of every block of a grid whose blocks are all resident (a cooperative launch): what
// each thread wrote before it is visible to every thread after it. count (zero between barriers)
// takes the arrivals; the last block to arrive zeroes it and moves gen on, which the others poll
// with a short sleep between reads (fewer loads queue at the word the arrivals update).
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* gen, unsigned blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned g, prev, now;
    // The generation of this barrier: it cannot move before this block arrives.
    asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(g) : "l"(gen) : "memory");
    asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(prev) : "l"(count) : "memory");
    if (prev == blocks - 1) {
      asm volatile("st.relaxed.gpu.u32 [%0], 0;" ::"l"(count) : "memory");
      asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(gen), "r"(g + 1) : "memory");
    } else {
      do {
        __nanosleep(32);
        asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(gen) : "memory");
      } while (now == g);
    }
  }
  __syncthreads();
#endif
}

__global__ void counter_barriers_kernel(int n, unsigned* state) {
  for (int i = 0; i < n; ++i) grid_barrier(state, state + 1, gridDim.x);
}

}  // namespace

cudaError_t launch_sync_cost(SyncKind kind, int n, int blocks, unsigned* state,
                             cudaStream_t stream) {
  if (n <= 0 || blocks <= 0) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(128);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  switch (kind) {
    case SyncKind::kKernel:
    case SyncKind::kPdlKernel:
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = kind == SyncKind::kPdlKernel ? 1 : 0;
      for (int i = 0; i < n; ++i) {
        const cudaError_t err = cudaLaunchKernelEx(
            &cfg, kind == SyncKind::kPdlKernel ? empty_pdl_kernel : empty_kernel);
        if (err != cudaSuccess) return err;
      }
      return cudaSuccess;
    case SyncKind::kGroupsBarrier:
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      return cudaLaunchKernelEx(&cfg, cg_barriers_kernel, n);
    case SyncKind::kCounterBarrier:
      if (state == nullptr) return cudaErrorInvalidValue;
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      return cudaLaunchKernelEx(&cfg, counter_barriers_kernel, n, state);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvevict::gpu::detail
