// How the window kernels split one layer's work over blocks: rows of a KV head into row blocks of
// 16 * slabs, keys into splits. Host-only; shared by the launchers and the *_workspace_bytes()
// functions so both always agree on the partial-result sizes.
#pragma once

#include <cstdint>

namespace kvevict::cuda::detail {

struct WindowPlan {
  int slabs = 1;       // 16-row slabs per block: 1, 2, 4 or 8
  int rows = 0;        // G * w rows of one KV head
  int row_blocks = 1;  // ceil(rows / (16 * slabs))
  int splits = 1;      // key ranges per (KV head, row block)
  int64_t keys_per_split = 0;
  int tile_keys = 64;
};

// Multiprocessors of the current device (cached per device; 132 on an H200 SXM).
int current_sm_count();
// Bytes of the current device's L2 cache (cached per device; 0 where it cannot be read).
int current_l2_bytes();
// set_window_forward_blocks_per_sm (kernel_variants.h): 0 (the plan's own rule) or 1 / 2.
int forward_blocks_per_sm_forced();
// set_window_forward_row_blocks (kernel_variants.h): 0 (the plan's own rule) or 64.
int forward_row_blocks_forced();

// Picks slabs = the smallest power of two covering the rows (capped by the head dim), and splits
// keys so that one wave of `blocks_per_sm` blocks per SM covers the layer.
// slab_cap (0 = the head dim's limit) trades K/V re-reads for occupancy: the scoring pass keeps
// more state per row than the forward. The splits are whole tiles of at least the minimum length.
WindowPlan make_window_plan(int num_kv_heads, int group, int w, int64_t n, int head_dim,
                            int sm_count, int blocks_per_sm, int slab_cap = 0);

}  // namespace kvevict::cuda::detail
