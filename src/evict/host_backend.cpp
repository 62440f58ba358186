// The host backends' shared operations (host_backend.h).
#include "evict/host_backend.h"

#include <vector>

#include "core/parallel_if_large.h"
#include "evict/host_memory.h"
#include "kvevict/error.h"

namespace kvevict::detail {

std::shared_ptr<void> HostBackend::allocate(size_t bytes) {
  return host_allocate(bytes);
}

void HostBackend::plan_segments(const Selection& selection, int64_t slack, const KVLayerView& out) {
  KVEVICT_CHECK(out.num_kv_heads == selection.num_kv_heads && out.has_host_table(),
                "plan_segments: the output cache has ", out.num_kv_heads, " heads",
                out.has_host_table() ? "" : " and no host table", "; expected ",
                selection.num_kv_heads, " heads with a writable host table");
  const std::vector<int64_t> off = cache_plan_offsets(selection, slack);
  // The host table belongs to the caller's cache; the view hands it out read-only to readers.
  auto* offsets = const_cast<int64_t*>(out.offsets);
  for (int h = 0; h <= selection.num_kv_heads; ++h) offsets[h] = off[h];
  for (int h = 0; h < selection.num_kv_heads; ++h) out.lens[h] = 0;
}

void HostBackend::compact(const KVLayerView& in, const Selection& selection,
                          const KVLayerView& out) {
  cache_compact(in, selection, out);
}

void HostBackend::cut_segments(const KVLayerView& cache, const SegmentCut& cut) {
  cache.validate("decode cache");
  KVEVICT_CHECK(cache.device == Device::kCpu, "the ", name(), " backend cuts host caches only");
  KVEVICT_CHECK(cache.score_acc != nullptr, "decode cache has no score accumulator");
  for (int32_t h : cut.heads)
    KVEVICT_CHECK(h >= 0 && h < cache.num_kv_heads && cache.lens[h] > cut.keep, "cut of head ", h,
                  " to ", cut.keep, " rows; expected a head 0..", cache.num_kv_heads - 1,
                  " with more rows than that");
  const int64_t m = static_cast<int64_t>(cut.heads.size());
  parallel_for_if_large(m, cache.total_len() * 8, [&](int64_t i) {
    const int h = cut.heads[i];
    std::vector<int32_t> keep;
    keep.reserve(cut.keep);
    select_head(cache.score_acc + cache.offsets[h], nullptr, cache.lens[h], cut.keep, cut.sink,
                cut.recent, keep);
    cache_compact_head_inplace(cache, h, keep.data(), static_cast<int64_t>(keep.size()));
  });
}

}  // namespace kvevict::detail
