// Device helpers shared by the kernels: element-type traits, the warp-level tensor-core MMA
// (mma.sync m16n8k16, sm_80+ layout), cp.async copies and CUDA error plumbing.
//
// Fragment layout of mma.sync.m16n8k16 (PTX ISA "Matrix fragments for mma.m16n8k16"), with
// lane = 4 * g + t (g = groupID 0..7, t = thread-in-group 0..3):
//   A (16x16, row-major, 4 x b32): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                                  a3 = A[g+8][2t+8..]
//   B (16x8, B[k][n], 2 x b32):    b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16x8 f32, 4 floats):        c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/check.h"
#include "kvevict/error.h"

namespace kvevict::cuda::detail {

// Element types the kernels read. kMmaName selects the mma.sync variant.
template <class T>
struct ElemTraits;
template <>
struct ElemTraits<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) {
    return __float2bfloat16_rn(x);
  }
};
template <>
struct ElemTraits<__half> {
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

// D = A * B + D on the tensor cores, float accumulation.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory, transposed: lanes 8i..8i+7 give the row addresses of
// matrix i. Used for the V operand of P V, whose B fragment needs two rows (keys) per register.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Four 8x8 b16 matrices from shared memory, not transposed: lane l receives row l / 4, columns
// 2 (l % 4) .. + 1 of each. With matrix rows = keys and columns = head dims this is the B fragment
// of Q K^T (and of a V^T): b0, b1 of one n8 tile (matrices 0, 1) and of the next (2, 3); with
// rows = query rows it is the A fragment a0..a3 (matrices: rows 0-7 / 8-15 x cols 0-7 / 8-15).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 2^x in one MUFU instruction (ex2.approx.ftz: ~2 ulp, -inf -> 0). exp2f() adds range fix-ups.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm_90): a kernel launched with launch_pdl() may start while the
// previous kernel of the stream finishes; it must call grid_dependency_wait() before it reads
// anything that kernel wrote (a no-op when launched normally). launch_dependents() lets the next
// kernel's blocks be scheduled as soon as every block of this one has started.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Arrival of a block at `counter` (every thread of the block calls it once, after its stores):
// the stores are made visible device-wide, thread 0 counts the block, and the block that brings
// the count to `blocks` (every other one has published) resets the counter to zero for the next
// launch and gets true. No block waits for another, so residency does not matter.
__device__ __forceinline__ bool last_block_to_arrive(unsigned* counter, unsigned blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(counter, 1u);
    last = prev == blocks - 1;
    if (last) atomicExch(counter, 0u);
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the
// stream's previous kernel (see grid_dependency_wait).
template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Lets `kernel` take `bytes` of dynamic shared memory and prefer the largest shared-memory
// carveout.
template <class... KArgs>
cudaError_t set_kernel_smem(void (*kernel)(KArgs...), size_t bytes) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared);
}

// 16-byte global -> shared copy that bypasses registers; src_bytes < 16 zero-fills the rest
// (0 reads nothing: how out-of-range rows become zeros without a branch around the copy).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
               "r"(src_bytes));
}
// 16 bytes, all in range, to a shared-memory address (a __cvta_generic_to_shared value).
__device__ __forceinline__ void cp_async_16_to(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// max / min that return NaN when either operand is NaN, where fmaxf / fminf return the other
// operand: one FMNMX.NAN (sm_80+), the cost of fmaxf. The scoring kernels take every running max
// and clamp with these, so a NaN in q, k or v stays NaN in the scores (issue 13; RELIABILITY.md)
// instead of dropping out of a max (fmaxf(NaN, x) = x) and leaving finite, wrong scores.
__device__ __forceinline__ float nan_max(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return a != a || b != b ? a + b : fmaxf(a, b);
#endif
}
__device__ __forceinline__ float nan_min(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float d;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
#else
  return a != a || b != b ? a + b : fminf(a, b);
#endif
}

// The xor-shuffle sum over a warp, float or double: every lane gets the same bits (each adds the
// same two operands at each level).
template <class V>
__device__ __forceinline__ V warp_sum(V x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace kvevict::cuda::detail
