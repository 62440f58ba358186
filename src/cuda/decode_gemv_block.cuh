// The small-batch GEMV's block-level device code (decode_gemv.cu holds the kernels and the
// launchers): the input staging, the fused epilogues and the batch-1 block bodies (a warp an output
// row pair, CUDA-core sums; the weights in registers before the dependency wait, or in L2), as
// functions of the block's index.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/model_launchers.h"
#include "cuda/rope_append.cuh"
#include "cuda/row_norm.cuh"

namespace kvevict::gpu::detail::gemv {

constexpr int kGemvWarps = 4;
constexpr int kGemvThreads = 32 * kGemvWarps;
constexpr int kChunk = 8;  // bf16 elements in 16 bytes
// Columns of the input tile in shared memory: [B][kTileK] bf16 (32.5 KiB at B = 8 with the pad). A
// multiple of 32 chunks, so every lane meets the same columns as without tiles (lane l takes chunks
// l, l + 32, ... of K): the sums are the same, bit for bit. Its rows lie kXsStride chunks apart:
// 4 more than a row, so the 8 batch rows that the tensor-core kernel's lanes read at one column
// (lanes g = 0..7) fall in different bank groups (4 wavefronts for a warp's 512 bytes, not 8).
constexpr int kTileK = kGemvTileK;
constexpr int kTileChunks = kTileK / kChunk;
constexpr int kXsStride = kTileChunks + 4;
// 128-byte lines of each weight row a warp prefetches into L2 before it waits for the previous
// kernel. Bounded: whole row pairs of an 8B model's matrices (16-56 KB) over the warps resident
// at once (up to ~4,700 on 132 SMs) ask for 50-115 MB, more than L2 holds (50 MB), so lines are
// evicted before their loads read them; 4 KB a row pair is ~19 MB. Small models' rows (K <= 1,024)
// are prefetched whole.
constexpr int kPrefetchLines = 16;
static_assert(kGemvMaxBatch * kXsStride * 16 <= 48 * 1024,
              "the input tile fits the default dynamic shared memory (no opt-in at launch)");

__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[kChunk]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[kChunk]) {
  // f holds bf16 values (rounded or read as bf16): the top halves are exact.
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = (__float_as_uint(f[2 * i]) >> 16) | (__float_as_uint(f[2 * i + 1]) & 0xFFFF0000u);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

template <bool kGeluTanh>
__device__ __forceinline__ float gated(float g, float u) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi), as dense_ops.cu gated_act_kernel
  const float act = kGeluTanh ? 0.5f * g * (1.0f + tanhf(kC * (g + 0.044715f * g * g * g)))
                              : g / (1.0f + __expf(-g));
  return act * u;
}

// Element k .. k + 7 of input row b as the product's bf16 operand (kNorm: normed f32 row).
template <bool kNorm>
__device__ __forceinline__ void input_chunk(const GemvArgs& a, int b, int k, float inv_rms,
                                            float (&xf)[kChunk]) {
  if constexpr (!kNorm) {
    const bf16* x = static_cast<const bf16*>(a.x) + static_cast<int64_t>(b) * a.K + k;
    unpack8(*reinterpret_cast<const uint4*>(x), xf);
  } else {
    const float* x = static_cast<const float*>(a.x) + static_cast<int64_t>(b) * a.K + k;
    const float4 x0 = *reinterpret_cast<const float4*>(x);
    const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
    const float4 w0 = *reinterpret_cast<const float4*>(a.norm_w + k);
    const float4 w1 = *reinterpret_cast<const float4*>(a.norm_w + k + 4);
    const float xs[kChunk] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const float ws[kChunk] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int i = 0; i < kChunk; ++i) xf[i] = round_bf16(xs[i] * inv_rms * ws[i]);
  }
}

// The two rows of W that output pair p computes (kGated: rows p and N + p; kRopeAppend: the
// rotated pair (ia, ib) of a q / k head, or two adjacent v columns; else rows 2 p and 2 p + 1).
template <GemvOut kOut>
__device__ __forceinline__ void pair_rows(const GemvArgs& a, int p, int* r0, int* r1) {
  if constexpr (kOut == GemvOut::kGated) {
    *r0 = p;
    *r1 = a.N + p;
  } else if constexpr (kOut == GemvOut::kRopeAppend) {
    const RopeAppendArgs& ra = a.rope;
    const int d = ra.d, half = d / 2, qk_pairs = (ra.Hq + ra.Hkv) * half;
    if (p < qk_pairs) {
      const int h = p / half;
      rope_pair_cols(ra.neox, half, p % half, r0, r1);
      *r0 += h * d;
      *r1 += h * d;
    } else {
      *r0 = (ra.Hq + ra.Hkv) * d + 2 * (p - qk_pairs);
      *r1 = *r0 + 1;
    }
  } else {
    *r0 = 2 * p;
    *r1 = 2 * p + 1;
  }
}

