// Streaming scoring pass (SPEC section 2): with a and LSE of the window known, one more pass over
// K and V computes every per-(query, token) term and sums it over the window queries of the
// group, without materializing p, z or any [w, n, d] tensor.
//
// Grid: (KV head, row block, key chunk); the warp layout is the forward's (window_traits.cuh).
// Per key tile, each warp recomputes its slab's logits z = q.k * scale (tensor cores), and, for
// the terms that need the attention output, <a_t, v_j> as a second small matrix product with a
// rounded to the input dtype; ||a||^2 is taken from the same rounded a, so a2 + v2 - 2 av is the
// exact squared distance from v_j to the stored a (up to float accumulation). Rounding a adds an
// error of the order the forward's 16-bit P already put in a (2^-9 relative for bf16), while a
// hi + lo split of a would double this pass's matrix work, which bounds it at w = 32
// (docs/GPU_NOTES.md). p = exp(z - LSE); dropkv's 1 - p is -expm1(z - LSE) where p is large
// (SPEC: p near 1 must stay exact). The terms of a key are summed over the thread's two rows, the
// warp's 16 rows (shuffles) and the block's slabs (shared memory) in registers, then written once
// per key.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "cuda/window_plan.h"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {
namespace {

struct PassParams {
  ScorePassArgs s;
  int group = 1;
  int rows = 0;
  int row_blocks = 1;
  int64_t keys_per_chunk = 0;
  bool accumulate = false;  // several row blocks add into the same keys (scores zeroed first)
  float* scores = nullptr;  // [Hkv, n]
};

template <class Tr, bool kNeedsOut>
constexpr size_t pass_smem_bytes() {
  using T = typename Tr::T;
  return sizeof(T) * Tr::kRows * Tr::kStride * (kNeedsOut ? 2 : 1) +   // q, a rounded
         sizeof(T) * Tr::kStages * Tr::kTileKeys * Tr::kStride * 2 +   // K, V tiles
         sizeof(float) * (Tr::kRows * 2 + Tr::kTileKeys * 2 + Tr::kSlabs * Tr::kTileKeys);
}

template <class T>
__device__ __forceinline__ void frag_from_smem(const T* base, int stride, int row_lo, int col,
                                               uint32_t (&f)[4]) {
  const T* r_lo = base + row_lo * stride + col;
  const T* r_hi = r_lo + 8 * stride;
  f[0] = *reinterpret_cast<const uint32_t*>(r_lo);
  f[1] = *reinterpret_cast<const uint32_t*>(r_hi);
  f[2] = *reinterpret_cast<const uint32_t*>(r_lo + 8);
  f[3] = *reinterpret_cast<const uint32_t*>(r_hi + 8);
}

template <PairTerm kTerm>
__device__ __forceinline__ float pair_term(float z, float lse, float a2, float v2, float av,
                                           float floor) {
  const float x = z - lse;
  const float p = __expf(x);
  if constexpr (kTerm == PairTerm::kProb) {
    return p;
  } else if constexpr (kTerm == PairTerm::kObcacheV) {
    return p * p * v2;
  } else {
    float dist2 = fmaxf(a2 + v2 - 2.f * av, 0.f);
    if constexpr (kTerm == PairTerm::kDropKV) {
      // 1 - exp(x) loses nothing while p < 0.78; closer to 1 it cancels, so use expm1 there. The
      // warp vote keeps expm1f (~30 instructions) a real branch, taken only when some lane needs
      // it, instead of an if-converted select that would evaluate it for every pair. All lanes
      // reach this point together (the callers' loops are unrolled and branch-free).
      float om = 1.f - p;
      const bool near_one = x > -0.25f;
      if (__any_sync(0xffffffffu, near_one)) {
        if (near_one) om = -expm1f(x);
      }
      // When the key holds all of the row's probability to float precision (a single visible
      // key, or one that dominates by > 14 logits), a = v_j up to rounding and the expanded
      // ||a - v||^2 is pure rounding noise that 1 / (1 - p)^2 (up to 1e24) would blow up: the
      // exact value there is (1 - p)^2 ||a' - v_j||^2 with a' the other keys' mean, which a float
      // forward cannot resolve. Take it as 0, the value at p = 1 (docs/GPU_NOTES.md, gaps).
      if (om < 1e-6f) dist2 = 0.f;
      om = fmaxf(om, floor);
      const float r = __fdividef(p, om);  // om >= 1e-12: no overflow or denormal corner
      return r * r * dist2;
    } else if constexpr (kTerm == PairTerm::kObcacheK) {
      const float pz = p * z;
      return pz * pz * dist2;
    } else {  // kObcacheVK
      const float pz = p * z;
      return p * p * v2 + pz * pz * dist2 + 2.f * p * p * z * (v2 - av);
    }
  }
}

template <class Tr, PairTerm kTerm>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kD <= 128 ? 2 : 1)
    score_pass_kernel(PassParams p) {
  using T = typename Tr::T;
  constexpr int D = Tr::kD, S = Tr::kStride, TK = Tr::kTileKeys, GK = Tr::kGroupKeys;
  constexpr int kChunks = Tr::kChunksPerRow;
  constexpr bool kNeedsOut =
      kTerm == PairTerm::kDropKV || kTerm == PairTerm::kObcacheK || kTerm == PairTerm::kObcacheVK;
  constexpr bool kQInRegs = D <= 128;
  constexpr int kKeyThreads = Tr::kThreads / TK;  // threads sharing one key's norms
  static_assert(Tr::kThreads % TK == 0, "whole threads per key");
  static_assert(pass_smem_bytes<Tr, kNeedsOut>() <= 227 * 1024, "shared memory budget");

  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);                        // [kRows][S] window queries
  T* ahi_s = q_s + Tr::kRows * S;                             // [kRows][S] a rounded to T
  T* k_s = ahi_s + (kNeedsOut ? Tr::kRows * S : 0);           // [kStages][TK][S]
  T* v_s = k_s + Tr::kStages * TK * S;                        // [kStages][TK][S]
  float* lse_s = reinterpret_cast<float*>(v_s + Tr::kStages * TK * S);  // [kRows]
  float* a2_s = lse_s + Tr::kRows;                            // [kRows] ||a||^2
  float* v2_s = a2_s + Tr::kRows;                             // [TK] ||v_j||^2 of the tile
  float* v1_s = v2_s + TK;                                    // [TK] ||v_j||_1 of the tile
  float* red_s = v1_s + TK;                                   // [kSlabs][TK] per-slab key sums

  const ScorePassArgs& sa = p.s;
  const WindowArgs& a = sa.win;
  const int hk = blockIdx.x, rb = blockIdx.y, chunk = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int slab = warp % Tr::kSlabs, kg = warp / Tr::kSlabs;
  const int row0 = rb * Tr::kRows;
  const int rows_here = min(Tr::kRows, p.rows - row0);

  const int64_t key_begin = chunk * p.keys_per_chunk;
  const int64_t chunk_end = min(a.n, key_begin + p.keys_per_chunk);
  int t_max = a.w - 1;
  if (rows_here < a.w) {
    const int t0 = row0 % a.w;
    if (t0 + rows_here - 1 < a.w) t_max = t0 + rows_here - 1;
  }
  // Keys past the last visible one still get their (zero) score written below.
  const int64_t key_end = min(chunk_end, a.n - a.w + t_max + 1);
  const int num_tiles =
      chunk_end > key_begin ? static_cast<int>((chunk_end - key_begin + TK - 1) / TK) : 0;

  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  for (int c = tid; c < Tr::kRows * kChunks; c += Tr::kThreads) {
    const int row = c / kChunks, ch = c % kChunks;
    const int r = row0 + row;
    const bool valid = row < rows_here;
    const T* src = q;
    if (valid) {
      const int qh = hk * p.group + r / a.w, t = r % a.w;
      src = q + qh * a.q_head_stride + static_cast<int64_t>(a.q_rows - a.w + t) * a.q_row_stride +
            ch * 8;
    }
    cp_async_16(q_s + row * S + ch * 8, src, valid ? 16 : 0);
  }
  auto load_tile = [&](int tile, int stage) {
    const int64_t start = key_begin + static_cast<int64_t>(tile) * TK;
    for (int c = tid; c < TK * kChunks; c += Tr::kThreads) {
      const int key = c / kChunks, ch = c % kChunks;
      const int64_t j = start + key;
      const bool valid = j < chunk_end;
      const int64_t off = valid ? hk * a.kv_head_stride + j * a.kv_row_stride + ch * 8 : 0;
      cp_async_16(k_s + (stage * TK + key) * S + ch * 8, k + off, valid ? 16 : 0);
      cp_async_16(v_s + (stage * TK + key) * S + ch * 8, v + off, valid ? 16 : 0);
    }
  };
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();

  // Row constants: LSE, a rounded to T and ||a||^2 of the rounded a.
  for (int row = warp; row < Tr::kRows; row += Tr::kWarps) {
    const int r = row0 + row;
    const bool valid = row < rows_here;
    const int64_t out_row =
        valid ? static_cast<int64_t>(hk * p.group + r / a.w) * a.w + r % a.w : 0;
    float a2 = 0.f;
    if constexpr (kNeedsOut) {
      for (int col = lane; col < D; col += 32) {
        const T hi = ElemTraits<T>::from_float(valid ? sa.out[out_row * D + col] : 0.f);
        const float x = ElemTraits<T>::to_float(hi);
        ahi_s[row * S + col] = hi;
        a2 += x * x;
      }
      a2 = warp_sum(a2);
    }
    if (lane == 0) {
      lse_s[row] = valid ? sa.lse[out_row] : 0.f;
      a2_s[row] = a2;
    }
  }
  __syncthreads();

  const int rl_lo = slab * 16 + g, rl_hi = rl_lo + 8;
  const int64_t last_lo = rl_lo < rows_here ? a.n - a.w + (row0 + rl_lo) % a.w : -1;
  const int64_t last_hi = rl_hi < rows_here ? a.n - a.w + (row0 + rl_hi) % a.w : -1;
  // Padding rows get lse = +inf: p = exp(z - inf) = 0 makes every term 0 without a row mask.
  const float lse_lo = rl_lo < rows_here ? lse_s[rl_lo] : INFINITY;
  const float lse_hi = rl_hi < rows_here ? lse_s[rl_hi] : INFINITY;
  // Last key that every row of the block sees (and that lies in this chunk's live range).
  int t_min = 0;
  if (rows_here < a.w) {
    const int t0 = row0 % a.w;
    if (t0 + rows_here - 1 < a.w) t_min = t0;
  }
  const int64_t block_last_all = min(a.n - a.w + t_min, key_end - 1);
  const float a2_lo = a2_s[rl_lo], a2_hi = a2_s[rl_hi];
  const float floor = sa.one_minus_p_floor;
  uint32_t qf[kQInRegs ? D / 16 : 1][4];

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < num_tiles) load_tile(tile + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (kQInRegs) {
      if (tile == 0) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) frag_from_smem(q_s, S, slab * 16 + g, ks * 16 + 2 * t4, qf[ks]);
      }
    }
    const T* vtile = v_s + stage * TK * S;
    {  // ||v_j||^2 and ||v_j||_1 of the tile's keys
      const int key = tid / kKeyThreads, part = tid % kKeyThreads;
      float v2 = 0.f, v1 = 0.f;
      for (int ch = part; ch < kChunks; ch += kKeyThreads) {
        const uint4 raw = *reinterpret_cast<const uint4*>(vtile + key * S + ch * 8);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float x = ElemTraits<T>::to_float(e[i]);
          v2 += x * x;
          v1 += fabsf(x);
        }
      }
