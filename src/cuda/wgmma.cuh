// Hopper warpgroup MMA (wgmma, sm_90a) for the window kernels: a warpgroup of 4 warps multiplies a
// 64-row A (shared memory or registers) by a B tile read straight from shared memory, so a K or V
// tile is read once per 64 query rows instead of once per 16 (mma.sync re-reads B per warp: the
// shared-memory bound of the w = 32 kernels, docs/GPU_NOTES.md v7).
//
// Shared-memory tiles use the 128-byte swizzle: a [rows][D] tile is D / 64 column blocks of
// [rows][64] (128 bytes a row), and inside a block the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8). Blocks start 1024-byte aligned. The same bytes serve as
//   K-major operand (rows = M or N, columns = the reduction dim): K of Q K^T, V of a V^T, Q, a;
//   MN-major operand (rows = the reduction dim, columns = N): V of P V (transposed B).
// Accumulators (m64nN, f32, N / 2 floats a thread): warp i of the warpgroup holds rows
// 16 i .. 16 i + 15 in mma.sync's C layout per n8 tile: d[4 j + e] = C[16 i + g + 8 (e >> 1)]
// [8 j + 2 t + (e & 1)] (lane = 4 g + t). The register A operand is mma.sync's A fragment of the
// warp's 16 rows, so a P built from the S accumulators feeds P V directly.
//
// Only compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL, CMAKE_CUDA_ARCHITECTURES=90a); other
// targets get traps, and the host asks wgmma_kernels_available() before it launches them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVEVICT_HAS_WGMMA 1
#endif

