// Window forward on Hopper's warpgroup MMA (wgmma.cuh): the same split-K online softmax as
// window_forward.cu, for blocks of 64 or 128 query rows of one KV head.
//
// A warpgroup (4 warps) owns 64 rows and every key of each 64-key tile: S = Q K^T is one m64n64
// wgmma chain over the head dim with Q and K both read by the tensor cores from swizzled shared
// memory, P stays in the S registers and O += P V is an m64nD chain with V as a transposed
// shared-memory operand. Each K and V tile is read from shared memory once per 64 rows, where the
// mma.sync kernel's warps re-read it for every 16 (the bound of w = 32 in v7: 8 x 32 KB of
// fragment reads per 64-key tile). No key groups, so no in-block merge: each warpgroup writes its
// rows' (o / l, m, l) partial directly in window_forward.cu's layout, whose merge kernel follows.
// With V, each row's top key is kept apart from (o, m, l) (window_params.cuh ForwardTop): the
// partial then also holds that key's logit and index.
#include <cuda.h>  // CUtensorMap and its enums (the encoder comes from the driver at run time)
#include <cuda_runtime.h>
#include <math_constants.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dispatch.cuh"
#include "cuda/kv_tile_copy.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/window_params.cuh"
#include "cuda/window_traits.cuh"
#include "kvevict/error.h"