#pragma unroll
      for (int o = kKeyThreads / 2; o > 0; o >>= 1) {
        v2 += __shfl_xor_sync(0xffffffffu, v2, o);
        v1 += __shfl_xor_sync(0xffffffffu, v1, o);
      }
      if (part == 0) {
        v2_s[key] = v2;
        v1_s[key] = v1;
      }
    }
    __syncthreads();

    float s[GK / 8][4], av[GK / 8][4];  // av stays unused (and is removed) for p-only terms
#pragma unroll
    for (int nt = 0; nt < GK / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      av[nt][0] = av[nt][1] = av[nt][2] = av[nt][3] = 0.f;
    }
    const T* kt = k_s + (stage * TK + kg * GK) * S;
    const T* vt = vtile + kg * GK * S;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t af[4];
      if constexpr (kQInRegs) {
        af[0] = qf[ks][0]; af[1] = qf[ks][1]; af[2] = qf[ks][2]; af[3] = qf[ks][3];
      } else {
        frag_from_smem(q_s, S, slab * 16 + g, ks * 16 + 2 * t4, af);
      }
#pragma unroll
      for (int nt = 0; nt < GK / 8; ++nt) {
        const T* kr = kt + (nt * 8 + g) * S + ks * 16 + 2 * t4;
        mma_16816<T>(s[nt], af, *reinterpret_cast<const uint32_t*>(kr),
                     *reinterpret_cast<const uint32_t*>(kr + 8));
      }
      if constexpr (kNeedsOut) {
        uint32_t hf[4];
        frag_from_smem(ahi_s, S, slab * 16 + g, ks * 16 + 2 * t4, hf);
#pragma unroll
        for (int nt = 0; nt < GK / 8; ++nt) {
          const T* vr = vt + (nt * 8 + g) * S + ks * 16 + 2 * t4;
          mma_16816<T>(av[nt], hf, *reinterpret_cast<const uint32_t*>(vr),
                       *reinterpret_cast<const uint32_t*>(vr + 8));
        }
      }
    }

    const int64_t key0 = key_begin + static_cast<int64_t>(tile) * TK + kg * GK;
    // The per-pair terms dominate the instruction count at large w (ncu: the w = 32 pass issued
    // ~2x the forward's instructions), so tiles every row of the block sees in full skip the
    // per-element causal / range checks.
    auto accumulate = [&](auto masked) {
#pragma unroll
      for (int nt = 0; nt < GK / 8; ++nt) {
        float col[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v2 = v2_s[kg * GK + nt * 8 + 2 * t4 + e];
          float lo = pair_term<kTerm>(s[nt][e] * a.scale, lse_lo, a2_lo, v2, av[nt][e], floor);
          float hi =
              pair_term<kTerm>(s[nt][2 + e] * a.scale, lse_hi, a2_hi, v2, av[nt][2 + e], floor);
          if constexpr (decltype(masked)::value) {
            const int64_t j = key0 + nt * 8 + 2 * t4 + e;
            if (!(j <= last_lo && j < key_end)) lo = 0.f;
            if (!(j <= last_hi && j < key_end)) hi = 0.f;
          }
          float sum = lo + hi;
          sum += __shfl_xor_sync(0xffffffffu, sum, 4);
          sum += __shfl_xor_sync(0xffffffffu, sum, 8);
          sum += __shfl_xor_sync(0xffffffffu, sum, 16);
          col[e] = sum;
        }
        if (g == 0) {
          red_s[slab * TK + kg * GK + nt * 8 + 2 * t4] = col[0];
          red_s[slab * TK + kg * GK + nt * 8 + 2 * t4 + 1] = col[1];
        }
      }
    };
    if (key0 + GK - 1 <= block_last_all)
      accumulate(std::false_type{});
    else
      accumulate(std::true_type{});
    __syncthreads();
    if (tid < TK) {
      const int64_t j = key_begin + static_cast<int64_t>(tile) * TK + tid;
      if (j < chunk_end) {
        float total = 0.f;
#pragma unroll
        for (int x = 0; x < Tr::kSlabs; ++x) total += red_s[x * TK + tid];
        total *= sa.row_weight;
        if (sa.h2o_normalize) {
          // Window queries t with n - w + t >= j see key j.
          const int64_t first = j - (a.n - a.w);
          const int64_t seen = a.w - (first > 0 ? first : 0);
          total = seen > 0 ? total / static_cast<float>(seen) : 0.f;
        }
        if (sa.v_l1 != nullptr && rb == 0) sa.v_l1[static_cast<int64_t>(hk) * a.n + j] = v1_s[tid];
        float* dst = p.scores + static_cast<int64_t>(hk) * a.n + j;
        if (p.accumulate)
          atomicAdd(dst, total);
        else
          *dst = total;
      }
    }
  }
  cp_async_wait<0>();
}

