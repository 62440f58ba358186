// The decode step's projections at small batch: y[B, N] = x[B, K] W^T for B <= kGemvMaxBatch rows,
// W [N, K] bf16 row-major (the model's layout; cuBLAS reads it with OP_T), f32 accumulation. Every
// weight byte is read once per step whatever B is, 16 bytes a lane at a time. The block stages the
// B input rows, a tile of kTileK columns at a time, in shared memory as the product's bf16 operand
// (normed once a block). At B = 1 a warp owns an output row pair and sums on the CUDA cores
// (gemv_row_kernel with its weights in registers where K fits one tile, else gemv_kernel); from
// B = 2 a block owns 8 pairs and its warps sum on the tensor cores with the batch as the mma's
// columns (gemv_mma_kernel). Fused around the product, so a decode layer
// launches fewer kernels:
//   - in front, the RMSNorm of f32 rows, rounded as the rms_norm kernel rounds: bf16(x inv_rms w);
//   - behind a gate|up weight, the gated activation of the row pair (j, F + j): both rounded to
//     bf16 first, as the separate kernel reads them;
//   - behind the o / down projections, the residual add (y += x W^T, cuBLAS's beta = 1);
//   - behind the q|k|v projection of a decode step, RoPE and the cache append (the rope_append
//     kernel's decode mode: a warp's row pair is a rotated pair of a q / k head, or two adjacent
//     v columns), the segment lengths advanced by the last block to finish;
//   - gemma3's batch-1 step, in kernel instances of their own: in front of the norm, the post-norm
//     + residual add of the projection before (x + rms_norm(o) w, the last block writing x);
//     behind q|k|v, the per-head q / k norms before RoPE (each head's last warp finishes it).
//     Its layer is then five launches: q|k|v, attention, o, gate|up, down.
// Launched as a programmatic dependent (common.cuh launch_pdl): each warp prefetches the start of
// its weight rows into L2 while the step's previous kernel finishes, then waits for it before it
// reads or writes anything that kernel touches.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/decode_gemv_block.cuh"
#include "cuda/model_launchers.h"