namespace kvevict::cuda::detail {
namespace {

// The K and V tensor maps of the TMA variant (kTma): [Hkv][n][d] in the input dtype, 64-column x
// 64-key boxes with the 128-byte swizzle of wgmma.cuh, keys past n read as zeros. Unused (zero)
// by the other variants.
struct KvTensorMaps {
  CUtensorMap k, v;
};

// --- mbarriers and TMA loads (shared::cta, sm_90) ---
__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(count)
               : "memory");
}
// Makes the initialized barriers visible to the async proxy (the TMA unit) and other threads.
__device__ __forceinline__ void mbar_fence_init() {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also expects `bytes` of asynchronous copies to complete on the barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_addr(bar)) : "memory");
}
// Whether the barrier's phase of parity `parity` has completed (try_wait: may suspend the thread
// for a while before saying no).
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(shared_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits until that phase has completed. A phase that never completes is a bug: after 2^26 tries
// (seconds) the kernel traps, an error the caller reports, instead of hanging the device.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  for (uint32_t tries = 0; !mbar_try_wait(bar, parity); ++tries)
    if (tries == (1u << 26)) __trap();
}
// A [1][rows][64] box of a 3-d tensor map at (column c0, row c1, head c2) into dst (1024-byte
// aligned, swizzled as the map says), completing on bar.
__device__ __forceinline__ void tma_load_box(void* dst, const CUtensorMap* map, uint64_t* bar,
                                             int c0, int c1, int c2) {
#if defined(KVEVICT_HAS_WGMMA)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4, %5}], [%2];\n" ::"r"(shared_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// Shared memory: 1 KB of alignment slack (swizzled tiles start 1024-byte aligned), the queries,
// `stages` K (and V) tiles and, with TMA loads, three barriers a stage: K's arrival, the stage's
// release and V's arrival (which can cost a stage: 64-row blocks at d = 128 fit 3 stages two
// blocks a SM to the byte without them).
template <class Tr, bool kWithV, bool kTma = false>
constexpr size_t wg_forward_smem(int stages) {
  using T = typename Tr::T;
  return 1024 + sizeof(T) * Tr::kRows * Tr::kD +
         sizeof(T) * stages * Tr::kTileKeys * Tr::kD * (kWithV ? 2 : 1) +
         (kTma ? 3 * stages * sizeof(uint64_t) : 0);
}
template <class Tr, bool kWithV, bool kTma = false>
constexpr int wg_forward_stages() {
  return stages_that_fit(Tr::kBlocksPerSm,
                         [](int s) { return wg_forward_smem<Tr, kWithV, kTma>(s); });
}

// Direct rows (a causal prefill chunk: query t of a head sees keys up to p0 + t): the row block
// that launch slot y runs, latest queries first. Each query head's w rows are w / R blocks with
// ever more keys; the blocks are handed out in launch order as SMs free up, so the identity order
// left the longest blocks for the last wave (a 32K chunk at 501 TFLOP/s against 565 in 4K chunks,
// H100). Slot y takes the (y / G)-th longest block of query head y % G. A permutation of the
// blocks: what each block computes is unchanged. Other layouts keep the identity.
__device__ __forceinline__ int longest_first_row_block(const ForwardParams& p, int y, int R) {
  const int per_head = p.a.w / R;
  if (p.a.w % R != 0 || p.row_blocks != per_head * p.group) return y;
  return (y % p.group) * per_head + (per_head - 1 - y / p.group);
}

// kTop (with V): the rows' top keys are kept apart (window_params.cuh ForwardTop), for the scores
// that need a_{-top}; without it the plain online softmax (attention outputs for the model).
// kDirect (one split, launch_window_attention_rows): the rows' final outputs and lse go straight
// to p.rows_out / p.rows_lse, as the merge would write them from this block's one partial.
// kTma (direct rows; set_window_tma): one more warp, the producer, streams the key tiles with the
// tensor memory accelerator (maps) into the stage ring, each stage's K and V arrivals signalled
// on two "full" mbarriers and its release by the 8 consumer warps (after their P V) on an "empty"
// one; no thread copies a tile and no block-wide barrier runs per tile, so the two warpgroups
// drift apart and overlap each other's softmax with the tensor cores (FlashAttention-3's producer
// / consumer split). Keys past the block's range but before n are loaded and masked (not zeroed).
// kTmaInline (with kTma; set_window_tma_wide: 128-key tiles, or 64 at head dim 256): no producer
// warp. Each consumer warp counts its release of a stage on a shared counter, and the warp that
// releases it last issues the TMA loads of the stage's next tile. 256 threads leave ptxas up to
// 255 registers a thread where 288 (two warpgroups and a warp, allocated as three) leave 168,
// which 128-key tiles (and d = 256's 128 output floats) exceed.
// kOverlap (with kTmaInline, head dim <= 128; set_window_wide_loop): FlashAttention-3's loop. 1:
// each warpgroup issues Q K^T of tile t + 1 and P V of tile t together and runs the softmax of
// tile t + 1 while its P V runs (intra-warpgroup overlap). 2: the same, the issues taken in turns
// with the other warpgroup (two named barriers, FA3's ping-pong), so the tensor cores alternate
// between the warpgroups instead of both warpgroups' softmax falling on the same moments. Every
// product and softmax step is the plain loop's, in its order: the same bits.
// kOverlap 1 without TMA (set_window_split_overlap): loop 1 for the scoring forward's split blocks
// on cp.async loads (one or two warpgroups; at least 3 stages: a tile loads while a Q K^T and a
// P V run), the top keys included: the top step's joins into o and its stash wait until the P V
// on o has completed (forward_top_tail), the order in which the plain loop applies them.
template <class Tr, bool kWithV, bool kTop, bool kDirect = false, bool kTma = false,
          bool kTmaInline = false, int kOverlap = 0>
__global__ void __launch_bounds__(Tr::kThreads + (kTma && !kTmaInline ? 32 : 0), Tr::kBlocksPerSm)
    window_forward_wgmma_kernel(ForwardParams p, const __grid_constant__ KvTensorMaps maps) {
  static_assert(kWithV || !kTop, "the top keys need V");
  static_assert(!kDirect || (kWithV && !kTop), "direct rows: outputs without top keys");
  static_assert(!kTma || kDirect, "the TMA loads: direct rows (one split) only");
  static_assert(!kTmaInline || kTma, "consumer-issued TMA loads: a TMA variant");
  static_assert(Tr::kTileKeys == 64 || kTmaInline, "128-key tiles: the consumer-issued TMA only");
  // (kTmaInline is also what frees released[kStages], the word the overlapped loops store into
  // to pin their wait: with a producer warp that word is a live "empty" mbarrier.)
  constexpr bool kSplitOverlap = kOverlap > 0 && !kTma;
  static_assert(kOverlap == 0 || (kTmaInline && Tr::kWG == 2 && Tr::kD <= 128) ||
                    (kSplitOverlap && kOverlap == 1 && kWithV && !kDirect && Tr::kD <= 128),
                "the overlapped loops: two warpgroups on the wide TMA forward, head dim <= 128, "
                "or (loop 1) the split forward with V");
  static_assert(Tr::kD <= 128 || kTmaInline,
                "head dim 256 (O: 128 floats a thread): the consumer-issued TMA only");
#if defined(KVEVICT_HAS_WGMMA)
  using T = typename Tr::T;
  constexpr int D = Tr::kD, R = Tr::kRows, TK = Tr::kTileKeys;
  constexpr int kS = TK / 2;  // S accumulators a thread: m64 x n(TK) over 128 threads
  constexpr int kStages = wg_forward_stages<Tr, kWithV, kTma>();
  static_assert(wg_forward_smem<Tr, kWithV, kTma>(kStages) <= 227 * 1024, "shared memory budget");
  static_assert(!kSplitOverlap || kStages >= 3, "the split overlap keeps two stages computing");
  launch_dependents();  // one wave: the merge kernel may be scheduled as blocks finish

  extern __shared__ unsigned char smem_raw[];
  T* q_s = swizzle_aligned<T>(smem_raw);  // [R][D] swizzled
  T* k_s = q_s + R * D;                   // [kStages][TK][D] swizzled
  T* v_s = k_s + kStages * TK * D;        // [kStages][TK][D] swizzled (kWithV)
  // kTma: a stage's K arrival (full), its release (empty) and its V arrival (full_v): a warpgroup
  // issues Q K^T of a tile when the tile's K has landed, whatever its V is doing.
  uint64_t* full = reinterpret_cast<uint64_t*>(v_s + (kWithV ? kStages * TK * D : 0));
  uint64_t* empty = full + kStages;
  uint64_t* full_v = empty + kStages;
  // kTmaInline: in empty's place, each stage's count of warp releases since the launch.
  unsigned* released = reinterpret_cast<unsigned*>(empty);
  // The overlapped loops' pinning store's word, never read: past the release counts (kTmaInline),
  // or (kSplitOverlap) in the 1 KB of alignment slack, before the queries where at least 16 bytes
  // of it lie there, else after the last stage (where the rest of it lies).
  unsigned* const pin_word =
      kTma ? released + kStages
           : reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(q_s) - smem_raw >= 16
                                             ? smem_raw
                                             : reinterpret_cast<unsigned char*>(full));

  const WindowArgs& a = p.a;
  const int hk = blockIdx.x, split = blockIdx.z;
  const int rb = kDirect ? longest_first_row_block(p, blockIdx.y, R) : static_cast<int>(blockIdx.y);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, g = lane >> 2, t4 = lane & 3;
  const int row0 = rb * R;
  const int rows_here = min(R, p.rows - row0);

  // Keys of this split (see window_forward.cu).
  const ForwardKeys fk(p, split, row0, rows_here);
  const int64_t key_begin = fk.begin;
  const int keys = fk.keys;
  const int num_tiles = (keys + TK - 1) / TK;

  cp_async_window_queries<T, D>(a, p.group, hk, row0, rows_here, R, q_s,
                                [](int row, int col) { return sw128<R>(row, col); });
  const int64_t head_off = hk * a.kv_head_stride + min(key_begin, a.n - 1) * a.kv_row_stride;
  const SwizzledTileCopy<T, D, Tr::kThreads, TK> copy(
      static_cast<const T*>(a.k) + head_off,
      kWithV ? static_cast<const T*>(a.v) + head_off : nullptr, a.kv_row_stride, tid);
  // Whole tiles (every row below `keys`) stream with one add a copy; the last, partial one takes
  // the checked copy (rows past `keys` zeroed). Tiles load in order 0, 1, ... into stage
  // tile % kStages, which is the streams' own stage walk.
  const int full_tiles = keys / TK;
  SwizzledTileStream<T, D, Tr::kThreads, TK, kStages> k_stream(
      static_cast<const T*>(a.k) + head_off, a.kv_row_stride, 1, k_s, 0, tid);
  SwizzledTileStream<T, D, Tr::kThreads, TK, kStages> v_stream(
      kWithV ? static_cast<const T*>(a.v) + head_off : static_cast<const T*>(a.k) + head_off,
      a.kv_row_stride, 1, v_s, 0, tid);
  auto load_tile = [&](int tile, int stage) {
    if (tile < full_tiles) {
      k_stream.load_next();
      if constexpr (kWithV) v_stream.load_next();
    } else {
      copy.template load<kWithV>(k_s + stage * TK * D, v_s + stage * TK * D, tile, keys);
    }
  };
  // kTma (direct rows, so with V): tile `tile`'s K and V boxes into its stage, their bytes
  // expected on its full and full_v barriers (K first: a warpgroup waits for it one step before it
  // needs V).
  auto issue_tma = [&](int tile) {
    constexpr uint32_t kTileBytes = sizeof(T) * TK * D;
    const int stage = tile % kStages;
    mbar_arrive_expect_tx(&full[stage], kTileBytes);
    mbar_arrive_expect_tx(&full_v[stage], kTileBytes);
    const int key = static_cast<int>(key_begin) + tile * TK;
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb)
      tma_load_box(k_s + stage * TK * D + cb * TK * 64, &maps.k, &full[stage], cb * 64, key, hk);
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb)
      tma_load_box(v_s + stage * TK * D + cb * TK * 64, &maps.v, &full_v[stage], cb * 64, key, hk);
  };
  if constexpr (kTma) {
    // The queries (cp.async above) and the barriers reach every thread before the producer warp
    // leaves: the only block-wide barrier of this variant.
    if (tid == 0) {
      for (int st = 0; st < kStages; ++st) {
        mbar_init(&full[st], 1);  // the issuing thread's arrival + the tile's bytes
        mbar_init(&full_v[st], 1);
        if constexpr (kTmaInline)
          released[st] = 0;
        else
          mbar_init(&empty[st], Tr::kWarps);  // one arrival a consumer warp
      }
      mbar_fence_init();
      if constexpr (kTmaInline) {  // the first stages' tiles load while the queries land
        for (int tile = 0; tile < kStages && tile < num_tiles; ++tile) issue_tma(tile);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_async_shared();
    __syncthreads();
    if constexpr (!kTmaInline) {
      if (warp == Tr::kWarps) {  // the producer warp: its first lane issues every tile's loads
        if (lane == 0) {
          for (int tile = 0; tile < num_tiles; ++tile) {
            // A stage's k-th refill waits for the consumers' release of its (k-1)-th tile.
            if (tile >= kStages) mbar_wait(&empty[tile % kStages], ((tile / kStages) - 1) & 1);
            issue_tma(tile);
          }
        }
        return;
      }
    }
  } else {
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < num_tiles) load_tile(st, st);
      cp_async_commit();
    }
  }

  // This thread's two rows (block-local) in the accumulator layout.
  const int rl_lo = wg * 64 + (warp & 3) * 16 + g, rl_hi = rl_lo + 8;
  const ForwardRowLimits limits(fk, a, p.rows, row0 + rl_lo);
  const float sc = p.scale_log2;

  // Descriptors: the warpgroup's 64 query rows (K-major A), a key tile (K-major B) and a value tile
  // (MN-major B: 64-column blocks TK * 128 bytes apart). k16 step ks of the head dim starts at
  // column block ks / 4, byte 32 (ks % 4) of its rows.
  // Base descriptors, set up once; per k16 step and stage only the address field moves (bytes).
  auto kdim_bytes = [](int ks, int rows) {
    return static_cast<uint32_t>(sizeof(T) * ((ks >> 2) * rows * 64 + (ks & 3) * 16));
  };
  uint64_t q_desc = wgmma_desc(q_s + wg * 64 * 64, 16, 1024);
  uint64_t k_desc = wgmma_desc(k_s, 16, 1024);
  uint64_t v_desc = wgmma_desc(v_s, TK * 64 * sizeof(T), 1024);
  constexpr uint32_t kStageBytes = sizeof(T) * TK * D;

  float o[kWithV ? D / 2 : 1];
