// Streaming scoring pass on Hopper's warpgroup MMA (wgmma.cuh): score_pass.cu's terms for blocks
// of 64 or 128 window rows of one KV head.
//
// Per 64-key tile a warpgroup (64 rows) runs two m64n64 wgmma chains over the head dim, both with
// every operand in swizzled shared memory: the logits S = Q K^T and <a, v> = A V^T (a rounded to
// the input dtype, as in score_pass.cu). The terms (pass_terms.cuh) are formed in the accumulator
// registers, summed over the thread's two rows and the warp's 16 (halving_sum over 16 key columns)
// and, per key, over the block's warps in shared memory; ||v_j||^2 is summed on the CUDA cores
// from the swizzled V tile (a fraction of the tile's tensor work). One block covers all rows of a
// KV head up to 128 (w = 32, G = 4), so K and V are read once per KV head (the mma.sync pass runs
// two 64-row blocks there). Tiles run backwards through the chunk, as in score_pass.cu.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/pass_terms.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {
namespace {

// 1 KB alignment slack, queries, a (terms that need it), `stages` K/V tiles, and the floats:
// ||v||^2 [2][TK], per-warp key sums of u and w [2][kWarps][TK] each.
template <class Tr, PairTerm kTerm>
constexpr size_t wg_pass_smem(int stages) {
  using T = typename Tr::T;
  constexpr int TK = Tr::kTileKeys;
  return 1024 + sizeof(T) * Tr::kRows * Tr::kD * (TermTraits<kTerm>::kNeedsOut ? 2 : 1) +
         sizeof(T) * stages * TK * Tr::kD * 2 + sizeof(float) * 2 * TK * (1 + 2 * Tr::kWarps) +
         (kHasTopTerm<kTerm> ? sizeof(int) * (Tr::kRows + kTopMaskWords) : 0);  // top keys
}
template <class Tr, PairTerm kTerm>
constexpr int wg_pass_stages() {
  return stages_that_fit(Tr::kBlocksPerSm, [](int s) { return wg_pass_smem<Tr, kTerm>(s); });
}

template <class Tr, PairTerm kTerm>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kBlocksPerSm)
    score_pass_wgmma_kernel(PassParams p) {
#if defined(KVEVICT_HAS_WGMMA)
  using T = typename Tr::T;
  using TT = TermTraits<kTerm>;
  constexpr int D = Tr::kD, R = Tr::kRows, TK = Tr::kTileKeys, W = Tr::kWarps;
  constexpr int kChunks = D / 8;
  constexpr int kStages = wg_pass_stages<Tr, kTerm>();
  constexpr bool kNeedsOut = TT::kNeedsOut;
  constexpr bool kWithV = TT::kHasW || kNeedsOut;  // snapkv-style terms never read V
  constexpr int kKeyThreads = Tr::kThreads / TK;   // threads summing one key's ||v||^2
  static_assert(wg_pass_smem<Tr, kTerm>(kStages) <= 227 * 1024, "shared memory budget");
  launch_dependents();

  extern __shared__ unsigned char smem_raw[];
  T* q_s = swizzle_aligned<T>(smem_raw);   // [R][D] swizzled
  T* a_s = q_s + R * D;                    // [R][D] swizzled, a rounded (kNeedsOut)
  T* k_s = a_s + (kNeedsOut ? R * D : 0);  // [kStages][TK][D] swizzled
  T* v_s = k_s + kStages * TK * D;         // [kStages][TK][D] swizzled
  float* v2_s = reinterpret_cast<float*>(v_s + kStages * TK * D);  // [2][TK]
  float* red_u = v2_s + 2 * TK;                                    // [2][W][TK]
  float* red_w = red_u + 2 * W * TK;                               // [2][W][TK]
  float* lse_s = red_u;     // [R] (read before the first tile's sums)
  float* a2_s = red_u + R;  // [R]
  static_assert(2 * R <= 2 * W * TK, "row constants fit the u sums");
  constexpr bool kTop = kHasTopTerm<kTerm>;
  int* top_s = reinterpret_cast<int*>(red_w + 2 * W * TK);    // [R] (kTop)
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(top_s + R);  // [kTopMaskWords]

  const ScorePassArgs& sa = p.s;
  const WindowArgs& a = sa.win;
  const int hk = blockIdx.x, rb = blockIdx.y, chunk = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, g = lane >> 2, t4 = lane & 3;
  const int row0 = rb * R;
  const int rows_here = min(R, p.rows - row0);

  const PassChunk ch(p, chunk, row0, rows_here);
  const int64_t key_begin = ch.begin, chunk_end = ch.end;
  const int chunk_keys = ch.keys, num_tiles = ch.tiles(TK);

  cp_async_window_queries<T, D>(a, p.group, hk, row0, rows_here, R, q_s,
                                [](int row, int col) { return sw128<R>(row, col); });
  const int64_t head_off = hk * a.kv_head_stride + min(key_begin, a.n - 1) * a.kv_row_stride;
  const SwizzledTileCopy<T, D, Tr::kThreads, TK> copy(static_cast<const T*>(a.k) + head_off,
                                                      static_cast<const T*>(a.v) + head_off,
                                                      a.kv_row_stride, tid);
  auto load_tile = [&](int tile, int stage) {
    copy.template load<kWithV>(k_s + stage * TK * D, v_s + stage * TK * D, tile, chunk_keys);
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < num_tiles) load_tile(num_tiles - 1 - st, st);
    cp_async_commit();
  }

  if constexpr (kTop) init_top_mask(mask_s);
  // a and LSE come from the forward's merge kernel (this kernel may start before it ends).
  grid_dependency_wait();
  stage_window_rows<T, D, kNeedsOut>(
      p, hk, row0, rows_here, R, W, a_s, [](int row, int col) { return sw128<R>(row, col); }, lse_s,
      a2_s);
  if constexpr (kTop) load_top_rows(p, hk, row0, rows_here, R, key_begin, chunk_end, top_s);
  fence_async_shared();  // a_s is read by wgmma
  __syncthreads();
  if constexpr (kTop) set_top_mask(top_s, R, TK, mask_s);  // read after a tile barrier

  const int rl_lo = wg * 64 + (warp & 3) * 16 + g;  // the thread's rows: rl_lo and rl_lo + 8
  const RowConsts rc = load_row_consts<kTop>(lse_s, a2_s, top_s, rl_lo, a, row0, rows_here, ch);
  const int lim_all = ch.lim_all(a);  // every row sees up to here
  const float c2 = a.scale * kLog2e;
  // Base descriptors, set up once; per k16 step and stage only the address field moves (bytes).
  auto kdim_bytes = [](int ks, int rows) {
    return static_cast<uint32_t>(sizeof(T) * ((ks >> 2) * rows * 64 + (ks & 3) * 16));
  };
  const uint64_t q_desc = wgmma_desc(q_s + wg * 64 * 64, 16, 1024);
  const uint64_t a_desc = wgmma_desc(a_s + wg * 64 * 64, 16, 1024);
  const uint64_t k_desc = wgmma_desc(k_s, 16, 1024);
  const uint64_t v_desc = wgmma_desc(v_s, 16, 1024);
  constexpr uint32_t kStageBytes = sizeof(T) * TK * D;

  // Key totals of one tile from the per-warp sums of buffer `buf`.
  auto write_keys = [&](int tile, int buf) {
    write_tile_key<kTerm, W, TK>(p, hk, key_begin, chunk_end, tile, buf, red_u, red_w, v2_s, tid,
                                 [](int64_t) {});
  };

  for (int it = 0; it < num_tiles; ++it) {
    const int tile = num_tiles - 1 - it;
    const int stage = it % kStages;
    cp_async_wait<kStages - 2>();
    fence_async_shared();
    __syncthreads();
    const int ahead = it + kStages - 1;
    if (ahead < num_tiles) load_tile(num_tiles - 1 - ahead, ahead % kStages);
    cp_async_commit();
    if (it > 0) write_keys(tile + 1, (it - 1) & 1);
    const int buf = it & 1;
    const T* vt = v_s + stage * TK * D;

    float s[32], av[kNeedsOut ? 32 : 1];
    const uint64_t kt_desc = wgmma_desc_add(k_desc, stage * kStageBytes);
    const uint64_t vt_desc = wgmma_desc_add(v_desc, stage * kStageBytes);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss<T, 64>(s, wgmma_desc_add(q_desc, kdim_bytes(ks, R)),
                      wgmma_desc_add(kt_desc, kdim_bytes(ks, TK)), ks > 0 ? 1 : 0);
    if constexpr (kNeedsOut) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        wgmma_ss<T, 64>(av, wgmma_desc_add(a_desc, kdim_bytes(ks, R)),
                        wgmma_desc_add(vt_desc, kdim_bytes(ks, TK)), ks > 0 ? 1 : 0);
    }
    wgmma_commit();

    // ||v_j||^2 on the CUDA cores while the tensor cores run (order of the chunks is irrelevant
    // to the sum, so the swizzle needs no undoing).
    if constexpr (TT::kHasW) {
      const int key = tid / kKeyThreads, part = tid % kKeyThreads;
      float v2 = 0.f;
#pragma unroll
      for (int ch = part; ch < kChunks; ch += kKeyThreads) {
        const uint4 raw =
            *reinterpret_cast<const uint4*>(vt + (ch >> 3) * TK * 64 + key * 64 + (ch & 7) * 8);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float x = ElemTraits<T>::to_float(e[i]);
          v2 = fmaf(x, x, v2);
        }
      }