namespace kvevict::gpu::detail {
namespace {

using cuda::detail::grid_dependency_wait;
using cuda::detail::launch_dependents;
using cuda::detail::launch_pdl;
using namespace gemv;  // NOLINT(google-build-using-namespace): this file's own device code

// Grid: one warp per output row pair (pair_rows). Dynamic shared memory: the input tile, B *
// kTileK bf16.
template <bool kNorm, GemvOut kOut, bool kGeluTanh>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(GemvArgs a) {
  __shared__ float inv_rms[kGemvMaxBatch];
  extern __shared__ uint4 xs[];  // [B][kXsStride]
  const GemvWarp w = gemv_warp<kOut>(a, blockIdx.x);
  // The weights do not depend on the previous kernel: on their way into L2 now.
  if (w.live) prefetch_rows(w.w0, w.w1, w.has_r1, a.K, threadIdx.x & 31, 32);
  launch_dependents();
  grid_dependency_wait();
  gemv_rows<kNorm, kOut, kGeluTanh>(a, w, xs, inv_rms);
  if constexpr (kOut == GemvOut::kRopeAppend) advance_lengths_when_last(a, gridDim.x);
}

// Batch 1 with the whole input row in one tile (preloads(a)), gemv_kernel's grid: the warp's
// weights go into registers and (kRopeAppend) its RoPE rotation is formed while the previous kernel
// runs. Its own kernel, one batch row's code: inside gemv_kernel the q|k|v instance was 10,376 SASS
// instructions (every batch row's epilogue, each with a double sincos), and half of its warps'
// stall samples at batch 1 were instruction fetches (ncu, H100, 2026-12-07 (d)).
// kPost / kHeadNorm: gemma3's folds (decode_gemv_block.cuh), instances of their own (launch_fold).
template <bool kNorm, GemvOut kOut, bool kGeluTanh, bool kPost = false, bool kHeadNorm = false>
__global__ void __launch_bounds__(kGemvThreads) gemv_row_kernel(GemvArgs a) {
  static_assert(!(kPost || kHeadNorm) || kNorm, "the folds sit in front of / behind the norm");
  static_assert(!kHeadNorm || kOut == GemvOut::kRopeAppend, "the head norms are RoPE's");
  __shared__ float inv_rms[1];
  // [kXsStride] the operand, then [kTileK] floats: the raw row, then (folds) FoldSmem's arrays
  extern __shared__ uint4 xs[];
  const GemvWarp w = gemv_warp<kOut>(a, blockIdx.x);
  RowWeights r;
  RowNorm n;
  load_row_weights(a, w, r);
  load_row_norm<kNorm>(a, n);
  float* const xraw = reinterpret_cast<float*>(xs + kXsStride);
  const FoldSmem f = fold_smem<kPost, kHeadNorm>(xraw + kTileK);
  if constexpr (kPost || kHeadNorm) fold_prologue<kPost, kHeadNorm>(a, f);
  // (kHeadNorm: the head's last warp rotates with the block's table in f.rot)
  const float2 rot = kHeadNorm ? make_float2(1.f, 0.f) : early_rotation<kOut>(a, w);
  launch_dependents();
  grid_dependency_wait();
  if constexpr (kPost || kHeadNorm) cuda::detail::cp_async_wait<0>();  // this thread's copies
  const float2 res = residual_pair<kOut>(a, w);  // kF32Add: loaded now, added at the end
  gemv_row_preloaded<kNorm, kOut, kGeluTanh, kPost, kHeadNorm>(a, w, r, n, xs, xraw, inv_rms, rot,
                                                               res, &f);
  if constexpr (kOut == GemvOut::kRopeAppend && kPost) {
    // One arrival for both: the lengths advance and the new x is written by the last block.
    if (cuda::detail::last_block_to_arrive(a.arrivals, gridDim.x)) {
      advance_lengths(a);
      write_post_row(a, xraw);
    }
  } else if constexpr (kOut == GemvOut::kRopeAppend) {
    advance_lengths_when_last(a, gridDim.x);
  }
}

// Batches of 2 and more: the tensor cores (mma.sync m16n8k16, bf16 in, f32 sums) take the batch
// as the product's 8 columns, so 32 columns of 16 weight rows cost a warp two mma instead of 16 x B
// FMAs a lane.
// A block owns 8 output pairs (16 weight rows: row g of the mma tile is the first row of pair
// p0 + g, row g + 8 its second, so a lane's sums of both rows of a pair meet in its registers for
// the fused epilogues) and its 4 warps split K by 64-column chunks (warp w: chunks w, w + 4, ...),
// their sums added in shared memory at the end in a fixed order.
// In each 32-column half of a chunk a lane reads 16 bytes of each of its two rows (columns 8t ..
// 8t + 7 of the half, t = lane % 4: the 4 lanes of a row cover its 64 bytes, the two halves a whole
// 128-byte line) and the same 16 bytes of its batch row g = lane / 4 from the staged tile; the
// mma's k order is a permutation of the half's columns, the same for both operands, so the dot
// products are the half's: words 0, 1 of the 16 bytes are the fragment's k 2t .. 2t + 1 and 2t + 8
// .. 2t + 9 of one mma, words 2, 3 those of the next (common.cuh: the fragment layout).
constexpr int kMmaPairs = 8;    // output pairs a block (16 weight rows)
constexpr int kMmaChunkK = 64;  // columns a warp's step (two halves of two k16 mma)

template <bool kNorm, GemvOut kOut, bool kGeluTanh>
__global__ void __launch_bounds__(kGemvThreads) gemv_mma_kernel(GemvArgs a) {
  using kvevict::cuda::detail::mma_16816;
  __shared__ float inv_rms[kGemvMaxBatch];
  __shared__ float4 red[kGemvWarps][32];  // the warps' sums, added by warp 0
  extern __shared__ uint4 xs[];           // [B][kXsStride]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int pairs = output_pairs(a);
  const int pair = blockIdx.x * kMmaPairs + g;
  const bool live = pair < pairs;
  int r0, r1;
  pair_rows<kOut>(a, live ? pair : 0, &r0, &r1);
  const bool has_r1 = kOut == GemvOut::kGated || r1 < a.N;
  const bf16* w0 = a.w + static_cast<int64_t>(r0) * a.K;
  const bf16* w1 = a.w + static_cast<int64_t>(has_r1 ? r1 : r0) * a.K;

  if (warp == 0 && live) prefetch_rows(w0, w1, has_r1, a.K, t, 4);
  launch_dependents();
  grid_dependency_wait();
  row_inv_rms<kNorm>(a, inv_rms);

  float d[4] = {0.f, 0.f, 0.f, 0.f};  // rows (g, g + 8) x batch columns (2t, 2t + 1)
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int k0 = 0; k0 < a.K; k0 += kTileK) {
    const int tk = min(kTileK, a.K - k0);
    stage_tile<kNorm>(a, k0, tk, inv_rms, xs);
    __syncthreads();
    const int steps = (tk + kMmaChunkK - 1) / kMmaChunkK;
#pragma unroll 2
    for (int c = warp; c < steps; c += kGemvWarps) {
      uint4 wa[2], wb[2], x[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // loads of both halves first: 6 in flight a lane
        const int kk = c * kMmaChunkK + 32 * h + 8 * t;  // this lane's 8 columns within the tile
        const bool in = kk < tk;                         // K is a multiple of 8: all 8 or none
        wa[h] = in ? *reinterpret_cast<const uint4*>(w0 + k0 + kk) : zero;
        wb[h] = in ? *reinterpret_cast<const uint4*>(w1 + k0 + kk) : zero;
        x[h] = in && g < a.B ? xs[g * kXsStride + kk / kChunk] : zero;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t f0[4] = {wa[h].x, wb[h].x, wa[h].y, wb[h].y};
        const uint32_t f1[4] = {wa[h].z, wb[h].z, wa[h].w, wb[h].w};
        mma_16816<bf16>(d, f0, x[h].x, x[h].y);
        mma_16816<bf16>(d, f1, x[h].z, x[h].w);
      }
    }
    __syncthreads();  // the next tile overwrites xs
  }
  red[warp][lane] = make_float4(d[0], d[1], d[2], d[3]);
  __syncthreads();
  if (warp == 0 && live) {
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) {
      const float4 v = red[w][lane];
      s[0] += v.x;
      s[1] += v.y;
      s[2] += v.z;
      s[3] += v.w;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int b = 2 * t + j;
      if (b < a.B) store_pair<kOut, kGeluTanh>(a, pair, r0, r1, has_r1, b, s[j], s[2 + j]);
    }
  }
  if constexpr (kOut == GemvOut::kRopeAppend) advance_lengths_when_last(a, gridDim.x);
}

