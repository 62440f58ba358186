// What the two host backends (cpu, reference) share: host memory, the packed segment table,
// compaction and the decode-time cut. They differ only in how they score, select and attend.
#pragma once

#include <memory>

#include "kvevict/backend.h"

namespace kvevict::detail {

class HostBackend : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::shared_ptr<void> allocate(size_t bytes) override;
  void plan_segments(const Selection& selection, int64_t slack, const KVLayerView& out) override;
  void compact(const KVLayerView& in, const Selection& selection, const KVLayerView& out) override;
  // Host caches keep every head's rows in position order (prefill compaction keeps order,
  // appends grow positions, in-place cuts keep order), so the `sink` lowest positions are the
  // first rows and the `recent` highest the last: the cut is select_head + in-place compaction.
  void cut_segments(const KVLayerView& cache, const SegmentCut& cut) override;
};

}  // namespace kvevict::detail