#pragma unroll
      for (int o = kKeyThreads / 2; o > 0; o >>= 1) v2 += __shfl_xor_sync(0xffffffffu, v2, o);
      if (part == 0) v2_s[buf * TK + key] = v2;
    }
    wgmma_wait<0>();
    wgmma_hold(s);
    if constexpr (kNeedsOut) wgmma_hold(av);

    const int key0 = tile * TK;  // relative to key_begin
    float u[16], w[16];          // per key column: sums over the thread's two rows
    row_major_pair_terms<kTerm, kTop, 32>([&](int i) { return s[i]; },
                                          [&](int i) {
                                            if constexpr (kNeedsOut) return av[i];
                                            return 0.f;
                                          },
                                          rc, sa, c2, key0, key0 + TK - 1 > lim_all, mask_s, tile,
                                          t4, u, w);

    // Row sums of the warp's 16 rows: lane ends with key columns col, col + 1.
    int col = 0;
    if constexpr (TT::kHasU) col = halving_sum<16>(u, lane);
    if constexpr (TT::kHasW) col = halving_sum<16>(w, lane);
    const int key = (col >> 1) * 8 + 2 * t4;
    float* ru_b = red_u + (buf * W + warp) * TK;
    float* rw_b = red_w + (buf * W + warp) * TK;
    if constexpr (TT::kHasU) *reinterpret_cast<float2*>(ru_b + key) = make_float2(u[0], u[1]);
    if constexpr (TT::kHasW) *reinterpret_cast<float2*>(rw_b + key) = make_float2(w[0], w[1]);
  }
  cp_async_wait<0>();
  __syncthreads();
  if (num_tiles > 0) write_keys(0, (num_tiles - 1) & 1);
  if constexpr (kTop) {
    __syncthreads();  // every key total of the block is stored
    add_top_terms<kTerm>(p, hk, row0, rows_here, R, key_begin, top_s);
  }