bool head_norms(const GemvArgs& a) {
  return a.out == GemvOut::kRopeAppend && a.rope.q_norm != nullptr;
}

// gemma3's fold instances of the batch-1 kernel (a.post_in, head_norms(a); gemv_supported checked
// them): picked here, so no other instance carries their code.
template <GemvOut kOut, bool kGeluTanh>
cudaError_t launch_fold(const GemvArgs& a, cudaStream_t stream) {
  const bool post = a.post_in != nullptr;
  const dim3 grid(gemv_blocks(a)), block(kGemvThreads);
  if constexpr (kOut == GemvOut::kRopeAppend) {
    if (head_norms(a)) {
      const size_t smem = fold_smem_bytes(post, true);
      return post ? launch_pdl(gemv_row_kernel<true, kOut, false, true, true>, grid, block, smem,
                               stream, a)
                  : launch_pdl(gemv_row_kernel<true, kOut, false, false, true>, grid, block, smem,
                               stream, a);
    }
  }
  return launch_pdl(gemv_row_kernel<true, kOut, kGeluTanh, true, false>, grid, block,
                    fold_smem_bytes(true, false), stream, a);
}

// Batch 1: the CUDA-core kernels (a warp a pair; the weights in registers where the row fits one
// tile); batches of 2 and more: the tensor-core one (GemvArgs::cuda_cores: the CUDA-core one at any
// batch, for tests and A/B runs).
template <bool kNorm, GemvOut kOut, bool kGeluTanh = false>
cudaError_t launch_variant(const GemvArgs& a, cudaStream_t stream) {
  const size_t smem = gemv_smem_bytes(a.B);
  if constexpr (kNorm && (kOut == GemvOut::kBf16 || kOut == GemvOut::kGated ||
                          kOut == GemvOut::kRopeAppend)) {
    if (a.post_in != nullptr || head_norms(a)) return launch_fold<kOut, kGeluTanh>(a, stream);
  }
  if (preloads(a))
    return launch_pdl(gemv_row_kernel<kNorm, kOut, kGeluTanh>, dim3(gemv_blocks(a)),
                      dim3(kGemvThreads), smem, stream, a);
  if (a.B == 1 || a.cuda_cores) {
    const dim3 grid(gemv_blocks(a));
    return launch_pdl(gemv_kernel<kNorm, kOut, kGeluTanh>, grid, dim3(kGemvThreads), smem, stream,
                      a);
  }
  const dim3 grid((output_pairs(a) + kMmaPairs - 1) / kMmaPairs);
  return launch_pdl(gemv_mma_kernel<kNorm, kOut, kGeluTanh>, grid, dim3(kGemvThreads), smem, stream,
                    a);
}