#pragma unroll
  for (int i = 0; i < (kWithV ? D / 2 : 1); ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  ForwardTop<kTop ? D / 2 : 2> top;

  // Q K^T of the tile in `stage` into s (64 rows x TK keys a warpgroup), committed, not waited.
  auto issue_qk = [&](float(&s)[kS], int stage) {
    const uint64_t kt_desc = wgmma_desc_add(k_desc, stage * kStageBytes);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss<T, TK>(s, wgmma_desc_add(q_desc, kdim_bytes(ks, R)),
                      wgmma_desc_add(kt_desc, kdim_bytes(ks, TK)), ks > 0 ? 1 : 0);
    wgmma_commit();
  };
  // The 16-bit value pair (col, col + 1) of tile key `key` in `stage` (the top keys' stash).
  auto v_pair_at = [&](int stage) {
    const T* vtile = v_s + stage * TK * D;
    return [vtile](int key, int col) {
      return *reinterpret_cast<const uint32_t*>(vtile + sw128<TK>(key, col));
    };
  };
  auto o_at = [&](int i) -> float& { return o[i]; };
  // The rows' limits on the logits of tile `tile`, then their online softmax: s becomes P.
  auto mask_and_softmax = [&](float(&s)[kS], int tile, float(&corr)[2], bool* grew, bool* rescaled,
                              int stage) {
    forward_softmax_tile<kTop, T, kS>([&](int i) -> float& { return s[i]; }, o_at, v_pair_at(stage),
                                      limits, tile* TK, t4, sc, top, m_run, l_run, corr, grew,
                                      rescaled);
  };
  // The same, the top step's tail left in *tail (a P V runs on o). Its own lambda: the deferral is
  // a type (forward_softmax_tile's Deferred), and one generic lambda taking nullptr or the tail
  // crashed nvcc 13.0's cicc (2026-12-06 (h)).
  auto mask_and_softmax_deferred = [&](float(&s)[kS], int tile, float(&corr)[2], bool* grew,
                                       bool* rescaled, int stage, ForwardTopTail* tail) {
    forward_softmax_tile<kTop, T, kS>([&](int i) -> float& { return s[i]; }, o_at, v_pair_at(stage),
                                      limits, tile* TK, t4, sc, top, m_run, l_run, corr, grew,
                                      rescaled, tail);
  };
  // O = corr O + P V with V in `stage`, committed, not waited. The S accumulators of n8 tiles 2 kk
  // and 2 kk + 1 are the A fragment of k16 step kk (as in the mma.sync kernel).
  // Its steps: O rescaled to the tile's row maxima, P packed to T (the A fragments, before the
  // fence: no register writes inside the chain), the chain issued and committed.
  using PFrag = uint32_t[TK / 16][4];
  auto rescale_o = [&](const float(&corr)[2], bool grew, bool rescaled) {
    if (grew && !rescaled) {
#pragma unroll
      for (int i = 0; i < (kWithV ? D / 2 : 1); ++i) o[i] *= corr[(i >> 1) & 1];
    }
  };
  auto pack_p = [&](const float(&s)[kS], PFrag& pa) {
#pragma unroll
    for (int kk = 0; kk < TK / 16; ++kk) {
      pa[kk][0] = ElemTraits<T>::pack(s[8 * kk], s[8 * kk + 1]);
      pa[kk][1] = ElemTraits<T>::pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = ElemTraits<T>::pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = ElemTraits<T>::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  auto issue_pv_packed = [&](PFrag& pa, int stage) {
    if constexpr (kWithV) {  // (o is a placeholder without V)
      const uint64_t vt_desc = wgmma_desc_add(v_desc, stage * kStageBytes);
      wgmma_hold(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < TK / 16; ++kk) {
        const uint64_t desc = wgmma_desc_add(vt_desc, kk * 16 * 64 * sizeof(T));
        if constexpr (D <= 128) {
          wgmma_rs_mn<T, D>(o, pa[kk], desc, 1);
        } else {
          // Two m64n128 halves, columns 0-127 and 128-255 (two 64-column blocks further): their
          // accumulators laid end to end are an m64n256's, so o's layout is the same.
          using Half = float[64];
          wgmma_rs_mn<T, 128>(*reinterpret_cast<Half*>(o), pa[kk], desc, 1);
          wgmma_rs_mn<T, 128>(*reinterpret_cast<Half*>(o + 64), pa[kk],
                              wgmma_desc_add(desc, 2 * TK * 64 * sizeof(T)), 1);
        }
      }
      wgmma_commit();
    }
  };
  auto issue_pv = [&](const float(&s)[kS], const float(&corr)[2], bool grew, bool rescaled,
                      int stage) {
    if constexpr (kWithV) {
      rescale_o(corr, grew, rescaled);
      PFrag pa;
      pack_p(s, pa);
      issue_pv_packed(pa, stage);
    }
  };

  // kTma: tile `use`'s K, or its V, has landed (the overlapped loops wait for each where it is
  // first read: K before Q K^T, V one step later before P V).
  auto landed_k = [&](int use) { mbar_wait(&full[use % kStages], (use / kStages) & 1); };
  auto landed_v = [&](int use) { mbar_wait(&full_v[use % kStages], (use / kStages) & 1); };
  // Waits until tile `use` has landed: at most `pending` cp.async groups in flight, the landed
  // tiles made visible to wgmma, and a block barrier (which also frees the stage the next
  // prefetch loads into); kTma: tile `use`'s K and V arrivals.
  auto landed = [&](auto pending, int use) {
    if constexpr (kTma) {
      landed_k(use);
      landed_v(use);
    } else {
      cp_async_wait<decltype(pending)::value>();
      fence_async_shared();
      __syncthreads();
    }
  };
  // landed, then tile `ahead` (when there is one) loads as one more cp.async group (kTma: the
  // producer prefetches on its own).
  auto landed_then_prefetch = [&](auto pending, int ahead, int use) {
    landed(pending, use);
    if constexpr (!kTma) {
      if (ahead < num_tiles) load_tile(ahead, ahead % kStages);
      cp_async_commit();
    }
  };
  // kTma: this warp is done with tile `tile`'s stage (its Q K^T and P V have completed).
  // kTmaInline: the stage's (tile / kStages + 1)-th round of kWarps releases ends with this
  // warp's when the count it finds is one short; that warp loads the stage's next tile. (A count,
  // never reset: no store to order against the other warps' later increments.)
  auto release = [&](int tile) {
    if constexpr (kTmaInline) {
      __syncwarp();
      if (lane == 0) {
        const int stage = tile % kStages;
        const unsigned round_end = static_cast<unsigned>(tile / kStages + 1) * Tr::kWarps - 1;
        __threadfence_block();  // this warp's reads of the stage before the count says so
        if (atomicAdd(&released[stage], 1u) == round_end) {
          __threadfence_block();
          if (tile + kStages < num_tiles) issue_tma(tile + kStages);
        }
      }
    } else if constexpr (kTma) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[tile % kStages]);
    }
  };

  if constexpr (kOverlap > 0) {
    // Turns (kOverlap 2): this warpgroup waits on its named barrier (1 + wg) before it issues, and
    // lets the other go (arrives on 2 - wg) after. Warpgroup 1 arrives once first, so warpgroup 0
    // takes the first turn, and skips its arrival after its last turn, so no barrier is left
    // half-arrived. Each warpgroup takes num_tiles + 1 turns: Q K^T of tile 0; {Q K^T of t + 1,
    // P V of t}; P V of the last tile. A tile's landing is waited before the turn (a wait inside
    // it would hold the other warpgroup up).
    auto take_turn = [&] {
      if constexpr (kOverlap == 2)
        wg == 0 ? named_barrier_sync<1, 256>() : named_barrier_sync<2, 256>();
    };
    auto pass_turn = [&] {
      if constexpr (kOverlap == 2)
        wg == 0 ? named_barrier_arrive<2, 256>() : named_barrier_arrive<1, 256>();
    };
    PFrag pa;
    float s[kS];
    float corr[2];
    bool grew = false, rescaled = false;
    if (num_tiles > 0) {
      if (wg == 1) pass_turn();
      if constexpr (kTma)
        landed_k(0);
      else  // the prologue's first of kStages - 1 tiles
        landed(std::integral_constant<int, kStages - 2>(), 0);
      take_turn();
      issue_qk(s, 0);
      pass_turn();
      wgmma_wait<0>();
      wgmma_hold(s);
      mask_and_softmax(s, 0, corr, &grew, &rescaled, 0);
      rescale_o(corr, grew, rescaled);
      pack_p(s, pa);
    }
    // Every iteration commits the same two groups (a conditional commit would keep ptxas from
    // proving that the first wait leaves only P V running, and it would serialize the wgmma,
    // C7514); the last tile's P V follows the loop.
    ForwardTopTail tail;  // kTop, kSplitOverlap: the top step's joins and stash, after P V
    for (int tile = 0; tile + 1 < num_tiles; ++tile) {
      if constexpr (kTma) {
        landed_k(tile + 1);
        landed_v(tile);
      } else {
        // Tile + 1 landed; the barrier also frees the stage of tile - 1 (every warp has waited
        // its P V), into which tile + kStages - 1 loads: kStages - 2 tiles are on their way
        // while a Q K^T and a P V run.
        landed_then_prefetch(std::integral_constant<int, kStages - 3>(), tile + kStages - 1,
                             tile + 1);
      }
      take_turn();
      issue_qk(s, (tile + 1) % kStages);
      wgmma_hold(s);
      issue_pv_packed(pa, tile % kStages);
      pass_turn();
      wgmma_wait<1>();  // Q K^T of tile + 1, committed first, has completed
      wgmma_hold(s);
      if constexpr (kTop)
        mask_and_softmax_deferred(s, tile + 1, corr, &grew, &rescaled, (tile + 1) % kStages, &tail);
      else
        mask_and_softmax(s, tile + 1, corr, &grew, &rescaled, (tile + 1) % kStages);
      // ptxas hoists the wait for P V above the softmax (placing it anywhere in the block, it
      // put it before the exponentials, which then ran after P V: no overlap) unless a memory
      // operation that needs the softmax stands before it: lane 0 stores the row sums into a
      // spare word (pin_word, never read). One thread stores (a store by every warp was a
      // write-write race to racecheck); the predicate does not change the instruction order,
      // which is what pins every warp's wait.
      if (tid == 0) *reinterpret_cast<volatile float*>(pin_word) = l_run[0] + l_run[1];
      wgmma_wait<0>();
      wgmma_hold(o);
      wgmma_hold(pa);
      release(tile);
      if constexpr (kTop)
        forward_top_tail<T, D / 2>(o_at, v_pair_at((tile + 1) % kStages), top, tail, corr, t4);
      rescale_o(corr, grew, rescaled);
      pack_p(s, pa);
    }
    if (num_tiles > 0) {
      if constexpr (kTma) landed_v(num_tiles - 1);  // (cp.async: landed with its K)
      take_turn();
      issue_pv_packed(pa, (num_tiles - 1) % kStages);
      if (wg == 0) pass_turn();
      wgmma_wait<0>();
      wgmma_hold(o);
      release(num_tiles - 1);
    }
  } else {
    for (int tile = 0; tile < num_tiles; ++tile) {
      const int stage = tile % kStages;
      landed_then_prefetch(std::integral_constant<int, kStages - 2>(), tile + kStages - 1, tile);

      float s[kS];
      issue_qk(s, stage);
      wgmma_wait<0>();
      wgmma_hold(s);
      float corr[2];
      bool grew = false, rescaled = false;
      mask_and_softmax(s, tile, corr, &grew, &rescaled, stage);
      if constexpr (kWithV) {
        issue_pv(s, corr, grew, rescaled, stage);
        wgmma_wait<0>();
        wgmma_hold(o);
      }
      release(tile);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  if constexpr (kDirect) {
    // The merge of one split (window_forward.cu window_merge_kernel), done here: lse from (m, l);
    // the output o / l rounded to T once (the merge's l (o / l)_T / l rounds back to the same T);
    // a row that saw a NaN or +inf logit all NaN. Padding rows write nothing.
    T* out_rows = static_cast<T*>(p.rows_out);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r ? rl_hi : rl_lo;
      if (row >= rows_here) continue;
      const int gr = row0 + row;
      const int qh = hk * p.group + gr / a.w, t = gr % a.w;
      const float m = m_run[r], l = l_run[r];
      const bool nan_row = isnan(l) || isnan(m) || m == INFINITY;
      if (t4 == 0 && p.rows_lse != nullptr)  // fmaf as the merge's
        p.rows_lse[static_cast<int64_t>(qh) * a.w + t] = nan_row ? CUDART_NAN_F
                                                         : m == -INFINITY
                                                             ? -INFINITY
                                                             : fmaf(m, sc, log2f(l)) * kLn2;
      const float inv = l == 0.f ? 0.f : 1.f / l;
      // o / l rounded to T; + 0 turns a -0 into +0, as the merge's fmaf(l, x, 0) does.
      auto rounded = [](float v) {
        return ElemTraits<T>::to_float(ElemTraits<T>::from_float(v)) + 0.f;
      };
      T* dst = out_rows + (static_cast<int64_t>(t) * a.num_q_heads + qh) * D;
#pragma unroll
      for (int i = 2 * r; i < D / 2; i += 4) {  // the accumulators of this row: (i >> 1) & 1 == r
        const int col = (i >> 2) * 8 + 2 * t4;
        *reinterpret_cast<uint32_t*>(dst + col) =
            nan_row ? ElemTraits<T>::pack(CUDART_NAN_F, CUDART_NAN_F)
                    : ElemTraits<T>::pack(rounded(o[i] * inv), rounded(o[i + 1] * inv));
      }
    }
    return;
  }
  // This split's partial of the thread's two rows (window_forward.cu's layout, kRows = R).
  const int64_t part = ((static_cast<int64_t>(hk) * p.row_blocks + rb) * p.splits + split) * R;
  if (t4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r ? rl_hi : rl_lo;
      const int idx = top.idx[r] >= 0 ? static_cast<int>(key_begin) + top.idx[r] : -1;
      *reinterpret_cast<float4*>(p.part_ml + (part + row) * 4) =
          make_float4(m_run[r], l_run[r], top.m_top[r], __int_as_float(idx));
    }
  }
  if constexpr (kWithV) {
    const float inv[2] = {l_run[0] == 0.f ? 0.f : 1.f / l_run[0],  // NaN stays NaN
                          l_run[1] == 0.f ? 0.f : 1.f / l_run[1]};
    T* po = static_cast<T*>(p.part_o);
#pragma unroll
    for (int i = 0; i < D / 2; i += 2) {
      const int r = (i >> 1) & 1;
      const int row = r ? rl_hi : rl_lo;
      const int col = (i >> 2) * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(po + (part + row) * D + col) =
          ElemTraits<T>::pack(o[i] * inv[r], o[i + 1] * inv[r]);
    }
  }
#else
  wgmma_unavailable();
#endif
}

