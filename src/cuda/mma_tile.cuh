// The warp-level tile steps of the mma.sync (m16n8k16) kernels: the window forward, the scoring
// pass and the decode attention. A warp owns one 16-row slab; accumulators are in the m16n8 C
// layout, float [n8 tile][4] with elements 0-1 on row g = lane / 4 and 2-3 on row g + 8, columns
// 2 (lane % 4) and + 1 of the tile. Operands live in shared memory, rows padded to stride S.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace kvevict::cuda::detail {

// The lane's ldmatrix.x4 row address inside a [16 rows x 16 columns] block, in two orders:
// b_*: the four 8x8 matrices as (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): the B
//      fragments of two adjacent n8 tiles from B rows x k (keys x dims for S = Q K^T, A V^T);
// a_*: (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15): an A fragment of rows x k (the query
//      slab), and with ldmatrix.trans the B fragments of two n8 tiles from k x columns (O += P V).
struct MmaLane {
  int b_row, b_col;
  int a_row, a_col;
  __device__ explicit MmaLane(int lane)
      : b_row(((lane >> 4) << 3) + (lane & 7)),
        b_col(((lane >> 3) & 1) << 3),
        a_row((lane & 7) + ((lane >> 3) & 1) * 8),
        a_col((lane >> 4) * 8) {}
};

// acc[nt] += A B^T over one k16 step (columns k0 .. k0 + 15) for the NT n8 tiles of 8 B rows
// each; b_rows: [8 NT rows][S] (keys x dims for S = Q K^T).
template <class T, int S, int NT>
__device__ __forceinline__ void mma_rows_k16(float (&acc)[NT][4], const uint32_t (&a)[4],
                                             const T* b_rows, int k0, const MmaLane& ln) {
  static_assert(NT % 2 == 0, "B fragments come in pairs of n8 tiles (ldmatrix x4)");
#pragma unroll
  for (int nt = 0; nt < NT; nt += 2) {
    uint32_t b[4];
    ldmatrix_x4(b, b_rows + (nt * 8 + ln.b_row) * S + k0 + ln.b_col);
    mma_16816<T>(acc[nt], a, b[0], b[1]);
    mma_16816<T>(acc[nt + 1], a, b[2], b[3]);
  }
}

// kQInRegs: every k16 step's query A fragment into qf, from frag(ks, af) (shared memory); the
// kernels call it once, at their first tile, after the queries' copy has landed. Otherwise nothing.
template <int D, bool kQInRegs, int NQ, class Frag>
__device__ __forceinline__ void load_query_frags(uint32_t (&qf)[NQ][4], Frag&& frag) {
  if constexpr (kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) frag(ks, qf[ks]);
  }
}

// s = Q K^T of a warp's 8 NT keys over the head dim D, zeroed first: k16 step ks takes its A
// fragment from qf[ks] (kQInRegs: the queries held in registers) or from frag(ks, af) (shared
// memory), and after(ks) runs after each step (a second product sharing the step, or nothing).
// b_rows as mma_rows_k16's.
template <class T, int S, int D, bool kQInRegs, int NT, int NQ, class Frag, class After>
__device__ __forceinline__ void qk_tile(float (&s)[NT][4], const uint32_t (&qf)[NQ][4],
                                        const T* b_rows, const MmaLane& ln, Frag&& frag,
                                        After&& after) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t af[4];
    if constexpr (kQInRegs) {
      af[0] = qf[ks][0];
      af[1] = qf[ks][1];
      af[2] = qf[ks][2];
      af[3] = qf[ks][3];
    } else {
      frag(ks, af);
    }
    mma_rows_k16<T, S>(s, af, b_rows, ks * 16, ln);
    after(ks);
  }
}

// o += P V for a warp's GK = 8 NP keys: the C fragments of two adjacent n8 tiles of P are the A
// fragment of one k16 step (FlashAttention-2's register reuse; P rounded to T); V: [GK keys][S]
// with ND / 2 16-column blocks (head dim 8 ND), its B fragments from ldmatrix.trans.
template <class T, int S, int NP, int ND>
__device__ __forceinline__ void mma_pv(float (&o)[ND][4], const float (&p)[NP][4], const T* v_rows,
                                       const MmaLane& ln) {
  static_assert(NP % 2 == 0 && ND % 2 == 0, "k16 steps and 16-column blocks");
#pragma unroll
  for (int kk = 0; kk < NP / 2; ++kk) {
    uint32_t pa[4];
    pa[0] = ElemTraits<T>::pack(p[2 * kk][0], p[2 * kk][1]);
    pa[1] = ElemTraits<T>::pack(p[2 * kk][2], p[2 * kk][3]);
    pa[2] = ElemTraits<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    pa[3] = ElemTraits<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int dt = 0; dt < ND / 2; ++dt) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_rows + (kk * 16 + ln.a_row) * S + dt * 16 + ln.a_col);
      mma_16816<T>(o[2 * dt], pa, b[0], b[1]);
      mma_16816<T>(o[2 * dt + 1], pa, b[2], b[3]);
    }
  }
}