// The RoPE rotation of pair p (a q / k pair) at batch row b: the cosine and sine of pos_b
// inv_freq_i, formed in double and rounded to float (rope_append_kernel's arithmetic). It reads
// only the step's positions and the frequencies, never a previous kernel's output, so the batch-1
// step forms it before its dependency wait (a double sincos is ~60 dependent instructions).
__device__ __forceinline__ float2 rope_rotation(const RopeAppendArgs& ra, int p, int b) {
  double sn, cs;
  sincos(static_cast<double>(ra.pos[b]) * ra.inv_freq[p % (ra.d / 2)], &sn, &cs);
  return make_float2(static_cast<float>(cs), static_cast<float>(sn));
}

// kRopeAppend's outputs of pair p for batch row b (one lane), as rope_append_kernel computes them
// from the bf16-rounded projection: bias, RoPE with the angle formed in double, bf16 stores.
// kRotationGiven: rot is the pair's rope_rotation, formed earlier (the batch-1 kernel: no sincos
// compiled here); else it is formed here.
template <bool kRotationGiven>
__device__ __forceinline__ void store_rope_append(const GemvArgs& a, int p, int b, float acc0,
                                                  float acc1, float2 rot) {
  const RopeAppendArgs& ra = a.rope;
  const int d = ra.d, half = d / 2, Hq = ra.Hq, Hkv = ra.Hkv;
  const int32_t pos = ra.pos[b];
  auto value = [&](float acc, int col) {
    float v = round_bf16(acc);
    if (ra.bias != nullptr) v += ra.bias[col];
    return v;
  };
  auto cache_row = [&](int g) { return decode_append_row(ra, b * Hkv + g, pos); };
  if (p < (Hq + Hkv) * half) {
    const int h = p / half, i = p % half;
    int ia, ib;
    rope_pair_cols(ra.neox, half, i, &ia, &ib);
    const float x0 = value(acc0, h * d + ia), x1 = value(acc1, h * d + ib);
    const float2 cs = kRotationGiven ? rot : rope_rotation(ra, p, b);
    const float c = cs.x, s = cs.y;
    bf16* dst = h < Hq ? ra.q_out + (static_cast<int64_t>(b) * Hq + h) * d
                       : ra.k_cache + cache_row(h - Hq) * d;
    dst[ia] = __float2bfloat16_rn(x0 * c - x1 * s);
    dst[ib] = __float2bfloat16_rn(x0 * s + x1 * c);
  } else {
    const int col = 2 * (p - (Hq + Hkv) * half);  // within v
    const int g = col / d, i = col % d, src = (Hq + Hkv) * d + col;
    const int64_t row = cache_row(g);
    ra.v_cache[row * d + i] = __float2bfloat16_rn(value(acc0, src));
    ra.v_cache[row * d + i + 1] = __float2bfloat16_rn(value(acc1, src + 1));
    if (i == 0) {
      ra.pos_cache[row] = pos;
      if (ra.acc_cache != nullptr) ra.acc_cache[row] = 0.0f;  // as cache_append_rows
    }
  }
}

// kRopeAppend, every thread of every block (`blocks` of them): the block counts itself once its
// stores are visible; the last one advances every segment's length (ring layers: up to the ring)
// and resets the counter. Every block read the lengths before it counted itself, so none sees a
// moved one.
__device__ __forceinline__ void advance_lengths(const GemvArgs& a) {
  const RopeAppendArgs& ra = a.rope;
  for (int s = threadIdx.x; s < a.B * ra.Hkv; s += blockDim.x) {
    int32_t& len = ra.seg_len[s];
    len = appended_length(len, ra.ring);
  }
}

__device__ __forceinline__ void advance_lengths_when_last(const GemvArgs& a, int blocks) {
  if (!cuda::detail::last_block_to_arrive(a.arrivals, blocks)) return;
  advance_lengths(a);
}

// A warp's products of its two rows with the staged input tile (xs [B][kXsStride] chunks,
// columns k0 .. k0 + tk of K), added to acc0 / acc1 (lane-partial sums).
__device__ __forceinline__ void tile_products(const GemvArgs& a, const bf16* w0, const bf16* w1,
                                              int k0, int tk, const uint4* xs,
                                              float (&acc0)[kGemvMaxBatch],
                                              float (&acc1)[kGemvMaxBatch]) {
  const int lane = threadIdx.x & 31;
  // Unrolled so that a lane has several 16-byte weight loads in flight (a full tile: 8 steps).
#pragma unroll 4
  for (int c = lane; c < tk / kChunk; c += 32) {
    const int k = k0 + c * kChunk;
    float wf0[kChunk], wf1[kChunk];
    unpack8(*reinterpret_cast<const uint4*>(w0 + k), wf0);
    unpack8(*reinterpret_cast<const uint4*>(w1 + k), wf1);
#pragma unroll
    for (int b = 0; b < kGemvMaxBatch; ++b) {
      if (b >= a.B) break;
      float xf[kChunk];
      unpack8(xs[b * kXsStride + c], xf);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        acc0[b] = fmaf(wf0[i], xf[i], acc0[b]);
        acc1[b] = fmaf(wf1[i], xf[i], acc1[b]);
      }
    }
  }
}

