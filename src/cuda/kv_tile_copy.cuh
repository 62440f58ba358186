// The cp.async schedule of the window kernels' key tiles: thread tid copies the 16-byte chunk
// tid % kChunksPerRow of rows tid / kChunksPerRow + i * kRowStep of every [kTileKeys, d] tile of
// K (and V). Source and destination offsets are set up once per block; per tile only the tile's
// first row moves, so a tile costs a few integer instructions per copy instead of the 64-bit
// index arithmetic of a general gather (v7: the copies' address math was a fifth of the forward's
// instructions at w = 8).
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/wgmma.cuh"

namespace kvevict::cuda::detail {

template <class Tr>
struct KvTileCopy {
  using T = typename Tr::T;
  static constexpr int kChunks = Tr::kChunksPerRow;
  static constexpr int kRowStep = Tr::kThreads / kChunks;  // rows one pass of the block covers
  static constexpr int kPasses = Tr::kTileKeys / kRowStep;
  static_assert(Tr::kThreads % kChunks == 0 && Tr::kTileKeys % kRowStep == 0,
                "a tile must be whole passes of the block");

  const T* k = nullptr;    // this thread's chunk of the block's first key row (always in range:
  const T* v = nullptr;    // rows past the end copy 0 bytes from there)
  int64_t row_stride = 0;  // elements between key rows
  int row0 = 0;            // first tile row of this thread
  int smem_off = 0;        // element offset of this thread's chunk in a tile

  // k_head / v_head: row 0 of the block's first key (key_begin) of its KV head.
  __device__ __forceinline__ KvTileCopy(const T* k_head, const T* v_head, int64_t stride, int tid)
      : row_stride(stride) {
    row0 = tid / kChunks;
    const int ch = tid % kChunks;
    k = k_head + ch * 8;
    v = v_head == nullptr ? nullptr : v_head + ch * 8;
    smem_off = row0 * Tr::kStride + ch * 8;
  }

  // Copies tile `tile` (keys tile * kTileKeys .. relative to the block's first key) into the
  // stage buffers k_s / v_s ([kTileKeys][kStride]); rows at or past `keys` become zeros.
  template <bool kWithV>
  __device__ __forceinline__ void load(T* k_s, T* v_s, int tile, int keys) const {
    const int first = tile * Tr::kTileKeys + row0;
    const int64_t base = static_cast<int64_t>(first) * row_stride;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool valid = first + i * kRowStep < keys;
      const int64_t off = valid ? base + static_cast<int64_t>(i * kRowStep) * row_stride : 0;
      cp_async_16(k_s + smem_off + i * kRowStep * Tr::kStride, k + off, valid ? 16 : 0);
      if constexpr (kWithV)
        cp_async_16(v_s + smem_off + i * kRowStep * Tr::kStride, v + off, valid ? 16 : 0);
    }
  }
};

// The same schedule into 128-byte-swizzled [TileKeys][D] tiles (wgmma operands, wgmma.cuh): the
// block's threads split each tile into 16-byte chunks, thread tid taking chunk tid % (D / 8) of
// rows tid / (D / 8) + i * kRowStep. kRowStep is a multiple of 8, so a thread's rows share their
// swizzle phase and its destination offsets differ only by whole rows.
template <class T, int D, int Threads, int TileKeys>
struct SwizzledTileCopy {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowStep = Threads / kChunks;
  static constexpr int kPasses = TileKeys / kRowStep;
  static_assert(Threads % kChunks == 0 && TileKeys % kRowStep == 0 && kRowStep % 8 == 0,
                "a tile must be whole passes of the block, 8-row aligned");

  const T* k = nullptr;
  const T* v = nullptr;
  int64_t row_stride = 0;
  int row0 = 0;
  int smem_off = 0;  // element offset of this thread's first chunk in a tile

  __device__ __forceinline__ SwizzledTileCopy(const T* k_head, const T* v_head, int64_t stride,
                                              int tid)
      : row_stride(stride) {
    row0 = tid / kChunks;
    const int ch = tid % kChunks;
    k = k_head + ch * 8;
    v = v_head == nullptr ? nullptr : v_head + ch * 8;
    smem_off = sw128<TileKeys>(row0, ch * 8);
  }

  // Tile `tile` into k_s / v_s ([TileKeys][D], swizzled); rows at or past `keys` become zeros.
  template <bool kWithV>
  __device__ __forceinline__ void load(T* k_s, T* v_s, int tile, int keys) const {
    const int first = tile * TileKeys + row0;
    const int64_t base = static_cast<int64_t>(first) * row_stride;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool valid = first + i * kRowStep < keys;
      const int64_t off = valid ? base + static_cast<int64_t>(i * kRowStep) * row_stride : 0;
      cp_async_16(k_s + smem_off + i * kRowStep * 64, k + off, valid ? 16 : 0);
      if constexpr (kWithV)
        cp_async_16(v_s + smem_off + i * kRowStep * 64, v + off, valid ? 16 : 0);
    }
  }
};

// One tensor's full tiles (every row in range) walked at a fixed step of tiles into a ring of
// Stages swizzled [TileKeys][D] stages, with SwizzledTileCopy's schedule: the source and
// destination addresses move by one add a tile instead of being recomputed with bounds checks
// (those were a fifth of the key-major pass's instructions, ncu, session 5).
template <class T, int D, int Threads, int TileKeys, int Stages>
struct SwizzledTileStream {
  static constexpr int kChunks = D / 8;
  static constexpr int kRowStep = Threads / kChunks;
  static constexpr int kPasses = TileKeys / kRowStep;
  static constexpr uint32_t kStageBytes = sizeof(T) * TileKeys * D;
  static_assert(Threads % kChunks == 0 && TileKeys % kRowStep == 0 && kRowStep % 8 == 0,
                "a tile must be whole passes of the threads, 8-row aligned");

  const char* src;     // this thread's first chunk of the next tile to copy
  int64_t row_bytes;   // between this thread's rows of a tile
  int64_t tile_bytes;  // from one tile of the walk to the next
  uint32_t dst0;       // shared address of this thread's first chunk in stage 0
  int stage;           // the next tile's stage

  // first_row: row 0 of the first tile of the walk; ring: stage 0; the walk starts in `stage0`.
  __device__ __forceinline__ SwizzledTileStream(const T* first_row, int64_t row_stride,
                                                int tile_step, T* ring, int stage0, int tid)
      : stage(stage0) {
    const int row0 = tid / kChunks, ch = tid % kChunks;
    src = reinterpret_cast<const char*>(first_row + row0 * row_stride + ch * 8);
    row_bytes = static_cast<int64_t>(kRowStep) * row_stride * sizeof(T);
    tile_bytes = static_cast<int64_t>(tile_step) * TileKeys * row_stride * sizeof(T);
    dst0 = static_cast<uint32_t>(__cvta_generic_to_shared(ring + sw128<TileKeys>(row0, ch * 8)));
  }

  // Copies the walk's next tile into its stage.
  __device__ __forceinline__ void load_next() {
    const uint32_t dst = dst0 + stage * kStageBytes;
    const char* s = src;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      cp_async_16_to(dst + i * kRowStep * 128, s);
      s += row_bytes;
    }
    src += tile_bytes;
    stage = stage + 1 == Stages ? 0 : stage + 1;
  }
};

}  // namespace kvevict::cuda::detail
