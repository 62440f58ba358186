// Tile configuration shared by the window forward and the streaming scoring pass.
//
// One thread block owns up to kRows = 16 * kSlabs query rows of ONE KV head (all G * w window
// queries of the group when they fit), so K and V stream from memory once per KV head instead of
// once per query head. Warps split the block two ways: kSlabs row slabs of 16 (the mma M size)
// times kKeyGroups groups of keys inside each key tile. Few rows (w = 8, G = 4: 2 slabs) leave the
// spare warps to split keys, so every configuration runs 4-8 warps.
#pragma once

namespace kvevict::cuda::detail {

template <class T_, int D_, int Slabs_>
struct WindowTraits {
  using T = T_;
  static constexpr int kD = D_;
  static constexpr int kSlabs = Slabs_;
  static constexpr int kRows = 16 * kSlabs;
  // 64 keys a tile keeps three stages of K and V (3 x 2 x 64 x 136 x 2 B = 102 KB at d = 128)
  // small enough for two blocks per SM; d = 256 halves it to stay inside 227 KB with the query
  // tiles of the scoring pass. Each kernel picks its stage count (forward_stages, pass_stages).
  static constexpr int kTileKeys = kD == 256 ? 32 : 64;
  static constexpr int kMaxWarps = 8;
  static constexpr int kKeyGroupsWanted = kMaxWarps / kSlabs;
  static constexpr int kKeyGroups =
      kKeyGroupsWanted < kTileKeys / 16 ? kKeyGroupsWanted : kTileKeys / 16;
  static constexpr int kWarps = kSlabs * kKeyGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kGroupKeys = kTileKeys / kKeyGroups;  // keys of a tile one warp handles
  // Rows padded by 16 bytes: consecutive rows then start 4 banks apart, so the 8 rows an mma
  // fragment or an ldmatrix phase touches hit 32 different banks.
  static constexpr int kStride = kD + 8;
  static constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks

  static_assert(kD == 64 || kD == 128 || kD == 256, "head dim must be 64, 128 or 256");
  static_assert(kSlabs == 1 || kSlabs == 2 || kSlabs == 4 || kSlabs == 8, "slabs: 1, 2, 4 or 8");
  static_assert(kD != 256 || kSlabs <= 4, "d = 256 runs at most 64 rows a block (shared memory)");
  static_assert(kGroupKeys % 16 == 0, "a warp's keys must fill whole k16 steps of P V");
  static_assert(kWarps >= 2 && kWarps <= kMaxWarps, "4-8 warps a block");
  static_assert(kThreads % kTileKeys == 0 || kTileKeys % kThreads == 0, "thread/key split");
};

// The wgmma kernels' tiles (window_forward_wgmma.cu, score_pass_wgmma.cu): one warpgroup of 4 warps
// per 64 query rows, every key of a key tile (64 keys; 128 for the wide TMA forward, whose Q K^T
// m64n128 chains read 6 KB of shared memory per 64 cycles of tensor work where m64n64 reads 4 KB
// per 32, the SM's 128 bytes a cycle); K/V tiles 128-byte swizzled (wgmma.cuh).
template <class T_, int D_, int WG_, int TK_ = 64>
struct WgWindowTraits {
  using T = T_;
  static constexpr int kD = D_;
  static constexpr int kWG = WG_;  // warpgroups
  static constexpr int kRows = 64 * WG_;
  static constexpr int kThreads = 128 * WG_;
  static constexpr int kWarps = 4 * WG_;
  static constexpr int kTileKeys = TK_;
  // One warpgroup: two blocks per SM (8 warps); two warpgroups: one block.
  static constexpr int kBlocksPerSm = WG_ == 1 ? 2 : 1;
  static_assert(kD == 64 || kD == 128 || (kD == 256 && WG_ == 2 && TK_ == 64),
                "wgmma window kernels: head dim 64 or 128; 256 with two warpgroups, 64-key tiles");
  static_assert(kWG == 1 || kWG == 2, "one or two warpgroups");
  static_assert(TK_ == 64 || (TK_ == 128 && WG_ == 2), "64-key tiles, or 128 with one block a SM");
};

// The most stages (2 to max_stages) whose shared memory bytes(stages) lets `blocks` blocks share
// one SM (228 KB, 1 KB reserved per block).
template <class Bytes>
constexpr int stages_that_fit(int blocks, Bytes bytes, int max_stages = 4) {
  for (int s = max_stages; s > 2; --s)
    if (blocks * (bytes(s) + 1024) <= 228 * 1024) return s;
  return 2;
}

// The largest slab count a head dim allows (see the d = 256 static_assert above).
constexpr int max_slabs(int d) {
  return d == 256 ? 4 : 8;
}

}  // namespace kvevict::cuda::detail