// The stores of kOut for output pair `pair` (rows r0, r1) of batch row b from its two sums
// (kRotationGiven, rot: store_rope_append's).
template <GemvOut kOut, bool kGeluTanh, bool kRotationGiven = false>
__device__ __forceinline__ void store_pair(const GemvArgs& a, int pair, int r0, int r1, bool has_r1,
                                           int b, float acc0, float acc1, float2 rot = {1.f, 0.f}) {
  const int64_t row = static_cast<int64_t>(b) * a.N;
  if constexpr (kOut == GemvOut::kGated) {
    static_cast<bf16*>(a.y)[row + r0] =
        __float2bfloat16_rn(gated<kGeluTanh>(round_bf16(acc0), round_bf16(acc1)));
  } else if constexpr (kOut == GemvOut::kBf16) {
    bf16* y = static_cast<bf16*>(a.y) + row;
    y[r0] = __float2bfloat16_rn(acc0);
    if (has_r1) y[r1] = __float2bfloat16_rn(acc1);
  } else if constexpr (kOut == GemvOut::kF32) {
    float* y = static_cast<float*>(a.y) + row;
    y[r0] = acc0;
    if (has_r1) y[r1] = acc1;
  } else if constexpr (kOut == GemvOut::kF32Add) {
    float* y = static_cast<float*>(a.y) + row;
    y[r0] += acc0;
    if (has_r1) y[r1] += acc1;
  } else {  // kRopeAppend
    store_rope_append<kRotationGiven>(a, pair, b, acc0, acc1, rot);
  }
}

// A live warp's sums of its two rows for every batch row, reduced over the lanes, and the stores
// of kOut by lane 0.
template <GemvOut kOut, bool kGeluTanh>
__device__ __forceinline__ void store_rows(const GemvArgs& a, int pair, int r0, int r1, bool has_r1,
                                           float (&acc0)[kGemvMaxBatch],
                                           float (&acc1)[kGemvMaxBatch]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int b = 0; b < kGemvMaxBatch; ++b) {
    if (b >= a.B) break;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      acc0[b] += __shfl_xor_sync(0xffffffffu, acc0[b], o);
      acc1[b] += __shfl_xor_sync(0xffffffffu, acc1[b], o);
    }
  }
  if (lane != 0) return;
#pragma unroll  // constant indices: the sums stay in registers
  for (int b = 0; b < kGemvMaxBatch; ++b) {
    if (b >= a.B) break;
    store_pair<kOut, kGeluTanh>(a, pair, r0, r1, has_r1, b, acc0[b], acc1[b]);
  }
}

// The prologue of both kernels after the dependency wait: 1 / sqrt(mean(x^2) + eps) of every input
// row, a warp a row (as dense_ops.cu row_inv_rms), visible to the block.
template <bool kNorm>
__device__ __forceinline__ void row_inv_rms(const GemvArgs& a, float* inv_rms) {
  if constexpr (kNorm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int b = warp; b < a.B; b += kGemvWarps) {
      const float* x = static_cast<const float*>(a.x) + static_cast<int64_t>(b) * a.K;
      float ss = 0.f;
      for (int k = lane; k < a.K; k += 32) ss += x[k] * x[k];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) inv_rms[b] = rsqrtf(ss / static_cast<float>(a.K) + a.eps);
    }
    __syncthreads();
  }
}

// Columns k0 .. k0 + tk of the B input rows into xs [B][kXsStride] as the product's bf16
// operand, every thread of the block taking chunks (no barrier here).
template <bool kNorm>
__device__ __forceinline__ void stage_tile(const GemvArgs& a, int k0, int tk, const float* inv_rms,
                                           uint4* xs) {
  const int chunks = tk / kChunk;
  for (int c = threadIdx.x; c < a.B * chunks; c += kGemvThreads) {
    const int b = c / chunks, kc = c - b * chunks;
    float xf[kChunk];
    input_chunk<kNorm>(a, b, k0 + kc * kChunk, kNorm ? inv_rms[b] : 1.f, xf);
    xs[b * kXsStride + kc] = pack8(xf);
  }
}

// The first kPrefetchLines lines of weight rows w0 and w1 (has_r1) into L2, lines i0, i0 + step,
// ...
__device__ __forceinline__ void prefetch_rows(const bf16* w0, const bf16* w1, bool has_r1, int K,
                                              int i0, int step) {
  const int lines = min((K * 2 + 127) / 128, kPrefetchLines);
  for (int i = i0; i < lines; i += step) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(w0) + 128 * i));
    if (has_r1)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(w1) + 128 * i));
  }
}

// Output pairs of a launch (kGated: N; kRopeAppend: N / 2, N even; else ceil(N / 2)).
__host__ __device__ __forceinline__ int output_pairs(const GemvArgs& a) {
  return a.out == GemvOut::kGated ? a.N : (a.N + 1) / 2;
}