template <class Tr, PairTerm kTerm>
cudaError_t launch_pass_config(const PassParams& p, int chunks, cudaStream_t stream) {
  constexpr bool kNeedsOut =
      kTerm == PairTerm::kDropKV || kTerm == PairTerm::kObcacheK || kTerm == PairTerm::kObcacheVK;
  constexpr size_t smem = pass_smem_bytes<Tr, kNeedsOut>();
  auto kernel = score_pass_kernel<Tr, kTerm>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(p.s.win.num_kv_heads, p.row_blocks, chunks);
  kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <class Tr>
cudaError_t dispatch_term(const PassParams& p, int chunks, cudaStream_t stream) {
  switch (p.s.term) {
    case PairTerm::kDropKV: return launch_pass_config<Tr, PairTerm::kDropKV>(p, chunks, stream);
    case PairTerm::kObcacheV: return launch_pass_config<Tr, PairTerm::kObcacheV>(p, chunks, stream);
    case PairTerm::kObcacheK: return launch_pass_config<Tr, PairTerm::kObcacheK>(p, chunks, stream);
    case PairTerm::kObcacheVK: return launch_pass_config<Tr, PairTerm::kObcacheVK>(p, chunks, stream);
    case PairTerm::kProb: return launch_pass_config<Tr, PairTerm::kProb>(p, chunks, stream);
  }
  return cudaErrorInvalidValue;
}

template <class T, int D>
cudaError_t dispatch_slabs(const PassParams& p, int slabs, int chunks, cudaStream_t stream) {
  switch (slabs) {
#define KVEVICT_PASS_CASE(S)                                                     \
  case S:                                                                        \
    if constexpr (S <= max_slabs(D)) {                                           \
      return dispatch_term<WindowTraits<T, D, S>>(p, chunks, stream);            \
    }                                                                            \
    break;
    KVEVICT_PASS_CASE(1)
    KVEVICT_PASS_CASE(2)
    KVEVICT_PASS_CASE(4)
#undef KVEVICT_PASS_CASE
  }
  return cudaErrorInvalidValue;
}

template <class T>
cudaError_t dispatch_dim(const PassParams& p, int slabs, int chunks, cudaStream_t stream) {
  switch (p.s.win.head_dim) {
    case 64: return dispatch_slabs<T, 64>(p, slabs, chunks, stream);
    case 128: return dispatch_slabs<T, 128>(p, slabs, chunks, stream);
    case 256: return dispatch_slabs<T, 256>(p, slabs, chunks, stream);
  }
  return cudaErrorInvalidValue;
}

constexpr int kPassBlocksPerSm = 2;
// At most 64 rows a block: 128-row blocks (w = 32, G = 4) held 170 registers and 143 KB of shared
// memory, one block of 8 warps per SM, and the pass ran at 0.93 ms, latency-bound (ncu, v2). Two
// 64-row blocks per SM re-read K/V for the second row block, mostly from L2 (they run together).
constexpr int kPassSlabCap = 4;

}  // namespace