// The rows' rescale of the output accumulators by the online softmax's corr (row g, row g + 8).
template <int ND>
__device__ __forceinline__ void scale_rows(float (&o)[ND][4], const float (&corr)[2]) {
#pragma unroll
  for (int dt = 0; dt < ND; ++dt) {
    o[dt][0] *= corr[0];
    o[dt][1] *= corr[0];
    o[dt][2] *= corr[1];
    o[dt][3] *= corr[1];
  }
}

// The A fragment of k16 step ks from rows r_lo, r_lo + 8 of a [rows][S] tile (the query slab),
// read as 32-bit pairs (lane column 2 t4).
template <class T, int S>
__device__ __forceinline__ void a_fragment(uint32_t (&f)[4], const T* tile, int r_lo, int ks,
                                           int t4) {
  const T* lo = tile + r_lo * S + ks * 16 + 2 * t4;
  const T* hi = lo + 8 * S;
  f[0] = *reinterpret_cast<const uint32_t*>(lo);
  f[1] = *reinterpret_cast<const uint32_t*>(hi);
  f[2] = *reinterpret_cast<const uint32_t*>(lo + 8);
  f[3] = *reinterpret_cast<const uint32_t*>(hi + 8);
}

// Reductions over the 4 lanes of an accumulator row group (lanes 4 g .. 4 g + 3).
__device__ __forceinline__ float quad_max(float x) {  // NaN if any lane's x is NaN
  x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return nan_max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ int quad_min(int x) {
  x = min(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return min(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// A block's key groups (warps that walked different keys of the same rows) merged through shared
// memory: each group stashes its rows' running max, sum and output accumulators, then, after a
// barrier, each (row, column) combines the kKeyGroups groups. mo [KG][kRows][D] (kWithO),
// mm / ml [KG][kRows]; the thread holds rows row_lo and row_lo + 8 (lane column 2 t4 of each n8
// tile of o; without kWithO, o is a placeholder).
template <int kRows, int D, bool kWithO, int ND>
__device__ __forceinline__ void stash_key_group(float* mo, float* mm, float* ml, int kg, int row_lo,
                                                int t4, const float (&m)[2], const float (&l)[2],
                                                const float (&o)[ND][4]) {
  static_assert(!kWithO || ND == D / 8, "o holds the row pair's D / 8 n8 tiles");
  if (t4 == 0) {
    mm[kg * kRows + row_lo] = m[0];
    ml[kg * kRows + row_lo] = l[0];
    mm[kg * kRows + row_lo + 8] = m[1];
    ml[kg * kRows + row_lo + 8] = l[1];
  }
  if constexpr (kWithO) {
#pragma unroll
    for (int dt = 0; dt < ND; ++dt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int row = c < 2 ? row_lo : row_lo + 8;
        mo[(kg * kRows + row) * D + dt * 8 + 2 * t4 + (c & 1)] = o[dt][c];
      }
    }
  }
}
// Row `row`, column `col` over the groups: the max m (raw; the weights are exp2((m_x - m) sc)),
// the sum l and, with kWithO, the output column's sum acc (both 0 where every group is empty).
struct KeyGroupsMerged {
  float m, l, acc;
};
template <int kKeyGroups, int kRows, int D, bool kWithO>
__device__ __forceinline__ KeyGroupsMerged merge_key_groups(const float* mo, const float* mm,
                                                            const float* ml, int row, int col,
                                                            float sc) {
  KeyGroupsMerged r{-INFINITY, 0.f, 0.f};
#pragma unroll
  for (int x = 0; x < kKeyGroups; ++x) r.m = nan_max(r.m, mm[x * kRows + row]);
  if (r.m != -INFINITY) {
#pragma unroll
    for (int x = 0; x < kKeyGroups; ++x) {
      const float f = exp2f((mm[x * kRows + row] - r.m) * sc);
      if constexpr (kWithO) r.acc += f * mo[(x * kRows + row) * D + col];
      r.l += f * ml[x * kRows + row];
    }
  }
  return r;
}

}  // namespace kvevict::cuda::detail