// The output pair of this warp in block `block` (a warp a pair) and its two weight rows.
struct GemvWarp {
  int pair = 0, r0 = 0, r1 = 0;
  bool live = false, has_r1 = false;
  const bf16* w0 = nullptr;
  const bf16* w1 = nullptr;
};

template <GemvOut kOut>
__device__ __forceinline__ GemvWarp gemv_warp(const GemvArgs& a, int block) {
  GemvWarp w;
  w.pair = block * kGemvWarps + (threadIdx.x >> 5);
  w.live = w.pair < output_pairs(a);
  pair_rows<kOut>(a, w.live ? w.pair : 0, &w.r0, &w.r1);
  w.has_r1 = kOut == GemvOut::kGated || w.r1 < a.N;
  w.w0 = a.w + static_cast<int64_t>(w.r0) * a.K;
  w.w1 = a.w + static_cast<int64_t>(w.has_r1 ? w.r1 : w.r0) * a.K;
  return w;
}

// Blocks of the batch-1 body over a launch of a (a warp an output pair).
__host__ __device__ __forceinline__ int gemv_blocks(const GemvArgs& a) {
  return (output_pairs(a) + kGemvWarps - 1) / kGemvWarps;
}

// The batch-1 body of one block after its dependency wait: the input rows staged a tile at a time
// (normed when kNorm), the warp's two row sums, the stores of kOut. Every thread of the block
// calls it (it holds block barriers). xs: [B][kXsStride] dynamic shared memory; inv_rms:
// [kGemvMaxBatch] shared.
template <bool kNorm, GemvOut kOut, bool kGeluTanh>
__device__ __forceinline__ void gemv_rows(const GemvArgs& a, const GemvWarp& w, uint4* xs,
                                          float* inv_rms) {
  row_inv_rms<kNorm>(a, inv_rms);
  float acc0[kGemvMaxBatch], acc1[kGemvMaxBatch];
#pragma unroll
  for (int b = 0; b < kGemvMaxBatch; ++b) {
    acc0[b] = 0.f;
    acc1[b] = 0.f;
  }
  for (int k0 = 0; k0 < a.K; k0 += kTileK) {
    const int tk = min(kTileK, a.K - k0);
    stage_tile<kNorm>(a, k0, tk, inv_rms,
                      xs);  // the warps without rows too: they reach the barriers
    __syncthreads();
    if (w.live) tile_products(a, w.w0, w.w1, k0, tk, xs, acc0, acc1);
    __syncthreads();  // the next tile overwrites xs
  }
  if (w.live) store_rows<kOut, kGeluTanh>(a, w.pair, w.r0, w.r1, w.has_r1, acc0, acc1);
}

// Batch 1 with the whole input row in one tile (K <= kTileK, GemvArgs::preload): a lane's chunks of
// its warp's two weight rows (chunks lane, lane + 32, ...) wait in registers, loaded before the
// dependency wait, so after it only the input row is read, once: its raw f32 row goes to shared
// memory for the RMS (summed in row_inv_rms's order) and each thread norms its own chunks. The sums
// run in tile_products' order, so the outputs are the same bits as gemv_rows'.
constexpr int kLaneChunks = kTileChunks / 32;
constexpr int kThreadChunks = (kTileChunks + kGemvThreads - 1) / kGemvThreads;

struct RowWeights {
  uint4 w0[kLaneChunks], w1[kLaneChunks];
};
struct RowNorm {
  float4 w[kThreadChunks][2];  // the norm weights of the thread's input chunks
};

__host__ __device__ __forceinline__ bool preloads(const GemvArgs& a) {
  return a.preload && a.B == 1 && a.K <= kTileK;
}

// Shared memory of a launch: the input tile, and (preloads) the raw input row after it.
__host__ __device__ __forceinline__ size_t gemv_smem_bytes(int B) {
  return static_cast<size_t>(B) * kXsStride * sizeof(uint4) +
         (B == 1 ? static_cast<size_t>(kTileK) * sizeof(float) : 0);
}

__device__ __forceinline__ void load_row_weights(const GemvArgs& a, const GemvWarp& w,
                                                 RowWeights& r) {
  const int lane = threadIdx.x & 31, chunks = a.K / kChunk;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int i = 0; i < kLaneChunks; ++i) {
    const int c = lane + 32 * i;
    const bool in = w.live && c < chunks;
    r.w0[i] = in ? *reinterpret_cast<const uint4*>(w.w0 + c * kChunk) : zero;
    r.w1[i] = in ? *reinterpret_cast<const uint4*>(w.w1 + c * kChunk) : zero;
  }
}