cudaError_t launch_score_pass(const ScorePassArgs& sa, float* scores, int sm_count,
                              cudaStream_t stream) {
  const WindowArgs& a = sa.win;
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0 || a.w <= 0 || a.w > a.n ||
      a.q_rows < a.w || sa.lse == nullptr || a.v == nullptr)
    return cudaErrorInvalidValue;
  const bool needs_out = sa.term == PairTerm::kDropKV || sa.term == PairTerm::kObcacheK ||
                         sa.term == PairTerm::kObcacheVK;
  if (needs_out && sa.out == nullptr) return cudaErrorInvalidValue;
  const WindowPlan plan = make_window_plan(a.num_kv_heads, a.num_q_heads / a.num_kv_heads, a.w,
                                           a.n, a.head_dim, sm_count, kPassBlocksPerSm,
                                           kPassSlabCap);
  PassParams p;
  p.s = sa;
  p.group = a.num_q_heads / a.num_kv_heads;
  p.rows = plan.rows;
  p.row_blocks = plan.row_blocks;
  p.keys_per_chunk = plan.keys_per_split;
  p.accumulate = plan.row_blocks > 1;
  p.scores = scores;
  if (p.accumulate) {
    const cudaError_t err = cudaMemsetAsync(
        scores, 0, sizeof(float) * static_cast<size_t>(a.num_kv_heads) * a.n, stream);
    if (err != cudaSuccess) return err;
  }
  return a.elem == Elem::kBF16
             ? dispatch_dim<__nv_bfloat16>(p, plan.slabs, plan.splits, stream)
             : dispatch_dim<__half>(p, plan.slabs, plan.splits, stream);
}

}  // namespace kvevict::cuda::detail
