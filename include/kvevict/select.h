// Token selection (SPEC section 3): which rows of every KV head survive eviction.
//
// Scores arrive in the segment layout of KVLayerView: head h owns `lens[h]` scores starting at
// `starts[h]`. The same code therefore serves prefill ([Hkv, n] = equal segments, starts[h] = h*n)
// and decode (per-head lengths, starts = the cache's offsets).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/method.h"
#include "kvevict/tensor.h"

namespace kvevict {

// The kept rows of every KV head. Head h keeps index[offsets[h] .. offsets[h+1]), row indices
// within its own segment (0 .. len_h - 1), strictly ascending (= sorted by position).
//
// A device backend can leave the selection where it computed it (Residency::kDevice): then
// `device` holds the same two arrays in device memory and the host arrays may be empty (they are
// filled when the counts are known without a round trip, e.g. uniform budgets). `rows`, the
// layer's kept total, is always known on the host (Hkv * n_keep for every policy).
enum class Residency : uint8_t { kHost, kDevice };

struct Selection {
  int num_kv_heads = 0;
  std::vector<int64_t> offsets;  // [Hkv + 1] prefix sums of the kept counts (host)
  std::vector<int32_t> index;    // [offsets[Hkv]] kept row indices within each head's segment
  std::string warning;           // non-empty when the budget fell below the protected tokens
  struct DeviceArrays {
    std::shared_ptr<void> storage;     // owns both arrays (freed in stream order)
    const int64_t* offsets = nullptr;  // [Hkv + 1] device
    const int32_t* index = nullptr;    // [rows] device
  } device;
  int64_t rows = -1;  // kept rows of all heads when only the device arrays are filled

  bool on_device() const { return device.offsets != nullptr; }
  bool has_host_offsets() const { return static_cast<int>(offsets.size()) == num_kv_heads + 1; }
  bool has_host_index() const {
    return has_host_offsets() && static_cast<int64_t>(index.size()) == offsets.back();
  }
  int64_t count(int h) const { return offsets[h + 1] - offsets[h]; }
  int64_t total() const { return has_host_offsets() ? offsets.back() : (rows < 0 ? 0 : rows); }
  const int32_t* head(int h) const { return index.data() + offsets[h]; }
  // Keeps every row of every head (budget 1.0, or a decode head still under budget).
  static Selection keep_all(int num_kv_heads, const int64_t* lens);
  void validate(const int64_t* lens) const;  // throws unless counts fit and indices ascend
};

// Per-head scores in the segment layout. Host memory (the CPU selection reads it directly).
struct SelectProblem {
  int num_kv_heads = 0;             // Hkv
  const float* scores = nullptr;    // [rows] higher = keep; head h at starts[h] .. + lens[h]
  const float* aux = nullptr;       // [rows] criticalkv stage-1 score (same layout), or null
  const int64_t* starts = nullptr;  // [Hkv] segment starts (a cache's offsets work)
  const int64_t* lens = nullptr;    // [Hkv] scores per head

  // Equal segments over [Hkv, n] f32 scores (+ optional aux of the same shape). `lens_storage`
  // and `starts_storage` are filled and must outlive the problem.
  static SelectProblem dense(const TensorView& scores, const TensorView& aux,
                             std::vector<int64_t>& starts_storage,
                             std::vector<int64_t>& lens_storage);
  void validate() const;
};

// Full selection with the SPEC policies: uniform or adakv, sinks and the window protected (they
// count inside the budget), criticalkv's two stages when `aux` is given. Per head the kept count
// is opt.budget.keep_count(len_h) (a count above len_h throws naming both). adakv needs equal
// head lengths. Ties break toward the lower position (then the lower head); deterministic.
Selection select(const SelectProblem& problem, const SelectOptions& opt);

// One head: appends to `out` the protected rows (first `sink`, last `window`) plus the top
// (n_keep - protected) of the rest by `scores` (ties toward the lower position), ascending.
// With `aux`, criticalkv's two stages: the top floor(B/2) by aux, then the rest by `scores`.
// Returns true when n_keep was below the protected count (then only those are kept).
bool select_head(const float* scores, const float* aux, int64_t len, int64_t n_keep, int sink,
                 int window, std::vector<int32_t>& out);

namespace ref {
// A brute-force sort-based selection (full stable sorts), the test oracle for select().
Selection select(const SelectProblem& problem, const SelectOptions& opt);
}  // namespace ref

}  // namespace kvevict