template <bool kNorm>
cudaError_t launch_out(const GemvArgs& a, cudaStream_t stream) {
  switch (a.out) {
    case GemvOut::kBf16: return launch_variant<kNorm, GemvOut::kBf16>(a, stream);
    case GemvOut::kF32: return launch_variant<kNorm, GemvOut::kF32>(a, stream);
    case GemvOut::kF32Add: return launch_variant<kNorm, GemvOut::kF32Add>(a, stream);
    case GemvOut::kGated:
      return a.gelu_tanh ? launch_variant<kNorm, GemvOut::kGated, true>(a, stream)
                         : launch_variant<kNorm, GemvOut::kGated, false>(a, stream);
    case GemvOut::kRopeAppend: return launch_variant<kNorm, GemvOut::kRopeAppend>(a, stream);
  }
  return cudaErrorInvalidValue;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The post-norm fold (GemvArgs::post_in): the batch-1 kernel with its weights preloaded, a normed
// input, an output mode with a fold instance (not the f32 ones: the logits never fold).
bool post_fold_supported(const GemvArgs& a) {
  return preloads(a) && a.norm_w != nullptr &&
         (a.out == GemvOut::kBf16 || a.out == GemvOut::kGated || a.out == GemvOut::kRopeAppend) &&
         a.post_w != nullptr && a.x_out != nullptr && a.arrivals != nullptr &&
         aligned16(a.post_in) && aligned16(a.post_w) && aligned16(a.x_out);
}

// The q / k head norms in the q|k|v epilogue: as above, both norms, the head counters and y, a
// head's pairs filling whole blocks (each block copies one head's norm weights), d within the
// fold's arrays.
bool head_norm_fold_supported(const GemvArgs& a) {
  const RopeAppendArgs& r = a.rope;
  return preloads(a) && a.norm_w != nullptr && r.q_norm != nullptr && r.k_norm != nullptr &&
         a.head_arrivals != nullptr && a.y != nullptr && r.d <= kMaxFoldHeadDim &&
         (r.d / 2) % kGemvWarps == 0 && aligned16(r.q_norm) && aligned16(r.k_norm);
}

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  const bool shape = a.B >= 1 && a.B <= kGemvMaxBatch && a.N >= 1 && a.K >= kChunk &&
                     a.K % kChunk == 0 && aligned16(a.w) && aligned16(a.x) &&
                     (a.norm_w == nullptr || aligned16(a.norm_w)) &&
                     (a.post_in == nullptr || post_fold_supported(a));
  if (a.out != GemvOut::kRopeAppend) return shape;
  const RopeAppendArgs& r = a.rope;
  const bool norms = r.q_norm != nullptr || r.k_norm != nullptr;
  return shape && r.decode && !r.head_major && (!norms || head_norm_fold_supported(a)) &&
         r.d >= 2 && r.d % 2 == 0 && r.Hq >= 1 && r.Hkv >= 1 && a.N == (r.Hq + 2 * r.Hkv) * r.d &&
         a.arrivals != nullptr && r.pos != nullptr && r.inv_freq != nullptr && r.q_out != nullptr &&
         r.k_cache != nullptr && r.v_cache != nullptr && r.pos_cache != nullptr &&
         r.seg_off != nullptr && r.seg_len != nullptr;
}

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_supported(a) || (a.y == nullptr && a.out != GemvOut::kRopeAppend))
    return cudaErrorInvalidValue;
  return a.norm_w != nullptr ? launch_out<true>(a, stream) : launch_out<false>(a, stream);
}

}  // namespace kvevict::gpu::detail
