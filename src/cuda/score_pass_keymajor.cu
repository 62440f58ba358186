// Key-major streaming scoring pass (Hopper wgmma, bf16) for
//   dropkv     score_j = sum_i r_ij^2   ||a_i - v_j||^2   (r = p / (1 - p))
//   obcache_k  score_j = sum_i (p z)_ij^2 ||a_i - v_j||^2
//   obcache_v  score_j = sum_i p_ij^2   ||v_j||^2
//   prob       score_j = sum_i p_ij               (snapkv and the other attention sums)
// with the sum over the window rows i done by the tensor cores instead of the CUDA cores.
//
// A warpgroup owns a tile of 64 keys and every window row of the block (64 or 128): S^T = K Q^T
// puts one key on each accumulator row, the weights w_ij are formed in those registers, rounded
// to bf16, and are already the register A operand of the second product
//   Y = W^T [a | a2_hi a2_lo 1 0 ...]       ([64 keys, d] and [64 keys, 8])
// (a rounded to bf16 as in the other passes, ||a||^2 split into two bf16 parts, a column of ones),
// so that   score_j = Y_j,a2 - 2 <Y_j,a, v_j> + ||v_j||^2 Y_j,1,   one dot product of each key's
// row of Y with its own value row (obcache_v: ||v_j||^2 Y_j,1, and no product with a; prob: Y_j,1,
// and the pass never reads V). Per pair the CUDA cores form only w (one exp2 and four FMAs on
// dropkv's division-free path); score_pass_wgmma.cu forms the whole term per pair and sums it over
// the thread's rows, the warp's lanes and the block's warps: 31 warp instructions a pair (ncu,
// session 4), that pass's bound at w = 32.
//
// Accuracy: every part of ||a_i - v_j||^2 is taken with the same rounded weight, so the score is
// exactly sum_i w~_ij ||a_i - v_j||^2 up to float accumulation, with w~ = w (1 + e), |e| <= 2^-9;
// the terms are all >= 0, so the score's relative error stays below 2^-9 (plus the accumulation);
// the same holds for the other terms. obcache_vk (three weights a pair) stays on the row-major
// pass. f16 inputs stay on score_pass_wgmma.cu: f16 weights would underflow (w ~ 1 / n^2).
//
// Schedule: two warpgroups a block take alternate key tiles of the block's chunk (backwards, as the
// other passes, to reuse the forward's last keys from L2), one block per SM. Each warpgroup copies
// its own tiles into its own rings (K: 3 stages, V: 2) and syncs on its own named barrier, so the
// two drift apart and one's products overlap the other's CUDA-core work; within a warpgroup the
// next tile's S^T runs behind this tile's dot products, and the weights go to the tensor cores in
// two halves. Measured steps (H200, Llama-3.1-8B layer, w = 32, n = 128K, this kernel alone, ncu):
// one block barrier a tile pair 354 us; own rings + named barriers, shared loads as LDS 271;
// S^T of the next tile issued early 260; address-stepping copies 251; halves + compact exact
// path 206 (the row-major pass: ~320).
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/pass_terms.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/window_params.cuh"

