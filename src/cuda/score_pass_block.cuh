// The block body of the mma.sync streaming scoring pass (score_pass.cu describes and launches it).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/launchers.h"
#include "cuda/mma_tile.cuh"
#include "cuda/pass_terms.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_traits.cuh"

namespace kvevict::cuda::detail {

// Shared memory of the pass: a rounded to T ([kRows][kD], 16-byte chunks XOR-swizzled by row
// instead of padded), the queries only at d = 256 (d <= 128 keeps them in registers, loaded
// straight from global memory), `stages` K/V tiles and the per-row / per-key floats.
template <class Tr, PairTerm kTerm>
constexpr size_t pass_smem_for(int stages) {
  using T = typename Tr::T;
  constexpr bool kNeedsOut = TermTraits<kTerm>::kNeedsOut;
  return sizeof(T) * Tr::kRows * (Tr::kD <= 128 ? 0 : Tr::kStride) +  // q (d = 256)
         sizeof(T) * Tr::kRows * (kNeedsOut ? Tr::kD : 0) +           // a rounded
         sizeof(T) * stages * Tr::kTileKeys * Tr::kStride * 2 +       // K, V tiles
         sizeof(float) * 2 * (Tr::kTileKeys + 2 * Tr::kSlabs * Tr::kTileKeys) +
         (kHasTopTerm<kTerm> ? sizeof(int) * (Tr::kRows + kTopMaskWords) : 0);  // top keys
}
template <class Tr>
constexpr int pass_min_blocks() {
  return Tr::kD <= 128 ? 2 : 1;
}
// Three stages where the blocks per SM still fit (228 KB per SM, 1 KB reserved per block): v7a's
// two stages left one tile in flight per block while it computed, and the w = 8 pass read at 82%
// of the copy rate against the three-stage forward's 90% (ncu).
template <class Tr, PairTerm kTerm>
constexpr int pass_stages() {
  const int fit =
      stages_that_fit(pass_min_blocks<Tr>(), [](int s) { return pass_smem_for<Tr, kTerm>(s); });
  return fit < 3 ? fit : 3;
}
template <class Tr, PairTerm kTerm>
constexpr size_t pass_smem_bytes() {
  return pass_smem_for<Tr, kTerm>(pass_stages<Tr, kTerm>());
}

// Element offset of (row, col) in a [rows][D] tile whose 16-byte chunks are XOR-swizzled by the
// row: the 8 rows an ldmatrix phase reads then sit in 8 different bank groups without padding.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// The block (hk, rb, chunk) of the pass: kStages K/V stages in `smem` (pass_smem_for(kStages)
// bytes). It reads a, LSE and the top records after grid_dependency_wait(): the merge kernel's
// writes.
template <class Tr, PairTerm kTerm, int kStages = pass_stages<Tr, kTerm>()>
__device__ __forceinline__ void score_pass_block(const PassParams& p, int hk, int rb, int chunk,
                                                 unsigned char* smem) {
  using T = typename Tr::T;
  using TT = TermTraits<kTerm>;
  constexpr int D = Tr::kD, S = Tr::kStride, TK = Tr::kTileKeys, GK = Tr::kGroupKeys;
  constexpr int kChunks = Tr::kChunksPerRow;
  constexpr int NT = GK / 8;  // n8 tiles of a warp's keys
  constexpr int C = 2 * NT;   // key columns of a thread (2 per n8 tile)
  constexpr bool kNeedsOut = TT::kNeedsOut;
  constexpr bool kQInRegs = D <= 128;
  constexpr int kKeyThreads = Tr::kThreads / TK;  // threads sharing one key's ||v||_1
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(Tr::kThreads % TK == 0, "whole threads per key");
  static_assert(NT % 2 == 0 && (C == 4 || C == 8), "pairs of n8 tiles; 4 or 8 columns a thread");
  static_assert(pass_smem_for<Tr, kTerm>(kStages) <= 227 * 1024, "shared memory budget");

  T* q_s = reinterpret_cast<T*>(smem);               // [kRows][S] queries (d = 256)
  T* ahi_s = q_s + (kQInRegs ? 0 : Tr::kRows * S);   // [kRows][D] a rounded, swizzled
  T* k_s = ahi_s + (kNeedsOut ? Tr::kRows * D : 0);  // [kStages][TK][S]
  T* v_s = k_s + kStages * TK * S;                   // [kStages][TK][S]
  // Two buffers each (steps alternate): per-key norms and per-slab key sums of a tile.
  float* v2_s = reinterpret_cast<float*>(v_s + kStages * TK * S);  // [2][TK] ||v_j||^2
  float* red_u = v2_s + 2 * TK;                                    // [2][kSlabs][TK] sums of u
  float* red_w = red_u + 2 * Tr::kSlabs * TK;                      // [2][kSlabs][TK] sums of w
  float* v1_s = red_w;  // [2][TK] ||v_j||_1: vatp only, whose term (p) has no w sums
  // Row constants, read into registers before the first tile writes red_u.
  float* lse_s = red_u;             // [kRows]
  float* a2_s = red_u + Tr::kRows;  // [kRows] ||a||^2
  static_assert(2 * Tr::kRows <= 2 * Tr::kSlabs * TK, "row constants fit the u sums");
  constexpr bool kTop = kHasTopTerm<kTerm>;
  int* top_s = reinterpret_cast<int*>(red_w + 2 * Tr::kSlabs * TK);   // [kRows] (kTop)
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(top_s + Tr::kRows);  // [kTopMaskWords]

  const ScorePassArgs& sa = p.s;
  const WindowArgs& a = sa.win;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int slab = warp % Tr::kSlabs, kg = warp / Tr::kSlabs;
  const int row0 = rb * Tr::kRows;
  const int rows_here = min(Tr::kRows, p.rows - row0);
  const bool vatp = kTerm == PairTerm::kProb && sa.v_l1 != nullptr;
  const bool with_v = TT::kHasW || kNeedsOut || vatp;  // snapkv-style terms never read V

  // Keys past the last visible one still get their (zero) score written below.
  const PassChunk ch(p, chunk, row0, rows_here);
  const int64_t key_begin = ch.begin, chunk_end = ch.end;
  const int chunk_keys = ch.keys, num_tiles = ch.tiles(TK);

  // Query row `row` of the block in global memory (null for padding rows).
  auto q_row = [&](int row) { return window_query_row<T>(a, p.group, hk, row0, row, rows_here); };
  if constexpr (!kQInRegs) {
    cp_async_window_queries<T, D>(a, p.group, hk, row0, rows_here, Tr::kRows, q_s,
                                  [](int row, int col) { return row * S + col; });
  }
  const int64_t head_off = hk * a.kv_head_stride + min(key_begin, a.n - 1) * a.kv_row_stride;
  const KvTileCopy<Tr> copy(static_cast<const T*>(a.k) + head_off,
                            static_cast<const T*>(a.v) + head_off, a.kv_row_stride, tid);
  auto load_tile = [&](int tile, int stage) {
    if (with_v)
      copy.template load<true>(k_s + stage * TK * S, v_s + stage * TK * S, tile, chunk_keys);
    else
      copy.template load<false>(k_s + stage * TK * S, v_s + stage * TK * S, tile, chunk_keys);
  };
  // Tiles run from the chunk's end to its start: the forward walked the same keys upwards, so
  // its last tiles are the likeliest to still be in L2. Group i of cp.async holds step i.
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < num_tiles) load_tile(num_tiles - 1 - st, st);
    cp_async_commit();
  }
  // The A fragments of this warp's 16 query rows, straight from global memory (d <= 128).
  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
    const T* qlo = q_row(slab * 16 + (lane >> 2));
    const T* qhi = q_row(slab * 16 + (lane >> 2) + 8);
    auto ld = [](const T* row, int col) {
      return row ? *reinterpret_cast<const uint32_t*>(row + col) : 0u;
    };
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int col = ks * 16 + 2 * (lane & 3);
      qf[ks][0] = ld(qlo, col);
      qf[ks][1] = ld(qhi, col);
      qf[ks][2] = ld(qlo, col + 8);
      qf[ks][3] = ld(qhi, col + 8);
    }
  }

  if constexpr (kTop) init_top_mask(mask_s);
  // a and LSE come from the forward's merge kernel (this kernel may start before it ends).
  grid_dependency_wait();
  stage_window_rows<T, D, kNeedsOut>(
      p, hk, row0, rows_here, Tr::kRows, Tr::kWarps, ahi_s,
      [](int row, int col) { return swz<D>(row, col); }, lse_s, a2_s);
  if constexpr (kTop) load_top_rows(p, hk, row0, rows_here, Tr::kRows, key_begin, chunk_end, top_s);
  __syncthreads();
  if constexpr (kTop) set_top_mask(top_s, Tr::kRows, TK, mask_s);  // read after a tile barrier

  const int rl_lo = slab * 16 + g;  // the thread's rows: rl_lo and rl_lo + 8
  const RowConsts rc = load_row_consts<kTop>(lse_s, a2_s, top_s, rl_lo, a, row0, rows_here, ch);
  const int lim_all = ch.lim_all(a);  // every row sees up to here
  const float c2 = a.scale * kLog2e;
  // ldmatrix lane addresses: A fragments (query / a rows) and B fragments (key / value rows).
  const MmaLane ln(lane);
  const int a_row = slab * 16 + ln.a_row, a_col = ln.a_col;

  // Key totals of one tile from the per-slab sums of buffer `buf` (added when several row blocks
  // share the keys), and vatp's ||v||_1.
  auto write_keys = [&](int tile, int buf) {
    write_tile_key<kTerm, Tr::kSlabs, TK>(
        p, hk, key_begin, chunk_end, tile, buf, red_u, red_w, v2_s, tid, [&](int64_t j) {
          if (vatp && rb == 0) sa.v_l1[static_cast<int64_t>(hk) * a.n + j] = v1_s[buf * TK + tid];
        });
  };
  // One barrier per tile: the key sums of step it - 1 (red_*, v2_s / v1_s of buffer
  // (it - 1) & 1) are written out by threads tid < TK after the barrier of step it, while the
  // other warps already compute step it into the other buffer; the next tile's copy is issued
  // after the barrier, into the stage step it - 1 has finished with.
  for (int it = 0; it < num_tiles; ++it) {
    const int tile = num_tiles - 1 - it;
    const int stage = it % kStages;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int ahead = it + kStages - 1;
    if (ahead < num_tiles) load_tile(num_tiles - 1 - ahead, ahead % kStages);
    cp_async_commit();
    if (it > 0) write_keys(tile + 1, (it - 1) & 1);
    const int buf = it & 1;
    float* v2_b = v2_s + buf * TK;
    float* v1_b = v1_s + buf * TK;
    float* ru_b = red_u + buf * Tr::kSlabs * TK;
    float* rw_b = red_w + buf * Tr::kSlabs * TK;
    const T* vtile = v_s + stage * TK * S;
    if constexpr (TT::kHasW) {
      // ||v_j||^2 on the tensor cores: for 8 keys, V8 V8^T (A = the 8 rows twice, B = V8^T) has
      // the squared norms on its diagonal, D[g][g] in lane (g, g / 2). 4 ldmatrix + 8 mma per 8
      // keys at d = 128, instead of d multiply-adds per key on the CUDA cores.
      for (int kb = warp; kb < TK / 8; kb += Tr::kWarps) {
        float dg[4] = {0.f, 0.f, 0.f, 0.f};
        const T* vr = vtile + (kb * 8 + (lane & 7)) * S + (lane >> 3) * 8;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 2) {
          uint32_t r[4];
          ldmatrix_x4(r, vr + ks * 16);
          const uint32_t a0[4] = {r[0], r[0], r[1], r[1]};
          const uint32_t a1[4] = {r[2], r[2], r[3], r[3]};
          mma_16816<T>(dg, a0, r[0], r[1]);
          mma_16816<T>(dg, a1, r[2], r[3]);
        }
        if (t4 == (g >> 1)) v2_b[kb * 8 + g] = (g & 1) ? dg[1] : dg[0];
      }
    }
    if (vatp) {  // ||v_j||_1 for vatp's multiplier (block-uniform branch)
      const int key = tid / kKeyThreads, part = tid % kKeyThreads;
      float v1 = 0.f;
      for (int ch = part; ch < kChunks; ch += kKeyThreads) {
        const uint4 raw = *reinterpret_cast<const uint4*>(vtile + key * S + ch * 8);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) v1 += fabsf(ElemTraits<T>::to_float(e[i]));
      }