template <bool kNorm>
__device__ __forceinline__ void load_row_norm(const GemvArgs& a, RowNorm& n) {
  if constexpr (kNorm) {
    const int chunks = a.K / kChunk;
#pragma unroll
    for (int j = 0; j < kThreadChunks; ++j) {
      const int c = threadIdx.x + kGemvThreads * j;
      if (c < chunks) {
        n.w[j][0] = *reinterpret_cast<const float4*>(a.norm_w + c * kChunk);
        n.w[j][1] = *reinterpret_cast<const float4*>(a.norm_w + c * kChunk + 4);
      }
    }
  }
}

// gemma3's batch-1 folds (docs/GPU_NOTES.md 2026-12-07 (e)-(g)), each in kernel instances of its
// own (gemv_row_kernel's kPost and kHeadNorm) so that the other instances' code stays as it was:
// these kernels are instruction-fetch bound at batch 1, and a runtime branch on the fold made every
// normed instance 1.6-2.6x larger (SmolLM2, which never folds, lost 2.6%).
//   kPost: the post-norm + residual add of the o / down projection before it (GemvArgs::post_in)
//     in front of the input norm, the launch's last block writing the new x;
//   kHeadNorm: the per-head q / k norms of the q|k|v projection (GemvArgs::head_arrivals) in its
//     RoPE + append epilogue, each head finished by the last of its warps to arrive.
// Head dims the head-norm fold covers (its shared arrays; a lane holds d / 32 values).
constexpr int kMaxFoldHeadDim = 256;
// kPost: the thread that counts its block (lane 0 of warp 1: idle while warp 0 sums the RMS).
constexpr int kArrivingThread = 32;

// A fold instance's shared memory after the input tile and the raw row (gemv_smem_bytes(1)).
struct FoldSmem {
  float* hw = nullptr;    // [kMaxFoldHeadDim] kHeadNorm: the block's head's norm weights
  float2* rot = nullptr;  // [kMaxFoldHeadDim / 2] kHeadNorm: (cos, sin) of each rotated pair
  float* hv = nullptr;    // [kMaxFoldHeadDim] kHeadNorm: a head's values, for its last warp
  float* oraw = nullptr;  // [kTileK] kPost: the post row (GemvArgs::post_in)
  float* pw = nullptr;    // [kTileK] kPost: the post-norm weights
  int* last = nullptr;    // [1] kPost: whether this block is the launch's last to arrive
};
constexpr int kFoldHeadFloats = 3 * kMaxFoldHeadDim;
constexpr int kFoldPostFloats = 2 * kTileK + 4;  // the flag padded to 16 bytes

template <bool kPost, bool kHeadNorm>
__device__ __forceinline__ FoldSmem fold_smem(float* base) {
  FoldSmem f;
  if constexpr (kHeadNorm) {
    f.hw = base;
    f.rot = reinterpret_cast<float2*>(base + kMaxFoldHeadDim);
    f.hv = base + 2 * kMaxFoldHeadDim;
    base += kFoldHeadFloats;
  }
  if constexpr (kPost) {
    f.oraw = base;
    f.pw = base + kTileK;
    f.last = reinterpret_cast<int*>(base + 2 * kTileK);
  }
  return f;
}

// Shared memory of a fold instance's launch (31 KB with both folds: no opt-in).
__host__ __device__ __forceinline__ size_t fold_smem_bytes(bool post, bool head) {
  return gemv_smem_bytes(1) +
         sizeof(float) * ((head ? kFoldHeadFloats : 0) + (post ? kFoldPostFloats : 0));
}

// One arrival at a counter with release semantics (the thread's earlier writes, and its block's
// reads and writes ordered before them by a barrier, come before the count); the count before.
__device__ __forceinline__ unsigned arrive_release(unsigned* counter) {
  unsigned prev;
  asm volatile("atom.add.release.gpu.u32 %0, [%1], 1;" : "=r"(prev) : "l"(counter) : "memory");
  return prev;
}

// Before the dependency wait (none of it is a previous kernel's output): kPost's post-norm weights
// and kHeadNorm's block's head's norm weights on their way into shared memory (cp.async: waited
// for after the dependency wait, shown to the block by the staging's first barrier), and
// kHeadNorm's rotations of the step's position, rope_append_kernel's angles.
template <bool kPost, bool kHeadNorm>
__device__ __forceinline__ void fold_prologue(const GemvArgs& a, const FoldSmem& f) {
  using cuda::detail::cp_async_16;
  if constexpr (kPost) {
#pragma unroll
    for (int j = 0; j < kThreadChunks; ++j) {  // the thread's input chunks
      const int k = (threadIdx.x + kGemvThreads * j) * kChunk;
      if (k < a.K) {
        cp_async_16(f.pw + k, a.post_w + k, 16);
        cp_async_16(f.pw + k + 4, a.post_w + k + 4, 16);
      }
    }
  }
  if constexpr (kHeadNorm) {
    const RopeAppendArgs& ra = a.rope;
    const int half = ra.d / 2, p0 = blockIdx.x * kGemvWarps;
    if (p0 < (ra.Hq + ra.Hkv) * half) {  // a q / k block (a head's pairs fill whole blocks)
      const float* nw = p0 / half < ra.Hq ? ra.q_norm : ra.k_norm;
      static_assert(kMaxFoldHeadDim / 2 <= kGemvThreads, "a rotation or 4 weights a thread");
      if (threadIdx.x < ra.d / 4) cp_async_16(f.hw + 4 * threadIdx.x, nw + 4 * threadIdx.x, 16);
      if (threadIdx.x < half)
        f.rot[threadIdx.x] = rope_cos_sin(ra.pos[0], ra.inv_freq[threadIdx.x]);
    }
  }
  cuda::detail::cp_async_commit();
}