// Writes 1 when this translation unit was compiled with wgmma for the running device.
__global__ void wgmma_probe_kernel(int* out) {
#if defined(KVEVICT_HAS_WGMMA)
  *out = 1;
#else
  *out = 0;
#endif
}

template <class Tr, bool kWithV, bool kTop, bool kDirect = false, bool kTma = false,
          bool kTmaInline = false, int kOverlap = 0>
cudaError_t launch_config(const ForwardParams& p, cudaStream_t stream,
                          const KvTensorMaps& maps = KvTensorMaps{}) {
  constexpr size_t smem = wg_forward_smem<Tr, kWithV, kTma>(wg_forward_stages<Tr, kWithV, kTma>());
  auto kernel = window_forward_wgmma_kernel<Tr, kWithV, kTop, kDirect, kTma, kTmaInline, kOverlap>;
  cudaError_t err = set_kernel_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.a.num_kv_heads, p.row_blocks, p.splits);
  kernel<<<grid, Tr::kThreads + (kTma && !kTmaInline ? 32 : 0), smem, stream>>>(p, maps);
  return cudaGetLastError();
}

// cuTensorMapEncodeTiled from the driver (no link to libcuda); null where the driver lacks it.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiledFn{nullptr};
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// The K and V maps of the layer in p ([Hkv][n][d]: rows of kv_row_stride elements, heads of
// kv_head_stride; keys at or past n read as zeros), boxes of 64 columns x TK keys, 128-byte
// swizzle. False where the driver or the strides do not allow one (the caller then copies with
// cp.async).
template <class Tr>
bool make_kv_maps(const ForwardParams& p, KvTensorMaps* maps) {
  using T = typename Tr::T;
  const WindowArgs& a = p.a;
  const EncodeTiledFn encode = encode_tiled();
  const uint64_t row_bytes = static_cast<uint64_t>(a.kv_row_stride) * sizeof(T);
  const uint64_t head_bytes = static_cast<uint64_t>(a.kv_head_stride) * sizeof(T);
  if (encode == nullptr || row_bytes % 16 != 0 || head_bytes % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.k) % 16 != 0 || reinterpret_cast<uintptr_t>(a.v) % 16 != 0 ||
      a.n > (int64_t{1} << 31) - 1)
    return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(Tr::kD), static_cast<cuuint64_t>(a.n),
                              static_cast<cuuint64_t>(a.num_kv_heads)};
  const cuuint64_t strides[2] = {row_bytes, head_bytes};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(Tr::kTileKeys), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUtensorMapDataType type = std::is_same<T, __half>::value
                                       ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  for (int which = 0; which < 2; ++which) {
    if (encode(which == 0 ? &maps->k : &maps->v, type, 3, const_cast<void*>(which == 0 ? a.k : a.v),
               dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  return true;
}

std::atomic<bool> g_wgmma_enabled{true};
std::atomic<bool> g_tma{true};       // 2026-12-06 (e), H100: +16-19% over the plain loads
std::atomic<bool> g_tma_wide{true};  // 2026-12-06 (e), H100: +8-15% over the 64-key TMA
std::atomic<int> g_wide_loop{
    1};  // set_window_wide_loop: the overlapped loop (H100, 2026-12-06 (f))
std::atomic<bool> g_split_overlap{false};  // set_window_split_overlap

// The kernel of one (element type, head dim, rows) for what the launch computes: lse only, the
// outputs (as final rows with one split: the TMA forwards where the switches allow), the outputs
// with top keys.
template <class Tr>
cudaError_t launch_variant(const ForwardParams& p, cudaStream_t stream) {
  const bool with_v = p.part_o != nullptr, top = with_v && p.top != nullptr;
  const bool direct = with_v && !top && p.rows_out != nullptr && p.splits == 1;
  KvTensorMaps maps{};
  if constexpr (Tr::kWG == 2) {  // 128-key tiles need the one-block-a-SM shared memory
    using Wide = WgWindowTraits<typename Tr::T, Tr::kD, 2, 128>;
    if (direct && g_tma_wide.load(std::memory_order_relaxed) && make_kv_maps<Wide>(p, &maps))
      switch (g_wide_loop.load(std::memory_order_relaxed)) {
        case 1: return launch_config<Wide, true, false, true, true, true, 1>(p, stream, maps);
        case 2: return launch_config<Wide, true, false, true, true, true, 2>(p, stream, maps);
        default: return launch_config<Wide, true, false, true, true, true>(p, stream, maps);
      }
  }
  if (direct && g_tma.load(std::memory_order_relaxed) && make_kv_maps<Tr>(p, &maps))
    return launch_config<Tr, true, false, true, true>(p, stream, maps);
  if (direct) return launch_config<Tr, true, false, true>(p, stream);
  if (with_v && g_split_overlap.load(std::memory_order_relaxed))
    return top ? launch_config<Tr, true, true, false, false, false, 1>(p, stream)
               : launch_config<Tr, true, false, false, false, false, 1>(p, stream);
  return top      ? launch_config<Tr, true, true>(p, stream)
         : with_v ? launch_config<Tr, true, false>(p, stream)
                  : launch_config<Tr, false, false>(p, stream);
}

}  // namespace

bool window_wgmma_enabled() {
  return g_wgmma_enabled.load(std::memory_order_relaxed);
}

bool wgmma_kernels_available() {
  static const bool available = [] {
    int* d = nullptr;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
    int h = 0;
    wgmma_probe_kernel<<<1, 1>>>(d);
    const bool ok = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    return ok && h == 1;
  }();
  return available;
}

bool wgmma_rows_d256_enabled() {
  return g_wgmma_enabled.load(std::memory_order_relaxed) &&
         g_tma_wide.load(std::memory_order_relaxed) && wgmma_kernels_available();
}

cudaError_t launch_rows_wgmma_d256(const ForwardParams& p, cudaStream_t stream) {
  if (p.a.head_dim != 256 || p.splits != 1 || p.rows_out == nullptr || p.a.v == nullptr ||
      !wgmma_rows_d256_enabled())
    return cudaErrorNotSupported;
  return with_elem(p.a.elem, [&](auto t) {
    using Tr = WgWindowTraits<typename decltype(t)::type, 256, 2, 64>;
    KvTensorMaps maps{};
    if (!make_kv_maps<Tr>(p, &maps)) return cudaErrorNotSupported;
    return launch_config<Tr, true, false, true, true, true>(p, stream, maps);
  });
}

bool wgmma_forward_supported(const WindowArgs& a, int rows_per_block) {
  return (rows_per_block == 64 || rows_per_block == 128) &&
         (a.head_dim == 64 || a.head_dim == 128) && wgmma_kernels_available();
}

cudaError_t launch_forward_wgmma(const ForwardParams& p, int rows_per_block, cudaStream_t stream) {
  if (!wgmma_forward_supported(p.a, rows_per_block)) return cudaErrorNotSupported;
  return with_elem(p.a.elem, [&](auto t) {
    using T = typename decltype(t)::type;
    return with_int<64, 128>(p.a.head_dim, [&](auto d) {
      return with_int<64, 128>(rows_per_block, [&](auto r) {
        return launch_variant<WgWindowTraits<T, decltype(d)::value, decltype(r)::value / 64>>(
            p, stream);
      });
    });
  });
}

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda {
void set_window_wgmma(bool enabled) {
  detail::g_wgmma_enabled.store(enabled);
}
void set_window_tma(bool enabled) {
  detail::g_tma.store(enabled);
}
void set_window_tma_wide(bool enabled) {
  detail::g_tma_wide.store(enabled);
}
void set_window_wide_loop(int mode) {
  KVEVICT_CHECK(mode >= 0 && mode <= 2, "wide loop ", mode, " is invalid; expected 0, 1 or 2");
  detail::g_wide_loop.store(mode);
}
void set_window_split_overlap(bool enabled) {
  detail::g_split_overlap.store(enabled);
}
bool window_wgmma_available() {
  return detail::wgmma_kernels_available();
}
}  // namespace kvevict::cuda
