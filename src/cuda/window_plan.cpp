#include "cuda/window_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/window_traits.cuh"
#include "kvevict/error.h"

namespace kvevict::cuda::detail {

namespace {

// set_window_min_split_tiles (kernel_variants.h): the fewest key tiles a split gets.
std::atomic<int> g_min_split_tiles{4};
// set_window_forward_blocks_per_sm (kernel_variants.h): 0, or the forward's blocks a SM forced.
std::atomic<int> g_forward_blocks_per_sm{0};
// set_window_forward_row_blocks (kernel_variants.h): 0, or 64 (one-warpgroup blocks forced).
std::atomic<int> g_forward_row_blocks{0};

// An attribute of the current device, read once per device (fallback where it cannot be read).
int cached_device_attribute(cudaDeviceAttr attr, int fallback) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> cached;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return fallback;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev, static_cast<int>(attr));
  const auto it = cached.find(key);
  if (it != cached.end()) return it->second;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, dev) != cudaSuccess || value <= 0) {
    (void)cudaGetLastError();
    value = fallback;
  }
  cached[key] = value;
  return value;
}

}  // namespace

int current_sm_count() {
  return cached_device_attribute(cudaDevAttrMultiProcessorCount, 132);
}

int forward_blocks_per_sm_forced() {
  return g_forward_blocks_per_sm.load(std::memory_order_relaxed);
}

int forward_row_blocks_forced() {
  return g_forward_row_blocks.load(std::memory_order_relaxed);
}

int current_l2_bytes() {
  return cached_device_attribute(cudaDevAttrL2CacheSize, 0);
}

WindowPlan make_window_plan(int num_kv_heads, int group, int w, int64_t n, int head_dim,
                            int sm_count, int blocks_per_sm, int slab_cap_wanted) {
  WindowPlan plan;
  plan.rows = group * w;
  int slab_cap = max_slabs(head_dim);
  if (slab_cap_wanted > 0 && slab_cap_wanted < slab_cap) slab_cap = slab_cap_wanted;
  const int need = (plan.rows + 15) / 16;
  plan.slabs = 1;
  while (plan.slabs < need && plan.slabs < slab_cap) plan.slabs *= 2;
  const int block_rows = 16 * plan.slabs;
  plan.row_blocks = (plan.rows + block_rows - 1) / block_rows;
  plan.tile_keys = head_dim == 256 ? 32 : 64;
  // Split keys so that one wave fills the GPU without spilling into a second one: 17 splits of
  // 16 (KV head, row block) pairs made 272 blocks for 264 slots, and the 8 blocks of the second
  // wave nearly doubled the w = 32 scoring pass (ncu, v3: 1.03 waves). Fewer than 4 tiles per
  // split would make the merge of partials cost about as much as the work it merges.
  const int64_t target = static_cast<int64_t>(sm_count) * blocks_per_sm;
  const int64_t base = static_cast<int64_t>(num_kv_heads) * plan.row_blocks;
  int64_t splits = std::max<int64_t>(1, target / base);
  const int64_t min_keys = g_min_split_tiles.load(std::memory_order_relaxed) * plan.tile_keys;
  int64_t kps = (n + splits - 1) / splits;
  kps = std::max<int64_t>(kps, min_keys);
  kps = (kps + plan.tile_keys - 1) / plan.tile_keys * plan.tile_keys;
  plan.keys_per_split = std::max<int64_t>(kps, plan.tile_keys);
  plan.splits =
      static_cast<int>(std::max<int64_t>(1, (n + plan.keys_per_split - 1) / plan.keys_per_split));
  return plan;
}

}  // namespace kvevict::cuda::detail

namespace kvevict::cuda {
void set_window_min_split_tiles(int tiles) {
  detail::g_min_split_tiles.store(tiles < 1 ? 1 : tiles > 8 ? 8 : tiles);
}
void set_window_forward_blocks_per_sm(int blocks) {
  detail::g_forward_blocks_per_sm.store(blocks < 0 ? 0 : blocks > 2 ? 2 : blocks);
}
void set_window_forward_row_blocks(int rows) {
  KVEVICT_CHECK(rows == 0 || rows == 64, "forward row blocks ", rows,
                " are invalid; expected 0 (the plan's rule) or 64");
  detail::g_forward_row_blocks.store(rows);
}
}  // namespace kvevict::cuda