// kPost's add in stage_row, once the thread's chunks of x are in xv and of the post row in
// f.oraw: the post row's 1 / rms in the row kernels' order (every warp forms it: no barrier to
// share it), then x + rms_norm(o) post_w into xv and xraw.
__device__ __forceinline__ void post_norm_add_row(const GemvArgs& a, const FoldSmem& f,
                                                  float4 (&xv)[kThreadChunks][2], float* xraw) {
  const int chunks = a.K / kChunk;
  __syncthreads();  // the post row, and the post-norm weights' copies
  const float scale = warp0_inv_rms_row_order(f.oraw, a.K, a.eps);
#pragma unroll
  for (int j = 0; j < kThreadChunks; ++j) {
    const int c = threadIdx.x + kGemvThreads * j;
    if (c < chunks) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = c * kChunk + 4 * h;
        const float4 o = *reinterpret_cast<const float4*>(f.oraw + k);
        const float4 w = *reinterpret_cast<const float4*>(f.pw + k);
        float4& v = xv[j][h];
        v.x = post_norm_add(v.x, o.x, scale, w.x);
        v.y = post_norm_add(v.y, o.y, scale, w.y);
        v.z = post_norm_add(v.z, o.z, scale, w.z);
        v.w = post_norm_add(v.w, o.w, scale, w.w);
        *reinterpret_cast<float4*>(xraw + k) = v;
      }
    }
  }
}

// kPost, the launch's last block: the new residual row (xraw) to x_out. Every block read x before
// it counted itself, so x_out may be x.
__device__ __forceinline__ void write_post_row(const GemvArgs& a, const float* xraw) {
  __threadfence();  // acquire: after the other blocks' counts, so after their reads of x
#pragma unroll
  for (int j = 0; j < kThreadChunks; ++j) {  // the thread's input chunks
    const int k = (threadIdx.x + kGemvThreads * j) * kChunk;
    if (k < a.K) {
      reinterpret_cast<float4*>(a.x_out + k)[0] = reinterpret_cast<const float4*>(xraw + k)[0];
      reinterpret_cast<float4*>(a.x_out + k)[1] = reinterpret_cast<const float4*>(xraw + k)[1];
    }
  }
}

// The input row (B = 1) into xs as the product's bf16 operand, normed when kNorm; xraw: K floats
// of shared memory. Ends with a block barrier.
// kPost: the row normed is x + rms_norm(post_in) post_w (post_norm_add_row; the post row's
// chunks read with x's, one round trip), which xraw keeps until the block ends (f: the fold's
// arrays). kArrive: thread kArrivingThread counts the block at a.arrivals once the block has read
// x, while warp 0 sums; the count before (*arrived) is read at the block's end.
template <bool kNorm, bool kPost = false, bool kArrive = false>
__device__ __forceinline__ void stage_row(const GemvArgs& a, const RowNorm& n, uint4* xs,
                                          float* xraw, float* inv_rms, const FoldSmem* f = nullptr,
                                          unsigned* arrived = nullptr) {
  const int chunks = a.K / kChunk;
  if constexpr (kNorm) {
    const float* x = static_cast<const float*>(a.x);
    float4 xv[kThreadChunks][2];
#pragma unroll
    for (int j = 0; j < kThreadChunks; ++j) {
      const int c = threadIdx.x + kGemvThreads * j;
      if (c < chunks) {
        xv[j][0] = *reinterpret_cast<const float4*>(x + c * kChunk);
        xv[j][1] = *reinterpret_cast<const float4*>(x + c * kChunk + 4);
        if constexpr (kPost) {
          const float4* o = reinterpret_cast<const float4*>(a.post_in + c * kChunk);
          reinterpret_cast<float4*>(f->oraw + c * kChunk)[0] = o[0];
          reinterpret_cast<float4*>(f->oraw + c * kChunk)[1] = o[1];
        } else {
          reinterpret_cast<float4*>(xraw + c * kChunk)[0] = xv[j][0];
          reinterpret_cast<float4*>(xraw + c * kChunk)[1] = xv[j][1];
        }
      }
    }
    if constexpr (kPost) post_norm_add_row(a, *f, xv, xraw);
    __syncthreads();
    if constexpr (kArrive) {
      if (threadIdx.x == kArrivingThread) *arrived = arrive_release(a.arrivals);
    }
    if (threadIdx.x < 32) {  // row_inv_rms's sum, from shared memory
      const int lane = threadIdx.x;
      float ss = 0.f;
      for (int k = lane; k < a.K; k += 32) ss += xraw[k] * xraw[k];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) inv_rms[0] = rsqrtf(ss / static_cast<float>(a.K) + a.eps);
    }
    __syncthreads();
    const float scale = inv_rms[0];
#pragma unroll
    for (int j = 0; j < kThreadChunks; ++j) {
      const int c = threadIdx.x + kGemvThreads * j;
      if (c < chunks) {
        const float xs8[kChunk] = {xv[j][0].x, xv[j][0].y, xv[j][0].z, xv[j][0].w,
                                   xv[j][1].x, xv[j][1].y, xv[j][1].z, xv[j][1].w};
        const float ws8[kChunk] = {n.w[j][0].x, n.w[j][0].y, n.w[j][0].z, n.w[j][0].w,
                                   n.w[j][1].x, n.w[j][1].y, n.w[j][1].z, n.w[j][1].w};
        float xf[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
          xf[i] = round_bf16(xs8[i] * scale * ws8[i]);  // input_chunk
        xs[c] = pack8(xf);
      }
    }
  } else {
    const bf16* x = static_cast<const bf16*>(a.x);
#pragma unroll
    for (int j = 0; j < kThreadChunks; ++j) {
      const int c = threadIdx.x + kGemvThreads * j;
      if (c < chunks) xs[c] = *reinterpret_cast<const uint4*>(x + c * kChunk);
    }
  }
  __syncthreads();
}

