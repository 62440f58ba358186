// Decode attention over the per-head variable-length (compacted) cache, split over keys with a
// log-sum-exp merge (flash-decoding).
//
// Grid: (segment = sequence x KV head, key split). A block holds the G query heads of its KV head,
// so every K/V row is read once per KV head. Key tiles of 64 rows go through shared memory (rows
// padded to an odd number of 32-bit words so the per-key dot products of a warp hit 32 banks);
// the G x 64 logits are one dot product per thread, the online softmax runs one warp per head,
// and each thread accumulates a pair of output dims for G/2 heads. Decode reads each K/V byte
// once and does ~4 G flops per byte: bandwidth-bound at any G, so CUDA cores suffice. That SIMT
// kernel is the comparison (KVEVICT_DECODE_SIMT=1); the default is the tensor-core block of
// decode_attention_block.cuh, whose splits merge in the launch (the last block of a segment) in
// the fused step, and whose short segments in small launches run as one split that writes its
// result directly with every key tile in flight (make_plan).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "cuda/common.cuh"
#include "cuda/decode_attention_block.cuh"
#include "cuda/decode_step_scores.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/mma_tile.cuh"
#include "cuda/model_launchers.h"
#include "cuda/window_traits.cuh"

namespace kvevict::gpu::detail {
namespace {

using namespace decode_attn;  // NOLINT(google-build-using-namespace): this file's own device code
using Params = DecodeAttentionParams;
using kvevict::cuda::detail::grid_dependency_wait;
using kvevict::cuda::detail::launch_dependents;

template <int D_, int MaxG_>
struct DecodeTraits {
  static constexpr int kD = D_;
  static constexpr int kMaxG = MaxG_;
  static constexpr int kThreads = 128;
  static constexpr int kTileKeys = 64;
  static constexpr int kStrideWords = kD / 2 + 1;       // odd: conflict-free row-per-thread reads
  static constexpr int kPairs = kD / 2;                 // output dim pairs
  static constexpr int kHeadSlots = kThreads / kPairs;  // threads sharing one dim pair
  static constexpr int kHeadsPerThread = (kMaxG + kHeadSlots - 1) / kHeadSlots;
  // d = 256 would need 74 KB of static shared memory (over the 48 KB limit): not built; d = 256
  // (gemma3) runs the tensor-core kernel only.
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static_assert(kThreads % kPairs == 0 || kPairs % kThreads == 0, "dim pairs over threads");
  static_assert(kPairs <= kThreads, "one dim pair per thread at most");
  static_assert(kMaxG * kTileKeys % kThreads == 0, "logits per thread");
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) decode_attention_kernel(Params p) {
  constexpr int D = Tr::kD, TK = Tr::kTileKeys, SW = Tr::kStrideWords, MG = Tr::kMaxG;
  __shared__ float q_s[MG][D];      // queries times scale * log2(e)
  __shared__ uint32_t k_s[TK][SW];  // key tile (bf16 pairs)
  __shared__ uint32_t v_s[TK][SW];  // value tile
  __shared__ float p_s[MG][TK];     // logits, then probabilities
  __shared__ float corr_s[MG];
  __shared__ float m_s[MG], l_s[MG];

  const DecodeAttentionArgs& a = p.a;
  const int G = p.group;
  const int seg = blockIdx.x, split = blockIdx.y;
  const int b = seg / a.Hkv, g = seg % a.Hkv;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t len = a.seg_len[seg];
  const int64_t base = a.seg_off[seg];
  const int64_t k0 = split * p.keys_per_split;
  const int64_t k1 = min(len, k0 + p.keys_per_split);

  for (int i = tid; i < G * D; i += Tr::kThreads) {
    const int hq = i / D, c = i % D;
    q_s[hq][c] =
        __bfloat162float(a.q[(static_cast<int64_t>(b) * a.Hq + g * G + hq) * D + c]) * p.scale_log2;
  }
  if (tid < MG) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  const int pair = tid % Tr::kPairs, slot = tid / Tr::kPairs;
  float o[Tr::kHeadsPerThread][2];
#pragma unroll
  for (int j = 0; j < Tr::kHeadsPerThread; ++j) o[j][0] = o[j][1] = 0.f;
  __syncthreads();

  for (int64_t t0 = k0; t0 < k1; t0 += TK) {
    const int nk = k1 - t0 < TK ? static_cast<int>(k1 - t0) : TK;
    // Tile load: 16-byte global reads, 4-byte shared stores (the padded rows are not 16-aligned).
    constexpr int kChunks = D / 8;
    for (int c = tid; c < TK * kChunks; c += Tr::kThreads) {
      const int key = c / kChunks, ch = c % kChunks;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (key < nk) {
        const int64_t row = base + t0 + key;
        kv = *reinterpret_cast<const uint4*>(a.k + row * D + ch * 8);
        vv = *reinterpret_cast<const uint4*>(a.v + row * D + ch * 8);
      }
      uint32_t* kd = &k_s[key][ch * 4];
      uint32_t* vd = &v_s[key][ch * 4];
      kd[0] = kv.x;
      kd[1] = kv.y;
      kd[2] = kv.z;
      kd[3] = kv.w;
      vd[0] = vv.x;
      vd[1] = vv.y;
      vd[2] = vv.z;
      vd[3] = vv.w;
    }
    __syncthreads();
    // Logits: thread -> (head, key), keys fastest so a warp reads 32 different rows.
    for (int i = tid; i < G * TK; i += Tr::kThreads) {
      const int hq = i / TK, key = i % TK;
      float acc = 0.f;
#pragma unroll 8
      for (int w = 0; w < D / 2; ++w) {
        const uint32_t kw = k_s[key][w];
        const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&kw));
        acc = fmaf(q_s[hq][2 * w], kf.x, acc);
        acc = fmaf(q_s[hq][2 * w + 1], kf.y, acc);
      }
      p_s[hq][key] = key < nk ? acc : -INFINITY;
      // q_s holds q * scale * log2(e): acc * ln 2 is the logit z = q.k * scale.
      if (a.z_out != nullptr && key < nk) a.z_out[(base + t0 + key) * G + hq] = acc * kLn2;
    }
    __syncthreads();
    // Online softmax, one warp per head.
    for (int hq = warp; hq < G; hq += Tr::kThreads / 32) {
      const float x0 = p_s[hq][lane], x1 = p_s[hq][lane + 32];
      float mx = nan_max(x0, x1);
      for (int o2 = 16; o2 > 0; o2 >>= 1) mx = nan_max(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
      const float m_old = m_s[hq];
      const float m_new = nan_max(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float e0 = exp2f(x0 - m_use), e1 = exp2f(x1 - m_use);
      p_s[hq][lane] = e0;
      p_s[hq][lane + 32] = e1;
      float s = e0 + e1;
      for (int o2 = 16; o2 > 0; o2 >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o2);
      if (lane == 0) {
        const float c = exp2f(m_old - m_use);
        corr_s[hq] = c;
        l_s[hq] = l_s[hq] * c + s;
        m_s[hq] = m_new;
      }
    }
    __syncthreads();
    // O = O * corr + P V for this thread's dim pair and heads slot, slot + kHeadSlots, ...
#pragma unroll
    for (int j = 0; j < Tr::kHeadsPerThread; ++j) {
      const int hq = slot + j * Tr::kHeadSlots;
      if (hq < G) {
        o[j][0] *= corr_s[hq];
        o[j][1] *= corr_s[hq];
      }
    }
    for (int key = 0; key < nk; ++key) {
      const uint32_t vw = v_s[key][pair];
      const float2 vf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vw));
#pragma unroll
      for (int j = 0; j < Tr::kHeadsPerThread; ++j) {
        const int hq = slot + j * Tr::kHeadSlots;
        if (hq < G) {
          const float pr = p_s[hq][key];
          o[j][0] = fmaf(pr, vf.x, o[j][0]);
          o[j][1] = fmaf(pr, vf.y, o[j][1]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites k_s, v_s, p_s
  }

  const int64_t part = (static_cast<int64_t>(seg) * p.splits + split) * G;
#pragma unroll
  for (int j = 0; j < Tr::kHeadsPerThread; ++j) {
    const int hq = slot + j * Tr::kHeadSlots;
    if (hq < G) {
      p.part_o[(part + hq) * D + 2 * pair] = o[j][0];
      p.part_o[(part + hq) * D + 2 * pair + 1] = o[j][1];
    }
  }
  if (tid < G) {
    p.part_ml[(part + tid) * 2] = m_s[tid];
    p.part_ml[(part + tid) * 2 + 1] = l_s[tid];
  }
}

// Tensor-core variant (the default): the G query rows of a KV head padded to one 16-row mma slab,
// 4 warps each owning 16 keys of every 64-key tile (d = 256: 2 warps, 32-key tiles, the
// WindowTraits shared-memory budget), K/V through a 2-stage cp.async buffer, S = Q
// kScoreG > 0: the fused step scores (the logits are exported too); kScoreG bounds the group.
// Launched as a programmatic dependent (a.pdl): wait for the append that wrote this step's row and
// length; let the next kernel (the o projection) start fetching its weights meanwhile. Both are
// no-ops in a normal launch.
template <class Tr, bool kZ, int kScoreG, bool kDirect = false, int kStages = 2>
__global__ void __launch_bounds__(Tr::kThreads) decode_attention_mma_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  grid_dependency_wait();
  launch_dependents();
  mma_block<Tr, kZ, kScoreG, kDirect, kStages>(p, blockIdx.x, blockIdx.y, smem);
}

// One warp per (sequence, query head): combines the splits into out (bf16) and lse.
template <int D>
__global__ void decode_merge_kernel(Params p) {
  const DecodeAttentionArgs& a = p.a;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= a.B * a.Hq) return;
  const int b = warp / a.Hq, h = warp % a.Hq;
  merge_head<D>(p, b * a.Hkv + h / p.group, h % p.group, lane, nullptr, nullptr);
}

struct Plan {
  int splits = 1;
  int64_t keys_per_split = 64;
};

// Blocks of the tensor-core kernel of head dim d (the attention-only variant, the common launch)
// that one SM holds at once, from the occupancy calculator: its shared memory is the limit (72 KB
// a block at d = 128, so 3 fit in an H100's or H200's 228 KB) unless its registers are. At most 4
// (latency hiding for a bandwidth-bound kernel needs no more); 1 when the query fails (its error
// is cleared, so no later cudaGetLastError() reports it). Cached per device and head dim.
template <int D>
int occupancy_of_mma_kernel() {
  using Tr = kvevict::cuda::detail::WindowTraits<bf16, D, 1>;
  constexpr size_t smem = mma_smem_bytes<Tr>();
  auto kernel = decode_attention_mma_kernel<Tr, false, 0>;
  int blocks = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tr::kThreads, smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return std::clamp(blocks, 1, 4);
}
int resident_blocks_per_sm(int d) {
  static std::mutex mu;
  static int cached[64][3] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    return 1;
  }
  const int slot = d == 64 ? 0 : d == 128 ? 1 : 2;
  std::lock_guard<std::mutex> lock(mu);
  int& blocks = cached[dev][slot];
  if (blocks == 0)
    blocks = d == 64    ? occupancy_of_mma_kernel<64>()
             : d == 128 ? occupancy_of_mma_kernel<128>()
                        : occupancy_of_mma_kernel<256>();
  return blocks;
}

// KVEVICT_DECODE_SPLIT_KEYS (bench A/B runs): the fewest keys a split is planned for, a multiple of
// 64 from 64 to 65,536 (65,536: one split a segment); 0 when unset (make_plan's own rule).
int64_t forced_split_keys() {
  static const int64_t keys = [] {
    const char* e = std::getenv("KVEVICT_DECODE_SPLIT_KEYS");
    const long v = e != nullptr ? std::strtol(e, nullptr, 10) : 0;
    return v >= 64 && v <= 65536 && v % 64 == 0 ? static_cast<int64_t>(v) : int64_t{0};
  }();
  return keys;
}

// The one-split kernel's cp.async stages at head dim D: every tile of a one-split segment in
// flight at once, as many as a block's shared memory holds (at most 12: d = 64 takes 12 tiles of 64
// keys, d = 128 6 of 64, d = 256 6 of 32). Also the most tiles a segment of one split has.
template <int D>
constexpr int direct_stages() {
  using Tr = kvevict::cuda::detail::WindowTraits<bf16, D, 1>;
  return kvevict::cuda::detail::stages_that_fit(
      1, [](int s) { return mma_smem_bytes_for<Tr>(s); }, 12);
}
int direct_stages_of(int d) {
  return d == 64 ? direct_stages<64>() : d == 128 ? direct_stages<128>() : direct_stages<256>();
}

// The key tiles of the tensor-core kernel at head dim d (32 keys at d = 256, else 64).
int tile_keys_of(int d) {
  return d == 256 ? kvevict::cuda::detail::WindowTraits<bf16, 256, 1>::kTileKeys
                  : kvevict::cuda::detail::WindowTraits<bf16, 64, 1>::kTileKeys;
}

// Launches of at most kOneSplitSegments segments, each of at most direct_stages key tiles, run one
// split a segment (the block's result written directly: no partials, arrival counter or merge),
// all of its tiles in flight. Measured on an H100 (2026-12-07 (d), graph decode, one split against
// the plan below), first with two stages: at batch 1 the SmolLM2 shape (3 segments, 64-key tiles)
// +20% / +11% / +2.5% at 3 / 4 / 6 tiles a segment, even at 8, -5% at 10, and the Gemma 3 shape
// (1 segment, 32-key tiles at d = 256) +2.7% at 5 tiles, even at 7, -10% at 11; at batch 8 the
// SmolLM2 shape (24 segments) +0.7% at 3 tiles but -3.4% at 6, the Gemma 3 shape (8 segments)
// +0.5% at 5. Then with every tile in flight (6 stages): the SmolLM2 shape +12% more at 6 tiles.
constexpr int kOneSplitSegments = 8;

// One wave: as many splits as the resident blocks allow (a grid one block past them runs a second
// wave that leaves most of the GPU idle: 528 blocks of 3 a SM on 132 SMs took 2 waves of 8 tiles
// each where 376 blocks take one of 11), at least 2 tiles a split: a split's partial (G x d floats)
// stays 16x smaller than the K and V it read (the 8B's 10% cache, 3,277 keys a head at batch 1,
// runs 26 splits = 208 blocks instead of 13 = 104 on 132 SMs). Segments beyond the resident blocks
// run one split each, and so do the few short segments of kOneSplitSegments / direct_stages tiles
// at head dim d.
Plan make_plan(int segments, int64_t max_len, int sm_count, int d) {
  const int blocks_per_sm = resident_blocks_per_sm(d), tile_keys = tile_keys_of(d),
            one_split_tiles = direct_stages_of(d);
  Plan pl;
  const int64_t forced = forced_split_keys();
  const int64_t min_keys = forced > 0 ? forced : 128;
  const bool one_split = forced == 0 && segments <= kOneSplitSegments &&
                         (max_len + tile_keys - 1) / tile_keys <= one_split_tiles;
  const int64_t resident = static_cast<int64_t>(sm_count) * blocks_per_sm;
  int64_t splits = segments > 0 ? resident / segments : 1;  // (no segments: callers refuse B = 0)
  const int64_t max_splits = one_split ? 1 : (max_len + min_keys - 1) / min_keys;
  splits = std::max<int64_t>(1, std::min(splits, max_splits));
  int64_t kps = (max_len + splits - 1) / splits;
  kps = std::max<int64_t>(64, (kps + 63) / 64 * 64);
  pl.keys_per_split = kps;
  pl.splits = static_cast<int>(std::max<int64_t>(1, (max_len + kps - 1) / kps));
  return pl;
}

// KVEVICT_DECODE_SIMT=1 selects the CUDA-core kernel (for comparisons); the default is mma.
bool use_simt() {
  static const bool simt = [] {
    const char* e = std::getenv("KVEVICT_DECODE_SIMT");
    return e != nullptr && e[0] == '1';
  }();
  return simt;
}

// The one-split kernel (kDirect) keeps all of a one-split segment's tiles in flight at once.
template <class Tr, bool kZ, int kScoreG, bool kDirect = false>
cudaError_t launch_mma(const Params& p, cudaStream_t stream) {
  constexpr int kStages = kDirect ? direct_stages<Tr::kD>() : 2;
  constexpr size_t smem = mma_smem_bytes<Tr, kStages>();
  static_assert(smem <= 227 * 1024, "a block's shared memory");
  static_assert(kScoreG * (Tr::kD + 1) * sizeof(float) + sizeof(TopPairs) +
                        Tr::kThreads / 32 * (Tr::kD + 4) * sizeof(float) <=
                    smem,
                "fused scores' a, lse and top-row scratch fit");
  auto kernel = decode_attention_mma_kernel<Tr, kZ, kScoreG, kDirect, kStages>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(p.a.B * p.a.Hkv, p.splits);
  if (p.a.pdl)
    return kvevict::cuda::detail::launch_pdl(kernel, grid, dim3(Tr::kThreads), smem, stream, p);
  kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_d(const Params& p, cudaStream_t stream) {
  using Tr = kvevict::cuda::detail::WindowTraits<bf16, D, 1>;
  if (p.score.acc != nullptr) {  // one launch: attention, merge, step scores
    if (p.group <= 4) return launch_mma<Tr, true, 4>(p, stream);
    if (p.group <= 8) return launch_mma<Tr, true, 8>(p, stream);
    return launch_mma<Tr, true, 16>(p, stream);
  }
  const dim3 grid(p.a.B * p.a.Hkv, p.splits);
  if (D == 256 && (use_simt() || p.group > 16)) return cudaErrorInvalidValue;  // mma kernel only
  cudaError_t err = cudaSuccess;
  if (!use_simt() && p.group <= 16) {
    // One split merged in the launch: written directly, no partials (mma_block's kDirect).
    const bool direct = p.splits == 1 && p.a.merge_counters != nullptr;
    if (p.a.z_out != nullptr)
      err = direct ? launch_mma<Tr, true, 0, true>(p, stream) : launch_mma<Tr, true, 0>(p, stream);
    else
      err =
          direct ? launch_mma<Tr, false, 0, true>(p, stream) : launch_mma<Tr, false, 0>(p, stream);
    if (err != cudaSuccess || p.a.merge_counters != nullptr) return err;  // merged in the launch
  } else if constexpr (D <= 128) {
    if (p.group <= 4) {
      decode_attention_kernel<DecodeTraits<D, 4>><<<grid, 128, 0, stream>>>(p);
    } else if (p.group <= 8) {
      decode_attention_kernel<DecodeTraits<D, 8>><<<grid, 128, 0, stream>>>(p);
    } else {
      return cudaErrorInvalidValue;
    }
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) return err;
  const int warps = p.a.B * p.a.Hq;
  decode_merge_kernel<D><<<(warps + 7) / 8, 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

size_t decode_attention_scratch_bytes(int B, int Hq, int Hkv, int d, int64_t max_len,
                                      int sm_count) {
  const Plan pl = make_plan(B * Hkv, max_len, sm_count, d);
  const size_t rows = static_cast<size_t>(B) * Hq * pl.splits;
  return (rows * d * sizeof(float) + 255) / 256 * 256 + rows * 2 * sizeof(float);
}

bool decode_step_scores_fusable(int d, int group) {
  return (d == 64 || d == 128 || d == 256) && group >= 1 && group <= 16;
}

cudaError_t launch_decode_attention(const DecodeAttentionArgs& a, bf16* out, float* lse,
                                    float* out_f32, void* scratch, size_t scratch_bytes,
                                    int sm_count, cudaStream_t stream,
                                    const DecodeStepScoreArgs* scores) {
  if (a.B <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0 || a.max_len <= 0) return cudaErrorInvalidValue;
  if (scores != nullptr &&
      (!decode_step_scores_fusable(a.d, a.Hq / a.Hkv) || a.z_out == nullptr ||
       scores->acc == nullptr || scores->counters == nullptr ||
       static_cast<int>(scores->kind) > static_cast<int>(DecodeScore::kObcacheVK)))
    return cudaErrorInvalidValue;
  if (scratch_bytes < decode_attention_scratch_bytes(a.B, a.Hq, a.Hkv, a.d, a.max_len, sm_count))
    return cudaErrorInvalidValue;
  const Plan pl = make_plan(a.B * a.Hkv, a.max_len, sm_count, a.d);
  Params p;
  p.a = a;
  p.group = a.Hq / a.Hkv;
  p.splits = pl.splits;
  p.keys_per_split = pl.keys_per_split;
  p.scale_log2 = a.scale * kLog2e;
  const size_t rows = static_cast<size_t>(a.B) * a.Hq * pl.splits;
  char* base = static_cast<char*>(scratch);
  p.part_o = reinterpret_cast<float*>(base);
  p.part_ml = reinterpret_cast<float*>(base + (rows * a.d * sizeof(float) + 255) / 256 * 256);
  p.out = out;
  p.lse = lse;
  p.out_f32 = out_f32;
  if (scores != nullptr) p.score = *scores;
  switch (a.d) {
    case 64: return launch_d<64>(p, stream);
    case 128: return launch_d<128>(p, stream);
    case 256: return launch_d<256>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvevict::gpu::detail