namespace kvevict::cuda::detail {

__device__ __forceinline__ void wgmma_unavailable() {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Element offset of (row, col) in a 128-byte-swizzled [Rows][D] tile (see above).
template <int Rows>
__device__ __forceinline__ int sw128(int row, int col) {
  return (col >> 6) * (Rows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// The first 1024-byte boundary at or after the shared-memory pointer p (a swizzle atom: where
// swizzled tiles must start). Offsetting p itself, not a round trip through an integer, keeps the
// pointer known to be shared: accesses through it compile to 32-bit LDS/STS, not generic 64-bit
// loads (ncu, session 5: the generic loads and their address math were a quarter of the key-major
// pass's instructions).
template <class T>
__device__ __forceinline__ T* swizzle_aligned(unsigned char* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return reinterpret_cast<T*>(p + ((1024u - (a & 1023u)) & 1023u));
}

// Shared-memory matrix descriptor: start address, leading / stride byte offsets, 128-byte
// swizzle. K-major: sbo = 1024 (8 rows of 128 bytes), lbo unused. MN-major: sbo = 1024 (8 rows of
// the reduction dim), lbo = bytes between 64-column blocks.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}

// The descriptor of the same tile `bytes` further on (a multiple of 16): one add on the address
// field, which cannot carry out of it below 256 KB of shared memory.
__device__ __forceinline__ uint64_t wgmma_desc_add(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// Orders this thread's earlier register and shared-memory accesses before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accesses of accumulator registers across wgmma_wait.
template <int N>
__device__ __forceinline__ void wgmma_hold(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments a wgmma reads from registers (P of P V): held until its wait, so the
// compiler keeps them where the running wgmma reads them.
template <int M>
__device__ __forceinline__ void wgmma_hold(uint32_t (&a)[M][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}
// Named barrier kId (1-15; 0 is __syncthreads) completing when kThreads threads have reached it:
// named_barrier_sync counts the calling warp and waits, named_barrier_arrive counts it and goes on.
// Compile-time ids, so ptxas reserves only the barriers used.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}
// Barrier of warpgroup wg's 128 threads alone (named barrier 1 + wg; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
// Shared-memory writes of the generic proxy (cp.async, st.shared) made visible to wgmma's
// reads (async proxy); each writer runs it after its writes, before the barrier.
__device__ __forceinline__ void fence_async_shared() {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// d (+)= A B, m64 nN k16: A and B both K-major shared-memory descriptors (scale_d = 0: d = A B).
template <class T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d);
// d (+)= A B, m64 nN k16: A from registers (mma.sync A fragment of the warp's 16 rows), B an
// MN-major (transposed) shared-memory descriptor.
template <class T, int N>
__device__ __forceinline__ void wgmma_rs_mn(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                            int scale_d);
// d (+)= A B, m64 nN k16: A from registers, B a K-major shared-memory descriptor.
template <class T, int N>
__device__ __forceinline__ void wgmma_rs_k(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                           int scale_d);

// The accumulator operands of an m64nN f32 wgmma: N / 2 registers a thread.
#define KVEVICT_WGMMA_ACC4_OPS "%0, %1, %2, %3"
#define KVEVICT_WGMMA_ACC4_REGS "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define KVEVICT_WGMMA_ACC32_OPS                                            \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KVEVICT_WGMMA_ACC64_OPS                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KVEVICT_WGMMA_ACC32_REGS                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KVEVICT_WGMMA_ACC64_REGS                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#if defined(KVEVICT_HAS_WGMMA)
// m64nNk16, A and B K-major descriptors; scale_d = 0 overwrites d.
#define KVEVICT_WGMMA_SS(CT, PT, N, OPS, REGS, P, A, B)                                       \
  template <>                                                                                 \
  __device__ __forceinline__ void wgmma_ss<CT, N>(float(&d)[N / 2], uint64_t a, uint64_t b,   \
                                                  int scale_d) {                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P                                        \
                 ", 0;\n"                                                                     \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " {" OPS "}, " A \
                 ", " B ", p, 1, 1, 0, 0;\n}\n"                                               \
                 : REGS                                                                       \
                 : "l"(a), "l"(b), "r"(scale_d));                                             \
  }
// m64nNk16, A from registers, B a shared-memory descriptor, MN-major (TR = 1: transposed) or
// K-major (TR = 0).
#define KVEVICT_WGMMA_RS(NAME, TR, CT, PT, N, OPS, REGS, P, A0, A1, A2, A3, B)                     \
  template <>                                                                                      \
  __device__ __forceinline__ void NAME<CT, N>(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t b, \
                                              int scale_d) {                                       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P                                             \
                 ", 0;\n"                                                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " {" OPS              \
                 "}, "                                                                             \
                 "{" A0 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, " #TR ";\n}\n"                 \
                 : REGS                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));              \
  }
#else
#define KVEVICT_WGMMA_SS(CT, PT, N, OPS, REGS, P, A, B)                                       \
  template <>                                                                                 \
  __device__ __forceinline__ void wgmma_ss<CT, N>(float(&)[N / 2], uint64_t, uint64_t, int) { \
    wgmma_unavailable();                                                                      \
  }
#define KVEVICT_WGMMA_RS(NAME, TR, CT, PT, N, OPS, REGS, P, A0, A1, A2, A3, B)                 \
  template <>                                                                                  \
  __device__ __forceinline__ void NAME<CT, N>(float(&)[N / 2], const uint32_t(&)[4], uint64_t, \
                                              int) {                                           \
    wgmma_unavailable();                                                                       \
  }
#endif

KVEVICT_WGMMA_SS(__nv_bfloat16, "bf16", 64, KVEVICT_WGMMA_ACC32_OPS, KVEVICT_WGMMA_ACC32_REGS,
                 "%34", "%32", "%33")
KVEVICT_WGMMA_SS(__half, "f16", 64, KVEVICT_WGMMA_ACC32_OPS, KVEVICT_WGMMA_ACC32_REGS, "%34", "%32",
                 "%33")
KVEVICT_WGMMA_SS(__nv_bfloat16, "bf16", 128, KVEVICT_WGMMA_ACC64_OPS, KVEVICT_WGMMA_ACC64_REGS,
                 "%66", "%64", "%65")
KVEVICT_WGMMA_SS(__half, "f16", 128, KVEVICT_WGMMA_ACC64_OPS, KVEVICT_WGMMA_ACC64_REGS, "%66",
                 "%64", "%65")
KVEVICT_WGMMA_RS(wgmma_rs_mn, 1, __nv_bfloat16, "bf16", 64, KVEVICT_WGMMA_ACC32_OPS,
                 KVEVICT_WGMMA_ACC32_REGS, "%37", "%32", "%33", "%34", "%35", "%36")
KVEVICT_WGMMA_RS(wgmma_rs_mn, 1, __half, "f16", 64, KVEVICT_WGMMA_ACC32_OPS,
                 KVEVICT_WGMMA_ACC32_REGS, "%37", "%32", "%33", "%34", "%35", "%36")
KVEVICT_WGMMA_RS(wgmma_rs_mn, 1, __nv_bfloat16, "bf16", 128, KVEVICT_WGMMA_ACC64_OPS,
                 KVEVICT_WGMMA_ACC64_REGS, "%69", "%64", "%65", "%66", "%67", "%68")
KVEVICT_WGMMA_RS(wgmma_rs_mn, 1, __half, "f16", 128, KVEVICT_WGMMA_ACC64_OPS,
                 KVEVICT_WGMMA_ACC64_REGS, "%69", "%64", "%65", "%66", "%67", "%68")
KVEVICT_WGMMA_RS(wgmma_rs_k, 0, __nv_bfloat16, "bf16", 8, KVEVICT_WGMMA_ACC4_OPS,
                 KVEVICT_WGMMA_ACC4_REGS, "%9", "%4", "%5", "%6", "%7", "%8")

#undef KVEVICT_WGMMA_SS
#undef KVEVICT_WGMMA_RS
#undef KVEVICT_WGMMA_ACC4_OPS
#undef KVEVICT_WGMMA_ACC4_REGS
#undef KVEVICT_WGMMA_ACC32_OPS
#undef KVEVICT_WGMMA_ACC64_OPS
#undef KVEVICT_WGMMA_ACC32_REGS
#undef KVEVICT_WGMMA_ACC64_REGS

}  // namespace kvevict::cuda::detail