// kF32Add at batch 1: lane 0's two residual values y[r0], y[r1] of its warp's pair, read right
// after the dependency wait (earlier kernels wrote them), so that the residual add at the end
// waits for no load: one round trip off the kernel's critical path. Else (0, 0), never read.
template <GemvOut kOut>
__device__ __forceinline__ float2 residual_pair(const GemvArgs& a, const GemvWarp& w) {
  float2 res = make_float2(0.f, 0.f);
  if constexpr (kOut == GemvOut::kF32Add) {
    if (w.live && (threadIdx.x & 31) == 0) {
      const float* y = static_cast<const float*>(a.y);
      res.x = y[w.r0];
      if (w.has_r1) res.y = y[w.r1];
    }
  }
  return res;
}

// gemma3's q / k head h at batch 1, by the head's last warp (every lane), as rope_append_kernel
// forms it: the head's d projected values (y, stored by the head's warps) read back through L2,
// its 1 / rms (a lane's columns lane, lane + 32, ..., then the xor sum), each rotated pair normed
// and rotated (rope_append.cuh's roundings) with the rotations formed before the wait; q stored,
// or k appended.
__device__ __forceinline__ void norm_rotate_store_head(const GemvArgs& a, int h,
                                                       const FoldSmem& f) {
  const RopeAppendArgs& ra = a.rope;
  const int d = ra.d, half = d / 2, lane = threadIdx.x & 31;
  const unsigned short* src = static_cast<const unsigned short*>(a.y) + h * d;  // [d] bf16 bits
  constexpr int kCols = kMaxFoldHeadDim / 32;                                   // a lane's columns
  float v[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) {  // every load in flight before the first sum
    const int i = lane + 32 * j;
    v[j] = i < d ? rope_value(__ushort_as_bfloat16(__ldcg(src + i)), ra.bias, h * d + i) : 0.f;
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int i = lane + 32 * j;
    if (i < d) {
      ss = add_square(ss, v[j]);
      f.hv[i] = v[j];
    }
  }
  const float scale = inv_rms_of(cuda::detail::warp_sum(ss), d, ra.norm_eps);
  __syncwarp();  // f.hv from every lane
  bf16* dst = h < ra.Hq ? ra.q_out + static_cast<int64_t>(h) * d
                        : ra.k_cache + decode_append_row(ra, h - ra.Hq, ra.pos[0]) * d;
#pragma unroll
  for (int j = 0; j < kMaxFoldHeadDim / 64; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      int ia, ib;
      rope_pair_cols(ra.neox, half, i, &ia, &ib);
      const float2 r = rope_rotated(head_normed(f.hv[ia], scale, f.hw[ia]),
                                    head_normed(f.hv[ib], scale, f.hw[ib]), f.rot[i]);
      dst[ia] = __float2bfloat16_rn(r.x);
      dst[ib] = __float2bfloat16_rn(r.y);
    }
  }
}

