// One layer's KV cache on the GPU (internal to the GPU runtime), in the segment layout of
// kvevict::KVLayerView: K, V [rows, d] bf16, pos [rows] i32 and the decode accumulators [rows]
// f32, split into segments s = row * Hkv + g (a batch row's KV heads, sequence-major) of
// capacity off[s + 1] - off[s]; len[s] rows of a segment are in use.
//
// The segment table lives on the device (what every kernel reads, and what a compaction from a
// device-resident selection writes) with a host mirror. The mirror is exact except between an
// eviction whose counts only the device knows and the session's next synchronization point
// (`host_valid`); sync_host() refreshes it.
//
// Sliding-window layers (gemma3) hold the whole prompt during the prefill (the window kernel
// masks by the window) and are then cut to a ring of their last `window` rows: decode writes
// position p to row p % window of its segment, so the ring always holds exactly the keys the
// next query may see.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/device_buffer.h"
#include "kvevict/cache.h"

namespace kvevict::gpu {

struct LayerCache {
  cuda::DeviceBuffer k, v, pos, acc;  // [rows, d] bf16, [rows, d] bf16, [rows] i32, [rows] f32
  cuda::DeviceBuffer off, len;        // device [S + 1] i64, [S] i32
  std::vector<int64_t> off_h;         // [S + 1] host mirror
  std::vector<int64_t> len_h;         // [S] host mirror
  int64_t rows = 0;                   // allocated rows (off_h.back() when the mirror is valid)
  int segments = 0;                   // S
  int head_dim = 0;
  bool host_valid = true;
  int64_t ring = 0;  // a sliding-window layer after the prefill: ring of this many rows

  // A layer of S segments with the given capacities (host-known); lengths 0, accumulators 0.
  static LayerCache with_capacities(const std::vector<int64_t>& cap, int d, cudaStream_t stream);
  // `rows` rows and S segments whose table a compaction will write on the device (mirror invalid).
  static LayerCache for_device_table(int64_t rows, int S, int d, cudaStream_t stream);

  int64_t cap(int s) const { return off_h[s + 1] - off_h[s]; }
  // The view of segments [first, first + count) (count = Hkv: one batch row), with both tables.
  // Its host table pointers are null while the mirror is invalid.
  KVLayerView view(int first, int count);
  KVLayerView view() { return view(0, segments); }
  // Uploads the host mirror to the device table (after the host changed lengths).
  void upload_table(cudaStream_t stream);
  // Downloads the device table into the mirror; the caller synchronizes the stream first.
  void sync_host();
  int64_t kv_bytes() const { return rows * head_dim * 2 * 2; }  // K and V, bf16
};

// Every row's cache of a layer (rows[r] holds Hkv segments) in one layer of rows.size() * Hkv
// segments, copied in row order; host mirrors must be valid.
LayerCache assemble_rows(const std::vector<const LayerCache*>& rows, cudaStream_t stream);

}  // namespace kvevict::gpu
