// Decode attention over the per-head variable-length (compacted) cache, split over keys with a
// log-sum-exp merge (flash-decoding).
//
// Grid: (segment = sequence x KV head, key split). A block holds the G query heads of its KV head,
// so every K/V row is read once per KV head. Key tiles of 64 rows go through shared memory (rows
// padded to an odd number of 32-bit words so the per-key dot products of a warp hit 32 banks);
// the G x 64 logits are one dot product per thread, the online softmax runs one warp per head,
// and each thread accumulates a pair of output dims for G/2 heads. Decode reads each K/V byte
// once and does ~4 G flops per byte: bandwidth-bound at any G, so CUDA cores suffice.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model_cuda/launchers.h"

namespace kvevict::gpu::detail {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D_, int MaxG_>
struct DecodeTraits {
  static constexpr int kD = D_;
  static constexpr int kMaxG = MaxG_;
  static constexpr int kThreads = 128;
  static constexpr int kTileKeys = 64;
  static constexpr int kStrideWords = kD / 2 + 1;  // odd: conflict-free row-per-thread reads
  static constexpr int kPairs = kD / 2;            // output dim pairs
  static constexpr int kHeadSlots = kThreads / kPairs;  // threads sharing one dim pair
  static constexpr int kHeadsPerThread = (kMaxG + kHeadSlots - 1) / kHeadSlots;
  // d = 256 would need 74 KB of static shared memory (over the 48 KB limit): not built.
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static_assert(kThreads % kPairs == 0 || kPairs % kThreads == 0, "dim pairs over threads");
  static_assert(kPairs <= kThreads, "one dim pair per thread at most");
  static_assert(kMaxG * kTileKeys % kThreads == 0, "logits per thread");
};

struct Params {
  DecodeAttentionArgs a;
  int group = 1, splits = 1;
  int64_t keys_per_split = 0;
  float scale_log2 = 0;
  float* part_o = nullptr;   // [S, splits, G, d] unnormalized
  float* part_ml = nullptr;  // [S, splits, G, 2] (max in log2 units, sum)
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) decode_attention_kernel(Params p) {
  constexpr int D = Tr::kD, TK = Tr::kTileKeys, SW = Tr::kStrideWords, MG = Tr::kMaxG;
  __shared__ float q_s[MG][D];                 // queries times scale * log2(e)
  __shared__ uint32_t k_s[TK][SW];             // key tile (bf16 pairs)
  __shared__ uint32_t v_s[TK][SW];             // value tile
  __shared__ float p_s[MG][TK];                // logits, then probabilities
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
    q_s[hq][c] = __bfloat162float(a.q[(static_cast<int64_t>(b) * a.Hq + g * G + hq) * D + c]) *
                 p.scale_log2;
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
      kd[0] = kv.x; kd[1] = kv.y; kd[2] = kv.z; kd[3] = kv.w;
      vd[0] = vv.x; vd[1] = vv.y; vd[2] = vv.z; vd[3] = vv.w;
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
    }
    __syncthreads();
    // Online softmax, one warp per head.
    for (int hq = warp; hq < G; hq += Tr::kThreads / 32) {
      const float x0 = p_s[hq][lane], x1 = p_s[hq][lane + 32];
      float mx = fmaxf(x0, x1);
      for (int o2 = 16; o2 > 0; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
      const float m_old = m_s[hq];
      const float m_new = fmaxf(m_old, mx);
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

// One warp per (sequence, query head): combines the splits into out (bf16) and lse.
__global__ void decode_merge_kernel(Params p, bf16* out, float* lse) {
  const DecodeAttentionArgs& a = p.a;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= a.B * a.Hq) return;
  const int b = warp / a.Hq, h = warp % a.Hq;
  const int g = h / p.group, hq = h % p.group;
  const int seg = b * a.Hkv + g;
  auto prow = [&](int s) { return (static_cast<int64_t>(seg) * p.splits + s) * p.group + hq; };
  float m_all = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) m_all = fmaxf(m_all, p.part_ml[prow(s) * 2]);
  for (int o = 16; o > 0; o >>= 1) m_all = fmaxf(m_all, __shfl_xor_sync(0xffffffffu, m_all, o));
  float l_all = 0.f;
  if (m_all != -INFINITY)
    for (int s = lane; s < p.splits; s += 32)
      l_all += exp2f(p.part_ml[prow(s) * 2] - m_all) * p.part_ml[prow(s) * 2 + 1];
  for (int o = 16; o > 0; o >>= 1) l_all += __shfl_xor_sync(0xffffffffu, l_all, o);
  if (lse != nullptr && lane == 0)
    lse[warp] = m_all == -INFINITY ? -INFINITY : (m_all + log2f(l_all)) * kLn2;
  const float inv_l = l_all > 0.f ? 1.f / l_all : 0.f;
  for (int c = lane; c < a.d; c += 32) {
    float acc = 0.f;
    if (m_all != -INFINITY)
      for (int s = 0; s < p.splits; ++s) {
        const float ms = p.part_ml[prow(s) * 2];
        if (ms != -INFINITY) acc += exp2f(ms - m_all) * p.part_o[prow(s) * a.d + c];
      }
    out[static_cast<int64_t>(warp) * a.d + c] = __float2bfloat16_rn(acc * inv_l);
  }
}

struct Plan {
  int splits = 1;
  int64_t keys_per_split = 64;
};

// Enough blocks for ~4 per SM (latency hiding for a bandwidth-bound kernel), at least 4 tiles a
// split so the merge stays small next to the work it merges.
Plan make_plan(int segments, int64_t max_len, int sm_count) {
  Plan pl;
  const int64_t target = static_cast<int64_t>(sm_count) * 4;
  int64_t splits = (target + segments - 1) / segments;
  const int64_t max_splits = (max_len + 255) / 256;
  splits = std::max<int64_t>(1, std::min(splits, max_splits));
  int64_t kps = (max_len + splits - 1) / splits;
  kps = std::max<int64_t>(64, (kps + 63) / 64 * 64);
  pl.keys_per_split = kps;
  pl.splits = static_cast<int>(std::max<int64_t>(1, (max_len + kps - 1) / kps));
  return pl;
}

template <int D>
cudaError_t launch_d(const Params& p, bf16* out, float* lse, cudaStream_t stream) {
  const dim3 grid(p.a.B * p.a.Hkv, p.splits);
  if (p.group <= 4) {
    decode_attention_kernel<DecodeTraits<D, 4>><<<grid, 128, 0, stream>>>(p);
  } else if (p.group <= 8) {
    decode_attention_kernel<DecodeTraits<D, 8>><<<grid, 128, 0, stream>>>(p);
  } else {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int warps = p.a.B * p.a.Hq;
  decode_merge_kernel<<<(warps + 7) / 8, 256, 0, stream>>>(p, out, lse);
  return cudaGetLastError();
}

}  // namespace

size_t decode_attention_scratch_bytes(int B, int Hq, int Hkv, int d, int64_t max_len,
                                      int sm_count) {
  const Plan pl = make_plan(B * Hkv, max_len, sm_count);
  const size_t rows = static_cast<size_t>(B) * Hq * pl.splits;
  return (rows * d * sizeof(float) + 255) / 256 * 256 + rows * 2 * sizeof(float);
}

cudaError_t launch_decode_attention(const DecodeAttentionArgs& a, bf16* out, float* lse,
                                    void* scratch, size_t scratch_bytes, int sm_count,
                                    cudaStream_t stream) {
  if (a.B <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0 || a.max_len <= 0) return cudaErrorInvalidValue;
  if (scratch_bytes < decode_attention_scratch_bytes(a.B, a.Hq, a.Hkv, a.d, a.max_len, sm_count))
    return cudaErrorInvalidValue;
  const Plan pl = make_plan(a.B * a.Hkv, a.max_len, sm_count);
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
  switch (a.d) {
    case 64: return launch_d<64>(p, out, lse, stream);
    case 128: return launch_d<128>(p, out, lse, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvevict::gpu::detail