namespace kvevict::cuda::detail {
namespace {

template <int D_, int R_>
struct KeyMajorTraits {
  using T = __nv_bfloat16;
  static constexpr int kD = D_;
  static constexpr int kRows = R_;      // window rows a block (the N of S^T, the K of W^T a)
  static constexpr int kTileKeys = 64;  // keys a warpgroup tile (the M of both products)
  static constexpr int kWG = 2;
  static constexpr int kThreads = 128 * kWG;
  static constexpr int kExtraCols = 8;  // a2_hi, a2_lo, 1, zeros: the N of the small product
  static_assert(kD == 64 || kD == 128, "head dim 64 or 128");
  static_assert(kRows == 64 || kRows == 128, "64 or 128 rows a block");
};

// Each warpgroup's rings: K tiles in kKStages (its current tile's product may still run while it
// loads two ahead), V tiles in kVStages (V is read only by the per-key dot products).
constexpr int kKStages = 3, kVStages = 2;

// 1 KB alignment slack, queries, a, the extra columns and both warpgroups' K and V rings (the
// row constants borrow a V stage before its first load).
template <class Tr>
constexpr size_t km_smem() {
  using T = typename Tr::T;
  constexpr int R = Tr::kRows, D = Tr::kD;
  return 1024 + sizeof(T) * (2 * R * D + Tr::kExtraCols * R) +
         sizeof(T) * Tr::kWG * (kKStages + kVStages) * Tr::kTileKeys * D;
}

template <class Tr, PairTerm kTerm>
__global__ void __launch_bounds__(Tr::kThreads, 1) score_pass_keymajor_kernel(PassParams p) {
#if defined(KVEVICT_HAS_WGMMA)
  using T = typename Tr::T;
  constexpr int D = Tr::kD, R = Tr::kRows, TK = Tr::kTileKeys, X = Tr::kExtraCols;
  static_assert(km_smem<Tr>() <= 227 * 1024, "shared memory budget");
  static_assert(kTerm != PairTerm::kObcacheVK, "obcache_vk needs three weights a pair");
  // Distance terms use a (the product with a, ||a||^2); all but prob read V.
  constexpr bool kDistance = kTerm == PairTerm::kDropKV || kTerm == PairTerm::kObcacheK;
  constexpr bool kWithV = kTerm != PairTerm::kProb;
  launch_dependents();

  extern __shared__ unsigned char smem_raw[];
  T* q_s = swizzle_aligned<T>(smem_raw);       // [R][D] swizzled, K-major B of S^T = K Q^T
  T* a_s = q_s + R * D;                        // [R][D] swizzled, MN-major B of W^T a
  T* x_s = a_s + R * D;                        // [X][R] swizzled, K-major B of W^T [a2 1]
  T* k_s = x_s + X * R;                        // [kWG][kKStages][TK][D] swizzled
  T* v_s = k_s + Tr::kWG * kKStages * TK * D;  // [kWG][kVStages][TK][D] swizzled
  // Row constants while the block stages its rows: warpgroup 1's second V stage, first loaded in
  // the main loop (after the block barrier that ends their use).
  float* lse_s = reinterpret_cast<float*>(v_s + (kVStages + 1) * TK * D);  // [R] log2 units
  float* a2_s = lse_s + R;                                                 // [R]
  static_assert(2 * R * sizeof(float) <= TK * D * sizeof(T), "row constants fit a V stage");

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
  const int wg_tiles = (num_tiles - wg + 1) / 2;  // this warpgroup's tiles: t = wg, wg + 2, ...

  cp_async_window_queries<T, D>(a, p.group, hk, row0, rows_here, R, q_s,
                                [](int row, int col) { return sw128<R>(row, col); });
  cp_async_commit();  // both warpgroups' rows: waited for before the block barrier below
  const int64_t head_off = hk * a.kv_head_stride + min(key_begin, a.n - 1) * a.kv_row_stride;
  const SwizzledTileCopy<T, D, 128, TK> copy(static_cast<const T*>(a.k) + head_off,
                                             static_cast<const T*>(a.v) + head_off, a.kv_row_stride,
                                             tid & 127);
  T* wg_k = k_s + wg * kKStages * TK * D;  // this warpgroup's rings
  T* wg_v = v_s + wg * kVStages * TK * D;
  // The warpgroup's i-th tile (sequence t = 2 i + wg: tile num_tiles - 1 - t) lives in K stage
  // i % kKStages and V stage i % kVStages. Its first tile (the chunk's last, maybe partial) is
  // copied with bounds checks; the rest are full and stream backwards two tiles at a time. The
  // copies are the warpgroup's own (its threads alone wait for them), so only its named barrier
  // orders them.
  const int64_t second = max(num_tiles - 1 - (2 + wg), 0) * static_cast<int64_t>(TK);
  SwizzledTileStream<T, D, 128, TK, kKStages> k_stream(
      static_cast<const T*>(a.k) + head_off + second * a.kv_row_stride, a.kv_row_stride, -2, wg_k,
      1, tid & 127);
  SwizzledTileStream<T, D, 128, TK, kVStages> v_stream(
      static_cast<const T*>(a.v) + head_off + second * a.kv_row_stride, a.kv_row_stride, -2, wg_v,
      1, tid & 127);
  auto load_k = [&](int i) {
    if (i < wg_tiles) k_stream.load_next();
  };
  auto load_v = [&](int i) {
    if (kWithV && i < wg_tiles) v_stream.load_next();
  };
  // Copy groups: {K0, V0, K1}, {K2}, then per iteration i {K(i + 3), V(i + 1)}: K(i + 1) and
  // V(i) are complete whenever at most one group is pending at the points they are needed.
  if (wg_tiles > 0) copy.template load<kWithV>(wg_k, wg_v, num_tiles - 1 - wg, chunk_keys);
  load_k(1);
  cp_async_commit();
  load_k(2);
  cp_async_commit();

  // The rows' flagged top keys (pass_terms.cuh): X's spare rows hold them (its columns 3-7 feed
  // outputs the kernel never reads, see below): the tile mask in row 3 of its first block, top_s
  // after lim_s (R = 64) or in its second block (R = 128).
  constexpr bool kTop = kHasTopTerm<kTerm>;
  uint32_t* mask_s = reinterpret_cast<uint32_t*>(x_s + 3 * 64);  // [kTopMaskWords]
  int* top_s = reinterpret_cast<int*>(x_s + (R == 64 ? 6 * 64 : 8 * 64 + 3 * 64));  // [R]
  static_assert(kTopMaskWords * sizeof(uint32_t) <= 64 * sizeof(T), "mask fits a row of X");
  static_assert(R == 64 || 2 * R <= 5 * 64, "top_s fits rows 3-7 of X's second block");
  if constexpr (kTop) init_top_mask(mask_s);

  // a and LSE come from the forward's merge kernel (this kernel may start before it ends).
  grid_dependency_wait();
  stage_window_rows<T, D, kDistance>(
      p, hk, row0, rows_here, R, Tr::kThreads / 32, a_s,
      [](int row, int col) { return sw128<R>(row, col); }, lse_s, a2_s);
  if constexpr (kTop) load_top_rows(p, hk, row0, rows_here, R, key_begin, chunk_end, top_s);
  __syncthreads();
  // X's columns a2_hi, a2_lo and 1; its columns 3-7 feed outputs the kernel never reads, so the
  // bytes of their first 64-row block hold the rows' last visible keys (masked tiles).
  int* lim_s = reinterpret_cast<int*>(x_s + 4 * 64);  // [R] relative to key_begin
  static_assert(R * sizeof(int) <= 4 * 64 * sizeof(T), "row limits fit X's spare rows");
  for (int i = tid; i < 3 * R; i += Tr::kThreads) {
    const int c = i / R, r = i % R;
    const float a2 = a2_s[r];
    const T hi = ElemTraits<T>::from_float(a2);
    float x = 1.f;
    if (c == 0) x = ElemTraits<T>::to_float(hi);
    if (c == 1) x = a2 - ElemTraits<T>::to_float(hi);
    x_s[sw128<X>(c, r)] = ElemTraits<T>::from_float(x);
  }
  for (int r = tid; r < R; r += Tr::kThreads) lim_s[r] = ch.row_limit(a, row0, r, rows_here);
  if constexpr (kTop) set_top_mask(top_s, R, TK, mask_s);  // read after the barrier below
  // LSE of the thread's accumulator columns 8 j + 2 t4 + e (window rows), at lse2[2 j + e].
  float lse2[R / 4];
#pragma unroll
  for (int j = 0; j < R / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) lse2[2 * j + e] = lse_s[8 * j + 2 * t4 + e];
  cp_async_wait<2>();    // the queries, and this thread's K0, V0, K1
  fence_async_shared();  // q_s, a_s, x_s and the K tiles are read by wgmma
  __syncthreads();       // also ends the use of lse_s / a2_s

  const int lim_all = ch.lim_all(a);  // every row sees up to here
  const float c2 = a.scale * kLog2e;
  const float floor = sa.one_minus_p_floor;
  const int key_lo = (warp & 3) * 16 + g;  // the thread's keys in a tile: key_lo, key_lo + 8
  auto kdim_bytes = [](int ks, int rows) {
    return static_cast<uint32_t>(sizeof(T) * ((ks >> 2) * rows * 64 + (ks & 3) * 16));
  };
  const uint64_t q_desc = wgmma_desc(q_s, 16, 1024);
  const uint64_t a_desc = wgmma_desc(a_s, R * 64 * sizeof(T), 1024);
  const uint64_t x_desc = wgmma_desc(x_s, 16, 1024);
  const uint64_t k_desc = wgmma_desc(wg_k, 16, 1024);
  constexpr uint32_t kStageBytes = sizeof(T) * TK * D;

  // S^T = K Q^T of the warpgroup's i-th tile: 64 keys x R rows, one commit group.
  float s[R / 2];
  auto issue_logits = [&](int i) {
    const uint64_t kt_desc = wgmma_desc_add(k_desc, (i % kKStages) * kStageBytes);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss<T, R>(s, wgmma_desc_add(kt_desc, kdim_bytes(ks, TK)),
                     wgmma_desc_add(q_desc, kdim_bytes(ks, R)), ks > 0 ? 1 : 0);
  };
  // Issued unconditionally (here and for the tile after the last): a wgmma under a branch makes
  // ptxas serialize every wgmma of the kernel (C7520). Past the last tile the product reads a
  // stale stage and is never used.
  issue_logits(0);
  wgmma_commit();

  for (int it = 0; it < wg_tiles; ++it) {
    const int tile = num_tiles - 1 - (2 * it + wg);
    wgmma_wait<0>();
    wgmma_hold(s);

    // Weights: s[4 j + 2 h + e] is key key_lo + 8 h, row 8 j + 2 t4 + e. Formed and handed to
    // the tensor cores in two halves of the rows (s[0, R / 4) and s[R / 4, R / 2)): the first
    // half's products run while the CUDA cores form the second.
    bool fast = true;  // dropkv: every p of the warp <= 2^-8 (pass_terms.cuh, dropkv_ratio)
    if constexpr (kTerm == PairTerm::kDropKV) {
      float xm[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};  // four chains, not one
#pragma unroll
      for (int i = 0; i < R / 2; ++i) {
        s[i] = fmaf(s[i], c2, -lse2[2 * (i >> 2) + (i & 1)]);
        xm[i & 3] = fmaxf(xm[i & 3], s[i]);
      }
      fast = __all_sync(0xffffffffu, fmaxf(fmaxf(xm[0], xm[1]), fmaxf(xm[2], xm[3])) <= -8.f);
    }
    const int key0 = tile * TK;  // relative to key_begin
    const bool masked = key0 + TK - 1 > lim_all;
    // A row's flagged top key takes its leave-one-out term at the end (add_top_terms): its
    // weight is 0 here.
    const bool has_top = kTop && tile_has_top(mask_s, tile);
    float y[D / 2], yx[X / 2];
    uint32_t wa[R / 16][4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      constexpr int kH = R / 4;  // elements of s a half
      if constexpr (kTerm == PairTerm::kDropKV) {
        auto weights = [&](auto is_fast) {
#pragma unroll
          for (int i = half * kH; i < (half + 1) * kH; ++i) {
            // The exact form clamps p at 1: where |z| > ~2^24 the logit's rounding against LSE
            // can exceed 0 (the fast form only runs with every p <= 2^-8).
            const float x = decltype(is_fast)::value ? s[i] : nan_min(s[i], 0.f);  // NaN stays
            const float r = dropkv_ratio<decltype(is_fast)::value>(x, fast_exp2(x), floor);
            s[i] = r * r;
          }
        };
        if (fast)
          weights(std::true_type{});
        else
          weights(std::false_type{});
      } else {
#pragma unroll
        for (int i = half * kH; i < (half + 1) * kH; ++i) {
          const float pr = fast_exp2(fmaf(s[i], c2, -lse2[2 * (i >> 2) + (i & 1)]));
          if constexpr (kTerm == PairTerm::kObcacheK) {
            const float pz = pr * (s[i] * a.scale);
            s[i] = pz * pz;
          } else if constexpr (kTerm == PairTerm::kObcacheV) {
            s[i] = pr * pr;
          } else {
            s[i] = pr;
          }
        }
      }
      if (masked || has_top) {
#pragma unroll
        for (int i = half * kH; i < (half + 1) * kH; ++i) {
          const int key = key0 + key_lo + 8 * ((i >> 1) & 1), row = 8 * (i >> 2) + 2 * t4 + (i & 1);
          if (key > lim_s[row] || (kTop && key == top_s[row])) s[i] = 0.f;
        }
      }
      // Y = W^T [a | a2_hi a2_lo 1]: the S^T accumulators of n8 tiles 2 kk, 2 kk + 1 are the A
      // fragment of k16 step kk (rows 16 kk ..).
#pragma unroll
      for (int kk = half * R / 32; kk < (half + 1) * R / 32; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x)
          wa[kk][x] = ElemTraits<T>::pack(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1]);
      wgmma_fence();
#pragma unroll
      for (int kk = half * R / 32; kk < (half + 1) * R / 32; ++kk) {
        if constexpr (kDistance)
          wgmma_rs_mn<T, D>(y, wa[kk], wgmma_desc_add(a_desc, kk * 16 * 128), kk > 0 ? 1 : 0);
        wgmma_rs_k<T, X>(yx, wa[kk], wgmma_desc_add(x_desc, kdim_bytes(kk, X)), kk > 0 ? 1 : 0);
      }
    }
    wgmma_commit();

    // The next tile's logits run on the tensor cores behind Y while this tile's dot products run
    // on the CUDA cores. K(it + 1) is complete once at most this iteration's predecessor group
    // pends; the barrier publishes every thread's copies and ends the warpgroup's reads of
    // K(it) and V(it - 1), whose stages the copies below refill.
    cp_async_wait<1>();
    fence_async_shared();
    warpgroup_barrier(wg);
    issue_logits(it + 1);
    wgmma_commit();
    load_k(it + 3);
    load_v(it + 1);
    cp_async_commit();
    wgmma_wait<1>();  // Y done; the next logits may still run
    if constexpr (kDistance) wgmma_hold(y);
    wgmma_hold(yx);
    if constexpr (kWithV) {
      cp_async_wait<1>();  // V(it)
      warpgroup_barrier(wg);
    }

    // Per key, from Y_1 (lane t4 = 1, column 2), Y_a2 (lane t4 = 0, columns 0 and 1) and the key's
    // value row over the thread's columns 8 j + 2 t4 + e:
    //   distance terms: Y_a2 + 2 sum_c v_c (v_c Y_1 / 2 - Y_c) = Y_a2 + ||v||^2 Y_1 - 2 <Y_a, v>,
    //   obcache_v: ||v||^2 Y_1,   prob: Y_1.
    const T* vt = wg_v + (it % kVStages) * TK * D;
    float raw[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float y1 = __shfl_sync(0xffffffffu, yx[2 * h], (lane & ~3) | 1);
      if constexpr (kWithV) {
        const float y1h = 0.5f * y1;
        const T* vk = vt + (key_lo + 8 * h) * 64 + 2 * t4;
        float sum[2] = {0.f, 0.f};  // the two columns of a pair: two independent FMA chains
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          const uint32_t bits =
              *reinterpret_cast<const uint32_t*>(vk + (j >> 3) * TK * 64 + (((j & 7) ^ g) << 3));
          const float v0 = __uint_as_float(bits << 16), v1 = __uint_as_float(bits & 0xFFFF0000u);
          if constexpr (kDistance) {
            sum[0] = fmaf(v0, fmaf(v0, y1h, -y[4 * j + 2 * h]), sum[0]);
            sum[1] = fmaf(v1, fmaf(v1, y1h, -y[4 * j + 2 * h + 1]), sum[1]);
          } else {
            sum[0] = fmaf(v0, v0, sum[0]);
            sum[1] = fmaf(v1, v1, sum[1]);
          }
        }
        float total = sum[0] + sum[1];
        total += __shfl_xor_sync(0xffffffffu, total, 1);
        total += __shfl_xor_sync(0xffffffffu, total, 2);
        raw[h] = kDistance ? yx[2 * h] + yx[2 * h + 1] + 2.f * total : total * y1;
      } else {
        raw[h] = y1;
      }
    }
    if (t4 == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t j = key_begin + key0 + key_lo + 8 * h;
        if (j < chunk_end) store_key_score(p, hk, j, finish_key_score<kTerm>(sa, j, raw[h]));
      }
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  if constexpr (kTop) {
    __syncthreads();  // every key total of the block is stored
    add_top_terms<kTerm>(p, hk, row0, rows_here, R, key_begin, top_s);
  }
#else
  wgmma_unavailable();
#endif
}

// Every term but obcache_vk (keymajor_pass_supported keeps it on the row-major pass).
template <int D, int R>
cudaError_t dispatch_term(const PassParams& p, int chunks, cudaStream_t stream) {
  using Tr = KeyMajorTraits<D, R>;
  return with_pair_term(p.s.term, [&](auto term) {
    constexpr PairTerm kTerm = decltype(term)::value;
    if constexpr (kTerm == PairTerm::kObcacheVK) {
      return cudaErrorNotSupported;
    } else {
      return launch_pass_kernel(score_pass_keymajor_kernel<Tr, kTerm>, km_smem<Tr>(), Tr::kThreads,
                                p, chunks, stream);
    }
  });
}

std::atomic<bool> g_keymajor_enabled{true};

}  // namespace

bool keymajor_pass_supported(const ScorePassArgs& s, int rows_per_block) {
  return g_keymajor_enabled.load(std::memory_order_relaxed) && s.v_l1 == nullptr &&
         s.term != PairTerm::kObcacheVK && s.win.elem == Elem::kBF16 &&
         (rows_per_block == 64 || rows_per_block == 128) &&
         wgmma_forward_supported(s.win, rows_per_block);
}

cudaError_t launch_pass_keymajor(const PassParams& p, int rows_per_block, int chunks,
                                 cudaStream_t stream) {
  if (!keymajor_pass_supported(p.s, rows_per_block)) return cudaErrorNotSupported;
  return with_int<64, 128>(p.s.win.head_dim, [&](auto d) {
    return with_int<64, 128>(rows_per_block, [&](auto r) {
      return dispatch_term<decltype(d)::value, decltype(r)::value>(p, chunks, stream);
    });
  });
}

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda {
void set_window_keymajor(bool enabled) {
  detail::g_keymajor_enabled.store(enabled);
}
}  // namespace kvevict::cuda