#pragma unroll
      for (int o = kKeyThreads / 2; o > 0; o >>= 1) v1 += __shfl_xor_sync(0xffffffffu, v1, o);
      if (part == 0) v1_b[key] = v1;
    }

    float s[NT][4], av[NT][4];  // av stays unused (and is removed) for terms without a
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) av[nt][0] = av[nt][1] = av[nt][2] = av[nt][3] = 0.f;
    const T* vt = vtile + kg * GK * S;
    qk_tile<T, S, D, kQInRegs>(
        s, qf, k_s + (stage * TK + kg * GK) * S, ln,
        [&](int ks, uint32_t(&af)[4]) { ldmatrix_x4(af, q_s + a_row * S + ks * 16 + a_col); },
        [&](int ks) {
          if constexpr (kNeedsOut) {  // a V^T over the same k16 step
            uint32_t hf[4];
            ldmatrix_x4(hf, ahi_s + swz<D>(a_row, ks * 16 + a_col));
            mma_rows_k16<T, S>(av, hf, vt, ks * 16, ln);
          }
        });

    // The pairs' terms, summed over the thread's two rows per key column.
    const int key0 = tile * TK + kg * GK;  // relative to key_begin
    float u[C], w[C];
    row_major_pair_terms<kTerm, kTop, 4 * NT>(
        [&](int i) { return s[i >> 2][i & 3]; }, [&](int i) { return av[i >> 2][i & 3]; }, rc, sa,
        c2, key0, key0 + GK - 1 > lim_all, mask_s, tile, t4, u, w);

    // Row sums of the slab, then one value per (slab, key) in shared memory.
    int col = 0;
    if constexpr (TT::kHasU) col = halving_sum<C>(u, lane);
    if constexpr (TT::kHasW) col = halving_sum<C>(w, lane);
    if (C == 8 || (lane & 4) == 0) {
      const int key = kg * GK + (col >> 1) * 8 + 2 * t4 + (col & 1);
      if constexpr (TT::kHasU) ru_b[slab * TK + key] = u[0];
      if constexpr (TT::kHasW) rw_b[slab * TK + key] = w[0];
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  if (num_tiles > 0) write_keys(0, (num_tiles - 1) & 1);
  if constexpr (kTop) {
    __syncthreads();  // every key total of the block is stored
    add_top_terms<kTerm>(p, hk, row0, rows_here, Tr::kRows, key_begin, top_s);
  }
}

}  // namespace kvevict::cuda::detail
