// The KV cache of one layer after (or before) eviction: per-head variable-length row segments.
//
// Layout (SPEC section 4). Every per-row array (k, v, pos, score_acc) is indexed by one row index.
// Head h owns the rows [offsets[h], offsets[h] + lens[h]); rows up to offsets[h+1] are spare
// capacity for decode-time appends. This one layout covers:
//   - uniform budgets:        offsets[h] = h * n_keep, lens[h] = n_keep  ==  plain [Hkv, n_keep,
//   d];
//   - flattened varlen adakv: offsets = prefix sums of the kept counts, lens = counts;
//   - either with decode slack: offsets spaced by len + slack.
// Compaction copies the kept rows into a new, smaller cache (never a mask): memory shrinks.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/dtype.h"
#include "kvevict/select.h"
#include "kvevict/tensor.h"

namespace kvevict {

struct KVLayerView {
  DType dtype = DType::kF32;  // of k and v: f32, f16 or bf16
  Device device = Device::kCpu;
  int num_kv_heads = 0;              // Hkv
  int head_dim = 0;                  // d
  void* k = nullptr;                 // [rows, d] keys after RoPE
  void* v = nullptr;                 // [rows, d] values
  int32_t* pos = nullptr;            // [rows] original position of every row
  float* score_acc = nullptr;        // [rows] decode-time running score per row; may be null
  const int64_t* offsets = nullptr;  // host [Hkv + 1] segment starts; offsets[Hkv] = rows
  int64_t* lens = nullptr;           // host [Hkv] rows in use per head
  // Device caches may keep their segment table in device memory too (the cuda backend reads it
  // from there and writes it there, so no table crosses to the host between layers). While only
  // the device table is current, the host arrays may be null and `rows` gives the allocation.
  int64_t* device_offsets = nullptr;  // device [Hkv + 1]
  int32_t* device_lens = nullptr;     // device [Hkv]
  int64_t rows = -1;                  // allocated rows when `offsets` is null

  int64_t capacity_rows() const { return offsets ? offsets[num_kv_heads] : (rows < 0 ? 0 : rows); }
  bool has_host_table() const { return offsets != nullptr && lens != nullptr; }
  bool has_device_table() const { return device_offsets != nullptr && device_lens != nullptr; }
  int64_t len(int h) const { return lens[h]; }
  int64_t total_len() const;
  // Bytes held by the allocation (capacity, not just the rows in use) for K and V.
  int64_t kv_bytes() const;
  // A [len_h, d] view of head h's keys / values.
  TensorView head_k(int h) const;
  TensorView head_v(int h) const;
  // A [Hkv, n, d] view when all heads have the same length n and equal segment spacing.
  bool is_uniform() const;
  TensorView uniform_k() const;
  TensorView uniform_v() const;
  void validate(const char* what) const;  // throws naming the inconsistency
};

// An owning host cache, for the CPU backend, tests and the CLI.
class HostKVCache {
 public:
  HostKVCache() = default;
  // Segments of the given capacities; lens start at 0.
  HostKVCache(DType dtype, int num_kv_heads, int head_dim, const std::vector<int64_t>& capacity,
              bool with_score_acc = false);
  // A full cache from [Hkv, n, d] keys/values (any float dtype, converted to `dtype`), positions
  // 0..n-1, with `slack` spare rows per head.
  static HostKVCache from_dense(const TensorView& k, const TensorView& v, DType dtype,
                                int64_t slack = 0, bool with_score_acc = false);
  KVLayerView view();
  const KVLayerView view() const;
  int64_t kv_bytes() const { return static_cast<int64_t>(k_.size() + v_.size()); }

 private:
  DType dtype_ = DType::kF32;
  int num_kv_heads_ = 0;
  int head_dim_ = 0;
  std::vector<uint8_t> k_, v_;    // [rows, d] in dtype_
  std::vector<int32_t> pos_;      // [rows]
  std::vector<float> score_acc_;  // [rows] or empty
  std::vector<int64_t> offsets_;  // [Hkv + 1]
  std::vector<int64_t> lens_;     // [Hkv]
};

// Segment starts for a cache that will hold `selection` with `slack` spare rows per head:
// offsets[h+1] = offsets[h] + count(h) + slack. [Hkv + 1].
std::vector<int64_t> cache_plan_offsets(const Selection& selection, int64_t slack = 0);

// A host cache shaped for `selection` (+ slack per head), lens 0, ready for cache_compact.
HostKVCache cache_allocate_for(const KVLayerView& like, const Selection& selection,
                               int64_t slack = 0);

// Out-of-place compaction: copies the kept rows (k, v, pos, and score_acc when both have it) of
// every head of `in` into `out`'s segments and sets out.lens. Throws on mismatched dtype, heads,
// head dim, device, or a segment too small. Host memory.
void cache_compact(const KVLayerView& in, const Selection& selection, const KVLayerView& out);

// In-place compaction of one head: moves its kept rows (ascending `keep`, `count` of them) to
// the front of its segment and sets lens[h] = count. Safe because keep[i] >= i.
void cache_compact_head_inplace(const KVLayerView& cache, int h, const int32_t* keep,
                                int64_t count);

// Decode append: one new row per head. k_row, v_row: [Hkv, d] (f32, f16 or bf16; converted to
// the cache dtype); score_acc of the new rows starts at 0. Throws when a segment is full.
void cache_append(const KVLayerView& cache, const TensorView& k_row, const TensorView& v_row,
                  int32_t pos);

}  // namespace kvevict