// kHeadNorm's epilogue of a live warp (every lane holds the pair's sums): a v pair is appended as
// kRopeAppend appends it; a q / k pair's two values go to y as bf16 (what the separate projection
// stores), lane 0 counts the warp at its head's counter (release), and the head's last warp
// finishes the head. Warps count, not blocks: no block barrier before a count.
__device__ __forceinline__ void head_norm_epilogue(const GemvArgs& a, const GemvWarp& w,
                                                   const FoldSmem& f, float acc0, float acc1) {
  const RopeAppendArgs& ra = a.rope;
  const int half = ra.d / 2, lane = threadIdx.x & 31;
  if (w.pair >= (ra.Hq + ra.Hkv) * half) {
    if (lane == 0) store_rope_append<true>(a, w.pair, 0, acc0, acc1, make_float2(1.f, 0.f));
    return;
  }
  const int h = w.pair / half;
  unsigned prev = 0;
  if (lane == 0) {
    bf16* y = static_cast<bf16*>(a.y);
    y[w.r0] = __float2bfloat16_rn(acc0);
    y[w.r1] = __float2bfloat16_rn(acc1);
    prev = arrive_release(a.head_arrivals + h);
  }
  if (__shfl_sync(0xffffffffu, prev, 0) != static_cast<unsigned>(half - 1)) return;
  __threadfence();                         // acquire: the head's other warps' values
  if (lane == 0) a.head_arrivals[h] = 0u;  // for the next launch: every warp of the head counted
  norm_rotate_store_head(a, h, f);
}

// The batch-1 body after the dependency wait with the weights in registers (preloads(a)): one
// batch row, so one pair of sums a lane and one epilogue (store_rows' order of the lane sums).
// kOut == kRopeAppend: rot holds the rotation of lane 0's q / k pair (early_rotation); kF32Add:
// res the residual values of residual_pair, y = res + sums as store_pair's y += sums.
// The folds (f: their shared arrays): kPost stages x + rms_norm(post_in) post_w (stage_row); where
// no later arrival ends the launch (not kRopeAppend) the block counts itself at a.arrivals during
// the staging and the last block writes the new x after its products. kHeadNorm:
// head_norm_epilogue.
template <bool kNorm, GemvOut kOut, bool kGeluTanh, bool kPost = false, bool kHeadNorm = false>
__device__ __forceinline__ void gemv_row_preloaded(const GemvArgs& a, const GemvWarp& w,
                                                   const RowWeights& r, const RowNorm& n, uint4* xs,
                                                   float* xraw, float* inv_rms, float2 rot,
                                                   float2 res, const FoldSmem* f = nullptr) {
  constexpr bool kArrive = kPost && kOut != GemvOut::kRopeAppend;
  unsigned arrived = 0;
  stage_row<kNorm, kPost, kArrive>(a, n, xs, xraw, inv_rms, f, &arrived);
  float acc0 = 0.f, acc1 = 0.f;
  if (w.live) {
    const int lane = threadIdx.x & 31, chunks = a.K / kChunk;
#pragma unroll
    for (int i = 0; i < kLaneChunks; ++i) {
      const int c = lane + 32 * i;
      if (c >= chunks) break;
      float wf0[kChunk], wf1[kChunk], xf[kChunk];
      unpack8(r.w0[i], wf0);
      unpack8(r.w1[i], wf1);
      unpack8(xs[c], xf);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        acc0 = fmaf(wf0[k], xf[k], acc0);
        acc1 = fmaf(wf1[k], xf[k], acc1);
      }
    }
  }
  if constexpr (kArrive) {
    if (threadIdx.x == kArrivingThread) {
      *f->last = arrived == gridDim.x - 1;
      if (*f->last) atomicExch(a.arrivals, 0u);  // every other block has counted
    }
  }
  __syncthreads();  // a next use of the block's shared memory overwrites xs
  if constexpr (kArrive) {
    if (*f->last) write_post_row(a, xraw);
  }
  if (!w.live) return;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    acc0 += __shfl_xor_sync(0xffffffffu, acc0, o);
    acc1 += __shfl_xor_sync(0xffffffffu, acc1, o);
  }
  if constexpr (kHeadNorm) {
    head_norm_epilogue(a, w, *f, acc0, acc1);
    return;
  }
  if ((threadIdx.x & 31) != 0) return;
  if constexpr (kOut == GemvOut::kF32Add) {
    float* y = static_cast<float*>(a.y);
    y[w.r0] = res.x + acc0;
    if (w.has_r1) y[w.r1] = res.y + acc1;
  } else {
    store_pair<kOut, kGeluTanh, true>(a, w.pair, w.r0, w.r1, w.has_r1, 0, acc0, acc1, rot);
  }
}

// kRopeAppend at batch 1: lane 0's RoPE rotation (cos, sin) of its warp's pair where the pair is a
// q / k pair (else (1, 0), never read), formed before the kernel's dependency wait: it reads only
// the step's positions and the frequencies.
template <GemvOut kOut>
__device__ __forceinline__ float2 early_rotation(const GemvArgs& a, const GemvWarp& w) {
  if constexpr (kOut == GemvOut::kRopeAppend) {
    const RopeAppendArgs& ra = a.rope;
    if (w.live && (threadIdx.x & 31) == 0 && w.pair < (ra.Hq + ra.Hkv) * (ra.d / 2))
      return rope_rotation(ra, w.pair, 0);
  }
  return make_float2(1.f, 0.f);
}

}  // namespace kvevict::gpu::detail::gemv