#else
  wgmma_unavailable();
#endif
}

template <class Tr>
cudaError_t dispatch_term(const PassParams& p, int chunks, cudaStream_t stream) {
  return with_pair_term(p.s.term, [&](auto term) {
    constexpr PairTerm kTerm = decltype(term)::value;
    return launch_pass_kernel(score_pass_wgmma_kernel<Tr, kTerm>,
                              wg_pass_smem<Tr, kTerm>(wg_pass_stages<Tr, kTerm>()), Tr::kThreads, p,
                              chunks, stream);
  });
}

}  // namespace

bool wgmma_pass_supported(const ScorePassArgs& s, int rows_per_block) {
  return s.v_l1 == nullptr && wgmma_forward_supported(s.win, rows_per_block);
}

cudaError_t launch_pass_wgmma(const PassParams& p, int rows_per_block, int chunks,
                              cudaStream_t stream) {
  if (!wgmma_pass_supported(p.s, rows_per_block)) return cudaErrorNotSupported;
  return with_elem(p.s.win.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128>(p.s.win.head_dim, [&](auto d) {
      constexpr int D = decltype(d)::value;
      return with_int<64, 128>(rows_per_block, [&](auto r) {
        return dispatch_term<WgWindowTraits<T, D, decltype(r)::value / 64>>(p, chunks, stream);
      });
    });
  });
}

}  // namespace kvevict::cuda::detail
